# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Launch on the box: the checksum of the pushed tree, and what the run wrapper does after an item (the queue's
assignment and record are the controller's: plugin_utils/launch_plan.py).

Pure functions (checksum, the status record) plus a small command line that the launch role ships to
the box (with everything it imports: ``_launch_lib_files`` in roles/launch/vars/main.yml) and that the run
wrapper calls with the profile's interpreter::

    PY -m ansible_collections.remote_gpu.trainer.plugins.module_utils.launch code --root DIR --out FILE [--commit C]
                                                                              [--python JOB_PY]
    PY -m ansible_collections.remote_gpu.trainer.plugins.module_utils.launch done STATUS_FILE
    PY -m ansible_collections.remote_gpu.trainer.plugins.module_utils.launch pending ITEMS_DIR ID...
    PY -m ansible_collections.remote_gpu.trainer.plugins.module_utils.launch finish --item ID --exit-code N ...
    PY -m ansible_collections.remote_gpu.trainer.plugins.module_utils.launch resync STATUS_FILE

On-box layout added by launch (inside the detached job's directory ``<run_dir>/<name>/``)::

    code.json                 {"commit", "dirty", "dirty_files", "tree_sha256", "files", "bytes", "src", "dest",
                              "torch"}: the code that ran ("dirty_files": the uncommitted files of the pushed
                              tree, push_code's; null when git could not tell), and "torch": the torch version and CUDA build of the job's interpreter
                              (--python: <launch_env_prefix>/bin/python, else the profile's), read from its
                              torch/version.py without importing torch (torch_build.py; a record with "reason"
                              when torch is not installed there or the probe failed)
    queue.json                this host's share of the queue (plugin_utils/launch_plan.queue_record; read by job_layout.read_queue): what
                              patrol grades the job against and what teardown pulls by default; its
                              "min_seconds" (launch_min_seconds) and "min_seconds_fail" say when an item that
                              exited 0 was too fast to count (job_status: too_fast, item_too_fast)
    queue-<sha12>.sh          the queue runner of this host (its items in order); never rewritten (launch_scripts.py)
    run-item-<sha12>.sh       the run wrapper for one item; never rewritten (launch_scripts.py)
    gate-refused.json         the item gate's latest refusal (item_gate.py, run by the queue runner before each
                              item): the item and its findings; removed when an item passes. item-gate.json: the
                              fatal Xid lines the gate has already seen
    main.pid                  PID of the running item's command (the sampler reads its RSS)
    samples.tsv               the sampler's readings, when launch_sampler is on
    items/<id>/status.json    {"item", "exit_code", "started", "finished", "arg", "host", "command_exit_code",
                               "output_dir", "sync_dest", "synced", "sync_error", "pruned", "code", "torch", "state",
                               "best", "scratch", "unsynced"} ("torch": code.json's, what the item ran on),
                               written by job_layout.write_status: first a provisional one (the item failed,
                               "sync_error" says the finish step did not complete), replaced by the final one.
                               "state" (job_layout.item_state) is "done", "failed", or "sync_failed": the command
                               succeeded (also in a provisional status) but "unsynced" files are not
                               durable; the run wrapper then retries only the sync ("resync"), never the command
    <output_dir>/trainer-item.log
                              the item's part of the job log, synced with its best files
"""

from __future__ import annotations

import argparse
import errno
import fnmatch
import hashlib
import json
import os
import shutil
import socket
import sys

from ansible_collections.remote_gpu.trainer.plugins.module_utils import job_layout
from ansible_collections.remote_gpu.trainer.plugins.module_utils.item_log import ITEM_LOG, job_log_path, write_item_log
from ansible_collections.remote_gpu.trainer.plugins.module_utils import sync as sync_core
from ansible_collections.remote_gpu.trainer.plugins.module_utils import safe_read
from ansible_collections.remote_gpu.trainer.plugins.module_utils import torch_build
from ansible_collections.remote_gpu.trainer.plugins.module_utils.atomic import write_atomic
from ansible_collections.remote_gpu.trainer.plugins.module_utils.digest import sha256_file


# The run's record, synced with each item's best files: (the label, which is also the subdirectory of the item's
# durable copy, the queue record's key). TensorBoard events first, then the protocol (configs and notes), then the
# item's wandb directory ($WANDB_DIR: its offline runs, which `wandb sync` uploads later).
RECORD_DIRS = (("tb", "tensorboard_dir"), ("protocol", "protocol_dir"), ("wandb", "wandb_dir"))


def record_sources(item, tensorboard_dir=None, protocol_dir=None, has_files=None, wandb_dir=None):
    """The run's record directories that an item's sync copies -> ``[(label, src)]``.

    ``tb``: the item's own TensorBoard subtree ``<tensorboard_dir>/<item>`` when the item wrote there
    (``$TRAINER_TB_DIR/$TRAINER_ITEM``), else the whole ``tensorboard_dir`` (the events cannot be told apart);
    ``protocol``: the whole ``protocol_dir``; ``wandb``: the item's ``<wandb_dir>/<item>`` (its ``$WANDB_DIR``, which
    the run wrapper sets), never the whole directory. A directory that holds no file (missing, or empty: the job writes no
    events or no protocol) is left out; so is an empty setting. ``has_files(path)`` is for tests."""
    has_files = has_files or _has_files
    found = []
    if tensorboard_dir:
        own = os.path.join(tensorboard_dir, item)
        if has_files(own):
            found.append(("tb", own))
        elif has_files(tensorboard_dir):
            found.append(("tb", tensorboard_dir))
    if protocol_dir and has_files(protocol_dir):
        found.append(("protocol", protocol_dir))
    if wandb_dir and has_files(os.path.join(wandb_dir, item)):
        found.append(("wandb", os.path.join(wandb_dir, item)))
    return found


def _has_files(path):
    """True when the directory ``path`` holds a file anywhere below it."""
    if not os.path.isdir(path):
        return False
    for _current, _dirs, names in os.walk(path):
        if names:
            return True
    return False


def record_dirs(queue):
    """``{"tensorboard_dir", "protocol_dir", "wandb_dir"}`` of a queue record (launch's, trusted): each an absolute path or None."""
    found = {}
    for _label, key in RECORD_DIRS:
        value = (queue or {}).get(key)
        found[key] = value if isinstance(value, str) and value.startswith("/") else None
    return found


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
                try:  # never blocks: a FIFO put in a file's place since the walk is refused (digest.py, safe_read.py)
                    file_hash, size = sha256_file(full)
                except OSError as exc:
                    if exc.errno != errno.EINVAL:
                        raise
                    continue  # not a regular file any more: left out, as every FIFO and device of the tree is
                entries.append((rel, file_hash))
                total += size
    entries.sort()
    digest = hashlib.sha256()
    for rel, value in entries:
        digest.update(("%s  %s\n" % (value, rel)).encode("utf-8", "surrogateescape"))
    return {"tree_sha256": digest.hexdigest(), "files": len(entries), "bytes": total}


def _rel(rel_dir, name):
    return name if rel_dir == "." else os.path.join(rel_dir, name).replace(os.sep, "/")


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


def sync_outputs(status, output_dir, sync_dest, best, scratch, sync=None, records=()):
    """Sync the files matching ``best`` (and the item's log, ITEM_LOG, when it is there) from ``output_dir`` to
    ``sync_dest``, verified, then each of ``records`` (``[(label, src)]``, record_sources: the run's TensorBoard
    events and protocol) whole to ``<sync_dest>/<label>/``, verified the same way (its files are listed in
    ``synced`` as ``<label>/<path>``); prune ``scratch`` only after that. Updates ``status`` (exit_code, state,
    synced, unsynced, sync_error, pruned) -> True when every file is durable."""
    sync = sync or sync_core.sync
    include = list(best) + ([ITEM_LOG] if os.path.isfile(os.path.join(output_dir, ITEM_LOG)) else [])
    params = {"src": output_dir, "dest": sync_dest, "include": include, "min_free_inodes": 0, "reserve_bytes": 0}
    chosen = matching_files(output_dir, best)
    if chosen:
        failed, result = sync(sync_core.Params(params))
    else:  # only the log would be copied: the item left no file to keep
        failed, result = True, {"msg": "checked_sync failed: no file under %s matches include %s; nothing was "
                                       "copied" % (output_dir, list(best)), "files": []}
    if failed:
        durable = set(entry.get("path") for entry in result.get("copied") or []) | set(result.get("unchanged") or [])
        wanted = [entry["path"] for entry in result.get("files") or []] or (
            matching_files(output_dir, include) if chosen else [])
        status.update(exit_code=1, state=job_layout.STATE_SYNC_FAILED, sync_error=result["msg"],
                      synced=list(result.get("copied") or []), unsynced=[rel for rel in wanted if rel not in durable])
        return False
    files = list(result["files"])
    for label, src in records:
        failed, extra = sync(sync_core.Params({"src": src, "dest": os.path.join(sync_dest, label), "include": [],
                                               "min_free_inodes": 0, "reserve_bytes": 0}))
        if failed:  # the best files are durable; the record is not (a relaunch retries the sync)
            status.update(exit_code=1, state=job_layout.STATE_SYNC_FAILED, unsynced=[],
                          sync_error="the %s record %s: %s" % (label, src, extra["msg"]),
                          synced=files + [dict(entry, path="%s/%s" % (label, entry["path"]))
                                          for entry in extra.get("copied") or []])
            return False
        files += [dict(entry, path="%s/%s" % (label, entry["path"])) for entry in extra["files"]]
    status.update(exit_code=0, state=job_layout.STATE_DONE, sync_error=None, synced=files, unsynced=[])
    keep = set(entry["path"].split("/")[0] for entry in result["files"])
    status["pruned"] = prune(output_dir, scratch, keep)
    return True


def matching_files(root, patterns):
    """The files under ``root`` (relative, ``/``-separated, sorted) whose paths match one of ``patterns``."""
    found = []
    for current, dirs, names in os.walk(root):
        dirs.sort()
        rel_dir = os.path.relpath(current, root)
        found += [_rel(rel_dir, name) for name in names
                  if any(fnmatch.fnmatchcase(_rel(rel_dir, name), pattern) for pattern in patterns)]
    return sorted(found)


def finish_item(item, exit_code, started, output_dir, sync_dest=None, best=(), scratch=(), arg=None, code=None,
                host=None, sync=None, log_path=None, tensorboard_dir=None, protocol_dir=None, wandb_dir=None):
    """What the run wrapper records when an item's command has ended -> (status dict, line to print).

    The item's part of ``log_path`` is written to ``<output_dir>/trainer-item.log`` (whatever the exit code). On
    exit code 0 with ``sync_dest`` and ``best`` patterns: the files under ``output_dir`` that match ``best`` (relative paths, fnmatch,
    ``*`` also matches ``/``) and that log are copied to ``sync_dest`` with the checked_sync core, verified; only
    then are the ``scratch`` entries of ``output_dir`` pruned (never a synced file) and the success line returned.
    A failed sync (including one where ``best`` selects no file) gives the state ``sync_failed``: ``exit_code`` 1,
    ``command_exit_code`` 0, ``sync_error`` the reason and ``unsynced`` the files that are not durable; a relaunch
    then retries only the sync (:func:`resync_item`). The run's TensorBoard events and protocol
    (``tensorboard_dir``, ``protocol_dir``; :func:`record_sources`) are synced with the best files, verified, to
    ``<sync_dest>/tb/`` and ``<sync_dest>/protocol/``. ``sync`` is the sync function (tests).
    """
    status = provisional_status(item, exit_code, started, output_dir, arg=arg, code=code, host=host,
                                sync_dest=sync_dest, best=best, scratch=scratch)
    status.update(exit_code=exit_code, sync_error=None, sync_dest=None,
                  state=job_layout.STATE_DONE if exit_code == 0 else job_layout.STATE_FAILED)
    if log_path:   # also for a failed item: its crash is in it, and teardown pulls it (launch_results)
        write_item_log(log_path, item, os.path.join(output_dir, ITEM_LOG))
    if exit_code != 0:
        line = "==== trainer: item %s failed, exit %d ====" % (item, exit_code)
    elif not sync_dest or not best:
        line = "==== trainer: item %s done, nothing to sync ====" % item
    else:
        status["sync_dest"] = sync_dest
        records = record_sources(item, tensorboard_dir, protocol_dir, wandb_dir=wandb_dir)
        synced = sync_outputs(status, output_dir, sync_dest, best, scratch, sync=sync, records=records)
        line = _sync_line(item, status, synced)
    status["finished"] = job_layout.now_iso()
    record_durable_done(status)
    return status, line


# Beside the items' durable copies (<durable root>/.trainer-done/<item>.json): an item's status once every best file
# is verified there. A relaunch on another box that mounts the same durable tier (the autopilot's replacement of a
# preempted box) takes the item as done from it (adopt_item) instead of training it again from scratch.
DONE_DIR = ".trainer-done"


def done_record_path(sync_dest):
    sync_dest = str(sync_dest).rstrip("/")
    return os.path.join(os.path.dirname(sync_dest), DONE_DIR, os.path.basename(sync_dest) + ".json")


def record_durable_done(status):
    """Write the item's status beside its durable copy when the item is done with every best file verified there;
    a failure to write it only means a relaunch elsewhere cannot skip the item."""
    dest = status.get("sync_dest")
    if not dest or not job_layout.is_done(status) or status.get("unsynced") or not status.get("synced"):
        return False
    try:
        write_atomic(done_record_path(dest), json.dumps(status, indent=1, sort_keys=True) + "\n", make_dirs=True)
    except (OSError, TypeError, ValueError):
        return False
    return True


def adopt_item(status_file, sync_dest):
    """An item done on an earlier box, taken from its durable copy -> (status, line), or (None, why) when it must
    run: the job's queue record must name ``sync_dest`` for the item (a planted record never chooses where to
    look), the record beside the copy (read bounded, no link followed) must say done with every best file synced,
    with the argument the queue gives the item now, and each of those files must be in ``sync_dest`` with its
    recorded size and sha256."""
    local = job_layout.read_record(status_file)
    if job_layout.is_done(local):
        return None, "it is done here"
    queue = _queue_of(status_file)
    item = os.path.basename(os.path.dirname(os.path.abspath(status_file)))
    entry = next((e for e in (queue or {}).get("items") or [] if e.get("item") == item), None)
    if entry is None or not sync_dest or entry.get("sync_dest") != sync_dest:
        return None, "the queue record names no durable copy %s for item %s" % (sync_dest, item)
    text = safe_read.read_text(done_record_path(sync_dest))
    if text is None:
        return None, "no record of it done in %s" % done_record_path(sync_dest)
    try:
        record = json.loads(text)
    except ValueError:
        return None, "its record %s is not JSON" % done_record_path(sync_dest)
    if not isinstance(record, dict) or not job_layout.is_done(record) or record.get("item") != item \
            or record.get("sync_dest") != sync_dest or record.get("unsynced") or not isinstance(record.get("synced"), list) \
            or not record["synced"]:
        return None, "its record %s does not say done with every file synced" % done_record_path(sync_dest)
    if record.get("arg") != entry.get("arg"):
        return None, "it was done with the argument %r, and the queue now gives it %r" % (
            record.get("arg"), entry.get("arg"))
    for entry in record["synced"]:
        path = entry.get("path") if isinstance(entry, dict) else None
        full = os.path.join(sync_dest, str(path or ""))
        if not isinstance(path, str) or not path or not safe_read.resolved_inside(path, sync_dest):
            return None, "its record names a file outside %s: %r" % (sync_dest, path)
        try:
            digest, size = sha256_file(full)
        except OSError as exc:
            return None, "%s of its copy cannot be read (%s)" % (path, exc.strerror or exc)
        if size != entry.get("bytes") or digest != entry.get("sha256"):
            return None, "%s of its copy differs from the record (size or sha256)" % path
    status = dict(record, adopted_from=done_record_path(sync_dest), adopted_at=job_layout.now_iso(),
                  trained_on=record.get("host"), host=socket.gethostname())
    return status, ("==== trainer: item %s was done on %s (finished %s): its %d file(s) verified in %s, not trained "
                    "again ====" % (item, record.get("host"), record.get("finished"), len(record["synced"]), sync_dest))


def _sync_line(item, status, synced):
    if synced:
        return "==== trainer: item %s done, synced %d files to %s ====" % (
            item, len(status["synced"]), status["sync_dest"])
    return "==== trainer: item %s FAILED to sync (trained; a relaunch retries only the sync): %s ====" % (
        item, status["sync_error"])


def provisional_status(item, exit_code, started, output_dir, arg=None, code=None, host=None, sync_dest=None,
                       best=(), scratch=()):
    """The status written before the finish step does anything that can fail: the item failed (exit code 1 when
    the command succeeded, in the state ``sync_failed``, so that a relaunch retries only the finish step), and
    ``sync_error`` says the finish step did not complete. Replaced at its end. ``torch`` is code.json's torch
    record (the version and CUDA build the item ran with), or None."""
    return job_layout.status_record(
        exit_code if exit_code != 0 else 1, started, item=item, command_exit_code=exit_code, arg=arg, host=host,
        output_dir=output_dir, sync_dest=sync_dest or None, synced=[], sync_error="the finish step did not complete; "
        "see the log", pruned=[], code=code, torch=code_torch(code), best=list(best or ()), scratch=list(scratch or ()), unsynced=[],
        state=job_layout.STATE_SYNC_FAILED if exit_code == 0 else job_layout.STATE_FAILED)


def code_torch(code):
    """The torch record of a code.json record, or None (no record, or one written before launch recorded torch)."""
    torch = code.get("torch") if isinstance(code, dict) else None
    return torch if isinstance(torch, dict) else None


def resync_item(status_file, sync=None):
    """Retry only the sync of an item whose status says ``sync_failed`` (its command succeeded): with the output
    directory, destination and patterns recorded there; the trained files are never touched except by the scratch
    prune after a verified sync -> (new status, line), or (None, None) when the item is not in that state."""
    record = job_layout.read_record(status_file)
    if job_layout.item_state(record) != job_layout.STATE_SYNC_FAILED:
        return None, None
    status = dict(record)
    status["sync_attempts"] = (record.get("sync_attempts") if isinstance(record.get("sync_attempts"), int) else 1) + 1
    item, output_dir, sync_dest = record.get("item"), record.get("output_dir"), record.get("sync_dest")
    best, scratch = _strings(record.get("best")), _strings(record.get("scratch"))
    if not sync_dest or not best:
        status.update(exit_code=0, state=job_layout.STATE_DONE, sync_error=None, unsynced=[])
        return status, "==== trainer: item %s done, nothing to sync ====" % item
    problem = recorded_problem(status_file, item, output_dir, sync_dest, best)
    if problem:
        status["sync_error"] = problem
        return status, "==== trainer: item %s is not synced: %s ====" % (item, problem)
    if isinstance(output_dir, str) and not os.path.exists(os.path.join(output_dir, ITEM_LOG)):
        write_item_log(job_log_path(status_file), item, os.path.join(output_dir, ITEM_LOG))
    dirs = record_dirs(_queue_of(status_file))
    records = record_sources(item, dirs["tensorboard_dir"], dirs["protocol_dir"], wandb_dir=dirs["wandb_dir"])
    synced = sync_outputs(status, str(output_dir), sync_dest, best, scratch, sync=sync, records=records)
    record_durable_done(status)
    return status, _sync_line(item, status, synced)


def _queue_of(status_file):
    """The queue record of the job that holds ``items/<id>/status.json``, or None."""
    job_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(status_file))))
    return job_layout.read_queue(job_layout.job_paths(os.path.dirname(job_dir), os.path.basename(job_dir)))[0]


