# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Launch: the queue assignment, the checksum of the pushed tree, and what the run wrapper does after an item.

Pure functions (assignment, checksum, the status record) plus a small command line that the launch role ships to
the box (with everything it imports: ``_launch_lib_files`` in roles/launch/vars/main.yml) and that the run
wrapper calls with the profile's interpreter::

    PY -m ansible_collections.remote_gpu.trainer.plugins.module_utils.launch code --root DIR --out FILE [--commit C]
    PY -m ansible_collections.remote_gpu.trainer.plugins.module_utils.launch done STATUS_FILE
    PY -m ansible_collections.remote_gpu.trainer.plugins.module_utils.launch pending ITEMS_DIR ID...
    PY -m ansible_collections.remote_gpu.trainer.plugins.module_utils.launch finish --item ID --exit-code N ...

On-box layout added by launch (inside the detached job's directory ``<run_dir>/<name>/``)::

    code.json                 {"commit", "dirty", "tree_sha256", "files", "bytes", "src", "dest"}: the code that ran
    queue-<sha12>.sh          the queue runner of this host (its items in order); never rewritten (launch_scripts.py)
    run-item-<sha12>.sh       the run wrapper for one item; never rewritten (launch_scripts.py)
    main.pid                  PID of the running item's command (the sampler reads its RSS)
    samples.tsv               the sampler's readings, when launch_sampler is on
    items/<id>/status.json    {"item", "exit_code", "started", "finished", "arg", "host", "command_exit_code",
                               "output_dir", "sync_dest", "synced", "sync_error", "pruned", "code"}, written by
                               job_layout.write_status: first a provisional one (the item failed, "sync_error" says
                               the finish step did not complete), replaced by the final one
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import shutil
import socket
import sys

from ansible_collections.remote_gpu.trainer.plugins.module_utils import job_layout
from ansible_collections.remote_gpu.trainer.plugins.module_utils import sync as sync_core
from ansible_collections.remote_gpu.trainer.plugins.module_utils.atomic import write_atomic


def item_width(total):
    """Digits of an item id: at least 3, more for a queue of 1000 items or more."""
    return max(3, len(str(max(total - 1, 0))))


def assign(queue, hosts):
    """Spread ``queue`` over ``hosts``: item i goes to sorted(hosts)[i % n]. Deterministic, each item exactly once.

    Returns a list of dicts ``{index, item, host, arg}`` in queue order; ``item`` is the zero-padded index.
    Raises ValueError on an empty host list or a queue entry that is not a string or a number.
    """
    if isinstance(queue, (str, bytes, dict)):
        raise ValueError("the queue must be a list of items, got a %s" % type(queue).__name__)
    hosts = sorted(set(str(host) for host in hosts or ()))
    if not hosts:
        raise ValueError("no hosts to spread the queue over")
    queue = list(queue or ())
    width = item_width(len(queue))
    rows = []
    for index, arg in enumerate(queue):
        if isinstance(arg, bool) or not isinstance(arg, (str, int, float)):
            raise ValueError("queue entry %d is a %s; each entry must be a string (a config file or an argument "
                             "string)" % (index, type(arg).__name__))
        rows.append({"index": index, "item": str(index).zfill(width), "host": hosts[index % len(hosts)],
                     "arg": str(arg)})
    return rows


def assignment_table(rows):
    """The printed assignment: one line per item, columns ITEM, HOST, ARGUMENT."""
    host_w = max([len("HOST")] + [len(row["host"]) for row in rows])
    item_w = max([len("ITEM")] + [len(row["item"]) for row in rows])
    lines = ["%-*s  %-*s  %s" % (item_w, "ITEM", host_w, "HOST", "ARGUMENT")]
    for row in rows:
        lines.append("%-*s  %-*s  %s" % (item_w, row["item"], host_w, row["host"], row["arg"] or "-"))
    return lines


def _file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tree_checksum(root):
    """sha256 over the sorted relative paths and file sha256s of the tree under ``root``.

    Each regular file contributes the line ``<sha256>  <relative path>\\n`` (the format of ``sha256sum``), each
    symbolic link ``symlink:<target>  <relative path>\\n`` (links are not followed); directories contribute only
    through their files. Returns ``{"tree_sha256", "files", "bytes"}``.
    """
    entries = []
    total = 0
    for current, dirs, names in os.walk(root):
        dirs.sort()
        rel_dir = os.path.relpath(current, root)
        for name in list(dirs):
            full = os.path.join(current, name)
            if os.path.islink(full):
                entries.append((_rel(rel_dir, name), "symlink:" + os.readlink(full)))
        for name in names:
            full = os.path.join(current, name)
            rel = _rel(rel_dir, name)
            if os.path.islink(full):
                entries.append((rel, "symlink:" + os.readlink(full)))
            elif os.path.isfile(full):
                entries.append((rel, _file_sha256(full)))
                total += os.path.getsize(full)
    entries.sort()
    digest = hashlib.sha256()
    for rel, value in entries:
        digest.update(("%s  %s\n" % (value, rel)).encode("utf-8", "surrogateescape"))
    return {"tree_sha256": digest.hexdigest(), "files": len(entries), "bytes": total}


def _rel(rel_dir, name):
    return name if rel_dir == "." else os.path.join(rel_dir, name).replace(os.sep, "/")


def pending(items_dir, ids):
    """The ids, in the given order, whose ``items/<id>/status.json`` does not say exit code 0."""
    return [item for item in ids
            if not job_layout.is_done(job_layout.read_record(job_layout.item_status_path(items_dir, item)))]


def prune(output_dir, patterns, keep):
    """Remove the entries directly under ``output_dir`` whose names match ``patterns``, except ``keep`` paths."""
    removed = []
    try:
        names = sorted(os.listdir(output_dir))
    except OSError:
        return removed
    for name in names:
        if name in keep or not any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
            continue
        full = os.path.join(output_dir, name)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full, ignore_errors=True)
        else:
            try:
                os.unlink(full)
            except OSError:
                continue
        removed.append(name)
    return removed


