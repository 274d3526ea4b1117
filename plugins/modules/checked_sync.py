#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: checked_sync
short_description: Atomic, verified copy of results to durable storage, with a budget check first
version_added: 0.1.0
author:
  - remote_gpu.trainer contributors (@remote-gpu)
description:
  - Copies a file or a directory tree on the target to a directory on the durable storage tier, and reports
    success only after every copied file has been read back from the destination and its sha256 matches the source.
  - Before anything is written it works out which files must be copied (the destination is missing, or differs in
    size or sha256) and checks that the free bytes and free inodes of the destination filesystem suffice. If they do
    not, the task fails with the numbers and writes nothing.
  - Each file is written to a temporary name in its destination directory (C(.<name>.checked_sync.<random>.tmp)),
    hashed while it is copied (the source is read once), flushed with fsync, read back and compared, then renamed
    over the destination with C(os.replace) and the directory is flushed. On any error (disk full, quota, mismatch,
    permission) the temporary file is removed, the previous durable copy is left as it was, and the task fails.
  - Idempotent. A destination file is unchanged when its size and its sha256 equal the source's. Modification
    times are never used as a shortcut, so every unchanged file is read on both sides on every run.
  - Nothing is ever deleted from O(dest); files there that are not in O(src) are left alone.
  - Symbolic links to files inside O(src) are copied as regular files with the content of their target; symbolic
    links to directories are not followed. Mode bits and modification times are copied when the destination
    filesystem allows it (best effort; the content is what is verified).
  - A run killed with SIGKILL can leave a C(.*.checked_sync.*.tmp) file behind; it is never a durable copy and can
    be deleted.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes
  - remote_gpu.trainer.attributes.platform
