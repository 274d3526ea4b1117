# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What teardown pulls from a host by default: the results that launch recorded there.

From the job's ``queue.json`` (this host's share of the queue, job_layout.read_queue) and its items' status files:

* ``durable``: the files each item synced to ``<durable_root>/<item>/``, with the bytes and sha256 recorded at
  sync time (they are not hashed again on the box: the pull is verified against them);
* ``unsynced``: what would die with the box, the outputs on the data disk that never reached the durable tier: the
  unsynced files of an item that trained but failed to sync, and the files matching the best patterns of an item
  that failed, never finished, or ran with the sync off, with its ``trainer-item.log`` (a failed item's crash).

Only this host's items are listed, so two hosts that share a durable directory (AutoDL, one region) never see
each other's files. This host's items are its share and the items it ran for an earlier share of the same run (a
relaunch over another host set moves items between hosts, and the queue record then lists only the new share): the
results they left here are pulled too, so that tearing the box down never loses them (:func:`earlier_share`). A
durable copy of such an item that changed since its sync (a shared durable directory, where the item's new host
ran it again) is the new host's result: it is left out, and counted as ``superseded``. :func:`plan` is pure;
:func:`build` checks the plan against the box and returns a manifest of two sources (manifest.py).
"""

from __future__ import annotations

import fnmatch
import os
import stat

from ansible_collections.remote_gpu.trainer.plugins.module_utils import job_layout
from ansible_collections.remote_gpu.trainer.plugins.module_utils import manifest as mf
from ansible_collections.remote_gpu.trainer.plugins.module_utils.digest import sha256_file
from ansible_collections.remote_gpu.trainer.plugins.module_utils.item_log import ITEM_LOG
from ansible_collections.remote_gpu.trainer.plugins.module_utils.launch import matching_files

# the items of earlier shares looked at (an items directory is the box's: bounded)
MAX_EARLIER_ITEMS = 10000
# the entries looked at under one output directory for what teardown leaves behind, and the paths named
MAX_LEFT_SCAN = 20000
LEFT_NAMED = 5


def left_behind(output_dir, keep, scratch, limit=MAX_LEFT_SCAN):
    """What teardown leaves on the data disk under ``output_dir``: the regular files that match none of ``keep``
    (the best patterns and the item's log: fnmatch on the relative path, ``*`` also matches ``/``, as the sync
    matches them) and lie under no top-level entry that matches ``scratch`` (what the run wrapper prunes) ->
    ``{"dir", "count", "bytes", "files": the first LEFT_NAMED relative paths, "cut": whether the walk stopped after
    ``limit`` entries, "paths": every one found}``. A symlink is neither followed nor counted; an output directory
    that is not there is empty."""
    found = {"dir": output_dir, "count": 0, "bytes": 0, "files": [], "cut": False, "paths": []}
    pending, seen = [("", output_dir)], 0
    while pending:
        rel_dir, path = pending.pop()
        try:
            with os.scandir(path) as entries:
                listed = sorted(entries, key=lambda entry: entry.name)
        except OSError:
            continue
        for entry in listed:
            seen += 1
            if seen > limit:
                found["cut"] = True
                return found
            rel = entry.name if not rel_dir else "%s/%s" % (rel_dir, entry.name)
            if not rel_dir and any(fnmatch.fnmatchcase(entry.name, pattern) for pattern in scratch):
                continue
            try:
                mode = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(mode.st_mode):
                pending.append((rel, entry.path))
            elif stat.S_ISREG(mode.st_mode) and not any(fnmatch.fnmatchcase(rel, pattern) for pattern in keep):
                found["count"] += 1
                found["bytes"] += mode.st_size
                found["paths"].append(rel)
                if len(found["files"]) < LEFT_NAMED:
                    found["files"].append(rel)
    return found


def _synced(status):
    """The verified copies an item's status records: ``[{path, bytes, sha256}]`` (malformed entries dropped)."""
    found = []
    for entry in status.get("synced") or []:
        if (isinstance(entry, dict) and isinstance(entry.get("path"), str) and isinstance(entry.get("sha256"), str)
                and isinstance(entry.get("bytes"), int) and not isinstance(entry.get("bytes"), bool)):
            found.append(entry)
    return found


def _strings(value):
    return [entry for entry in value if isinstance(entry, str)] if isinstance(value, list) else []


def size_text(count):
    """``count`` bytes for a person: 5120 -> '5.0 KiB'."""
    value, unit = float(count or 0), "bytes"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return "%d bytes" % value if unit == "bytes" else "%.1f %s" % (value, unit)


def left_behind_line(item, behind):
    """An item's :func:`left_behind` for a person: 'item 001: 2 file(s), 5.0 KiB under DIR (metrics.json, ...)'."""
    files, count = behind.get("files") or [], behind.get("count") or 0
    return "item %s: %s%d file(s), %s under %s (%s%s)" % (
        item, "at least " if behind.get("cut") else "", count, size_text(behind.get("bytes")), behind.get("dir"),
        ", ".join(files), ", ..." if count > len(files) or behind.get("cut") else "")


def plan(queue, statuses, matching, leftover=None, pull_left=False):
    """The files to pull for the share in ``queue`` (pure).

    ``statuses`` maps an item id to its status.json dict (absent: the item never finished); ``matching(dir,
    patterns)`` lists the files under an output directory that match the best patterns. Returns
    ``{"durable": [{path, bytes, sha256}], "unsynced": [path], "items": [{item, state, durable, unsynced}]}`` with paths
    ``<item>/<file>`` relative to the durable root and to the output root. With ``leftover(dir, keep, scratch)``
    (:func:`left_behind`), an item whose output directory keeps files that are not pulled has ``left_behind`` (its
    ``paths`` left out); with ``pull_left`` too they are pulled from the data disk instead (``unsynced``), unless the
    walk was cut short (then they stay ``left_behind``: the pull would not hold them all).
    """
    durable, unsynced, items = [], [], []
    best = _strings(queue.get("best"))
    scratch = _strings(queue.get("scratch"))
    for entry in queue["items"]:
        item = entry["item"]
        status = statuses.get(item)
        state = job_layout.item_state(status) or "not_finished"
        output_dir = entry.get("output_dir")
        if state == job_layout.STATE_DONE and status.get("sync_dest"):
            copies, left = _synced(status), []
        elif state == job_layout.STATE_SYNC_FAILED:
            copies, left = _synced(status), _strings(status.get("unsynced"))
        else:  # failed, never finished, or done with the sync off: only the data disk has its outputs, and the
            # item's log (the crash of a failed item is in it)
            copies, left = [], matching(output_dir, best + [ITEM_LOG]) if isinstance(output_dir, str) else []
        behind = leftover(output_dir, best + [ITEM_LOG], scratch) if leftover and isinstance(output_dir, str) else None
        paths = behind.pop("paths", []) if behind else []
        if pull_left and paths and not behind["cut"] and _under(output_dir, queue.get("output_root"), item):
            left, behind = sorted(set(left) | set(paths)), None
        kept = [copy for copy in copies if copy["path"] not in left]
        earlier = bool(entry.get("earlier"))
        durable += [dict(copy, path="%s/%s" % (item, copy["path"]), **({"earlier": True} if earlier else {}))
                    for copy in kept]
        unsynced += ["%s/%s" % (item, rel) for rel in left]
        row = dict({"item": item, "state": state, "durable": len(kept), "unsynced": len(left)},
                   **({"earlier": True, "superseded": 0} if earlier else {}))
        if behind and (behind["count"] or behind["cut"]):
            row["left_behind"] = behind
        items.append(row)
    return {"durable": durable, "unsynced": unsynced, "items": items}


def _under(output_dir, output_root, item):
    """Whether ``output_dir`` is ``<output_root>/<item>``, where the manifest's unsynced paths (``<item>/<file>``)
    find the item's files."""
    return isinstance(output_root, str) and os.path.normpath(output_dir) == os.path.normpath(
        os.path.join(output_root, item))


def read_statuses(paths, queue):
    """The status.json dict of each item of the share that has one."""
    found = {}
    for entry in queue["items"]:
        record = job_layout.read_record(job_layout.item_status_path(paths["items_dir"], entry["item"]))
        if record is not None:
            found[entry["item"]] = record
    return found


def earlier_share(paths, queue):
    """``queue`` with the items this host ran for an earlier share of the same run appended (each marked
    ``earlier``), and their status.json dicts: the items under the job's items directory that the share does not
    list and whose status names this run's output directory for them (an item of another run of the job, under
    other roots, is not this run's). At most MAX_EARLIER_ITEMS of them, in the order of their ids."""
    share = set(entry["item"] for entry in queue["items"])
    try:
        names = sorted(name for name in os.listdir(paths["items_dir"])
                       if name not in share and job_layout.valid_name(name))
    except OSError:
        return queue, {}
    entries, statuses = [], {}
    durable_root = queue.get("durable_root")
    for name in names[:MAX_EARLIER_ITEMS]:
        record = job_layout.read_record(job_layout.item_status_path(paths["items_dir"], name))
        output_dir = "%s/%s" % (queue.get("output_root"), name)
        if record is None or record.get("output_dir") != output_dir:
            continue
        statuses[name] = record
        entries.append({"item": name, "arg": record.get("arg"), "output_dir": output_dir, "earlier": True,
                        "sync_dest": "%s/%s" % (durable_root, name) if durable_root else None})
    return dict(queue, items=list(queue["items"]) + entries), statuses


def _superseded(root, copy):
    """Whether the durable copy of an earlier share's item is no longer the one its sync verified (gone, or another
    size): the item's new host ran it again into a shared durable directory, and its own manifest holds it."""
    try:
        return os.stat(mf.resolve_entry(root, mf.normalize_rel(copy["path"]))).st_size != copy["bytes"]
    except (OSError, mf.ManifestError):
        return True


def _durable_entry(root, copy):
    """A recorded copy checked on the box: a regular file inside the root with the recorded bytes."""
    real = mf.resolve_entry(root, mf.normalize_rel(copy["path"]))
    size = os.stat(real).st_size
    if size != copy["bytes"]:
        raise mf.ManifestError("the durable copy %s has %d bytes, but %d were verified at sync time: it changed "
                               "after the sync; find out why before you tear the box down" % (
                                   os.path.join(root, copy["path"]), size, copy["bytes"]))
    return {"path": "durable/" + copy["path"], "bytes": size, "sha256": copy["sha256"]}


def _unsynced_entry(root, rel):
    """(manifest entry, paths to transfer) of an output on the data disk, hashed now."""
    rel = mf.normalize_rel(rel)
    real = mf.resolve_entry(root, rel)
    digest, size = sha256_file(real)
    target = os.path.relpath(real, os.path.realpath(root)).replace(os.sep, "/")
    return {"path": "unsynced/" + rel, "bytes": size, "sha256": digest}, sorted(set([rel, target]))


def build(queue, statuses, matching=matching_files, leftover=left_behind, pull_left=False):
    """(manifest, plan) of the share: the recorded durable copies and the unsynced outputs, as a manifest of the
    sources ``durable`` (``queue["durable_root"]``) and ``unsynced`` (``queue["output_root"]``, the data disk); with
    ``pull_left``, what the items left beyond their best files too (:func:`plan`). ManifestError when there is
    nothing to pull or a file is not what the record says."""
    wanted = plan(queue, statuses, matching, leftover, pull_left)
    files, sources = [], []
    for label, root, entries in (("durable", queue.get("durable_root"), wanted["durable"]),
                                 ("unsynced", queue.get("output_root"), wanted["unsynced"])):
        if not entries:
            continue
        if not isinstance(root, str) or not os.path.isabs(root):
            raise mf.ManifestError("the queue record names no absolute %s root (%r)" % (label, root))
        transfer = []
        for entry in entries:
            if label == "durable" and entry.get("earlier") and _superseded(root, entry):
                item = next(row for row in wanted["items"] if row["item"] == entry["path"].split("/", 1)[0])
                item.update(durable=item["durable"] - 1, superseded=item["superseded"] + 1)
                continue
            if label == "durable":
                files.append(_durable_entry(root, entry))
                transfer.append(entry["path"])
            else:
                record, paths = _unsynced_entry(root, entry)
                files.append(record)
                transfer += paths
        if transfer:
            sources.append({"label": label, "root": root, "transfer": sorted(set(transfer))})
    if not files:
        states = ", ".join("%s %s" % (item["item"], item["state"]) for item in wanted["items"])
        raise mf.ManifestError("launch recorded items %s on this host, and none left a file to pull (no synced "
                               "copy, no output matching %s): nothing proves the results are safe; check the job's "
                               "log, or give teardown a roster" % (states, _strings(queue.get("best"))))
    files.sort(key=lambda item: item["path"])
    manifest = {"version": mf.MANIFEST_VERSION, "root": None, "sources": sources, "files": files,
                "total_bytes": sum(item["bytes"] for item in files)}
    return mf.validate_manifest(manifest), wanted
