# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet table and verdict shared by preflight and patrol (pure functions, controller side)."""

from __future__ import annotations

# Verdicts that make the run exit non-zero; WARN joins them in strict mode.
FAILING = ("FAIL", "UNREACHABLE", "NO_RESULT")

COLUMNS = (
    ("host", "HOST"),
    ("platform", "PLATFORM"),
    ("gpus", "GPUS"),
    ("verdict", "VERDICT"),
    ("data_bytes_pct", "DATA%B"),
    ("data_inodes_pct", "DATA%I"),
    ("durable_inodes_pct", "DURABLE%I"),
    ("top_finding", "TOP FINDING"),
)


def no_result_row(host, platform):
    """A host that produced no record: it failed or was unreachable before the probe ran."""
    return {"host": host, "platform": platform, "gpus": "-", "verdict": "NO_RESULT",
            "data_bytes_pct": None, "data_inodes_pct": None, "durable_inodes_pct": None,
            "top_finding": "no result: the host failed or was unreachable earlier in the run (see above)",
            "findings": []}


_RANK = {"PASS": 0, "INFO": 0, "WARN": 1, "FAIL": 2}


def gpu_summary(gpus):
    """'8x NVIDIA H100 80GB HBM3' (several models joined with ' + '); '-' when none."""
    counts = {}
    for gpu in gpus or []:
        name = gpu.get("name") or "unknown GPU"
        counts[name] = counts.get(name, 0) + 1
    return " + ".join("%dx %s" % (n, name) for name, n in counts.items()) or "-"


def _usage_of(storage, path):
    for usage in (storage or {}).get("paths", []):
        if usage.get("path") == path:
            return usage
    return {}


def row_from_record(host, record):
    """One table row from what the probing play recorded for a host.

    ``record`` holds ``platform``, ``data_dir``, ``durable_dir``, the raw ``storage`` (inode_check) and
    ``gpu`` (gpu_health) results, and ``findings`` (all of them), or ``unreachable: true`` and ``msg``.
    """
    platform = record.get("platform") or "-"
    if record.get("unreachable"):
        row = no_result_row(host, platform)
        row.update(verdict="UNREACHABLE", top_finding="unreachable: %s" % (record.get("msg") or "no answer"))
        return row
    findings = sorted(record.get("findings") or [], key=lambda f: -_RANK.get(f.get("level"), 0))
    worst = findings[0]["level"] if findings and _RANK.get(findings[0]["level"], 0) > 0 else "PASS"
    top = findings[0] if findings and _RANK.get(findings[0]["level"], 0) > 0 else None
    data = _usage_of(record.get("storage"), record.get("data_dir"))
    durable = _usage_of(record.get("storage"), record.get("durable_dir"))
    return {
        "host": host,
        "platform": platform,
        "gpus": gpu_summary((record.get("gpu") or {}).get("gpus")),
        "verdict": worst,
        "data_bytes_pct": data.get("bytes_pct"),
        "data_inodes_pct": data.get("inodes_pct"),
        "durable_inodes_pct": durable.get("inodes_pct"),
        "top_finding": ("%s: %s" % (top["code"], top["message"])) if top else "-",
        "findings": findings,
    }


def _cell(value):
    if value is None:
        return "-"
    if isinstance(value, int) and not isinstance(value, bool):
        return "%d%%" % value
    return str(value)


def render_table(rows, max_finding=90, columns=COLUMNS):
    """Fixed-width text table, one line per host, in the order given; the last column is truncated."""
    header = [title for _key, title in columns]
    body = []
    for row in rows:
        cells = [_cell(row.get(key)) for key, _title in columns]
        if len(cells[-1]) > max_finding:
            cells[-1] = cells[-1][:max_finding - 3] + "..."
        body.append(cells)
    widths = [max(len(line[i]) for line in [header] + body) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in [header] + body]
    return lines


def failing_hosts(rows, strict=False):
    """Hosts whose verdict makes the run fail; WARN counts only when ``strict``."""
    bad = FAILING + (("WARN",) if strict else ())
    return [row["host"] for row in rows if row["verdict"] in bad]


def summary(rows):
    """Count of hosts per verdict, for the report and the last line of the table."""
    counts = {}
    for row in rows:
        counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
    return counts


# ---- patrol: one row and one line per host from a raw job_status result ----------------------------------------

