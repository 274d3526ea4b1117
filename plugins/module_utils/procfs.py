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


def parse_status_rss_kib(text):
    """The resident set size in KiB from ``/proc/PID/status`` (``VmRSS:`` line), or None (kernel threads)."""
    for line in (text or "").splitlines():
        if line.startswith("VmRSS:"):
            parts = line.split()
            return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
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


def _read(path, binary=False, limit=-1):
    """A /proc file's content (at most ``limit`` bytes or characters when given), or None when unreadable."""
    try:
        with open(path, "rb" if binary else "r") as handle:
            return handle.read(limit)
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


def read_rss_kib(pid, proc=PROC):
    """VmRSS of PID in KiB, or None when it is gone, unreadable or a kernel thread."""
    return parse_status_rss_kib(_read(os.path.join(proc, str(pid), "status"), limit=65536))


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
    return [target for _name, target in fd_entries(pid, proc)]


def holders(pattern, proc=PROC, accept=None):
    """{pid: [paths]} of the processes that have a path matching ``pattern`` open, and the PIDs whose fds could
    not be read (so the caller can say the scan was partial). Replaces ``fuser``/``lsof``.

    ``accept(path, stat_result)``, when given, must also say yes to each open file: it gets ``os.stat()`` of the
    descriptor itself (``/proc/PID/fd/N``, the open file, not whatever the path names now)."""
    found, unreadable = {}, []
    for pid in list_pids(proc):
        fd_dir = os.path.join(proc, str(pid), "fd")
        if not os.access(fd_dir, os.R_OK | os.X_OK):
            if os.path.isdir(fd_dir):
                unreadable.append(pid)
            continue
        if accept is None:
            devices = match_targets(fd_targets(pid, proc), pattern)
        else:
            devices = sorted({target for name, target in fd_entries(pid, proc)
                              if fnmatch.fnmatchcase(target, pattern) and _accepted(accept, fd_dir, name, target)})
        if devices:
            found[pid] = devices
    return found, unreadable


def fd_entries(pid, proc=PROC):
    """[(fd name, readlink target)] of PID's open file descriptors; empty when they cannot be read."""
    fd_dir = os.path.join(proc, str(pid), "fd")
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return []
    entries = []
    for name in names:
        try:
            entries.append((name, os.readlink(os.path.join(fd_dir, name))))
        except OSError:
            continue
    return entries


def _accepted(accept, fd_dir, name, target):
    try:
        info = os.stat(os.path.join(fd_dir, name))
    except OSError:
        return False  # closed meanwhile
    return bool(accept(target, info))
