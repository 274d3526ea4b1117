# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The core of checked_sync: atomic, verified copy to the durable tier, with a budget check first.

Standard library only, no Ansible: the module ``remote_gpu.trainer.checked_sync`` is a thin wrapper around
``sync()``, and launch ships this file (with the files it imports: sync_select.py, sync_state.py, atomic.py,
fsbudget.py and digest.py) to the box, where the run wrapper calls it as a command line::

    PY -m ansible_collections.remote_gpu.trainer.plugins.module_utils.sync SRC DEST [--include GLOB]...
        [--min-free-inodes N] [--reserve-bytes N] [--check]

with ``PYTHONPATH`` set to the directory above ``ansible_collections``. It prints the module's result as one JSON
object and exits 0 only when every selected file was copied (or was already identical) and verified.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import stat
import sys
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.remote_gpu.trainer.plugins.module_utils import safe_read
from ansible_collections.remote_gpu.trainer.plugins.module_utils.atomic import fsync_dir, replacing
from ansible_collections.remote_gpu.trainer.plugins.module_utils.fsbudget import (
    check_budget,
    copy_needs,
    fmt_count,
    free_bytes,
    free_inodes,
    fs_free,
)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.digest import file_kind, sha256_file
from ansible_collections.remote_gpu.trainer.plugins.module_utils.sync_select import (
    SyncError,
    _inside,
    select_files,
)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.sync_state import load_state, recorded_same, save_state

CHUNK_SIZE = 1024 * 1024


def dest_path(dest, rel):
    return os.path.join(dest, *rel.split("/"))


def plan(selected, dest, state=None):
    """Split the files into ``to_copy`` and ``same`` (dicts with rel, src, dest, stat, sha256).

    A file whose source and destination are both exactly as the last verified sync left them (``state``) is the
    same without being read; any other file of equal size is compared by sha256 on both sides.
    """
    to_copy, same = [], []
    state = state or {}
    for rel, full, st in selected:
        target = dest_path(dest, rel)
        item = {"rel": rel, "src": full, "dest": target, "stat": st, "sha256": None, "exists": False}
        try:
            dest_st = os.lstat(target)
        except FileNotFoundError:
            dest_st = None
        except NotADirectoryError as exc:
            parent = os.path.dirname(target)
            while not os.path.lexists(parent):
                parent = os.path.dirname(parent)
            raise SyncError("%s in dest exists and is not a directory; cannot copy %s under it. Move it away or "
                            "choose another dest" % (parent, rel)) from exc
        if dest_st is not None:
            item["exists"] = True
            if stat.S_ISLNK(dest_st.st_mode):
                to_copy.append(item)  # a link is replaced by a real file, never written through
                continue
            if stat.S_ISDIR(dest_st.st_mode):
                raise SyncError("%s is a directory in dest; cannot copy %s over it" % (target, rel))
            if not stat.S_ISREG(dest_st.st_mode):
                raise SyncError("%s in dest is a %s, not a regular file; remove it (or choose another dest) and run "
                                "again" % (target, file_kind(dest_st.st_mode)))
            if recorded_same(state.get(rel), st, target):
                item["sha256"] = state[rel]["sha256"]
                same.append(item)
                continue
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


def make_dirs(dirs):
    """Create ``dirs`` (missing_dirs' list). One that appeared since it was planned (a second box writing to the
    same shared durable FS, such as two AutoDL instances of one region creating ``runs/<job>`` at once) is what was
    wanted when it is a real directory; a file or a link there is refused."""
    for path in dirs:
        try:
            os.mkdir(path)
        except FileExistsError:
            if os.path.islink(path) or not os.path.isdir(path):
                raise SyncError("%s appeared while the sync ran and is not a directory; cannot create it" % path)
            continue
        fsync_dir(os.path.dirname(path))


# A source this small is hashed a second time after the copy: a rewrite in place within the same clock tick as
# the previous change leaves even ctime as it was (the kernel stamps times with a coarse clock).
REHASH_MAX_BYTES = 64 * 1024 * 1024


