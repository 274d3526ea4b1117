# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a job's log says: start markers, crash markers, progress and the tail, in one pass over the file.

Each start appends ``==== trainer: started <iso time> pid <pid> ====`` to the log (the wrapper of
job_wrapper.py); crash markers and progress are read from the lines after the latest such marker only.
Pure (text in, data out); the file layout is job_layout.py's.
"""

from __future__ import annotations

import collections
import re

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
