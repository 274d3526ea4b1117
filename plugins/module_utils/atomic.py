# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Write a file so that readers see the old content or the new one, never a part (module and controller side)."""

from __future__ import annotations

import contextlib
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


class _Staged(object):
    """The temporary file of ``replacing``: ``file`` (open for binary writing) and ``name``."""

    def __init__(self, handle, name):
        self.file = handle
        self.name = name

    def close(self):
        """Flush, fsync and close the temporary file (done at the end of the block if not before; idempotent)."""
        if not self.file.closed:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()


@contextlib.contextmanager
def replacing(path, prefix=None, mode=None, make_dirs=False):
    """Stage the new content of ``path`` in a temporary file beside it; rename it over ``path`` when the block ends.

    Yields a ``_Staged`` (``.file``, ``.name``, ``.close()``). The block writes ``.file``; it may ``close()`` it
    to check ``.name`` before the rename (raise to refuse it). At the end the file is flushed, fsynced and closed,
    given ``mode`` (when not None), renamed over ``path`` with ``os.replace`` and the directory is fsynced. If the
    block or any of these steps raises, the temporary file is removed and ``path`` is left as it was.

    The temporary name is ``prefix`` (default ``.<name>.``) plus random letters plus ``.tmp``, so that globs for
    the final name (``*.json``, ``*.prom``) never see it. Missing parent directories are an error unless
    ``make_dirs``.
    """
    directory = os.path.dirname(os.path.abspath(path))
    if make_dirs:
        os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix or ".%s." % os.path.basename(path), suffix=".tmp", dir=directory)
    staged = _Staged(os.fdopen(fd, "wb"), tmp)
    try:
        yield staged
        staged.close()
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        staged.file.close()
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(directory)


def write_atomic(path, data, mode=0o644, make_dirs=False):
    """Write ``data`` (bytes or str) to a temporary file beside ``path``, fsync it, rename it over ``path``.

    On any error the temporary file is removed and the previous ``path`` is left as it was. Missing parent
    directories are an error unless ``make_dirs``.
    """
    with replacing(path, mode=mode, make_dirs=make_dirs) as staged:
        staged.file.write(data.encode("utf-8") if isinstance(data, str) else data)
