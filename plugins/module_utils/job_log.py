# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a job's log says: start markers, crash markers, progress and the tail, in one pass over the file.

Each start appends ``==== trainer: started <iso time> pid <pid> ====`` to the log (the wrapper of
job_wrapper.py); crash markers and progress are read from the lines after the latest such marker only, and crash
markers from the lines after the latest ``==== trainer: item <id> started ...`` (the run wrapper's, one per queue
item): an earlier item's crash is reported apart, with its id.
:func:`scan_log` is pure (text in, data out); :func:`scan_log_file` reads a log under fixed bounds: regular files
only (opened without blocking, so a FIFO or ``/dev/zero`` is refused, never read), the last
:data:`MAX_SCAN_BYTES` at most, lines cut at :data:`MAX_LINE_CHARS`, and the whole scan in a child process that
is killed after a deadline (a catastrophic ``progress_regex`` such as ``(a+)+$`` cannot be interrupted in-process).
Every text of the log that a scan returns (the tail, the crash markers, the "command not found" lines, the progress
text) is redacted here, on the box, by the patterns of redact.py (``WANDB_API_KEY=...``, ``Authorization: Bearer
...``, ``hf_...``): the module's raw stdout is shown by ``-vvv`` (the ssh connection prints what the box answered)
before any action plugin sees it. The box does not know the run's secret values; the controller redacts those after.
The file layout is job_layout.py's.
"""

from __future__ import annotations

import collections
import json
import os
import re
import select
import signal
import time

from ansible_collections.remote_gpu.trainer.plugins.module_utils import redact, safe_read

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
# The run wrapper's first line for a queue item (launch_scripts.py): crash markers belong to the item they follow.
ITEM_HINT = "==== trainer: item "
ITEM_START_RE = re.compile(r"==== trainer: item (?P<item>\S+) started (?P<time>\S+): ")
MARKER_PREFIX = "==== trainer: "
# bash on a command it cannot find (exit 127): "bash: line 1: python: command not found", or for a missing path
# "<script>: line 9: /opt/conda/bin/python: No such file or directory".
NOT_FOUND_HINTS = (": command not found", ": No such file or directory")
NOT_FOUND_RE = re.compile(r"^(?:[^ \t:]+: )?(?:line \d+: )?(?P<command>[^\s:]+): "
                          r"(?:command not found|No such file or directory)[ \t]*$")

DEFAULT_PROGRESS_RE = (r"(?i)\b(?P<unit>epoch|step)\b[ \t]*[=:]?[ \t]*[\[(]?[ \t]*(?P<value>\d+)"
                       r"(?:[ \t]*/[ \t]*(?P<total>\d+))?")

MAX_MARKERS = 20
MAX_MARKER_TEXT = 300
MAX_SCAN_BYTES = 256 << 20  # only the last 256 MiB of a log are scanned
MAX_LINE_CHARS = 1 << 22  # a longer line is cut (the rest, up to its line end, is skipped)
MAX_TAIL_CHARS = 4096  # a longer line of the returned tail keeps its first 1 KiB and its last 3 KiB
# A text cut for return is redacted with this many characters of what is cut away beyond each kept end, so that a
# secret across the cut is found by its name, and a long line costs a few KiB of redaction, not its length (the
# patterns take about a second over a 4 MiB line).
REDACT_MARGIN = 512


class LogRefused(Exception):
    """A log that is not read: not a regular file, or a symlink out of the directory it must stay in."""


class ScanTimeout(Exception):
    """The scan of a log ran past its deadline (usually a catastrophic progress_regex)."""


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


def _hint_lines(block, body, hints=CRASH_HINTS):
    """Start offsets (sorted) of the lines at or after ``body`` that contain one of ``hints``."""
    found = set()
    for hint in hints:
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


def is_marker(line):
    """A line the wrappers write themselves (``==== trainer: ... ====``), not the job's output; the tail skips it."""
    return line.startswith(MARKER_PREFIX) and line.rstrip().endswith(" ====")


def _last_lines(block, count):
    """The last ``count`` lines of a block that are not wrapper markers."""
    lines = []
    end = len(block) - 1 if block.endswith("\n") else len(block)
    while count > len(lines) and end >= 0:
        start = block.rfind("\n", 0, end) + 1
        if not is_marker(block[start:end]):
            lines.append(block[start:end])
        end = start - 1
    lines.reverse()
    return lines


def not_found_command(line):
    """The command named by bash's "command not found" (or "No such file or directory") message, or None."""
    match = NOT_FOUND_RE.match(line)
    return match.group("command") if match else None


def _event_lines(block, body):
    """{line start: ``item`` (an item's marker) or ``hint`` (a crash or not-found hint)} at or after ``body``."""
    events = dict((start, "hint") for start in _hint_lines(block, body, CRASH_HINTS + NOT_FOUND_HINTS))
    for start in _hint_lines(block, body, (ITEM_HINT,)):
        if block.startswith(ITEM_HINT, start):
            events[start] = "item"
    return events


