#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vram_reaper
short_description: Find, and with force kill, processes that hold NVIDIA devices but are invisible to nvidia-smi
version_added: 0.1.0
author:
  - remote_gpu.trainer maintainers (@remote-gpu)
description:
  - After a crashed distributed run, processes can keep CUDA contexts (and VRAM) while C(nvidia-smi) does not list
    them, so the next job runs out of memory on an "empty" GPU.
  - Finds every process with a device matching O(device_glob) open, by reading C(/proc/*/fd) itself (no C(fuser)
    or C(lsof)), and subtracts the PIDs that C(nvidia-smi --query-compute-apps) lists.
  - A holder is a candidate only when it is not listed, is at least O(min_age) seconds old, and is not PID 1, this
    module or one of its parents, in O(exclude_pids), owned by one of O(exclude_users), one of O(exclude_commands),
    or inside the process tree of a live job (see the next point) or of O(protect_pids) or O(protect_pid_files).
  - The process tree of a live job is never a candidate, by default. That is every descendant (and every ancestor)
    of a process nvidia-smi lists, and every descendant of a job under O(run_dir) (its C(job.pid)). DataLoader,
    C(torch.multiprocessing) and C(torchrun) workers hold C(/dev/nvidia*) through descriptors inherited at fork and
    nvidia-smi does not list them; killing one crashes the job.
  - The classic zombie stays a candidate. When a parent dies its children are re-parented (to PID 1 or a
    subreaper) and leave the job's tree, so the orphaned workers of a crashed run can be reaped.
  - Idle gate. Before a kill, the utilisation of the candidate's GPUs is sampled for O(idle_sample) seconds. A
    candidate whose GPU peaked above O(idle_util_max) percent, or whose GPU gave no value (MIG), is not killed.
  - Inside a container nvidia-smi lists host PIDs, or none, so "not listed" proves nothing there. When a PID it
    lists does not hold a device in this PID namespace, when it lists nothing inside what looks like a container,
    or when it cannot be run, the result is C(unverified=true) and nothing is killed, even with O(force), unless
    O(allow_unverified) is also true.
  - Dry run unless O(force=true). Check mode never kills; with O(force) it reports C(changed) when it would kill.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
attributes:
  check_mode:
    support: full
    details: Check mode reports the candidates and kills nothing.
options:
  force:
    description: Kill the candidates. Without it the module only reports them.
    type: bool
    default: false
  allow_unverified:
    description:
      - Also kill when visibility cannot be verified (see the description). Only for a box where you know that
        no live job holds the GPU outside the protected trees.
    type: bool
    default: false
  min_age:
    description: Seconds a holder must have lived to be a candidate; a new process may be warming up its context.
    type: int
    default: 120
  exclude_pids:
    description: PIDs that are never candidates.
    type: list
    elements: int
    default: []
  exclude_users:
    description: Users whose processes are never candidates.
    type: list
    elements: str
    default: []
  exclude_commands:
    description:
      - Command names (C(comm) or the base name of C(argv[0])) that are never candidates.
      - The default lists daemons that hold the devices by design and are never compute apps.
    type: list
    elements: str
    default: [nvidia-persistenced, nv-hostengine, nvidia-smi, dcgm-exporter, Xorg, Xwayland, gnome-shell]
  protect_pids:
    description: PIDs of running jobs; they and every process below them are never candidates.
    type: list
    elements: int
    default: []
  protect_pid_files:
    description:
      - PID files of running jobs, for example C(<run_dir>/<name>/job.pid) of M(remote_gpu.trainer.detached_job).
        They and every process below them are never candidates. A missing or unreadable file fails the task.
    type: list
    elements: path
    default: []
  run_dir:
    description:
      - The run directory of M(remote_gpu.trainer.detached_job) (C(launch_run_dir) of launch). Every live job
        there (C(<run_dir>/<name>/job.pid) whose process is alive with its recorded start time) and its whole
        process tree are never candidates. A missing directory protects nothing.
    type: str
    default: ~/.trainer/jobs
  idle_util_max:
    description:
      - The idle gate. A candidate is killed only when every GPU it may use stayed at or below this utilisation
        (percent) during the sample. The default is the seed's C(IDLE_UTIL_PCT); a training job pegs it far higher.
      - A candidate's GPUs are those of its C(/dev/nvidiaN) nodes (matched through
        C(/proc/driver/nvidia/gpus/*/information)); all GPUs when that cannot be matched.
      - V(100) turns the gate off (nothing is sampled), for example under MIG, where utilisation has no value.
    type: int
    default: 5
  idle_sample:
    description: Seconds the idle gate samples utilisation, one reading per second (V(0) takes one reading).
    type: int
    default: 2
  signal:
    description: The first signal to send. V(TERM) is followed by C(KILL) after O(kill_grace) seconds.
    type: str
    choices: [TERM, KILL]
    default: TERM
  kill_grace:
    description: Seconds between SIGTERM and SIGKILL.
    type: int
    default: 10
  device_glob:
    description:
      - Glob of the device paths to look for in C(/proc/*/fd). An absolute pattern; an empty one is refused.
      - It only narrows the search. An open file counts only when it is a character device of NVIDIA's driver (see
        the notes), so a regular file, a FIFO, C(/dev/null) or a tty never makes a process a holder, whatever the
        glob.
    type: str
    default: /dev/nvidia*
  timeout:
    description: Seconds nvidia-smi may run.
    type: int
    default: 15
notes:
  - "Which open files count: the descriptor itself is examined (C(stat) of C(/proc/PID/fd/N)), not the path it was
    opened by. It must be a character device. When NVIDIA's driver is loaded, its major number must be one the
    driver registered in C(/proc/devices) (C(nvidia), C(nvidia-uvm), C(nvidia-caps), C(nvidia-nvlink), ... all start
    with C(nvidia)). When no NVIDIA driver is registered there, no process can hold VRAM; a character device then
    counts only with the driver's node name C(/dev/nvidia*) (an emulated GPU such as the lab's, whose nodes are
    clones of C(/dev/null)). RV(device_rule) says which rule was applied."
  - Run as root to see the open files of other users' processes; PIDs whose files cannot be read are listed in
    RV(unreadable_pids).
"""

EXAMPLES = r"""
- name: List zombie VRAM holders, protecting the running job
  remote_gpu.trainer.vram_reaper:
    protect_pid_files: [/root/autodl-tmp/jobs/ablations/job.pid]
  register: reaper

- name: Kill them
  remote_gpu.trainer.vram_reaper:
    protect_pid_files: [/root/autodl-tmp/jobs/ablations/job.pid]
    force: true
"""

RETURN = r"""
candidates:
  description: Holders that are not listed by nvidia-smi, old enough, and not excluded or protected.
  type: list
  elements: dict
  returned: always
  sample:
    - {pid: 4123, user: root, cmdline: "python -m torch.distributed.run ...", age: 5400, reason: invisible_to_nvidia_smi,
       devices: [/dev/nvidia0, /dev/nvidiactl, /dev/nvidia-uvm], gpu_peak_pct: 0}
passed_over:
  description: The other holders, each with the reason it is not a candidate (C(visible), C(visible_tree),
    C(job_tree), C(young), C(protected), C(excluded_pid), C(excluded_user), C(excluded_command), C(pid_1), C(self),
    and, from the idle gate, C(gpu_busy) or C(gpu_util_unknown) with C(gpu_peak_pct)).
  type: list
  elements: dict
  returned: always
  sample:
    - {pid: 3877, user: root, cmdline: "python train.py", age: 7200, reason: job_tree, devices: [/dev/nvidia0],
       gpu_peak_pct: null}
gpu_utilization:
  description: The idle gate's sample, the peak utilisation of each GPU (C(peak_pct) null when it had no value);
    empty when nothing was sampled (no candidate, or O(idle_util_max=100)).
  type: list
  elements: dict
  returned: always
  sample: [{index: 0, bus_id: "0000:83:00.0", peak_pct: 0}]
job_pids:
  description: The live jobs found under O(run_dir), whose process trees are protected.
  type: list
  elements: int
  returned: always
  sample: [3870]
killed:
  description: PIDs that were signalled and are gone.
  type: list
  elements: int
  returned: always
  sample: [4123]
kill_errors:
  description: Candidates that could not be killed, with the reason.
  type: list
  elements: dict
  returned: always
  sample: []
unverified:
  description: True when nvidia-smi's view cannot be matched to this PID namespace; nothing is killed then.
  type: bool
  returned: always
  sample: false
unverified_reason:
  description: Why visibility could not be verified; null when it could.
  type: str
  returned: always
  sample: null
visible_pids:
  description: PIDs nvidia-smi lists as compute apps.
  type: list
  elements: int
  returned: always
  sample: [3877]
unreadable_pids:
  description: PIDs whose open files could not be read (other users' processes when not root).
  type: list
  elements: int
  returned: always
  sample: []
device_rule:
  description: Which open files were counted as GPU devices (see the notes).
  type: str
  returned: always
  sample: character devices of the NVIDIA driver (major 195, 508) matching /dev/nvidia*
msg:
  description: What was found and done, in words.
  type: str
  returned: always
  sample: 1 candidate(s); dry run, nothing killed (force is false)
"""

import os
import signal as signals
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.remote_gpu.trainer.plugins.module_utils import gpu_query, job_layout, procfs
from ansible_collections.remote_gpu.trainer.plugins.module_utils import vram_reaper as reaper
from ansible_collections.remote_gpu.trainer.plugins.module_utils.command import C_LOCALE

ARGUMENT_SPEC = dict(
    force=dict(type="bool", default=False),
    allow_unverified=dict(type="bool", default=False),
    min_age=dict(type="int", default=120),
    exclude_pids=dict(type="list", elements="int", default=[]),
    exclude_users=dict(type="list", elements="str", default=[]),
    exclude_commands=dict(type="list", elements="str", default=list(reaper.DEFAULT_EXCLUDE_COMMANDS)),
    protect_pids=dict(type="list", elements="int", default=[]),
    protect_pid_files=dict(type="list", elements="path", default=[]),
    run_dir=dict(type="str", default=job_layout.DEFAULT_RUN_DIR),
    idle_util_max=dict(type="int", default=reaper.DEFAULT_IDLE_UTIL_MAX),
    idle_sample=dict(type="int", default=2),
    signal=dict(type="str", choices=["TERM", "KILL"], default="TERM"),
    kill_grace=dict(type="int", default=10),
    device_glob=dict(type="str", default="/dev/nvidia*"),
    timeout=dict(type="int", default=15),
)


class ReaperError(Exception):
    """Bad arguments or an unreadable PID file, reported with fail_json by main()."""


def build_module():
    return AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)


def protected_roots(params):
    roots = set(params["protect_pids"])
    for path in params["protect_pid_files"]:
        pid = job_layout.parse_int_file(job_layout.read_text(path, follow=True))
        if pid is None:
            raise ReaperError("protect_pid_files: %s is missing or holds no PID; fix the path or drop it" % path)
        roots.add(pid)
    return roots


def guarded_pids(stats, roots, jobs, visible):
    """{pid: reason} of processes that are never candidates: live jobs' trees, this module and PID 1."""
    guarded = reaper.tree_guard(stats, visible, jobs, roots)
    me = os.getpid()
    for pid in [me] + procfs.ancestors(me, stats):
        guarded[pid] = "self"
    guarded[1] = "pid_1"
    return guarded


def ask_nvidia_smi(module, timeout):
    """(listed rows, error text or None)."""
    try:
        return gpu_query.compute_apps(module.get_bin_path("nvidia-smi"), timeout), None
    except gpu_query.SmiError as exc:
        return [], str(exc)


def sample_utilization(module, seconds, timeout):
    """The idle gate's readings, one per second over ``seconds`` -> (peaks, error text or None)."""
    readings = []
    try:
        for second in range(seconds + 1):
            if second:
                time.sleep(1)
            readings.append(gpu_query.query_gpus(module.get_bin_path("nvidia-smi"), reaper.UTILIZATION_FIELDS,
                                                 timeout))
    except gpu_query.SmiError as exc:
        return [], "GPU utilisation could not be sampled (%s)" % exc
    return reaper.peak_utilization(readings), None


def describe(holders, stats):
    uptime = procfs.read_uptime()
    hz = procfs.clock_ticks()
    info = {}
    for pid, devices in holders.items():
        stat = stats.get(pid) or procfs.read_stat(pid)
        if stat is None:
            continue  # gone meanwhile
        info[pid] = {
            "user": procfs.user_name(procfs.read_uid(pid)),
            "comm": stat["comm"],
            "cmdline": procfs.read_cmdline(pid),
            "age": procfs.age_seconds(stat["starttime"], uptime, hz),
            "starttime": stat["starttime"],
            "devices": devices,
        }
    return info


def check_params(params):
    for key in ("min_age", "kill_grace", "timeout", "idle_sample"):
        if params[key] < 0:
            raise ReaperError("%s must be 0 or more, got %d" % (key, params[key]))
    if not 0 <= params["idle_util_max"] <= 100:
        raise ReaperError("idle_util_max must be a percentage from 0 to 100 (100 turns the idle gate off), got %d"
                          % params["idle_util_max"])
    pattern = params["device_glob"]
    if not pattern or not pattern.strip():
        raise ReaperError("device_glob is empty: give the glob of NVIDIA device nodes, for example /dev/nvidia*")
    if not pattern.startswith("/"):
        raise ReaperError("device_glob %r is not absolute: the open files in /proc/*/fd are absolute paths; give "
                          "a glob such as /dev/nvidia*" % pattern)
    return job_layout.resolve_run_dir(params["run_dir"], error=ReaperError)


