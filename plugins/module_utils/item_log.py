# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""An item's own log: its part of the job log (from its start line to the next start of an item or of the job),
copied into its output directory as ``trainer-item.log`` after it ends, so that the durable tier keeps the log with
the outputs. Read in chunks, bounded (the start line is looked for in the last MAX_SCAN bytes, at most MAX_COPY
bytes are copied), through safe_read.py (a FIFO or device is never opened blocking, a symlink never followed);
the log is only ever one inside the job directory. Shipped to the box with launch.py. Standard library only.
"""

from __future__ import annotations

import os

from ansible_collections.remote_gpu.trainer.plugins.module_utils import job_layout, safe_read
from ansible_collections.remote_gpu.trainer.plugins.module_utils.atomic import replacing

ITEM_LOG = "trainer-item.log"  # the item's part of the job log, written into its output directory and synced
ITEM_START = "==== trainer: item %s started "  # the run wrapper's first line for an item (launch_scripts.py)
JOB_START = "==== trainer: started "  # the job wrapper's first line (job_wrapper.py)
LOG_CHUNK = 1 << 20
MAX_SCAN = 256 << 20  # the item's start line is looked for in the last this many bytes of the job log
MAX_COPY = 64 << 20  # at most this many bytes of the item's part are copied; a cut copy ends with CUT_LINE
CUT_LINE = "==== trainer: item log cut after %d bytes: the job log holds the rest ====\n"


def job_log_path(status_file):
    """The job's log, from an item's ``<job dir>/items/<id>/status.json``: the one job.meta.json records (when it is
    trusted and lies in the job directory, as job_status reads it), else ``<job dir>/job.log``; None when that path
    resolves outside the job directory (a symlink out of it is never read)."""
    job_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(status_file))))
    paths = job_layout.job_paths(os.path.dirname(job_dir), os.path.basename(job_dir))
    meta, problem = job_layout.trusted_meta(paths)
    recorded = meta.get("log_path") if not problem else None
    log = recorded if isinstance(recorded, str) and safe_read.inside(recorded, job_dir) else paths["log_path"]
    log = os.path.join(job_dir, log)
    return log if safe_read.resolved_inside(log, job_dir) else None


def _item_start_offset(handle, size, marker, floor=0):
    """Offset of the last line that starts with ``marker`` (bytes) in an open log of ``size`` bytes, looked for
    down to offset ``floor`` only, or None."""
    end = size
    while end > floor:
        start = max(floor, end - LOG_CHUNK)
        handle.seek(start)
        data = handle.read(end + len(marker) - start)
        pos = data.rfind(marker)
        while pos >= 0:
            if start + pos == 0 or (pos > 0 and data[pos - 1:pos] == b"\n"):
                return start + pos
            if pos == 0:  # the byte before lies in the previous chunk
                handle.seek(start - 1)
                if handle.read(1) == b"\n":
                    return start
            pos = data.rfind(marker, 0, pos)
        end = start
    return None


def write_item_log(log_path, item, dest):
    """Copy the item's part of the job log (from its last start line to the next start of an item or of the job)
    to ``dest`` (atomically) -> True, or False when the log, the item's start line or room for the copy is not
    there (the copy is a record, never a reason to fail the item)."""
    if not log_path:
        return False
    try:
        fd = safe_read.open_regular(log_path)
    except (OSError, safe_read.ReadRefused):
        return False
    try:
        with os.fdopen(fd, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            offset = _item_start_offset(handle, size, (ITEM_START % item).encode("utf-8"), max(0, size - MAX_SCAN))
            if offset is None:
                return False
            handle.seek(offset)
            with replacing(dest, mode=0o644) as staged:
                ended = _copy_item_lines(handle, min(size - offset, MAX_COPY), staged.file)
                if not ended and size - offset > MAX_COPY:
                    staged.file.write((CUT_LINE % MAX_COPY).encode("utf-8"))
    except OSError:
        return False
    return True


def _copy_item_lines(handle, left, out):
    """Copy at most ``left`` bytes of lines from ``handle``, up to the next start line of an item or of the job
    -> True when the part ended (a start line, the end of the file), False when ``left`` ran out first."""
    job_start, item_line = JOB_START.encode("utf-8"), b"==== trainer: item "
    first = True
    while left > 0:
        line = handle.readline(min(LOG_CHUNK, left))
        if not line:
            return True
        if not first and (line.startswith(job_start) or (line.startswith(item_line) and b" started " in line)):
            return True
        out.write(line)
        first, left = False, left - len(line)
    return False
