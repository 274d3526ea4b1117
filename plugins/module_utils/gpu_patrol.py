# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU health while a job runs: what job_status (``gpu: true``) reads of the GPUs in patrol's one SSH execution.

* ``PATROL_FIELDS``: the one ``--query-gpu`` table of a tick: utilisation and memory (``gpu_query.USAGE_FIELDS``)
  plus the PCI bus id, SM clocks, power and the active clock event ("throttle") reasons as a bitmask
  (``clocks_throttle_reasons.active``, the spelling every driver of the corpus accepts; PARSER_NOTES section 1).
  ``sample`` runs it once (a driver that rejects an added field gets one more run without it).
* ``read_sample``: the pure reading of that run: rows, or ``gpu_sample_empty`` (WARN) when nvidia-smi answered
  with no GPU row (exit 0 and nothing, or ``No devices were found``), or ``gpu_query_failed`` (WARN).
* ``throttle_findings``: ``throttle_active`` for a GPU whose hardware or thermal slowdown reason is active while
  it is busy, with gpu_findings' reasons, words and load test (an idle GPU at low clocks is not a finding).
* ``line_epoch`` / ``events_since``: the time of a kernel-log line (dmesg seconds since boot, ISO, ctime, syslog)
  and the Xid events newer than the job's start; ``xid_findings`` classes them as preflight does (``xid_fatal``,
  ``xid_app_fault``, ``xid_info``), with the action of a box that is running a job.

