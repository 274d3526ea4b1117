# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sha256 of a file, read in chunks (standard library only; on the box and on the controller)."""

from __future__ import annotations

import hashlib

CHUNK_SIZE = 1024 * 1024


def sha256_file(path, chunk_size=CHUNK_SIZE):
    """``(hexdigest, bytes)`` of a file, read in ``chunk_size`` chunks."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(chunk_size)
            if not chunk:
                break
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size
