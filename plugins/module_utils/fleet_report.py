# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet table and verdict shared by preflight and patrol (pure functions, controller side)."""

from __future__ import annotations

# Verdicts that make the run exit non-zero; WARN joins them in strict mode.
FAILING = ("FAIL", "UNREACHABLE", "NO_RESULT")

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


def no_result_row(host, platform):
    """A host that produced no record: it failed or was unreachable before the probe ran."""
    return {"host": host, "platform": platform, "gpus": "-", "verdict": "NO_RESULT",
            "data_bytes_pct": None, "data_inodes_pct": None, "durable_inodes_pct": None,
            "top_finding": "no result: the host failed or was unreachable earlier in the run (see above)",
            "findings": []}


_RANK = {"PASS": 0, "INFO": 0, "WARN": 1, "FAIL": 2}


def gpu_summary(gpus):
    """'8x NVIDIA H100 80GB HBM3' (several models joined with ' + '); '-' when none."""
    counts = {}
    for gpu in gpus or []:
        name = gpu.get("name") or "unknown GPU"
        counts[name] = counts.get(name, 0) + 1
    return " + ".join("%dx %s" % (n, name) for name, n in counts.items()) or "-"


def _usage_of(storage, path):
    for usage in (storage or {}).get("paths", []):
        if usage.get("path") == path:
            return usage
    return {}


def row_from_record(host, record):
    """One table row from what the probing play recorded for a host.

    ``record`` holds ``platform``, ``data_dir``, ``durable_dir``, the raw ``storage`` (inode_check) and
    ``gpu`` (gpu_health) results, and ``findings`` (all of them), or ``unreachable: true`` and ``msg``.
    """
    platform = record.get("platform") or "-"
    if record.get("unreachable"):
        row = no_result_row(host, platform)
        row.update(verdict="UNREACHABLE", top_finding="unreachable: %s" % (record.get("msg") or "no answer"))
        return row
    findings = sorted(record.get("findings") or [], key=lambda f: -_RANK.get(f.get("level"), 0))
    worst = findings[0]["level"] if findings and _RANK.get(findings[0]["level"], 0) > 0 else "PASS"
    top = findings[0] if findings and _RANK.get(findings[0]["level"], 0) > 0 else None
    data = _usage_of(record.get("storage"), record.get("data_dir"))
    durable = _usage_of(record.get("storage"), record.get("durable_dir"))
    return {
        "host": host,
        "platform": platform,
        "gpus": gpu_summary((record.get("gpu") or {}).get("gpus")),
        "verdict": worst,
        "data_bytes_pct": data.get("bytes_pct"),
        "data_inodes_pct": data.get("inodes_pct"),
        "durable_inodes_pct": durable.get("inodes_pct"),
        "top_finding": ("%s: %s" % (top["code"], top["message"])) if top else "-",
        "findings": findings,
    }


def _cell(value):
    if value is None:
        return "-"
    if isinstance(value, int) and not isinstance(value, bool):
        return "%d%%" % value
    return str(value)


def render_table(rows, max_finding=90):
    """Fixed-width text table, one line per host, in the order given."""
    header = [title for _key, title in COLUMNS]
    body = []
    for row in rows:
        cells = [_cell(row.get(key)) for key, _title in COLUMNS]
        if len(cells[-1]) > max_finding:
            cells[-1] = cells[-1][:max_finding - 3] + "..."
        body.append(cells)
    widths = [max(len(line[i]) for line in [header] + body) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in [header] + body]
    return lines


def failing_hosts(rows, strict=False):
    """Hosts whose verdict makes the run fail; WARN counts only when ``strict``."""
    bad = FAILING + (("WARN",) if strict else ())
    return [row["host"] for row in rows if row["verdict"] in bad]


def summary(rows):
    """Count of hosts per verdict, for the report and the last line of the table."""
    counts = {}
    for row in rows:
        counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
    return counts
