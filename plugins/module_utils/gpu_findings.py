# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure health decisions for gpu_health: parsed GPUs + samples + Xid events -> findings and verdicts.

A finding is ``{level, code, gpu, message, action}``; ``level`` is INFO, WARN or FAIL. FAIL means "this box is
unfit: stop it and rent a different one"; every FAIL message names the GPU, the evidence and the platform's
meter-stop verb (option ``platform_stop_hint``).

Codes and levels (tests and playbooks match on ``code``):

=============================  =====  ===========================================================================
code                           level  trigger
=============================  =====  ===========================================================================
driver_unavailable             FAIL   nvidia-smi missing or failing (no driver, library mismatch, GPU lost, ...)
nvidia_smi_timeout             FAIL   an nvidia-smi call ran past ``timeout`` (hung driver, often after Xid 45/119)
gpu_count_mismatch             FAIL   number of GPUs != ``expected_count``
gpu_model_mismatch             FAIL   GPU name does not match the ``expected_name`` regex
gpu_memory_below_min           FAIL   total framebuffer memory < ``min_memory_mib``
throttle_active                FAIL   HW slowdown, HW thermal, HW power brake or SW thermal slowdown active
power_capped                   INFO   SW power cap active (normal when idle; under load it only says the board
                                      runs at its power limit)
clock_crushed                  WARN   under load, SM clock < ``sm_clock_floor_pct`` % of max; FAIL when the same
                                      sample is also at or above ``temp_hot_c`` (thermal-throttle signature)