def finish_item(item, exit_code, started, output_dir, sync_dest=None, best=(), scratch=(), arg=None, code=None,
                host=None, sync=None):
    """What the run wrapper records when an item's command has ended -> (status dict, line to print).

    On exit code 0 with ``sync_dest`` and ``best`` patterns: the files under ``output_dir`` that match ``best``
    (relative paths, fnmatch, ``*`` also matches ``/``) are copied to ``sync_dest`` with the checked_sync core,
    verified; only then are the ``scratch`` entries of ``output_dir`` pruned (never a synced file) and the success
    line returned. A failed sync (including one that selects no file) makes ``exit_code`` 1 and sets
    ``sync_error``; ``command_exit_code`` keeps the command's own code. ``sync`` is the sync function (tests).
    """
    sync = sync or sync_core.sync
    status = provisional_status(item, exit_code, started, output_dir, arg=arg, code=code, host=host)
    status["exit_code"] = exit_code
    status["sync_error"] = None
    if exit_code != 0:
        line = "==== trainer: item %s failed, exit %d ====" % (item, exit_code)
    elif not sync_dest or not best:
        line = "==== trainer: item %s done, nothing to sync ====" % item
    else:
        status["sync_dest"] = sync_dest
        params = {"src": output_dir, "dest": sync_dest, "include": list(best), "min_free_inodes": 0,
                  "reserve_bytes": 0}
        failed, result = sync(sync_core.Params(params))
        if failed:
            status["exit_code"] = 1
            status["sync_error"] = result["msg"]
            line = "==== trainer: item %s FAILED to sync: %s ====" % (item, result["msg"])
        else:
            status["synced"] = result["files"]
            keep = set(entry["path"].split("/")[0] for entry in result["files"])
            status["pruned"] = prune(output_dir, scratch, keep)
            line = "==== trainer: item %s done, synced %d files to %s ====" % (item, len(result["files"]), sync_dest)
    status["finished"] = job_layout.now_iso()
    return status, line


def provisional_status(item, exit_code, started, output_dir, arg=None, code=None, host=None):
    """The status written before the finish step does anything that can fail: the item failed (exit code 1 when
    the command succeeded), and ``sync_error`` says the finish step did not complete. Replaced at its end."""
    return job_layout.status_record(
        exit_code if exit_code != 0 else 1, started, item=item, command_exit_code=exit_code, arg=arg, host=host,
        output_dir=output_dir, sync_dest=None, synced=[], sync_error="the finish step did not complete; see the log",
        pruned=[], code=code)


def cli(argv=None):
    parser = argparse.ArgumentParser(prog="launch", description="remote_gpu.trainer launch helpers (on the box)")
    sub = parser.add_subparsers(dest="cmd")
    p_code = sub.add_parser("code", help="checksum the pushed tree and write code.json")
    p_code.add_argument("--root", required=True)
    p_code.add_argument("--out", required=True)
    p_code.add_argument("--commit", default="")
    p_code.add_argument("--dirty", default="")
    p_code.add_argument("--src", default="")
    p_done = sub.add_parser("done", help="exit 0 when the status file says exit code 0")
    p_done.add_argument("status")
    p_pending = sub.add_parser("pending", help="print the ids that are not done, as a JSON list")
    p_pending.add_argument("items_dir")
    p_pending.add_argument("ids", nargs="*")
    p_finish = sub.add_parser("finish", help="sync best files, prune scratch, write the item's status")
    for name in ("--item", "--started", "--output-dir", "--status"):
        p_finish.add_argument(name, required=True)
    p_finish.add_argument("--exit-code", type=int, required=True)
    p_finish.add_argument("--arg", default=None)
    p_finish.add_argument("--sync-dest", default="")
    p_finish.add_argument("--best", action="append", default=[])
    p_finish.add_argument("--scratch", action="append", default=[])
    p_finish.add_argument("--code", default="")
    p_finish.add_argument("--host", default=None)
    args = parser.parse_args(argv)

    if args.cmd == "code":
        record = tree_checksum(args.root)
        record.update(commit=args.commit or None, dirty={"true": True, "false": False}.get(args.dirty),
                      src=args.src or None, dest=os.path.abspath(args.root))
        changed = job_layout.read_record(args.out) != record
        if changed:
            write_atomic(args.out, json.dumps(record, indent=1, sort_keys=True) + "\n")
        record["changed"] = changed
        sys.stdout.write(json.dumps(record, sort_keys=True) + "\n")
        return 0
    if args.cmd == "done":
        return 0 if job_layout.is_done(job_layout.read_record(args.status)) else 1
    if args.cmd == "pending":
        sys.stdout.write(json.dumps(pending(args.items_dir, args.ids)) + "\n")
        return 0
    if args.cmd == "finish":
        code = job_layout.read_record(args.code) if args.code else None
        host = args.host or socket.gethostname()
        job_layout.write_status(args.status, provisional_status(args.item, args.exit_code, args.started,
                                                                args.output_dir, arg=args.arg, code=code, host=host))
        status, line = finish_item(args.item, args.exit_code, args.started, args.output_dir,
                                   sync_dest=args.sync_dest or None, best=args.best, scratch=args.scratch,
                                   arg=args.arg, code=code, host=host)
        job_layout.write_status(args.status, status)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        return 0 if status["exit_code"] == 0 else (status["exit_code"] if 0 < status["exit_code"] < 256 else 1)
    parser.print_usage(sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(cli())
