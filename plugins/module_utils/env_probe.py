# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What env_audit does on the box: its arguments, what it reads (cgroup limits, the torch probe in a child process,
the proxy hook) and how it judges that (the findings of ``env_audit.py``). Called by the modules env_audit and
preflight_probe. ``gather`` needs nothing from the GPUs, so preflight_probe runs it while the GPUs are sampled and
judges it afterwards with what the GPU check found (the driver's CUDA version, the GPU names)."""

from __future__ import annotations

import json
import os
import sys

from ansible_collections.remote_gpu.trainer.plugins.module_utils import cgroup, env_audit
from ansible_collections.remote_gpu.trainer.plugins.module_utils.command import run_with_timeout
from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import finding, worst

# env_audit's options but fail_on (also preflight_probe's env suboptions)
ARGUMENT_SPEC = dict(
    proxy_hook=dict(type="str", default=""),
    driver_cuda_version=dict(type="str"),
    gpus_expected=dict(type="bool", default=True),
    gpu_names=dict(type="list", elements="str", default=[]),
    torch=dict(type="bool", default=True),
    torch_timeout=dict(type="int", default=120),
    cgroup_root=dict(type="path", default="/sys/fs/cgroup"),
)
# What the GPU check decides when env_audit runs inside preflight_probe (None: taken from the GPU check)
GPU_DERIVED = ("driver_cuda_version", "gpus_expected", "gpu_names")


class EnvAuditError(Exception):
    """Bad arguments, reported with fail_json."""


def python_info():
    return {"executable": sys.executable, "version": sys.version.split()[0]}


def empty_result():
    """The keys of an environment report that could not be made."""
    return dict(status="FAIL", findings=[], torch=None, cgroup={}, proxy_hook={"path": None, "present": None},
                python=python_info())


def validate(params):
    if params["torch_timeout"] <= 0:
        raise EnvAuditError("torch_timeout must be a positive number of seconds (got %d)" % params["torch_timeout"])


def gather_cgroup(root, malformed=None):
    """cgroup.limits() plus the CPUs the host has and this process may run on."""
    info = cgroup.limits(root, malformed=malformed)
    info.update(host_cpus=os.cpu_count(), affinity_cpus=None, recommended_threads=None)
    if hasattr(os, "sched_getaffinity"):
        info["affinity_cpus"] = len(os.sched_getaffinity(0))
    return info


def probe_torch(timeout):
    rc, out, err = run_with_timeout([sys.executable, "-c", env_audit.TORCH_PROBE], timeout)
    if rc is None:
        return {"torch": None, "error": "the torch import did not finish within %d s" % timeout}
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"torch": None, "error": "the torch probe exited %d: %s" % (rc, err.strip()[-400:])}


def gather(params):
    """What the audit reads on the box (nothing that depends on the GPUs); raises EnvAuditError."""
    validate(params)
    malformed = []
    limits = gather_cgroup(params["cgroup_root"], malformed)
    return {
        "limits": limits,
        "malformed": malformed,
        "cgroup_is_dir": os.path.isdir(params["cgroup_root"]),
        "torch": probe_torch(params["torch_timeout"]) if params["torch"] else None,
        "hook_present": os.path.isfile(params["proxy_hook"]) if params["proxy_hook"] else None,
        "hook_is_dir": os.path.isdir(params["proxy_hook"]) if params["proxy_hook"] else False,
    }


def judge(gathered, params):
    """env_audit's result (without ``changed``) from what ``gather`` read and the GPU facts in ``params``."""
    findings = []
    limits = gathered["limits"]
    findings.extend(env_audit.cgroup_findings(params["cgroup_root"], limits["version"], gathered["cgroup_is_dir"],
                                              gathered["malformed"]))
    findings.extend(env_audit.memory_findings(limits["memory_max"], limits["memory_current"], limits["oom_kills"]))
    cpu, threads = env_audit.cpu_findings(limits["cpu_quota"], limits["host_cpus"], limits["affinity_cpus"])
    limits["recommended_threads"] = threads
    findings.extend(cpu)
    torch = gathered["torch"]
    findings.extend(env_audit.torch_findings(torch, params["driver_cuda_version"], params["gpus_expected"]))
    findings.extend(env_audit.arch_findings(torch, params["gpu_names"]))
    hook = {"path": params["proxy_hook"] or None, "present": gathered["hook_present"]}
    if params["proxy_hook"] and not hook["present"]:
        findings.append(finding(
            "FAIL", "proxy_hook_missing",
            "the profile expects the proxy hook %s, which %s" % (
                params["proxy_hook"], "is a directory, not a hook file" if gathered.get("hook_is_dir")
                else "does not exist"),
            "Without it downloads from Hugging Face, PyPI and GitHub hang behind the GFW: check the image, or "
            "set trainer_proxy_hook for this host."))
    return {"status": worst(findings), "findings": findings, "torch": torch, "cgroup": limits, "proxy_hook": hook,
            "python": python_info()}


def gpu_facts(gpu_result, params):
    """``params`` with the GPU facts that were not given taken from a gpu_health result: the driver's CUDA version,
    whether the box should have GPUs (the check found some), and their names in index order (as preflight passed
    them to env_audit when they were three tasks)."""
    gpus = [gpu for gpu in (gpu_result or {}).get("gpus") or [] if isinstance(gpu, dict)]
    derived = {
        "driver_cuda_version": (gpu_result or {}).get("cuda_version") or None,
        "gpus_expected": len(gpus) > 0,
        "gpu_names": [gpu.get("name") or "" for gpu in gpus],
    }
    merged = dict(params)
    for key in GPU_DERIVED:
        if merged.get(key) is None:
            merged[key] = derived[key]
    return merged


def audit(params):
    """The whole audit -> env_audit's result (without ``changed``); raises EnvAuditError."""
    return judge(gather(params), params)
