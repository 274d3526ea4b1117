#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: job_status
short_description: One read-only probe per host of detached jobs, their logs, disks, inodes, GPUs and OOM kills
version_added: 0.1.0
author:
  - remote_gpu.trainer maintainers (@remote-gpu)
description:
  - Reports, for each job started by M(remote_gpu.trainer.detached_job), whether it is alive, how many queue items
    are done, its last exit code, its progress, crash markers since its latest (re)start, how long its log has been
    silent, the last lines of its log and, when it is gone, the likely reason.
  - A job is alive when the PID in C(<run_dir>/<name>/job.pid) exists with the start time recorded in
    C(job.starttime), or, before that file exists, when its tmux session C(trainer-<name>) (C(.) written as C(+))
    exists. It is never identified by a name pattern, so the probe cannot mistake itself for the job.
  - >-
    Queue items are counted from C(<run_dir>/<name>/items/<item>/status.json), one file per finished item,
    written by the run wrapper as C({"item": "007", "exit_code": 0, "started": "<iso>", "finished": "<iso>"}).
    An item is done when its C(exit_code) is 0. The job's own final status is C(<run_dir>/<name>/status.json).
  - >-
    An item that exited 0 sooner than the C(min_seconds) of launch's record (C(launch_min_seconds), 30 by default)
    is C(too_fast): a training run of a few seconds found no data or skipped training. The job's C(items_too_fast)
    counts them and one C(item_too_fast) finding names them, WARN, or FAIL when launch recorded
    C(launch_min_seconds_fail). Its state stays C(done) (a relaunch does not rerun it); the autopilot does not count
    it toward a finished queue.
  - >-
    An item whose command succeeded but whose files did not reach the durable tier has the state C(sync_failed)
    (C(exit_code) 1, C(command_exit_code) 0, C(unsynced) the files, C(sync_error) the reason): a C(sync_failed)
    finding (FAIL) names them. A relaunch retries only its sync, never its command.
  - >-
    Crash markers are whole words or lines (a C(Traceback), C(CUDA out of memory), C(CUDA error), a bare
    C(Killed) line or a shell's C(<pid> Killed) message, NCCL errors and warnings, segmentation faults), counted
    only after the latest C(==== trainer: started ... ====) line, and only for the current queue item (after the
    latest C(==== trainer: item <id> started ...) line). An earlier item's crash markers give one C(item_crashed)
    WARN with its id, never C(job_crashed). A metric named C(val_error) is not a crash.
  - >-
    Exit code 127 (of the job or of an item) gives C(command_not_found) (FAIL), naming the command from bash's
    C(command not found) line. The returned C(tail) leaves out the wrappers' own C(==== trainer: ... ====) lines.
  - Also reports bytes and inodes of O(paths), GPU utilisation and memory (one C(nvidia-smi) call under a
    timeout, with O(gpu)), and the cgroup's OOM kill counter.
  - >-
    A path at C(warn_pct) or more (C(bytes_high), C(inodes_high), C(inodes_exhausted)) names its largest consumers
    (by bytes, or by inodes for the inode findings), each with its kind (Hugging Face cache, pip cache, checkpoints,
    per-sample files) and the command that clears or moves it, in the finding's message, action and C(consumers).
    The walk is bounded (200000 entries), follows no symlink and stays on the path's filesystem.
  - >-
    With O(gpu), the same C(nvidia-smi --query-gpu) call reads each GPU's active clock event ("throttle") reasons:
    a hardware or thermal slowdown (HW slowdown, HW thermal, HW power brake, SW thermal) while the GPU is under load
    (utilisation 30 % or more, or under MIG, where there is none, a power draw of 30 % of the limit; an idle GPU at
    low clocks is not a finding) is C(throttle_active) (FAIL), as in
    preflight. A query that answers with no GPU row (exit 0 and nothing, or C(No devices were found)) is
    C(gpu_sample_empty) (WARN), never silence.
  - >-
    With O(gpu), the kernel log is read in the same module run, as M(remote_gpu.trainer.gpu_health) reads it
    (O(kernel_log)), and only the Xid events written since the jobs started (the earliest C(launched_epoch) of
    their trusted C(job.meta.json); dmesg's seconds since boot are placed with the boot time from
    C(/proc/uptime)) are reported, with preflight's codes: C(xid_fatal) (FAIL: the box is dying, pull what you
    have and rent another), C(xid_app_fault) (WARN), C(xid_info) (INFO). A line that carries no time is not
    counted as new. At most the newest 4 MiB of the log are parsed. An unreadable kernel log is one
    C(kernel_log_unreadable) INFO, never a failure.
  - Read-only. It never changes anything on the host.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
  - remote_gpu.trainer.probe
  - remote_gpu.trainer.probe.direct
  - remote_gpu.trainer.disk_thresholds
  - remote_gpu.trainer.job
