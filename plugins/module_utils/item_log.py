# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""An item's own log: its part of the job log (from its start line to the next start of an item or of the job),
copied into its output directory as ``trainer-item.log`` after it ends, so that the durable tier keeps the log with
the outputs. Read in chunks, bounded; shipped to the box with launch.py. Standard library only.
"""

from __future__ import annotations

import os
import stat

from ansible_collections.remote_gpu.trainer.plugins.module_utils import job_layout
from ansible_collections.remote_gpu.trainer.plugins.module_utils.atomic import replacing

ITEM_LOG = "trainer-item.log"  # the item's part of the job log, written into its output directory and synced
ITEM_START = "==== trainer: item %s started "  # the run wrapper's first line for an item (launch_scripts.py)
JOB_START = "==== trainer: started "  # the job wrapper's first line (job_wrapper.py)
LOG_CHUNK = 1 << 20


def job_log_path(status_file):
    """The job's log, from an item's ``<job dir>/items/<id>/status.json``: the one job.meta.json records (when it is
    trusted), else ``<job dir>/job.log``."""
    job_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(status_file))))
    paths = job_layout.job_paths(os.path.dirname(job_dir), os.path.basename(job_dir))
    meta, problem = job_layout.trusted_meta(paths)
    recorded = meta.get("log_path") if not problem else None
    return recorded if isinstance(recorded, str) and os.path.isabs(recorded) else paths["log_path"]


def _item_start_offset(handle, size, marker):
    """Offset of the last line that starts with ``marker`` (bytes) in an open log of ``size`` bytes, or None."""
    end = size
    while end > 0:
        start = max(0, end - LOG_CHUNK)
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
    try:
        if not stat.S_ISREG(os.stat(log_path).st_mode):
            return False
        with open(log_path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            offset = _item_start_offset(handle, size, (ITEM_START % item).encode("utf-8"))
            if offset is None:
                return False
            handle.seek(offset)
            with replacing(dest, mode=0o644) as staged:
                _copy_item_lines(handle, size - offset, staged.file)
    except OSError:
        return False
    return True


def _copy_item_lines(handle, left, out):
    """Copy at most ``left`` bytes of lines from ``handle``, up to the next start line of an item or of the job."""
    job_start, item_line = JOB_START.encode("utf-8"), b"==== trainer: item "
    first = True
    while left > 0:
        line = handle.readline(min(LOG_CHUNK, left))
        if not line:
            return
        if not first and (line.startswith(job_start) or (line.startswith(item_line) and b" started " in line)):
            return
        out.write(line)
        first, left = False, left - len(line)