def _close_item(state):
    """The current item's crash markers become an earlier item's crash (reported once, with its id)."""
    if state["crash_markers"] and len(state["earlier_crashes"]) < MAX_MARKERS:
        state["earlier_crashes"].append({"item": state["current_item"], "crash_marker_count":
                                         state["crash_marker_count"], "first": state["crash_markers"][0]})
    state.update(crash_markers=[], crash_marker_count=0)


def scan_log(blocks, progress_regex, tail_lines=20):
    """One pass over a log, given as text blocks that end at line ends (read_blocks, or a list of lines).

    Only text after the latest start marker counts for crash markers and progress, and crash markers only after
    the latest item start marker (``==== trainer: item <id> started ...``): those of an earlier item are moved to
    ``earlier_crashes`` (one entry per item: its id, count and first marker), never reported as the current state.
    Crash markers are looked for on the lines that contain a literal hint, and progress by searching lines
    backwards from the end of each block, which keeps a patrol of a large log fast. The tail leaves out the
    wrappers' own ``==== trainer: ... ====`` lines, so it ends with the job's own last words. Returns dict(starts,
    last_start, last_start_line, current_item, current_item_line, crash_markers, crash_marker_count,
    earlier_crashes, not_found, progress, tail, lines); ``line_no`` values are 1-based in the whole file;
    ``not_found`` lists bash's "command not found" lines since the latest start ({item, command, line_no, text}).
    The texts of the log it returns are redacted by redact.py's patterns: each tail line (cut and redacted by
    shown_line), the progress text likewise, each crash marker's and not-found line's text (at most
    MAX_MARKER_TEXT characters, by clip) and the command named there.
    """
    tail = collections.deque(maxlen=max(tail_lines, 0))
    state = {"starts": 0, "last_start": None, "last_start_line": None, "current_item": None,
             "current_item_line": None, "crash_markers": [], "crash_marker_count": 0, "earlier_crashes": [],
             "not_found": [], "progress": None, "lines": 0}
    before = 0  # lines in the blocks already read
    for block in blocks:
        body = 0
        last = _last_start(block)
        if last is not None:
            state.update(starts=state["starts"] + block.count(START_HINT), last_start=last.group("time"),
                         last_start_line=before + block.count("\n", 0, last.start()) + 1, current_item=None,
                         current_item_line=None, crash_markers=[], crash_marker_count=0, earlier_crashes=[],
                         not_found=[], progress=None)
            body = last.end()
        pos, line_no = 0, before + 1
        events = _event_lines(block, body)
        for start in sorted(events):
            line_no += block.count("\n", pos, start)
            pos = start
            line = block[start:_line_bounds(block, start)[1]]
            if events[start] == "item":
                match = ITEM_START_RE.match(line)
                if match:
                    _close_item(state)
                    state.update(current_item=match.group("item"), current_item_line=line_no)
                continue
            if is_marker(line):
                continue
            _note_line(state, line, line_no)
        match, start = _last_progress(block, body, progress_regex)
        if match is not None:
            state["progress"] = _reading(match, before + block.count("\n", 0, start) + 1)
        before += block.count("\n") + (0 if block.endswith("\n") else 1)
        if tail.maxlen:
            tail.extend(_last_lines(block, tail.maxlen))
    state["lines"] = before
    # what leaves the box (see the module's docstring): the tail and the progress text, cut and redacted
    state["tail"] = [shown_line(line) for line in tail]
    if state["progress"] is not None:
        state["progress"]["text"] = shown_line(state["progress"]["text"])
    return state


def _note_line(state, line, line_no):
    """Record a crash marker or a "command not found" line."""
    command = not_found_command(line)
    if command is not None:
        if len(state["not_found"]) < MAX_MARKERS:
            state["not_found"].append({"item": state["current_item"], "command": redact.redact(command),
                                       "line_no": line_no, "text": clip(line, MAX_MARKER_TEXT)})
        return
    match = CRASH_RE.search(line)
    if match is None:
        return
    state["crash_marker_count"] += 1
    if len(state["crash_markers"]) < MAX_MARKERS:
        state["crash_markers"].append({"line_no": line_no, "kind": match.lastgroup,
                                       "text": clip(line, MAX_MARKER_TEXT)})


def open_log(path, inside=None):
    """(fd, stat) of a log opened for a bounded read, or (None, None) when it does not exist.

    Opened by the collection's one non-blocking reader (safe_read.py): only a regular file, checked with stat
    before the open (opening a device can have effects) and with fstat after it; the open never blocks
    (O_NONBLOCK). With ``inside``, the log's real path must lie in that directory: a symlink out of it is refused.
    Raises LogRefused.
    """
    if inside is not None:
        real, root = os.path.realpath(path), os.path.realpath(inside)
        if os.path.commonpath([real, root]) != root:
            raise LogRefused("%s resolves to %s, outside %s: a symlink out of the job directory is not followed"
                             % (path, real, inside))
    try:
        fd = safe_read.open_regular(path, follow=True)
    except FileNotFoundError:
        return None, None
    except safe_read.ReadRefused as exc:
        if exc.kind:
            raise LogRefused("%s is not a regular file (a %s): only regular files are read as logs" % (path, exc.kind))
        raise LogRefused("%s cannot be read: %s" % (path, exc.reason))
    return fd, os.fstat(fd)


