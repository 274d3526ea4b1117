# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet history on the controller (controller side): one compact JSON record per host and run, appended to
``<history_dir>/<host>.jsonl`` by every preflight and patrol run, read back (bounded) for the dashboard, and
compacted beyond the full-resolution window.

* ``history_record`` turns a fleet_report row into a record (pure).
* ``compact`` thins old records (pure): every record of the last ``RETENTION[0]`` seconds is kept, then the last
  record of each hour, then of each day; older ones are dropped. A year of five-minute ticks over 20 hosts stays
  within about 25 MB (see tests/unit/plugins/plugin_utils/test_fleet_history.py).
* ``parse_lines`` reads the text of a history file (pure): a torn or unreadable line (a tick killed mid-write) is
  skipped with a warning.
* ``history_file``, ``append_record``, ``read_history`` and ``rewrite_history`` touch the files. A host name is
  untrusted: it becomes a file name of safe characters (plus a hash of the name when anything was replaced); a name
  with a path separator or a NUL is refused. Files are opened with O_NOFOLLOW, so a symlink planted in the history
  directory is never followed out of it; reads are bounded (``MAX_BYTES`` per file, ``MAX_LINE`` per line).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
import time

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None

from ansible_collections.remote_gpu.trainer.plugins.module_utils.atomic import replacing
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.fleet_preflight import gpu_summary
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.fleet_table import integer as _int, number as _num
from ansible_collections.remote_gpu.trainer.plugins.module_utils import safe_read
from ansible_collections.remote_gpu.trainer.plugins.module_utils.redact import environ_secrets, redact_data

VERSION = 1
SUFFIX = ".jsonl"
LOCK_NAME = ".lock"
# How long a run waits for the history lock that another run holds before it gives up on writing the history
LOCK_WAIT = 10
# (age in seconds beyond which, bucket in seconds): records younger than the first age are all kept; between the
# first and the second age, the last record of each hour; up to the third, the last of each day; older are dropped.
RETENTION = ((7 * 86400, 3600), (90 * 86400, 86400), (730 * 86400, None))
# Rewrite a history file when compaction would drop at least this many records (about a day of 5-minute ticks).
COMPACT_MIN_DROP = 288
MAX_BYTES = 64 * 1024 * 1024  # a history file is read from its last MAX_BYTES only
MAX_LINE = 64 * 1024          # a longer line is not a record
TEXT_WIDTH = 300              # top finding message and action, clipped
# Keys dropped from compacted (hourly, daily) records: the words are only shown for the latest record.
WORDY = ("msg", "action", "jobs")
# What a compacted record keeps of each job (by_job): what its charts draw.
SLIM_JOB_KEYS = ("done", "total", "prog", "prog_total")
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


class HistoryError(Exception):
    """A host name that cannot be a history file, or a history file that cannot be opened safely."""


def _clip(text, width=TEXT_WIDTH):
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:width - 3] + "..."


def file_name(host):
    """The history file name of ``host``: its safe characters (``[A-Za-z0-9._-]``, at most 80), plus ``-`` and 8
    hex digits of its sha256 when anything had to be replaced or cut, so two hosts never share a file.

    Raises HistoryError for a name that is empty, not text, or holds a path separator or a NUL."""
    if not isinstance(host, str) or not host.strip():
        raise HistoryError("host name %r cannot name a history file" % (host,))
    if "/" in host or "\\" in host or "\0" in host:
        raise HistoryError("host name %r holds a path separator: refused as a history file name" % (host,))
    safe = _SAFE.sub("_", host)[:80]
    if safe != host or safe.startswith("."):
        safe = "%s-%s" % (safe.lstrip(".") or "host", hashlib.sha256(host.encode("utf-8", "replace")).hexdigest()[:8])
    return safe + SUFFIX


def _jobs_of(row):
    jobs = row.get("jobs")
    return [job for job in jobs if isinstance(job, dict)] if isinstance(jobs, list) else []


MAX_JOBS = 64       # job_status reports at most 64 jobs per host (job_layout.discover_jobs)
JOB_NAME_WIDTH = 64


def _progress_fields(job):
    progress = job.get("progress") if isinstance(job.get("progress"), dict) else {}
    return {"prog": _num(progress.get("value")), "prog_total": _num(progress.get("total")),
            "unit": _clip(progress.get("unit"), 20) if progress.get("unit") else None}