Standard library only; runs on the target's Python 3.8+.
"""

from __future__ import annotations

import calendar
import re
import time

from ansible_collections.remote_gpu.trainer.plugins.module_utils import gpu_findings
from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import finding
from ansible_collections.remote_gpu.trainer.plugins.module_utils.gpu_query import (
    USAGE_FIELDS, NvidiaSmiParseError, SmiError, is_no_value, parse_rows, query_args, rejected_field, run_smi,
    to_number)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.kernel_log import read_kernel_log
from ansible_collections.remote_gpu.trainer.plugins.module_utils.nvidia_smi_errors import classify_error
from ansible_collections.remote_gpu.trainer.plugins.module_utils.xid import parse_kernel_log
from ansible_collections.remote_gpu.trainer.plugins.module_utils.nvidia_smi_gpu import (
    POWER_DRAW, SM_CLOCK, SM_CLOCK_MAX, THROTTLE_REASONS, short_pci)

# Beyond USAGE_FIELDS (which the sampler sidecar shares): all exist from 465.27 to 610.x.
EXTRA_FIELDS = (
    ("name", "name", lambda raw: None if is_no_value(raw) else raw.strip()),
    ("pci.bus_id", "pci", short_pci),
    SM_CLOCK, SM_CLOCK_MAX, POWER_DRAW,
    ("power.limit", "power_limit_w", to_number),
    THROTTLE_REASONS,
)
PATROL_FIELDS = tuple(USAGE_FIELDS) + EXTRA_FIELDS
GPU_KEYS = tuple(key for _field, key, _convert in PATROL_FIELDS)
# nvidia-smi printed one of these: it runs, but it has no GPU to show (classify_error kinds)
EMPTY_KINDS = ("no_devices", "no_supported_gpus")
# The kernel log a tick reads is bounded: only its newest part can hold events since a job started.
MAX_KERNEL_LOG_CHARS = 4 * 1024 * 1024
MAX_XID_EVENTS = 50

DYING_ACTION = ("this box is dying: pull what you have now (the latest checkpoint and results; "
                "the playbook remote_gpu.trainer.teardown pulls and verifies), then rent a different box and "
                "relaunch there")
THROTTLE_ACTION = ("the job runs slower than it should on this box (preflight calls it unfit): let it write its "
                   "next checkpoint, pull what you have, and move the job to a different box")


# ---------------------------------------------------------------------------------------------------------------
# The one --query-gpu run of a tick
# ---------------------------------------------------------------------------------------------------------------

def sample(smi, timeout):
    """Run PATROL_FIELDS once -> (gpus or None, findings). A field the driver rejects (``field "x" is not a valid
    field``) is dropped and the query run again, without it; USAGE_FIELDS are never dropped. Raises SmiError when
    nvidia-smi is not installed or ran past ``timeout``."""
    table = list(PATROL_FIELDS)
    while True:
        rc, out, err = run_smi(smi, query_args(table), timeout, check=False)
        rejected = rejected_field(out + "\n" + err) if rc else None
        if rejected and rejected in [field for field, _key, _convert in EXTRA_FIELDS] \
                and rejected in [field for field, _key, _convert in table]:
            table = [entry for entry in table if entry[0] != rejected]
            continue
        return read_sample(rc, out, err, table)


def read_sample(rc, out, err, table=PATROL_FIELDS):
    """One ``--query-gpu`` run of ``table`` -> (gpus or None, findings); each GPU has every key of GPU_KEYS."""
    error = classify_error(out + "\n" + err, rc)
    if error and error["kind"] in EMPTY_KINDS:
        return [], [sample_empty("nvidia-smi printed %r (exit %s)" % (error["evidence"], rc))]
    if rc:
        last = (err.strip() or out.strip() or "no output").splitlines()[-1].strip()
        return None, [query_failed("nvidia-smi exited %d: %s" % (rc, last))]
    try:
        rows = parse_rows(out, table)
    except NvidiaSmiParseError as exc:
        return None, [query_failed("nvidia-smi printed no usable rows: %s" % exc)]
    if not rows:
        return [], [sample_empty("nvidia-smi --query-gpu exited 0 and printed no GPU row")]
    return [dict((key, row.get(key)) for key in GPU_KEYS) for row in rows], []


def sample_empty(evidence):
    return finding(
        "WARN", "gpu_sample_empty", "the GPU sample came back empty: %s; the job's GPUs are not visible" % evidence,
        "Run remote_gpu.trainer.gpu_health (the playbook remote_gpu.trainer.preflight) on this host: a GPU that "
        "fell off the bus or a container that lost its devices looks like this. If it sees no GPU either, pull what "
        "you have and rent a different box.")


def query_failed(message):
    return finding("WARN", "gpu_query_failed", message, "Run remote_gpu.trainer.gpu_health to classify the driver error.")


# ---------------------------------------------------------------------------------------------------------------
# Clock event reasons under load
# ---------------------------------------------------------------------------------------------------------------

def throttle_findings(gpus):
    """``throttle_active`` (FAIL) for each GPU with a slowdown reason of gpu_findings.THROTTLE_REASONS active while
    it is under load (gpu_findings.under_load: utilisation at LOAD_UTIL_PCT or more, or, without a utilisation, a
    power draw at LOAD_POWER_SHARE of the limit; never while the GPU reports itself idle)."""
    found = []
    for gpu in gpus or ():
        reasons = gpu.get("throttle_reasons") or ()
        active = [name for name in gpu_findings.THROTTLE_REASONS if name in reasons]
        obs = {"throttle_reasons": reasons, "utilization_gpu_pct": gpu.get("utilization_pct"),
               "power_draw_w": gpu.get("power_draw_w"), "power_limit_w": gpu.get("power_limit_w")}
        if not active or not gpu_findings.under_load(obs):
            continue
        load = []
        if gpu.get("utilization_pct") is not None:
            load.append("utilisation %d %%" % gpu["utilization_pct"])
        if gpu.get("power_draw_w") is not None:
            load.append("%s W of %s W" % (gpu["power_draw_w"], gpu.get("power_limit_w")))
        if gpu.get("sm_clock_mhz") is not None:
            load.append("SM clock %d of %s MHz" % (gpu["sm_clock_mhz"], gpu.get("sm_clock_max_mhz")))
        found.append(finding(
            "FAIL", "throttle_active",
            "%s is being throttled by hardware/thermal limits under load (%s): %s active" % (
                gpu_findings.gpu_label(gpu), ", ".join(load),
                ", ".join(gpu_findings.REASON_WORDS[name] for name in active)),
            THROTTLE_ACTION, gpu=gpu.get("index"), reasons=active))
    return found


# ---------------------------------------------------------------------------------------------------------------
# Xid events since the job started
# ---------------------------------------------------------------------------------------------------------------

_MONTHS = dict((name, number) for number, name in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1))
# dmesg: `[ 1843.308145] NVRM: ...` (also inside a syslog line), seconds since boot
_BOOT_SECONDS_RE = re.compile(r"^(?:.*?\s)?\[\s*(\d+\.\d+)\](?:\s|$)")
# journalctl -o short-iso `2026-07-03T22:11:09+0000`, dmesg --time-format iso `2025-01-21T04:41:44,283302+00:00`
_ISO_RE = re.compile(r"(?:^|\s)(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,]\d+)?"
                     r"(Z|[+-]\d{2}:?\d{2})?(?=\s|$)")
# dmesg -T / --ctime `[Fri Aug 30 11:11:22 2024]`
_CTIME_RE = re.compile(r"^\[\w{3} (\w{3}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})\]")
# syslog / journalctl short `Apr 19 13:16:41 host kernel:` (no year)
_SYSLOG_RE = re.compile(r"^(\w{3}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) ")


def _local_epoch(year, month, day, hour, minute, second):
    try:
        return time.mktime((year, month, day, hour, minute, second, 0, 0, -1))
    except (OverflowError, ValueError):
        return None


def line_epoch(line, boot_epoch, now):
    """When a kernel-log line was written (seconds since the epoch), or None when the line says no time.

    Seconds since boot (``[ 1843.308145]``, dmesg's own stamp, preferred where a syslog line has both) need
    ``boot_epoch``; an ISO time with an offset is exact; an ISO time without one, a ctime and a syslog time are
    local time, and a syslog time (no year) is taken in the latest year that does not put it after ``now``.
    """
    text = line or ""
    # every stamp comes before the driver's "NVRM:" marker: the message itself is never read for a time
    text = text.split("NVRM:", 1)[0] if "NVRM:" in text else text[:80]
    match = _BOOT_SECONDS_RE.match(text)
    if match:
        return boot_epoch + float(match.group(1)) if boot_epoch is not None else None
    match = _ISO_RE.search(text)
    if match:
        parts = [int(part) for part in match.groups()[:6]]
        zone = match.group(7)
        if zone is None:
            return _local_epoch(*parts)
        try:
            epoch = calendar.timegm(tuple(parts) + (0, 0, 0))
        except (OverflowError, ValueError):
            return None
        if zone != "Z":
            digits = zone[1:].replace(":", "")
            offset = int(digits[:2]) * 3600 + int(digits[2:]) * 60
            epoch -= offset if zone[0] == "+" else -offset
        return epoch
    match = _CTIME_RE.match(text)
    if match and match.group(1) in _MONTHS:
        return _local_epoch(int(match.group(6)), _MONTHS[match.group(1)], int(match.group(2)),
                            int(match.group(3)), int(match.group(4)), int(match.group(5)))
    match = _SYSLOG_RE.match(text)
    if match and match.group(1) in _MONTHS:
        year = time.localtime(now).tm_year
        for candidate in (year, year - 1):
            epoch = _local_epoch(candidate, _MONTHS[match.group(1)], int(match.group(2)), int(match.group(3)),
                                 int(match.group(4)), int(match.group(5)))
            if epoch is not None and epoch <= now + 86400:
                return epoch
    return None


def bound_log(text):
    """The newest MAX_KERNEL_LOG_CHARS of a kernel log, from its first whole line."""
    if text is None or len(text) <= MAX_KERNEL_LOG_CHARS:
        return text
    tail = text[-MAX_KERNEL_LOG_CHARS:]
    return tail[tail.find("\n") + 1:]


def events_since(events, since_epoch, boot_epoch, now):
    """The Xid events (xid.parse_kernel_log) written at or after ``since_epoch``, each with its ``epoch``; an event
    whose line says no time cannot be shown to be new and is left out."""
    found = []
    for event in events or ():
        epoch = line_epoch(event.get("line"), boot_epoch, now)
        if epoch is not None and epoch >= since_epoch:
            found.append(dict(event, epoch=round(epoch, 3)))
    return found


def xid_findings(gpus, events):
    """Preflight's classes and codes for the new events (gpu_findings.xid_findings: one finding per GPU, Xid code
    and class), with the action of a box that runs a job: ``xid_fatal`` says pull what you have, then re-rent."""
    return gpu_findings.xid_findings(gpus or [], events, fail_action=DYING_ACTION)


def kernel_log_unreadable(reason):
    """INFO, once per tick: preflight (gpu_health) already warns about a box whose kernel log cannot be read."""
    return finding("INFO", "kernel_log_unreadable",
                   "kernel log unreadable (%s): Xid errors since the job started cannot be checked" % reason,
                   "Nothing to do for the job; run patrol as root (or a user allowed to read the kernel log) to "
                   "see Xid errors, or pass kernel_log with a readable copy.")


def job_start(metas):
    """The earliest ``launched_epoch`` of the jobs' trusted meta records, or None when none has one."""
    starts = [meta.get("launched_epoch") for meta in metas if isinstance(meta, dict)]
    starts = [value for value in starts if isinstance(value, (int, float)) and not isinstance(value, bool)]
    return min(starts) if starts else None