options:
  name:
    description:
      - One job to report on. Use O(jobs) for several.
      - Without O(name) and O(jobs), every job under O(run_dir) is reported (each directory there that holds a job's
        files, at most 64, by name), so that a box with two experiments is judged whole.
    type: str
  log_path:
    description:
      - The log of the job named by O(name), when it is not the one recorded at launch. An absolute path.
      - It must be a regular file; a FIFO, a device or a directory fails the task.
    type: path
  queue_length:
    description:
      - Number of queue items the job named by O(name) should finish (without O(name) and O(jobs), each job found
        under O(run_dir)); C(0) does not grade completion.
      - Only for a job that the launch role did not start. A job that it started is graded against this host's
        share of the queue, as launch recorded it in C(queue.json) in the job directory, and this option is then
        ignored (the whole queue's length is the record's).
    type: int
    default: 0
  queue_record:
    description:
      - >-
        The queue record (JSON text, as the C(remote_gpu.trainer.launch_record) filter writes it) that the caller
        would write for the job named by O(name). Given, that job's entry in RV(jobs) has C(queue_done): whether the
        job is not running, its C(queue.json) on the box is this record (compared by digest, whitespace and key order
        aside) and every item of it finished with exit code 0, and C(queue_pending): the record's items whose
        C(items/<item>/status.json) does not say exit code 0, in the record's order (what the queue runner would
        still run), whichever record the box holds. The launch role gives it, so that its relaunch reads one boolean
        instead of comparing the record on the controller, and its launch knows the items left without an SSH
        execution more.
      - Only with O(name).
    type: str
  jobs:
    description: The jobs to report on.
    type: list
    elements: dict
    suboptions:
      name:
        description: Job name, as given to M(remote_gpu.trainer.detached_job).
        type: str
        required: true
      log_path:
        description: The job's log, when it is not the one recorded at launch (an absolute path to a regular file).
        type: path
      queue_length:
        description:
          - Number of queue items the job should finish; C(0) does not grade completion.
          - Ignored for a job that the launch role started, which is graded against this host's share of the queue
            (C(queue.json)).
        type: int
        default: 0
  progress_regex:
    description:
      - Python regular expression for a progress line; the last match after the latest start is reported.
      - It runs in multi-line mode over blocks of the log; a match that spans two lines is ignored.
      - Named groups C(value) and C(total) (and C(unit)) are returned as numbers when present.
      - The default matches C(epoch 3), C(Epoch 3/10), C(Epoch [3/10]), C(step 1200) and C(step=1200).
    type: str
    default: '(?i)\b(?P<unit>epoch|step)\b[ \t]*[=:]?[ \t]*[\[(]?[ \t]*(?P<value>\d+)(?:[ \t]*/[ \t]*(?P<total>\d+))?'
  stale_minutes:
    description:
      - A live job whose log has not been written for longer than this raises C(log_stale) (WARN), unless its
        checkpoints and outputs were written within this time or its GPU is busy, when it is C(log_quiet) (INFO).
      - WARN, not FAIL, because a long evaluation or checkpoint write is silent too; a dead job is reported by
        C(job_gone_incomplete) instead.
      - >-
        The checkpoints and outputs are the output directories launch recorded in C(queue.json), else the C(chdir)
        that M(remote_gpu.trainer.detached_job) recorded; the newest mtime of a regular file there counts (a walk of
        at most 20000 entries, 8 levels deep, that follows no symlink). The GPU is busy when a GPU is above 5 %
        utilisation in a reading: the sampler's C(samples.tsv) rows of the last O(hung_minutes) (launch_sampler),
        and this probe's own nvidia-smi reading (with O(gpu)).
    type: int
    default: 30
  hung_minutes:
    description:
      - A live job whose log and checkpoints have not been written for longer than this, and whose GPU was idle
        (5 % or less) in every reading, is C(job_hung) (FAIL), with the evidence. Without any GPU reading it stays
        C(log_stale).
    type: int
    default: 60
  tail_lines:
    description:
      - How many of the last log lines to return, from 0 to 10000.
      - A returned line longer than 4096 characters keeps its first 1024 and its last 3072 characters.
      - >-
        Every text returned from the log (the lines of C(tail), the C(text) of C(crash_markers),
        C(earlier_crashes) and bash's C(command not found) lines, the C(progress) text) is redacted on the host,
        before the result leaves it, by the collection's secret patterns (C(WANDB_API_KEY=...), C(token=...),
        C(Authorization: Bearer ...), URLs with C(user:password@), tokens of known shapes such as C(hf_...)):
        C(-vvv) prints a module's raw output over SSH before the controller sees it. The host does not know the
        run's secret values; the controller redacts those afterwards.
    type: int
    default: 20
  scan_timeout:
    description:
      - Seconds the scan of one log may take. The scan runs in a child process that is killed at this deadline,
        and the task then fails saying so. A catastrophic O(progress_regex) (nested repetition such as C((a+\)+$))
        backtracks exponentially and cannot be interrupted otherwise.
    type: int
    default: 30
  paths:
    description: Data disk and durable storage paths whose bytes and inodes are reported, with thresholds.
    type: list
    elements: path
    default: []
  gpu:
    description:
      - Query GPU utilisation, memory, clocks, power and the active clock event reasons with one
        C(nvidia-smi --query-gpu) call, and read the kernel log for Xid errors since the jobs started.
      - Without nvidia-smi, RV(gpus) is null and an INFO finding says so; that is never a failure.
    type: bool
    default: false
  kernel_log:
    description:
      - Where the Xid errors are read from, with O(gpu).
      - V(auto) asks C(journalctl -k -b), then C(dmesg), each under O(timeout); V(none) skips the check; an
        absolute path reads that file (a regular file, its last 16 MiB).
    type: str
    default: auto
  timeout:
    description: Seconds nvidia-smi may run.
    type: int
    default: 15
  cgroup_root:
    description:
      - Where the cgroup filesystem is mounted (for the C(oom_kill) counter, and the memory of each live job's
        cgroup).
      - A live job whose cgroup (of its PID) uses more than 90 % of its C(memory.max) (the smallest up to the root;
        v1 C(memory.limit_in_bytes)) in C(memory.current) or C(memory.peak) is C(memory_pressure) (WARN), with the
        numbers.
    type: path
    default: /sys/fs/cgroup
