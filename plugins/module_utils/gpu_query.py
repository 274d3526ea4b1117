# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one adapter for nvidia-smi's CSV queries: running them and reading their rows.

* ``run_smi`` runs nvidia-smi (argv, C locale, timeout) and raises ``SmiError`` with the one wording of its
  failures: ``nvidia-smi is not installed``, ``nvidia-smi timed out after N s``, ``nvidia-smi exited N: <last line>``.
* ``query_gpus`` asks ``--query-gpu=<fields> --format=csv,noheader,nounits`` and types the rows with a table of
  ``(field, key, converter)``; ``parse_query_csv`` and ``parse_rows`` are its pure halves.
* ``compute_apps`` asks ``--query-compute-apps``; ``parse_compute_apps`` is its pure half.

The value converters (``is_no_value``, ``to_number``, ``to_int``) live here because every reader of nvidia-smi
output needs them; the ``-q``/``-q -x`` full-state parsers (``nvidia_smi_*.py``) import them from here.
Standard library only, Python 3.8+: the sampler sidecar runs it on the box.
"""

from __future__ import annotations

import re

from ansible_collections.remote_gpu.trainer.plugins.module_utils.command import run_with_timeout

KILL_GRACE_SECONDS = 2
COMPUTE_APPS_QUERY = ["--query-compute-apps=pid,used_memory,process_name", "--format=csv,noheader,nounits"]

_NO_VALUE_WORDS = frozenset((
    "", "n/a", "na", "not supported", "unknown", "unknown error", "requested functionality has been deprecated",
    "function not found", "-", "err!", "insufficient permissions",
))
_NUMBER_RE = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)")
# how nvidia-smi names a --query-gpu field its driver does not know (the emulator keeps the same phrase)
_REJECTED_FIELD_RE = re.compile(r"field\s+[\"']([^\"']+)[\"']\s+is not a valid field", re.I)


class NvidiaSmiParseError(ValueError):
    """Raised when an nvidia-smi output cannot be parsed at all."""


class SmiError(Exception):
    """nvidia-smi could not be asked. ``kind`` is ``not_installed``, ``timeout`` or ``failed``; ``str()`` is the
    message every module shows."""

    def __init__(self, kind, message, rc=None):
        super().__init__(message)
        self.kind = kind
        self.rc = rc


# ---------------------------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------------------------

def is_no_value(raw):
    """True for every "no value" spelling: None, `N/A`, `[N/A]`, `[Not Supported]`, any `[...]`, ..."""
    if raw is None:
        return True
    text = raw.strip()
    if text.startswith("[") and text.endswith("]"):
        return True
    return text.lower() in _NO_VALUE_WORDS


def to_number(raw):
    """Leading number of a value (`81559 MiB`, `67.74 W`, `16x`, `0 %`) as int or float; None when absent."""
    if is_no_value(raw):
        return None
    match = _NUMBER_RE.match(raw)
    if not match:
        return None
    text = match.group(1)
    return float(text) if "." in text else int(text)


def to_int(raw):
    value = to_number(raw)
    return None if value is None else int(value)


# ---------------------------------------------------------------------------------------------------------------
# Running nvidia-smi
# ---------------------------------------------------------------------------------------------------------------

def run_smi(smi, args, timeout, check=True):
    """Run ``smi`` (its path, or None when it was not found) with ``args`` -> ``(rc, stdout, stderr)``.

    Raises SmiError when it is not installed or ran past ``timeout`` seconds, and with ``check`` when it exited
    non-zero (the message quotes the last line it printed).
    """
    if not smi:
        raise SmiError("not_installed", "nvidia-smi is not installed", 127)
    rc, out, err = run_with_timeout([smi] + list(args), timeout, grace=KILL_GRACE_SECONDS)
    if rc is None:
        raise SmiError("timeout", "nvidia-smi timed out after %s s" % timeout)
    if check and rc != 0:
        last = (err.strip() or out.strip() or "no output").splitlines()[-1].strip()
        raise SmiError("failed", "nvidia-smi exited %d: %s" % (rc, last), rc)
    return rc, out, err


def rejected_field(text):
    """The field named by nvidia-smi's ``field "x" is not a valid field`` message in ``text``, or None."""
    match = _REJECTED_FIELD_RE.search(text or "")
    return match.group(1) if match else None