running_hot                    WARN   GPU temperature >= ``temp_hot_c``
ecc_uncorrectable_volatile     FAIL   uncorrectable ECC errors since the last driver load
retired_pages_pending          FAIL   a retired page waits for a driver reload (impossible on a rental)
remapped_rows_pending          FAIL   a row remap waits for a GPU reset (impossible on a rental)
remapped_rows_failure          FAIL   row remapping failed (RMA criterion)
pcie_link_degraded             WARN   under load, PCIe gen or width below max (idle link downshift is normal)
xid_fatal                      FAIL   Xid classed fatal (hardware or needs reset/reboot), incl. fallen off the bus
xid_app_fault                  WARN   Xid classed app_fault (job-level fault, non-fatal NVLink, unknown code)
xid_info                       INFO   informational / secondary Xid
kernel_log_unreadable          WARN   no kernel log: Xids cannot be ruled out
mig_enabled                    INFO   MIG mode is on (a job sees MIG slices, not the whole GPU)
persistence_off                INFO   persistence mode is off (first CUDA call pays driver init)
=============================  =====  ===========================================================================
"""

from __future__ import annotations

import re

from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import finding, rank, verdict


# Reasons that mean the hardware or the thermal controller is holding clocks down.
THROTTLE_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")
REASON_WORDS = {
    "hw_slowdown": "HW slowdown", "hw_thermal_slowdown": "HW thermal slowdown",
    "hw_power_brake_slowdown": "HW power brake slowdown", "sw_thermal_slowdown": "SW thermal slowdown",
    "sw_power_cap": "SW power cap",
}
# A sample counts as "under load" at this GPU utilisation, or (MIG: utilisation N/A) at this share of the
# power limit. Not under load whenever the GPU reports itself idle.
LOAD_UTIL_PCT = 30
LOAD_POWER_SHARE = 0.3

DEFAULT_STOP_HINT = "stop the instance in the provider's console"
# The thresholds' defaults: gpu_health's argument spec takes its defaults from here.
DEFAULTS = {
    "expected_count": None,
    "expected_name": None,
    "min_memory_mib": None,
    "temp_hot_c": 83,
    "sm_clock_floor_pct": 70,
    "platform_stop_hint": DEFAULT_STOP_HINT,
}

XID_CODES = {"fatal": ("xid_fatal", "FAIL"), "app_fault": ("xid_app_fault", "WARN"), "info": ("xid_info", "INFO")}


def stop_hint(options):
    return (options or {}).get("platform_stop_hint") or DEFAULT_STOP_HINT


def unfit_action(options):
    return "this box is unfit: stop it (%s) and rent a different one" % stop_hint(options)


def gpu_label(gpu):
    """`GPU 3 (NVIDIA H100 80GB HBM3, 0000:1b:00)`."""
    details = ", ".join(str(part) for part in (gpu.get("name"), gpu.get("pci")) if part)
    return "GPU %s (%s)" % (gpu.get("index"), details) if details else "GPU %s" % gpu.get("index")


def make_finding(level, code, gpu, message, action, options=None):
    """findings.finding() with the GPU index (None for host-wide findings); a FAIL message always ends with the
    unfit verdict and the meter-stop verb."""
    if level == "FAIL":
        message = "%s. This box is unfit: stop it (%s) and rent a different one." % (
            message.rstrip("."), stop_hint(options))
    return finding(level, code, message, action, gpu=gpu)


# ---------------------------------------------------------------------------------------------------------------
# Observations: the full-state snapshot plus every --query-gpu sample of the same GPU, with the same keys.
# ---------------------------------------------------------------------------------------------------------------

def observations(gpu, samples):
    own = [sample for sample in samples or () if sample.get("index") == gpu.get("index")]
    return [gpu] + own


def under_load(obs, power_limit=None):
    reasons = obs.get("throttle_reasons") or ()
    if "gpu_idle" in reasons:
        return False
    util = obs.get("utilization_gpu_pct")
    if util is not None:
        return util >= LOAD_UTIL_PCT
    draw = obs.get("power_draw_w")
    limit = obs.get("power_limit_w") or power_limit
    return bool(draw is not None and limit and draw >= LOAD_POWER_SHARE * limit)


# ---------------------------------------------------------------------------------------------------------------
# Per-GPU checks: each takes (gpu, obs list, options) and returns a list of findings.
# ---------------------------------------------------------------------------------------------------------------

def check_identity(gpu, obs, options):
    found = []
    pattern = options.get("expected_name")
    if pattern and not re.search(pattern, gpu.get("name") or "", re.I):
        found.append(make_finding(
            "FAIL", "gpu_model_mismatch", gpu["index"],
            "%s is not the GPU you rented: name %r does not match %r" % (gpu_label(gpu), gpu.get("name"), pattern),
            unfit_action(options), options))
    minimum = options.get("min_memory_mib")
    total = gpu.get("memory_total_mib")
    if minimum and total is not None and total < minimum:
        found.append(make_finding(
            "FAIL", "gpu_memory_below_min", gpu["index"],
            "%s has %d MiB of memory, below the required %d MiB" % (gpu_label(gpu), total, minimum),
            unfit_action(options), options))
    return found


def check_reasons(gpu, obs, options):
    found = []
    throttled = {}
    capped_loaded = capped_idle = 0
    for item in obs:
        reasons = item.get("throttle_reasons") or ()
        for reason in reasons:
            if reason in THROTTLE_REASONS:
                throttled[reason] = throttled.get(reason, 0) + 1
        if "sw_power_cap" in reasons:
            if under_load(item, gpu.get("power_limit_w")):
                capped_loaded += 1
            else:
                capped_idle += 1
    if throttled:
        evidence = ", ".join("%s in %d of %d samples" % (REASON_WORDS[name], throttled[name], len(obs))
                             for name in THROTTLE_REASONS if name in throttled)
        found.append(make_finding(
            "FAIL", "throttle_active", gpu["index"],
            "%s is being throttled by hardware/thermal limits: %s" % (gpu_label(gpu), evidence),
            unfit_action(options), options))
    if capped_loaded or capped_idle:
        if capped_loaded:
            note = "under load in %d of %d samples: the board is at its power limit (%s W)" % (
                capped_loaded, len(obs), gpu.get("power_limit_w"))
        else:
            note = "only while idle, which is normal"
        found.append(make_finding(
            "INFO", "power_capped", gpu["index"], "%s: SW power cap active %s" % (gpu_label(gpu), note),
            "none; expect clocks below max at full power", options))
    return found


def check_clocks_and_heat(gpu, obs, options):
    found = []
    hot = options.get("temp_hot_c")
    floor = options.get("sm_clock_floor_pct")
    crushed = []
    for item in obs:
        sm, sm_max = item.get("sm_clock_mhz"), item.get("sm_clock_max_mhz") or gpu.get("sm_clock_max_mhz")
        if floor and sm is not None and sm_max and under_load(item, gpu.get("power_limit_w")) \
                and sm * 100 < floor * sm_max:
            crushed.append((sm, sm_max, item.get("temperature_c")))
    if crushed:
        sm, sm_max, temp = min(crushed)
        with_heat = hot is not None and any(t is not None and t >= hot for _s, _m, t in crushed)
        message = "%s SM clock under load fell to %d MHz of %d MHz max (below %d%%) in %d of %d samples%s" % (
            gpu_label(gpu), sm, sm_max, floor, len(crushed), len(obs),
            " while at %s C (>= %d C)" % (temp, hot) if with_heat else "")
        if with_heat:
            found.append(make_finding("FAIL", "clock_crushed", gpu["index"], message, unfit_action(options), options))
        else:
            found.append(make_finding("WARN", "clock_crushed", gpu["index"], message,
                                      "watch throughput; re-run gpu_health under load", options))
    temps = [item.get("temperature_c") for item in obs if item.get("temperature_c") is not None]
    if hot is not None and temps and max(temps) >= hot:
        found.append(make_finding(
            "WARN", "running_hot", gpu["index"],
            "%s reached %d C (threshold %d C) in %d of %d samples" % (
                gpu_label(gpu), max(temps), hot, len([t for t in temps if t >= hot]), len(obs)),
            "check cooling; expect thermal throttling under sustained load", options))
    return found


def check_link(gpu, obs, options):
    degraded = []
    for item in obs:
        if not under_load(item, gpu.get("power_limit_w")):
            continue
        gen, gen_max = item.get("pcie_gen_current"), item.get("pcie_gen_max")
        width, width_max = item.get("pcie_width_current"), item.get("pcie_width_max")
        if (gen is not None and gen_max and gen < gen_max) or (width is not None and width_max and width < width_max):
            degraded.append("Gen%s x%s (max Gen%s x%s)" % (gen, width, gen_max, width_max))
    if not degraded:
        return []
    return [make_finding(
        "WARN", "pcie_link_degraded", gpu["index"],
        "%s PCIe link under load ran at %s in %d of %d samples" % (gpu_label(gpu), degraded[0], len(degraded), len(obs)),
        "expect slower host<->GPU transfers; prefer another box for data-heavy jobs", options)]


# Memory flags that are a FAIL when set: (key of the GPU dict, which is also the finding code; message).
MEMORY_FLAGS = (
    ("retired_pages_pending", "%s has retired memory pages waiting for a driver reload"),
    ("remapped_rows_pending", "%s has a memory row remap pending (remapped rows: Pending = Yes); it needs a GPU reset"),
    ("remapped_rows_failure", "%s reports a row-remapping failure (remapped rows: Remapping Failure Occurred = Yes)"),
)


def check_memory_health(gpu, obs, options):
    found = []
    volatile = gpu.get("ecc_uncorrectable_volatile")
    if volatile:
        found.append(make_finding(
            "FAIL", "ecc_uncorrectable_volatile", gpu["index"],
            "%s has %d uncorrectable ECC errors since the driver loaded (aggregate %s)" % (
                gpu_label(gpu), volatile, gpu.get("ecc_uncorrectable_aggregate")),
            unfit_action(options), options))
    for code, text in MEMORY_FLAGS:
        if gpu.get(code):
            found.append(make_finding("FAIL", code, gpu["index"], text % gpu_label(gpu), unfit_action(options),
                                      options))
    return found


def check_modes(gpu, obs, options):
    found = []
    if gpu.get("mig_mode"):
        found.append(make_finding(
            "INFO", "mig_enabled", gpu["index"], "%s has MIG mode enabled" % gpu_label(gpu),
            "jobs see MIG slices, not the whole GPU; rent a box without MIG if you need the full GPU", options))
    if gpu.get("persistence_mode") is False:
        found.append(make_finding(
            "INFO", "persistence_off", gpu["index"], "%s has persistence mode off" % gpu_label(gpu),
            "none; the first CUDA call may take a few seconds longer", options))
    return found


GPU_CHECKS = (check_identity, check_reasons, check_clocks_and_heat, check_link, check_memory_health, check_modes)


# ---------------------------------------------------------------------------------------------------------------
# Host checks
# ---------------------------------------------------------------------------------------------------------------

def check_count(gpus, options):
    expected = options.get("expected_count")
    if expected is None or expected == len(gpus):
        return []
    return [make_finding(
        "FAIL", "gpu_count_mismatch", None,
        "host has %d GPUs, expected %d (bus ids: %s)" % (
            len(gpus), expected, ", ".join(str(gpu.get("pci")) for gpu in gpus) or "none"),
        unfit_action(options), options)]


def xid_findings(gpus, events, options=None, fail_action=None):
    """One finding per (GPU, Xid code, class), counting repeats; GPU matched through the PCI address.

    With ``fail_action`` (patrol, while a job runs) a FAIL carries that action instead of the unfit verdict."""
    by_pci = dict((gpu.get("pci"), gpu) for gpu in gpus if gpu.get("pci"))
    groups = {}
    for event in events or ():
        gpu = by_pci.get(event.get("pci"))
        key = (gpu["index"] if gpu else None, event["xid"], event["severity"], event.get("pci"))
        groups.setdefault(key, []).append(event)
    found = []
    for (index, code, severity, pci), group in sorted(groups.items(), key=lambda item: str(item[0])):
        finding_code, level = XID_CODES.get(severity, XID_CODES["app_fault"])
        gpu = by_pci.get(pci)
        who = gpu_label(gpu) if gpu else "GPU at PCI %s (not listed by nvidia-smi)" % pci
        last = group[-1]
        extra = ""
        if last.get("recovery_action"):
            extra = "; recovery action now: %s" % last["recovery_action"]
        if last.get("caused_by") is not None:
            extra += "; caused by previous Xid %d" % last["caused_by"]
        message = "%s logged Xid %d (%s) %d time(s)%s; last: %s" % (
            who, code, last.get("mnemonic", "?"), len(group), extra, last.get("line", "")[:300])
        if level == "FAIL" and fail_action:
            found.append(finding(level, finding_code, message, fail_action, gpu=index))
            continue
        action = unfit_action(options) if level == "FAIL" else last.get("action", "")
        found.append(make_finding(level, finding_code, index, message, action, options))
    return found


# ---------------------------------------------------------------------------------------------------------------
# Findings that come from the probe itself (the module builds them through these helpers)
# ---------------------------------------------------------------------------------------------------------------

def driver_unavailable(error, options, gpu=None):
    """``error`` is nvidia_smi.classify_error()'s dict."""
    message = "nvidia-smi failed: %s (%s; exit %s): %s" % (
        error.get("meaning"), error.get("kind"), error.get("rc"), error.get("evidence") or "no output")
    found = make_finding("FAIL", "driver_unavailable", gpu, message, unfit_action(options), options)
    found["error"] = error.get("kind")
    return found


