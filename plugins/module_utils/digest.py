# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sha256 of a file, read in chunks (standard library only; on the box and on the controller)."""

from __future__ import annotations

import hashlib
import os
import stat

from ansible_collections.remote_gpu.trainer.plugins.module_utils import safe_read

CHUNK_SIZE = 1024 * 1024


def open_regular(path):
    """A binary file object for ``path``, only when it is a regular file (a symlink to one is followed).

    Opened by the collection's one non-blocking reader (safe_read.py: a FIFO put in its place does not hang the
    caller, a device is never opened), so a FIFO, a device or a directory raises OSError(EINVAL, "not a regular
    file (<kind>)") instead of being read.
    """
    try:
        fd = safe_read.open_regular(path, follow=True)
    except safe_read.ReadRefused as exc:
        raise OSError(exc.errno, exc.reason, path) from None
    try:
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def file_kind(mode):
    """A word for the type of file in ``mode`` (from stat)."""
    for test, word in ((stat.S_ISREG, "regular file"), (stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symbolic link"),
                       (stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return word
    return "special file"


def sha256_file(path, chunk_size=CHUNK_SIZE):
    """``(hexdigest, bytes)`` of a regular file, read in ``chunk_size`` chunks; OSError for anything else."""
    digest = hashlib.sha256()
    size = 0
    with open_regular(path) as handle:
        while True:
            chunk = handle.read(chunk_size)
            if not chunk:
                break
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size
