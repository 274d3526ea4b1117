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

from ansible_collections.remote_gpu.trainer.plugins.module_utils import cgroup, job_layout, job_log, jobs
from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import finding


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

    The task's log_path is the user's word; a trusted meta's log_path is the one detached_job recorded at start;
    otherwise the default ``<job dir>/job.log``, which is never followed out of the job directory.
    """
    if spec["log_path"]:
        return spec["log_path"], None, "task"
    recorded = meta.get("log_path") if not meta_problem else None
    if isinstance(recorded, str) and os.path.isabs(recorded) and recorded != paths["log_path"]:
        return recorded, None, "meta"
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
    # the PID with its start time; launched under tmux, before the wrapper wrote its PID file, the session
    pid, alive = job_layout.liveness(paths, lambda: job_layout.tmux_has_session(
        module.run_command, module.get_bin_path("tmux"), spec["name"]))
    # The wrapper deletes status.json before it writes its PID, so a status file always belongs to the latest run.
    final = job_layout.parse_status(job_layout.read_text(paths["status_file"], job_layout.MAX_META_BYTES))
    items = job_layout.item_statuses(paths["items_dir"])
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
        elif isinstance(meta.get("oom_events_path"), str):
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
        "items_done": sum(1 for item in items if item["exit_code"] == 0),
        "items_failed": sum(1 for item in items if item["exit_code"] not in (0, None)),
        "items_total": spec["queue_length"],
        "last_exit_code": last_exit,
        "final_status": final,
        "progress": scan["progress"],
        "crash_markers": scan["crash_markers"],
        "crash_marker_count": scan["crash_marker_count"],
        "last_start": scan["last_start"],
        "log_path": log_path,
        "log_exists": mtime is not None,
        "log_age_seconds": int(max(0, now - mtime)) if mtime is not None else None,
        "log_skipped_bytes": found["skipped_bytes"] if found else 0,
        "tail": scan["tail"],
        "oom_kills_since_launch": delta,
        "vanished_reason": None,
    }
    if not alive and job["exists"]:
        launched = meta.get("launched_epoch")
        job["vanished_reason"] = jobs.vanished_reason(last_exit, scan["tail"], delta,
                                                      launched if isinstance(launched, (int, float)) else None,
                                                      boot_epoch)
    return job, findings