def query_args(table):
    """The argv tail of a ``--query-gpu`` run of a ``(field, key, converter)`` table."""
    return ["--query-gpu=" + ",".join(field for field, _key, _convert in table), "--format=csv,noheader,nounits"]


def query_gpus(smi, table, timeout):
    """One ``--query-gpu`` run of ``table`` -> typed rows; raises SmiError (unreadable output included)."""
    _rc, out, _err = run_smi(smi, query_args(table), timeout)
    try:
        return parse_rows(out, table)
    except NvidiaSmiParseError as exc:
        raise SmiError("failed", "nvidia-smi printed no usable rows: %s" % exc)


def compute_apps(smi, timeout):
    """The compute apps nvidia-smi lists -> [{pid, used_memory_mib, process_name}]; raises SmiError."""
    _rc, out, _err = run_smi(smi, COMPUTE_APPS_QUERY, timeout)
    return parse_compute_apps(out)


# ---------------------------------------------------------------------------------------------------------------
# `--query-gpu=... --format=csv,noheader[,nounits]`
# ---------------------------------------------------------------------------------------------------------------

# A column of a table is (field, key, converter). Columns that several tables read are defined once: here, and in
# nvidia_smi_gpu.py (those that need its converters).
INDEX = ("index", "index", to_int)
UTILIZATION = ("utilization.gpu", "utilization_pct", to_int)
MEMORY_USED = ("memory.used", "memory_used_mib", to_int)

# What job_status and the sampler read of each GPU.
USAGE_FIELDS = (INDEX, UTILIZATION, MEMORY_USED, ("memory.total", "memory_total_mib", to_int))


def parse_query_csv(text, fields):
    """Split `--query-gpu` CSV rows by position (the order requested) into ``{field: raw or None}`` dicts.

    ``fields`` is the list of requested field names. Every "no value" spelling becomes None. A header line
    (when `noheader` was not used) and blank lines are skipped; a row with the wrong number of cells raises
    NvidiaSmiParseError.
    """
    fields = list(fields)
    rows = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(", ")]
        if len(cells) != len(fields):
            raise NvidiaSmiParseError("query row has %d values for %d fields: %r" % (len(cells), len(fields), line))
        if cells[0].split(" [")[0] == fields[0]:
            continue  # header line
        rows.append(dict((name, None if is_no_value(cell) else cell) for name, cell in zip(fields, cells)))
    return rows


def parse_rows(text, table):
    """Parse one `--query-gpu` run of ``table`` (``(field, key, converter)`` triples) into typed dicts."""
    rows = parse_query_csv(text, [field for field, _key, _convert in table])
    return [dict((key, convert(row[field])) for field, key, convert in table) for row in rows]


# ---------------------------------------------------------------------------------------------------------------
# `--query-compute-apps=...`
# ---------------------------------------------------------------------------------------------------------------

def parse_compute_apps(text):
    """``nvidia-smi --query-compute-apps`` CSV -> [{pid, used_memory_mib, process_name}].

    Reads our query (``pid,used_memory,process_name`` with ``noheader,nounits``) and, when a header line is present,
    any field order (the captures in tests/fixtures/nvidia/compute-apps). Process names may contain commas, so the
    pid is taken from the left (its column index) and the memory from the right.
    """
    rows = []
    pid_col, has_header = 0, False
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if not has_header and not rows and "pid" in [cell.lower() for cell in cells]:
            pid_col, has_header = [cell.lower() for cell in cells].index("pid"), True
            continue
        if len(cells) <= pid_col or not cells[pid_col].isdigit():
            continue
        if has_header:
            name = ", ".join(cells[pid_col + 1:-1])
            memory = to_int(cells[-1])
        else:
            memory = to_int(cells[1]) if len(cells) > 1 else None
            name = ", ".join(cells[2:])
        rows.append({"pid": int(cells[pid_col]), "used_memory_mib": memory, "process_name": name})
    return rows