def _strings(value):
    return [entry for entry in value if isinstance(entry, str)] if isinstance(value, list) else []


def recorded_problem(status_file, item, output_dir, sync_dest, best):
    """Why an item's status cannot be trusted to name what a resync copies, or None: its output directory,
    destination and best patterns must be the ones launch recorded for the item in the job's queue.json (a status
    file planted in items/ must never make a relaunch copy a directory of its choosing to a place of its choosing)."""
    job_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(status_file))))
    queue, why = job_layout.read_queue(job_layout.job_paths(os.path.dirname(job_dir), os.path.basename(job_dir)))
    if queue is None:
        return "no queue record of launch in %s (%s): what the status names is not trusted" % (
            job_dir, why or "queue.json is missing")
    entry = next((entry for entry in queue["items"] if entry["item"] == item), None)
    if entry is None:
        return "item %s is not in the queue record %s" % (item, os.path.join(job_dir, job_layout.QUEUE_FILE))
    if (output_dir, sync_dest, best) != (entry.get("output_dir"), entry.get("sync_dest"), _strings(queue.get("best"))):
        return ("its status names output_dir %r, sync_dest %r and best %r, not the ones launch recorded in %s: not "
                "trusted" % (output_dir, sync_dest, best, os.path.join(job_dir, job_layout.QUEUE_FILE)))
    return None


