# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Is a live job with a silent log working or hung? Evidence beyond the log, and its judgement (issue 34).

A job whose log is silent may be busy (a long evaluation, a quiet training loop) or hung (an NCCL deadlock, a stuck
DataLoader). Two more witnesses decide: the newest mtime of the job's checkpoints and outputs (a bounded walk that
never follows a symlink), and the GPU's utilisation during the job's life (the sampler's ``samples.tsv``, and
patrol's own nvidia-smi reading of this tick). ``silence_findings`` is the pure judgement:

* the log is silent for no longer than ``stale_minutes``: nothing;
* fresh checkpoints (written within ``stale_minutes``) or a busy GPU: ``log_quiet`` (INFO), with the evidence;
* log and checkpoints silent for longer than ``hung_minutes`` and the GPU idle in every reading: ``job_hung``
  (FAIL), with the evidence;
* otherwise (not yet ``hung_minutes``, or no GPU reading at all): ``log_stale`` (WARN), as before.

Memory pressure of the job's cgroup (``memory_pressure_finding``) is judged here too. Standard library only: it runs
on the box inside job_status.
"""

from __future__ import annotations

import calendar
import os
import stat
import time

from ansible_collections.remote_gpu.trainer.plugins.module_utils import safe_read
from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import finding

# A GPU at or under this utilisation (%) counts as idle (the autopilot's and the reaper's threshold).
IDLE_UTIL_PCT = 5
# The walk over a job's outputs: at most this many entries, this deep; an output tree larger than that is judged
# on what was seen (``truncated``).
MAX_ENTRIES = 20000
MAX_DEPTH = 8
# The newest part of samples.tsv that is read (a sample line is about 80 bytes).
SAMPLES_TAIL_BYTES = 256 * 1024
SAMPLES_FILE = "samples.tsv"
# Files in an output directory that are logs, not artifacts (item_log.py copies the item's log next to its outputs).
NOT_ARTIFACTS = ("trainer-item.log",)
MEMORY_PRESSURE_PCT = 90


def newest_mtime(roots, skip=(), max_entries=MAX_ENTRIES, max_depth=MAX_DEPTH):
    """The newest mtime of a regular file under ``roots`` (each a directory, or a file), never following a symlink
    (lstat only) -> {"epoch", "path", "entries", "truncated"}; ``epoch`` None when none was found. ``skip``: file
    paths that are not artifacts (the job's log). Never raises."""
    found = {"epoch": None, "path": None, "entries": 0, "truncated": False}
    skip = set(os.path.normpath(path) for path in skip if path)

    def consider(path, st):
        if (stat.S_ISREG(st.st_mode) and os.path.normpath(path) not in skip
                and os.path.basename(path) not in NOT_ARTIFACTS
                and (found["epoch"] is None or st.st_mtime > found["epoch"])):
            found["epoch"], found["path"] = st.st_mtime, path

    stack = []
    for root in roots:
        try:
            st = os.lstat(root)
        except (OSError, TypeError, ValueError):
            continue
        if stat.S_ISDIR(st.st_mode):
            stack.append((root, 0))
        else:
            consider(root, st)
    while stack:
        current, depth = stack.pop()
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    if found["entries"] >= max_entries:
                        found["truncated"] = True
                        return found
                    found["entries"] += 1
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISDIR(st.st_mode):
                        if depth + 1 < max_depth:
                            stack.append((entry.path, depth + 1))
                        else:
                            found["truncated"] = True
                    else:
                        consider(entry.path, st)
        except OSError:
            continue
    return found


def artifact_roots(queue, meta):
    """Where a job writes its checkpoints and outputs (pure): the output directories launch recorded in
    ``queue.json`` (``queue``: job_layout.read_queue's record), else the working directory detached_job recorded in
    the trusted ``job.meta.json`` (``chdir``); [] when neither is known."""
    if queue:
        root = queue.get("output_root")
        if isinstance(root, str) and os.path.isabs(root):
            return [root]
        return [entry["output_dir"] for entry in queue.get("items") or []
                if isinstance(entry.get("output_dir"), str) and os.path.isabs(entry["output_dir"])]
    chdir = (meta or {}).get("chdir")
    return [chdir] if isinstance(chdir, str) and os.path.isabs(chdir) else []


def _epoch_of(text):
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except (ValueError, OverflowError, TypeError):
        return None


def parse_samples(text):
    """samples.tsv (sampler.py's format) -> [(epoch, [utilisation % per GPU, None when NA])] (pure). Lines that are
    not samples (the header, a line cut by the bounded read, garbage) are skipped."""
    rows = []
    for line in (text or "").splitlines():
        cells = line.split("\t")
        if len(cells) < 7:
            continue
        epoch = _epoch_of(cells[0])
        if epoch is None:
            continue
        utils = []
        for value in cells[5].split(";"):
            try:
                utils.append(float(value))
            except ValueError:
                utils.append(None)
        rows.append((epoch, utils))
    return rows


def read_samples(job_dir, limit=SAMPLES_TAIL_BYTES):
    """The newest samples of ``<job_dir>/samples.tsv`` (parse_samples), bounded, never through a link or from a FIFO;
    [] when there is none."""
    try:
        data = safe_read.read_bounded(os.path.join(job_dir, SAMPLES_FILE), limit, tail=True)[0]
    except (OSError, safe_read.ReadRefused):
        return []
    return parse_samples(data.decode("utf-8", "replace"))


def gpu_activity(samples, since, now_gpus):
    """What the GPUs did since ``since`` (pure): ``samples`` from read_samples (only those at or after ``since``
    count), ``now_gpus`` the tick's own nvidia-smi reading (patrol's gpus, None when there is none).

    -> {"readings": how many readings had a value, "busy": how many of them had a GPU above IDLE_UTIL_PCT,
    "max_util_pct", "samples": how many samples.tsv rows counted, "now": the tick's reading counted}."""
    values = []
    counted = 0
    for epoch, utils in samples:
        if since is not None and epoch < since:
            continue
        known = [value for value in utils if value is not None]
        if known:
            counted += 1
            values.append(max(known))
    now = [gpu.get("utilization_pct") for gpu in now_gpus or [] if isinstance(gpu, dict)]
    now = [value for value in now if isinstance(value, (int, float)) and not isinstance(value, bool)]
    if now:
        values.append(max(now))
    return {"readings": len(values), "busy": sum(1 for value in values if value > IDLE_UTIL_PCT),
            "max_util_pct": max(values) if values else None, "samples": counted, "now": bool(now)}


def _minutes(seconds):
    return "%d min" % (seconds // 60)


def silence_findings(job, stale_seconds, hung_seconds):
    """The finding of a live job's silent log (pure): none, ``log_quiet`` (INFO), ``log_stale`` (WARN) or
    ``job_hung`` (FAIL); see the module's docstring. ``job`` is job_status's report: ``alive``,
    ``log_age_seconds``, ``artifacts`` ({"age_seconds", "path", "roots"}) and ``gpu_activity`` (gpu_activity)."""
    name, age = job["name"], job.get("log_age_seconds")
    if not job.get("alive") or age is None or age <= stale_seconds:
        return []
    artifacts = job.get("artifacts") or {}
    art_age = artifacts.get("age_seconds")
    gpu = job.get("gpu_activity") or {}
    readings, busy = gpu.get("readings") or 0, gpu.get("busy") or 0
    log_text = "%s has not been written for %s" % (job["log_path"], _minutes(age))
    if art_age is None:
        art_text = ("no checkpoint or output found under %s" % ", ".join(artifacts["roots"])
                    if artifacts.get("roots") else "no output directory known")
    else:
        art_text = "the newest checkpoint or output %s was written %s ago" % (artifacts["path"], _minutes(art_age))
    if readings:
        gpu_text = "GPU utilisation peaked at %s%% in %d reading(s) since (%d busy, above %d%%)" % (
            _number(gpu.get("max_util_pct")), readings, busy, IDLE_UTIL_PCT)
    else:
        gpu_text = "no GPU utilisation reading"
    evidence = {"log_age_seconds": age, "artifact_age_seconds": art_age, "artifact_path": artifacts.get("path"),
                "gpu_readings": readings, "gpu_busy_readings": busy, "gpu_max_util_pct": gpu.get("max_util_pct")}
    fresh = art_age is not None and art_age <= stale_seconds
    if fresh or busy:
        return [finding(
            "INFO", "log_quiet", "%s is alive and working with a quiet log: %s, but %s" % (
                name, log_text, "; ".join(([art_text] if fresh else []) + ([gpu_text] if busy else []))),
            "Nothing to do; print progress more often (or PYTHONUNBUFFERED=1) to see it in the log.",
            job=name, **evidence)]
    hung = (age > hung_seconds and (art_age is None or art_age > hung_seconds) and readings and not busy)
    if hung:
        return [finding(
            "FAIL", "job_hung", "%s is alive but hung: %s, %s, and the GPU was idle: %s" % (
                name, log_text, art_text, gpu_text),
            "A deadlock (NCCL, a stuck DataLoader worker) or a wait on input: look at it (py-spy dump --pid "
            "<the job's PID>, nvidia-smi), then stop it and restart from its last checkpoint; the autopilot "
            "never restarts a hung job by itself.", job=name, **evidence)]
    return [finding(
        "WARN", "log_stale", "%s is alive but %s; %s; %s" % (name, log_text, art_text, gpu_text),
        "Check GPU utilisation and checkpoint mtimes; the job may hang (job_hung after %d min with an idle GPU) or "
        "buffer its output (PYTHONUNBUFFERED=1)." % (hung_seconds // 60), job=name, **evidence)]


def _number(value):
    if isinstance(value, float) and value.is_integer():
        return "%d" % value
    return "%s" % value


def memory_pressure_finding(name, memory, threshold_pct=MEMORY_PRESSURE_PCT):
    """``memory_pressure`` (WARN) when the job's cgroup ``memory`` ({"path", "current", "peak", "max"}, as
    cgroup.job_memory reads it) uses more than ``threshold_pct`` % of its limit now or at its peak; None otherwise or
    when the limit or the use is unknown (pure)."""
    if not memory or not memory.get("max"):
        return None
    limit = memory["max"]
    used = [value for value in (memory.get("current"), memory.get("peak")) if isinstance(value, int)]
    if not used or max(used) * 100 <= threshold_pct * limit:
        return None

    def pct(value):
        return "%d%%" % (value * 100 // limit)

    parts = ["memory.current %d (%s)" % (memory["current"], pct(memory["current"]))] if isinstance(
        memory.get("current"), int) else []
    if isinstance(memory.get("peak"), int):
        parts.append("peak %d (%s)" % (memory["peak"], pct(memory["peak"])))
    return finding(
        "WARN", "memory_pressure",
        "%s: its cgroup %s uses %s of memory.max %d bytes (above %d%%)" % (
            name, memory.get("path"), " and ".join(parts), limit, threshold_pct),
        "The next allocation may be OOM-killed: lower the batch size or the DataLoader num_workers (each worker "
        "holds a copy of the dataset's state), or raise the container's memory limit.",
        job=name, memory_current=memory.get("current"), memory_peak=memory.get("peak"), memory_max=limit,
        cgroup=memory.get("path"))
