# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The layout of a detached job on the box, the wrapper that runs it, and what its log and status files say.

On-box layout (one directory per job; ``run_dir`` defaults to ``~/.trainer/jobs``)::

    <run_dir>/<name>/
        wrapper-<sha12>.sh   the script that runs the job; a new command or environment gets a new file, a file
                             in use is never rewritten (bash reads a running script by byte offset)
        job.pid              PID of the wrapper: the session and process-group leader of the job
        job.starttime        its start time, /proc/PID/stat field 22 (clock ticks since boot): defeats PID reuse
        job.meta.json        written at launch: detach method, wrapper, log path, launch time, cgroup oom_kill count
        job.log              default log: stdout and stderr of the wrapper and the command, appended
        status.json          final status, written by the wrapper when the command ends:
                             {"item": null, "exit_code": 0, "started": "<iso>", "finished": "<iso>"}
        items/<item>/status.json
                             one per finished queue item, written by the user's run wrapper (for example
                             ``items/007/status.json``), same keys with ``item`` set; ``exit_code`` 0 means done.
                             The job sees this directory as ``$TRAINER_ITEMS_DIR`` (and ``$TRAINER_JOB_DIR``,
                             ``$TRAINER_JOB_NAME``); write the file atomically (write a .tmp, then mv).

Each start appends ``==== trainer: started <iso time> pid <pid> ====`` to the log; crash markers and progress are
read from the lines after the latest such marker only. Everything here is pure (text in, data out) apart from the
small file readers at the end.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import re
import shlex

from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import finding

NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")

PID_FILE = "job.pid"
STARTTIME_FILE = "job.starttime"
META_FILE = "job.meta.json"
STATUS_FILE = "status.json"
LOG_FILE = "job.log"
ITEMS_DIR = "items"

START_MARKER_RE = re.compile(r"^==== trainer: started (?P<time>\S+) pid (?P<pid>\d+) ====[ \t]*$", re.M)

# Crash markers are matched as words or whole lines, never as substrings: a metric called ``val_error`` or
# ``error_rate`` is not a crash. Horizontal whitespace only ([ \t]), so a match never spans two lines.
CRASH_SOURCES = (
    ("traceback", r"\bTraceback \(most recent call last\)"),
    ("cuda_oom", r"\bCUDA out of memory\b|\bOutOfMemoryError\b"),
    ("cuda_error", r"\bCUDA error\b"),
    ("killed", r"^[ \t]*Killed[ \t]*$|\b\d+[ \t]+Killed\b"),
    ("nccl", r"\bNCCL (?:error|WARN)\b|\bnccl(?:InternalError|SystemError|UnhandledCudaError|RemoteError|"
             r"InvalidUsage|InvalidArgument)\b|\bWatchdog caught collective operation timeout\b"),
    ("segfault", r"\bSegmentation fault\b|\(core dumped\)"),
)
CRASH_RE = re.compile("|".join("(?P<%s>%s)" % (kind, source) for kind, source in CRASH_SOURCES), re.M)
# Literal words that every crash marker contains: str.find on these is fast, so the regex only runs on those lines.
CRASH_HINTS = ("Traceback (most recent call last)", "CUDA out of memory", "OutOfMemoryError", "CUDA error", "Killed",
               "NCCL error", "NCCL WARN", "ncclInternalError", "ncclSystemError", "ncclUnhandledCudaError",
               "ncclRemoteError", "ncclInvalidUsage", "ncclInvalidArgument", "Watchdog caught collective",
               "Segmentation fault", "(core dumped)")
START_HINT = "==== trainer: started "
KILLED_RE = re.compile(dict(CRASH_SOURCES)["killed"], re.M)

DEFAULT_PROGRESS_RE = (r"(?i)\b(?P<unit>epoch|step)\b[ \t]*[=:]?[ \t]*[\[(]?[ \t]*(?P<value>\d+)"
                       r"(?:[ \t]*/[ \t]*(?P<total>\d+))?")

MAX_MARKERS = 20
MAX_MARKER_TEXT = 300


def valid_name(name):
    return bool(name) and bool(NAME_RE.match(name)) and name not in (".", "..")


def job_paths(run_dir, name, log_path=None):
    """Every path of a job, from its run directory and name."""
    job_dir = os.path.join(run_dir, name)
    return {
        "job_dir": job_dir,
        "pid_file": os.path.join(job_dir, PID_FILE),
        "starttime_file": os.path.join(job_dir, STARTTIME_FILE),
        "meta_file": os.path.join(job_dir, META_FILE),
        "status_file": os.path.join(job_dir, STATUS_FILE),
        "items_dir": os.path.join(job_dir, ITEMS_DIR),
        "log_path": log_path or os.path.join(job_dir, LOG_FILE),
    }


