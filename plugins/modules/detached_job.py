#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: detached_job
short_description: Start, stop or restart a long job that survives the SSH connection, under tmux or setsid nohup
version_added: 0.1.0
author:
  - remote_gpu.trainer maintainers (@remote-gpu)
description:
  - Runs a training job detached from the SSH session, in a tmux session named C(trainer-<name>) (with C(.) written
    as C(+), see the notes), or under C(setsid nohup) when tmux is not installed.
  - >-
    The job runs through a wrapper script C(<run_dir>/<name>/wrapper-<sha>.sh). A changed command or environment
    gets a new wrapper file; a wrapper that may be running is never rewritten (bash reads a running script by
    byte offset). The wrapper writes its PID and C(/proc) start time to C(job.pid) and C(job.starttime), appends
    C(==== trainer: started <iso time> pid <pid> ====) to the log, sources O(env_files) in order, then the
    fragments of O(env_dir), exports
    C(PYTHONUNBUFFERED=1) and O(env), runs the command with stdout and stderr appended to the log, and writes
    C(status.json) (C(item), C(exit_code), C(started), C(finished)) when the command ends or is stopped, with the
    collection's C(job_layout) helper run by the interpreter that runs this module, from C(<run_dir>/<name>/lib/).
  - The job sees C(TRAINER_JOB_NAME), C(TRAINER_JOB_DIR) and C(TRAINER_ITEMS_DIR). A run wrapper that works through a
    queue writes one C($TRAINER_ITEMS_DIR/<item>/status.json) per finished item, with the keys C(item),
    C(exit_code), C(started) and C(finished), for M(remote_gpu.trainer.job_status) to count.
  - The job is identified by its PID file and the start time stored next to it (so a reused PID is not mistaken
    for the job), or by its tmux session before the PID file exists. Never by a name pattern.
  - Idempotent. A running job is reported and not started twice.
  - Refuses to start when the filesystem of the run directory or of the log is full or out of inodes.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
  - remote_gpu.trainer.job
attributes:
  check_mode:
    support: full
    details: Check mode reports whether the job would be started or stopped and changes nothing.
