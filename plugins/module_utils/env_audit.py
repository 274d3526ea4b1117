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

from ansible_collections.remote_gpu.trainer.plugins.module_utils import cuda_arch
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
if out["torch"] and out["cuda_build"]:
    try:  # get_arch_list() is empty without a usable GPU; the flags the build was compiled with are not
        out["arch_list"] = torch.cuda.get_arch_list() if out["cuda_available"] else []
        if not out["arch_list"] and hasattr(torch._C, "_cuda_getArchFlags"):
            out["arch_list"] = (torch._C._cuda_getArchFlags() or "").split()
        out["capabilities"] = [list(torch.cuda.get_device_capability(i)) for i in range(out["device_count"] or 0)]
    except Exception as exc:
        out["arch_error"] = "%s: %s" % (type(exc).__name__, exc)
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


def _gpu_capability(index, name, probe):
    """(capability, where it came from): NVIDIA's table by product name, else what torch reported for the device."""
    cap = cuda_arch.capability(name)
    if cap:
        return cap, "NVIDIA's table"
    reported = probe.get("capabilities") or []
    if index < len(reported) and isinstance(reported[index], (list, tuple)) and len(reported[index]) == 2:
        return tuple(reported[index]), "torch"
    return None, None


def arch_findings(probe, gpu_names):
    """torch_arch_unsupported (FAIL): the torch build has no kernels for a GPU of this box, which dies at the first
    forward pass ('no kernel image is available for execution on the device'). torch_arch_unchecked (INFO): the check
    could not be made, with the reason. Nothing when torch did not import or is a CPU build (other findings say so),
    or when no GPU was seen."""
    if not probe or not probe.get("torch") or not probe.get("cuda_build") or not gpu_names:
        return []
    arch_list = probe.get("arch_list") or []
    if not arch_list:
        why = probe.get("arch_error") or "torch reported no CUDA architectures (torch.cuda.get_arch_list() is empty)"
        return [finding("INFO", "torch_arch_unchecked",
                        "whether torch %s has kernels for this GPU was not checked: %s" % (probe["torch"], why),
                        "Run python -c 'import torch; print(torch.cuda.get_arch_list())' on the box and compare it "
                        "with the GPU's compute capability (https://developer.nvidia.com/cuda-gpus).")]
    found, unknown, unsupported = [], [], {}
    for index, name in enumerate(gpu_names):
        cap, source = _gpu_capability(index, name, probe)
        if cap is None:
            unknown.append("GPU %d (%s)" % (index, name))
        elif not cuda_arch.arch_supported(cap, arch_list):
            unsupported.setdefault((cap, name, source), []).append(index)
    for (cap, name, source), indexes in sorted(unsupported.items()):
        found.append(finding(
            "FAIL", "torch_arch_unsupported",
            "torch %s has no kernels for GPU %s (%s, compute capability %d.%d, %s, from %s): it was built for %s; "
            "the job would die at its first CUDA kernel (no kernel image is available for execution on the device)"
            % (probe["torch"], ",".join(str(i) for i in indexes), name, cap[0], cap[1], cuda_arch.sm_name(cap),
               source, " ".join(arch_list)),
            "Install %s into the profile's interpreter, or rent a GPU this build supports."
            % cuda_arch.install_hint(cap)))
    if unknown:
        found.append(finding(
            "INFO", "torch_arch_unchecked",
            "whether torch %s has kernels for %s was not checked: the product name is not in NVIDIA's compute "
            "capability table" % (probe["torch"], ", ".join(unknown)),
            "Look up the GPU's compute capability (https://developer.nvidia.com/cuda-gpus) and check that "
            "torch.cuda.get_arch_list() holds it (%s)." % " ".join(arch_list)))
    return found