def tmux_session(name):
    return "trainer-%s" % name


def command_line(command):
    """The shell line that runs ``command``: a string goes to ``bash -c``, a list is quoted word by word."""
    if isinstance(command, (list, tuple)):
        return " ".join(shlex.quote(str(arg)) for arg in command)
    return "bash -c %s" % shlex.quote(command)


def wrapper_text(name, paths, command, chdir=None, env_files=(), env=None):
    """The bash wrapper for a job. Pure: the same inputs give the same bytes (and so the same file name)."""
    q = shlex.quote
    lines = [
        "#!/usr/bin/env bash",
        "# Written by remote_gpu.trainer.detached_job for job %s. Never edited in place: a changed command or" % name,
        "# environment gets a new wrapper-<sha>.sh, so a running copy is not rewritten under bash.",
        "JOB_DIR=%s" % q(paths["job_dir"]),
        "LOG=%s" % q(paths["log_path"]),
        "STATUS=%s" % q(paths["status_file"]),
        'now() { date -u +%Y-%m-%dT%H:%M:%SZ; }',
        'write_status() {',
        '    printf \'{"item": null, "exit_code": %d, "started": "%s", "finished": "%s"}\\n\' "$1" "$STARTED" "$(now)" '
        '> "$STATUS.tmp" && mv -f "$STATUS.tmp" "$STATUS"',
        '    printf \'==== trainer: finished %s exit %d ====\\n\' "$(now)" "$1"',
        '}',
        'rm -f "$STATUS"',
        'read -r STAT < /proc/$$/stat',
        'set -- ${STAT##*) }',
        'printf \'%s\\n\' "${20}" > "$JOB_DIR/job.starttime.tmp" && mv -f "$JOB_DIR/job.starttime.tmp" '
        '"$JOB_DIR/job.starttime"',
        'printf \'%s\\n\' "$$" > "$JOB_DIR/job.pid.tmp" && mv -f "$JOB_DIR/job.pid.tmp" "$JOB_DIR/job.pid"',
        'mkdir -p "$(dirname "$LOG")"',
        '# fd 9 keeps the tmux pane (or /dev/null under nohup) open: a pane whose terminal is closed is reaped.',
        'exec 9>&1 >> "$LOG" 2>&1 < /dev/null',
        'STARTED=$(now)',
        'printf \'==== trainer: started %s pid %s ====\\n\' "$STARTED" "$$"',
        "trap 'write_status 143; exit 143' TERM",
        "trap 'write_status 130; exit 130' INT",
        "trap 'write_status 129; exit 129' HUP",
    ]
    for env_file in env_files or ():
        lines += [
            "if [ ! -r %s ]; then echo 'trainer: env file %s is missing or unreadable'; write_status 127; exit 127; fi"
            % (q(env_file), env_file.replace("'", "")),
            ". %s" % q(env_file),
        ]
    lines += [
        "export PYTHONUNBUFFERED=1",
        "export TRAINER_JOB_NAME=%s TRAINER_JOB_DIR=%s TRAINER_ITEMS_DIR=%s"
        % (q(name), q(paths["job_dir"]), q(paths["items_dir"])),
    ]
    for key in sorted(env or {}):
        lines.append("export %s=%s" % (key, q(str(env[key]))))
    if chdir:
        lines.append("cd %s || { echo 'trainer: cannot cd to %s'; write_status 1; exit 1; }"
                     % (q(chdir), chdir.replace("'", "")))
    lines += [
        command_line(command),
        "RC=$?",
        'write_status "$RC"',
        'exit "$RC"',
        "",
    ]
    return "\n".join(lines)


def wrapper_name(text):
    return "wrapper-%s.sh" % hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def parse_int_file(text):
    """The first integer in a pid or starttime file, or None."""
    try:
        return int(text.split()[0])
    except (ValueError, IndexError, AttributeError):
        return None


def parse_status(text):
    """A status.json -> dict with item, exit_code, started, finished; None when absent or not JSON."""
    try:
        data = json.loads(text)
    except (ValueError, TypeError):
        return None
    if not isinstance(data, dict):
        return None
    code = data.get("exit_code")
    return {
        "item": data.get("item"),
        "exit_code": code if isinstance(code, int) and not isinstance(code, bool) else None,
        "started": data.get("started"),
        "finished": data.get("finished"),
    }


def crash_kind(line):
    """The kind of crash marker on one line, or None."""
    match = CRASH_RE.search(line)
    return match.lastgroup if match else None


def compile_progress(pattern):
    """Compile a progress regex (multi-line mode); raises re.error with the reason when it is invalid."""
    return re.compile(pattern or DEFAULT_PROGRESS_RE, re.M)


