#!/usr/bin/env python
"""Benchmark: checked_sync's own code path against a plain copy followed by hashing both files, same run.

checked_sync is run in-process: the function that the module's main() calls (``sync``: plan, budget check, copy
while hashing the source, fsync, drop the destination's cached pages, read it back and compare, rename, statvfs)
is imported from the module and called with the module's parameters, so the timing is the module's own code
without Ansible's transport. Baselines,
interleaved with it in every round (the order rotates):

  (a) ``cp SRC DST`` then ``sha256sum SRC DST`` (coreutils);
  (b) ``shutil.copyfile`` (sendfile, in the kernel) then hashlib (OpenSSL) sha256 of both files.

Neither baseline fsyncs nor drops caches; checked_sync does both. The file lives on a tmpfs by default
(``/dev/shm``: no disk, so the timing is CPU and memory bandwidth and the page-cache drop is a no-op); ``--dir``
puts it elsewhere (on a disk, checked_sync's read-back then really reads the disk while the baselines read the
page cache). Targets: checked_sync <= baseline (b), and a re-run of the unchanged sync <= 10 % of the first run.
Exit code 0 only when both are met.

Usage: bench/checked_sync_vs_cp.py [--size-mib 1024] [--repeat 3] [--dir /dev/shm]
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / ".collections"))

from ansible_collections.remote_gpu.trainer.plugins.module_utils import sync  # noqa: E402
from lab_common import arguments  # noqa: E402

CHUNK = 64 << 20
RERUN_TARGET = 0.10


def run_checked_sync(src, dest):
    """What the module's main() does between AnsibleModule() and exit_json(): sync.sync(module)."""
    params = {"src": src, "dest": dest, "include": None, "min_free_inodes": 0, "reserve_bytes": 0,
              "unchanged_check": "stat"}
    failed, result = sync.sync(sync.Params(params))
    if failed:
        raise SystemExit("checked_sync failed: %s" % result["msg"])
    return result


def hashlib_sha256(path):
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def baseline_cp_sha256sum(src, dest_dir, env):
    dst = os.path.join(dest_dir, os.path.basename(src))
    subprocess.run(["cp", src, dst], check=True, env=env)
    out = subprocess.run(["sha256sum", src, dst], check=True, env=env, capture_output=True, text=True).stdout
    digests = [line.split()[0] for line in out.splitlines()]
    if len(digests) != 2 or digests[0] != digests[1]:
        raise SystemExit("baseline (a): the copy differs from the source")
    return digests[0]


def baseline_copy_hashlib(src, dest_dir):
    dst = os.path.join(dest_dir, os.path.basename(src))
    shutil.copyfile(src, dst)
    digest = hashlib_sha256(src)
    if hashlib_sha256(dst) != digest:
        raise SystemExit("baseline (b): the copy differs from the source")
    return digest


def stat_same(src, dst):
    """The size + mtime_ns comparison that a metadata shortcut would make instead of hashing both files."""
    one, two = os.stat(src), os.stat(dst)
    return one.st_size == two.st_size and one.st_mtime_ns == two.st_mtime_ns


def timed(func):
    start = time.perf_counter()
    value = func()
    return time.perf_counter() - start, value


def fs_type(path):
    """The filesystem type of the mount that holds ``path`` (from /proc/mounts)."""
    best, kind = "", "?"
    real = os.path.realpath(path)
    with open("/proc/mounts", encoding="utf-8") as handle:
        for line in handle:
            fields = line.split()
            mnt = fields[1].replace("\\040", " ")
            if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, kind = mnt, fields[2]
    return "%s (%s)" % (best, kind)


def write_source(path, size):
    with open(path, "wb") as handle:
        left = size
        while left:
            step = min(CHUNK, left)
            handle.write(os.urandom(step))
            left -= step


def fresh(directory):
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    return directory


def main():
    args = arguments(__doc__, size_mib=(1024, "size of the file (default 1024 MiB = 1 GiB)"),
                     repeat=(3, "interleaved rounds (default 3); medians are reported"),
                     dir=("/dev/shm", "where the files go (default /dev/shm, a tmpfs)"))
    size = args.size_mib << 20
    work = tempfile.mkdtemp(prefix="checked-sync-bench-", dir=args.dir)
    env = {"LC_ALL": "C", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    try:
        src = os.path.join(work, "src", "model.safetensors")
        os.makedirs(os.path.dirname(src))
        write_source(src, size)
        want = hashlib_sha256(src)
        dest = os.path.join(work, "dest")
        runs = {"checked_sync": [], "rerun": [], "a": [], "b": []}

        def ours():
            seconds, result = timed(lambda: run_checked_sync(src, fresh(dest)))
            assert [c["sha256"] for c in result["copied"]] == [want], result
            runs["checked_sync"].append(seconds)
            seconds, result = timed(lambda: run_checked_sync(src, dest))  # unchanged: nothing to copy
            assert result["unchanged"] == ["model.safetensors"] and not result["copied"], result
            runs["rerun"].append(seconds)

        def base_a():
            runs["a"].append(timed(lambda: baseline_cp_sha256sum(src, fresh(dest), env))[0])

        def base_b():
            runs["b"].append(timed(lambda: baseline_copy_hashlib(src, fresh(dest)))[0])

        order = [ours, base_a, base_b]
        for index in range(args.repeat):  # interleaved, rotating the order so that no one always goes first
            for job in order[index % 3:] + order[:index % 3]:
                job()
        med = dict((name, statistics.median(values)) for name, values in runs.items())
        hash_s, _digest = timed(lambda: hashlib_sha256(src))
        # what a size + mtime shortcut would cost on the re-run (not what checked_sync does today): plan and
        # budget check as now, with two stat() calls instead of two hash passes
        stat_s = min(timed(lambda: stat_same(src, os.path.join(dest, os.path.basename(src))))[0] for _i in range(5))
        gib = size / float(1 << 30)
        print("checked_sync vs cp: %d MiB file on %s, median of %d interleaved rounds"
              % (args.size_mib, fs_type(work), args.repeat))
        print("  checked_sync (in-process sync()), first run    %7.3f s  %6.2f GiB/s" % (
            med["checked_sync"], gib / med["checked_sync"]))
        print("  checked_sync, re-run of the unchanged sync      %7.3f s" % med["rerun"])
        print("  (a) cp + sha256sum of both                      %7.3f s" % med["a"])
        print("  (b) shutil.copyfile + hashlib sha256 of both    %7.3f s" % med["b"])
        print("  (one hashlib sha256 pass over the file          %7.3f s)" % hash_s)
        ratio_a, ratio_b = med["checked_sync"] / med["a"], med["checked_sync"] / med["b"]
        ratio_rerun = med["rerun"] / med["checked_sync"]
        print("  ratio checked_sync / (a)                        %7.2f" % ratio_a)
        print("  ratio checked_sync / (b)                        %7.2f  (target <= 1.00)" % ratio_b)
        print("  ratio re-run / first run                        %7.2f  (target <= %.2f)" % (ratio_rerun, RERUN_TARGET))
        met = ratio_b <= 1.0 and ratio_rerun <= RERUN_TARGET
        if ratio_rerun > RERUN_TARGET:
            print("  re-run target missed: checked_sync hashes both sides of every same-size file on every run "
                  "(its documented rule: no mtime shortcut), so an unchanged re-run costs two hash passes")
            print("  (projection, not measured on checked_sync: the same re-run deciding by size + mtime_ns would "
                  "spend %.4f s comparing, ratio ~%.3f plus the plan's walk and statvfs)"
                  % (stat_s, stat_s / med["checked_sync"]))
        return 0 if met else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
