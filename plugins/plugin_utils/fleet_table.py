# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet table shared by preflight and patrol (pure functions, controller side): rows for hosts that gave no
answer, the probe-failure classification, the fixed-width table, the verdict counts and the failing hosts."""

from __future__ import annotations

import math

from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import finding

# Verdicts that make the run exit non-zero; WARN joins them in strict mode.
FAILING = ("FAIL", "UNREACHABLE", "NO_RESULT")

NO_RESULT = "no result: the host failed or was unreachable earlier in the run (see above)"


def no_result_row(host, platform):
    """A host that produced no result: it failed or was unreachable before the probe ran."""
    return {"host": host, "platform": platform, "gpus": "-", "verdict": "NO_RESULT",
            "data_bytes_pct": None, "data_inodes_pct": None, "durable_inodes_pct": None,
            "top_finding": NO_RESULT, "findings": []}


def unreachable_text(result):
    """Why a host did not answer, on one line, without Ansible's ``Task failed:`` prefix."""
    msg = clip(result.get("msg") or "no answer", 200)
    return msg[len("Task failed: "):] if msg.startswith("Task failed: ") else msg


def unreachable_row(host, platform, result):
    """A host whose probe task came back unreachable."""
    row = no_result_row(host, platform)
    row.update(verdict="UNREACHABLE", top_finding="unreachable: %s" % unreachable_text(result))
    return row


def probe_failure(result, run, probe="the probe", interpreter=None, platform=None, timeout_hint=None):
    """The FAIL finding for a probe task that did not run to the end: ``probe_timeout`` (the task's timeout),
    ``interpreter_missing`` (the profile's Python does not run on the box) or ``probe_failed`` (anything else).

    ``run`` names the playbook to run again, ``probe`` the module that failed, ``interpreter`` and ``platform``
    the host's profile interpreter and profile name, ``timeout_hint`` the variable that raises the timeout."""
    msg = result.get("msg") or "%s failed" % probe
    if result.get("timedout") or "timed out" in msg:
        return finding("FAIL", "probe_timeout", "%s did not answer in time: %s" % (probe, msg),
                       "Look at the box (a hung filesystem or nvidia-smi)%s." % (
                           "; raise %s if it is slow" % timeout_hint if timeout_hint else ""))
    stderr = result.get("module_stderr") or ""
    if result.get("rc") == 127 or "No such file" in stderr:
        named = "the profile interpreter %s" % interpreter if interpreter else "the profile interpreter"
        return finding("FAIL", "interpreter_missing",
                       "%s does not run on the box: %s" % (named, clip(stderr or msg, 200)),
                       "Set trainer_interpreter for this host%s to a Python that exists there." % (
                           " (profile %s)" % platform if platform else ""))
    return finding("FAIL", "probe_failed", clip(msg, 300),
                   "Read the task output above, fix the cause, and run %s again." % run)


def usage_of(result, path):
    """The entry of ``path`` in the ``paths`` of an inode_check or job_status result ({} when absent or malformed)."""
    paths = (result or {}).get("paths")
    for usage in paths if isinstance(paths, list) else []:
        if isinstance(usage, dict) and usage.get("path") == path:
            return dict((key, number(value) if key.endswith("_pct") else value) for key, value in usage.items())
    return {}


def number(value):
    """``value`` when it is a real number (an int, or a finite float; not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def integer(value):
    """number() as an int (truncated), or None."""
    value = number(value)
    return None if value is None else int(value)


def is_finding(item):
    """A finding a row can use: a mapping whose level, when present, is text."""
    return isinstance(item, dict) and isinstance(item.get("level", ""), str)


def malformed_result(probe, what):
    """The FAIL finding of a probe result that the table cannot read: the host cannot be judged."""
    return finding("FAIL", "malformed_result", "the result of %s is malformed: %s" % (probe, clip(what, 200)),
                   "Check that result_vars names the variable registered by the %s task (and that nothing else "
                   "overwrites it); this host cannot be judged until it does." % probe)


def mappings(items, probe, key, valid=None):
    """The usable entries of the list ``items`` (``key`` of a ``probe`` result) -> (entries, malformed_result
    finding or None). None and [] are empty; anything but a list, and entries that are not mappings (or fail
    ``valid``), make the finding."""
    valid = valid or (lambda item: isinstance(item, dict))
    if items is None:
        return [], None
    if not isinstance(items, list):
        return [], malformed_result(probe, "%s is %s, not a list: %r" % (key, type(items).__name__, items))
    good = [item for item in items if valid(item)]
    bad = [item for item in items if not valid(item)]
    if not bad:
        return good, None
    return good, malformed_result(probe, "%d of its %s are not mappings: %s" % (
        len(bad), key, ", ".join(repr(item) for item in bad[:3])))


def clip(text, width):
    """``text`` on one line, cut to ``width`` characters with ``...``."""
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:width - 3] + "..."


def _cell(value):
    if value is None:
        return "-"
    if isinstance(value, int) and not isinstance(value, bool):
        return "%d%%" % value
    return str(value)


def render_table(rows, columns, max_finding=90):
    """Fixed-width text table, one line per host, in the order given; the last column is truncated.

    ``columns`` is a sequence of (row key, title) pairs."""
    header = [title for _key, title in columns]
    body = []
    for row in rows:
        cells = [_cell(row.get(key)) for key, _title in columns]
        if len(cells[-1]) > max_finding:
            cells[-1] = cells[-1][:max_finding - 3] + "..."
        body.append(cells)
    widths = [max(len(line[i]) for line in [header] + body) for i in range(len(header))]
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in [header] + body]


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


def footer(title, counts):
    """The line under the table: ``preflight: 4 host(s): FAIL 1, PASS 2, UNREACHABLE 1``."""
    return "%s: %d host(s): %s" % (title, sum(counts.values()),
                                   ", ".join("%s %d" % (k, v) for k, v in sorted(counts.items())) or "none")