def _reading(match, line_no):
    groups = match.groupdict()

    def as_int(key):
        try:
            return int(groups[key]) if groups.get(key) is not None else None
        except ValueError:
            return None

    return {"text": match.group(0), "unit": (groups.get("unit") or "").lower() or None,
            "value": as_int("value"), "total": as_int("total"), "line_no": line_no}


def progress_of(line, regex, line_no):
    """A progress reading from one line, or None. Named groups ``value`` and ``total`` are used when present."""
    match = regex.search(line)
    return _reading(match, line_no) if match else None


def read_blocks(handle, size=1 << 22):
    """A text file in blocks of about ``size`` characters, each ending at a line end (except maybe the last)."""
    while True:
        block = handle.read(size)
        if not block:
            return
        if not block.endswith("\n"):
            block += handle.readline()
        yield block


def _line_bounds(block, pos):
    start = block.rfind("\n", 0, pos) + 1
    end = block.find("\n", pos)
    return start, (len(block) if end < 0 else end)


def _hint_lines(block, body):
    """Start offsets (sorted) of the lines at or after ``body`` that contain a crash hint."""
    found = set()
    for hint in CRASH_HINTS:
        pos = block.find(hint, body)
        while pos >= 0:
            start, end = _line_bounds(block, pos)
            if start >= body:
                found.add(start)
            pos = block.find(hint, end)
    return sorted(found)


def _last_start(block):
    """The last start-marker match in a block, or None."""
    pos = block.rfind(START_HINT)
    while pos >= 0:
        start, end = _line_bounds(block, pos)
        match = START_MARKER_RE.match(block, start, end)
        if match:
            return match
        pos = block.rfind(START_HINT, 0, pos)
    return None


def _last_progress(block, body, regex, window=1 << 16):
    """(match, line start) of the last progress match in ``block`` after ``body``, or (None, None).

    Searches windows of whole lines backwards from the end, so a log full of progress lines costs one small
    window and a log without any costs one regex scan.
    """
    end = len(block)
    while end > body:
        start = max(block.rfind("\n", body, max(end - window, body)) + 1, body)
        latest = None
        for match in regex.finditer(block, start, end):
            if "\n" not in match.group(0):
                latest = match
        if latest is not None:  # report the first match on that line, as progress_of does
            line_start, line_end = _line_bounds(block, latest.start())
            return regex.search(block, line_start, line_end) or latest, line_start
        end = start
    return None, None


def _last_lines(block, count):
    lines = []
    end = len(block) - 1 if block.endswith("\n") else len(block)
    while count > len(lines) and end >= 0:
        start = block.rfind("\n", 0, end) + 1
        lines.append(block[start:end])
        end = start - 1
    lines.reverse()
    return lines


def scan_log(blocks, progress_regex, tail_lines=20):
    """One pass over a log, given as text blocks that end at line ends (read_blocks, or a list of lines).

    Only text after the latest start marker counts for crash markers and progress. Crash markers are looked
    for on the lines that contain a literal hint, and progress by searching lines backwards from the end of each
    block, which keeps a patrol of a large log fast. Returns dict(starts, last_start, last_start_line,
    crash_markers, crash_marker_count, progress, tail, lines); ``line_no`` values are 1-based in the whole file.
    """
    tail = collections.deque(maxlen=max(tail_lines, 0))
    state = {"starts": 0, "last_start": None, "last_start_line": None, "crash_markers": [],
             "crash_marker_count": 0, "progress": None, "lines": 0}
    before = 0  # lines in the blocks already read
    for block in blocks:
        body = 0
        last = _last_start(block)
        if last is not None:
            state.update(starts=state["starts"] + block.count(START_HINT), last_start=last.group("time"),
                         last_start_line=before + block.count("\n", 0, last.start()) + 1,
                         crash_markers=[], crash_marker_count=0, progress=None)
            body = last.end()
        pos, line_no = 0, before + 1
        for start in _hint_lines(block, body):
            line_no += block.count("\n", pos, start)
            pos = start
            line = block[start:_line_bounds(block, start)[1]]
            match = CRASH_RE.search(line)
            if match is None:
                continue
            state["crash_marker_count"] += 1
            if len(state["crash_markers"]) < MAX_MARKERS:
                state["crash_markers"].append({"line_no": line_no, "kind": match.lastgroup,
                                               "text": line[:MAX_MARKER_TEXT]})
        match, start = _last_progress(block, body, progress_regex)
        if match is not None:
            state["progress"] = _reading(match, before + block.count("\n", 0, start) + 1)
        before += block.count("\n") + (0 if block.endswith("\n") else 1)
        if tail.maxlen:
            tail.extend(_last_lines(block, tail.maxlen))
    state["lines"] = before
    state["tail"] = list(tail)
    return state


