# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sampler sidecar of a queued job (the seed's mem_monitor), run on the box next to the queue runner::

    PYTHONPATH=$LIB $PY -m ansible_collections.remote_gpu.trainer.plugins.module_utils.sampler \\
        --job-dir JOB_DIR --interval N --runner-pid PID

Every N seconds it appends one line to ``JOB_DIR/samples.tsv`` (the header first, when the file is new or empty):

    time                  UTC, ``2026-07-03T10:00:00Z``
    item                  the running queue item (``JOB_DIR/current.item``), ``-`` between items
    cgroup_memory_bytes   the job cgroup's ``memory.current`` (v1: ``memory.usage_in_bytes``)
    main_pid              the running item's main PID (``JOB_DIR/main.pid``)
    main_rss_kib          its VmRSS in KiB
    gpu_util_pct          GPU utilisation %, one value per GPU joined by ``;``
    gpu_mem_used_mib      GPU memory used in MiB, the same way

Anything unknown is ``NA`` (no nvidia-smi, an unreadable cgroup, no main PID yet). It exits when the runner PID is
gone. It never crashes: every reader is bounded (files by size, nvidia-smi by a timeout) and a failing reader
gives ``NA``. Imports cgroup.py, gpu_query.py (with command.py) and procfs.py, all standard library only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import sys
import time

from ansible_collections.remote_gpu.trainer.plugins.module_utils import cgroup, gpu_query, procfs

HEADER = ("time", "item", "cgroup_memory_bytes", "main_pid", "main_rss_kib", "gpu_util_pct", "gpu_mem_used_mib")
SAMPLES_FILE = "samples.tsv"
ITEM_FILE = "current.item"
MAIN_PID_FILE = "main.pid"
NA = "NA"
NO_ITEM = "-"
GPU_FIELDS = (gpu_query.UTILIZATION, gpu_query.MEMORY_USED)
SMI_TIMEOUT = 10
MAX_SMALL_FILE = 4096
RUNNER_POLL_SECONDS = 1.0


def _guarded(reader, *args):
    """``reader(*args)``, or None when it fails in any way: one bad reading must not end the sampling."""
    try:
        return reader(*args)
    except Exception:  # pylint: disable=broad-exception-caught  # a sidecar reports NA, it never dies
        return None


def _text(value):
    return NA if value is None else str(value)


def _per_gpu(gpus, key):
    if not gpus:
        return NA
    return ";".join(_text(gpu.get(key)) for gpu in gpus)


def _cell(value):
    """One TSV cell: no tab or line break can split the row."""
    return " ".join(str(value).split()) or NA


def format_row(epoch, item, cgroup_bytes, main_pid, rss_kib, gpus):
    """One samples.tsv line (with its newline) from the readings; None readings become NA (pure)."""
    cells = (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)), item or NO_ITEM, _text(cgroup_bytes),
             _text(main_pid), _text(rss_kib), _per_gpu(gpus, "utilization_pct"), _per_gpu(gpus, "memory_used_mib"))
    return "\t".join(_cell(cell) for cell in cells) + "\n"


def tick(readers):
    """Take one sample with ``readers`` (a dict of callables: now, item, cgroup_bytes, main_pid, rss_kib(pid),
    gpus) -> the samples.tsv line. Never raises."""
    pid = _guarded(readers["main_pid"])
    return format_row(_guarded(readers["now"]) or time.time(), _guarded(readers["item"]),
                      _guarded(readers["cgroup_bytes"]), pid,
                      _guarded(readers["rss_kib"], pid) if pid is not None else None, _guarded(readers["gpus"]))


# ---------------------------------------------------------------------------------------------------------------
# The real readers
# ---------------------------------------------------------------------------------------------------------------

def read_item(job_dir):
    text = cgroup.read_text(os.path.join(job_dir, ITEM_FILE), MAX_SMALL_FILE)
    lines = (text or "").strip().splitlines()
    return lines[0].strip() if lines else None


def read_main_pid(job_dir):
    return cgroup.parse_int(cgroup.read_text(os.path.join(job_dir, MAIN_PID_FILE), MAX_SMALL_FILE))


class CgroupMemory:
    """The memory in use by the runner's cgroup; the file is found once, and looked for again while missing."""

    def __init__(self, runner_pid, proc=procfs.PROC, root=cgroup.ROOT):
        self.runner_pid, self.proc, self.root = runner_pid, proc, root
        self.path = None

    def __call__(self):
        if self.path is None:
            self.path = (cgroup.memory_usage_file(self.runner_pid, self.proc, self.root)
                         or cgroup.memory_usage_file("self", self.proc, self.root))
        return cgroup.parse_int(cgroup.read_text(self.path)) if self.path else None


def read_gpus(timeout=SMI_TIMEOUT):
    """[{utilization_pct, memory_used_mib}] per GPU, or None when nvidia-smi is missing or fails."""
    try:
        return gpu_query.query_gpus(shutil.which("nvidia-smi"), GPU_FIELDS, timeout)
    except gpu_query.SmiError:
        return None


def real_readers(job_dir, runner_pid, proc=procfs.PROC, root=cgroup.ROOT):
    return {
        "now": time.time,
        "item": lambda: read_item(job_dir),
        "cgroup_bytes": CgroupMemory(runner_pid, proc, root),
        "main_pid": lambda: read_main_pid(job_dir),
        "rss_kib": lambda pid: procfs.read_rss_kib(pid, proc),
        "gpus": read_gpus,
    }


def append(path, text):
    """Append to samples.tsv; a full disk or a removed directory only loses this line. Never blocks and never
    writes through a link: a FIFO, a device or a symlink planted as samples.tsv loses the line too."""
    flags = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
             | getattr(os, "O_NOCTTY", 0))
    try:
        fd = os.open(path, flags, 0o644)
    except OSError:  # ENXIO: a FIFO without a reader; ELOOP: a symlink
        return
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.write(fd, text.encode("utf-8"))
    except OSError:
        pass
    finally:
        os.close(fd)


def run(job_dir, interval, runner_pid, readers=None, alive=None):
    """Sample every ``interval`` seconds while the runner lives; the first line is written at once."""
    readers = readers or real_readers(job_dir, runner_pid)
    alive = alive or (lambda: procfs.pid_exists(runner_pid))
    path = os.path.join(job_dir, SAMPLES_FILE)
    try:
        empty = os.path.getsize(path) == 0
    except OSError:
        empty = True
    if empty:
        append(path, "\t".join(HEADER) + "\n")
    while alive():
        append(path, tick(readers))
        deadline = time.monotonic() + interval
        while alive() and time.monotonic() < deadline:
            time.sleep(max(0.0, min(RUNNER_POLL_SECONDS, deadline - time.monotonic())))


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="sampler", description="Sample memory and GPU use of a queued job.")
    parser.add_argument("--job-dir", required=True, help="the job directory (samples.tsv is written there)")
    parser.add_argument("--interval", required=True, type=float, help="seconds between samples (more than 0)")
    parser.add_argument("--runner-pid", required=True, type=int, help="sample while this PID lives")
    args = parser.parse_args(argv)
    if args.interval <= 0:
        parser.error("--interval must be more than 0 seconds")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(args.job_dir, args.interval, args.runner_pid)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
