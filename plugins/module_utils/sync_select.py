# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which files a sync copies, and what it does with symbolic links and special files under src.

A symbolic link inside src to a regular file inside src is copied as its target's bytes; a link that leaves src,
dangles or loops ends the sync before anything is read; links to directories are never followed and special files
are never copied (both are listed in ``left_out``). SyncError, the one error of a sync, is defined here because
selection is the first step that raises it; ``sync`` uses it from here. Standard library only: launch ships this
file to the box with sync.py.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat

from ansible_collections.remote_gpu.trainer.plugins.module_utils.digest import file_kind


class SyncError(Exception):
    """A failure that ends the sync; the message says what and what to do."""


def _inside(path, root):
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def resolve_link(full, root, shown):
    """``(real_path, stat_result)`` of the target of the symbolic link ``full`` when it is a regular file inside
    ``root`` (the resolved src); SyncError when it leaves ``root``, dangles or loops (its content is never read)."""
    target = os.readlink(full)
    real = os.path.realpath(full)
    try:
        st = os.stat(full)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SyncError("%s is a symbolic link loop (-> %s); remove the link, or leave it out with include"
                            % (shown, target)) from exc
        raise SyncError("%s is a dangling symbolic link (-> %s, which does not exist); remove the link, or leave it "
                        "out with include" % (shown, target)) from exc
    if not _inside(real, root):
        raise SyncError("%s is a symbolic link to %s, outside src: checked_sync never copies what a link outside src "
                        "points to. Remove the link, leave it out with include, or sync that file as its own src"
                        % (shown, real))
    return real, st


def select_files(src, include, left_out=None):
    """``[(rel, path, stat_result)]`` of the regular files to copy, sorted by relative path.

    ``path`` is the file to read: for a symbolic link inside ``src`` to a regular file inside ``src``, its resolved
    target. A selected link that leaves ``src``, dangles or loops raises SyncError before anything is read.
    Symbolic links to directories (never followed) and special files (FIFOs, sockets, devices) are not copied;
    they are appended to ``left_out`` as ``{"path": rel, "reason": ...}``.
    """
    left_out = [] if left_out is None else left_out
    try:
        src_st = os.stat(src)
    except OSError as exc:
        raise SyncError("src %s does not exist or cannot be read (%s); give an existing file or directory"
                        % (src, exc.strerror)) from exc
    root = os.path.realpath(src)
    if stat.S_ISREG(src_st.st_mode):
        # src itself was named by the user: a link there is resolved once, and its target copied
        candidates = [(os.path.basename(src.rstrip(os.sep)), root, src_st)]
    elif stat.S_ISDIR(src_st.st_mode):
        candidates = []

        def unreadable(exc):
            raise SyncError("cannot read the directory %s under src (%s); nothing was copied. Fix its permissions "
                            "or leave it out" % (exc.filename, exc.strerror))

        for current, dirs, names in os.walk(root, onerror=unreadable):
            dirs.sort()
            rel_dir = os.path.relpath(current, root)
            for name in list(dirs):
                full = os.path.join(current, name)
                if os.path.islink(full):  # os.walk does not follow it; say so
                    rel = name if rel_dir == "." else os.path.join(rel_dir, name)
                    left_out.append({"path": rel.replace(os.sep, "/"),
                                     "reason": "symbolic link to a directory (%s), not followed" % os.readlink(full)})
            for name in names:
                full = os.path.join(current, name)
                rel = (name if rel_dir == "." else os.path.join(rel_dir, name)).replace(os.sep, "/")
                candidates.append((rel, full, None))
    else:
        raise SyncError("src %s is a %s, not a regular file or directory; give the file or directory to copy"
                        % (src, file_kind(src_st.st_mode)))
    selected = []
    for rel, full, st in sorted(candidates, key=lambda candidate: candidate[0]):
        if include and not any(fnmatch.fnmatchcase(rel, pattern) for pattern in include):
            continue  # what is not selected is never resolved nor read
        if st is None:
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                full, st = resolve_link(full, root, os.path.join(src, *rel.split("/")))
                if not stat.S_ISREG(st.st_mode):
                    left_out.append({"path": rel, "reason": "symbolic link to a %s, not copied" % file_kind(st.st_mode)})
                    continue
            elif not stat.S_ISREG(st.st_mode):
                left_out.append({"path": rel, "reason": "%s, not copied" % file_kind(st.st_mode)})
                continue
        selected.append((rel, full, st))
    return selected
