# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one adapter for cgroups (v1 and v2): where a process's cgroup is, and what its files say.

A rented container is judged by its cgroup, not by the host's tools. ``/proc/PID/cgroup`` names the cgroup
(``0::/path`` on the unified v2 hierarchy, ``N:memory:/path`` for the v1 memory controller); the files below
``/sys/fs/cgroup`` hold the limits and counters. Inside a container the namespace root is the container's own
cgroup, so every lookup falls back from the named path to the root.

The ``parse_*`` functions take text; the readers take the mount point (``root``) and ``proc`` so tests can point
them at directories of their own. Every read is bounded and never raises. Standard library only, Python 3.8+:
env_audit, job_status, detached_job and the sampler sidecar use it on the box.
"""

from __future__ import annotations

import os

from ansible_collections.remote_gpu.trainer.plugins.module_utils import safe_read

ROOT = "/sys/fs/cgroup"
PROC = "/proc"
MAX_READ = 65536  # cgroup and /proc files are small; never read more of one


def read_text(path, limit=MAX_READ):
    """The first ``limit`` bytes of a regular file as text, or None when it cannot be read (never blocks on a
    planted FIFO: module_utils/safe_read.py)."""
    return safe_read.read_text(path, limit, follow=True)


# ---------------------------------------------------------------------------------------------------------------
# Parsers
# ---------------------------------------------------------------------------------------------------------------

def parse_proc_cgroup(text):
    """``/proc/PID/cgroup`` -> {"v2": unified path or None, "memory": v1 memory-controller path or None}."""
    found = {"v2": None, "memory": None}
    for line in (text or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            found["v2"] = parts[2] or "/"
        elif "memory" in parts[1].split(","):
            found["memory"] = parts[2] or "/"
    return found


def cgroup_v2_path(proc_self_cgroup):
    """The unified-hierarchy path from /proc/self/cgroup ('0::/system.slice/x'), or None on pure v1."""
    return parse_proc_cgroup(proc_self_cgroup)["v2"]


def parse_limit(text):
    """'max' (v2) or a huge v1 sentinel means no limit -> None; otherwise an int. ValueError when it is neither
    (a malformed file)."""
    value = (text or "").strip()
    if value in ("", "max"):
        return None
    number = int(value)
    if number < 0:
        raise ValueError("a negative limit")
    return None if number >= 2 ** 60 else number


def parse_int(text):
    """A counter file such as memory.current -> int, or None."""
    value = (text or "").strip()
    return int(value) if value.isdigit() else None


def parse_keyed(text):
    """'key value' lines (memory.events, memory.oom_control, cpu.stat) -> dict of ints."""
    result = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            result[parts[0]] = int(parts[1])
    return result


def parse_cpu_max(text):
    """cgroup v2 cpu.max 'quota period' ('max 100000' = unlimited) -> CPUs as a float, or None."""
    parts = (text or "").split()
    if not parts or parts[0] == "max":
        return None
    if len(parts) > 2:
        raise ValueError("more than 'quota period'")
    return _quota(parts[0], parts[1] if len(parts) > 1 else "100000")


def _quota(quota_text, period_text):
    """quota / period in CPUs; ValueError when either is not a number or the period is not positive."""
    quota, period = int(quota_text), int(period_text)
    if period <= 0:
        raise ValueError("a period of %d" % period)
    if quota <= 0:
        raise ValueError("a quota of %d" % quota)
    return quota / period


def cpu_quota_v1(quota_us, period_us):
    """cgroup v1 cpu.cfs_quota_us / cpu.cfs_period_us; -1 means unlimited. ValueError when malformed."""
    if int(quota_us.strip()) == -1:
        return None
    return _quota(quota_us.strip(), period_us.strip())


# ---------------------------------------------------------------------------------------------------------------
# Paths (pure)
# ---------------------------------------------------------------------------------------------------------------

def _unique(paths):
    unique = []
    for path in paths:
        path = os.path.normpath(path)
        if path not in unique:
            unique.append(path)
    return unique


def _pairs(cgroup, v2_name, v1_name, root):
    """[(the cgroup's own file, the hierarchy root's file)] for v2 then v1, for the hierarchies it is in."""
    pairs = []
    if cgroup["v2"] is not None:
        pairs.append((os.path.join(root, cgroup["v2"].lstrip("/"), v2_name), os.path.join(root, v2_name)))
    if cgroup["memory"] is not None:
        pairs.append((os.path.join(root, "memory", cgroup["memory"].lstrip("/"), v1_name),
                      os.path.join(root, "memory", v1_name)))
    return pairs


def memory_events_candidates(cgroup, root=ROOT):
    """Files that may hold the oom_kill counter of this cgroup, most specific first (pure).

    cgroup v2: ``<root>/<path>/memory.events`` then ``<root>/memory.events`` (inside a container the
    namespace root is the container's cgroup). v1: ``memory.oom_control`` (it carries ``oom_kill`` on 4.13+).
    ``cgroup`` is parse_proc_cgroup()'s dict.
    """
    return _unique(path for pair in _pairs(cgroup, "memory.events", "memory.oom_control", root) for path in pair)


def memory_usage_candidates(cgroup, root=ROOT):
    """Files that may hold the memory in use by this cgroup (v2 ``memory.current``, v1 ``memory.usage_in_bytes``):
    the cgroup's own files first, then the hierarchy roots' (pure)."""
    pairs = _pairs(cgroup, "memory.current", "memory.usage_in_bytes", root)
    return _unique([own for own, _top in pairs] + [top for _own, top in pairs])


# ---------------------------------------------------------------------------------------------------------------
# Readers
# ---------------------------------------------------------------------------------------------------------------

def proc_cgroup(pid="self", proc=PROC):
    """parse_proc_cgroup() of ``/proc/PID/cgroup`` (all None when it cannot be read)."""
    return parse_proc_cgroup(read_text(os.path.join(proc, str(pid), "cgroup")))


def read_counters(path):
    """{counter: value} of a memory.events / memory.oom_control file; None when it cannot be read."""
    content = read_text(path) if path else None
    return None if content is None else parse_keyed(content)


def read_oom_kills(proc=PROC, root=ROOT, pid="self"):
    """(path, {counter: value}) of the process's cgroup memory.events / memory.oom_control, or (None, {})."""
    for path in memory_events_candidates(proc_cgroup(pid, proc), root):
        values = read_counters(path)
        if values and "oom_kill" in values:
            return path, values
    return None, {}


def memory_usage_file(pid="self", proc=PROC, root=ROOT):
    """The first readable memory usage file of the process's cgroup, or None."""
    for path in memory_usage_candidates(proc_cgroup(pid, proc), root):
        if parse_int(read_text(path)) is not None:
            return path
    return None


def v2_dirs(root=ROOT, proc=PROC):
    """The cgroup v2 directories from this process's cgroup up to the root (limits may sit on a parent); None
    when the unified hierarchy is not mounted at ``root``."""
    rel = proc_cgroup("self", proc)["v2"]
    if rel is None or not os.path.exists(os.path.join(root, "cgroup.controllers")):
        return None
    top = root.rstrip("/") or "/"
    dirs, current = [], os.path.normpath(os.path.join(root, rel.lstrip("/")))
    while current.startswith(top):
        if os.path.isdir(current):
            dirs.append(current)
        if current == top or current == "/":
            break
        current = os.path.dirname(current)
    return dirs


def _smallest(values):
    values = [v for v in values if v is not None]
    return min(values) if values else None


def _checked(path, parser, malformed, default="max"):
    """parser(text of ``path``), or None (and ``path: text`` added to ``malformed``) when the file holds garbage."""
    text = read_text(path)
    try:
        return parser(text or default)
    except (ValueError, ZeroDivisionError) as exc:
        malformed.append("%s holds %r (%s)" % (path, (text or "").strip()[:40], exc))
        return None


def limits(root=ROOT, proc=PROC, malformed=None):
    """Memory and CPU limits of this process's cgroup -> {version, memory_max, memory_current, oom_kills,
    cpu_quota}; every value None when it cannot be read.

    A limit file that holds garbage (``memory.max`` of ``banana``, ``cpu.max`` with a period of 0) counts as
    unknown (None), never raises, and is described in the list ``malformed`` when one is given."""
    malformed = [] if malformed is None else malformed
    info = {"version": None, "memory_max": None, "memory_current": None, "oom_kills": None, "cpu_quota": None}
    dirs = v2_dirs(root, proc)
    if dirs:
        leaf = dirs[0]
        info.update(
            version=2,
            memory_max=_smallest(_checked(os.path.join(d, "memory.max"), parse_limit, malformed) for d in dirs),
            memory_current=parse_int(read_text(os.path.join(leaf, "memory.current"))),
            oom_kills=parse_keyed(read_text(os.path.join(leaf, "memory.events"))).get("oom_kill"),
            cpu_quota=_smallest(_checked(os.path.join(d, "cpu.max"), parse_cpu_max, malformed) for d in dirs))
    elif os.path.isdir(os.path.join(root, "memory")):
        memory = os.path.join(root, "memory")
        info.update(
            version=1,
            memory_max=_checked(os.path.join(memory, "memory.limit_in_bytes"), parse_limit, malformed),
            memory_current=parse_int(read_text(os.path.join(memory, "memory.usage_in_bytes"))),
            oom_kills=parse_keyed(read_text(os.path.join(memory, "memory.oom_control"))).get("oom_kill"))
        quota_path = os.path.join(root, "cpu", "cpu.cfs_quota_us")
        quota = read_text(quota_path)
        period = read_text(os.path.join(root, "cpu", "cpu.cfs_period_us"))
        if quota and period:
            info["cpu_quota"] = _checked(quota_path, lambda text: cpu_quota_v1(text, period), malformed)
    return info


def _up_to(top, leaf):
    """The directories from ``leaf`` up to ``top`` (both included), those that exist; [] when leaf is not in top."""
    top = os.path.normpath(top)
    current = os.path.normpath(leaf)
    dirs = []
    while current == top or current.startswith(top + os.sep):
        if os.path.isdir(current):
            dirs.append(current)
        if current == top:
            break
        current = os.path.dirname(current)
    return dirs


def _limit_of(path):
    try:
        return parse_limit(read_text(path) or "max")
    except ValueError:
        return None


def job_memory(pid, proc=PROC, root=ROOT):
    """The memory of the cgroup that process ``pid`` (a job's) is in -> {"path", "version", "current", "peak",
    "max"}: v2 ``memory.current``, ``memory.peak`` and the smallest ``memory.max`` from the cgroup up to the root
    (a limit may sit on a parent); v1 ``memory.usage_in_bytes``, ``memory.max_usage_in_bytes`` and the smallest
    ``memory.limit_in_bytes``. A value that cannot be read is None; None when the process's cgroup is not found."""
    found = proc_cgroup(pid, proc)
    if found["v2"] is not None and os.path.exists(os.path.join(root, "cgroup.controllers")):
        names, top, rel = ("memory.current", "memory.peak", "memory.max"), root, found["v2"]
        version = 2
    elif found["memory"] is not None and os.path.isdir(os.path.join(root, "memory")):
        names, top, rel = ("memory.usage_in_bytes", "memory.max_usage_in_bytes", "memory.limit_in_bytes"), \
            os.path.join(root, "memory"), found["memory"]
        version = 1
    else:
        return None
    dirs = _up_to(top, os.path.join(top, rel.lstrip("/")))
    if not dirs:
        return None
    leaf = dirs[0]
    return {"path": leaf, "version": version,
            "current": parse_int(read_text(os.path.join(leaf, names[0]))),
            "peak": parse_int(read_text(os.path.join(leaf, names[1]))),
            "max": _smallest(_limit_of(os.path.join(d, names[2])) for d in dirs)}
