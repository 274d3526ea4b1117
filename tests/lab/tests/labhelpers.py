"""Helpers for the lab fleet tests: start a fleet in a private state directory, SSH with its inventory.

A module with a name of its own, imported by name (``from labhelpers import ...``): a ``from conftest import``
would find whichever conftest.py pytest loaded last."""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time

import pytest

LAB = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLEET = os.path.join(LAB, "fleet")
REPO = os.path.dirname(os.path.dirname(LAB))
sys.path.insert(0, LAB)

from fleetlib import state as lab_state  # noqa: E402
from fleetlib.inventory import without_control_path  # noqa: E402
from lab_teardown_support import DEFAULT_NET  # noqa: E402

# the fleet's address prefix: LAB_NET=127.0.N moves a second fleet off the default (tests/lab/README.md)
NET = os.environ.get("LAB_NET", DEFAULT_NET)


def _load_fake_api():
    """tests/lab/providers/fake_api.py, the loopback fakes of the providers' APIs (a file, not a package)."""
    spec = importlib.util.spec_from_file_location("fake_api", os.path.join(LAB, "providers", "fake_api.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fake_api = _load_fake_api()

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the lab fleet needs root (namespaces, tmpfs mounts)")


def listening(addr: str, port: int = 22) -> bool:
    with socket.socket() as s:
        s.settimeout(0.3)
        return s.connect_ex((addr, port)) == 0


def run_fleet(args, state_dir, check=True, env=None, **kw):
    e = dict(os.environ, LAB_STATE_DIR=str(state_dir))
    e.update(env or {})
    p = subprocess.run([FLEET] + list(args), env=e, capture_output=True, text=True, timeout=120,
                       check=False, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"fleet {' '.join(args)} -> {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


@contextlib.contextmanager
def started_fleet(state_dir, *up_args):
    """``fleet up`` with ``up_args`` in ``state_dir``; always brought down again, also when a test fails."""
    up = run_fleet(["up", *up_args], state_dir)
    try:
        yield Fleet(state_dir, up)
    finally:
        run_fleet(["down"], state_dir, check=False)


class Fleet:
    """A started fleet: its state dir, the printed inventory and SSH helpers built from that inventory."""

    def __init__(self, state_dir, up: subprocess.CompletedProcess):
        import yaml
        self.state = str(state_dir)
        self.up_output = up.stdout
        self.inventory_path = up.stdout.strip().splitlines()[-1]
        with open(self.inventory_path, encoding="utf-8") as fh:
            self.inventory = yaml.safe_load(fh)
        allvars = self.inventory["all"]["vars"]
        self.key = allvars["ansible_ssh_private_key_file"]
        # -o pairs, without ControlPath (the tests open plain connections)
        self.common = without_control_path(allvars["ansible_ssh_common_args"])
        self.hosts = self.inventory["all"]["children"]["lab"]["hosts"]
        self.groups = {g: sorted((v or {}).get("hosts") or {}) for g, v in self.inventory["all"]["children"].items()}

    @property
    def record(self) -> dict:
        with open(os.path.join(self.state, "fleet.json"), encoding="utf-8") as fh:
            return json.load(fh)

    def running(self):
        return [h for h, v in self.hosts.items() if "down" not in v["lab_variant"]]

    def ssh_argv(self, host: str, *cmd: str) -> list:
        hv = self.hosts[host]
        common = self.common
        return (["ssh", "-i", self.key, "-p", str(hv["ansible_port"]), "-o", "BatchMode=yes", "-o",
                 "ControlPath=none", "-o", "ConnectTimeout=10"] + common +
                [f"{hv['ansible_user']}@{hv['ansible_host']}"] + list(cmd))

    def ssh(self, host: str, cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        p = subprocess.run(self.ssh_argv(host, cmd), capture_output=True, text=True, timeout=timeout, check=False)
        if check and p.returncode != 0:
            raise AssertionError(f"ssh {host} {cmd!r} -> {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
        return p

    def meter(self, host: str) -> list:
        with open(self.hosts[host]["lab_meter_log"], encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]


class SshCounter:
    """An ``ssh`` that logs each execution, for ``ANSIBLE_SSH_EXECUTABLE``: ``env`` to run a playbook with, then
    ``per_host(fleet, hosts)`` -> {host: SSH executions}. The count does not depend on the machine's noise."""

    def __init__(self, directory):
        import shutil
        import stat
        self.log = os.path.join(str(directory), "ssh.log")
        wrapper = os.path.join(str(directory), "ssh")
        with open(wrapper, "w", encoding="utf-8") as fh:
            fh.write("#!/bin/sh\nprintf '%%s\\n' \"$*\" >> %s\nexec %s \"$@\"\n" % (self.log, shutil.which("ssh")))
        os.chmod(wrapper, os.stat(wrapper).st_mode | stat.S_IXUSR)
        self.env = {"ANSIBLE_SSH_EXECUTABLE": wrapper}

    def per_host(self, fleet, hosts):
        import re
        addresses = {fleet.hosts[h]["ansible_host"]: h for h in hosts}
        counts = dict.fromkeys(hosts, 0)
        with open(self.log, encoding="utf-8") as fh:
            for line in fh:
                for address, host in addresses.items():
                    if re.search(r"(^|[@ ])%s( |$)" % re.escape(address), line.rstrip("\n")):
                        counts[host] += 1
        return counts


def assert_nothing_left(state_dir: str, record: dict, timeout: float = 10.0) -> None:
    """No recorded process, no mount under the state dir, no sshd listener, no process in the namespaces."""
    procs = [inst[k] for inst in record.get("instances", []) for k in ("init", "unshare") if inst.get(k)]
    for daemon in ("proxy", "relay"):
        if (record.get(daemon) or {}).get("proc"):
            procs.append(record[daemon]["proc"])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(lab_state.alive(p) for p in procs):
        time.sleep(0.05)
    assert [p["pid"] for p in procs if lab_state.alive(p)] == []
    with open("/proc/mounts", encoding="utf-8") as fh:
        left = [line for line in fh if str(state_dir) in line]
    assert left == []
    for inst in record.get("instances", []):
        assert not listening(inst["addr"]), f"{inst['addr']}:22 still listening"
    if record.get("proxy"):
        assert not listening("127.0.0.1", record["proxy"]["port"])
    if record.get("relay"):
        for inst in record.get("instances", []):
            assert not listening(inst["addr"], record["relay"]["port"]), f"relay still on {inst['addr']}"
    ss = subprocess.run(["ss", "-ltn"], capture_output=True, text=True, check=True).stdout
    for inst in record.get("instances", []):
        assert f"{inst['addr']}:22 " not in ss


def namespaces_of(record: dict) -> set:
    out = set()
    for inst in record.get("instances", []):
        pid = (inst.get("init") or {}).get("pid")
        if pid and lab_state.alive(inst["init"]):
            for ns in ("pid", "mnt"):
                out.add(os.readlink(f"/proc/{pid}/ns/{ns}"))
    return out


def processes_in(namespaces: set) -> list:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        for ns in ("pid", "mnt"):
            try:
                if os.readlink(f"/proc/{entry}/ns/{ns}") in namespaces:
                    if lab_state.start_time(int(entry)) is not None:     # zombies do not count
                        found.append(int(entry))
            except OSError:
                pass
    return found


def lab_busy(message: str) -> None:
    """The lab's addresses are taken: skip, with ``message``; a failure under LAB_REQUIRE_FREE=1 (make test sets it,
    so that a fleet left running can never turn the lab tests into skips)."""
    if os.environ.get("LAB_REQUIRE_FREE") == "1":
        pytest.fail(message + " (LAB_REQUIRE_FREE=1)", pytrace=False)
    pytest.skip(message)