PATROL_COLUMNS = (
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

# Table columns per run kind; the last column is the one that is truncated.
COLUMNS_BY_KIND = {"preflight": COLUMNS, "patrol": PATROL_COLUMNS}

# Patrol escalates (verdict FAIL, non-zero exit) on every FAIL finding of job_status (job_crashed,
# job_gone_incomplete, job_missing, oom_killed of a gone job, bytes_high/inodes_exhausted at fail_pct, path_missing)
# and on these WARN codes: a live job whose log is silent is what the patrol exists to catch.
PATROL_ESCALATE_WARN = ("log_stale",)
# Order of findings of the same level in a patrol row: a dead job says more than the crash markers in its log.
PATROL_PRIORITY = ("job_gone_incomplete", "job_missing", "probe_timeout", "interpreter_missing", "probe_failed",
                   "job_crashed", "oom_killed", "log_stale")


def _job_state(job):
    if not job.get("exists", True):
        return "MISSING"
    if job.get("alive"):
        return "ALIVE"
    total, done = job.get("items_total") or 0, job.get("items_done") or 0
    if job.get("last_exit_code") == 0 and not (total and done < total):
        return "DONE"
    return "GONE"


def _progress_text(progress):
    if not progress:
        return None
    if progress.get("value") is None:
        return progress.get("text")
    text = "%s %d" % (progress.get("unit") or "progress", progress["value"])
    if progress.get("total") is not None:
        text += "/%d" % progress["total"]
    return text


def _clip(text, width):
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:width - 3] + "..."


