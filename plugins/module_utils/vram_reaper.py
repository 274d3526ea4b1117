# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The decisions of vram_reaper: is "not listed by nvidia-smi" trustworthy here, which device holders are
candidates, which process trees belong to a live job, and whether a candidate's GPU is idle enough to reap on.
Pure apart from the readers ``container_hints``, ``job_roots``, ``driver_minors`` and ``kill_candidates``.
Standard library only, Python 3.8+.
"""

from __future__ import annotations

import fnmatch
import os
import re
import signal as signals
import stat
import time

from ansible_collections.remote_gpu.trainer.plugins.module_utils import job_layout, procfs
from ansible_collections.remote_gpu.trainer.plugins.module_utils.cgroup import read_text
from ansible_collections.remote_gpu.trainer.plugins.module_utils.gpu_query import INDEX, UTILIZATION, to_int

PROC = "/proc"
PROC_DEVICES = "/proc/devices"
# The names of the device nodes NVIDIA's driver creates (nvidia0..N, nvidiactl, nvidia-uvm, nvidia-caps/...).
NVIDIA_NODES = "/dev/nvidia*"

# Processes that hold /dev/nvidia* by design and are never compute apps: never reap them by default.
DEFAULT_EXCLUDE_COMMANDS = ["nvidia-persistenced", "nv-hostengine", "nvidia-smi", "dcgm-exporter", "Xorg", "Xwayland",
                            "gnome-shell"]
# The seed's IDLE_UTIL_PCT: a GPU at or below this utilisation (%) is idle; a training job pegs it far higher.
DEFAULT_IDLE_UTIL_MAX = 5
# The per-GPU nodes /dev/nvidia<minor>; nvidiactl, nvidia-uvm, nvidia-caps/... name no single GPU.
GPU_NODE_RE = re.compile(r"^/dev/nvidia(\d+)$")
DRIVER_GPUS = "/proc/driver/nvidia/gpus"
# What the idle gate asks nvidia-smi, as a gpu_query table (field, key, converter).
UTILIZATION_FIELDS = (INDEX, ("pci.bus_id", "bus_id", lambda raw: raw), UTILIZATION)
POLL_SECONDS = 0.1


def parse_nvidia_majors(text):
    """The character-device major numbers that NVIDIA's driver registered, from ``/proc/devices`` text (pure).

    Every name of the driver starts with ``nvidia``: ``nvidia``, ``nvidia-frontend``, ``nvidia-uvm``,
    ``nvidia-caps``, ``nvidia-nvlink``, ``nvidia-nvswitch``, ... Block devices are ignored."""
    majors, section = set(), None
    for line in (text or "").splitlines():
        line = line.strip()
        if line.endswith(":"):
            section = line[:-1].strip().lower()
            continue
        parts = line.split(None, 1)
        if section == "character devices" and len(parts) == 2 and parts[0].isdigit() and \
                parts[1].startswith("nvidia"):
            majors.add(int(parts[0]))
    return majors


def nvidia_majors(path=None):
    """parse_nvidia_majors() of /proc/devices (an empty set when no NVIDIA driver is loaded or it is unreadable)."""
    return parse_nvidia_majors(read_text(path or PROC_DEVICES))


def is_gpu_device(path, mode, rdev, majors):
    """Is an open file (its readlink ``path``, ``st_mode`` and ``st_rdev``) a device of NVIDIA's driver? (pure)

    Only character devices count: a regular file, a FIFO or a socket never makes a process a holder. With NVIDIA's
    driver loaded (``majors`` not empty), the device's major number must be one of the driver's. With no NVIDIA
    driver in the kernel, no process can hold VRAM: a character device then counts only when it has the driver's
    node name (``/dev/nvidia*``), which is what an emulated GPU provides (the lab's fake nodes are clones of
    ``/dev/null``); ``/dev/null`` itself, a tty or any other device never counts.
    """
    if not stat.S_ISCHR(mode):
        return False
    if majors:
        return os.major(rdev) in majors
    return fnmatch.fnmatchcase(path, NVIDIA_NODES)


def device_filter(majors):
    """The ``accept`` function of procfs.holders() for is_gpu_device() with these driver majors."""
    return lambda path, info: is_gpu_device(path, info.st_mode, info.st_rdev, majors)


def container_hints(proc=PROC, root="/"):
    """Signs that this PID namespace is a container: a marker file or a container cgroup of PID 1."""
    hints = [marker for marker in (".dockerenv", "run/.containerenv") if os.path.exists(os.path.join(root, marker))]
    cgroup = read_text(os.path.join(proc, "1", "cgroup")) or ""
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


# ---------------------------------------------------------------------------------------------------------------
# The process trees of live jobs
# ---------------------------------------------------------------------------------------------------------------

def job_roots(run_dir):
    """PIDs of the live jobs under ``run_dir``: each ``<run_dir>/<name>/job.pid`` (job_layout's layout) whose process
    is alive and, when ``job.starttime`` is there, started at that tick (a stale file whose PID was reused names no
    job). Unreadable or missing files name no job. Protecting more is the safe side, so the files need no trust."""
    try:
        names = sorted(os.listdir(run_dir))
    except (OSError, TypeError):
        return []
    roots = []
    for name in names:
        paths = job_layout.job_paths(run_dir, name)
        pid = job_layout.parse_int_file(job_layout.read_text(paths["pid_file"], limit=64, follow=True))
        starttime = job_layout.parse_int_file(job_layout.read_text(paths["starttime_file"], limit=64, follow=True))
        if pid is not None and pid > 1 and procfs.is_same_process(pid, starttime):
            roots.append(pid)
    return roots


def tree_guard(stats, visible=(), jobs=(), protected=()):
    """{pid: reason} of the processes that belong to a live job (pure, from a {pid: stat} map).

    ``visible_tree``: every descendant of a process nvidia-smi lists (DataLoader, torch.multiprocessing and
    torchrun workers hold /dev/nvidia* through descriptors inherited at fork, and nvidia-smi does not list them),
    and its ancestors (a torchrun agent; killing it ends the job). ``job_tree``: a job of the run directory and
    every descendant. ``protected``: the trees of protect_pids / protect_pid_files.

    A process whose parent died is re-parented (to PID 1 or a subreaper) and so leaves every tree: the orphans of
    a crashed run stay candidates. A listed PID 1 (a container whose main process is the job) covers everything.
    """
    guarded = {}
    for pid in visible:
        for member in procfs.descendants(pid, stats) | set(procfs.ancestors(pid, stats)):
            if member != pid:
                guarded[member] = "visible_tree"
    for reason, roots in (("job_tree", jobs), ("protected", protected)):
        for root in roots:
            for member in procfs.descendants(root, stats):
                guarded[member] = reason
    return guarded


# ---------------------------------------------------------------------------------------------------------------
# The idle gate: a candidate on a busy GPU is not killed
# ---------------------------------------------------------------------------------------------------------------

def norm_bus_id(bus_id):
    """A PCI bus id in one spelling: nvidia-smi's ``00000000:83:00.0`` and the driver's ``0000:83:00.0`` both give
    ``0000:83:00.0``; None when it is not one."""
    parts = (bus_id or "").strip().lower().split(":")
    if len(parts) != 3:
        return None
    try:
        return "%04x:%s:%s" % (int(parts[0], 16), parts[1], parts[2])
    except ValueError:
        return None


def parse_device_minor(text):
    """``Device Minor:`` of ``/proc/driver/nvidia/gpus/<bus>/information`` (the N of /dev/nvidiaN), or None."""
    for line in (text or "").splitlines():
        key, _sep, value = line.partition(":")
        if key.strip() == "Device Minor":
            return to_int(value)
    return None


def driver_minors(root=None):
    """{minor: bus id} from the driver's /proc/driver/nvidia/gpus/<bus>/information; {} when absent (a container
    without it, the lab's emulated GPU)."""
    root = root or DRIVER_GPUS
    try:
        names = os.listdir(root)
    except OSError:
        return {}
    minors = {}
    for name in names:
        minor = parse_device_minor(read_text(os.path.join(root, name, "information")))
        if minor is not None and norm_bus_id(name):
            minors[minor] = norm_bus_id(name)
    return minors


def peak_utilization(samples):
    """[{index, bus_id, peak_pct}] from readings of UTILIZATION_FIELDS rows (pure): the highest utilisation each GPU
    showed; None when any reading of that GPU had no value (MIG, an unsupported field)."""
    peaks = {}
    for rows in samples:
        for row in rows:
            if row.get("index") is None:
                continue
            entry = peaks.setdefault(row["index"], {"index": row["index"], "bus_id": norm_bus_id(row.get("bus_id")),
                                                    "peak_pct": row.get("utilization_pct")})
            value = row.get("utilization_pct")
            if value is None or entry["peak_pct"] is None:
                entry["peak_pct"] = None
            else:
                entry["peak_pct"] = max(entry["peak_pct"], value)
    return [peaks[index] for index in sorted(peaks)]


def gpus_of(devices, gpus, minors):
    """The indices of the GPUs a holder may be using (pure). Its /dev/nvidiaN nodes, through the driver's minor
    numbers; every GPU when it holds none, or one whose minor cannot be matched to a GPU."""
    every = [gpu["index"] for gpu in gpus]
    by_bus = dict((gpu["bus_id"], gpu["index"]) for gpu in gpus if gpu["bus_id"])
    held = [int(match.group(1)) for match in (GPU_NODE_RE.match(path) for path in devices) if match]
    indices = [by_bus.get(minors.get(minor)) for minor in held]
    if not held or None in indices:
        return every
    return sorted(set(indices))


def idle_gate(candidates, gpus, minors, util_max):
    """Split candidates into (to kill, held back) by the utilisation of their GPUs (pure).

    A candidate is held back with reason ``gpu_busy`` when one of its GPUs peaked above ``util_max`` % during the
    sample, or ``gpu_util_unknown`` when the sample gave no value for one of them (or no GPU at all). The row gains
    ``gpu_peak_pct``, the highest value seen on its GPUs (None when unknown)."""
    peak = dict((gpu["index"], gpu["peak_pct"]) for gpu in gpus)
    kill, held = [], []
    for row in candidates:
        values = [peak[index] for index in gpus_of(row["devices"], gpus, minors)]
        known = [value for value in values if value is not None]
        row = dict(row, gpu_peak_pct=max(known) if known else None)
        if not values or None in values:
            held.append(dict(row, reason="gpu_util_unknown"))
        elif max(values) > util_max:
            held.append(dict(row, reason="gpu_busy"))
        else:
            kill.append(row)
    return kill, held


# ---------------------------------------------------------------------------------------------------------------
# Killing
# ---------------------------------------------------------------------------------------------------------------

def _wait_gone(sent, info, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline and any(procfs.is_same_process(pid, info[pid]["starttime"]) for pid in sent):
        time.sleep(POLL_SECONDS)


def kill_candidates(candidates, info, first_signal, grace):
    """Signal each candidate (re-checking its start time against PID reuse) -> (killed, errors)."""
    sent, errors = [], []
    for row in candidates:
        pid = row["pid"]
        if not procfs.is_same_process(pid, info[pid]["starttime"]):
            continue  # already gone
        try:
            os.kill(pid, first_signal)
            sent.append(pid)
        except ProcessLookupError:
            continue
        except PermissionError as exc:
            errors.append({"pid": pid, "error": exc.strerror})
    _wait_gone(sent, info, grace if first_signal == signals.SIGTERM else 2)
    for pid in sent:
        if procfs.is_same_process(pid, info[pid]["starttime"]):
            try:
                os.kill(pid, signals.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    _wait_gone(sent, info, 5)
    killed = [pid for pid in sent if not procfs.is_same_process(pid, info[pid]["starttime"])]
    errors.extend({"pid": pid, "error": "still alive after SIGKILL (uninterruptible sleep in the driver?)"}
                  for pid in sent if pid not in killed)
    return killed, errors
