# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Patrol's row of the fleet table and its one line per host, from the raw result of a host's job_status task
(pure functions, controller side)."""

from __future__ import annotations

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import billing, fleet_table
from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import rank, sort_findings

COLUMNS = (
    ("host", "HOST"),
    ("platform", "PLATFORM"),
    ("verdict", "VERDICT"),
    ("jobs_summary", "JOBS"),
    ("progress", "PROGRESS"),
    ("data_bytes_pct", "DATA%B"),
    ("data_inodes_pct", "DATA%I"),
    ("durable_inodes_pct", "DURABLE%I"),
    ("gpu", "GPU"),
    ("top_finding", "TOP FINDING"),
)

# Patrol escalates (verdict FAIL, non-zero exit) on every FAIL finding of job_status (job_crashed,
# job_gone_incomplete, job_missing, sync_failed, command_not_found, xid_fatal, throttle_active, oom_killed of a gone job,
# bytes_high/inodes_exhausted at fail_pct, path_missing) and on these WARN codes: a live job whose log is silent is
# what the patrol exists to catch. item_crashed (an earlier item's crash, WARN) is shown, not escalated.
PATROL_ESCALATE_WARN = ("log_stale",)
# Order of findings of the same level in a patrol row: what says why comes first (a command that is not found,
# trained files that are not durable), then a dead job, which says more than the crash markers in its log.
PATROL_PRIORITY = ("command_not_found", "sync_failed", "xid_fatal", "job_gone_incomplete", "job_missing",
                   "probe_timeout", "interpreter_missing", "probe_failed", "job_crashed", "oom_killed", "throttle_active",
                   "log_stale", "item_too_fast", "item_crashed", "gpu_sample_empty", "xid_app_fault")


# A finished queue on a box that still bills (a WARN) comes last: every other finding says more.
PATROL_PRIORITY += (billing.IDLE_BILLING,)


def _job_state(job):
    if not job.get("exists", True):
        return "MISSING"
    if job.get("alive"):
        return "ALIVE"
    total, done = fleet_table.integer(job.get("items_total")) or 0, fleet_table.integer(job.get("items_done")) or 0
    if job.get("last_exit_code") == 0 and not (total and done < total):
        return "DONE"
    return "GONE"


def _progress_text(progress):
    """``epoch 12/100``; the raw text (or ``?``) when the value is not a number; None without progress."""
    if not progress:
        return None
    if not isinstance(progress, dict):
        return "progress ?"
    value = fleet_table.integer(progress.get("value"))
    if value is None:
        text = progress.get("text")
        if progress.get("value") is None:
            return text if text is None else str(text)
        return "%s ?%s" % (progress.get("unit") or "progress", " (%s)" % fleet_table.clip(text, 40) if text else "")
    text = "%s %d" % (progress.get("unit") or "progress", value)
    total = fleet_table.integer(progress.get("total"))
    if total is not None:
        text += "/%d" % total
    return text


def job_line(job, stale_codes=(), tail_lines=3, width=160):
    """One job as words: ``train ALIVE items 3/7 epoch 12 log 0m`` or ``train GONE items 2/7 exit 137 (killed):
    last lines: ...``. ``stale_codes`` names the jobs with a log_stale finding (a list), or maps each job with a silent
    log to its mark (``STALE``, ``HUNG``: job_hung, ``quiet``: log_quiet)."""
    state = _job_state(job)
    words = [job.get("name") or "?", state]
    if state == "MISSING":
        return " ".join(words + ["(no job directory)"])
    total, done = fleet_table.integer(job.get("items_total")) or 0, fleet_table.integer(job.get("items_done")) or 0
    if total:
        words.append("items %d/%d" % (done, total))
    elif done:
        words.append("items %d" % done)
    if fleet_table.integer(job.get("items_failed")):
        words.append("(%d failed)" % job["items_failed"])
    if fleet_table.integer(job.get("items_sync_failed")):
        words.append("(%d trained, not synced)" % job["items_sync_failed"])
    if fleet_table.integer(job.get("items_too_fast")):
        words.append("(%d too fast)" % job["items_too_fast"])
    progress = _progress_text(job.get("progress"))
    if progress:
        words.append(progress)
    if state in ("GONE", "DONE"):
        code = fleet_table.integer(job.get("last_exit_code"))
        words.append("exit %d" % code if code is not None else "no exit status")
        if state == "GONE" and job.get("vanished_reason"):
            words.append("(%s)" % job["vanished_reason"])
    age = fleet_table.integer(job.get("log_age_seconds"))
    if age is not None:
        if isinstance(stale_codes, dict):  # {job: STALE, HUNG or quiet}
            marker = stale_codes.get(job.get("name"))
        else:
            marker = "STALE" if job.get("name") in stale_codes else None
        words.append("log %dm%s" % (age // 60, " " + marker if marker else ""))
    elif job.get("log_exists") is False:
        words.append("no log")
    if fleet_table.integer(job.get("oom_kills_since_launch")):
        words.append("oom_kill +%d" % job["oom_kills_since_launch"])
    crashes = fleet_table.integer(job.get("crash_marker_count"))
    if crashes:
        markers = job.get("crash_markers")
        first = markers[0] if isinstance(markers, list) and markers and isinstance(markers[0], dict) else {}
        words.append("crash %s x%d (line %s)" % (first.get("kind"), crashes, first.get("line_no")))
    line = " ".join(words)
    if (state == "GONE" or crashes) and tail_lines:
        lines = job.get("tail") if isinstance(job.get("tail"), list) else []
        tail = [fleet_table.clip(text, width) for text in lines[-tail_lines:] if str(text).strip()]
        line += ": last lines: " + (" | ".join(tail) if tail else "(log empty)")
    return line


def job_summary(job):
    """A job in the JOBS column: ``train DONE 3/3``, ``exp2 ALIVE 1/4 (1 too fast)``."""
    text = "%s %s" % (job.get("name"), _job_state(job))
    total = fleet_table.integer(job.get("items_total"))
    if total:
        text += " %d/%d" % (fleet_table.integer(job.get("items_done")) or 0, total)
    if fleet_table.integer(job.get("items_too_fast")):
        text += " (%d too fast)" % job["items_too_fast"]
    return text


def progress_summary(jobs):
    """The PROGRESS column: the one job's progress (``epoch 12/20``), or each job's with its name
    (``train epoch 2/2, exp2 epoch 5``) so that two experiments on one box are never confused."""
    if len(jobs) == 1:
        return _progress_text(jobs[0].get("progress")) or "-"
    return ", ".join("%s %s" % (j.get("name"), _progress_text(j.get("progress")) or "-") for j in jobs) or "-"


def _gpu_text(gpus):
    gpus = [gpu for gpu in gpus if isinstance(gpu, dict)] if isinstance(gpus, list) else []
    if not gpus:
        return "-"
    utils = [fleet_table.integer(g.get("utilization_pct")) for g in gpus]
    used = sum(fleet_table.integer(g.get("memory_used_mib")) or 0 for g in gpus)
    total = sum(fleet_table.integer(g.get("memory_total_mib")) or 0 for g in gpus)
    return "%s %d/%dMiB" % (",".join("-" if u is None else "%d%%" % u for u in utils), used, total)


def _pct(value):
    value = fleet_table.integer(value)
    return "-" if value is None else "%d%%" % value


def provider_word(provider):
    """What the host's provider says of a box that did not answer (one line), or None: its state where it is not
    running, with the provider's sentence; ``running`` only where it was read in this run (the SSH path is broken,
    not the box). ``provider``: fleet_hosts.provider_facts."""
    if not isinstance(provider, dict) or not provider.get("state"):
        return None
    state, name = str(provider["state"]), str(provider.get("provider") or "the provider")
    if state == "running":
        return ("%s says instance %s runs: its SSH path is broken, not the box (look at the address and the port "
                "in the provider's console)" % (name, provider.get("id"))) if provider.get("read") else None
    message = " ".join(str(provider.get("message") or "").split())
    return "%s says instance %s is %s%s" % (name, provider.get("id"), state,
                                            (": " + fleet_table.clip(message, 240)) if message else "")


def _no_answer_row(host, platform, probe, provider=None):
    """The row of a host whose job_status task did not run (NO_RESULT) or did not answer (UNREACHABLE), with what
    its provider says of it (:func:`provider_word`)."""
    if isinstance(probe, dict):
        row = fleet_table.unreachable_row(host, platform, probe)
        said = provider_word(provider)
        if said:
            row["top_finding"] = "unreachable: %s (%s)" % (said, fleet_table.unreachable_text(probe))
        line = "%s UNREACHABLE: %s" % (host, row["top_finding"][len("unreachable: "):])
    else:
        row = fleet_table.no_result_row(host, platform)
        line = "%s NO_RESULT: %s" % (host, row["top_finding"])
    row.update(line=line, reasons=[row["top_finding"]], jobs=[], gpus=None, gpu="-", jobs_summary="-", progress="-",
               probed=False)
    return row


def patrol_row(host, record, strict=False, tail_lines=3, idle_billing=None):
    """One patrol row (and its one-line summary, ``line``) from a host's record.

    ``record`` holds the host's profile (``platform``, ``data_dir``, ``durable_dir``, ``interpreter``), its
    provider's word (``provider``: fleet_hosts.provider_facts, or None; read for a host that did not answer) and
    ``probe``: the raw result of the job_status task (a result with ``unreachable`` or ``failed`` and no ``jobs``
    when it did not run, None when the host failed before it). The verdict is FAIL (escalate) on any FAIL finding
    or an escalating WARN (PATROL_ESCALATE_WARN; every WARN when ``strict``), WARN on other WARN findings, else PASS;
    ``reasons`` lists the escalating findings as ``code: message``. ``idle_billing`` holds the host's billing
    settings (billing.idle_billing); without it no idle_billing finding is made.
    """
    platform = record.get("platform") or "-"
    probe = record.get("probe")
    # a string, or a mapping that is no job_status result at all, cannot be judged: malformed_result, never PASS
    malformed = None
    if probe is not None and not isinstance(probe, dict):
        malformed = "the result is %s, not a mapping: %r" % (type(probe).__name__, probe)
    elif isinstance(probe, dict) and not any(probe.get(key) for key in ("unreachable", "failed", "skipped")) \
            and "jobs" not in probe and "findings" not in probe:
        malformed = "it holds neither jobs nor findings (keys: %s)" % ", ".join(sorted(map(str, probe))[:10])
    if malformed:
        probe = {"jobs": [], "findings": [fleet_table.malformed_result("job_status", malformed)]}
    if not isinstance(probe, dict) or probe.get("unreachable"):
        return _no_answer_row(host, platform, probe, record.get("provider"))
    probed = not (probe.get("failed") and not probe.get("jobs") and not probe.get("findings"))
    if not probed:
        findings = [fleet_table.probe_failure(probe, "patrol", probe="job_status", timeout_hint="patrol_host_timeout",
                                              interpreter=record.get("interpreter"), platform=record.get("platform"))]
    else:
        findings, problem = fleet_table.mappings(probe.get("findings"), "job_status", "findings",
                                                 fleet_table.is_finding)
        findings += [problem] if problem else []
    jobs, problem = fleet_table.mappings(probe.get("jobs"), "job_status", "jobs")
    findings += [problem] if problem else []
    idle = billing.idle_billing(jobs, idle_billing)
    findings += [idle] if idle else []
    order = {code: i for i, code in enumerate(PATROL_PRIORITY)}
    findings = sort_findings(findings, lambda f: order.get(f.get("code"), len(order)))

    def escalates(item):
        level = item.get("level")
        return level == "FAIL" or (level == "WARN" and (strict or item.get("code") in PATROL_ESCALATE_WARN))

    reasons = ["%s: %s" % (f.get("code"), f.get("message")) for f in findings if escalates(f)]
    if reasons:
        verdict = "FAIL"
    elif any(f.get("level") == "WARN" for f in findings):
        verdict = "WARN"
    else:
        verdict = "PASS"
    top = next((f for f in findings if escalates(f)), None) or next(
        (f for f in findings if rank(f.get("level")) > 0), None)
    data = fleet_table.usage_of(probe, record.get("data_dir"))
    durable = fleet_table.usage_of(probe, record.get("durable_dir"))
    marks = {"log_quiet": "quiet", "log_stale": "STALE", "job_hung": "HUNG"}
    stale = dict((f.get("job"), marks[f.get("code")]) for f in findings if f.get("code") in marks)
    parts = [job_line(job, stale, tail_lines) for job in jobs]
    tiers = "data %s/%s" % (_pct(data.get("bytes_pct")), _pct(data.get("inodes_pct")))
    if record.get("durable_dir") and record.get("durable_dir") != record.get("data_dir"):
        tiers += " durable %s/%s" % (_pct(durable.get("bytes_pct")), _pct(durable.get("inodes_pct")))
    gpu = _gpu_text(probe.get("gpus"))
    no_jobs = probed and not jobs and any(f.get("code") == "no_jobs" for f in findings)
    words = [host, verdict, "; ".join(parts) or ("no jobs (nothing launched)" if no_jobs else "no job"), "|",
             tiers + " (%bytes/%inodes)", "| gpu", gpu]
    if reasons:
        codes = []
        for reason in reasons:
            code = reason.split(":", 1)[0]
            if code not in codes:
                codes.append(code)
        words += ["| escalate:", ", ".join(codes)]
    return {
        "host": host,
        "platform": platform,
        "verdict": verdict,
        "jobs_summary": ", ".join(job_summary(j) for j in jobs) or ("no jobs" if no_jobs else "-"),
        "progress": progress_summary(jobs),
        "data_bytes_pct": data.get("bytes_pct"),
        "data_inodes_pct": data.get("inodes_pct"),
        "durable_bytes_pct": durable.get("bytes_pct"),
        "durable_inodes_pct": durable.get("inodes_pct"),
        "gpu": gpu,
        "top_finding": ("%s: %s" % (top.get("code"), top.get("message"))) if top else "-",
        "reasons": reasons,
        "findings": findings,
        "jobs": [dict(job, state=_job_state(job)) for job in jobs],
        # the probe answered (its jobs are the box's jobs, [] when it has none); false for a host that did not
        "probed": probed,
        "no_jobs": no_jobs,
        "gpus": probe.get("gpus"),
        "oom_kills": probe.get("oom_kills"),
        "line": " ".join(words),
    }
