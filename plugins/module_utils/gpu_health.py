# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What gpu_health does on the box besides reading the full state: check its parameters, sample nvidia-smi
--query-gpu over a few seconds, and read the kernel log (bounded and non-blocking). Standard library only.
"""

from __future__ import annotations

import math
import os
import re
import stat
import time

from ansible_collections.remote_gpu.trainer.plugins.module_utils.command import run_with_timeout
from ansible_collections.remote_gpu.trainer.plugins.module_utils.digest import file_kind
from ansible_collections.remote_gpu.trainer.plugins.module_utils.gpu_findings import smi_timeout
from ansible_collections.remote_gpu.trainer.plugins.module_utils.gpu_query import (
    NvidiaSmiParseError, SmiError, parse_rows, query_args, rejected_field, run_smi)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.nvidia_smi import SAMPLE_FIELDS

SAMPLE_COUNT = 5
MAX_SAMPLE_SECONDS = 600
MAX_KERNEL_LOG_BYTES = 16 * 1024 * 1024  # only the tail of a bigger file is read: the newest Xid events
KILL_GRACE_SECONDS = 2
JOURNALCTL_ARGS = ["-k", "-b", "--no-pager", "-q", "-o", "short-iso"]


class GpuHealthError(Exception):
    """Bad arguments, reported with fail_json by main()."""


def validate(params):
    """Raise GpuHealthError when an argument cannot be used."""
    if params["expected_name"]:
        try:
            re.compile(params["expected_name"])
        except re.error as exc:
            raise GpuHealthError("expected_name is not a valid regular expression (%s): fix the pattern" % exc)
    seconds = params["sample_seconds"]
    if not (math.isfinite(seconds) and 0 <= seconds <= MAX_SAMPLE_SECONDS):
        raise GpuHealthError("sample_seconds must be a number from 0 to %d (got %s): the samples are taken within "
                             "the task" % (MAX_SAMPLE_SECONDS, seconds))
    for key in ("temp_hot_c", "sm_clock_floor_pct", "expected_count", "min_memory_mib"):
        if params[key] is not None and params[key] < 0:
            raise GpuHealthError("%s must not be negative (got %s)" % (key, params[key]))
    if params["timeout"] <= 0:
        raise GpuHealthError("timeout must be a positive number of seconds (got %s)" % params["timeout"])


def take_samples(smi, timeout, seconds, options):
    """A few --query-gpu samples over ``seconds`` -> (samples, runs, findings). Drops fields the driver rejects."""
    table = list(SAMPLE_FIELDS)
    count = 1 if seconds <= 0 else SAMPLE_COUNT
    interval = seconds / (count - 1) if count > 1 else 0
    samples = []
    for number in range(count):
        if number:
            time.sleep(interval)
        while True:
            args = query_args(table)
            try:
                rc, out, err = run_smi(smi, args, timeout, check=False)
            except SmiError:  # with a path and check=False, only a timeout
                return samples, number, [smi_timeout([smi] + args, timeout, options)]
            rejected = rejected_field(out + err)
            if rc and rejected and rejected != "index" and len(table) > 1:
                table = [entry for entry in table if entry[0] != rejected]
                continue
            break
        if rc:
            return samples, number, []  # sampling is a bonus: the full state already carries the verdict's facts
        try:
            samples.extend(parse_rows(out, table))
        except NvidiaSmiParseError:
            return samples, number, []
    return samples, count, []


def read_log_file(path):
    """-> (text of the last MAX_KERNEL_LOG_BYTES of a regular file, None) or (None, why it is unreadable).

    Opened non-blocking (a FIFO cannot hang the open) and checked on the open descriptor; anything but a regular
    file is a wrong parameter (GpuHealthError)."""
    if not path.strip():
        raise GpuHealthError("kernel_log is empty: give auto or the path of a kernel log file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except (IOError, OSError) as exc:
        return None, "cannot read %s: %s" % (path, exc.strerror or exc)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise GpuHealthError("kernel_log %s is a %s, not a regular file: give auto or the path of a kernel log "
                                 "file" % (path, file_kind(info.st_mode)))
        if info.st_size > MAX_KERNEL_LOG_BYTES:
            os.lseek(fd, info.st_size - MAX_KERNEL_LOG_BYTES, os.SEEK_SET)
        chunks, left = [], MAX_KERNEL_LOG_BYTES
        while left > 0:
            chunk = os.read(fd, min(left, 1024 * 1024))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks).decode("utf-8", "replace"), None
    except (IOError, OSError) as exc:
        return None, "cannot read %s: %s" % (path, exc.strerror or exc)
    finally:
        os.close(fd)


def read_kernel_log(module, source, timeout):
    """-> (text or None, reason it is unreadable)."""
    if source != "auto":
        return read_log_file(source)
    reasons = []
    # journalctl may answer with nothing (no kernel messages in a container's journal): then ask dmesg, whose
    # success means the kernel ring buffer was read, even if it holds no line.
    candidates = (("journalctl", JOURNALCTL_ARGS, False), ("dmesg", [], True))
    for name, args, empty_ok in candidates:
        path = module.get_bin_path(name)
        if not path:
            reasons.append("%s not installed" % name)
            continue
        rc, out, err = run_with_timeout([path] + args, timeout, grace=KILL_GRACE_SECONDS)
        if rc is None:
            reasons.append("%s timed out" % name)
            continue
        if rc == 0 and (out.strip() or empty_ok):
            return out, None
        reasons.append("%s: %s" % (name, (err.strip().splitlines() or ["exit %d, no output" % rc])[-1]))
    return None, "; ".join(reasons)
