# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What gpu_health does on the box: check its parameters, read the full state, sample nvidia-smi --query-gpu over
a few seconds, read the kernel log (bounded and non-blocking), and judge it all (``check_gpus``). Called by the
modules gpu_health and preflight_probe. Standard library only.
"""

from __future__ import annotations

import math
import os
import re
import time

from ansible_collections.remote_gpu.trainer.plugins.module_utils.kernel_log import KernelLogError, read_kernel_log
from ansible_collections.remote_gpu.trainer.plugins.module_utils.gpu_findings import (
    DEFAULTS, driver_unavailable, environment_only, evaluate, gpu_absent, kernel_log_unreadable, smi_timeout)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.gpu_query import (
    NvidiaSmiParseError, SmiError, parse_rows, query_args, rejected_field, run_smi)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.nvidia_smi import SAMPLE_FIELDS, parse_full
from ansible_collections.remote_gpu.trainer.plugins.module_utils.nvidia_smi_errors import classify_error
from ansible_collections.remote_gpu.trainer.plugins.module_utils.xid import parse_kernel_log

SAMPLE_COUNT = 5
MAX_SAMPLE_SECONDS = 600
MAX_XID_EVENTS = 200


class GpuHealthError(Exception):
    """Bad arguments, reported with fail_json by main()."""


def validate(params):
    """Raise GpuHealthError when an argument cannot be used."""
    if params["expected_name"]:
        try:
            re.compile(params["expected_name"])
        except re.error as exc:
            raise GpuHealthError("expected_name is not a valid regular expression (%s): fix the pattern" % exc)
    seconds = params["sample_seconds"]
    if not (math.isfinite(seconds) and 0 <= seconds <= MAX_SAMPLE_SECONDS):
        raise GpuHealthError("sample_seconds must be a number from 0 to %d (got %s): the samples are taken within "
                             "the task" % (MAX_SAMPLE_SECONDS, seconds))
    for key in ("temp_hot_c", "sm_clock_floor_pct", "expected_count", "min_memory_mib"):
        if params[key] is not None and params[key] < 0:
            raise GpuHealthError("%s must not be negative (got %s)" % (key, params[key]))
    if params["timeout"] <= 0:
        raise GpuHealthError("timeout must be a positive number of seconds (got %s)" % params["timeout"])


def take_samples(smi, timeout, seconds, options):
    """A few --query-gpu samples over ``seconds`` -> (samples, runs, findings). Drops fields the driver rejects."""
    table = list(SAMPLE_FIELDS)
    count = 1 if seconds <= 0 else SAMPLE_COUNT
    interval = seconds / (count - 1) if count > 1 else 0
    samples = []
    for number in range(count):
        if number:
            time.sleep(interval)
        while True:
            args = query_args(table)
            try:
                rc, out, err = run_smi(smi, args, timeout, check=False)
            except SmiError:  # with a path and check=False, only a timeout
                return samples, number, [smi_timeout([smi] + args, timeout, options)]
            rejected = rejected_field(out + err)
            if rc and rejected and rejected != "index" and len(table) > 1:
                table = [entry for entry in table if entry[0] != rejected]
                continue
            break
        if rc:
            return samples, number, []  # sampling is a bonus: the full state already carries the verdict's facts
        try:
            samples.extend(parse_rows(out, table))
        except NvidiaSmiParseError:
            return samples, number, []
    return samples, count, []


# gpu_health's options but fail_on (also preflight_probe's gpu suboptions)
ARGUMENT_SPEC = dict(
    expected_count=dict(type="int"),
    expected_name=dict(type="str"),
    min_memory_mib=dict(type="int"),
    temp_hot_c=dict(type="int", default=DEFAULTS["temp_hot_c"]),
    sm_clock_floor_pct=dict(type="int", default=DEFAULTS["sm_clock_floor_pct"]),
    sample_seconds=dict(type="float", default=5),
    kernel_log=dict(type="str", default="auto"),
    nvidia_smi_path=dict(type="path"),
    timeout=dict(type="int", default=20),
    platform_stop_hint=dict(type="str", default=DEFAULTS["platform_stop_hint"]),
    environment_only=dict(type="bool", default=False),
)


def find_nvidia_smi(module, params):
    """The nvidia-smi to run, or None when it is not installed; GpuHealthError when ``nvidia_smi_path`` names
    something that exists but cannot be nvidia-smi (a wrong parameter is not a bad box)."""
    path = params["nvidia_smi_path"]
    if path:
        if not os.path.lexists(path):
            return None
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise GpuHealthError("nvidia_smi_path %s is not an executable file: fix the parameter (the path of the "
                                 "nvidia-smi binary) or omit it to search PATH" % path)
        return path
    return module.get_bin_path("nvidia-smi")


def gpu_for_pci(gpus, pci):
    for gpu in gpus:
        if pci and gpu.get("pci") == pci:
            return gpu["index"]
    return None


def read_full_state(smi, timeout, options):
    """One `nvidia-smi -q -x` -> (parsed or None, findings); a failure's classify_error() dict is the finding's
    ``_error`` (taken off by check_gpus)."""
    args = ["-q", "-x"]
    try:
        rc, out, err = run_smi(smi, args, timeout, check=False)
    except SmiError:  # with a path and check=False, only a timeout
        return None, [smi_timeout([smi] + args, timeout, options)]
    parsed = None
    try:
        parsed = parse_full(out)
    except NvidiaSmiParseError as exc:
        error = classify_error(out + "\n" + err, rc) or {
            "kind": "unparseable_output", "rc": rc, "meaning": "nvidia-smi printed no usable state (%s)" % exc,
            "action": "run nvidia-smi -q on the box and read its output", "pci": None, "evidence": out[:200]}
        return None, [dict(driver_unavailable(error, options), _error=error)]
    findings = []
    error = classify_error(out + "\n" + err, rc) if rc else classify_error(err, rc)
    if error:
        findings.append(driver_unavailable(error, options, gpu_for_pci(parsed["gpus"], error.get("pci"))))
    return parsed, findings


def options_of(params):
    keys = ("expected_count", "expected_name", "min_memory_mib", "temp_hot_c", "sm_clock_floor_pct",
            "platform_stop_hint")
    return dict((key, params[key]) for key in keys)


def empty_result():
    """The keys of a GPU report that could not be made."""
    return dict(status="FAIL", gpus=[], findings=[], xid_events=[], driver_version=None,
                cuda_version=None, samples=0, environment_only=False)


def absent_gpu_finding(params, parsed, findings, options):
    """On a box declared GPU-less (``environment_only``) where nvidia-smi found no GPU because there is none (no
    binary, no driver, no device: ``gpu_absent``), the one INFO finding that replaces the driver_unavailable FAIL;
    None otherwise: a GPU-less box that was not declared so, a GPU that is there but broken, or GPUs that answer
    (judged as on any box) all keep their findings."""
    if not params.get("environment_only") or parsed is not None:
        return None
    errors = [f.get("_error") for f in findings if f["code"] == "driver_unavailable"]
    if len(errors) == 1 and gpu_absent(errors[0]):
        return environment_only(errors[0], options)
    return None


def check_gpus(module, params):
    """The whole GPU check -> gpu_health's result (without ``changed``); raises GpuHealthError on a wrong parameter.

    ``module`` only finds programs on PATH (``get_bin_path``); ``params`` are gpu_health's options."""
    validate(params)
    options = options_of(params)
    timeout = params["timeout"]
    findings = []
    parsed = None
    samples = []
    runs = 0

    smi = find_nvidia_smi(module, params)
    # a kernel_log that is not a regular file is a wrong parameter: refused before nvidia-smi runs
    try:
        log_text, unreadable = read_kernel_log(module, params["kernel_log"], timeout)
    except KernelLogError as exc:
        raise GpuHealthError(str(exc))
    if smi is None:
        error = {"kind": "command_not_found", "rc": 127, "meaning": "nvidia-smi is not installed or not executable",
                 "action": "", "pci": None, "evidence": params["nvidia_smi_path"] or "nvidia-smi not on PATH"}
        findings.append(dict(driver_unavailable(error, options), _error=error))
    else:
        parsed, smi_findings = read_full_state(smi, timeout, options)
        findings.extend(smi_findings)
        if parsed is not None and not any(f["code"] == "nvidia_smi_timeout" for f in findings):
            samples, runs, sample_findings = take_samples(smi, timeout, params["sample_seconds"], options)
            findings.extend(sample_findings)

    events = parse_kernel_log(log_text) if log_text is not None else []
    absent = absent_gpu_finding(params, parsed, findings, options)
    for found in findings:
        found.pop("_error", None)
    if absent is not None:
        # environment-only: no GPU to judge (no count, no Xid of another tenant's GPU on a shared host's kernel log)
        return dict(status="PASS", gpus=[], findings=[absent], xid_events=events[-MAX_XID_EVENTS:],
                    driver_version=None, cuda_version=None, samples=0, environment_only=True)
    if unreadable:
        findings.append(kernel_log_unreadable(unreadable, options))

    gpus = parsed["gpus"] if parsed else []
    verdict = evaluate(gpus, samples, events, options, findings)
    for gpu in gpus:
        gpu["verdict"] = verdict["gpu_verdicts"].get(gpu["index"], "PASS")
    return dict(
        status=verdict["status"],
        gpus=gpus,
        findings=verdict["findings"],
        xid_events=events[-MAX_XID_EVENTS:],
        driver_version=parsed["driver_version"] if parsed else None,
        cuda_version=parsed["cuda_version"] if parsed else None,
        samples=runs,
        environment_only=False,
    )
