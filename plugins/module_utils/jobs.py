# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a job report means: why a job that is gone stopped, and the findings job_status raises for it.

The layout of the job's files is job_layout.py's, the wrapper job_wrapper.py's, the log scan job_log.py's.
"""

from __future__ import annotations

import calendar
import time

from ansible_collections.remote_gpu.trainer.plugins.module_utils import liveness
from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import finding
from ansible_collections.remote_gpu.trainer.plugins.module_utils.job_log import KILLED_RE


def vanished_reason(exit_code, tail, oom_kill_delta, started_epoch, boot_epoch):
    """Why a job that is not alive stopped, as far as the evidence goes; never guesses an OOM kill.

    ``exit_code``: from status.json or None; ``tail``: lines after the latest start; ``oom_kill_delta``: rise of
    the cgroup's oom_kill counter since launch (None when unknown); ``started_epoch``/``boot_epoch``: when the
    job was launched and when the box booted (None when unknown).

    -> ``finished`` | ``exited_nonzero`` | ``oom_kill`` | ``killed`` | ``stopped`` | ``reboot`` | ``unknown``.
    """
    killed_line = any(KILLED_RE.search(line) for line in tail[-5:])
    if (exit_code == 137 or (exit_code is None and killed_line)) and oom_kill_delta:
        return "oom_kill"
    if exit_code is None and started_epoch is not None and boot_epoch is not None and boot_epoch > started_epoch:
        return "reboot"
    if exit_code == 0:
        return "finished"
    if exit_code in (129, 130, 143):
        return "stopped"
    if exit_code == 137 or killed_line:
        return "killed"
    if exit_code is not None:
        return "exited_nonzero"
    return "unknown"


def job_findings(job, stale_seconds, hung_seconds=3600):
    """Findings for one job report (a dict as job_status returns it). Pure; codes are stable.

    job_crashed (FAIL): crash markers after the latest start. job_gone_incomplete (FAIL): not alive and items
    remain, or no final status, or a non-zero exit. job_finished (INFO): not alive, exit 0, all items done.
    A live job whose log is silent for longer than ``stale_seconds``: log_quiet (INFO), log_stale (WARN) or job_hung
    (FAIL), judged with its checkpoints and GPU use (liveness.silence_findings). oom_killed (WARN while alive, FAIL when gone).
    """
    name = job["name"]
    found = []
    if not job["exists"]:
        return [finding("FAIL", "job_missing", "no job directory for %s under %s" % (name, job["job_dir"]),
                        "Check the job name and run_dir, or launch it with remote_gpu.trainer.detached_job.",
                        job=name)]
    if job["crash_markers"]:
        first = job["crash_markers"][0]
        found.append(finding(
            "FAIL", "job_crashed",
            "%s: %d crash marker(s) in %s since the latest start, first at line %d: %s" % (
                name, job["crash_marker_count"], job["log_path"], first["line_no"], first["text"]),
            "Read the log around line %d, fix the cause, then restart; do not blind-restart." % first["line_no"],
            job=name))
    total, done = job["items_total"], job["items_done"]
    incomplete = bool(total) and done < total
    gate = job.get("gate_refused")
    if not job["alive"] and gate:
        found.append(finding(
            "FAIL", "item_gate_refused",
            "%s paused before item %s at %d/%d items: the item gate refused it (%s): %s" % (
                name, gate["item"], done, total, ", ".join(gate["causes"]) or "?", "; ".join(gate["messages"])),
            "%s Then relaunch (remote_gpu.trainer.launch): the queue resumes at item %s." % (
                gate["actions"][0] if gate["actions"] else "Fix the cause.", gate["item"]),
            job=name, item=gate["item"], causes=gate["causes"]))
    elif not job["alive"]:
        code = job["last_exit_code"]
        if code is None or code != 0 or incomplete:
            items = " at %d/%d items" % (done, total) if total else ""
            exit_text = "exit code %d" % code if code is not None else "no final status"
            found.append(finding(
                "FAIL", "job_gone_incomplete",
                "%s is not running%s (%s, likely cause: %s)" % (name, items, exit_text, job["vanished_reason"]),
                "Read the tail of %s, classify the failure, then restart the remaining items." % job["log_path"],
                job=name))
        else:
            items = " (%d/%d items)" % (done, total) if total else ""
            found.append(finding("INFO", "job_finished", "%s finished with exit code 0%s" % (name, items),
                                 "Verify and pull the results before any teardown.", job=name))
    found.extend(liveness.silence_findings(job, stale_seconds, hung_seconds))
    delta = job.get("oom_kills_since_launch")
    if delta:
        found.append(finding(
            "WARN" if job["alive"] else "FAIL", "oom_killed",
            "the cgroup's oom_kill counter rose by %d since %s was launched" % (delta, name),
            "Lower the batch size or num_workers, or raise the memory limit; see memory.max.", job=name))
    return found


def gate_refusal(record, ids, done_ids):
    """The item gate's refusal of a job (pure): ``record`` is ``<job dir>/gate-refused.json`` (item_gate.py) -> {item,
    time, causes, messages, actions}, or None when there is none, or it names an item that is not in this job's
    share (``ids``; None: any item) or is done since (a stale record)."""
    if not isinstance(record, dict) or not isinstance(record.get("item"), str):
        return None
    item = record["item"]
    if (ids is not None and item not in ids) or item in done_ids:
        return None
    rows = [row for row in record.get("findings") or [] if isinstance(row, dict)]
    text = [(str(row.get("cause") or "?"), " ".join(str(row.get("message") or "").split())[:500],
             " ".join(str(row.get("action") or "").split())[:500]) for row in rows[:8]]
    return {"item": item, "time": record.get("time") if isinstance(record.get("time"), str) else None,
            "causes": sorted(set(cause for cause, _m, _a in text)), "messages": [m for _c, m, _a in text],
            "actions": [a for _c, _m, a in text if a]}


def _epoch(text):
    """Seconds since the epoch of a status time (``2026-07-03T21:40:02Z``, as job_layout.now_iso writes it), or
    None when it is not one."""
    if not isinstance(text, str):
        return None
    try:
        return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))
    except (ValueError, OverflowError):
        return None


def item_seconds(item):
    """How long an item ran (``finished`` - ``started`` of its status, whole seconds), or None when either time is
    missing or not a status time, or the item finished before it started."""
    started, finished = _epoch(item.get("started")), _epoch(item.get("finished"))
    if started is None or finished is None or finished < started:
        return None
    return int(finished - started)


def min_seconds_of(queue):
    """(min seconds, level) of launch's queue record (``launch_min_seconds`` and ``launch_min_seconds_fail`` as
    launch recorded them): (None, None) without a record or when it records none, or 0 (the check is off)."""
    value = (queue or {}).get("min_seconds")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None, None
    return value, "FAIL" if (queue or {}).get("min_seconds_fail") is True else "WARN"


def mark_too_fast(items, min_seconds):
    """Each item (dicts as job_layout.item_statuses returns them) with ``seconds`` (item_seconds) and ``too_fast``:
    it exited 0 sooner than ``min_seconds`` (None: not checked, never too fast). An item whose times are unknown is
    not too fast. Returns new dicts."""
    marked = []
    for item in items:
        seconds = item_seconds(item)
        fast = bool(min_seconds) and item.get("exit_code") == 0 and seconds is not None and seconds < min_seconds
        marked.append(dict(item, seconds=seconds, too_fast=fast))
    return marked


def too_fast_finding(name, items, min_seconds, level):
    """The ``item_too_fast`` finding (``level``: WARN, or FAIL when launch recorded launch_min_seconds_fail) of a
    job whose ``items`` (mark_too_fast) include some that exited 0 sooner than ``min_seconds``; None when none did."""
    fast = [item for item in items if item.get("too_fast")]
    if not fast:
        return None
    return finding(
        level, "item_too_fast",
        "%s: %d item(s) exited 0 sooner than launch_min_seconds (%d s), so they did not train: %s" % (
            name, len(fast), min_seconds, ", ".join("%s (%d s)" % (item["item"], item["seconds"]) for item in fast)),
        "Read each item's log (trainer-item.log next to its outputs): a run this short usually found no data, "
        "skipped training or resumed a finished checkpoint. Fix the cause, remove the item's status.json and "
        "relaunch; if the run is really that short, lower launch_min_seconds.",
        job=name, items=[item["item"] for item in fast], min_seconds=min_seconds)
