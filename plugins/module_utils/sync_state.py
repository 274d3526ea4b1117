# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The record of the last verified copy into each destination, so that an unchanged re-run need not hash both
sides.

A cache under ``STATE_DIR``: a file whose source and destination are exactly as the last verified sync left them
(``stat_key``) is the same without being read; failing to read or write the record only makes the next run hash
again. Standard library only: launch ships this file to the box with sync.py.
"""

from __future__ import annotations

import hashlib
import json
import os

from ansible_collections.remote_gpu.trainer.plugins.module_utils import safe_read
from ansible_collections.remote_gpu.trainer.plugins.module_utils.atomic import write_atomic


# Where a sync remembers what it verified, per destination, so that an unchanged re-run need not hash both sides.
STATE_DIR = "~/.cache/remote_gpu.trainer/checked_sync"
# A record larger than this is not read (the next run hashes again): about 200 bytes a file, so 250 000 files
MAX_STATE_BYTES = 48 << 20


def stat_key(st):
    """What identifies a file's content without reading it: device, inode, size, mtime and ctime (ns).

    ctime cannot be set by users (touch -r, cp -p and rsync -t all leave it at the time of the change), so a file
    rewritten in place, even to the same size and mtime, no longer matches.
    """
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def state_path(dest):
    digest = hashlib.sha256(os.path.realpath(dest).encode("utf-8", "surrogateescape")).hexdigest()[:24]
    return os.path.join(os.path.expanduser(STATE_DIR), digest + ".json")


def load_state(dest):
    """{rel: {"src": key, "dest": key, "sha256": hex}} recorded by the last verified sync into ``dest``; {} if none.

    Read through safe_read.py, like every file in a directory the box's user can write: a FIFO, a device or a
    symlink in the record's place, or a record larger than MAX_STATE_BYTES, is no record (never a hang)."""
    try:
        data, _size, cut = safe_read.read_bounded(state_path(dest), MAX_STATE_BYTES)
        if cut:
            return {}
        data = json.loads(data.decode("utf-8"))
    except (OSError, ValueError, safe_read.ReadRefused):
        return {}
    return data if isinstance(data, dict) else {}


def save_state(dest, items):
    """Record the verified files (a cache: failing to write it only makes the next run hash again)."""
    state = {}
    for item in items:
        try:
            state[item["rel"]] = {"src": stat_key(item["stat"]), "dest": stat_key(os.stat(item["dest"])),
                                  "sha256": item["sha256"]}
        except OSError:
            continue
    try:
        write_atomic(state_path(dest), json.dumps(state), mode=0o600, make_dirs=True)
    except OSError:
        pass


def recorded_same(record, st, target):
    """True when both sides are exactly as they were after the last verified copy."""
    if not record:
        return False
    try:
        return record["src"] == stat_key(st) and record["dest"] == stat_key(os.stat(target))
    except (OSError, KeyError, TypeError):
        return False
