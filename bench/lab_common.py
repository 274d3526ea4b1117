"""Shared pieces of the lab benchmarks: a private fleet, SSH wrappers that count and time executions, the seed
scripts."""

from __future__ import annotations

import argparse
import base64
import collections
import contextlib
import io
import json
import os
import pathlib
import re
import resource
import shlex
import shutil
import stat
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile

import yaml

REPO = pathlib.Path(__file__).resolve().parents[1]
FLEET = REPO / "tests" / "lab" / "fleet"
SEEDS = REPO / "tests" / "fixtures" / "seeds" / "scripts.txt"
VENV_BIN = pathlib.Path(sys.executable).parent
sys.path.insert(0, str(REPO / "tests" / "lab"))

# the lab's own: its reader of /proc (a process and what is below it), the closing of its SSH masters, and its
# inventory's common SSH arguments without their ControlPath (the benchmarks import the last two from here)
from fleetlib.inventory import without_control_path  # noqa: E402,F401  # pylint: disable=unused-import
from fleetlib.state import close_masters, tree  # noqa: E402,F401  # pylint: disable=unused-import


def arguments(doc, **options):
    """A benchmark's command line, described by the first line of its ``doc``. Each option is ``name=default`` or
    ``name=(default, help)``: ``--name`` (underscores as dashes) of the default's type; a default of False is a flag."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    for name, spec in options.items():
        default, text = spec if isinstance(spec, tuple) else (spec, None)
        flag = "--" + name.replace("_", "-")
        if default is False:
            parser.add_argument(flag, action="store_true", help=text)
        else:
            parser.add_argument(flag, type=str if default is None else type(default), default=default, help=text)
    return parser.parse_args()


def seed_script(name):
    """One script from the seed bundle (a diff of new files: lines start with '+')."""
    text = SEEDS.read_text()
    start = text.index("scripts/%s\n" % name)
    body = text[start:].split("\n@@", 1)[1].split("\n", 1)[1]
    lines = []
    for line in body.split("\n"):
        if not line.startswith("+"):
            break
        lines.append(line[1:])
    return "\n".join(lines) + "\n"


def fleet_up_failed(up):
    """The message for a ``tests/lab/fleet up`` that failed (its CompletedProcess): its own last lines, and the fix."""
    said = [line for line in (up.stderr or "").strip().splitlines() if line.strip()][-5:]
    return "bench: tests/lab/fleet up failed (exit %s)%s\nbench: mend what it says (where a program is missing, " \
        "'make setup' as root installs what the lab needs), then run the benchmark again" % (
            up.returncode, "".join("\n  " + line for line in said))


@contextlib.contextmanager
def lab_fleet(size, *args):
    """A fleet in its own state directory (so it never touches a fleet already up); always taken down.

    LAB_NET in the environment moves it to other loopback addresses (tests/lab/fleet honours it), so a benchmark
    can run next to a fleet on the default addresses.
    """
    if os.geteuid() != 0:
        raise SystemExit("the lab fleet needs root (namespaces, tmpfs); run this benchmark as root")
    state = tempfile.mkdtemp(prefix="rgt-bench-", dir="/tmp")
    # OpenSSH's default key exchange, as on a user's fleet (the tests' fleets offer a cheaper one: LAB_SSH_KEX)
    env = dict(os.environ, LAB_STATE_DIR=state, LAB_SSH_KEX=os.environ.get("LAB_SSH_KEX", ""))
    try:
        up = subprocess.run([str(FLEET), "up", "--size", str(size), *args], env=env, check=False,
                            capture_output=True, text=True)
        if up.returncode != 0 or not up.stdout.strip():
            raise SystemExit(fleet_up_failed(up))
        yield pathlib.Path(up.stdout.strip().splitlines()[-1]), pathlib.Path(state), env
    finally:
        subprocess.run([str(FLEET), "down"], env=env, check=False, capture_output=True)
        shutil.rmtree(state, ignore_errors=True)


def fleet_hosts(inventory):
    """(common vars, {host name: host vars}) of a lab fleet's inventory."""
    inv = yaml.safe_load(inventory.read_text())
    return inv["all"]["vars"], inv["all"]["children"]["lab"]["hosts"]


