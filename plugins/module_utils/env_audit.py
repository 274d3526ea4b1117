# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure checks of the training environment inside a container: cgroup memory and CPU, torch vs the driver.

Host tools (free, top, nproc) describe the whole physical node; a rented container is judged by its cgroup, which
``cgroup.py`` reads. This file holds only the audit's judgements (findings).
"""

from __future__ import annotations

import math

from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import finding

# Run by the profile's interpreter in a child process: importing torch can take seconds or crash outright.
TORCH_PROBE = r"""
import json, sys
out = {"python": sys.version.split()[0], "torch": None, "cuda_build": None, "cuda_available": None,
       "device_count": None, "error": None}
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda_build"] = torch.version.cuda
    out["cuda_available"] = bool(torch.cuda.is_available())
    out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
    out["threads"] = torch.get_num_threads()
except Exception as exc:  # report any import or runtime failure as data
    out["error"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(out))
"""


def memory_findings(memory_max, memory_current, oom_kills, near_pct=90):
    found = []
    if oom_kills:
        found.append(finding(
            "WARN", "cgroup_oom_kills",
            "the container's cgroup has OOM-killed %d process(es) (memory.events oom_kill)" % oom_kills,
            "A job that vanished with exit 137 or a bare 'Killed' was OOM-killed: lower the batch size or the "
            "DataLoader num_workers (each worker copies in-RAM data)."))
    if memory_max and memory_current is not None and memory_current * 100 >= memory_max * near_pct:
        found.append(finding(
            "WARN", "memory_near_limit",
            "the container uses %d of %d MiB of its memory limit (%d%%)" % (
                memory_current // 2 ** 20, memory_max // 2 ** 20, memory_current * 100 // memory_max),
            "Something already holds most of the container's memory: find it before launching."))
    return found


def cgroup_findings(root, version, root_is_dir, malformed):
    """Say what the cgroup audit could not do (pure): INFO ``cgroup_not_audited`` when no cgroup hierarchy was
    found at ``root``, WARN ``cgroup_malformed`` for limit files that hold garbage (``malformed``: descriptions)."""
    found = []
    if version is None:
        where = "%s is not a directory" % root if not root_is_dir else "%s holds no cgroup v1 or v2 hierarchy" % root
        found.append(finding(
            "INFO", "cgroup_not_audited",
            "memory and CPU limits were not audited: %s" % where,
            "Set cgroup_root to the cgroup mount point of the box (usually /sys/fs/cgroup) to audit them."))
    if malformed:
        found.append(finding(
            "WARN", "cgroup_malformed",
            "cgroup limit file(s) could not be parsed, so those limits were not audited: %s" % "; ".join(malformed),
            "Read the files on the box; a container runtime that writes garbage there may limit the job in "
            "ways this audit cannot see."))
    return found


def cpu_findings(quota_cpus, host_cpus, affinity_cpus):
    """Warn when torch/OpenMP would size thread pools to the host's cores instead of the quota."""
    limits = [c for c in (quota_cpus, affinity_cpus) if c]
    if not limits or not host_cpus:
        return [], host_cpus
    allowed = max(1, int(math.floor(min(limits))))
    if allowed >= host_cpus:
        return [], host_cpus
    return [finding(
        "WARN", "cpu_quota_below_cores",
        "the container may use %s CPU(s) but the host shows %d cores; torch and OpenMP would start %d threads"
        % (("%g" % min(limits)), host_cpus, host_cpus),
        "Set OMP_NUM_THREADS=%d and MKL_NUM_THREADS=%d in the job environment (torch.set_num_threads(%d))."
        % (allowed, allowed, allowed))], allowed


def _version_tuple(text):
    parts = []
    for piece in str(text).split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts + [0] * (2 - len(parts)))


def torch_findings(probe, driver_cuda, gpus_expected):
    """Findings from the torch probe's JSON and the driver's CUDA version (from nvidia-smi)."""
    if probe is None:
        return []
    if probe.get("error") and not probe.get("torch"):
        return [finding("FAIL", "torch_import_failed", "torch does not import: %s" % probe["error"],
                        "Use the image's environment (never a new conda env on a rental) or install the torch "
                        "build that matches the driver.")]
    found = []
    build = probe.get("cuda_build")
    if build is None:
        if gpus_expected:
            found.append(finding("FAIL", "torch_cpu_only",
                                 "torch %s is a CPU-only build on a GPU box" % probe.get("torch"),
                                 "A project pin replaced the image's CUDA build: reinstall the image's torch and "
                                 "filter torch out of requirements."))
        return found
    if driver_cuda:
        have, need = _version_tuple(driver_cuda), _version_tuple(build)
        if need[0] > have[0]:
            found.append(finding("FAIL", "torch_cuda_too_new",
                                 "torch %s is built for CUDA %s but the driver supports CUDA %s" % (
                                     probe.get("torch"), build, driver_cuda),
                                 "The driver is fixed on a rental: install a torch build for CUDA <= %s, or rent a "
                                 "box with a newer driver." % driver_cuda))
        elif need > have:
            found.append(finding("WARN", "torch_cuda_minor_newer",
                                 "torch %s is built for CUDA %s, newer than the driver's CUDA %s" % (
                                     probe.get("torch"), build, driver_cuda),
                                 "Minor-version compatibility usually works; if kernels fail to load, install a "
                                 "build for CUDA %s." % driver_cuda))
    if gpus_expected and probe.get("cuda_available") is False:
        found.append(finding("FAIL", "torch_cuda_unavailable",
                             "torch.cuda.is_available() is False (torch %s, CUDA %s)" % (probe.get("torch"), build),
                             "Check the driver (gpu_health) and CUDA_VISIBLE_DEVICES; the job would run on the CPU."))
    return found