def identity(st):
    """What must not change while a source is copied: device, inode, size, mtime and ctime (ns)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def changed_error(src):
    return SyncError("source %s changed after it was planned or while it was copied (still being written?); "
                     "run again when the writer is done" % src)


def open_source(path, planned):
    """Open the planned source for reading: never through a symbolic link, never blocking on a FIFO, and only when
    it is still the planned file (same device, inode, size, mtime and ctime)."""
    try:
        fd = safe_read.open_regular(path)  # the collection's one non-blocking opener: never a link, a FIFO, a device
    except safe_read.ReadRefused as exc:
        if exc.kind or exc.errno == errno.ELOOP:
            raise changed_error(path) from None
        raise OSError(exc.errno, exc.reason, path) from None
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or identity(now) != identity(planned):
            raise changed_error(path)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def copy_hashing(src, out, planned):
    """Copy ``src`` into the open file ``out`` while hashing it; returns ``(sha256, bytes)``.

    The source is read once. Each chunk is hashed in a helper thread while this thread writes it and reads the
    next one (hashlib and file I/O release the GIL), so on a multi-core box the hash costs no extra time.
    The source must be the planned file, unchanged from before the first read to after the last (identity()); one
    of at most REHASH_MAX_BYTES is also read a second time and must hash the same.
    """
    digest = hashlib.sha256()
    size = 0
    with open_source(src, planned) as handle, ThreadPoolExecutor(max_workers=1) as hasher:
        chunk = handle.read(CHUNK_SIZE)
        while chunk:
            hashing = hasher.submit(digest.update, chunk)
            try:
                out.write(chunk)
                size += len(chunk)
                chunk = handle.read(CHUNK_SIZE)
            finally:
                hashing.result()  # one chunk at a time, in order
        if size != planned.st_size or identity(os.fstat(handle.fileno())) != identity(planned):
            raise changed_error(src)
        if size <= REHASH_MAX_BYTES:
            handle.seek(0)
            again = hashlib.sha256()
            for block in iter(lambda: handle.read(CHUNK_SIZE), b""):
                again.update(block)
            if again.hexdigest() != digest.hexdigest():
                raise changed_error(src)
    return digest.hexdigest(), size


def read_back(path):
    """sha256 of what the filesystem holds, after asking the kernel to drop its cached pages. Never blocks: a FIFO
    in the copy's place is opened O_NONBLOCK here and refused by sha256_file (OSError EINVAL)."""
    fadvise = getattr(os, "posix_fadvise", None)
    if fadvise is not None:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
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
    name = os.path.basename(item["dest"])
    with replacing(item["dest"], prefix=".%s.checked_sync." % name[:64]) as staged:
        digest, size = copy_hashing(item["src"], staged.file, item["stat"])
        staged.close()
        stored = read_back(staged.name)
        if stored != digest:
            raise SyncError("verification failed for %s: wrote sha256 %s, read back %s; the previous copy is "
                            "unchanged" % (item["dest"], digest, stored))
        copy_metadata(staged.name, item["stat"])
    return digest, size


def entry(item):
    return {"path": item["rel"], "bytes": item["stat"].st_size, "sha256": item["sha256"]}


def measure(dest):
    """``(free_bytes, free_inodes, statvfs_result)`` of the filesystem that holds (or will hold) dest."""
    _probe, st = fs_free(dest)
    return free_bytes(st), free_inodes(st), st


def check_params(params):
    """SyncError for parameters that can only be a mistake, before anything is read or written."""
    for key in ("src", "dest"):
        path = params[key]
        if not path:
            raise SyncError("%s is empty: give an absolute path" % key)
        if "\0" in path:
            raise SyncError("%s %r holds a NUL byte, which no path can hold" % (key, path))
        if not os.path.isabs(path):
            raise SyncError("%s %s is a relative path: give an absolute one (a module's working directory is not "
                            "yours)" % (key, path))
        if os.path.normpath(path).strip(os.sep) == "":
            raise SyncError("%s is %s, the root of the filesystem: give the directory of the results (%s)"
                            % (key, path, "what to copy" if key == "src" else "where the copy goes"))
    for key in ("min_free_inodes", "reserve_bytes"):
        if params.get(key, 0) < 0:
            raise SyncError("%s must be 0 or more, got %d" % (key, params[key]))
    for pattern in params.get("include") or []:
        parts = pattern.split("/")
        if not pattern or pattern.startswith("/") or ".." in parts or "\0" in pattern:
            raise SyncError("include pattern %r can never match: patterns are relative to src (like ckpt/*.pt), "
                            "not empty, without a leading / or a .. part" % pattern)


def check_paths(src, dest):
    real_src, real_dest = os.path.realpath(src), os.path.realpath(dest)
    if os.path.isdir(real_src) and _inside(real_dest, real_src):
        raise SyncError("dest %s is src or lies inside it; choose a destination outside %s" % (dest, src))
    if os.path.isfile(real_src) and os.path.dirname(real_src) == real_dest:
        raise SyncError("dest %s is the directory that already holds %s" % (dest, src))
    if os.path.exists(dest) and not os.path.isdir(dest):
        raise SyncError("dest %s exists and is not a directory: dest is the directory that receives the copy; give "
                        "a directory (it is created when missing)" % dest)