def fleet_addresses(inventory):
    """The addresses (ansible_host) of the hosts in a lab fleet's inventory."""
    return {h["ansible_host"] for h in fleet_hosts(inventory)[1].values()}


def round_dirs(tmp, round_no):
    """Two new folders for one interleaved round: the baseline's and ours (each gets its own counting ssh)."""
    dirs = tmp / ("seed%d" % round_no), tmp / ("ours%d" % round_no)
    for directory in dirs:
        directory.mkdir()
    return dirs


def counting_ssh(directory):
    """An ssh wrapper that logs each execution's target address, then runs the real ssh."""
    log = directory / "ssh-executions.log"
    wrapper = directory / "ssh"
    real = shutil.which("ssh")
    wrapper.write_text("#!/bin/sh\nprintf '%%s\\n' \"$*\" >> %s\nexec %s \"$@\"\n" % (log, real))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return wrapper, log


def timing_ssh(directory):
    """An ssh wrapper that logs when each execution starts and ends (the clock of time.time()), then runs the real
    ssh; (wrapper, log). Bash's EPOCHREALTIME reads the clock without starting a process, so the wrapper costs one
    bash per execution on either side of a comparison."""
    log = directory / "ssh-timeline.log"
    wrapper = directory / "timing-ssh"
    stamp = "printf '%%s %%s %%s\\n' %s \"$$\" \"${EPOCHREALTIME/,/.}\" >> " + shlex.quote(str(log))
    wrapper.write_text("#!/bin/bash\n%s\n%s \"$@\"\nrc=$?\n%s\nexit $rc\n"
                       % (stamp % "S", shlex.quote(shutil.which("ssh")), stamp % "E"))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return wrapper, log


def ssh_timeline(text, start, end):
    """Where a run's wall time went, from timing_ssh's log ``text`` of one run that started at ``start`` and ended
    at ``end`` (time.time() seconds): {"executions", "first_start", "last_start", "median_ssh", "last_end", "end"},
    each in seconds from ``start`` (median_ssh: the median time one execution took), or None without an
    execution. An execution whose end was not logged (still running) counts up to ``end``."""
    spans, running = [], {}
    for line in text.splitlines():
        words = line.split()
        if len(words) != 3 or words[0] not in ("S", "E"):
            continue
        if words[0] == "S":
            running[words[1]] = float(words[2])
        elif words[1] in running:
            spans.append((running.pop(words[1]), float(words[2])))
    spans.extend((at, end) for at in running.values())
    if not spans:
        return None
    begins, ends = [at for at, _until in spans], [until for _at, until in spans]
    return {"executions": len(spans), "first_start": min(begins) - start, "last_start": max(begins) - start,
            "median_ssh": statistics.median(until - at for at, until in spans), "last_end": max(ends) - start,
            "end": end - start}


def executions_per_host(log, addresses):
    """{address: count} from the wrapper's log (each line is one ssh argv)."""
    counts = collections.Counter()
    if log.exists():
        for line in log.read_text().splitlines():
            for address in re.findall(r"\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b", line):
                if address in addresses:
                    counts[address] += 1
                    break
    return counts


def timed(func):
    start = time.perf_counter()
    value = func()
    return time.perf_counter() - start, value


def cpu_timed(func):
    """(wall seconds, controller CPU seconds, value) of ``func``: the CPU is the user plus system time of every
    child process that ended during the call (an ``ansible-playbook`` run and its whole tree: forks, ssh), from the
    kernel's rusage, not from wall time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    value = func()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), value


def ansiballz_payload(module, args=""):
    """What Ansible sends a host to run ``module`` once: {bytes: the AnsiballZ file, ours: {file: bytes} of the
    collection's own files inside it (uncompressed)}. The module runs once on localhost with
    ANSIBLE_KEEP_REMOTE_FILES, so the payload measured is the one Ansible really built."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_KEEP_REMOTE_FILES="1",
                   ANSIBLE_REMOTE_TMP=tmp, ANSIBLE_DEPRECATION_WARNINGS="0")
        subprocess.run([str(VENV_BIN / "ansible"), "localhost", "-c", "local", "-m", module, "-a", args], env=env,
                       capture_output=True, check=False)
        files = list(pathlib.Path(tmp).glob("*/AnsiballZ_*.py"))
        if not files:
            raise SystemExit("no AnsiballZ payload was kept for %s" % module)
        text = files[0].read_text()
    data = re.search(r"zip_data='([^']*)'", text) or re.search(r'ZIPDATA = """(.*?)"""', text, re.S)
    archive = zipfile.ZipFile(io.BytesIO(base64.b64decode(data.group(1))))
    ours = dict((info.filename.rsplit("/", 1)[-1], info.file_size) for info in archive.infolist()
                if "/remote_gpu/" in info.filename and info.file_size)
    return {"bytes": len(text.encode()), "ours": ours}