notes:
  - >-
    Which log is read: O(log_path) (or O(jobs[].log_path)) when given; else the C(log_path) recorded in
    C(job.meta.json) at launch, but only when that file is trusted and the path lies inside the job directory
    (resolved without following a link out of it; a meta naming a file elsewhere is a C(job_meta_untrusted) WARN and
    that file is never read: give O(log_path) for a log kept outside the job directory); else the default
    C(<run_dir>/<name>/job.log).
  - >-
    C(job.meta.json) is trusted only when it is a regular file (not a symlink) owned by the user running the
    module, not writable by group or others, in a job directory not writable by others
    (M(remote_gpu.trainer.detached_job) writes it with mode 0600 in a 0700 directory). Otherwise it is ignored
    entirely, the default log is read, and a C(job_meta_untrusted) WARN says why, so a planted meta file can never
    choose the file whose lines are returned.
  - >-
    The default log is never followed out of the job directory: a C(job.log) that resolves outside it is not read
    (C(log_refused), WARN). A symlink that stays inside the job directory is followed.
  - >-
    Size and kind bounds: only regular files are read as logs (checked before the open, which never blocks, so a
    FIFO or C(/dev/zero) is refused rather than read), at most the last 256 MiB of a log are scanned (line
    numbers then count from the first whole line scanned, and C(log_skipped_bytes) in each of RV(jobs) says how
    much was skipped), a line longer than 4 MiB is cut there, and the job's small files (PID, status, items) are
    read only when they are regular files, at most 16 MiB each.
