# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The autopilot's replacement of a box (issue 32, item 3), pure: which boxes get replaced, with which rent spec,
and when the old one may be destroyed.

A box is replaced (``autopilot_replace: true``) when its provider preempted it and does not give it back: a
provider that never gives a preempted box back (Lambda) at once; one that may (vast.ai bid, RunPod spot:
``autopilot.GIVES_BACK``) after ``autopilot_replace_after_minutes`` of preemption judged from the history; or when
the probe reports a GPU finding at level FAIL during the run. The replacement is rented with the spec of the rent
that made the box (its record ``reports/rent-<name>.json``, key ``spec``), through the same rent flow (preflight
included), and the job's unfinished items are relaunched there from the durable checkpoint.

The old box is destroyed once, and only when every item of its queue is covered: its results pulled to the
controller, or done with a verified copy on a durable tier that survives the instance (``trainer_storage_tiers``:
a tier whose ``lost_on`` names ``destroy`` does not, as vast.ai's ``/workspace``), or finished on the replacement.
"""

from __future__ import annotations

import os

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.fleet_table import integer, number

GIVES_BACK = ("vastai", "runpod")
DEFAULT_AFTER_MINUTES = 30
# the steps of a replacement, in order, as the host's state family (each change is one event)
STEPS = ("replace_wanted", "replacing", "replaced", "retired")


class ReplaceError(ValueError):
    """A rent record or setting that cannot drive a replacement; the message says what to fix."""


def survives_destroy(tiers, path):
    """True when ``path`` lies on a storage tier that survives the instance's destroy, False when its tier is lost
    on destroy, None when no tier of ``tiers`` (the profile's ``trainer_storage_tiers``) holds it."""
    path = str(path or "").rstrip("/") or "/"
    best = None
    for tier in tiers or ():
        if not isinstance(tier, dict) or not isinstance(tier.get("path"), str):
            continue
        root = tier["path"].rstrip("/") or "/"
        if path == root or path.startswith(root + "/") or root == "/":
            if best is None or len(root) > len(best[0]):
                best = (root, tier)
    if best is None:
        return None
    return "destroy" not in [str(x) for x in best[1].get("lost_on") or ()]


def preempted_since(history, now):
    """Since when the host has been reported preempted (epoch): the oldest autopilot record of the unbroken run of
    preempted ones that ends now (records of other kinds skipped), else ``now``."""
    since = now
    for record in reversed(history or []):
        ap = record.get("ap") if isinstance(record, dict) else None
        if not isinstance(ap, dict):
            continue
        if str(ap.get("state") or "").split(":", 1)[0] not in ("preempted", "preempted_escalated") + STEPS[:1]:
            break
        since = min(since, number(record.get("t")) or since)
    return since


def gpu_failures(result):
    """The GPU findings at level FAIL of a job_status result (``gpu_*``, ``xid_*``, ``ecc_*``, ``throttle_*``
    codes), as ``code: message`` lines."""
    found = []
    for row in (result or {}).get("findings") or []:
        if not isinstance(row, dict) or row.get("level") != "FAIL":
            continue
        code = str(row.get("code") or "")
        if code.startswith(("gpu_", "xid_", "ecc_", "throttle_", "nvlink_", "row_remap", "pcie_")):
            found.append("%s: %s" % (code, " ".join(str(row.get("message") or "").split())[:200]))
    return found


def replace_cause(provider, result, history, now, after_minutes=DEFAULT_AFTER_MINUTES):
    """Why this box should be replaced (one line), or None (pure). ``provider``: the host's provider facts
    (``state``, ``provider``, ``id``); ``result``: its job_status result (None when it did not answer)."""
    provider = provider or {}
    if provider.get("state") == "preempted":
        name = provider.get("provider") or "the provider"
        if name not in GIVES_BACK:
            return "%s preempted %s and does not give it back" % (name, provider.get("id"))
        minutes = (now - preempted_since(history, now)) / 60.0
        if minutes >= after_minutes:
            return "%s preempted %s %d min ago and has not given it back (autopilot_replace_after_minutes %d)" % (
                name, provider.get("id"), int(minutes), after_minutes)
        return None
    failures = gpu_failures(result)
    if failures:
        return "a GPU finding at FAIL during the run: %s" % "; ".join(failures[:3])
    return None


def rent_spec(record):
    """(provider, rent name, spec, api_url) from a rent's record (``reports/rent-<name>.json``); raises
    ReplaceError when it cannot drive a replacement (no spec: written before replacements were possible)."""
    if not isinstance(record, dict):
        raise ReplaceError("the rent's record is not a JSON object")
    spec = record.get("spec")
    if not isinstance(spec, dict) or not spec:
        raise ReplaceError("the rent's record %s holds no spec (rented before autopilot_replace existed): rent "
                           "again with the playbook remote_gpu.trainer.rent, or replace the box by hand"
                           % record.get("rent"))
    if record.get("provider") not in ("runpod", "vastai", "lambda") or not record.get("rent"):
        raise ReplaceError("the rent's record names no provider or rent name")
    return record["provider"], str(record["rent"]), dict(spec), record.get("api_url")


def replacement_name(rent, history):
    """The rent name of the next replacement of a box of rent ``rent``: ``<rent>-r<N>``, N one more than the
    replacements already recorded in the history (so a second replacement never reuses the first's label)."""
    done = 0
    for record in history or []:
        ap = record.get("ap") if isinstance(record, dict) else None
        if isinstance(ap, dict) and isinstance(ap.get("replacement"), dict) and ap.get("ok") is True and \
                ap.get("action") == "replace":
            done += 1
    return "%s-r%d" % (rent, done + 1)


def replacement_of(history):
    """The replacement recorded for this host (``{host, rent, ...}`` of the latest replace that succeeded), and
    whether the old box was already destroyed (a ``retire`` that succeeded after it)."""
    found, retired = None, False
    for record in history or []:
        ap = record.get("ap") if isinstance(record, dict) else None
        if not isinstance(ap, dict) or ap.get("ok") is not True:
            continue
        if ap.get("action") == "replace" and isinstance(ap.get("replacement"), dict):
            found, retired = dict(ap["replacement"]), False
        elif ap.get("action") == "retire" and found is not None:
            retired = True
    return found, retired


def _durable(row, survives):
    return (row.get("state") == "done" and not row.get("unsynced") and bool(row.get("sync_dest"))
            and bool(integer(row.get("synced"))) and survives is True)


def may_destroy(queue, old_items, new_items, survives, pulled=()):
    """(True, why) when the old box may be destroyed, else (False, why naming each item not covered) (pure).

    ``queue``: the item ids of the old box's share; ``old_items``/``new_items``: {item: job_status item row} of
    the old box (its last probe) and of the replacement (now); ``survives``: whether the old box's durable tier
    survives its destroy (:func:`survives_destroy`); ``pulled``: the items whose results were pulled to the
    controller. An item is covered when it was pulled, or is done with a verified copy on a tier that survives the
    destroy, or the replacement finished it with a verified durable copy."""
    pulled = set(str(item) for item in pulled or ())
    old_items, new_items = old_items or {}, new_items or {}
    missing, durable_only = [], []
    for item in [str(i) for i in queue or ()]:
        old, new = old_items.get(item) or {}, new_items.get(item) or {}
        if item not in pulled and not _durable(new, True) and _durable(old, survives):
            durable_only.append("%s (%s)" % (item, old.get("sync_dest")))
        if item in pulled or _durable(old, survives) or _durable(new, True):
            continue
        if old.get("state") == "done":
            why = ("its tier is lost on destroy and it was not pulled" if survives is not True
                   else "no verified durable copy")
            missing.append("item %s: done on the old box, but %s" % (item, why))
        else:
            missing.append("item %s: not finished on the replacement yet" % item)
    if not queue:
        return False, "the old box's queue is unknown: it is never destroyed blind"
    if missing:
        return False, "; ".join(missing)
    why = "every item of the queue is pulled, durable beyond the instance, or finished on the replacement"
    if durable_only:  # what the replacement did not run again: its results are on the durable tier alone
        why += "; on the durable tier only (pull them from there): %s%s" % (
            ", ".join(durable_only[:5]), " and %d more" % (len(durable_only) - 5) if len(durable_only) > 5 else "")
    # the snapshot knows each item's synced files, nothing else on the box's disks
    return True, why + "; anything else on the old box's disks (an item's metrics, samples) is deleted with it"


def decide_replace(cause, settings, record, history, queue=None, old_items=None, new_items=None,
                   survives=None, pulled=(), rented_id=None):
    """The replacement step for a host whose ``cause`` (:func:`replace_cause`) is not None, or whose replacement is
    under way (pure) -> ``{state, action, reason, ...}``.

    * not opted in (``settings['replace']`` false): ``report`` (wanted ``replace``): nothing is rented; the caller
      keeps its own escalation (a preemption that does not come back escalates);
    * no replacement yet: ``replace`` with the rent (``rent``: provider, name, spec, api_url) or ``escalate`` when
      the rent's record cannot drive one;
    * a replacement runs: ``retire`` (destroy the old box, once) when :func:`may_destroy` and a rent's record
      names the instance (``rented_id``), else ``none`` (wait);
    * the old box destroyed: ``none`` (state ``retired``)."""
    replacement, retired = replacement_of(history)
    if retired:
        return {"state": "retired", "action": "none", "wanted": "none", "replacement": replacement,
                "reason": "replaced by %s; the old box is destroyed" % (replacement or {}).get("host")}
    if replacement:
        ok, why = may_destroy(queue, old_items, new_items, survives, pulled)
        if ok and rented_id in (None, ""):
            ok, why = False, "no rent's record names this instance, so it is never destroyed by the autopilot"
        if ok:
            # the instance the rent's record names: the box is gone, so its own id cannot be read
            return {"state": "replaced", "action": "retire", "wanted": "retire", "replacement": replacement,
                    "rented_id": str(rented_id),
                    "reason": "replaced by %s; %s: destroy the old box" % (replacement.get("host"), why)}
        return {"state": "replaced", "action": "none", "wanted": "none", "replacement": replacement,
                "reason": "replaced by %s; the old box is kept: %s" % (replacement.get("host"), why)}
    if not settings.get("replace"):
        return {"state": "replace_wanted", "action": "report", "wanted": "replace",
                "reason": "%s; set autopilot_replace: true to rent a replacement with the same spec" % cause}
    try:
        provider, rent, spec, api_url = rent_spec(record)
    except ReplaceError as exc:
        return {"state": "replace_wanted", "action": "escalate", "wanted": "replace",
                "reason": "%s; it cannot be replaced: %s" % (cause, exc)}
    name = replacement_name(rent, history)
    return {"state": "replacing", "action": "replace", "wanted": "replace",
            "rent": {"provider": provider, "name": name, "spec": spec, "api_url": api_url, "count": 1},
            "reason": "%s: rent %s (%s, the spec of rent %s), preflight it and relaunch the unfinished items there "
                      "from the durable checkpoint" % (cause, name, provider, rent)}


def snapshot(result):
    """What a history record keeps of a box's queue for a later replacement (pure): ``{"queue": ["job/item", ...],
    "items": {"job/item": {state, synced, sync_dest, unsynced}}}`` of every job with a queue, or None."""
    queue, items = [], {}
    for job in (result or {}).get("jobs") or []:
        if not isinstance(job, dict) or not job.get("exists") or not isinstance(job.get("queue_items"), list):
            continue
        rows = dict((row.get("item"), row) for row in job.get("items") or [] if isinstance(row, dict))
        for item in job["queue_items"]:
            key = "%s/%s" % (job.get("name"), item)
            queue.append(key)
            row = rows.get(item) or {}
            items[key] = dict((k, row.get(k)) for k in ("state", "synced", "sync_dest") if row.get(k) is not None)
            if row.get("unsynced"):
                items[key]["unsynced"] = [str(f) for f in row["unsynced"]][:5]
    return {"queue": queue, "items": items} if queue else None


def last_snapshot(history):
    """The latest queue snapshot (:func:`snapshot`) of the host's autopilot records, or None."""
    for record in reversed(history or []):
        ap = record.get("ap") if isinstance(record, dict) else None
        if isinstance(ap, dict) and isinstance(ap.get("snap"), dict):
            return ap["snap"]
    return None


def find_record(records, provider, instance_id):
    """The rent record (of ``records``: parsed ``reports/rent-*.json``) whose kept boxes hold the instance
    ``instance_id`` of ``provider``, or None."""
    for record in records or ():
        if not isinstance(record, dict) or record.get("provider") != provider:
            continue
        for box in record.get("boxes") or ():
            if isinstance(box, dict) and box.get("outcome") == "kept" and \
                    str(box.get("id")) == str(instance_id) and instance_id not in (None, ""):
                return record
    return None


def relaunch_jobs(records, snap=None):
    """Which of the old box's jobs a replacement relaunches, from the records launch wrote on the controller
    (``records``: {file name: parsed JSON} of ``<launch_record_dir>/<old host>/*.json``), pure.

    Returns ``{"jobs": {name: {"path", "items", "queue_length", "code"}}, "missing": [names], "refused": [lines]}``:
    a job with a sound record is relaunched with that record's launch_* variables and its share of the queue (its
    ``code``: the tree_sha256, commit and dirty state of the code the old box ran, None where unknown); a job of
    the box's last queue snapshot (``snap``, :func:`snapshot`) with an item not done and no record is ``missing``
    (the person is told how to relaunch it), and a record that is not launch's (its name, its items) is
    ``refused``, with why."""
    jobs, refused = {}, []
    for path in sorted(records or {}):
        record = records[path] if isinstance(records[path], dict) else {}
        name = os.path.basename(path)[:-len(".json")] if path.endswith(".json") else None
        meta = record.get("_launch_recorded")
        items = meta.get("items") if isinstance(meta, dict) else None
        if not name or record.get("launch_name") != name or not isinstance(items, list) or not items \
                or not all(isinstance(row, dict) and isinstance(row.get("item"), str) for row in items) \
                or not isinstance(record.get("launch_src"), str) or not isinstance(record.get("launch_command"), str):
            refused.append("%s is not a launch record of job %s (launch_name, launch_src, launch_command and the "
                           "recorded items are required)" % (path, name))
            continue
        length = integer(meta.get("queue_length"))
        code = meta.get("code") if isinstance(meta.get("code"), dict) else {}
        jobs[name] = {"path": path, "items": items,
                      "queue_length": length if length and length >= len(items) else len(items),
                      # the code the old box ran (push_code's record): a relaunch of other code says so
                      "code": dict((key, code.get(key)) for key in ("tree_sha256", "commit", "dirty"))}
    items_of = (snap or {}).get("items") or {}
    missing = sorted(set(str(key).split("/", 1)[0] for key in (snap or {}).get("queue") or ()
                         if (items_of.get(key) or {}).get("state") != "done") - set(jobs))
    return {"jobs": jobs, "missing": missing, "refused": refused}