def direct_payload(module, args):
    """The bytes a probe module's action sends a host when it runs the module without AnsiballZ (plugin_utils/direct:
    the runner, the module's sources compressed, the arguments), from its ``-vvv`` line on localhost with
    pipelining; None when it ran through AnsiballZ there."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_PIPELINING="1",
               ANSIBLE_DEPRECATION_WARNINGS="0")
    proc = subprocess.run([str(VENV_BIN / "ansible"), "-i", str(REPO / "inventories" / "local" / "hosts.yml"),
                           "localhost", "-vvv", "-m", module, "-a", json.dumps(args)], env=env,
                          capture_output=True, text=True, check=False)
    found = re.search(r"runs without AnsiballZ \((\d+) bytes", proc.stdout)
    return int(found.group(1)) if found else None


CPUACCT = pathlib.Path("/sys/fs/cgroup/cpuacct")
NO_BOX_METER = "not measured (this machine has no writable cgroup-v1 cpuacct hierarchy)"


@contextlib.contextmanager
def box_cpu(state):
    """Yields a function that returns the CPU seconds the lab's boxes have used so far (their sshd, the modules
    Ansible runs there, the GPU emulator, the jobs), or None where this machine has no writable cgroup-v1 cpuacct
    hierarchy. Every process of the fleet moves into a cpuacct cgroup of its own, and what they start stays in it.

    The boxes of this lab share the controller's cores, so their work lengthens every run's wall time; on a real
    fleet, each box spends it on its own CPU. Measured apart, it says how much of a wall ratio is box-side work."""
    group = CPUACCT / ("rgt-bench-%d" % os.getpid())
    try:
        group.mkdir()
    except OSError:
        yield None
        return
    try:
        for instance in json.loads((state / "fleet.json").read_text())["instances"]:
            for pid in tree(instance["unshare"]["pid"]):
                with contextlib.suppress(OSError):
                    (group / "cgroup.procs").write_text("%d\n" % pid)
        yield lambda: int((group / "cpuacct.usage").read_text()) / 1e9
    finally:
        # the fleet is still up and its jobs fork (a sleep a second): move them back until the group is empty
        for _attempt in range(50):
            for pid in (group / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    (CPUACCT / "cgroup.procs").write_text(pid + "\n")
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def idle_rate(meter, windows=5):
    """The boxes' CPU seconds per second while nothing connects (their jobs, their daemons): the least of ``windows``
    one-second windows, so that a burst (jobs still starting, sessions still closing) is not taken for idle."""
    rates = []
    for _window in range(windows):
        before = meter()
        time.sleep(1.0)
        rates.append(meter() - before)
    return min(rates)


def cpu_timed_with_boxes(func, meter):
    """cpu_timed(func) plus the boxes' CPU seconds during the call: (wall, controller CPU, box CPU or None without a
    meter, value). Subtract idle_rate() x wall, measured once the runs are over, for the call's own box work."""
    before = meter() if meter else 0.0
    wall, cpu, value = cpu_timed(func)
    return wall, cpu, (meter() - before) if meter else None, value


def box_work(used, walls, idle):
    """The median of the runs' box CPU (``used``, from cpu_timed_with_boxes) above the boxes' idle rate."""
    return statistics.median(max(0.0, box - idle * wall) for box, wall in zip(used, walls))
