# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Patrol rows as a Prometheus textfile for node_exporter's textfile collector (exposition format 0.0.4, every
metric a gauge; pure functions, controller side)."""

from __future__ import annotations

import math

PROM_VERDICTS = ("PASS", "WARN", "FAIL", "UNREACHABLE", "NO_RESULT")

PROM_METRICS = (
    ("trainer_patrol_verdict", "Verdict of the latest patrol tick for the host (1 for the current verdict)."),
    ("trainer_patrol_timestamp_seconds", "Unix time of the latest patrol tick."),
    ("trainer_job_alive", "1 when the job's process is alive."),
    ("trainer_job_items_done", "Queue items finished with exit code 0."),
    ("trainer_job_items_failed", "Queue items finished with a non-zero exit code."),
    ("trainer_job_items_total", "Queue length the job should finish (0: not graded)."),
    ("trainer_job_items_too_fast", "Queue items that exited 0 sooner than launch_min_seconds (they did not train)."),
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


def _number(value):
    """A real number (not a bool, not NaN or infinite), else None: a sample of anything else is left out."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def _dicts(value):
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def prometheus_text(rows, now):
    """Exposition-format text (every metric a gauge, HELP and TYPE once per family) for patrol rows.

    A value that is not a number (a malformed result) is left out rather than written as a broken sample."""
    samples = {name: [] for name, _help in PROM_METRICS}

    def add(name, labels, value):
        value = _number(value)
        if value is not None:
            samples[name].append((labels, value))

    for row in rows:
        host = ("host", row["host"])
        for verdict in PROM_VERDICTS:
            add("trainer_patrol_verdict", (host, ("verdict", verdict)), 1 if row["verdict"] == verdict else 0)
        add("trainer_patrol_timestamp_seconds", (host,), int(now))
        for job in _dicts(row.get("jobs")):
            labels = (host, ("job", job.get("name")))
            add("trainer_job_alive", labels, 1 if job.get("alive") else 0)
            add("trainer_job_items_done", labels, job.get("items_done") or 0)
            add("trainer_job_items_failed", labels, job.get("items_failed") or 0)
            add("trainer_job_items_total", labels, job.get("items_total") or 0)
            add("trainer_job_items_too_fast", labels, job.get("items_too_fast") or 0)
            add("trainer_job_crash_markers", labels, job.get("crash_marker_count") or 0)
            progress = job.get("progress") if isinstance(job.get("progress"), dict) else {}
            if progress.get("value") is not None:
                add("trainer_job_progress", labels + (("unit", progress.get("unit") or "progress"),),
                    progress["value"])
            add("trainer_job_log_age_seconds", labels, job.get("log_age_seconds"))
            add("trainer_job_last_exit_code", labels, job.get("last_exit_code"))
        for tier, prefix in (("data", "data"), ("durable", "durable")):
            for metric, key in (("trainer_disk_bytes_pct", "bytes_pct"), ("trainer_disk_inodes_pct", "inodes_pct")):
                add(metric, (host, ("tier", tier)), row.get("%s_%s" % (prefix, key)))
        for gpu in _dicts(row.get("gpus")):
            labels = (host, ("gpu", gpu.get("index")))
            add("trainer_gpu_utilization_pct", labels, gpu.get("utilization_pct"))
            add("trainer_gpu_memory_used_mib", labels, gpu.get("memory_used_mib"))
        oom = row.get("oom_kills") if isinstance(row.get("oom_kills"), dict) else {}
        counters = oom.get("counters") if isinstance(oom.get("counters"), dict) else {}
        if isinstance(counters.get("oom_kill"), int):
            add("trainer_cgroup_oom_kills", (host,), counters["oom_kill"])
    lines = []
    for name, text in PROM_METRICS:
        if not samples[name]:
            continue
        lines += ["# HELP %s %s" % (name, text), "# TYPE %s gauge" % name]
        lines += [_sample(name, labels, value) for labels, value in samples[name]]
    return "\n".join(lines) + "\n"
