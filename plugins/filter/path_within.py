# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The path_within filter: whether a path is a directory or lies below it (documented in path_within.yml)."""

from __future__ import annotations

import posixpath

from ansible.errors import AnsibleFilterError


def _normal(path, what):
    if not isinstance(path, str) or not path:
        raise AnsibleFilterError("path_within: %s must be a non-empty path, got %r" % (what, path))
    path = posixpath.normpath(path)
    # POSIX keeps a leading '//' apart; for containment it is the root, like '/' and '///'
    return "/" + path.lstrip("/") if path.startswith("/") else path


def path_within(path, root):
    """True when ``path`` is ``root`` or below it, compared by path components after normalising both.

    ``..`` and ``.`` are resolved lexically (no symbolic link is followed), trailing and doubled slashes are
    ignored, and ``/data/run`` is not within ``/data/r``. An absolute path is never within a relative root, nor
    the other way round.
    """
    path = _normal(path, "the path")
    root = _normal(root, "the root")
    if path.startswith("/") != root.startswith("/"):
        return False
    if root in ("/", "."):
        return path.startswith("/") or (path != ".." and not path.startswith("../"))
    return path == root or path.startswith(root + "/")


class FilterModule(object):
    def filters(self):
        return {"path_within": path_within}