# What to do about an I/O error, by errno.
ERRNO_HINTS = {
    errno.EROFS: "the filesystem is read-only: remount it read-write or choose another dest",
    errno.ENOSPC: "the filesystem is full: free space or choose another dest",
    errno.EDQUOT: "the disk quota is exhausted: free space or choose another dest",
    errno.EACCES: "check the permissions of src and dest for the user that runs the sync",
    errno.EPERM: "check the permissions of src and dest for the user that runs the sync",
}


def run_sync(module, result):
    """Plan, check the budget, then copy file by file. Fills ``result``; raises SyncError (only) on failure."""
    try:
        _run_sync(module, result)
    except OSError as exc:
        hint = ERRNO_HINTS.get(exc.errno)
        raise SyncError("I/O error: %s%s" % (exc, "; " + hint if hint else "")) from exc


def _run_sync(module, result):
    src, dest, include = module.params["src"], module.params["dest"], module.params["include"]
    check_params(module.params)
    check_paths(src, dest)
    selected = select_files(src, include, result["left_out"])
    if not selected:
        raise SyncError("no file under %s matches include %s; nothing was copied" % (src, include))
    state = load_state(dest) if module.params.get("unchanged_check", "stat") == "stat" else {}
    to_copy, same = plan(selected, dest, state)
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
            save_state(dest, to_copy + same)
    finally:
        result["files"] = [entry(by_rel[rel]) for rel, _full, _st in selected]
    result["changed"] = bool(to_copy)
    result["bytes_copied"] = sum(item["bytes"] for item in result["copied"])
    verb = "would copy" if module.check_mode else "copied and verified"
    result["msg"] = "%s %d file(s) (%s bytes) into %s, %d unchanged" % (
        verb, len(to_copy), fmt_count(result["bytes_copied"]), dest, len(same))


class Params(object):
    """What run_sync needs from a module: ``params`` and ``check_mode`` (the CLI builds one of these)."""

    def __init__(self, params, check_mode=False):
        self.params = params
        self.check_mode = check_mode


def empty_result(dest):
    return dict(changed=False, copied=[], unchanged=[], bytes_copied=0, files=[], left_out=[],
                dest=dest, free_bytes=None, free_inodes=None, msg="")


def remeasure(result):
    """Free bytes and inodes of the destination after the sync (left as they were when it cannot be measured)."""
    try:
        result["free_bytes"], result["free_inodes"], _st = measure(result["dest"])
    except OSError:
        pass
    return result


def failed_result(result, exc):
    """``result`` of a sync that ``run_sync`` ended with the SyncError ``exc``: what was done, what went wrong."""
    result["changed"] = bool(result["copied"])
    result["bytes_copied"] = sum(item["bytes"] for item in result["copied"])
    remeasure(result)
    done = "; %d file(s) were copied and verified before the failure" % len(result["copied"]) \
        if result["copied"] else ""
    result["msg"] = "checked_sync failed: %s%s. The previous durable copies are intact." % (exc, done)
    return result


def sync(module):
    """Run the whole sync for ``module`` (params, check_mode) -> ``(failed, result)``; never raises SyncError."""
    result = empty_result(module.params["dest"])
    try:
        run_sync(module, result)
    except SyncError as exc:
        return True, failed_result(result, exc)
    return False, remeasure(result)


def cli(argv=None):
    """Command-line entry: prints the result as JSON; exit 0 on a verified sync, 1 on failure, 2 on bad usage."""
    parser = argparse.ArgumentParser(prog="sync", description="Atomic, verified copy (remote_gpu.trainer.checked_sync)")
    parser.add_argument("src")
    parser.add_argument("dest")
    parser.add_argument("--include", action="append", default=None)
    parser.add_argument("--min-free-inodes", type=int, default=0)
    parser.add_argument("--reserve-bytes", type=int, default=0)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--unchanged-check", choices=["stat", "content"], default="stat")
    args = parser.parse_args(argv)
    params = {"src": os.path.abspath(os.path.expanduser(args.src)),
              "dest": os.path.abspath(os.path.expanduser(args.dest)),
              "include": args.include, "min_free_inodes": args.min_free_inodes, "reserve_bytes": args.reserve_bytes,
              "unchanged_check": args.unchanged_check}
    failed, result = sync(Params(params, args.check))
    result["failed"] = failed
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(cli())
