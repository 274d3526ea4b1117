# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Free bytes and inodes of the filesystem that holds a path, and the budget check against them.

Pure apart from ``os.statvfs`` in :func:`fs_free`. Numbers in messages use a plain space as the
thousands separator (``1 200``), always.

Free space is what an unprivileged writer can use (``f_bavail``, ``f_favail``), so the root-reserved
blocks never count as free. A filesystem that reports ``f_files == 0`` (btrfs, some FUSE and network
filesystems) has no inode limit that statvfs can see; its inode budget is not checked.
"""

from __future__ import annotations

import os


def fmt_count(number):
    """``1200`` -> ``'1 200'`` (plain space as the thousands separator)."""
    return format(int(number), ",").replace(",", " ")


def nearest_existing(path):
    """The path itself, or its nearest ancestor that exists (the directory that will hold it)."""
    current = os.path.abspath(path)
    while not os.path.exists(current):
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return current


def inodes_reported(st):
    """True when the statvfs result carries an inode count (``f_files`` is not 0)."""
    return st.f_files > 0


def free_bytes(st):
    """Bytes available to an unprivileged writer."""
    return st.f_bavail * st.f_frsize


def free_inodes(st):
    """Inodes available to an unprivileged writer, or None when the filesystem reports none."""
    if not inodes_reported(st):
        return None
    return st.f_favail


def fs_free(path):
    """statvfs the filesystem that holds ``path`` (or would hold it).

    Returns ``(probe, statvfs_result)``: ``probe`` is the existing path that was measured.
    Raises OSError when even the nearest existing ancestor cannot be measured.
    """
    probe = nearest_existing(path)
    return probe, os.statvfs(probe)


def round_up_blocks(size, block_size):
    """Bytes that a file of ``size`` bytes occupies in whole blocks (at least one block for data)."""
    if block_size <= 0:
        return size
    blocks = -(-size // block_size)
    return blocks * block_size


def copy_needs(sizes, new_files, new_dirs, block_size):
    """``(need_bytes, need_inodes)`` to write files of ``sizes`` one after the other.

    Bytes: every file rounded up to whole blocks, plus one block per new directory. The old copy of
    a replaced file is not counted as freed (it stays until its replacement is verified).
    Inodes: one per new file and per new directory, plus one for the temporary file in flight.
    """
    need_bytes = sum(round_up_blocks(size, block_size) for size in sizes) + new_dirs * max(block_size, 0)
    need_inodes = new_files + new_dirs + (1 if sizes else 0)
    return need_bytes, need_inodes


def check_budget(need_bytes, need_inodes, st, where="", reserve_bytes=0, min_free_inodes=0):
    """None when ``need_bytes`` and ``need_inodes`` fit, else one message with the numbers.

    ``reserve_bytes`` and ``min_free_inodes`` must stay free after the write. ``where`` names the
    filesystem in the message (for example ``/root/autodl-fs``).
    """
    place = " on %s" % where if where else ""
    problems = []
    have_bytes = free_bytes(st)
    if need_bytes + reserve_bytes > have_bytes:
        keep = " (+ %s kept free)" % fmt_count(reserve_bytes) if reserve_bytes else ""
        problems.append("needs %s bytes%s, %s free%s"
                        % (fmt_count(need_bytes), keep, fmt_count(have_bytes), place))
    have_inodes = free_inodes(st)
    if have_inodes is not None and need_inodes + min_free_inodes > have_inodes:
        keep = " (+ %s kept free)" % fmt_count(min_free_inodes) if min_free_inodes else ""
        problems.append("needs %s inodes%s, %s free%s"
                        % (fmt_count(need_inodes), keep, fmt_count(have_inodes), place))
    if not problems:
        return None
    return "; ".join(problems)