def fd_blocks(fd, size, limit=MAX_SCAN_BYTES, block=1 << 22):
    """(skipped bytes, text blocks) of an open log of ``size`` bytes: at most the last ``limit`` bytes, from the
    first whole line in them, in blocks that end at line ends. Never reads more than ``limit`` bytes, even from a
    file that grows meanwhile; a line longer than MAX_LINE_CHARS is cut there."""
    start = max(0, size - limit)
    os.lseek(fd, start, os.SEEK_SET)
    budget = [limit]

    def read(count):
        data = os.read(fd, min(count, budget[0])) if budget[0] > 0 else b""
        budget[0] -= len(data)
        return data

    head = b""
    if start:  # skip the partial line the window starts in
        while True:
            data = read(block)
            if not data:
                break
            cut = data.find(b"\n")
            if cut >= 0:
                head = data[cut + 1:]
                start += cut + 1
                break
            start += len(data)

    def blocks():
        carry, skipping = head, False
        while True:
            data = read(block)
            eof = not data
            if skipping and not eof:
                cut = data.find(b"\n")
                if cut < 0:
                    continue
                skipping, data = False, data[cut + 1:]
            carry += data
            end = carry.rfind(b"\n")
            if end >= 0:
                yield carry[:end + 1].decode("utf-8", "replace")
                carry = carry[end + 1:]
            if len(carry) > MAX_LINE_CHARS:  # one overlong line: keep its start, skip the rest of it
                yield carry[:MAX_LINE_CHARS].decode("utf-8", "replace") + "\n"
                carry, skipping = b"", True
            if eof:
                if carry:
                    yield carry.decode("utf-8", "replace")
                return

    return start, blocks()


def clip(text, limit):
    """The first ``limit`` characters of ``text``, redacted by redact.py's patterns (with REDACT_MARGIN characters
    more while redacting: a secret across the cut is found by its name)."""
    return redact.redact(text[:limit + REDACT_MARGIN])[:limit]


def shown_line(line, limit=MAX_TAIL_CHARS):
    """A line of the log as it leaves the box: redacted by redact.py's patterns, and of at most about ``limit``
    characters: a longer one keeps its first quarter and the rest from its end (a progress bar redrawn with carriage
    returns ends with its latest state). It is cut first, each kept end redacted with REDACT_MARGIN characters of the
    part cut away, so that the cost stays that of a few KiB however long the line is."""
    if len(line) <= limit:
        return redact.redact(line)
    head, end = limit // 4, limit - limit // 4
    last = redact.redact(line[-(end + REDACT_MARGIN):])[-end:]
    return "%s [... %d characters cut ...] %s" % (clip(line, head), len(line) - limit, last)


def call_with_deadline(func, seconds):
    """``func()`` (its result must be JSON) in a forked child that is killed after ``seconds`` -> its result.

    Raises ScanTimeout past the deadline, RuntimeError with the child's error otherwise. A regular expression
    cannot be interrupted in-process, so this is the only way to bound the time a progress_regex may take.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: compute, send, exit without running the parent's cleanup
        status = 0
        try:
            os.close(read_end)
            try:
                payload = {"result": func()}
            except Exception as exc:  # pylint: disable=broad-except
                payload = {"error": "%s: %s" % (type(exc).__name__, exc)}
            data = json.dumps(payload).encode("utf-8")
            while data:
                data = data[os.write(write_end, data):]
        except BaseException:  # pylint: disable=broad-except
            status = 1
        finally:
            os._exit(status)  # pylint: disable=protected-access
    os.close(write_end)
    chunks, deadline, done = [], time.monotonic() + seconds, False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ScanTimeout("no answer within %s s" % seconds)
            if not select.select([read_end], [], [], left)[0]:
                continue
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
        done = True
    finally:
        os.close(read_end)
        if not done:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.waitpid(pid, 0)
    try:
        payload = json.loads(b"".join(chunks).decode("utf-8"))
    except ValueError:
        raise RuntimeError("the log scan ended without an answer")
    if "error" in payload:
        raise RuntimeError(payload["error"])
    return payload["result"]


def scan_log_file(path, progress_regex, tail_lines=20, inside=None, seconds=30):
    """Scan one log file under the bounds of this module -> dict(scan, mtime, skipped_bytes), or None when the
    file does not exist. Raises LogRefused (not a regular file, a symlink out of ``inside``) and ScanTimeout."""
    fd, st = open_log(path, inside)
    if fd is None:
        return None
    try:
        def scan():
            skipped, blocks = fd_blocks(fd, st.st_size)
            return {"scan": scan_log(blocks, progress_regex, tail_lines), "skipped_bytes": skipped}

        found = call_with_deadline(scan, seconds)
    finally:
        os.close(fd)
    found["mtime"] = st.st_mtime
    return found