def job_fields(jobs):
    """Each job of a patrol row as ``{name: {"st": state, "done", "total", "prog", "prog_total", "unit", "log_age",
    "fast": items too fast}}`` (unknown values left out), at most MAX_JOBS: the history of each (host, job), so
    that two experiments on one host are two series, never one that zig-zags between them."""
    fields = {}
    for job in jobs[:MAX_JOBS]:
        name = job.get("name")
        if not isinstance(name, str) or not name.strip():
            continue
        entry = {"st": _clip(job.get("state"), 12) if isinstance(job.get("state"), str) else None,
                 "done": _int(job.get("items_done")), "total": _int(job.get("items_total")) or None,
                 "log_age": _int(job.get("log_age_seconds")), "fast": _int(job.get("items_too_fast")) or None}
        entry.update(_progress_fields(job))
        fields[_clip(name, JOB_NAME_WIDTH)] = dict((key, value) for key, value in entry.items() if value is not None)
    return fields


def _gpu_usage(gpus):
    """(mean utilisation %, memory used % of all GPUs), None for what is unknown."""
    gpus = [gpu for gpu in gpus if isinstance(gpu, dict)] if isinstance(gpus, list) else []
    utils = [u for u in (_num(g.get("utilization_pct")) for g in gpus) if u is not None]
    used = [u for u in (_num(g.get("memory_used_mib")) for g in gpus) if u is not None]
    total = [u for u in (_num(g.get("memory_total_mib")) for g in gpus) if u is not None]
    util = round(sum(utils) / len(utils), 1) if utils else None
    mem = round(100.0 * sum(used) / sum(total), 1) if used and total and sum(total) > 0 else None
    return util, mem


def _top(findings, top_text):
    """The finding a row's top_finding names (its code, message and action), or Nones."""
    if not isinstance(top_text, str) or top_text == "-":
        return None, None, None
    code = top_text.split(":", 1)[0]
    for item in findings if isinstance(findings, list) else []:
        if isinstance(item, dict) and item.get("code") == code:
            return code, item.get("message"), item.get("action")
    if ":" in top_text and re.match(r"^[a-z][a-z0-9_]*$", code):
        return code, top_text.split(":", 1)[1].strip(), None
    return None, top_text, None


def history_record(row, kind, now, price=None, currency=None):
    """The compact history record of a fleet_report ``row`` (preflight or patrol, ``kind``) at epoch ``now``.

    Keys with an unknown value are left out. ``price`` (per hour, when the box bills and the price is known) and
    ``currency`` come from the host's billing settings."""
    findings = row.get("findings")
    code, message, action = _top(findings, row.get("top_finding"))
    record = {"t": int(now), "v": VERSION, "kind": kind, "host": str(row.get("host")),
              "platform": row.get("platform"), "verdict": row.get("verdict"), "top": code,
              "msg": _clip(message) if message else None, "action": _clip(action) if action else None,
              "data_b": _num(row.get("data_bytes_pct")), "data_i": _num(row.get("data_inodes_pct")),
              "dur_b": _num(row.get("durable_bytes_pct")), "dur_i": _num(row.get("durable_inodes_pct"))}
    if kind == "preflight" and row.get("gpus") not in (None, "-"):
        record["gpus"] = _clip(row["gpus"], 80)
    elif isinstance(row.get("gpus"), list) and any(isinstance(g, dict) and g.get("name") for g in row["gpus"]):
        record["gpus"] = _clip(gpu_summary(row["gpus"]), 80)  # patrol: the names from its one query
    jobs = _jobs_of(row)
    if jobs or row.get("probed"):
        # every job of the box, by name ({} when it has none), with its state, queue, progress and log age: the
        # dashboard draws one chart per (host, job). (Records written before it held the host's done, total, prog,
        # prog_total, unit, log_age and a jobs text, from the first job's progress; fleet_html still reads them.)
        record["by_job"] = job_fields(jobs)
    if isinstance(row.get("gpus"), list):
        record["gpu_util"], record["gpu_mem"] = _gpu_usage(row["gpus"])
        record["gpu_count"] = len([g for g in row["gpus"] if isinstance(g, dict)]) or None
    for item in findings if isinstance(findings, list) else []:
        if isinstance(item, dict) and item.get("code") == "idle_billing":
            record.update(idle_h=_num(item.get("hours_idle")), idle_cost=_num(item.get("cost")))
    price = _num(price)
    if price is not None and price > 0:
        record.update(price=price, cur=_clip(currency, 8) if currency else None)
    return dict((key, value) for key, value in record.items() if value is not None)