def query(module, timeout):
    """(gpus or None, findings) of the one --query-gpu run (``sample``)."""
    try:
        return sample(module.get_bin_path("nvidia-smi"), timeout)
    except SmiError as exc:
        if exc.kind == "not_installed":
            return None, [finding("INFO", "gpu_unavailable", "%s or not on PATH" % exc,
                                  "Nothing to do on a CPU-only box; otherwise check the driver.")]
        if exc.kind == "timeout":
            return None, [finding("WARN", "gpu_query_timeout", str(exc),
                                  "Run remote_gpu.trainer.gpu_health; a hung nvidia-smi often means a GPU fault.")]
        return None, [query_failed(str(exc))]


def new_xid_events(module, source, timeout, gpus, since, boot_epoch, now):
    """(events written since ``since``, findings) from the kernel log, read as gpu_health reads it (journalctl -k,
    else dmesg, or the file ``source`` names). kernel_log.KernelLogError for a ``source`` that cannot be used."""
    if source == "none" or since is None:
        return [], []
    text, unreadable = read_kernel_log(module, source, timeout)
    if text is None:
        return [], [kernel_log_unreadable(unreadable)]
    events = events_since(parse_kernel_log(bound_log(text)), since, boot_epoch, now)
    return events[-MAX_XID_EVENTS:], xid_findings(gpus, events)


def probe(module, timeout, kernel_source, metas, boot_epoch, now):
    """The GPU part of patrol's one probe -> (gpus or None, findings, new Xid events, the epoch they count from):
    the --query-gpu sample, slowdown under load, and the Xid events written since the jobs started."""
    gpus, findings = query(module, timeout)
    findings = findings + throttle_findings(gpus)
    # no nvidia-smi, no NVIDIA driver to log an Xid: a CPU-only box is not asked for its kernel log every tick
    if any(f["code"] == "gpu_unavailable" for f in findings):
        return gpus, findings, [], None
    since = job_start(metas)
    events, xid_notes = new_xid_events(module, kernel_source, timeout, gpus, since, boot_epoch, now)
    return gpus, findings + xid_notes, events, since
