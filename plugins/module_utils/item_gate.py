# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The item gate: what the queue runner checks on the box before each queue item starts (no SSH round trip).

The queue runner (launch_scripts.queue_text) calls ``launch.py gate`` before each item that is not done yet; the
gate reads the box (:func:`gather`) and :func:`judge` (pure) decides. An item is refused when

* the data disk (the item's output directory) or the durable tier has fewer free bytes or inodes than the item's
  budget (``launch_item_budget``), or is 99 % full (where detached_job refuses a job), or does not exist;
* a process outside the job holds more than ``gpu_mib`` MiB of GPU memory (a zombie or a neighbour: every item
  would die of CUDA OOM);
* a fatal Xid was written to the kernel log since the last item passed the gate (the job directory's
  ``item-gate.json`` keeps the fatal lines already seen; the first gate of a job takes them as its baseline:
  preflight judged those, and launch refuses a FAIL box);
* a hardware or thermal slowdown reason is active on a GPU (``accept_slowdown``, set by
  ``launch_ignore_preflight``, lets a throttled box the user accepted train);
* nvidia-smi is installed but does not answer.

A refusal is one ``item_gate_refused`` (FAIL) finding per cause, written with the item to the job directory's
``gate-refused.json`` (job_layout.GATE_FILE, which job_status reads); the queue runner then stops before the item
and exits REFUSED_EXIT, so the job's status says why, and a relaunch after the fix resumes at that item. A gate that
passes removes the file. Standard library only; runs on the target's Python 3.8+.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

from ansible_collections.remote_gpu.trainer.plugins.module_utils import gpu_findings, gpu_patrol, job_layout, procfs
from ansible_collections.remote_gpu.trainer.plugins.module_utils.atomic import write_atomic
from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import finding
from ansible_collections.remote_gpu.trainer.plugins.module_utils.gpu_query import SmiError, compute_apps
from ansible_collections.remote_gpu.trainer.plugins.module_utils.inode_check import (
    human_bytes, missing_usage, usage_from_statvfs)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.kernel_log import read_kernel_log
from ansible_collections.remote_gpu.trainer.plugins.module_utils.xid import FATAL, parse_kernel_log

CODE = "item_gate_refused"
REFUSED_EXIT = 75  # EX_TEMPFAIL: the queue paused before an item; fix the cause and relaunch
STATE_FILE = "item-gate.json"
DEFAULT_GPU_MIB = 1024
FULL_PCT = 99
MAX_SEEN = 512
BUDGET_KEYS = ("data_bytes", "data_inodes", "durable_bytes", "durable_inodes")
CAUSES = ("path_missing", "bytes_short", "inodes_short", "gpu_memory_held", "xid_fatal", "throttle_active",
          "gpu_unreadable")


class GateError(Exception):
    """Gate arguments that cannot be used; the message says what to fix."""


def check_budget(budget):
    """The budget as {key: int >= 0} for BUDGET_KEYS (missing keys are 0: not checked); GateError otherwise."""
    budget = budget or {}
    if not isinstance(budget, dict):
        raise GateError("launch_item_budget must be a mapping with the keys %s, got %r" % (
            ", ".join(BUDGET_KEYS), budget))
    unknown = sorted(set(budget) - set(BUDGET_KEYS))
    if unknown:
        raise GateError("launch_item_budget has unknown key(s) %s; the keys are %s" % (
            ", ".join(unknown), ", ".join(BUDGET_KEYS)))
    clean = {}
    for key in BUDGET_KEYS:
        value = budget.get(key, 0)
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise GateError("launch_item_budget.%s must be a whole number, 0 or more (0: not checked), got %r" % (
                key, value))
        clean[key] = value
    return clean


def refuse(cause, message, action, **extra):
    return finding("FAIL", CODE, message, action, cause=cause, **extra)


def disk_findings(label, usage, need_bytes, need_inodes):
    """The refusals of one tier: ``usage`` as inode_check.usage_from_statvfs gives it (of ``path``)."""
    path = usage.get("path")
    if not usage.get("exists"):
        return [refuse("path_missing", "the %s %s does not exist" % (label, path),
                       "Mount or create %s (or fix the platform profile's path), then relaunch." % path, path=path)]
    found = []
    free, pct = usage.get("bytes_free"), usage.get("bytes_pct")
    if free is not None and (free < need_bytes or (pct is not None and pct >= FULL_PCT)):
        why = ("has %s free, less than the item's budget of %s" % (human_bytes(free), human_bytes(need_bytes))
               if free < need_bytes else "is %d %% full" % pct)
        found.append(refuse(
            "bytes_short", "the %s %s %s" % (label, path, why),
            "Free space on %s (old checkpoints, caches, outputs already synced) or lower launch_item_budget, then "
            "relaunch: the queue resumes at this item." % path, path=path, free_bytes=free, need_bytes=need_bytes))
    free, pct = usage.get("inodes_free"), usage.get("inodes_pct")
    if free is not None and (free < need_inodes or (pct is not None and pct >= FULL_PCT)):
        why = ("has %d inodes free, less than the item's budget of %d" % (free, need_inodes)
               if free < need_inodes else "has used %d %% of its inodes" % pct)
        found.append(refuse(
            "inodes_short", "the %s %s %s" % (label, path, why),
            "Delete or pack small files on %s (tar, zip, shards) or lower launch_item_budget, then relaunch: the "
            "queue resumes at this item." % path, path=path, free_inodes=free, need_inodes=need_inodes))
    return found


def judge(disks, budget, gpus=None, apps=(), job_pids=(), new_xids=(), gpu_mib=DEFAULT_GPU_MIB,
          accept_slowdown=False, gpu_error=None):
    """Whether the next item may start (pure) -> the list of refusals (``item_gate_refused`` FAIL findings, each
    with its ``cause``, one of CAUSES); empty: it may start.

    ``disks``: {"data": usage, "durable": usage or None} (inode_check.usage_from_statvfs / missing_usage);
    ``budget``: check_budget's; ``gpus``: gpu_patrol.sample rows (``index``, ``throttle_reasons``, ...) or None when
    nvidia-smi is not installed; ``apps``: gpu_query.compute_apps rows; ``job_pids``: the job's own processes;
    ``new_xids``: the fatal Xid events (xid.parse_kernel_log) not seen at the last passed gate; ``gpu_error``: why
    nvidia-smi did not answer (then the GPU checks cannot be made)."""
    budget = check_budget(budget)
    found = []
    for label, key in (("data disk", "data"), ("durable tier", "durable")):
        usage = (disks or {}).get(key)
        if usage is not None:
            found += disk_findings(label, usage, budget[key + "_bytes"], budget[key + "_inodes"])
    if gpu_error:
        found.append(refuse("gpu_unreadable", "nvidia-smi did not answer before the item: %s" % gpu_error,
                            "Run the playbook remote_gpu.trainer.preflight on this host: a hung or failing nvidia-smi "
                            "usually means a GPU fault. If the GPU is lost, pull what you have and rent a different "
                            "box."))
    own = set(job_pids or ())
    for app in apps or ():
        used = app.get("used_memory_mib")
        if app.get("pid") in own or not isinstance(used, int) or used <= gpu_mib:
            continue
        found.append(refuse(
            "gpu_memory_held", "process %s (%s), not of this job, holds %d MiB of GPU memory (more than %d MiB): "
            "the item would die of CUDA out-of-memory" % (
                app.get("pid"), app.get("process_name") or "?", used, gpu_mib),
            "Stop that process (remote_gpu.trainer.vram_reaper finds orphans; a zombie held by the platform needs "
            "a restart of the instance), or raise launch_item_gate_gpu_mib, then relaunch.", pid=app.get("pid"),
            used_mib=used))
    for event in new_xids or ():
        found.append(refuse(
            "xid_fatal", "a fatal Xid %s (%s) was logged since the last item: %s" % (
                event.get("xid"), event.get("mnemonic") or "?", event.get("line")),
            "The GPU needs a reset or is failing, which a rental cannot do: pull what you have and rent a "
            "different box. To start the item on it anyway, remove %s from the job directory and relaunch."
            % STATE_FILE, xid=event.get("xid"), pci=event.get("pci")))
    for gpu in gpus or ():
        active = [name for name in gpu_findings.THROTTLE_REASONS if name in (gpu.get("throttle_reasons") or ())]
        if not active or accept_slowdown:
            continue
        found.append(refuse(
            "throttle_active", "%s has %s active before the item starts" % (
                gpu_findings.gpu_label(gpu), ", ".join(gpu_findings.REASON_WORDS[name] for name in active)),
            "The box is unfit (preflight's throttle_active): rent a different one; to train on it anyway, relaunch "
            "with -e launch_ignore_preflight=true.", gpu=gpu.get("index"), reasons=active))
    return found


# ---------------------------------------------------------------------------------------------------------------
# Reading the box
# ---------------------------------------------------------------------------------------------------------------

def usage_of(path):
    """Disk usage of ``path``, or of its nearest existing parent (an output root not made yet lives there)."""
    probe = os.path.abspath(os.path.expanduser(path))
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    try:
        usage = usage_from_statvfs(path, os.statvfs(probe))
    except OSError:
        return missing_usage(path)
    return usage


def event_key(event):
    return hashlib.sha256(str(event.get("line")).encode("utf-8", "replace")).hexdigest()[:16]


def fatal_events(text):
    return [event for event in parse_kernel_log(gpu_patrol.bound_log(text) or "") if event.get("severity") == FATAL]


class _Bins(object):
    """What kernel_log.read_kernel_log asks of a module: where a program is."""

    @staticmethod
    def get_bin_path(name):
        return shutil.which(name)


def gather(job_dir, data, durable, runner_pid=None, timeout=20, gpu=True):
    """What the gate judges, read from the box -> (disks, gpus, apps, job_pids, fatal events, seen keys, gpu_error).
    Without ``gpu`` (a box in environment-only mode: declared GPU-less, launched with launch_no_gpu_ok), only the
    disks are read."""
    disks = {"data": usage_of(data), "durable": usage_of(durable) if durable else None}
    smi = shutil.which("nvidia-smi") if gpu else None
    gpus, apps, gpu_error, events = None, [], None, []
    if smi:
        try:
            gpus, notes = gpu_patrol.sample(smi, timeout)
            if gpus is None:
                gpu_error = "; ".join(note["message"] for note in notes)
            apps = compute_apps(smi, timeout) if gpus is not None else []
        except SmiError as exc:
            gpu_error = str(exc)
        text, _unreadable = read_kernel_log(_Bins(), "auto", timeout)
        events = fatal_events(text) if text else []
    pids = set()
    if runner_pid:
        pids = procfs.descendants(int(runner_pid), procfs.all_stats())
    state = job_layout.read_record(os.path.join(job_dir, STATE_FILE))
    seen = state.get("xid_seen") if isinstance(state, dict) and isinstance(state.get("xid_seen"), list) else None
    return disks, gpus, apps, pids, events, seen, gpu_error


def run_gate(job_dir, item, data, durable, budget, runner_pid=None, gpu_mib=DEFAULT_GPU_MIB, accept_slowdown=False,
             timeout=20, gpu=True):
    """Gather, judge, and record -> (refusals, line to print). A pass records the fatal Xid lines seen as the next
    baseline and removes the refusal file; a refusal writes it (job_layout.GATE_FILE)."""
    budget = check_budget(budget)
    disks, gpus, apps, pids, events, seen, gpu_error = gather(job_dir, data, durable, runner_pid, timeout, gpu)
    first = seen is None
    new = [] if first else [event for event in events if event_key(event) not in set(seen)]
    refusals = judge(disks, budget, gpus, apps, pids, new, gpu_mib, accept_slowdown, gpu_error)
    refusal_path = os.path.join(job_dir, job_layout.GATE_FILE)
    if refusals:
        write_atomic(refusal_path, json.dumps({"item": item, "time": job_layout.now_iso(), "code": CODE,
                                               "exit_code": REFUSED_EXIT, "findings": refusals},
                                              indent=1, sort_keys=True) + "\n")
        return refusals, "==== trainer: item %s refused by the item gate (%s): %s ====" % (
            item, ", ".join(sorted(set(f["cause"] for f in refusals))), "; ".join(f["message"] for f in refusals))
    keys = sorted(set((seen or []) + [event_key(event) for event in events]))[-MAX_SEEN:]
    if first or keys != sorted(seen or []):
        write_atomic(os.path.join(job_dir, STATE_FILE), json.dumps({"xid_seen": keys}) + "\n")
    try:
        os.unlink(refusal_path)
    except OSError:
        pass
    return [], None


def cli(argv=None):
    """``PY -m ...module_utils.item_gate --job-dir DIR --item ID --data DIR [--durable DIR] [budget...]``: exit 0
    (start the item), REFUSED_EXIT (refused: printed and recorded in the job directory), 2 when the gate itself could
    not run (the queue runner then starts the item, and says so)."""
    import argparse
    import sys
    parser = argparse.ArgumentParser(prog="item_gate", description="remote_gpu.trainer item gate (on the box)")
    for name in ("--job-dir", "--item", "--data"):
        parser.add_argument(name, required=True)
    parser.add_argument("--durable", default="")
    for name in ("--data-bytes", "--data-inodes", "--durable-bytes", "--durable-inodes"):
        parser.add_argument(name, type=int, default=0)
    parser.add_argument("--gpu-mib", type=int, default=DEFAULT_GPU_MIB)
    parser.add_argument("--runner-pid", type=int, default=None)
    parser.add_argument("--timeout", type=int, default=20)
    parser.add_argument("--accept-slowdown", action="store_true")
    parser.add_argument("--no-gpu", action="store_true", help="environment-only mode: judge the disks only")
    args = parser.parse_args(argv)
    budget = {"data_bytes": args.data_bytes, "data_inodes": args.data_inodes, "durable_bytes": args.durable_bytes,
              "durable_inodes": args.durable_inodes}
    try:
        refusals, line = run_gate(args.job_dir, args.item, args.data, args.durable or None, budget,
                                  runner_pid=args.runner_pid, gpu_mib=args.gpu_mib,
                                  accept_slowdown=args.accept_slowdown, timeout=args.timeout, gpu=not args.no_gpu)
    except (GateError, OSError) as exc:
        sys.stdout.write("==== trainer: the item gate could not check item %s: %s ====\n" % (args.item, exc))
        sys.stdout.flush()
        return 2
    if line:
        sys.stdout.write(line + "\n")
        for found in refusals:
            sys.stdout.write("trainer: %s: %s\n" % (found["cause"], found["action"]))
        sys.stdout.flush()
    return REFUSED_EXIT if refusals else 0


if __name__ == "__main__":
    raise SystemExit(cli())