"""

EXAMPLES = r"""
- name: Patrol tick
  remote_gpu.trainer.job_status:
    jobs:
      - name: ablations
        queue_length: 24
    run_dir: /root/autodl-tmp/jobs
    paths: [/root/autodl-tmp, /root/autodl-fs]
    gpu: true
    fail_on: never
  register: patrol

- name: One line per host
  ansible.builtin.debug:
    msg: "{{ patrol.status }} {{ patrol.jobs | map(attribute='name') | zip(patrol.jobs | map(attribute='alive')) }}"
"""

RETURN = r"""
status:
  description: The worst level among the findings; C(INFO) counts as C(PASS).
  type: str
  returned: always
  sample: FAIL
jobs:
  description:
    - One entry per job, in the order given; without O(name) and O(jobs), every job found under O(run_dir), by name.
    - C(items_total) is what the job is graded against. C(items_source) says where it comes from. C(launch) means
      this host's share of the queue, as the launch role recorded it in C(queue.json) (C(queue_items) are its ids,
      C(queue_length) the length of the whole queue, C(run_id) the run, C(queue_sha256) the digest of the whole
      record in a canonical form, null without one, which launch compares with the record it would write; with
      O(queue_record), C(queue_done) says whether it is that record with every item done, and C(queue_pending)
      lists that record's items not done yet).
      C(queue_length) means the option of that
      name, and null means completion is not graded. With a record, only the share's items are counted.
    - C(items) lists the status file of each finished item that counts, in item order. C(state) is C(done),
      C(failed) or C(sync_failed). C(sync_dest) is the durable directory, null when the sync is off. C(synced) is
      the number of verified durable copies it records. C(unsynced) lists the files that are not durable.
      C(seconds) is how long it ran (C(finished) - C(started), null when either is unknown). C(too_fast) is true
      when it exited 0 sooner than the C(min_seconds) that launch recorded (C(launch_min_seconds)), so such an item
      did not train, and the autopilot does not count it toward a finished queue.
    - C(min_seconds) is that record (null when launch recorded none, or 0), C(items_too_fast) the number of items
      that were too fast; they make one C(item_too_fast) finding per job (WARN, or FAIL when launch recorded
      C(launch_min_seconds_fail)).
    - C(last_start) is the time of the latest start marker in the log, C(launched_epoch) the launch time of the
      trusted C(job.meta.json) (null when it is missing or untrusted).
    - C(tail) holds the last O(tail_lines) lines of the log, without the wrappers' own lines. It, the C(text) of
      C(crash_markers) and of C(earlier_crashes), and C(progress.text) are redacted on the host by the secret
      patterns (see O(tail_lines)), so that a key a job printed (C(WANDB_API_KEY=...)) shows as C(<redacted>) even
      in C(-vvv) output.
    - C(artifacts) (only for a live job whose log is older than O(stale_minutes), else null) is the newest
      checkpoint or output (C(roots) walked, C(path), C(age_seconds), C(entries), C(truncated)); C(gpu_activity)
      (null likewise) counts the GPU readings (C(readings), C(busy), C(max_util_pct), C(samples), C(now));
      C(memory) is the live job's cgroup memory (C(path), C(version), C(current), C(peak), C(max) in bytes).
    - C(gate_refused) is the item gate's refusal of a job that is not running (C(item), C(time), C(causes),
      C(messages), C(actions)), when the queue paused before that item (finding C(item_gate_refused)); else null.
  type: list
  elements: dict
  returned: always
  sample:
    - name: ablations
      alive: false
      pid: null
      items_done: 17
      items_failed: 1
      items_sync_failed: 0
      items_too_fast: 0
      min_seconds: null
      items_total: 24
      items_source: queue_length
      queue_items: null
      queue_length: 24
      run_id: null
      queue_sha256: null
      items:
        - {item: "016", state: sync_failed, exit_code: 1, started: "2026-07-03T20:11:40Z", finished: "2026-07-03T21:40:02Z",
           seconds: 5302, too_fast: false, sync_dest: /root/autodl-fs/runs/ablations/016, synced: 0,
           unsynced: [best.pt, trainer-item.log]}
      last_exit_code: null
      progress: {text: "Epoch 3/20", unit: epoch, value: 3, total: 20, line_no: 5120}
      crash_markers: [{line_no: 5133, kind: traceback, text: "Traceback (most recent call last):"}]
      crash_marker_count: 1
      current_item: "018"
      earlier_crashes: [{item: "011", crash_marker_count: 1, first: {line_no: 2210, kind: cuda_oom, text: "..."}}]
      last_start: "2026-07-03T22:11:09Z"
      launched_epoch: 1783116669.2
      log_path: /root/autodl-tmp/jobs/ablations/job.log
      log_age_seconds: 2710
      log_skipped_bytes: 0
      tail: ["RuntimeError: CUDA error: an illegal memory access was encountered"]
      vanished_reason: unknown
      oom_kills_since_launch: 0
      artifacts: null
      gpu_activity: null
      memory: null
      gate_refused: null
