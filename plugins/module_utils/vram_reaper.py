# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The decisions of vram_reaper: is "not listed by nvidia-smi" trustworthy here, and which device holders are
candidates. Pure apart from ``container_hints``. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import os

from ansible_collections.remote_gpu.trainer.plugins.module_utils.cgroup import read_text

PROC = "/proc"

# Processes that hold /dev/nvidia* by design and are never compute apps: never reap them by default.
DEFAULT_EXCLUDE_COMMANDS = ["nvidia-persistenced", "nv-hostengine", "nvidia-smi", "dcgm-exporter", "Xorg", "Xwayland",
                            "gnome-shell"]


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
