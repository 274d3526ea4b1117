# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one reader of files in directories that a box or a user can write (job directories, the history directory,
records, secret files, cgroup and /proc files): bounded, never blocking, never following a link it should not.

- ``open_regular``: the file is opened with ``O_NONBLOCK`` (a planted FIFO or device never blocks the open), then
  checked with ``fstat`` to be a regular file; with ``follow=False`` (``O_NOFOLLOW``) a symlink is refused; with
  ``dir_fd`` the name is opened relative to an open directory.
- ``read_bounded``: at most ``limit`` bytes, from the start or (``tail=True``) from the end.
- ``inside`` / ``resolved_inside``: whether a path a record names stays inside the directory it belongs to,
  lexically (``..`` cannot leave it) and once resolved (no symlink leads out of it).

Refusals are ``ReadRefused`` with a message that says what the file is; a missing file is ``FileNotFoundError``
(``read_text`` makes both None). Standard library only: modules on the box and the controller use it alike.
"""

from __future__ import annotations

import errno
import os
import stat

MAX_BYTES = 1 << 20


class ReadRefused(Exception):
    """A file that is not read: not a regular file, a symlink where none is followed, or unreadable. ``errno`` and
    ``reason`` say why without the path (for a caller that raises OSError: digest.py); ``kind`` names what a file
    that is not a regular one is ("FIFO", "directory", ...), else None."""

    def __init__(self, message, errno_=errno.EINVAL, reason=None, kind=None):
        super().__init__(message)
        self.errno, self.reason, self.kind = errno_, reason or message, kind


KINDS = ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"),
         (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"), (stat.S_ISLNK, "symlink"))


def kind_of(mode):
    """What a file of ``mode`` is, in words ("regular file", "FIFO", ...)."""
    if stat.S_ISREG(mode):
        return "regular file"
    return next((name for test, name in KINDS if test(mode)), "special file")


def _refused(path, exc):
    return ReadRefused("%s cannot be read: %s" % (path, getattr(exc, "strerror", None) or exc),
                       getattr(exc, "errno", None) or errno.EINVAL, getattr(exc, "strerror", None) or str(exc))


def _not_regular(path, mode):
    kind = kind_of(mode)
    if stat.S_ISLNK(mode):
        return ReadRefused("%s is a symlink: not followed" % path, errno.ELOOP, "a symlink, not followed")
    return ReadRefused("%s is a %s, not a regular file: not read" % (path, kind), errno.EINVAL,
                       "not a regular file (%s)" % kind, kind)


def open_regular(path, follow=False, dir_fd=None):
    """An fd of the regular file ``path`` opened for reading without blocking. Raises FileNotFoundError, or
    ReadRefused naming what the file is (a FIFO, a device, a directory, a symlink with ``follow=False``)."""
    flags = (os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
             | (0 if follow else os.O_NOFOLLOW))
    try:
        # looked at before the open: opening a device can have effects, even without blocking
        before = os.stat(path, dir_fd=dir_fd, follow_symlinks=follow).st_mode
    except FileNotFoundError:
        raise
    except (OSError, TypeError, ValueError) as exc:
        raise _refused(path, exc) from None
    if not stat.S_ISREG(before):
        raise _not_regular(path, before)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd) if dir_fd is not None else os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise _not_regular(path, stat.S_IFLNK) from None
        if exc.errno == errno.ENXIO:  # a FIFO with no writer, or a device without its driver, opened O_NONBLOCK
            raise ReadRefused("%s is not a regular file (a FIFO or device): not read" % path, errno.EINVAL,
                              "not a regular file (a FIFO or device)", "FIFO or device") from None
        raise _refused(path, exc) from None
    except (TypeError, ValueError) as exc:
        raise ReadRefused("%r is not a usable path: %s" % (path, exc)) from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise _refused(path, exc) from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _not_regular(path, mode)
    return fd


def read_fd(fd, limit=MAX_BYTES, tail=False):
    """(bytes, size, cut) of an open regular file: at most ``limit`` bytes, the first or (``tail``) the last ones."""
    size = os.fstat(fd).st_size
    start = max(0, size - limit) if tail else 0
    if start:
        os.lseek(fd, start, os.SEEK_SET)
    chunks, wanted = [], limit
    while wanted > 0:  # read(), not pread(): /proc and cgroup files report size 0 and are read to their end
        chunk = os.read(fd, min(wanted, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        wanted -= len(chunk)
    data = b"".join(chunks)
    return data, size, bool(start) or size > len(data)


def read_bounded(path, limit=MAX_BYTES, follow=False, dir_fd=None, tail=False):
    """(bytes, size, cut) of the regular file ``path`` (see ``open_regular`` and ``read_fd``)."""
    fd = open_regular(path, follow=follow, dir_fd=dir_fd)
    try:
        return read_fd(fd, limit, tail)
    except OSError as exc:
        raise _refused(path, exc) from None
    finally:
        os.close(fd)


def read_text(path, limit=MAX_BYTES, follow=False):
    """The first ``limit`` bytes of a regular file as text, or None (missing, refused, unreadable)."""
    try:
        return read_bounded(path, limit, follow=follow)[0].decode("utf-8", "replace")
    except (OSError, ReadRefused):
        return None


def inside(path, root):
    """Whether ``path`` (absolute, or relative to ``root``) lies in ``root`` once ``.`` and ``..`` are resolved
    lexically (no symlink is looked at)."""
    if not isinstance(path, str) or not isinstance(root, str) or not root or "\x00" in path:
        return False
    root = os.path.normpath(os.path.abspath(root))
    full = os.path.normpath(os.path.join(root, path))
    return full == root or full.startswith(root.rstrip(os.sep) + os.sep)


def resolved_inside(path, root):
    """Whether ``path`` lies in ``root`` lexically and once every symlink is resolved (a link out of it, at any
    depth, is not inside)."""
    if not inside(path, root):
        return False
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(root, path))
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)