# What nvidia-smi says on a box that has no GPU at all (no binary, no driver, no device): the only failures that a box
# declared GPU-less (environment_only) may show without a FAIL. Any other failure (a library mismatch, a lost GPU,
# an unsupported GPU, an unknown exit) is evidence of a GPU that is there and broken, so it stays driver_unavailable.
GPU_ABSENT_KINDS = ("command_not_found", "no_driver", "no_devices")


def gpu_absent(error):
    """Whether a classify_error() dict says that the box has no GPU at all (not that a GPU is broken)."""
    return isinstance(error, dict) and error.get("kind") in GPU_ABSENT_KINDS


def environment_only(error, options):
    """The INFO finding of a box declared GPU-less (``environment_only``) whose nvidia-smi finds none: environment
    work (pip, data preparation) may run there; training may not (AutoDL's no-GPU mode, 无卡模式)."""
    facts = (error.get("meaning"), error.get("kind"), error.get("rc"), error.get("evidence") or "no output")
    message = ("no GPU: environment-only mode (this host is declared GPU-less, trainer_gpu_expected: false, and "
               "nvidia-smi says so: %s (%s; exit %s): %s)" % facts)
    action = ("Nothing to do for environment work (pip_filtered, data preparation): launch applies the environment "
              "roles and starts no queue unless launch_no_gpu_ok is true. To train, restart the box with its GPUs "
              "and set trainer_gpu_expected back to true.")
    found = make_finding("INFO", "no_gpu_environment_only", None, message, action, options)
    found["error"] = error.get("kind")
    return found


