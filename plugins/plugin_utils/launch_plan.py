# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Launch's plan, on the controller: the queue spread over the hosts, the printed assignment, and each host's queue
record (what launch writes to ``<job dir>/queue.json``; the box reads it with module_utils/job_layout.read_queue).

Pure functions of the standard library only: the filters queue_assign, queue_table and launch_record template them
on every task that reads launch's plan, and Ansible compiles a collection file anew in each of its workers.
"""

from __future__ import annotations


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


def reassign(shares):
    """A relaunch's plan (pure): ``shares`` maps each host to the share of a queue that another host ran (rows
    ``{index, item, arg}`` as launch recorded them, :func:`assign`'s), and each row goes to its new host with its
    item id kept, so an item finished and synced under that id is found done. Returns the rows in queue order.

    Raises ValueError when a row is malformed or two hosts claim one item (two boxes never run the same item)."""
    rows, seen = [], {}
    for host in sorted(shares or {}):
        for row in shares[host] or ():
            if not isinstance(row, dict) or isinstance(row.get("index"), bool) or not isinstance(row.get("index"), int) \
                    or not isinstance(row.get("item"), str) or not isinstance(row.get("arg"), str):
                raise ValueError("a recorded item of %s is not {index, item, arg}: %r" % (host, row))
            if row["item"] in seen:
                raise ValueError("item %s is recorded for %s and for %s" % (row["item"], seen[row["item"]], host))
            seen[row["item"]] = host
            rows.append({"index": row["index"], "item": row["item"], "host": str(host), "arg": row["arg"]})
    return sorted(rows, key=lambda row: row["index"])


def queue_record(items, name, host, run_id, queue_length, output_root, durable_root, best=(), scratch=(),
                 min_seconds=None, min_seconds_fail=False, tensorboard_dir="", protocol_dir="", wandb_dir=""):
    """What launch writes to ``<job dir>/queue.json``: this host's ``items`` (queue_assign rows) in order, each
    with its output directory and durable destination (None when the sync is off), the length of the whole
    queue, and ``min_seconds`` (launch_min_seconds: an item that exits 0 sooner is too fast, jobs.mark_too_fast;
    0 or None: not checked) with ``min_seconds_fail`` (its finding is a FAIL, not a WARN), and the run's record
    directories that each item's sync copies (``tensorboard_dir``: launch_tensorboard_dir, ``protocol_dir``:
    launch_protocol_dir; ``wandb_dir``: launch_wandb_dir; None when empty). Deterministic: the same launch gives the same record."""
    if not isinstance(queue_length, int) or queue_length < len(items):
        raise ValueError("queue_length %r is less than the %d item(s) of this host" % (queue_length, len(items)))
    if min_seconds is not None and (isinstance(min_seconds, bool) or not isinstance(min_seconds, int)
                                    or min_seconds < 0):
        raise ValueError("launch_min_seconds must be a whole number of seconds, 0 or more (0 turns the check off), "
                         "got %r" % (min_seconds,))
    output_root, durable_root = output_root.rstrip("/"), (durable_root or "").rstrip("/")
    return {
        "version": 1, "job": name, "run_id": run_id, "host": host, "queue_length": queue_length,
        "output_root": output_root, "durable_root": durable_root or None,
        "best": list(best or ()), "scratch": list(scratch or ()),
        "min_seconds": min_seconds or 0, "min_seconds_fail": bool(min_seconds_fail),
        "tensorboard_dir": _record_dir(tensorboard_dir, "launch_tensorboard_dir"),
        "protocol_dir": _record_dir(protocol_dir, "launch_protocol_dir"),
        "wandb_dir": _record_dir(wandb_dir, "launch_wandb_dir"),
        "items": [{"item": row["item"], "arg": row["arg"], "output_dir": "%s/%s" % (output_root, row["item"]),
                   "sync_dest": "%s/%s" % (durable_root, row["item"]) if durable_root else None} for row in items],
    }


def _record_dir(path, variable):
    """A record directory of the queue record: an absolute path without its trailing ``/``, or None when empty."""
    if not path:
        return None
    if not isinstance(path, str) or not path.startswith("/") or "\0" in path or "\n" in path:
        raise ValueError("%s must be an absolute path or empty, got %r" % (variable, path))
    return path.rstrip("/") or "/"


def assignment_table(rows):
    """The printed assignment: one line per item, columns ITEM, HOST, ARGUMENT."""
    host_w = max([len("HOST")] + [len(row["host"]) for row in rows])
    item_w = max([len("ITEM")] + [len(row["item"]) for row in rows])
    lines = ["%-*s  %-*s  %s" % (item_w, "ITEM", host_w, "HOST", "ARGUMENT")]
    for row in rows:
        lines.append("%-*s  %-*s  %s" % (item_w, row["item"], host_w, row["host"], row["arg"] or "-"))
    return lines
