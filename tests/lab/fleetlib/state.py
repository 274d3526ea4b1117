"""State directory, the fleet record, and teardown.

Everything the fleet creates is written to the record (``<state>/fleet.json``) *before* it is created, so
``down`` can undo a partial ``up``. ``down`` touches only what the record (or the state directory) names:
the PIDs it started (checked against their start time, so a recycled PID is never killed), the mounts under
the state directory in the host mount namespace, and any loopback address or user it created.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import signal
import subprocess
import time

LAB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/lab
REPO_ROOT = os.path.dirname(os.path.dirname(LAB_DIR))                   # the checkout
RECORD = "fleet.json"
MNT_DETACH = 2


def state_dir() -> str:
    return os.path.abspath(os.environ.get("LAB_STATE_DIR") or os.path.join(LAB_DIR, "state"))


def host_dir(state: str, name: str) -> str:
    return os.path.join(state, "hosts", name)


def load(state: str) -> dict | None:
    try:
        with open(os.path.join(state, RECORD), encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None


def save(state: str, record: dict) -> None:
    path = os.path.join(state, RECORD)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


# --- processes -------------------------------------------------------------------------------------------

def start_time(pid: int) -> int | None:
    """The process start time (clock ticks since boot), or None when the PID is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            data = fh.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = data[data.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def proc_entry(pid: int) -> dict:
    """What the record keeps for a process: its PID and its start time."""
    return {"pid": pid, "start": start_time(pid)}


def alive(entry: dict | None) -> bool:
    if not entry or not entry.get("pid"):
        return False
    st = start_time(entry["pid"])
    return st is not None and (entry.get("start") is None or st == entry["start"])


def kill(entry: dict | None, sig: int = signal.SIGKILL) -> None:
    if alive(entry):
        try:
            os.kill(entry["pid"], sig)
        except ProcessLookupError:
            pass


def wait_gone(entries: list, timeout: float = 10.0) -> list:
    """Wait until none of the processes is alive; return the ones still alive."""
    deadline = time.monotonic() + timeout
    left = [e for e in entries if alive(e)]
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = [e for e in left if alive(e)]
    return left


def children(pid: int) -> list:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children", encoding="utf-8") as fh:
                out += [int(x) for x in fh.read().split()]
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def tree(pid: int) -> list:
    """``pid`` and every process below it (a process that ends meanwhile is skipped)."""
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo.extend(children(found[-1]))
    return found


def close_masters(state: str) -> None:
    """Close the SSH ControlPersist masters whose sockets are in ``<state>/cp`` (the inventory's ControlPath), so
    that the next run connects cold and no master outlives the fleet."""
    directory = os.path.join(str(state), "cp")
    sockets = [os.path.join(directory, name) for name in os.listdir(directory)] if os.path.isdir(directory) else []
    procs = [subprocess.Popen(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "lab"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for sock in sockets]
    for proc in procs:
        proc.wait()


# --- mounts ----------------------------------------------------------------------------------------------

def _unescape(path: str) -> str:
    return path.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mounts_under(prefix: str) -> list:
    """Mount points in this mount namespace at or below prefix, deepest first."""
    prefix = prefix.rstrip("/")
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            mnt = _unescape(line.split()[4])
            if mnt == prefix or mnt.startswith(prefix + "/"):
                found.append(mnt)
    return sorted(set(found), key=lambda p: (-p.count("/"), p))


_libc = None


def libc():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc


def mount(source: str, target: str, fstype: str | None = None, flags: int = 0, data: str | None = None) -> None:
    def enc(s):
        return s.encode() if s is not None else None
    if libc().mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target} ({fstype or 'bind'} {data or ''}): {os.strerror(err)}")


def umount(target: str) -> None:
    """Unmount; fall back to a lazy unmount if the mount is busy."""
    for flags in (0, MNT_DETACH):
        if libc().umount2(target.encode(), flags) == 0:
            return
    err = ctypes.get_errno()
    raise OSError(err, f"umount {target}: {os.strerror(err)}")


# --- loopback addresses ----------------------------------------------------------------------------------

def address_is_local(addr: str) -> bool:
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((addr, 0))
            return True
        except OSError:
            return False


# --- teardown --------------------------------------------------------------------------------------------

def teardown(state: str, log=print) -> list:
    """Stop everything the record names; safe after a partial up and safe to call twice.

    Returns a list of problems (empty when everything was cleaned)."""
    problems = []
    record = load(state) or {}
    procs = []
    for inst in record.get("instances", []):
        # Killing the namespace's PID 1 makes the kernel kill every process in that PID namespace; the
        # mount namespace (and the tmpfs mounts inside it) dies with its last process.
        for key in ("init", "unshare"):
            entry = inst.get(key)
            if entry:
                kill(entry)
                procs.append(entry)
    for daemon in ("proxy", "relay"):
        entry = (record.get(daemon) or {}).get("proc")
        if entry:
            kill(entry, signal.SIGTERM)
            procs.append(entry)
    left = wait_gone(procs, 10.0)
    for entry in left:
        kill(entry, signal.SIGKILL)
    left = wait_gone(left, 5.0)
    for entry in left:
        problems.append(f"process {entry['pid']} did not exit")

    for mnt in record.get("mounts", []) + mounts_under(state):
        if mnt in mounts_under(state):
            try:
                umount(mnt)
            except OSError as exc:
                problems.append(str(exc))

    for addr in record.get("addresses", []):
        r = subprocess.run(["ip", "addr", "del", f"{addr}/32", "dev", "lo"], capture_output=True, text=True,
                           check=False)
        if r.returncode != 0 and "Cannot assign" not in r.stderr:
            problems.append(f"ip addr del {addr}: {r.stderr.strip()}")

    if record:
        record["status"] = "down"
        record["addresses"] = []
        record["mounts"] = []
        record["down_at"] = time.time()
        save(state, record)
    if problems:
        for p in problems:
            log(f"fleet down: {p}")
    return problems


def instance(state: str, host: str) -> dict:
    """The record of instance ``host`` in the fleet of ``state``; KeyError when there is none."""
    record = load(state) or {}
    for inst in record.get("instances", []):
        if inst["name"] == host:
            return inst
    raise KeyError(f"no instance {host} in {state}/fleet.json")
