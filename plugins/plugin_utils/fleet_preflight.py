# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Preflight's row of the fleet table, from the raw result of a host's preflight_probe task (or of its inode_check,
gpu_health and env_audit tasks) (pure functions, controller side)."""

from __future__ import annotations

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import fleet_table
from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import rank, sort_findings, worst

COLUMNS = (
    ("host", "HOST"),
    ("platform", "PLATFORM"),
    ("gpus", "GPUS"),
    ("verdict", "VERDICT"),
    ("data_bytes_pct", "DATA%B"),
    ("data_inodes_pct", "DATA%I"),
    ("durable_inodes_pct", "DURABLE%I"),
    ("top_finding", "TOP FINDING"),
)

# The probe tasks of preflight in the order they run, and the order their findings are listed in a row.
PROBES = ("storage", "gpu", "env")
# The module each probe task calls, named in the finding of a probe that failed.
PROBE_MODULES = {"storage": "inode_check", "gpu": "gpu_health", "env": "env_audit"}
# The module that runs all three checks in one SSH execution; its result holds each check's under PROBE_MODULES' names.
ONE_PROBE = "preflight_probe"
# The order of the findings in a row (the first finding at the worst level is the top finding).
FINDINGS_ORDER = ("gpu", "storage", "env")


# The GPUS column of a host in environment-only mode (declared GPU-less and without a GPU: gpu_health's
# environment_only)
ENVIRONMENT_ONLY = "no GPU: environment-only mode"


def gpu_summary(gpus, environment_only=False):
    """'8x NVIDIA H100 80GB HBM3' (several models joined with ' + '); '-' when none, ENVIRONMENT_ONLY when the GPU
    check found the box in environment-only mode."""
    if environment_only is True:
        return ENVIRONMENT_ONLY
    counts = {}
    for gpu in gpus if isinstance(gpus, list) else []:
        if not isinstance(gpu, dict):
            continue
        name = gpu.get("name") or "unknown GPU"
        counts[name] = counts.get(name, 0) + 1
    return " + ".join("%dx %s" % (n, name) for name, n in counts.items()) or "-"


def split_probe(result):
    """The storage, gpu and env results inside a preflight_probe result -> ({probe: result}, finding or None).

    A probe that did not answer or failed as a whole (no interpreter, a timeout, a wrong parameter) stands for each
    check it returned no result of, so the row says why; a host that never ran it has None for all three. A probe
    that succeeded without a check's result cannot be judged: the ``malformed_result`` finding."""
    if result is not None and not isinstance(result, dict):  # a registered string is not "failed earlier"
        return dict.fromkeys(PROBES), fleet_table.malformed_result(ONE_PROBE, "the result is %s, not a mapping: %r" % (
            type(result).__name__, result))
    if not isinstance(result, dict):
        return dict.fromkeys(PROBES), None
    parts = dict((probe, result.get(PROBE_MODULES[probe])) for probe in PROBES)
    missing = [PROBE_MODULES[probe] for probe in PROBES if not isinstance(parts[probe], dict)]
    if result.get("unreachable") or result.get("failed"):
        return dict((probe, part if isinstance(part, dict) else result) for probe, part in parts.items()), None
    if missing:
        return parts, fleet_table.malformed_result(ONE_PROBE, "it holds no %s result" % " or ".join(missing))
    return parts, None


def _probe_problem(host, record):
    """The row of a host whose probes did not all run to the end, or None when they did.

    A probe without a result means the host failed before it (NO_RESULT); the first probe that was unreachable or
    failed decides the row (UNREACHABLE, or FAIL with the probe-failure finding)."""
    platform = record.get("platform") or "-"
    for probe in PROBES:
        result = record.get(probe)
        if result is not None and not isinstance(result, dict):  # a registered string is not "failed earlier"
            return _row(host, dict(record, **{probe: None}), [fleet_table.malformed_result(
                record.get("module") or PROBE_MODULES[probe], "the result is %s, not a mapping: %r" % (
                    type(result).__name__, result))])
        if not isinstance(result, dict):
            return fleet_table.no_result_row(host, platform)
        if result.get("unreachable"):
            return fleet_table.unreachable_row(host, platform, result)
        if result.get("failed"):
            problem = fleet_table.probe_failure(result, "preflight", probe=record.get("module") or PROBE_MODULES[probe],
                                                interpreter=record.get("interpreter"), platform=record.get("platform"))
            return _row(host, record, [problem])
    return None


def _row(host, record, findings):
    findings = sort_findings(findings)
    top = findings[0] if findings and rank(findings[0].get("level")) > 0 else None
    data = fleet_table.usage_of(record.get("storage"), record.get("data_dir"))
    durable = fleet_table.usage_of(record.get("storage"), record.get("durable_dir"))
    gpu = record.get("gpu") if isinstance(record.get("gpu"), dict) else {}
    return {
        "host": host,
        "platform": record.get("platform") or "-",
        "gpus": gpu_summary(gpu.get("gpus"), gpu.get("environment_only")),
        "verdict": worst(findings),
        "data_bytes_pct": data.get("bytes_pct"),
        "data_inodes_pct": data.get("inodes_pct"),
        "durable_inodes_pct": durable.get("inodes_pct"),
        "top_finding": ("%s: %s" % (top.get("code"), top.get("message"))) if top else "-",
        "findings": findings,
    }


def preflight_row(host, record):
    """One preflight row from what a host's probe tasks returned.

    ``record`` holds the host's profile (``platform``, ``data_dir``, ``durable_dir``, ``interpreter``) and either
    ``probe``, the raw registered result of preflight_probe, or the raw registered results ``storage``
    (inode_check), ``gpu`` (gpu_health) and ``env`` (env_audit); None for a task that never ran. The verdict is the
    worst finding level; the top finding is the first finding at that level (GPU findings first, then storage, then
    environment).
    """
    if "probe" in record:
        parts, malformed = split_probe(record["probe"])
        if malformed:
            usable = dict((probe, part if isinstance(part, dict) else None) for probe, part in parts.items())
            return _row(host, dict(record, **usable), [malformed])
        record = dict(record, module=ONE_PROBE, **parts)
    problem = _probe_problem(host, record)
    if problem is not None:
        return problem
    findings = []
    for probe in FINDINGS_ORDER:
        good, problem = fleet_table.mappings(record[probe].get("findings"), PROBE_MODULES[probe], "findings",
                                             fleet_table.is_finding)
        findings += good + ([problem] if problem else [])
    return _row(host, record, findings)
