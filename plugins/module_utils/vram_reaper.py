# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The decisions of vram_reaper: is "not listed by nvidia-smi" trustworthy here, and which device holders are
candidates. Pure apart from ``container_hints``. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import fnmatch
import os
import stat

from ansible_collections.remote_gpu.trainer.plugins.module_utils.cgroup import read_text

PROC = "/proc"
PROC_DEVICES = "/proc/devices"
# The names of the device nodes NVIDIA's driver creates (nvidia0..N, nvidiactl, nvidia-uvm, nvidia-caps/...).
NVIDIA_NODES = "/dev/nvidia*"

# Processes that hold /dev/nvidia* by design and are never compute apps: never reap them by default.
DEFAULT_EXCLUDE_COMMANDS = ["nvidia-persistenced", "nv-hostengine", "nvidia-smi", "dcgm-exporter", "Xorg", "Xwayland",
                            "gnome-shell"]


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