def job_line(job, stale_codes=(), tail_lines=3, width=160):
    """One job as words: ``train ALIVE items 3/7 epoch 12 log 0m`` or ``train GONE items 2/7 exit 137 (killed):
    last lines: ...``. ``stale_codes`` names the jobs with a log_stale finding."""
    state = _job_state(job)
    words = [job.get("name") or "?", state]
    if state == "MISSING":
        return " ".join(words + ["(no job directory)"])
    total, done = job.get("items_total") or 0, job.get("items_done") or 0
    if total:
        words.append("items %d/%d" % (done, total))
    elif done:
        words.append("items %d" % done)
    if job.get("items_failed"):
        words.append("(%d failed)" % job["items_failed"])
    progress = _progress_text(job.get("progress"))
    if progress:
        words.append(progress)
    if state in ("GONE", "DONE"):
        code = job.get("last_exit_code")
        words.append("exit %d" % code if code is not None else "no exit status")
        if state == "GONE" and job.get("vanished_reason"):
            words.append("(%s)" % job["vanished_reason"])
    age = job.get("log_age_seconds")
    if age is not None:
        words.append("log %dm%s" % (age // 60, " STALE" if job.get("name") in stale_codes else ""))
    elif job.get("log_exists") is False:
        words.append("no log")
    if job.get("oom_kills_since_launch"):
        words.append("oom_kill +%d" % job["oom_kills_since_launch"])
    if job.get("crash_marker_count"):
        first = (job.get("crash_markers") or [{}])[0]
        words.append("crash %s x%d (line %s)" % (first.get("kind"), job["crash_marker_count"], first.get("line_no")))
    line = " ".join(words)
    if (state == "GONE" or job.get("crash_marker_count")) and tail_lines:
        tail = [_clip(text, width) for text in (job.get("tail") or [])[-tail_lines:] if text.strip()]
        line += ": last lines: " + (" | ".join(tail) if tail else "(log empty)")
    return line


def _gpu_text(gpus):
    if not gpus:
        return "-"
    utils = [g.get("utilization_pct") for g in gpus]
    used = sum(g.get("memory_used_mib") or 0 for g in gpus)
    total = sum(g.get("memory_total_mib") or 0 for g in gpus)
    return "%s %d/%dMiB" % (",".join("-" if u is None else "%d%%" % u for u in utils), used, total)


def _pct(value):
    return "-" if value is None else "%d%%" % value


def _probe_failure(probe):
    """A finding for a probe that did not run to the end (timeout, no interpreter, bad arguments)."""
    msg = probe.get("msg") or "the probe failed"
    if probe.get("timedout") or "timed out" in msg:
        return {"level": "FAIL", "code": "probe_timeout", "message": "job_status did not answer in time: %s" % msg,
                "action": "Look at the box (a hung filesystem or nvidia-smi); raise patrol_host_timeout if it is slow."}
    if probe.get("rc") == 127 or "No such file" in (probe.get("module_stderr") or ""):
        return {"level": "FAIL", "code": "interpreter_missing", "message": "the profile interpreter does not run: %s"
                % _clip(probe.get("module_stderr") or msg, 200),
                "action": "Set trainer_interpreter for this host to a Python that exists there."}
    return {"level": "FAIL", "code": "probe_failed", "message": _clip(msg, 300),
            "action": "Read the task output above, fix the cause, and run patrol again."}


def patrol_row_from_record(host, record, strict=False, tail_lines=3):
    """One patrol row (and its one-line summary, ``line``) from a host's record.

    ``record`` holds ``platform``, ``data_dir``, ``durable_dir`` and ``probe``: the raw result of the job_status
    task (a result with ``unreachable`` or ``failed`` and no ``jobs`` when it did not run). The verdict is FAIL
    (escalate) on any FAIL finding or an escalating WARN (PATROL_ESCALATE_WARN; every WARN when ``strict``), WARN
    on other WARN findings, else PASS; ``reasons`` lists the escalating findings as ``code: message``.
    """
    platform = record.get("platform") or "-"
    probe = record.get("probe")
    if not isinstance(probe, dict):
        row = no_result_row(host, platform)
        row.update(line="%s NO_RESULT: %s" % (host, row["top_finding"]), reasons=[row["top_finding"]], jobs=[],
                   gpus=None, gpu="-", jobs_summary="-", progress="-")
        return row
    if probe.get("unreachable"):
        row = no_result_row(host, platform)
        msg = _clip(probe.get("msg") or "no answer", 200)
        if msg.startswith("Task failed: "):
            msg = msg[len("Task failed: "):]
        row.update(verdict="UNREACHABLE", top_finding="unreachable: %s" % msg, reasons=["unreachable: %s" % msg],
                   line="%s UNREACHABLE: %s" % (host, msg), jobs=[], gpus=None, gpu="-", jobs_summary="-",
                   progress="-")
        return row
    if probe.get("failed") and not probe.get("jobs") and not probe.get("findings"):
        findings = [_probe_failure(probe)]
    else:
        findings = list(probe.get("findings") or [])
    order = {code: i for i, code in enumerate(PATROL_PRIORITY)}
    findings.sort(key=lambda f: (-_RANK.get(f.get("level"), 0), order.get(f.get("code"), len(order))))

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
        (f for f in findings if _RANK.get(f.get("level"), 0) > 0), None)
    data = _usage_of(probe, record.get("data_dir"))
    durable = _usage_of(probe, record.get("durable_dir"))
    jobs = probe.get("jobs") or []
    stale = [f.get("job") for f in findings if f.get("code") == "log_stale"]
    parts = [job_line(job, stale, tail_lines) for job in jobs]
    tiers = "data %s/%s" % (_pct(data.get("bytes_pct")), _pct(data.get("inodes_pct")))
    if record.get("durable_dir") and record.get("durable_dir") != record.get("data_dir"):
        tiers += " durable %s/%s" % (_pct(durable.get("bytes_pct")), _pct(durable.get("inodes_pct")))
    gpu = _gpu_text(probe.get("gpus"))
    words = [host, verdict, "; ".join(parts) or "no job", "|", tiers + " (%bytes/%inodes)", "| gpu", gpu]
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
        "jobs_summary": ", ".join("%s %s" % (j.get("name"), _job_state(j)) + (
            " %d/%d" % (j.get("items_done") or 0, j["items_total"]) if j.get("items_total") else "")
            for j in jobs) or "-",
        "progress": ", ".join(_progress_text(j.get("progress")) or "-" for j in jobs) or "-",
        "data_bytes_pct": data.get("bytes_pct"),
        "data_inodes_pct": data.get("inodes_pct"),
        "durable_bytes_pct": durable.get("bytes_pct"),
        "durable_inodes_pct": durable.get("inodes_pct"),
        "gpu": gpu,
        "top_finding": ("%s: %s" % (top["code"], top["message"])) if top else "-",
        "reasons": reasons,
        "findings": findings,
        "jobs": [dict(job, state=_job_state(job)) for job in jobs],
        "gpus": probe.get("gpus"),
        "oom_kills": probe.get("oom_kills"),
        "line": " ".join(words),
    }


# ---- Prometheus textfile (node_exporter's textfile collector) ----------------------------------------------------

PROM_VERDICTS = ("PASS", "WARN", "FAIL", "UNREACHABLE", "NO_RESULT")

