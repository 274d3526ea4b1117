# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The kernel log, read bounded and non-blocking: from journalctl -k, else dmesg, or from a file. Shared by
gpu_health (preflight) and job_status (patrol), and small on purpose: job_status's payload does not carry the
nvidia-smi parsers for it. Standard library only.
"""

from __future__ import annotations

from ansible_collections.remote_gpu.trainer.plugins.module_utils import safe_read
from ansible_collections.remote_gpu.trainer.plugins.module_utils.command import run_with_timeout

MAX_KERNEL_LOG_BYTES = 16 * 1024 * 1024  # only the tail of a bigger file is read: the newest Xid events
KILL_GRACE_SECONDS = 2
JOURNALCTL_ARGS = ["-k", "-b", "--no-pager", "-q", "-o", "short-iso"]


class KernelLogError(Exception):
    """A kernel_log parameter that cannot be used (not a regular file, empty)."""


def read_log_file(path):
    """-> (text of the last MAX_KERNEL_LOG_BYTES of a regular file, None) or (None, why it is unreadable).

    Read through the collection's one bounded, non-blocking reader (safe_read.py: a FIFO cannot hang the open, a
    device is never opened); anything but a regular file is a wrong parameter (KernelLogError)."""
    if not path.strip():
        raise KernelLogError("kernel_log is empty: give auto or the path of a kernel log file")
    try:
        data = safe_read.read_bounded(path, MAX_KERNEL_LOG_BYTES, follow=True, tail=True)[0]
    except safe_read.ReadRefused as exc:
        if exc.kind:
            raise KernelLogError("kernel_log %s is a %s, not a regular file: give auto or the path of a kernel log "
                                 "file" % (path, exc.kind))
        return None, "cannot read %s: %s" % (path, exc.reason)
    except (IOError, OSError) as exc:
        return None, "cannot read %s: %s" % (path, exc.strerror or exc)
    return data.decode("utf-8", "replace"), None


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
