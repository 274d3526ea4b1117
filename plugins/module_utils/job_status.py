# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One job's report for the job_status module: which log is read, the bounded scan of it, the job's own files
(PID, status, items, meta) and, when it is gone, the likely reason.

What the report means (its findings, the vanished reason) is jobs.py's; the layout of the job's files
job_layout.py's; the log scan job_log.py's.
"""

from __future__ import annotations

import os

from ansible_collections.remote_gpu.trainer.plugins.module_utils import cgroup, job_layout, job_log, jobs, liveness
from ansible_collections.remote_gpu.trainer.plugins.module_utils import safe_read
from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import finding


# What each job reports of its items' status files (job["items"]): enough for autopilot to know which item to
# resume from, whether every item's files are durable, and which items ended too fast to count (jobs.mark_too_fast:
# ``seconds``, ``too_fast``).
ITEM_KEYS = ("item", "state", "exit_code", "started", "finished", "seconds", "too_fast", "sync_dest", "synced",
             "unsynced")


class StatusError(Exception):
    """Arguments job_status cannot work with; the message says what to fix."""


def run_dir_of(params):
    """The run directory, ``~`` expanded and absolute; raises StatusError when it is empty or relative."""
    return job_layout.resolve_run_dir(params["run_dir"], StatusError)


def scan_log_file(path, regex, params, inside=None):
    """dict(scan, mtime, skipped_bytes) of a log, or None when it does not exist. Raises job_log.LogRefused, and
    StatusError when the scan runs past scan_timeout."""
    try:
        return job_log.scan_log_file(path, regex, params["tail_lines"], inside=inside, seconds=params["scan_timeout"])
    except job_log.ScanTimeout:
        raise StatusError(
            "scanning %s took longer than scan_timeout (%d s) and was stopped: progress_regex is probably "
            "catastrophic (nested repetition such as (a+)+$ backtracks exponentially); simplify it, or raise "
            "scan_timeout for a very large log" % (path, params["scan_timeout"]))
    except RuntimeError as exc:
        raise StatusError("scanning %s failed: %s" % (path, exc))


def choose_log(spec, paths, meta, meta_problem):
    """(log path, the directory it must resolve inside or None, how it was chosen).

    The task's log_path is the user's word; a trusted meta's log_path is the one detached_job recorded at start,
    used only inside the job directory (``meta_refused``: it names a file elsewhere, which is never read);
    otherwise the default ``<job dir>/job.log``. Neither is followed out of the job directory.
    """
    if spec["log_path"]:
        return spec["log_path"], None, "task"
    recorded = meta.get("log_path") if not meta_problem else None
    if isinstance(recorded, str) and recorded != paths["log_path"]:
        if safe_read.inside(recorded, paths["job_dir"]):
            return recorded, paths["job_dir"], "meta"
        return paths["log_path"], paths["job_dir"], "meta_refused"
    return paths["log_path"], paths["job_dir"], "default"


def report_job(module, spec, regex, oom, now, boot_epoch):
    params = module.params
    paths = job_layout.job_paths(run_dir_of(params), spec["name"])
    meta, meta_problem = job_layout.trusted_meta(paths)
    findings = []
    if meta_problem:
        findings.append(finding(
            "WARN", "job_meta_untrusted",
            "%s: job.meta.json is ignored: %s" % (spec["name"], meta_problem),
            "Only the job's own files are trusted: make %s yours and writable by you alone (chmod go-w), or "
            "restart the job with remote_gpu.trainer.detached_job." % paths["job_dir"], job=spec["name"]))
    log_path, inside, chosen = choose_log(spec, paths, meta, meta_problem)
    if chosen == "meta_refused":
        findings.append(finding(
            "WARN", "job_meta_untrusted", "%s: job.meta.json names log_path %r, outside the job directory: that file "
            "is not read" % (spec["name"], meta["log_path"]), "Give the task's log_path (patrol_jobs: log_path) for a "
            "log kept elsewhere, or restart the job with remote_gpu.trainer.detached_job.", job=spec["name"]))
    # the PID with its start time; launched under tmux, before the wrapper wrote its PID file, the session
    pid, alive = job_layout.liveness(paths, lambda: job_layout.tmux_has_session(
        module.run_command, module.get_bin_path("tmux"), spec["name"]))
    # The wrapper deletes status.json before it writes its PID, so a status file always belongs to the latest run.
    final = job_layout.parse_status(job_layout.read_text(paths["status_file"], job_layout.MAX_META_BYTES))
    items = job_layout.item_statuses(paths["items_dir"])
    queue, queue_problem = job_layout.read_queue(paths)
    if queue_problem:
        findings.append(finding("WARN", "queue_record_invalid", "%s: %s; the job is graded against queue_length %d"
                                % (spec["name"], queue_problem, spec["queue_length"]),
                                "Relaunch with the playbook remote_gpu.trainer.launch, which writes the record, or "
                                "remove the file.",
                                job=spec["name"]))
    share = share_of(queue, items, spec["queue_length"])
    min_seconds, too_fast_level = jobs.min_seconds_of(queue)
    share["items"] = jobs.mark_too_fast(share["items"], min_seconds)
    try:
        found = scan_log_file(log_path, regex, params, inside)
    except job_log.LogRefused as exc:
        if chosen == "task":
            raise StatusError("log_path of %s: %s" % (spec["name"], exc))
        findings.append(finding("WARN", "log_refused", "%s: the log is not read: %s" % (spec["name"], exc),
                                "Put a regular log file back at %s (or give log_path)." % log_path, job=spec["name"]))
        found = None
    scan = found["scan"] if found else job_log.scan_log([], regex, 0)
    mtime = found["mtime"] if found else None
    # The rise of the oom_kill counter of the cgroup the job was launched in (recorded at launch); None when that
    # file is gone or was never known, so an OOM is never inferred without it.
    delta = None
    if isinstance(meta.get("oom_kill_at_launch"), int):
        if meta.get("oom_events_path") == oom["path"]:
            counters = oom["counters"]
        elif isinstance(meta.get("oom_events_path"), str) and os.path.basename(meta["oom_events_path"]) in (
                "memory.events", "memory.oom_control"):  # a record names only a cgroup's counter file
            counters = cgroup.read_counters(meta["oom_events_path"])
        else:
            counters = None
        if counters and "oom_kill" in counters:
            delta = max(0, counters["oom_kill"] - meta["oom_kill_at_launch"])
    last_exit = final["exit_code"] if final else None
    job = {
        "name": spec["name"],
        "job_dir": paths["job_dir"],
        "exists": os.path.isdir(paths["job_dir"]),
        "alive": alive,
        "pid": pid,
        "detach": meta.get("detach"),
        "items_done": sum(1 for item in share["items"] if item["exit_code"] == 0),
        "items_failed": sum(1 for item in share["items"] if item["exit_code"] not in (0, None)),
        "items_sync_failed": sum(1 for item in share["items"] if item["state"] == job_layout.STATE_SYNC_FAILED),
        "items_too_fast": sum(1 for item in share["items"] if item["too_fast"]),
        "min_seconds": min_seconds,
        "items_total": share["total"],
        "items_source": share["source"],
        "queue_items": share["ids"],
        "queue_length": share["queue_length"],
        "run_id": queue.get("run_id") if queue else None,
        "queue_sha256": job_layout.record_digest(queue) if queue else None,
        "items": [dict((key, item[key]) for key in ITEM_KEYS) for item in share["items"]],
        "last_exit_code": last_exit,
        "final_status": final,
        "progress": scan["progress"],
        "crash_markers": scan["crash_markers"],
        "crash_marker_count": scan["crash_marker_count"],
        "current_item": scan["current_item"],
        "earlier_crashes": scan["earlier_crashes"],
        "last_start": scan["last_start"],
        "launched_epoch": meta.get("launched_epoch") if isinstance(meta.get("launched_epoch"), (int, float))
        and not isinstance(meta.get("launched_epoch"), bool) else None,
        "log_path": log_path,
        "log_exists": mtime is not None,
        "log_age_seconds": int(max(0, now - mtime)) if mtime is not None else None,
        "log_skipped_bytes": found["skipped_bytes"] if found else 0,
        "tail": scan["tail"],
        "oom_kills_since_launch": delta,
        "vanished_reason": None,
        "artifacts": None,
        "memory": None,
        "gpu_activity": None,
    }
    if alive and mtime is not None and now - mtime > params["stale_minutes"] * 60:
        # a silent log: is the job still writing checkpoints or outputs? (liveness.silence_findings judges)
        roots = liveness.artifact_roots(queue, meta if not meta_problem else {})
        newest = liveness.newest_mtime(roots, skip=[log_path])
        job["artifacts"] = {"roots": roots, "path": newest["path"], "entries": newest["entries"],
                            "truncated": newest["truncated"],
                            "age_seconds": int(max(0, now - newest["epoch"])) if newest["epoch"] is not None else None}
    if alive and pid:
        job["memory"] = cgroup.job_memory(pid, root=params["cgroup_root"])
        pressure = liveness.memory_pressure_finding(spec["name"], job["memory"])
        findings.extend([pressure] if pressure else [])
    # The item gate's refusal (the queue paused before an item): only of a gone job, for an item still not done.
    job["gate_refused"] = None if alive else jobs.gate_refusal(
        job_layout.read_record(os.path.join(paths["job_dir"], job_layout.GATE_FILE)), share["ids"],
        [item["item"] for item in share["items"] if item["exit_code"] == 0])
    if not alive and job["exists"]:
        launched = meta.get("launched_epoch")
        job["vanished_reason"] = jobs.vanished_reason(last_exit, scan["tail"], delta,
                                                      launched if isinstance(launched, (int, float)) else None,
                                                      boot_epoch)
    findings.extend(item_findings(job, items, scan["not_found"]))
    fast = jobs.too_fast_finding(spec["name"], share["items"], min_seconds, too_fast_level)
    findings.extend([fast] if fast else [])
    return job, findings


def share_of(queue, items, queue_length):
    """What the job is graded against (pure): this host's share of the queue as launch recorded it (``queue``,
    from job_layout.read_queue) when there is one, else ``queue_length`` (0: not graded) over every item status.

    -> {"source": "launch" | "queue_length" | None, "total", "ids" (the share's item ids, or None), "queue_length"
    (the whole queue), "items" (the statuses that count)}. With a record, an item status that is not in the share
    (left by an earlier launch) does not count, and ``queue_length`` is not needed: the whole queue's length is
    the record's."""
    if queue:
        ids = [entry["item"] for entry in queue["items"]]
        length = queue.get("queue_length")
        return {"source": "launch", "total": len(ids), "ids": ids,
                "queue_length": length if isinstance(length, int) and not isinstance(length, bool) else None,
                "items": [item for item in items if item["item"] in ids]}
    return {"source": "queue_length" if queue_length else None, "total": queue_length, "ids": None,
            "queue_length": queue_length or None, "items": items}


def item_findings(job, items, not_found):
    """The findings of the items' own states (pure): ``sync_failed`` (FAIL) for each item that trained but whose
    files are not durable, ``command_not_found`` (FAIL) when the job or an item exited 127, naming the command from
    bash's message in ``not_found`` (job_log.scan_log), ``item_crashed`` (WARN) for the crash markers of earlier
    items (job["earlier_crashes"]): reported once, with their ids, never as the current state (job_crashed)."""
    name, found = job["name"], []
    for item in items:
        if item["state"] != job_layout.STATE_SYNC_FAILED:
            continue
        files = ", ".join(item["unsynced"]) or "none selected"
        found.append(finding(
            "FAIL", "sync_failed",
            "%s: item %s trained (its command exited 0) but its files are not durable: %s. Reason: %s" % (
                name, item["item"], files, item["sync_error"] or "unknown"),
            "Fix the cause on the durable tier (free inodes or space there), then relaunch: only the sync is "
            "retried, the trained files are kept. Do not delete the item's output directory or tear the box "
            "down before that.", job=name, item=item["item"], files=item["unsynced"]))
    failed = [item["item"] for item in items if 127 in (item["exit_code"], item["command_exit_code"])]
    if failed or job["last_exit_code"] == 127 and not items:
        commands = []
        for entry in not_found:
            if (entry["item"] in failed or not failed) and entry["command"] not in commands:
                commands.append(entry["command"])
        first = next((entry for entry in not_found if entry["command"] in commands), None)
        what = ("%s (%s, line %d)" % (", ".join(commands), first["text"], first["line_no"]) if commands
                else "no \"command not found\" line in the log since the latest start; see its tail")
        found.append(finding(
            "FAIL", "command_not_found",
            "%s: %s exited 127, command not found: %s" % (
                name, "item(s) %s" % ", ".join(failed) if failed else "the job", what),
            "The job's shell (non-login: no ~/.bashrc, so no conda on PATH) cannot find it: give the full path, such "
            "as the profile's trainer_interpreter, or activate the environment in the command, then relaunch.",
            job=name, commands=commands))
    for crash in job["earlier_crashes"]:
        first = crash["first"]
        found.append(finding(
            "WARN", "item_crashed",
            "%s: earlier item %s left %d crash marker(s), first at line %d: %s (the queue went on)" % (
                name, crash["item"] or "(before the first item)", crash["crash_marker_count"], first["line_no"],
                first["text"]),
            "Read the log around line %d; its status says whether the item failed. A relaunch reruns failed "
            "items." % first["line_no"], job=name, item=crash["item"]))
    return found