# At most this many uncommitted files are named in code.json ("dirty_files"); "dirty" stays true with more.
MAX_DIRTY_FILES = 1000


def dirty_files(text):
    """The uncommitted files of the pushed tree (push_code's ``dirty_files``, as JSON text) -> a list of at most
    MAX_DIRTY_FILES paths, or None when git could not tell (empty text, null, not a list)."""
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    if not isinstance(value, list):
        return None
    return [entry for entry in value if isinstance(entry, str)][:MAX_DIRTY_FILES]


def cli(argv=None):
    parser = argparse.ArgumentParser(prog="launch", description="remote_gpu.trainer launch helpers (on the box)")
    sub = parser.add_subparsers(dest="cmd")
    p_code = sub.add_parser("code", help="checksum the pushed tree and write code.json")
    p_code.add_argument("--root", required=True)
    p_code.add_argument("--out", required=True)
    p_code.add_argument("--commit", default="")
    p_code.add_argument("--dirty", default="")
    p_code.add_argument("--dirty-files", default="", help="the uncommitted files of the pushed tree, a JSON list")
    p_code.add_argument("--src", default="")
    p_code.add_argument("--python", default="", help="the job's interpreter, whose torch build is recorded "
                                                     "(default: this interpreter)")
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
    p_finish.add_argument("--tb-dir", default="")
    p_finish.add_argument("--protocol-dir", default="")
    p_finish.add_argument("--wandb-dir", default="")
    p_resync = sub.add_parser("resync", help="retry only the sync of an item that trained but failed to sync; "
                                             "exit 0 when it is now done, 1 when it still fails, 3 when the item is "
                                             "not in that state (run its command)")
    p_resync.add_argument("status")
    p_adopt = sub.add_parser("adopt", help="take an item done on an earlier box from its verified durable copy; exit "
                                           "0 when it is now done here, 3 when it must run")
    p_adopt.add_argument("status")
    p_adopt.add_argument("sync_dest")
    args = parser.parse_args(argv)

    if args.cmd == "code":
        record = tree_checksum(args.root)
        record.update(commit=args.commit or None, dirty={"true": True, "false": False}.get(args.dirty),
                      dirty_files=dirty_files(args.dirty_files),
                      src=args.src or None, dest=os.path.abspath(args.root),
                      torch=torch_build.probe(args.python or sys.executable, cwd=args.root))
        changed = job_layout.read_record(args.out) != record
        if changed:
            write_atomic(args.out, json.dumps(record, indent=1, sort_keys=True) + "\n")
        record["changed"] = changed
        sys.stdout.write(json.dumps(record, sort_keys=True) + "\n")
        return 0
    if args.cmd == "done":
        return 0 if job_layout.is_done(job_layout.read_record(args.status)) else 1
    if args.cmd == "pending":
        sys.stdout.write(json.dumps(job_layout.pending_items(args.items_dir, args.ids)) + "\n")
        return 0
    if args.cmd == "finish":
        code = job_layout.read_record(args.code) if args.code else None
        host = args.host or socket.gethostname()
        job_layout.write_status(args.status, provisional_status(
            args.item, args.exit_code, args.started, args.output_dir, arg=args.arg, code=code, host=host,
            sync_dest=args.sync_dest, best=args.best if args.sync_dest else (), scratch=args.scratch))
        status, line = finish_item(args.item, args.exit_code, args.started, args.output_dir,
                                   sync_dest=args.sync_dest or None, best=args.best, scratch=args.scratch,
                                   arg=args.arg, code=code, host=host, log_path=job_log_path(args.status),
                                   tensorboard_dir=args.tb_dir or None, protocol_dir=args.protocol_dir or None,
                                   wandb_dir=args.wandb_dir or None)
        job_layout.write_status(args.status, status)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        return 0 if status["exit_code"] == 0 else (status["exit_code"] if 0 < status["exit_code"] < 256 else 1)
    if args.cmd == "resync":
        return resync_cli(args.status)
    if args.cmd == "adopt":
        status, line = adopt_item(args.status, args.sync_dest)
        if status is None:
            return 3
        job_layout.write_status(args.status, status)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        return 0
    parser.print_usage(sys.stderr)
    return 2


def resync_cli(status_file):
    """The run wrapper's first step for an item: retry only the sync when the item trained but failed to sync."""
    record = job_layout.read_record(status_file)
    if job_layout.item_state(record) != job_layout.STATE_SYNC_FAILED:
        return 3
    sys.stdout.write("==== trainer: item %s trained (finished %s): its command is not run again, only its sync is "
                     "retried ====\n" % (record.get("item"), record.get("finished")))
    sys.stdout.flush()
    try:
        status, line = resync_item(status_file)
        job_layout.write_status(status_file, status)
    except OSError as exc:
        line = "==== trainer: retrying the sync of %s failed: %s; the item stays trained, not durable ====" % (
            status_file, exc)
        status = None
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    return 0 if job_layout.is_done(status) else 1


if __name__ == "__main__":
    raise SystemExit(cli())