def idle_gate(module, result, candidates):
    """The candidates that pass the idle gate; the others join passed_over -> (to kill, note for the message)."""
    params = module.params
    if not candidates or params["idle_util_max"] >= 100:
        return candidates, ""
    gpus, error = sample_utilization(module, params["idle_sample"], params["timeout"])
    result["gpu_utilization"] = gpus
    kill, held = reaper.idle_gate(candidates, gpus, reaper.driver_minors(), params["idle_util_max"])
    result["passed_over"] = sorted(result["passed_over"] + held, key=lambda row: row["pid"])
    busy = sum(1 for row in held if row["reason"] == "gpu_busy")
    notes = ["%d on a GPU above %d%% utilisation" % (busy, params["idle_util_max"])] if busy else []
    if len(held) > busy:
        notes.append("%d on a GPU with no utilisation value (%s; idle_util_max=100 turns the gate off)"
                     % (len(held) - busy, error or "nvidia-smi printed none"))
    return kill, "".join("; held back by the idle gate: " + note for note in notes)


def run(module, result):
    params = module.params
    run_dir = check_params(params)
    pattern = params["device_glob"]
    roots = protected_roots(params)
    majors = reaper.nvidia_majors()
    if majors:
        result["device_rule"] = "character devices of the NVIDIA driver (major %s) matching %s" % (
            ", ".join(str(major) for major in sorted(majors)), pattern)
    else:
        result["device_rule"] = ("character devices named %s matching %s (no NVIDIA driver in /proc/devices: an "
                                 "emulated GPU)" % (reaper.NVIDIA_NODES, pattern))
    holders, unreadable = procfs.holders(pattern, accept=reaper.device_filter(majors))
    result["unreadable_pids"] = unreadable
    listed, smi_error = ask_nvidia_smi(module, params["timeout"])
    visible = sorted({row["pid"] for row in listed})
    result["visible_pids"] = visible
    unverified, reason = reaper.visibility(set(visible), set(holders), smi_error, reaper.container_hints())
    result.update(unverified=unverified, unverified_reason=reason)
    stats = procfs.all_stats()
    result["job_pids"] = reaper.job_roots(run_dir)
    info = describe(holders, stats)
    candidates, passed_over = reaper.classify_holders(
        info, set(visible), guarded_pids(stats, roots, result["job_pids"], visible), set(params["exclude_pids"]),
        set(params["exclude_users"]), set(params["exclude_commands"]), params["min_age"])
    for row in candidates + passed_over:
        row.setdefault("gpu_peak_pct", None)
    result["passed_over"] = passed_over
    candidates, gate_note = idle_gate(module, result, candidates)
    result["candidates"] = candidates
    summary = "%d device holder(s), %d candidate(s)%s" % (len(info), len(candidates), gate_note)
    if unverified:
        summary += "; visibility unverified: %s" % reason
    if not candidates:
        result["msg"] = summary + "; nothing to kill"
        return
    if not params["force"]:
        result["msg"] = summary + "; dry run, nothing killed (force is false)"
        return
    if unverified and not params["allow_unverified"]:
        result["msg"] = summary + "; nothing killed (set allow_unverified only if no live job can be among them)"
        return
    if module.check_mode:
        result["changed"] = True
        result["msg"] = summary + "; check mode, would kill %s" % ", ".join(str(row["pid"]) for row in candidates)
        return
    first = signals.SIGKILL if params["signal"] == "KILL" else signals.SIGTERM
    result["killed"], result["kill_errors"] = reaper.kill_candidates(candidates, info, first, params["kill_grace"])
    result["changed"] = bool(result["killed"])
    result["msg"] = summary + "; killed %s" % (", ".join(str(pid) for pid in result["killed"]) or "none")


def main():
    module = build_module()
    module.run_command_environ_update = dict(C_LOCALE)
    result = dict(changed=False, candidates=[], passed_over=[], killed=[], kill_errors=[], unverified=False,
                  unverified_reason=None, visible_pids=[], unreadable_pids=[], device_rule=None, gpu_utilization=[],
                  job_pids=[], msg="")
    try:
        run(module, result)
    except ReaperError as exc:
        result["msg"] = str(exc)
        module.fail_json(**result)
    if result["kill_errors"]:
        result["msg"] += "; could not kill %d candidate(s)" % len(result["kill_errors"])
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
