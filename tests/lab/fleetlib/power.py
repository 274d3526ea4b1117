"""Platform events of one instance: a restart (`fleet reboot`), a box that stops answering (`fleet vanish`) and
comes back (`fleet revive`).

* reboot: every process of the instance but its PID 1 (sshd) is killed (SIGKILL, until none is left): tmux, the
  jobs, the SSH sessions; tmux's sockets in ``/tmp`` are removed. The data disk, the homes and the region's
  durable FS stay (they belong to the mount namespace, which PID 1 keeps alive), and sshd answers again at once:
  a platform restart (AutoDL power-cycle, vast.ai container restart, a preemption that gives the box back). On a
  ``vastai`` instance ``/root/onstart.sh`` then runs as root inside the instance when it exists, as vast.ai runs it
  on every container start. The GPU emulator's process list is emptied (the processes are gone).
* vanish: the SSH sessions are killed and sshd (PID 1) is stopped with SIGSTOP: connections are accepted by the
  kernel but never answered, so a client times out in the banner exchange, as with a box that lost power or
  network. The jobs keep running (a network partition looks the same from the controller).
* revive: SIGCONT to sshd: the box answers again.

Only the processes of the instance's own PID namespace are signalled, found by that namespace, never by name.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

from . import gpu
from . import state as st

ONSTART = "/root/onstart.sh"


def _init(state: str, host: str) -> tuple:
    inst = st.instance(state, host)
    if "down" in inst.get("variants", []):
        raise RuntimeError(f"{host} has the variant 'down': it has no processes")
    init = inst.get("init") or {}
    if not init.get("pid") or not st.alive(init):
        raise RuntimeError(f"{host} is not running (run `tests/lab/fleet up`)")
    return inst, init["pid"]


def members(init_pid: int) -> list:
    """The host PIDs of every process in the PID namespace of ``init_pid``, itself left out (zombies too)."""
    ns = os.readlink(f"/proc/{init_pid}/ns/pid")
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == init_pid:
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/pid") == ns and st.start_time(int(entry)) is not None:
                found.append(int(entry))
        except OSError:
            pass
    return found


def _sshd_sessions(init_pid: int) -> list:
    """The sshd session processes (children of PID 1 named sshd, not zombies: a stopped PID 1 reaps none)."""
    found = []
    for pid in st.children(init_pid):
        if st.start_time(pid) is None:
            continue
        try:
            with open(f"/proc/{pid}/comm", encoding="utf-8") as fh:
                if fh.read().strip().startswith("sshd"):
                    found.append(pid)
        except OSError:
            pass
    return found


def _signal(pids, sig) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _children_first(pids) -> list:
    """``pids``, each process before its parent. Freezing is not enough: a frozen process runs again when its
    terminal hangs up, which the death of tmux's server does to every pane (the kernel sends the pane's session
    SIGHUP and SIGCONT), and a job wrapper woken that way records its item's exit 129 before its own SIGKILL comes.
    A process that holds a SIGKILL never runs again, so the panes go before the server."""
    parent = {child: pid for pid in pids for child in st.children(pid) if child in pids}

    def depth(pid):
        steps = 0
        while pid in parent and steps < len(parent):
            pid, steps = parent[pid], steps + 1
        return steps
    return sorted(pids, key=depth, reverse=True)


def _kill_all(pids_of, timeout: float = 10.0) -> None:
    """SIGKILL every process of ``pids_of()`` at once, as a reset does: all are frozen (SIGSTOP) first, until no new
    one appears, then killed children first, so that none sees another die and records what a crash records (a job
    wrapper writing the exit code of its killed item) before its own turn comes."""
    deadline = time.monotonic() + timeout
    while True:
        frozen = set()
        while True:
            fresh = set(pids_of()) - frozen
            if not fresh:
                break
            _signal(fresh, signal.SIGSTOP)
            frozen |= fresh
        if not frozen:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {sorted(frozen)} survived SIGKILL")
        _signal(_children_first(frozen), signal.SIGKILL)
        time.sleep(0.05)


def _env(state: str, host: str) -> dict:
    """The instance's session environment (its sshd_config SetEnv line) for the onstart hook."""
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "USER": "root",
           "LOGNAME": "root", "SHELL": "/bin/bash", "LANG": "C.UTF-8"}
    with open(os.path.join(st.host_dir(state, host), "sshd_config"), encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("SetEnv "):
                env.update(pair.split("=", 1) for pair in line.split()[1:] if "=" in pair)
    return env


def reboot(state: str, host: str) -> str:
    inst, init = _init(state, host)
    os.kill(init, signal.SIGCONT)  # a vanished box restarts too
    _kill_all(lambda: members(init))
    # tmux's sockets go with the restart (/tmp is a tmpfs on most images). Nothing else in /tmp is touched: the
    # lab binds the instance's own state directory there when LAB_STATE_DIR is under /tmp.
    tmp = f"/proc/{init}/root/tmp"
    for name in os.listdir(tmp):
        path = os.path.join(tmp, name)
        if name.startswith("tmux-") and os.path.isdir(path) and not os.path.ismount(path):
            shutil.rmtree(path, ignore_errors=True)
    try:
        gpu.clear(host)
    except (KeyError, LookupError, RuntimeError, OSError):
        pass
    done = f"{host}: rebooted (every process but sshd killed; data disk and durable FS kept)"
    if inst["platform"] != "vastai" or not os.path.exists(f"/proc/{init}/root{ONSTART}"):
        return done
    proc = subprocess.run(["nsenter", "-t", str(init), "-m", "-u", "-p", "--", "/bin/bash", "-c",
                           f"cd /root && exec /bin/bash {ONSTART}"],
                          env=_env(state, host), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=60, check=False)
    return done + f"; {ONSTART} ran (exit {proc.returncode})" + (
        f": {proc.stderr.strip()[-400:]}" if proc.returncode else "")


def vanish(state: str, host: str) -> str:
    _inst, init = _init(state, host)
    os.kill(init, signal.SIGSTOP)
    _kill_all(lambda: _sshd_sessions(init))
    return f"{host}: vanished (sshd stopped: SSH connections time out; the jobs keep running)"


def revive(state: str, host: str) -> str:
    _inst, init = _init(state, host)
    os.kill(init, signal.SIGCONT)
    return f"{host}: revived (sshd answers again)"