attributes:
  check_mode:
    support: full
    details: Plans, checks the budget and hashes the sources; reports what would be copied and writes nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  src:
    description:
      - A file or a directory on the target.
      - A file lands as O(dest)/<basename of src>.
      - A directory's contents land under O(dest) with the same relative paths, so C(src/a/b.pt) becomes
        C(dest/a/b.pt); the directory O(src) itself is not recreated inside O(dest).
    type: path
    required: true
  dest:
    description:
      - The destination directory on the durable tier. It and any missing parents are created.
      - Must not be O(src) or lie inside it.
    type: path
    required: true
  include:
    description:
      - Shell-style patterns (Python C(fnmatch), case-sensitive) matched against each file's path relative to
        O(src), for example C(*.pt) or C(best/*). C(*) also matches C(/). For a file O(src) the relative path is
        its basename.
      - A file is copied when any pattern matches. When omitted, every file is copied.
      - When no file is selected at all the task fails (a sync that selects nothing is never reported as success).
    type: list
    elements: str
  min_free_inodes:
    description: Inodes that must still be free on the destination filesystem after the copy.
    type: int
    default: 0
  reserve_bytes:
    description: Bytes that must still be free on the destination filesystem after the copy.
    type: int
    default: 0
notes:
  - Free space is what an unprivileged user may use (statvfs C(f_bavail), C(f_favail)). File sizes are rounded up to
    whole blocks and each new directory counts one block and one inode; one more inode is counted for the temporary
    file. A replaced file's old copy is not counted as freed.
  - When the filesystem reports no inode count (statvfs C(f_files) is 0, for example btrfs), only bytes are checked.
  - The read-back asks the kernel to drop the cached pages first (C(posix_fadvise) DONTNEED) where that is available,
    so it reads what the filesystem stored rather than what is still in memory.
  - If a source file changes while it is copied (a checkpoint still being written), the task fails; run it again when
    the writer is done.
"""

EXAMPLES = r"""
- name: Copy the best checkpoints to the durable tier, verified
  remote_gpu.trainer.checked_sync:
    src: "{{ trainer_data_dir }}/runs/exp42"
    dest: "{{ trainer_durable_dir }}/runs/exp42"
    include:
      - "best*.pt"
      - "*.json"
    min_free_inodes: 1000
    reserve_bytes: 1073741824

- name: Copy one file; it lands as /root/autodl-fs/final/model.safetensors
  remote_gpu.trainer.checked_sync:
    src: /root/autodl-tmp/out/model.safetensors
    dest: /root/autodl-fs/final

- name: What would be copied (writes nothing)
  remote_gpu.trainer.checked_sync:
    src: /root/autodl-tmp/out
    dest: /root/autodl-fs/out
  check_mode: true
  register: plan
"""

RETURN = r"""
changed:
  description: Whether any file was (or, in check mode, would be) copied.
  type: bool
  returned: always
  sample: true
copied:
  description:
    - The files copied and verified in this run (in check mode, those that would be copied), relative to O(dest).
    - On failure, the files that were completed before the failure; they are verified durable copies.
  type: list
  elements: dict
  returned: always
  sample: [{"path": "best.pt", "bytes": 1048576, "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}]
unchanged:
  description:
    - Relative paths of the files whose destination was already identical (size and sha256), so not copied.
    - Named C(unchanged), not C(skipped), because Ansible marks any task whose result has a true C(skipped) key as
      skipped.
  type: list
  elements: str
  returned: always
  sample: ["config.json"]
bytes_copied:
  description: Sum of the bytes of RV(copied).
  type: int
  returned: always
  sample: 1048576
files:
  description:
    - Every selected file, relative to O(dest), with the sha256 of its source.
    - C(sha256) is null for a file that was not read, for example when the budget check failed.
  type: list
  elements: dict
  returned: always
  sample:
    - {"path": "best.pt", "bytes": 1048576, "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
    - {"path": "config.json", "bytes": 2, "sha256": "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"}
dest:
  description: The destination directory.
  type: str
  returned: always
  sample: /root/autodl-fs/runs/exp42
free_bytes:
  description: Free bytes on the destination filesystem, measured last (after the copy, or when it failed). Null if
    it could not be measured.
  type: int
  returned: always
  sample: 52428800000
free_inodes:
  description: Free inodes on the destination filesystem, measured last. Null when the filesystem reports none.
  type: int
  returned: always
  sample: 183200
msg:
  description: What happened, with the numbers; on failure, what went wrong and what to do.
  type: str
  returned: always
  sample: copied and verified 1 file(s) (1 048 576 bytes) into /root/autodl-fs/runs/exp42, 1 unchanged
"""

import errno
import fnmatch
import hashlib
import os
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.remote_gpu.trainer.plugins.module_utils.fsbudget import (
    check_budget,
    copy_needs,
    fmt_count,
    free_bytes,
    free_inodes,
    fs_free,
)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.manifest import sha256_file

CHUNK_SIZE = 1024 * 1024


class SyncError(Exception):
    """A failure that ends the sync; the message says what and what to do."""


def select_files(src, include):
    """``[(rel, abs_path, stat_result)]`` of the files to consider, sorted by relative path."""
    if os.path.isfile(src):
        candidates = [(os.path.basename(src), src)]
    elif os.path.isdir(src):
        candidates = []
        for current, dirs, names in os.walk(src):
            dirs.sort()
            rel_dir = os.path.relpath(current, src)
            for name in names:
                full = os.path.join(current, name)
                if os.path.isfile(full):
                    rel = name if rel_dir == "." else os.path.join(rel_dir, name)
                    candidates.append((rel.replace(os.sep, "/"), full))
    else:
        raise SyncError("src %s does not exist or is not a file or directory" % src)
    selected = []
    for rel, full in sorted(candidates):
        if include and not any(fnmatch.fnmatchcase(rel, pattern) for pattern in include):
            continue
        selected.append((rel, full, os.stat(full)))
    return selected


def dest_path(dest, rel):
    return os.path.join(dest, *rel.split("/"))


def plan(selected, dest):
    """Split the files into ``to_copy`` and ``same`` (dicts with rel, src, dest, stat, sha256)."""
    to_copy, same = [], []
    for rel, full, st in selected:
        target = dest_path(dest, rel)
        item = {"rel": rel, "src": full, "dest": target, "stat": st, "sha256": None, "exists": False}
        if os.path.lexists(target):
            if os.path.isdir(target):
                raise SyncError("%s is a directory in dest; cannot copy %s over it" % (target, rel))
            item["exists"] = True
            if os.path.getsize(target) == st.st_size:
                src_hash = sha256_file(full)[0]
                item["sha256"] = src_hash
                if sha256_file(target)[0] == src_hash:
                    same.append(item)
                    continue
        to_copy.append(item)
    return to_copy, same


def missing_dirs(dest, items):
    """Directories that must be created (dest, its missing parents, sub-directories), parents first."""
    needed = set()
    for item in items:
        current = os.path.dirname(item["dest"])
        while not os.path.isdir(current):
            if os.path.lexists(current):
                raise SyncError("%s exists and is not a directory; cannot create it" % current)
            needed.add(current)
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
    if not os.path.isdir(dest) and os.path.lexists(dest):
        raise SyncError("dest %s exists and is not a directory" % dest)
    return sorted(needed, key=lambda path: (path.count(os.sep), path))


def fsync_dir(path):
    """Flush a directory's entries; filesystems that cannot fsync a directory are tolerated."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def make_dirs(dirs):
    for path in dirs:
        os.mkdir(path)
        fsync_dir(os.path.dirname(path))


def copy_hashing(src, out, planned):
    """Copy ``src`` into the open file ``out`` while hashing it; returns ``(sha256, bytes)``."""
    digest = hashlib.sha256()
    size = 0
    with open(src, "rb") as handle:
        while True:
            chunk = handle.read(CHUNK_SIZE)
            if not chunk:
                break
            digest.update(chunk)
            out.write(chunk)
            size += len(chunk)
        after = os.fstat(handle.fileno())
    if size != planned.st_size or after.st_size != planned.st_size or after.st_mtime_ns != planned.st_mtime_ns:
        raise SyncError("source %s changed after it was planned or while it was copied (still being written?); "
                        "run again when the writer is done" % src)
    return digest.hexdigest(), size


def read_back(path):
    """sha256 of what the filesystem holds, after asking the kernel to drop its cached pages."""
    fadvise = getattr(os, "posix_fadvise", None)
    if fadvise is not None:
        fd = os.open(path, os.O_RDONLY)
        try:
            fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass
        finally:
            os.close(fd)
    return sha256_file(path)[0]


def copy_metadata(path, st):
    """Mode bits and times of the source, where the filesystem allows (best effort)."""
    try:
        os.chmod(path, stat.S_IMODE(st.st_mode))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    except OSError:
        pass


def copy_verified(item):
    """Temp file in the destination directory, hash while copying, fsync, read back, replace, fsync dir."""
    directory, name = os.path.split(item["dest"])
    fd, tmp = tempfile.mkstemp(prefix=".%s.checked_sync." % name[:64], suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            digest, size = copy_hashing(item["src"], out, item["stat"])
            out.flush()
            os.fsync(out.fileno())
        stored = read_back(tmp)
        if stored != digest:
            raise SyncError("verification failed for %s: wrote sha256 %s, read back %s; the previous copy is "
                            "unchanged" % (item["dest"], digest, stored))
        copy_metadata(tmp, item["stat"])
        os.replace(tmp, item["dest"])
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(directory)
    return digest, size


def entry(item):
    return {"path": item["rel"], "bytes": item["stat"].st_size, "sha256": item["sha256"]}


def measure(dest):
    """``(free_bytes, free_inodes, statvfs_result)`` of the filesystem that holds (or will hold) dest."""
    _probe, st = fs_free(dest)
    return free_bytes(st), free_inodes(st), st


def check_paths(src, dest):
    real_src, real_dest = os.path.realpath(src), os.path.realpath(dest)
    if os.path.isdir(real_src) and (real_dest == real_src or real_dest.startswith(real_src.rstrip(os.sep) + os.sep)):
        raise SyncError("dest %s is src or lies inside it; choose a destination outside %s" % (dest, src))
    if os.path.isfile(real_src) and os.path.dirname(real_src) == real_dest:
        raise SyncError("dest %s is the directory that already holds %s" % (dest, src))


def run_sync(module, result):
    """Plan, check the budget, then copy file by file. Fills ``result``; raises SyncError/OSError on failure."""
    src, dest, include = module.params["src"], module.params["dest"], module.params["include"]
    for key in ("min_free_inodes", "reserve_bytes"):
        if module.params[key] < 0:
            raise SyncError("%s must be 0 or more, got %d" % (key, module.params[key]))
    check_paths(src, dest)
    selected = select_files(src, include)
    if not selected:
        raise SyncError("no file under %s matches include %s; nothing was copied" % (src, include))
    to_copy, same = plan(selected, dest)
    result["unchanged"] = [item["rel"] for item in same]
    dirs = missing_dirs(dest, to_copy) if to_copy else []
    by_rel = dict((item["rel"], item) for item in to_copy + same)

    result["free_bytes"], result["free_inodes"], st = measure(dest)
    sizes = [item["stat"].st_size for item in to_copy]
    new_files = len([item for item in to_copy if not item["exists"]])
    need_bytes, need_inodes = copy_needs(sizes, new_files, len(dirs), st.f_frsize)
    result["files"] = [entry(by_rel[rel]) for rel, _full, _st in selected]
    problem = check_budget(need_bytes, need_inodes, st, where=dest,
                           reserve_bytes=module.params["reserve_bytes"],
                           min_free_inodes=module.params["min_free_inodes"])
    if problem:
        raise SyncError("not enough room to copy %d file(s) into %s: %s; nothing was written. Free space there "
                        "or choose another destination" % (len(to_copy), dest, problem))

    try:
        if module.check_mode:
            for item in to_copy:
                item["sha256"] = item["sha256"] or sha256_file(item["src"])[0]
                result["copied"].append(entry(item))
        else:
            make_dirs(dirs)
            for item in to_copy:
                item["sha256"], _size = copy_verified(item)
                result["copied"].append(entry(item))
    finally:
        result["files"] = [entry(by_rel[rel]) for rel, _full, _st in selected]
    result["changed"] = bool(to_copy)
    result["bytes_copied"] = sum(item["bytes"] for item in result["copied"])
    verb = "would copy" if module.check_mode else "copied and verified"
    result["msg"] = "%s %d file(s) (%s bytes) into %s, %d unchanged" % (
        verb, len(to_copy), fmt_count(result["bytes_copied"]), dest, len(same))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            src=dict(type="path", required=True),
            dest=dict(type="path", required=True),
            include=dict(type="list", elements="str"),
            min_free_inodes=dict(type="int", default=0),
            reserve_bytes=dict(type="int", default=0),
        ),
        supports_check_mode=True,
    )
    module.run_command_environ_update = {"LANG": "C", "LC_ALL": "C", "LANGUAGE": "C"}
    result = dict(changed=False, copied=[], unchanged=[], bytes_copied=0, files=[],
                  dest=module.params["dest"], free_bytes=None, free_inodes=None, msg="")
    try:
        run_sync(module, result)
    except (SyncError, OSError) as exc:
        result["changed"] = bool(result["copied"])
        result["bytes_copied"] = sum(item["bytes"] for item in result["copied"])
        try:
            result["free_bytes"], result["free_inodes"], _st = measure(module.params["dest"])
        except OSError:
            pass
        done = "; %d file(s) were copied and verified before the failure" % len(result["copied"]) \
            if result["copied"] else ""
        detail = str(exc) if isinstance(exc, SyncError) else "I/O error: %s" % exc
        result["msg"] = "checked_sync failed: %s%s. The previous durable copies are intact." % (detail, done)
        module.fail_json(**result)
    try:
        result["free_bytes"], result["free_inodes"], _st = measure(module.params["dest"])
    except OSError:
        pass
    module.exit_json(**result)


if __name__ == "__main__":
    main()