def smi_timeout(argv, seconds, options):
    message = "nvidia-smi did not answer within %s s (%s); a hung driver usually follows a GPU fault (Xid 45/119)" % (
        seconds, " ".join(argv))
    return make_finding("FAIL", "nvidia_smi_timeout", None, message, unfit_action(options), options)


def kernel_log_unreadable(reason, options):
    message = ("kernel log unreadable (%s): Xid errors cannot be ruled out; the verdict rests only on "
               "nvidia-smi state and samples" % reason)
    return make_finding("WARN", "kernel_log_unreadable", None, message,
                        "run as root, or pass kernel_log with a readable copy of the kernel log", options)


# ---------------------------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------------------------

def evaluate(gpus, samples=(), events=(), options=None, extra_findings=()):
    """Findings and verdicts for one host.

    ``gpus``: normalised GPU dicts (nvidia_smi.parse_*), ``samples``: typed --query-gpu samples (any number,
    each with ``index``), ``events``: xid.parse_kernel_log() events, ``extra_findings``: probe findings
    (driver_unavailable, nvidia_smi_timeout, kernel_log_unreadable).
    Returns {status, findings, gpu_verdicts: {index: PASS|WARN|FAIL}}.
    """
    opts = dict(DEFAULTS)
    opts.update(dict((key, value) for key, value in (options or {}).items() if value is not None))
    findings = list(extra_findings)
    findings.extend(check_count(gpus, opts))
    for gpu in gpus:
        obs = observations(gpu, samples)
        for check in GPU_CHECKS:
            findings.extend(check(gpu, obs, opts))
    findings.extend(xid_findings(gpus, events, opts))
    verdicts = dict((gpu["index"], verdict(f["level"] for f in findings if f["gpu"] == gpu["index"])) for gpu in gpus)
    findings.sort(key=lambda f: (-rank(f["level"]), f["gpu"] if f["gpu"] is not None else -1, f["code"]))
    return {"status": verdict(f["level"] for f in findings), "findings": findings, "gpu_verdicts": verdicts}