PROM_METRICS = (
    ("trainer_patrol_verdict", "Verdict of the latest patrol tick for the host (1 for the current verdict)."),
    ("trainer_patrol_timestamp_seconds", "Unix time of the latest patrol tick."),
    ("trainer_job_alive", "1 when the job's process is alive."),
    ("trainer_job_items_done", "Queue items finished with exit code 0."),
    ("trainer_job_items_failed", "Queue items finished with a non-zero exit code."),
    ("trainer_job_items_total", "Queue length the job should finish (0: not graded)."),
    ("trainer_job_progress", "Last progress value (epoch or step) since the latest start."),
    ("trainer_job_crash_markers", "Crash markers in the log since the latest start."),
    ("trainer_job_log_age_seconds", "Seconds since the job's log was last written."),
    ("trainer_job_last_exit_code", "Exit code of the job's last run, when it has finished."),
    ("trainer_disk_bytes_pct", "Percent of bytes used on a storage tier."),
    ("trainer_disk_inodes_pct", "Percent of inodes used on a storage tier."),
    ("trainer_gpu_utilization_pct", "GPU utilisation in percent."),
    ("trainer_gpu_memory_used_mib", "GPU memory used in MiB."),
    ("trainer_cgroup_oom_kills", "The cgroup's oom_kill counter."),
)


def _label_value(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _sample(name, labels, value):
    inner = ",".join('%s="%s"' % (key, _label_value(val)) for key, val in labels)
    return "%s{%s} %s" % (name, inner, repr(float(value)) if isinstance(value, float) else int(value))


def prometheus_text(rows, now):
    """Exposition-format text (every metric a gauge, HELP and TYPE once per family) for patrol rows."""
    samples = {name: [] for name, _help in PROM_METRICS}
    for row in rows:
        host = ("host", row["host"])
        for verdict in PROM_VERDICTS:
            samples["trainer_patrol_verdict"].append(((host, ("verdict", verdict)), 1 if row["verdict"] == verdict else 0))
        samples["trainer_patrol_timestamp_seconds"].append(((host,), int(now)))
        for job in row.get("jobs") or []:
            labels = (host, ("job", job.get("name")))
            samples["trainer_job_alive"].append((labels, 1 if job.get("alive") else 0))
            samples["trainer_job_items_done"].append((labels, job.get("items_done") or 0))
            samples["trainer_job_items_failed"].append((labels, job.get("items_failed") or 0))
            samples["trainer_job_items_total"].append((labels, job.get("items_total") or 0))
            samples["trainer_job_crash_markers"].append((labels, job.get("crash_marker_count") or 0))
            progress = job.get("progress") or {}
            if progress.get("value") is not None:
                samples["trainer_job_progress"].append(
                    (labels + (("unit", progress.get("unit") or "progress"),), progress["value"]))
            if job.get("log_age_seconds") is not None:
                samples["trainer_job_log_age_seconds"].append((labels, job["log_age_seconds"]))
            if job.get("last_exit_code") is not None:
                samples["trainer_job_last_exit_code"].append((labels, job["last_exit_code"]))
        for tier, prefix in (("data", "data"), ("durable", "durable")):
            for metric, key in (("trainer_disk_bytes_pct", "bytes_pct"), ("trainer_disk_inodes_pct", "inodes_pct")):
                value = row.get("%s_%s" % (prefix, key))
                if value is not None:
                    samples[metric].append(((host, ("tier", tier)), value))
        for gpu in row.get("gpus") if isinstance(row.get("gpus"), list) else []:
            labels = (host, ("gpu", gpu.get("index")))
            if gpu.get("utilization_pct") is not None:
                samples["trainer_gpu_utilization_pct"].append((labels, gpu["utilization_pct"]))
            if gpu.get("memory_used_mib") is not None:
                samples["trainer_gpu_memory_used_mib"].append((labels, gpu["memory_used_mib"]))
        counters = (row.get("oom_kills") or {}).get("counters") or {}
        if isinstance(counters.get("oom_kill"), int):
            samples["trainer_cgroup_oom_kills"].append(((host,), counters["oom_kill"]))
    lines = []
    for name, text in PROM_METRICS:
        if not samples[name]:
            continue
        lines += ["# HELP %s %s" % (name, text), "# TYPE %s gauge" % name]
        lines += [_sample(name, labels, value) for labels, value in samples[name]]
    return "\n".join(lines) + "\n"