alive_jobs:
  description: The names of the jobs of RV(jobs) that are alive (running, or starting under tmux).
  type: list
  elements: str
  returned: always
  sample: [exp2]
discovered:
  description: True when RV(jobs) are every job found under O(run_dir) (neither O(name) nor O(jobs) was given).
  type: bool
  returned: always
  sample: true
paths:
  description: Bytes and inodes of each of O(paths), as M(remote_gpu.trainer.inode_check) reports them.
  type: list
  elements: dict
  returned: always
  sample:
    - {path: /root/autodl-fs, exists: true, bytes_pct: 34, inodes_pct: 91, inodes_free: 18000}
gpus:
  description:
    - Per-GPU product name, utilisation, memory, short PCI bus id, SM clock and its maximum, power draw and limit, and the active
      clock event reasons (names as in M(remote_gpu.trainer.gpu_health), null when the driver gives none); a value
      nvidia-smi does not report is null.
    - Null when O(gpu) is false or nvidia-smi is unavailable or failed; an empty list when it answered with no GPU.
  type: list
  elements: dict
  returned: always
  sample:
    - {index: 0, name: "NVIDIA H100 80GB HBM3", utilization_pct: 97, memory_used_mib: 70211,
       memory_total_mib: 81559, pci: "0000:19:00",
       sm_clock_mhz: 1980, sm_clock_max_mhz: 1980, power_draw_w: 629.3, power_limit_w: 700.0,
       throttle_reasons: [sw_power_cap]}
xid_events:
  description:
    - The Xid events written to the kernel log since RV(xid_since) (at most the newest 50), as
      M(remote_gpu.trainer.gpu_health) returns them, each with C(epoch), when it was written.
    - Empty without O(gpu), with O(kernel_log=none), without nvidia-smi, or when no job has a start time.
  type: list
  elements: dict
  returned: always
  sample:
    - {xid: 48, pci: "0000:07:00", severity: fatal, mnemonic: ROBUST_CHANNEL_GPU_ECC_DBE, epoch: 1783111869.5,
       line: "[240314.528856] NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable ..."}
