# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Write a file so that readers see the old content or the new one, never a part (module and controller side)."""

from __future__ import annotations

import errno
import os
import tempfile


def fsync_dir(path):
    """Make the renames in directory ``path`` durable; filesystems that cannot fsync a directory are tolerated."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def write_atomic(path, data, mode=0o644, make_dirs=False):
    """Write ``data`` (bytes or str) to a temporary file beside ``path``, fsync it, rename it over ``path``.

    The temporary name ends in ``.tmp`` so that globs for the final name (``*.json``, ``*.prom``) never see it.
    On any error the temporary file is removed and the previous ``path`` is left as it was. Missing parent
    directories are an error unless ``make_dirs``.
    """
    directory = os.path.dirname(os.path.abspath(path))
    if make_dirs:
        os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data.encode("utf-8") if isinstance(data, str) else data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(directory)