def compact(records, now, retention=RETENTION):
    """``records`` (sorted by time) thinned by ``retention``: the ones of the full-resolution window as they are,
    then the last record of each bucket (marked ``b``: the bucket's seconds, ``n``: how many it stands for; its
    wordy keys dropped); older than the last age: dropped."""
    full = retention[0][0]
    kept, buckets = [], {}
    for record in records:
        age = now - record.get("t", 0)
        if age <= full:
            kept.append(record)
            continue
        size = None
        for limit, bucket in retention:
            if age <= limit:
                break
            size = bucket
        else:
            continue  # older than the last age
        if size is None:
            continue
        key = (size, int(record.get("t", 0)) // size)
        previous = buckets.get(key)
        count = (previous["n"] if previous else 0) + (_int(record.get("n")) or 1)
        slim = dict((k, v) for k, v in record.items() if k not in WORDY)
        if isinstance(slim.get("by_job"), dict):  # a job's state and log age are shown for the latest record only
            slim["by_job"] = dict((name, dict((k, v) for k, v in entry.items() if k in SLIM_JOB_KEYS))
                                  for name, entry in slim["by_job"].items() if isinstance(entry, dict))
        slim.update(b=max(size, _num(record.get("b")) or 0), n=count)
        buckets[key] = slim
    older = sorted(buckets.values(), key=lambda r: r.get("t", 0))
    return older + kept


def _fast_t(line):
    """The time of a line as append_record writes it (``{"t":<int>,...``) without parsing it, or None."""
    if not line.startswith('{"t":'):
        return None
    end = line.find(",", 5)
    try:
        return int(line[5:end])
    except ValueError:
        return None


def sample_lines(text, now, window, points, recent):
    """The lines of a history file's text that the dashboard needs, without parsing the others -> [(line number,
    line, seconds since the kept line before it when lines between them were left out, else None)]: every line of
    the last ``recent`` seconds (before its last line), and every k-th older line, k chosen so that the ``window``
    holds about ``points`` of them. A line whose time cannot be read quickly is always kept (so that it is parsed,
    and reported when it is not a record)."""
    numbered = [(number, line) for number, line in enumerate(text.split("\n"), 1) if line.strip()]
    times = [_fast_t(line) for _number, line in numbered]
    known = [t for t in times if t is not None]
    last = known[-1] if known else 0
    in_window = sum(1 for t in known if t >= now - window)
    step = max(1, -(-in_window // max(1, points)))
    count = len(numbered)
    kept, previous = [], None  # previous: (index, time) of the last kept line with a time
    for index, ((number, line), t) in enumerate(zip(numbered, times)):
        if step == 1 or t is None or t >= last - recent or (count - 1 - index) % step == 0:
            gap = None
            if t is not None and previous is not None and index - previous[0] > 1:
                gap = max(0, t - previous[1])
            kept.append((number, line, gap))
            if t is not None:
                previous = (index, t)
    return kept


def parse_lines(text, source="history"):
    """The records of a history file's text -> (records sorted by time, warnings). A line that is not a JSON
    object with a numeric ``t`` (a torn last line, a stray edit) is skipped with a warning."""
    numbered = [(number, line, None) for number, line in enumerate(text.split("\n"), 1) if line.strip()]
    return parse_numbered(numbered, numbered[-1][0] if numbered else 0, source)


def parse_numbered(numbered, last_number, source="history"):
    """parse_lines for [(line number, line, gap)] (sample_lines); a record whose gap is known (lines before it were
    left out) gets ``b``, the seconds it stands for."""
    warnings = []
    try:  # one parse for the whole file is several times faster than json.loads per line
        records = json.loads("[" + ",".join(line for _number, line, _gap in numbered) + "]")
        if all(isinstance(r, dict) and _num(r.get("t")) is not None for r in records):
            for record, (_number, _line, gap) in zip(records, numbered):
                if gap:
                    record["b"] = max(gap, _num(record.get("b")) or 0)
            return _sorted(records), warnings
    except ValueError:
        pass
    records = []
    for number, line, gap in numbered:
        try:
            record = json.loads(line) if len(line) <= MAX_LINE else None
        except ValueError:
            record = None
        if not isinstance(record, dict) or _num(record.get("t")) is None:
            warnings.append("%s: line %d %s, skipped" % (
                source, number, "is torn (a run killed mid-write?)" if number == last_number
                else "is not a history record"))
            continue
        if gap:
            record["b"] = max(gap, _num(record.get("b")) or 0)
        records.append(record)
    return _sorted(records), warnings


def _sorted(records):
    if all(records[i]["t"] <= records[i + 1]["t"] for i in range(len(records) - 1)):
        return records
    return sorted(records, key=lambda r: r["t"])


def _open_dir(history_dir):
    """An fd of ``history_dir`` (created if missing); refused when it is not a directory."""
    os.makedirs(history_dir, exist_ok=True)
    try:
        return os.open(history_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        raise HistoryError("history directory %s cannot be opened: %s" % (history_dir, exc.strerror or exc))


def _open_in(dir_fd, name, flags, mode=0o644):
    try:
        return os.open(name, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise HistoryError("history file %s is a symlink: not followed" % name)
        raise


def _locked(dir_fd, wait=None):
    """A lock on the history directory (its ``.lock`` file), so that two runs never interleave a compaction.

    Never blocks for good: the lock file is opened O_NONBLOCK and must be a regular file (a FIFO planted as
    ``.lock`` is refused), and a lock another run holds for more than ``wait`` (LOCK_WAIT) seconds is a
    HistoryError that says so."""
    wait = LOCK_WAIT if wait is None else wait
    try:
        fd = _open_in(dir_fd, LOCK_NAME, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO without a reader, opened for writing O_NONBLOCK
            raise HistoryError("history lock file %s is not a regular file (a FIFO): remove it" % LOCK_NAME)
        raise HistoryError("history lock file %s cannot be opened: %s" % (LOCK_NAME, exc.strerror or exc))
    if not _is_regular(fd):
        os.close(fd)
        raise HistoryError("history lock file %s is not a regular file: remove it" % LOCK_NAME)
    deadline = time.monotonic() + wait
    while fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() >= deadline:
                os.close(fd)
                raise HistoryError("the history directory is locked by another run (%s) for more than %d s: "
                                   "not written this time" % (LOCK_NAME, wait))
            time.sleep(0.05)
    return fd


def append_record(history_dir, record):
    """Append ``record`` (one line) to its host's history file; a torn last line is ended first, so the new record
    stays readable. Raises HistoryError (unsafe name or file) or OSError."""
    name = file_name(record.get("host"))
    record = redact_data(record, environ_secrets(os.environ))  # no secret in the history (module_utils/redact.py)
    line = (json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n").encode("utf-8")
    dir_fd = _open_dir(history_dir)
    try:
        lock = _locked(dir_fd)
        try:
            fd = _open_in(dir_fd, name, os.O_RDWR | os.O_CREAT | os.O_APPEND)
            try:
                if not _is_regular(fd):
                    raise HistoryError("history file %s is not a regular file" % name)
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = b"\n" + line
                os.write(fd, line)
            finally:
                os.close(fd)
        finally:
            os.close(lock)
    finally:
        os.close(dir_fd)
    return name


def _is_regular(fd):
    return stat.S_ISREG(os.fstat(fd).st_mode)


def history_files(history_dir):
    """The history file names in ``history_dir`` (sorted; symlinks and other non-files left out)."""
    try:
        entries = list(os.scandir(history_dir))
    except OSError:
        return []
    return sorted(entry.name for entry in entries
                  if entry.name.endswith(SUFFIX) and not entry.name.startswith(".")
                  and entry.is_file(follow_symlinks=False))


def read_text(history_dir, name, max_bytes=MAX_BYTES):
    """The text of history file ``name`` -> (text or None, warnings, size). Reads at most the last ``max_bytes``
    (the cut first line is dropped); a file that cannot be read safely is a warning and None."""
    try:
        dir_fd = os.open(history_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        return None, ["history directory %s: %s" % (history_dir, exc.strerror or exc)], None
    try:
        # never blocks (a FIFO), never follows a symlink, regular files only: module_utils/safe_read.py
        fd = safe_read.open_regular(name, dir_fd=dir_fd)
    except (OSError, safe_read.ReadRefused) as exc:
        os.close(dir_fd)
        return None, ["history file %s skipped: %s" % (name, getattr(exc, "strerror", None) or exc)], None
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - max_bytes)
        data = os.pread(fd, size - start, start) if size else b""
    finally:
        os.close(fd)
        os.close(dir_fd)
    warnings = []
    if start:
        data = data[data.find(b"\n") + 1:]
        warnings.append("%s is larger than %d bytes: only its last records are read" % (name, max_bytes))
    return data.decode("utf-8", "replace"), warnings, size


def read_history(history_dir, name, max_bytes=MAX_BYTES):
    """The records of history file ``name`` -> (records, warnings, size read), every line parsed."""
    text, warnings, size = read_text(history_dir, name, max_bytes)
    if text is None:
        return [], warnings, size
    records, more = parse_lines(text, name)
    return records, warnings + more, size


def compaction_due(text, now, retention=RETENTION):
    """Whether compaction would drop COMPACT_MIN_DROP records or more: that many full-resolution lines are older
    than the full-resolution window (counted without parsing them)."""
    limit, count = now - retention[0][0], 0
    for line in text.split("\n"):
        t = _fast_t(line)
        if t is not None and t < limit and '"b":' not in line:
            count += 1
            if count >= COMPACT_MIN_DROP:
                return True
    return False


def rewrite_history(history_dir, name, records, expected_size=None):
    """Replace history file ``name`` with ``records`` atomically, under the directory lock -> whether it did. A
    file whose size is not ``expected_size`` (another run appended since it was read) is left for the next run."""
    dir_fd = _open_dir(history_dir)
    try:
        lock = _locked(dir_fd)
        try:
            path = os.path.join(history_dir, name)
            info = os.lstat(path)
            if not stat.S_ISREG(info.st_mode):
                raise HistoryError("history file %s is not a regular file: not followed" % name)
            if expected_size is not None and info.st_size != expected_size:
                return False
            with replacing(path, mode=0o644) as staged:
                for record in records:
                    staged.file.write((json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n")
                                      .encode("utf-8"))
        finally:
            os.close(lock)
    finally:
        os.close(dir_fd)
    return True


def load_fleet(history_dir, now, compact_files=True, retention=RETENTION, window=None, points=None, recent=0):
    """Every host's history -> ({host: records}, warnings).

    With ``compact_files``, a file that compaction would shrink by COMPACT_MIN_DROP records or more, or that holds
    a torn or foreign line, is parsed whole and rewritten compacted. Otherwise, with ``window`` and ``points``, only
    the lines the dashboard draws are parsed (sample_lines: the last ``recent`` seconds, and about ``points`` over
    the window); without them, every line."""
    fleet, warnings = {}, []
    for name in history_files(history_dir):
        text, more, size = read_text(history_dir, name)
        warnings += more
        if text is None:
            continue
        records = None
        due = compact_files and compaction_due(text, now, retention)
        if window and points and not due:
            numbered = sample_lines(text, now, window, points, recent)
            records, more = parse_numbered(numbered, numbered[-1][0] if numbered else 0, name)
            if more and compact_files:
                records, due = None, True  # a bad line: parse it all and rewrite it without
            else:
                warnings += more
        if records is None:
            records, more = parse_lines(text, name)
            warnings += more
            compacted = compact(records, now, retention)
            if compact_files and (due or more) and records:
                try:
                    rewrite_history(history_dir, name, compacted, expected_size=size)
                except (OSError, HistoryError) as exc:
                    warnings.append("%s: not compacted: %s" % (name, getattr(exc, "strerror", None) or exc))
            records = compacted
        if not records:
            continue
        host = records[-1].get("host")
        host = host if isinstance(host, str) and host else name[:-len(SUFFIX)]
        fleet[host] = records
    return fleet, warnings
