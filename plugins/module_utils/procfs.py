# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Small /proc helpers: process start time and age, owner, command line, parents, process trees, and which
processes hold a path open (a scan of /proc/*/fd, no fuser or lsof).

The ``parse_*`` functions take text so they can be tested against captured /proc files; the readers take a
``proc`` root (``/proc`` by default) so tests can point them at a directory of their own.
Standard library only, Python 3.8+.
"""

from __future__ import annotations

import fnmatch
import os
import pwd

PROC = "/proc"


def parse_stat(text):
    """``/proc/PID/stat`` -> dict(pid, comm, state, ppid, pgrp, session, starttime), or None when malformed.

    The command name (field 2) is in parentheses and may itself contain spaces and parentheses, so the fields
    after it are split from the LAST ``)``. ``starttime`` (field 22) is in clock ticks since boot.
    """
    try:
        head, rest = text.rsplit(")", 1)
        pid_text, comm = head.split("(", 1)
        fields = rest.split()
        return {
            "pid": int(pid_text),
            "comm": comm,
            "state": fields[0],
            "ppid": int(fields[1]),
            "pgrp": int(fields[2]),
            "session": int(fields[3]),
            "starttime": int(fields[19]),
        }
    except (ValueError, IndexError):
        return None


def parse_uptime(text):
    """``/proc/uptime`` -> seconds since boot as a float, or None."""
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None


def parse_status_uid(text):
    """The real uid from ``/proc/PID/status`` (``Uid:`` line), or None."""
    for line in text.splitlines():
        if line.startswith("Uid:"):
            try:
                return int(line.split()[1])
            except (ValueError, IndexError):
                return None
    return None


def parse_cmdline(data):
    """``/proc/PID/cmdline`` bytes -> list of arguments (empty for kernel threads and zombies)."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    data = data.rstrip(b"\0")
    if not data:
        return []
    return [arg.decode("utf-8", "replace") for arg in data.split(b"\0")]


def age_seconds(starttime_ticks, uptime, hz):
    """Seconds a process has lived: uptime minus its start time (ticks / hz). None when unknown."""
    if starttime_ticks is None or uptime is None or not hz:
        return None
    return max(0.0, uptime - float(starttime_ticks) / hz)


def clock_ticks():
    """SC_CLK_TCK, the unit of /proc/PID/stat times (almost always 100)."""
    try:
        return os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        return 100


def _read(path, binary=False):
    try:
        with open(path, "rb" if binary else "r") as handle:
            return handle.read()
    except (IOError, OSError, UnicodeDecodeError):
        return None


def read_stat(pid, proc=PROC):
    """Parsed ``/proc/PID/stat`` or None when the process does not exist (in this PID namespace)."""
    text = _read(os.path.join(proc, str(pid), "stat"))
    return parse_stat(text) if text else None


def read_uptime(proc=PROC):
    text = _read(os.path.join(proc, "uptime"))
    return parse_uptime(text) if text else None


def read_cmdline(pid, proc=PROC):
    data = _read(os.path.join(proc, str(pid), "cmdline"), binary=True)
    return parse_cmdline(data) if data is not None else []


def read_uid(pid, proc=PROC):
    text = _read(os.path.join(proc, str(pid), "status"))
    return parse_status_uid(text) if text else None


def user_name(uid):
    """uid -> user name, or the number as text when the uid has no passwd entry (common in containers)."""
    if uid is None:
        return None
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def process_age(pid, proc=PROC, hz=None):
    stat = read_stat(pid, proc)
    if stat is None:
        return None
    return age_seconds(stat["starttime"], read_uptime(proc), hz or clock_ticks())


def pid_exists(pid, proc=PROC):
    """True when PID is a live process in this PID namespace (a zombie, state Z, is not alive)."""
    stat = read_stat(pid, proc)
    return stat is not None and stat["state"] not in ("Z", "X")


def is_same_process(pid, starttime, proc=PROC):
    """True when PID is alive and, if ``starttime`` is given, started at that tick (defeats PID reuse)."""
    stat = read_stat(pid, proc)
    if stat is None or stat["state"] in ("Z", "X"):
        return False
    return starttime is None or stat["starttime"] == starttime


def list_pids(proc=PROC):
    """Every numeric entry of /proc."""
    try:
        names = os.listdir(proc)
    except OSError:
        return []
    return sorted(int(name) for name in names if name.isdigit())


def all_stats(proc=PROC):
    """{pid: stat} for every process that could be read."""
    stats = {}
    for pid in list_pids(proc):
        stat = read_stat(pid, proc)
        if stat is not None:
            stats[pid] = stat
    return stats


def descendants(root, stats):
    """``root`` and every process below it, from a {pid: stat} map (pure)."""
    children = {}
    for pid, stat in stats.items():
        children.setdefault(stat["ppid"], []).append(pid)
    found, stack = set(), [root]
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        found.add(pid)
        stack.extend(children.get(pid, []))
    return found


def ancestors(pid, stats):
    """The parent chain of ``pid`` (not including it), up to PID 1, from a {pid: stat} map (pure)."""
    chain, seen = [], {pid}
    current = stats.get(pid)
    while current is not None and current["ppid"] > 0 and current["ppid"] not in seen:
        chain.append(current["ppid"])
        seen.add(current["ppid"])
        current = stats.get(current["ppid"])
    return chain


def group_members(pgid, stats):
    """Live processes whose process group is ``pgid`` (pure)."""
    return sorted(pid for pid, stat in stats.items() if stat["pgrp"] == pgid and stat["state"] not in ("Z", "X"))


def match_targets(targets, pattern):
    """The link targets that match a glob ``pattern`` such as ``/dev/nvidia*`` (pure, sorted, unique)."""
    return sorted({target for target in targets if fnmatch.fnmatchcase(target, pattern)})


def fd_targets(pid, proc=PROC):
    """The readlink of every open file descriptor of PID; empty when it cannot be read (another user, gone)."""
    fd_dir = os.path.join(proc, str(pid), "fd")
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return []
    targets = []
    for name in names:
        try:
            targets.append(os.readlink(os.path.join(fd_dir, name)))
        except OSError:
            continue
    return targets


def holders(pattern, proc=PROC):
    """{pid: [paths]} of the processes that have a path matching ``pattern`` open, and the PIDs whose fds could
    not be read (so the caller can say the scan was partial). Replaces ``fuser``/``lsof``."""
    found, unreadable = {}, []
    for pid in list_pids(proc):
        fd_dir = os.path.join(proc, str(pid), "fd")
        if not os.access(fd_dir, os.R_OK | os.X_OK):
            if os.path.isdir(fd_dir):
                unreadable.append(pid)
            continue
        devices = match_targets(fd_targets(pid, proc), pattern)
        if devices:
            found[pid] = devices
    return found, unreadable


def parse_proc_cgroup(text):
    """``/proc/PID/cgroup`` -> {"v2": path or None, "memory": v1 memory path or None}."""
    found = {"v2": None, "memory": None}
    for line in (text or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            found["v2"] = parts[2]
        elif "memory" in parts[1].split(","):
            found["memory"] = parts[2]
    return found


def memory_events_candidates(cgroup, root="/sys/fs/cgroup"):
    """Files that may hold the oom_kill counter of this cgroup, most specific first (pure).

    cgroup v2: ``<root>/<path>/memory.events`` then ``<root>/memory.events`` (inside a container the
    namespace root is the container's cgroup). v1: ``memory.oom_control`` (it carries ``oom_kill`` on 4.13+).
    """
    paths = []
    if cgroup["v2"] is not None:
        paths.append(os.path.join(root, cgroup["v2"].lstrip("/"), "memory.events"))
        paths.append(os.path.join(root, "memory.events"))
    if cgroup["memory"] is not None:
        paths.append(os.path.join(root, "memory", cgroup["memory"].lstrip("/"), "memory.oom_control"))
        paths.append(os.path.join(root, "memory", "memory.oom_control"))
    unique = []
    for path in paths:
        path = os.path.normpath(path)
        if path not in unique:
            unique.append(path)
    return unique


def read_counters(path):
    """{counter: value} of a memory.events / memory.oom_control file; None when it cannot be read."""
    content = _read(path) if path else None
    if content is None:
        return None
    values = {}
    for line in content.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            values[parts[0]] = int(parts[1])
    return values


def read_oom_kills(proc=PROC, root="/sys/fs/cgroup"):
    """(path, {counter: value}) of this process's cgroup memory.events / memory.oom_control, or (None, {})."""
    text = _read(os.path.join(proc, "self", "cgroup"))
    for path in memory_events_candidates(parse_proc_cgroup(text), root):
        values = read_counters(path)
        if values and "oom_kill" in values:
            return path, values
    return None, {}


# --- GPU device holders (vram_reaper) -------------------------------------------------------------------------

COMPUTE_APPS_QUERY = ["--query-compute-apps=pid,used_memory,process_name", "--format=csv,noheader,nounits"]

# Processes that hold /dev/nvidia* by design and are never compute apps: never reap them by default.
DEFAULT_EXCLUDE_COMMANDS = ["nvidia-persistenced", "nv-hostengine", "nvidia-smi", "dcgm-exporter", "Xorg", "Xwayland",
                            "gnome-shell"]


def _memory(raw):
    try:
        return int(float(raw.strip().split()[0]))
    except (ValueError, IndexError):
        return None


def parse_compute_apps(text):
    """``nvidia-smi --query-compute-apps`` CSV -> [{pid, used_memory_mib, process_name}].

    Reads our query (``pid,used_memory,process_name`` with ``noheader,nounits``) and, when a header line is present,
    any field order (the captures in tests/fixtures/nvidia/compute-apps). Process names may contain commas, so the
    pid is taken from the left (its column index) and the memory from the right.
    """
    rows = []
    pid_col, has_header = 0, False
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if not has_header and not rows and "pid" in [cell.lower() for cell in cells]:
            pid_col, has_header = [cell.lower() for cell in cells].index("pid"), True
            continue
        if len(cells) <= pid_col or not cells[pid_col].isdigit():
            continue
        if has_header:
            name = ", ".join(cells[pid_col + 1:-1])
            memory = _memory(cells[-1])
        else:
            memory = _memory(cells[1]) if len(cells) > 1 else None
            name = ", ".join(cells[2:])
        rows.append({"pid": int(cells[pid_col]), "used_memory_mib": memory, "process_name": name})
    return rows


def container_hints(proc=PROC, root="/"):
    """Signs that this PID namespace is a container: a marker file or a container cgroup of PID 1."""
    hints = [marker for marker in (".dockerenv", "run/.containerenv") if os.path.exists(os.path.join(root, marker))]
    cgroup = _read(os.path.join(proc, "1", "cgroup")) or ""
    for word in ("docker", "kubepods", "containerd", "lxc", "libpod"):
        if word in cgroup:
            hints.append("pid 1 cgroup mentions %s" % word)
            break
    return hints


def visibility(listed, holder_pids, smi_error, hints):
    """Can "not listed by nvidia-smi" be trusted here? -> (unverified bool, reason or None). Pure.

    Not when nvidia-smi could not be asked, when a PID it lists does not hold a device in this PID namespace (a
    container sees host PIDs), or when it lists nothing while this looks like a container (it then lists none).
    """
    if smi_error:
        return True, "nvidia-smi could not be asked (%s)" % smi_error
    foreign = sorted(pid for pid in listed if pid not in holder_pids)
    if foreign:
        return True, ("nvidia-smi lists PID(s) %s that hold no GPU device in this PID namespace (a container "
                      "seeing host PIDs)" % ", ".join(str(pid) for pid in foreign))
    if not listed and holder_pids and hints:
        return True, "nvidia-smi lists no process while devices are held, inside a container (%s)" % "; ".join(hints)
    return False, None


def classify_holders(holder_info, visible, guarded, exclude_pids, exclude_users, exclude_commands, min_age):
    """Split device holders into candidates and skipped ones (pure).

    ``holder_info``: {pid: {user, comm, cmdline, age, devices}}; ``guarded``: {pid: reason} for PID 1, this
    module and its parents, and the protected process trees. Returns (candidates, skipped), each a list of dicts
    with pid, user, cmdline, age, devices and reason.
    """
    candidates, skipped = [], []
    for pid in sorted(holder_info):
        info = holder_info[pid]
        commands = {info.get("comm") or ""}
        if info.get("cmdline"):
            commands.add(os.path.basename(info["cmdline"][0]))
        if pid in guarded:
            reason = guarded[pid]
        elif pid in exclude_pids:
            reason = "excluded_pid"
        elif info.get("user") in exclude_users:
            reason = "excluded_user"
        elif commands & set(exclude_commands):
            reason = "excluded_command"
        elif pid in visible:
            reason = "visible"
        elif info.get("age") is None or info["age"] < min_age:
            reason = "young"
        else:
            reason = "invisible_to_nvidia_smi"
        row = {"pid": pid, "user": info.get("user"), "cmdline": " ".join(info.get("cmdline") or []),
               "age": int(info["age"]) if info.get("age") is not None else None,
               "devices": info.get("devices", []), "reason": reason}
        (candidates if reason == "invisible_to_nvidia_smi" else skipped).append(row)
    return candidates, skipped
