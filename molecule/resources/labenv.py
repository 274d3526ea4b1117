"""Helpers for the testinfra tests of the environment roles' molecule scenarios (molecule/<role>/tests).

The scenarios run on the lab fleet (tests/lab): LAB_STATE_DIR (default tests/lab/state) holds its inventory and
its record (fleet.json, with the proxy's log). A job runs as `bash -c '. ~/.trainer/jobenv.sh; <cmd>'`.

A scenario's tests start with
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "resources"))
    import labenv
    CONVERGE = labenv.converge(__file__)
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import http.server
import json
import os
import pathlib
import re
import shlex
import subprocess
import threading

from testinfra.utils.ansible_runner import AnsibleRunner

REPO = pathlib.Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"
STATE = pathlib.Path(os.environ.get("LAB_STATE_DIR") or REPO / "tests" / "lab" / "state").resolve()
INVENTORY = STATE / "inventory.yml"
LOADER = "~/.trainer/jobenv.sh"
# The controller's address for stand-in servers: the lab instances reach it, and no profile's no_proxy holds it.
STAND_IN = "127.0.0.2"


def scenario(test_file):
    """The scenario's directory, for a test file in molecule/<scenario>/tests/."""
    return pathlib.Path(test_file).resolve().parents[1]


def converge(test_file):
    """The scenario's converge.yml, for a test file in molecule/<scenario>/tests/."""
    return scenario(test_file) / "converge.yml"


@functools.lru_cache(maxsize=None)
def runner():
    return AnsibleRunner(str(INVENTORY))


def hosts(pattern="lab"):
    """testinfra host specs for an inventory pattern (module-level `testinfra_hosts`)."""
    return ["ansible://%s" % name for name in runner().get_hosts(pattern)]


def name(host):
    return host.backend.get_hostname()


def hostvars(host_name):
    return runner().get_variables(host_name)


def fleet():
    return json.loads((STATE / "fleet.json").read_text())


def sha256(text):
    return hashlib.sha256(text.encode()).hexdigest()


def job(host, command):
    """Run a command the way a job runs: after sourcing the job environment's loader (bash, not a login shell)."""
    return host.run("bash -c %s" % shlex.quote(". %s; %s" % (LOADER, command)))


def _env(host, prefix):
    out = host.check_output("bash -c %s" % shlex.quote(prefix + "env -0 | base64 -w0"))
    pairs = base64.b64decode(out).decode().split("\0")
    return dict(p.split("=", 1) for p in pairs if "=" in p)


def env_changes(host):
    """Names of the variables that the job environment adds or changes (values are not returned: secrets)."""
    before = _env(host, "")
    after = _env(host, ". %s; " % LOADER)
    return {k for k in after if before.get(k) != after[k]} | {k for k in before if k not in after}


def job_env(host, names):
    """The values of some (non-secret) variables as a job sees them."""
    after = _env(host, ". %s; " % LOADER)
    return {k: after.get(k) for k in names}


def ansible_env(**extra):
    env = dict(os.environ)
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               PATH="%s:%s" % (VENV_BIN, env.get("PATH", "")), LC_ALL="C.UTF-8",
               # one line per result (the YAML format folds long messages)
               ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    env.pop("ANSIBLE_VERBOSITY", None)
    env.update(extra)
    return env


def run_playbook(playbook, *args, **env):
    """ansible-playbook over the lab inventory with the repo's ansible.cfg; stdout and stderr together."""
    cmd = [str(VENV_BIN / "ansible-playbook"), "-i", str(INVENTORY), str(playbook), *args]
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                          env=ansible_env(**env), timeout=300, check=False)


def recap_changed(output):
    """Sum of changed= over the PLAY RECAP."""
    return sum(int(n) for n in re.findall(r"\bchanged=(\d+)", output))


class QuietHandler(http.server.BaseHTTPRequestHandler):
    """A request handler for stand-in servers that logs nothing (the test output stays readable)."""

    def log_message(self, *args):  # pylint: disable=arguments-differ
        pass


@contextlib.contextmanager
def serve(handler, address=STAND_IN):
    """Serve ``handler`` over HTTP on ``address`` (a free port) in a thread; yield the port, then shut it down."""
    server = http.server.ThreadingHTTPServer((address, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
