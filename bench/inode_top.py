#!/usr/bin/env python
"""Benchmark: inode_check's top-consumer walk against `du --inodes -d1` over the same tree, same run.

Prints the ratio (ours / du); below 1.0 means faster than du. The tree has one directory of 150 000 files
(the per-sample export that fills an inode cap) and a few small ones.
Usage: bench/inode_top.py [--files N] [--repeat R] [--dir PATH]
"""

from __future__ import annotations

import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / ".collections"))

from ansible_collections.remote_gpu.trainer.plugins.module_utils.inode_check import top_inode_consumers  # noqa: E402
from lab_common import arguments, timed  # noqa: E402


def build_tree(root, files):
    big = os.path.join(root, "eval_images")
    os.makedirs(big)
    for i in range(files):
        os.close(os.open(os.path.join(big, "%07d.png" % i), os.O_CREAT | os.O_WRONLY, 0o644))
    for name in ("checkpoints", "logs", "code/src/pkg"):
        os.makedirs(os.path.join(root, name))
        for i in range(50):
            open(os.path.join(root, name, "f%d" % i), "w").close()


def main():
    args = arguments(__doc__, files=150000, repeat=5, dir=(None, "where to build the tree (default: a temp dir)"))
    root = tempfile.mkdtemp(prefix="inode-bench-", dir=args.dir)
    try:
        build_tree(root, args.files)
        env = {"LC_ALL": "C", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        ours, theirs = [], []
        for _run in range(args.repeat):  # interleaved, so both see the same cache state
            seconds, (rows, _errors) = timed(lambda: top_inode_consumers(root, 5))
            ours.append(seconds)
            seconds, _out = timed(lambda: subprocess.run(["du", "--inodes", "-d1", root], check=True,
                                                         stdout=subprocess.DEVNULL, env=env))
            theirs.append(seconds)
        assert rows[0]["path"].endswith("eval_images"), rows
        ours_s, du_s = statistics.median(ours), statistics.median(theirs)
        print("inode_top: %d files, median of %d runs" % (args.files, args.repeat))
        print("  inode_check top_inode_consumers  %.3f s" % ours_s)
        print("  du --inodes -d1 (baseline)       %.3f s" % du_s)
        print("  ratio ours/du                    %.2f  (target <= 1.00)" % (ours_s / du_s))
        return 0 if ours_s <= du_s else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