xid_since:
  description: When the jobs started (the earliest C(launched_epoch) of their trusted C(job.meta.json)), the start
    of the Xid window; null when none is known or without O(gpu).
  type: float
  returned: always
  sample: 1783100000.25
oom_kills:
  description: The cgroup's memory event counters (C(oom_kill) included) and the file they came from.
  type: dict
  returned: always
  sample: {path: /sys/fs/cgroup/memory.events, counters: {oom: 1, oom_kill: 1}}
findings:
  description: Problems found, each with a level, a stable code, a message with the evidence and an action.
  type: list
  elements: dict
  returned: always
  sample:
    - level: FAIL
      code: job_gone_incomplete
      job: ablations
      message: "ablations is not running at 17/24 items (no final status, likely cause: unknown)"
      action: Read the tail of the log, classify the failure, then restart the remaining items.
    - level: FAIL
      code: sync_failed
      job: ablations
      item: "016"
      files: [best.pt, trainer-item.log]
      message: "ablations: item 016 trained (its command exited 0) but its files are not durable: best.pt,
        trainer-item.log. Reason: checked_sync failed: not enough room to copy 2 file(s) into ... inodes ..."
      action: Fix the cause on the durable tier (free inodes or space there), then relaunch; only the sync is retried.
    - level: WARN
      code: item_too_fast
      job: train
      items: ["000"]
      min_seconds: 30
      message: "train: 1 item(s) exited 0 sooner than launch_min_seconds (30 s), so they did not train: 000 (2 s)"
      action: Read each item's log; fix the cause, remove the item's status.json and relaunch.
    - level: WARN
      code: job_meta_untrusted
      job: ablations
      message: "ablations: job.meta.json is ignored: /root/.trainer/jobs/ablations/job.meta.json is writable by
        group or others (mode 0666)"
      action: Only the job's own files are trusted; make the job directory yours and writable by you alone.