def vanished_reason(exit_code, tail, oom_kill_delta, started_epoch, boot_epoch):
    """Why a job that is not alive stopped, as far as the evidence goes; never guesses an OOM kill.

    ``exit_code``: from status.json or None; ``tail``: lines after the latest start; ``oom_kill_delta``: rise of
    the cgroup's oom_kill counter since launch (None when unknown); ``started_epoch``/``boot_epoch``: when the
    job was launched and when the box booted (None when unknown).

    -> ``finished`` | ``exited_nonzero`` | ``oom_kill`` | ``killed`` | ``stopped`` | ``reboot`` | ``unknown``.
    """
    killed_line = any(KILLED_RE.search(line) for line in tail[-5:])
    if (exit_code == 137 or (exit_code is None and killed_line)) and oom_kill_delta:
        return "oom_kill"
    if exit_code is None and started_epoch is not None and boot_epoch is not None and boot_epoch > started_epoch:
        return "reboot"
    if exit_code == 0:
        return "finished"
    if exit_code in (129, 130, 143):
        return "stopped"
    if exit_code == 137 or killed_line:
        return "killed"
    if exit_code is not None:
        return "exited_nonzero"
    return "unknown"


def read_text(path, limit=None):
    """A small file's text, or None when it cannot be read."""
    try:
        with open(path, "r", errors="replace") as handle:
            return handle.read(limit) if limit else handle.read()
    except (IOError, OSError):
        return None


def item_statuses(items_dir):
    """Parsed ``items/<item>/status.json`` files, sorted by item directory name."""
    try:
        names = sorted(os.listdir(items_dir))
    except OSError:
        return []
    found = []
    for name in names:
        status = parse_status(read_text(os.path.join(items_dir, name, STATUS_FILE)))
        if status is not None:
            if status["item"] is None:
                status["item"] = name
            found.append(status)
    return found


def job_findings(job, stale_seconds):
    """Findings for one job report (a dict as job_status returns it). Pure; codes are stable.

    job_crashed (FAIL): crash markers after the latest start. job_gone_incomplete (FAIL): not alive and items
    remain, or no final status, or a non-zero exit. job_finished (INFO): not alive, exit 0, all items done.
    log_stale (WARN): alive but the log is silent longer than ``stale_seconds`` (silence alone does not prove a
    hang: long evaluations and checkpoint writes are quiet too). oom_killed (WARN while alive, FAIL when gone).
    """
    name = job["name"]
    found = []
    if not job["exists"]:
        return [finding("FAIL", "job_missing", "no job directory for %s under %s" % (name, job["job_dir"]),
                        "Check the job name and run_dir, or launch it with remote_gpu.trainer.detached_job.",
                        job=name)]
    if job["crash_markers"]:
        first = job["crash_markers"][0]
        found.append(finding(
            "FAIL", "job_crashed",
            "%s: %d crash marker(s) in %s since the latest start, first at line %d: %s" % (
                name, job["crash_marker_count"], job["log_path"], first["line_no"], first["text"]),
            "Read the log around line %d, fix the cause, then restart; do not blind-restart." % first["line_no"],
            job=name))
    total, done = job["items_total"], job["items_done"]
    incomplete = bool(total) and done < total
    if not job["alive"]:
        code = job["last_exit_code"]
        if code is None or code != 0 or incomplete:
            items = " at %d/%d items" % (done, total) if total else ""
            exit_text = "exit code %d" % code if code is not None else "no final status"
            found.append(finding(
                "FAIL", "job_gone_incomplete",
                "%s is not running%s (%s, likely cause: %s)" % (name, items, exit_text, job["vanished_reason"]),
                "Read the tail of %s, classify the failure, then restart the remaining items." % job["log_path"],
                job=name))
        else:
            items = " (%d/%d items)" % (done, total) if total else ""
            found.append(finding("INFO", "job_finished", "%s finished with exit code 0%s" % (name, items),
                                 "Verify and pull the results before any teardown.", job=name))
    age = job["log_age_seconds"]
    if job["alive"] and age is not None and age > stale_seconds:
        found.append(finding(
            "WARN", "log_stale",
            "%s is alive but %s has not been written for %d min" % (name, job["log_path"], age // 60),
            "Check GPU utilisation and checkpoint mtimes; the job may hang (or buffer output: PYTHONUNBUFFERED=1).",
            job=name))
    delta = job.get("oom_kills_since_launch")
    if delta:
        found.append(finding(
            "WARN" if job["alive"] else "FAIL", "oom_killed",
            "the cgroup's oom_kill counter rose by %d since %s was launched" % (delta, name),
            "Lower the batch size or num_workers, or raise the memory limit; see memory.max.", job=name))
    return found