options:
  name:
    description:
      - Name of the job. Letters, digits, C(_), C(.) and C(-) only; not C(.) or C(..), and not starting with C(-).
      - Names the job directory C(<run_dir>/<name>) and the tmux session C(trainer-<name>), with each C(.) written
        as C(+) so that C(a.b) and C(a_b) stay two jobs.
    type: str
    required: true
  command:
    description:
      - What to run. A string is run by C(bash -c), so pipes, C(&&) and variables work.
      - A list is run as an argument vector, each element quoted; its first element (the program) must not be empty.
      - A NUL byte is refused.
      - Required when O(state) is V(started) or V(restarted); ignored with V(resumed).
    type: raw
  chdir:
    description: Directory to change into before running the command. It must exist and be an absolute path.
    type: path
  log_path:
    description:
      - The job's log, appended to. Defaults to C(<run_dir>/<name>/job.log).
      - M(remote_gpu.trainer.job_status) reads a log outside the job directory only when its task names it too
        (O(remote_gpu.trainer.job_status#module:log_path)); the path recorded in C(job.meta.json) is followed only
        inside the job directory.
      - An absolute path to a regular file, created when absent. Before anything is started the module checks that
        it can append to it, and fails naming the path when it cannot (a read-only or missing filesystem, a
        directory, a FIFO or a device, or one of the job's own files such as C(status.json)).
      - Should the log become unwritable between that check and the start, the wrapper ends the job with exit code
        74 and writes that to C(status.json), so the job is never reported as finished with exit code 0.
    type: path
  env_files:
    description:
      - Files sourced in this order before the command, for example a proxy hook or a conda activation script.
      - Absolute paths of readable regular files. A missing file, a directory, a FIFO or a device fails the task,
        naming it.
    type: list
    elements: path
    default: []
  env_dir:
    description:
      - A directory of job-environment fragments, such as the one the P(remote_gpu.trainer.job_env#role) role
        writes (C(~/.trainer/env.d)). Its regular files whose names match C([0-9][0-9]-*.sh) are sourced after
        O(env_files), in name order (bytewise, as in the C locale), as they are when the job starts.
      - Symbolic links, subdirectories and other files in it are left out, never followed. A missing directory
        holds no fragment; a path that is not a directory, a directory that cannot be listed, or more than 256
        fragments fails the task, naming it.
      - Ignored with O(state=stopped) and O(state=resumed) (the wrapper holds the files it sources).
    type: path
  env:
    description:
      - Extra environment variables exported before the command (after O(env_files) and O(env_dir)).
      - Keys are shell variable names (ASCII letters, digits and C(_), not starting with a digit); values are
        strings or numbers, never null, lists or mappings.
    type: dict
    default: {}
  detach:
    description:
      - How to detach. V(auto) uses tmux when it is installed, else V(nohup) (C(setsid -f nohup)).
    type: str
    choices: [auto, tmux, nohup]
    default: auto
  state:
    description:
      - V(started) starts the job unless it is running or has finished with exit code 0 (its C(status.json) says
        so), so re-running a launch playbook never repeats a finished run. A job that failed or vanished is started
        again.
      - V(stopped) sends SIGTERM to the job's process group, waits O(stop_timeout) seconds, then sends SIGKILL.
      - V(restarted) stops the job if it is running, then starts it.
      - V(resumed) starts the job's recorded wrapper again (the one C(job.meta.json) names; the meta must be the
        job's own, see the notes), detached as it was started (tmux, else nohup), unless the job runs or has
        finished with exit code 0. O(command), O(env_files), O(env_dir) and O(env) are not needed, the wrapper
        holds them.
        For a queue that launch started, the wrapper runs its queue runner, which skips the finished items and
        retries only the sync of an item that trained, so the queue resumes at its first unfinished item (what
        launch's onstart hook and the autopilot's heal do).
    type: str
    choices: [started, stopped, restarted, resumed]
    default: started
  stop_timeout:
    description: Seconds between SIGTERM and SIGKILL when stopping, from 0 to 86400.
    type: int
    default: 30
notes:
  - Only the recorded PID's process group is signalled, never processes found by name, and only when C(job.pid) and
    C(job.starttime) are regular files owned by the user running the module and not writable by others, in a job
    directory not writable by others; otherwise the task fails and nothing is signalled.
  - With systemd-logind C(KillUserProcesses=yes), processes of an SSH session are killed at logout even under
    tmux or setsid; enable lingering (C(loginctl enable-linger)) for the user on such hosts.
  - The disk check refuses a start at 99% or more bytes or inodes used (the C(bytes_high) and
    C(inodes_exhausted) codes of M(remote_gpu.trainer.inode_check)).
"""

EXAMPLES = r"""
- name: Start training detached, with the platform's proxy hook
  remote_gpu.trainer.detached_job:
    name: abl-lr3e4
    command: python -m src.train -c configs/lr3e4.yaml
    chdir: /root/project
    run_dir: /root/autodl-tmp/jobs
    env_files: [/etc/network_turbo]
    env:
      OMP_NUM_THREADS: "12"
  register: job

- name: Start a job that sources the job environment's fragments (~/.trainer/env.d/NN-*.sh) as they are now
  remote_gpu.trainer.detached_job:
    name: sweep-a
    command: [bash, /root/project/sweep.sh]
    env_dir: ~/.trainer/env.d

- name: Start the job again as it was started (after a reboot), unless it runs or finished
  remote_gpu.trainer.detached_job:
    name: abl-lr3e4
    run_dir: /root/autodl-tmp/jobs
    state: resumed

- name: Stop it (SIGTERM to its process group, SIGKILL after 60 s)
  remote_gpu.trainer.detached_job:
    name: abl-lr3e4
    run_dir: /root/autodl-tmp/jobs
    state: stopped
    stop_timeout: 60
"""

RETURN = r"""
pid:
  description: PID of the job's wrapper (its process-group leader); null when it is not running.
  type: int
  returned: always
  sample: 48213
running:
  description: Whether the job is running after this call.
  type: bool
  returned: always
  sample: true
started:
  description: Whether this call started the job (in check mode, whether it would).
  type: bool
  returned: always
  sample: true
detach:
  description: How the job is (or would be) detached, V(tmux) or V(nohup); null when not known.
  type: str
  returned: always
  sample: tmux
log_path:
  description: The job's log file.
  type: str
  returned: always
  sample: /root/.trainer/jobs/abl-lr3e4/job.log
run_dir:
  description: The run directory, with C(~) expanded.
  type: str
  returned: always
  sample: /root/.trainer/jobs
env_files:
  description:
    - The files the new wrapper sources, in order (O(env_files), then the fragments of O(env_dir)).
    - Empty when this call writes no wrapper (the job runs, has finished, is stopped or resumed).
  type: list
  elements: str
  returned: always
  sample: [/etc/network_turbo, /root/.trainer/env.d/10-network_turbo.sh]
wrapper:
  description: The wrapper script that runs (or would run) the job; null when unknown.
  type: str
  returned: always
  sample: /root/.trainer/jobs/abl-lr3e4/wrapper-3f2a9c1d0b7e.sh
msg:
  description: What was done, in words.
  type: str
  returned: always
  sample: started abl-lr3e4 under tmux, pid 48213
"""

import os
import shlex
import stat
import subprocess
import sys
import time

from ansible_collections.remote_gpu.trainer.plugins.module_utils.log_safe import LogSafeModule

from ansible_collections.remote_gpu.trainer.plugins.module_utils.command import C_LOCALE
from ansible_collections.remote_gpu.trainer.plugins.module_utils import atomic, cgroup, job_layout, procfs
from ansible_collections.remote_gpu.trainer.plugins.module_utils import job_wrapper
from ansible_collections.remote_gpu.trainer.plugins.module_utils.detached_job import (
    JobError, check_disks, check_log, env_dir_files, validate)

PID_WAIT_SECONDS = 10
POLL_SECONDS = 0.1


def io_error(exc, what):
    """An OSError while doing ``what`` -> JobError that names the file."""
    return JobError("cannot %s: %s: %s" % (what, getattr(exc, "filename", None) or "I/O error", exc.strerror or exc))


# AnsibleModule's keyword arguments; the detached_job action validates a task's arguments against them on the
# controller when it runs this module without AnsiballZ (plugin_utils/direct)
MODULE_OPTIONS = dict(
    argument_spec=dict(
        name=dict(type="str", required=True),
        command=dict(type="raw"),
        chdir=dict(type="path"),
        run_dir=dict(type="str", default=job_layout.DEFAULT_RUN_DIR),
        log_path=dict(type="path"),
        env_files=dict(type="list", elements="path", default=[]),
        env_dir=dict(type="path"),
        env=dict(type="dict", default={}),
        detach=dict(type="str", choices=["auto", "tmux", "nohup"], default="auto"),
        state=dict(type="str", choices=["started", "stopped", "restarted", "resumed"], default="started"),
        stop_timeout=dict(type="int", default=30),
    ),
    supports_check_mode=True,
)


def build_module():
    return LogSafeModule(**MODULE_OPTIONS)


def has_session(module, name):
    return job_layout.tmux_has_session(module.run_command, module.get_bin_path("tmux"), name)


def choose_detach(module):
    wanted = module.params["detach"]
    tmux = module.get_bin_path("tmux")
    if wanted == "tmux" and not tmux:
        raise JobError("detach=tmux but tmux is not installed: install it or use detach=nohup (or auto)")
    if wanted == "tmux" or (wanted == "auto" and tmux):
        return "tmux"
    for tool in ("setsid", "nohup", "bash"):
        if not module.get_bin_path(tool):
            raise JobError("detach=nohup needs %s, which is not on PATH" % tool)
    return "nohup"


def prepare(module, paths, env_files):
    """Check the log, then write the wrapper (a new versioned file, never over an existing one) that sources
    ``env_files`` and the library it calls -> its path.

    The wrapper writes the final status.json with job_layout.py, run by this module's interpreter from
    ``<job dir>/lib``.
    """
    params = module.params
    lib_dir = paths["lib_dir"]
    text = job_wrapper.wrapper_text(params["name"], paths, params["command"], params["chdir"], env_files,
                                    params["env"], python=sys.executable, lib_dir=lib_dir)
    wrapper = os.path.join(paths["job_dir"], job_wrapper.wrapper_name(text))
    if module.check_mode:
        check_log(paths, True)
    else:
        try:
            os.makedirs(paths["job_dir"], mode=0o700, exist_ok=True)
        except OSError as exc:
            raise io_error(exc, "create the job directory %s" % paths["job_dir"])
        check_log(paths, False)  # before anything that runs is written
        try:
            job_wrapper.install_lib(lib_dir)
            if not os.path.exists(wrapper):
                atomic.write_atomic(wrapper, text, 0o700)
        except OSError as exc:
            raise io_error(exc, "write the job's wrapper or library in %s" % paths["job_dir"])
    return wrapper


def launch(module, paths, wrapper, detach):
    """Start the wrapper detached; wait for its PID file -> pid."""
    name = module.params["name"]
    oom_path, oom = cgroup.read_oom_kills()
    meta = {"name": name, "detach": detach, "wrapper": wrapper, "log_path": paths["log_path"],
            "launched_epoch": time.time(), "oom_kill_at_launch": oom.get("oom_kill"), "oom_events_path": oom_path,
            # where the job writes its outputs when launch recorded none (job_status: a silent log's checkpoints)
            "chdir": module.params["chdir"]}
    try:
        for stale in (paths["pid_file"], paths["starttime_file"]):
            if os.path.exists(stale):
                os.unlink(stale)
        job_layout.write_meta(paths, meta)
    except OSError as exc:
        raise io_error(exc, "prepare the start of %s" % name)
    bash = module.get_bin_path("bash", required=True)
    if detach == "tmux":
        tmux = module.get_bin_path("tmux", required=True)
        # One shell-command string: tmux before 3.0 joins several arguments without quoting them.
        shell_command = "exec %s %s" % (shlex.quote(bash), shlex.quote(wrapper))
        rc, _out, err = module.run_command([tmux, "new-session", "-d", "-s", job_layout.tmux_session(name),
                                            "-c", paths["job_dir"], shell_command])
        if rc != 0:
            raise JobError("tmux new-session failed (rc %d): %s. If a stale session %s is left over, close it "
                           "(tmux kill-session -t %s) or use detach=nohup"
                           % (rc, err.strip(), job_layout.tmux_session(name), job_layout.tmux_session(name)))
    else:
        argv = [module.get_bin_path("setsid", required=True), "-f", module.get_bin_path("nohup", required=True),
                bash, wrapper]
        try:
            # not run_command: it has no timeout, and setsid -f must hand the job off within 30 s
            proc = subprocess.run(argv, cwd=paths["job_dir"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,  # pylint: disable=ansible-bad-function
                                  stderr=subprocess.PIPE, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise JobError("setsid -f nohup failed: %s" % exc)
        if proc.returncode != 0:
            raise JobError("setsid -f nohup failed (rc %d): %s" % (
                proc.returncode, proc.stderr.decode("utf-8", "replace").strip()))
    deadline = time.time() + PID_WAIT_SECONDS
    while time.time() < deadline:
        pid = job_layout.parse_int_file(job_layout.read_text(paths["pid_file"], follow=True))
        if pid is not None:
            return pid
        time.sleep(POLL_SECONDS)
    raise JobError("the job was launched under %s but wrote no PID file to %s within %d s; see %s"
                   % (detach, paths["pid_file"], PID_WAIT_SECONDS, paths["log_path"]))


def recorded_wrapper(module, paths):
    """(wrapper, detach) to resume a job with: the wrapper its own job.meta.json names (a regular file
    ``wrapper-*.sh`` in the job directory) and the way it was detached (tmux when it still is installed)."""
    meta, problem = job_layout.trusted_meta(paths)
    if problem:
        raise JobError("cannot resume %s: %s" % (module.params["name"], problem))
    wrapper = meta.get("wrapper")
    if not isinstance(wrapper, str) or os.path.dirname(wrapper) != paths["job_dir"] or not os.path.basename(
            wrapper).startswith("wrapper-"):
        raise JobError("cannot resume %s: its job.meta.json names no wrapper in %s; start it with a command "
                       "(state=started) or relaunch it" % (module.params["name"], paths["job_dir"]))
    try:
        mode = os.lstat(wrapper).st_mode
    except OSError as exc:
        raise JobError("cannot resume %s: its wrapper %s: %s" % (module.params["name"], wrapper, exc.strerror))
    if not stat.S_ISREG(mode):
        raise JobError("cannot resume %s: its wrapper %s is not a regular file" % (module.params["name"], wrapper))
    detach = meta.get("detach")
    if module.params["detach"] != "auto" or detach not in ("tmux", "nohup") or (
            detach == "tmux" and not module.get_bin_path("tmux")):
        detach = choose_detach(module)
    return wrapper, detach


def stop(module, paths, pid):
    """SIGTERM the recorded PID's process group, wait stop_timeout, then SIGKILL. Returns True when stopped.

    Only when the PID files are the user's own (job_layout.signal_trust_problem): a planted PID is never signalled.
    """
    problem = job_layout.signal_trust_problem(paths)
    if problem:
        raise JobError("refusing to signal pid %d: %s. Check who wrote it; stop the job by hand if it is yours"
                       % (pid, problem))
    try:
        return job_layout.stop_job(paths, pid, module.params["stop_timeout"])
    except PermissionError as exc:
        raise JobError("not allowed to signal pid %d: %s" % (pid, exc.strerror))


def stop_tmux_session(module):
    if has_session(module, module.params["name"]):
        module.run_command([module.get_bin_path("tmux"), "kill-session", "-t",
                            "=" + job_layout.tmux_session(module.params["name"])])


def run(module, result):
    params = module.params
    validate(module)
    run_dir = job_layout.resolve_run_dir(params["run_dir"], JobError)
    paths = job_layout.job_paths(run_dir, params["name"], params["log_path"])
    result.update(run_dir=run_dir, log_path=paths["log_path"])
    meta = job_layout.read_meta(paths)
    result["detach"] = meta.get("detach")
    result["wrapper"] = meta.get("wrapper")
    # the PID with its start time; before the wrapper has written its PID file, its tmux session
    pid, running = job_layout.liveness(paths, lambda: has_session(module, params["name"]))
    result.update(pid=pid, running=running)
    state = params["state"]
    name = params["name"]

    if state in ("stopped", "restarted") and running:
        result["changed"] = True
        if module.check_mode:
            result["msg"] = "would stop %s (pid %s)" % (name, pid)
        else:
            if pid is not None and not stop(module, paths, pid):
                raise JobError("job %s (pid %s) survived SIGTERM and SIGKILL" % (name, pid))
            stop_tmux_session(module)
            result.update(pid=None, running=False, msg="stopped %s (pid %s)" % (name, pid))
        running = False
    if state == "stopped":
        if not result["changed"]:
            result["msg"] = "%s is not running" % name
        return
    if running:
        result["msg"] = "%s is already running (pid %s)" % (name, pid)
        return
    final = job_layout.parse_status(job_layout.read_text(paths["status_file"]))
    if state in ("started", "resumed") and final is not None and final["exit_code"] == 0:
        result["msg"] = ("%s already finished with exit code 0 at %s; use state=restarted to run it again"
                         % (name, final["finished"]))
        return

    if state == "resumed":
        wrapper, detach = recorded_wrapper(module, paths)
        check_disks(paths)
        check_log(paths, module.check_mode)
        result.update(wrapper=wrapper, detach=detach, changed=True, started=True)
        if module.check_mode:
            result["msg"] = "would resume %s under %s (%s)" % (name, detach, wrapper)
            return
        new_pid = launch(module, paths, wrapper, detach)
        result.update(pid=new_pid, running=True, msg="resumed %s under %s, pid %s" % (name, detach, new_pid))
        return
    detach = choose_detach(module)
    check_disks(paths)
    env_files = params["env_files"] + env_dir_files(params["env_dir"])
    result["wrapper"] = prepare(module, paths, env_files)
    result["env_files"] = env_files
    result.update(detach=detach, changed=True, started=True)
    if module.check_mode:
        result["msg"] = "would start %s under %s" % (name, detach)
        return
    new_pid = launch(module, paths, result["wrapper"], detach)
    starttime = job_layout.parse_int_file(job_layout.read_text(paths["starttime_file"], follow=True))
    result["running"] = procfs.is_same_process(new_pid, starttime)
    result["pid"] = new_pid if result["running"] else None
    ended = "" if result["running"] else " (it has already ended; see %s)" % paths["status_file"]
    result["msg"] = "started %s under %s, pid %s%s" % (name, detach, new_pid, ended)


def main():
    module = build_module()
    module.run_command_environ_update = dict(C_LOCALE)
    result = dict(changed=False, pid=None, running=False, started=False, detach=None,
                  log_path=module.params["log_path"], run_dir=module.params["run_dir"], wrapper=None, env_files=[],
                  msg="")
    try:
        run(module, result)
    except JobError as exc:
        result["msg"] = str(exc)
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