"""

import json
import os
import re
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.remote_gpu.trainer.plugins.module_utils.command import C_LOCALE
from ansible_collections.remote_gpu.trainer.plugins.module_utils import cgroup, gpu_patrol, inode_check, job_layout
from ansible_collections.remote_gpu.trainer.plugins.module_utils import job_log, jobs, liveness, procfs
from ansible_collections.remote_gpu.trainer.plugins.module_utils.kernel_log import KernelLogError
from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import FAIL_ON_OPTION, finding, run_check, worst
from ansible_collections.remote_gpu.trainer.plugins.module_utils.job_status import StatusError, report_job, run_dir_of


# AnsibleModule's keyword arguments; the job_status action validates a task's arguments against them on the
# controller when it runs this module without AnsiballZ (plugin_utils/direct)
MODULE_OPTIONS = dict(
    argument_spec=dict(
        name=dict(type="str"),
        log_path=dict(type="path"),
        queue_length=dict(type="int", default=0),
        queue_record=dict(type="str"),
        jobs=dict(type="list", elements="dict", options=dict(
            name=dict(type="str", required=True),
            log_path=dict(type="path"),
            queue_length=dict(type="int", default=0),
        )),
        run_dir=dict(type="str", default=job_layout.DEFAULT_RUN_DIR),
        progress_regex=dict(type="str", default=job_log.DEFAULT_PROGRESS_RE),
        stale_minutes=dict(type="int", default=30),
        hung_minutes=dict(type="int", default=60),
        tail_lines=dict(type="int", default=20),
        scan_timeout=dict(type="int", default=30),
        paths=dict(type="list", elements="path", default=[]),
        warn_pct=dict(type="int", default=85),
        fail_pct=dict(type="int", default=95),
        gpu=dict(type="bool", default=False),
        timeout=dict(type="int", default=15),
        kernel_log=dict(type="str", default="auto"),
        cgroup_root=dict(type="path", default="/sys/fs/cgroup"),
        fail_on=FAIL_ON_OPTION,
    ),
    mutually_exclusive=[("name", "jobs")],
    supports_check_mode=True,
)


def build_module():
    return AnsibleModule(**MODULE_OPTIONS)


MAX_TAIL_LINES = 10000


def wanted_queue(params):
    """(the digest of O(queue_record) (job_layout.record_digest), the ids of its items), or None without one;
    StatusError when it is not a JSON object with an items list of valid ids, or is given without name."""
    if params["queue_record"] is None:
        return None
    if params["name"] is None:
        raise StatusError("queue_record applies to name only: give the job's name with it")
    try:
        record = json.loads(params["queue_record"])
    except ValueError as exc:
        raise StatusError("queue_record is not JSON (%s): give the launch_record filter's text" % exc)
    if not isinstance(record, dict):
        raise StatusError("queue_record must be a JSON object (the launch_record filter's text), got %s"
                          % type(record).__name__)
    items = record.get("items")
    if not isinstance(items, list) or not all(
            isinstance(entry, dict) and job_layout.valid_name(entry.get("item")) for entry in items):
        raise StatusError("queue_record must hold a list of items, each an object with a valid id (letters, digits, "
                          "'_', '.', '-'): give the launch_record filter's text")
    return job_layout.record_digest(record), [entry["item"] for entry in items]


def validate(params):
    """-> (job list, compiled progress regex); raises StatusError with what to fix."""
    if params["jobs"] is not None and (params["log_path"] is not None or params["queue_length"]):
        raise StatusError("log_path and queue_length apply to name only: with jobs, give them in each entry of jobs")
    if params["jobs"] is None and params["name"] is None:
        if params["log_path"] is not None:
            raise StatusError("log_path applies to name only: give name, or leave both out to report every job under "
                              "run_dir")
        if params["queue_length"] < 0:
            raise StatusError("queue_length must be 0 or more")
        job_list = None
    else:
        job_list = params["jobs"] if params["jobs"] is not None else [
            {"name": params["name"], "log_path": params["log_path"], "queue_length": params["queue_length"]}]
    if job_list is not None and not job_list:
        raise StatusError("jobs is empty: name at least one job")
    for job in job_list or []:
        problem = job_layout.name_problem(job["name"])
        if problem:
            raise StatusError(problem)
        if job["queue_length"] < 0:
            raise StatusError("queue_length of %s must be 0 or more" % job["name"])
        if job["log_path"] is not None and not os.path.isabs(job["log_path"]):
            raise StatusError("log_path %r of %s must be an absolute path" % (job["log_path"], job["name"]))
    for key in ("stale_minutes", "hung_minutes", "tail_lines", "timeout"):
        if params[key] < 0:
            raise StatusError("%s must be 0 or more, got %d" % (key, params[key]))
    if params["tail_lines"] > MAX_TAIL_LINES:
        raise StatusError("tail_lines must be at most %d, got %d" % (MAX_TAIL_LINES, params["tail_lines"]))
    kernel_log = params["kernel_log"]
    if kernel_log not in ("auto", "none") and not os.path.isabs(kernel_log or ""):
        raise StatusError("kernel_log must be auto, none or the absolute path of a kernel log file, got %r" % kernel_log)
    if params["scan_timeout"] < 1:
        raise StatusError("scan_timeout must be 1 or more seconds, got %d" % params["scan_timeout"])
    for index, path in enumerate(params["paths"]):
        if not path or not path.strip():
            raise StatusError("paths[%d] is empty: name a directory or remove the entry" % index)
    if not 0 < params["warn_pct"] <= params["fail_pct"] <= 100:
        raise StatusError("warn_pct (%d) and fail_pct (%d) must satisfy 0 < warn_pct <= fail_pct <= 100"
                          % (params["warn_pct"], params["fail_pct"]))
    try:
        regex = job_log.compile_progress(params["progress_regex"])
    except re.error as exc:
        raise StatusError("progress_regex is not a valid regular expression (%s): fix the pattern" % exc)
    return job_list, regex


def job_metas(params, job_list):
    """The trusted job.meta.json of each job ({} when it is missing or untrusted)."""
    run_dir = run_dir_of(params)
    return [job_layout.trusted_meta(job_layout.job_paths(run_dir, spec["name"]))[0] for spec in job_list]


def discovered_jobs(run_dir, queue_length=0):
    """(job specs, findings) of every job under ``run_dir``, each graded against ``queue_length`` unless launch
    recorded its share (queue.json)."""
    names, problem = job_layout.discover_jobs(run_dir)
    notes = []
    if problem:
        notes.append(finding("WARN", "jobs_unlisted", "Not every job under the run directory is reported: %s" % problem,
                             "Remove the job directories you no longer need from %s." % run_dir))
    if not names and not problem:
        notes.append(finding("INFO", "no_jobs", "No job under %s: nothing was launched there" % run_dir,
                             "Launch with the playbook remote_gpu.trainer.launch, or give the run directory the jobs "
                             "were started in."))
    return [{"name": name, "log_path": None, "queue_length": queue_length} for name in names], notes


def run(module):
    params = module.params
    job_list, regex = validate(params)
    wanted = wanted_queue(params)
    run_dir = run_dir_of(params)
    discovered = job_list is None
    findings = []
    if discovered:
        job_list, findings = discovered_jobs(run_dir, params["queue_length"])
    now = time.time()
    uptime = procfs.read_uptime()
    boot_epoch = now - uptime if uptime is not None else None
    oom_path, counters = cgroup.read_oom_kills(root=params["cgroup_root"])
    oom = {"path": oom_path, "counters": counters}
    # the GPUs first: a live job with a silent log is judged with their utilisation (liveness.silence_findings)
    gpus, gpu_notes, xid_events, since = None, [], [], None
    if params["gpu"]:
        gpus, gpu_notes, xid_events, since = gpu_patrol.probe(
            module, params["timeout"], params["kernel_log"], job_metas(params, job_list), boot_epoch, now)
    reports = []
    for spec in job_list:
        job, job_notes = report_job(module, spec, regex, oom, now, boot_epoch)
        if job["artifacts"] is not None:
            window = now - params["hung_minutes"] * 60
            launched = job["launched_epoch"]
            job["gpu_activity"] = liveness.gpu_activity(
                liveness.read_samples(job["job_dir"]), max(window, launched) if launched else window, gpus)
        findings.extend(job_notes)
        findings.extend(jobs.job_findings(job, params["stale_minutes"] * 60, params["hung_minutes"] * 60))
        if wanted is not None:
            job["queue_done"] = job_layout.queue_done(job, wanted[0])
            job["queue_pending"] = job_layout.pending_items(os.path.join(job["job_dir"], job_layout.ITEMS_DIR),
                                                            wanted[1])
        reports.append(job)
    usages, path_findings = inode_check.path_usages(params["paths"], params["warn_pct"], params["fail_pct"])
    # a full disk names its largest consumers (the HF cache, pip's cache, checkpoints, per-sample files)
    findings.extend(inode_check.with_hogs(path_findings))
    findings.extend(gpu_notes)
    return {"status": worst(findings), "jobs": reports, "alive_jobs": [job["name"] for job in reports if job["alive"]],
            "discovered": discovered, "paths": usages, "gpus": gpus, "oom_kills": oom,
            "findings": findings, "xid_events": xid_events, "xid_since": since}


def empty_result():
    return {"status": "FAIL", "jobs": [], "alive_jobs": [], "discovered": False, "paths": [], "gpus": None, "oom_kills": {"path": None, "counters": {}},
            "findings": [], "xid_events": [], "xid_since": None}


def main():
    module = build_module()
    module.run_command_environ_update = dict(C_LOCALE)
    run_check(module, lambda _params: run(module), (StatusError, KernelLogError), empty_result)


if __name__ == "__main__":
    main()
