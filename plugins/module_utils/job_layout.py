# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The on-box job protocol, one owner: the layout of a job directory, its meta and status files, and liveness.

Stdlib only (with atomic.py, procfs.py and safe_read.py): ``detached_job`` and ``job_status`` import it, and the job's own
scripts run it on the box with the profile's interpreter::

    PYTHONPATH=LIB PY -m ansible_collections.remote_gpu.trainer.plugins.module_utils.job_layout status FILE \\
        --exit-code N --started ISO [--item ID]

On-box layout (one directory per job; ``run_dir`` defaults to ``~/.trainer/jobs``)::

    <run_dir>/<name>/
        wrapper-<sha12>.sh   the script that runs the job; never rewritten (bash reads a running script by offset)
        job.pid              PID of the wrapper: the session and process-group leader of the job
        job.starttime        its start time, /proc/PID/stat field 22 (clock ticks since boot): defeats PID reuse
        job.meta.json        written at launch: detach method, wrapper, log path, launch time, cgroup oom_kill count
        lib/                 this file and its imports, for the wrapper to write status.json with
        job.log              default log: stdout and stderr of the wrapper and the command, appended
        status.json          final status, written when the command ends:
                             {"item": null, "exit_code": 0, "started": "<iso>", "finished": "<iso>"}
        queue.json           written by launch: this host's share of the queue (see read_queue), which patrol grades
                             the job against and teardown pulls by default
        items/<item>/status.json
                             one per finished queue item (for example ``items/007/status.json``), same keys with
                             ``item`` set; ``exit_code`` 0 means done. The job sees this directory as
                             ``$TRAINER_ITEMS_DIR`` (and ``$TRAINER_JOB_DIR``, ``$TRAINER_JOB_NAME``).
                             ``state`` (:func:`item_state`): ``done``, ``failed``, or ``sync_failed``: the command
                             succeeded but its files are not durable yet (``exit_code`` 1, ``command_exit_code``
                             0); a relaunch retries only the sync of such an item, never its command.

Every ``status.json`` is written by :func:`write_status` (atomically: a reader sees the old file or the new one).
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import re
import signal
import stat
import sys
import time

from ansible_collections.remote_gpu.trainer.plugins.module_utils import procfs, safe_read
from ansible_collections.remote_gpu.trainer.plugins.module_utils.atomic import write_atomic

# The one owner of the defaults of a job's name and of the run directory on the box. The modules take them from
# here; the playbooks and roles from trainer_job_name and trainer_run_dir (group_vars/all.yml), which a unit test
# holds equal to these.
DEFAULT_JOB_NAME = "train"
DEFAULT_RUN_DIR = "~/.trainer/jobs"
# At most this many job directories are read under one run directory (a bound on a directory the box can fill)
MAX_JOBS = 64

NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")
# tmux turns "." (and ":") into "_" in a session name, which would give "a.b" and "a_b" one session. "+" is never
# in a job name and tmux keeps it, so the session name encodes the job name reversibly (see tmux_session).
SESSION_PREFIX = "trainer-"

PID_FILE = "job.pid"
STARTTIME_FILE = "job.starttime"
META_FILE = "job.meta.json"
STATUS_FILE = "status.json"
LOG_FILE = "job.log"
ITEMS_DIR = "items"
QUEUE_FILE = "queue.json"
# the item gate's latest refusal (item_gate.py writes it, a passed gate removes it; job_status reads it)
GATE_FILE = "gate-refused.json"
LIB_DIR = "lib"

# What the job's scripts run to call this file on the box (with PYTHONPATH set to the lib directory).
CLI_MODULE = "ansible_collections.remote_gpu.trainer.plugins.module_utils.job_layout"


def valid_name(name):
    """Letters, digits, ``_``, ``.`` and ``-``, not ``.`` or ``..``, no leading ``-`` (it would read as an option)."""
    return (isinstance(name, str) and bool(NAME_RE.fullmatch(name)) and name not in (".", "..")
            and not name.startswith("-"))


def name_problem(name):
    """What is wrong with a job name, in words, or None when it is valid."""
    if valid_name(name):
        return None
    return ("job name %r may contain only letters, digits, '_', '.' and '-', must not start with '-' and must not be "
            "'.' or '..'" % (name,))


def job_paths(run_dir, name, log_path=None):
    """Every path of a job, from its run directory and name."""
    job_dir = os.path.join(run_dir, name)
    return {
        "job_dir": job_dir,
        "pid_file": os.path.join(job_dir, PID_FILE),
        "starttime_file": os.path.join(job_dir, STARTTIME_FILE),
        "meta_file": os.path.join(job_dir, META_FILE),
        "status_file": os.path.join(job_dir, STATUS_FILE),
        "items_dir": os.path.join(job_dir, ITEMS_DIR),
        "queue_file": os.path.join(job_dir, QUEUE_FILE),
        "lib_dir": os.path.join(job_dir, LIB_DIR),
        "log_path": log_path or os.path.join(job_dir, LOG_FILE),
    }


def discover_jobs(run_dir, limit=MAX_JOBS):
    """(names, problem): the jobs under ``run_dir`` (absolute), sorted: each entry that is a real directory (never
    followed through a symlink), has a valid job name and holds a file of the job protocol (its meta, PID, status,
    queue record or log). ``problem`` says why the list is incomplete (more than ``limit`` jobs, an unreadable
    run directory), else None. A run directory that does not exist holds no job."""
    try:
        entries = sorted(os.listdir(run_dir))
    except FileNotFoundError:
        return [], None
    except OSError as exc:
        return [], "%s cannot be listed (%s)" % (run_dir, exc.strerror or exc)
    names = []
    for name in entries:
        if not valid_name(name):
            continue
        job_dir = os.path.join(run_dir, name)
        try:
            if not stat.S_ISDIR(os.lstat(job_dir).st_mode):
                continue
        except OSError:
            continue
        if any(os.path.lexists(os.path.join(job_dir, marker))
               for marker in (META_FILE, PID_FILE, STATUS_FILE, QUEUE_FILE, LOG_FILE)):
            if len(names) == limit:
                return names, "%s holds more than %d jobs: only the first %d (by name) are read" % (
                    run_dir, limit, limit)
            names.append(name)
    return names, None


def item_status_path(items_dir, item):
    """``items/<item>/status.json``."""
    return os.path.join(items_dir, item, STATUS_FILE)


def tmux_session(name):
    """The job's tmux session: ``trainer-<name>`` with each ``.`` written as ``+``.

    tmux itself would turn ``.`` into ``_``, so ``a.b`` and ``a_b`` would share a session; ``+`` is never in a job
    name, so the mapping is one-to-one (and reversible: :func:`job_of_session`). Names without ``.`` are unchanged.
    """
    return SESSION_PREFIX + name.replace(".", "+")


def job_of_session(session):
    """The job name of a session made by :func:`tmux_session`, or None for any other session."""
    if not session.startswith(SESSION_PREFIX):
        return None
    name = session[len(SESSION_PREFIX):].replace("+", ".")
    return name if valid_name(name) else None


def now_iso():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


MAX_TEXT_BYTES = 16 << 20


def read_text(path, limit=None, follow=False):
    """A small file's text (at most ``limit`` or MAX_TEXT_BYTES bytes), or None when it cannot be read: through
    the collection's one bounded, non-blocking reader (safe_read.py: regular files only, a planted FIFO or device
    is never opened, so never blocks). A record (status.json, queue.json, code.json, the meta) is not read through
    a symlink: only the job's own writers make them, never as links. PID files are read with ``follow=True`` on
    purpose: signal_trust_problem then refuses a symlinked one by name."""
    return safe_read.read_text(path, limit or MAX_TEXT_BYTES, follow=follow)


def parse_int_file(text):
    """The first integer in a pid or starttime file, or None."""
    try:
        return int(text.split()[0])
    except (ValueError, IndexError, AttributeError):
        return None


def _json_dict(text):
    try:
        data = json.loads(text)
    except (ValueError, TypeError):
        return None
    return data if isinstance(data, dict) else None


def exit_code_of(data):
    """The ``exit_code`` of a status dict when it is an int (not a bool), else None."""
    code = (data or {}).get("exit_code")
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def parse_status(text):
    """A status.json -> dict with item, exit_code, started, finished; None when absent or not JSON."""
    data = _json_dict(text)
    return None if data is None else _status_fields(data)


def _status_fields(data):
    return {"item": data.get("item"), "exit_code": exit_code_of(data), "started": data.get("started"),
            "finished": data.get("finished")}


def read_record(path):
    """A JSON object file (an item's status.json with all its keys, code.json) as a dict, or None."""
    return _json_dict(read_text(path))


def is_done(status):
    """An item (or job) is done when its status says exit code 0 (an int, not a bool)."""
    return exit_code_of(status) == 0


# The states of a finished item (its status.json's ``state``, see item_state).
STATE_DONE = "done"
STATE_FAILED = "failed"
STATE_SYNC_FAILED = "sync_failed"


def item_state(status):
    """``done`` (exit code 0), ``sync_failed`` (the command succeeded, the sync of its files did not: retry only the
    sync), ``failed`` (anything else), or None without a status."""
    if status is None:
        return None
    if is_done(status):
        return STATE_DONE
    if status.get("state") == STATE_SYNC_FAILED and exit_code_of({"exit_code": status.get("command_exit_code")}) == 0:
        return STATE_SYNC_FAILED
    return STATE_FAILED


def _strings(value):
    return [str(entry) for entry in value] if isinstance(value, list) else []


def item_statuses(items_dir):
    """Parsed ``items/<item>/status.json`` files, sorted by item directory name: the keys of parse_status plus
    ``state`` (item_state), ``command_exit_code``, ``sync_error``, ``unsynced`` (files not durable), ``sync_dest``
    (the durable directory, None when the sync is off) and ``synced`` (how many verified copies it records)."""
    try:
        names = sorted(os.listdir(items_dir))
    except OSError:
        return []
    found = []
    for name in names:
        data = _json_dict(read_text(item_status_path(items_dir, name)))
        if data is None:
            continue
        status = _status_fields(data)
        if status["item"] is None:
            status["item"] = name
        synced = data.get("synced")
        status.update(state=item_state(data), sync_error=data.get("sync_error"),
                      unsynced=_strings(data.get("unsynced")),
                      sync_dest=data.get("sync_dest") if isinstance(data.get("sync_dest"), str) else None,
                      synced=len([entry for entry in synced if isinstance(entry, dict) and isinstance(
                          entry.get("sha256"), str)]) if isinstance(synced, list) else 0,
                      command_exit_code=exit_code_of({"exit_code": data.get("command_exit_code")}))
        found.append(status)
    return found


def read_queue(paths):
    """This host's share of the queue as launch recorded it in ``queue.json`` -> (record, problem).

    The record: ``{"version": 1, "job", "run_id", "host", "queue_length"`` (the whole queue), ``"items"``: the
    host's items in order, each ``{"item", "arg", "output_dir", "sync_dest"}``, ``"output_root", "durable_root",
    "best", "scratch"}``. (None, None) when there is no such file (a job that launch did not start); (None, why)
    when it is not a record launch wrote (then nothing is inferred from it).
    """
    text = read_text(paths["queue_file"], MAX_META_BYTES)
    if text is None:
        return None, (None if not os.path.lexists(paths["queue_file"]) else
                      "%s is not a readable regular file" % paths["queue_file"])
    data = _json_dict(text)
    items = (data or {}).get("items")
    if data is None or data.get("version") != 1 or not isinstance(items, list) or not items:
        return None, "%s is not a queue record of launch (version 1 with a non-empty items list)" % paths["queue_file"]
    for entry in items:
        if not isinstance(entry, dict) or not valid_name(entry.get("item")):
            return None, "%s lists an item that is not an object with a valid id: %r" % (paths["queue_file"], entry)
    ids = [entry["item"] for entry in items]
    if len(set(ids)) != len(ids):
        return None, "%s lists an item twice" % paths["queue_file"]
    return data, None


def record_digest(record):
    """The sha256 of a JSON record in one canonical form (keys sorted, no spaces, ASCII): the same record written
    with other whitespace or key order has the same digest (launch compares its queue record with the box's)."""
    text = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def pending_items(items_dir, ids):
    """The ids, in the given order, whose ``items/<id>/status.json`` does not say exit code 0 (is_done): what the
    queue runner would still run."""
    return [item for item in ids if not is_done(read_record(item_status_path(items_dir, item)))]


def queue_done(job, wanted, ids=None):
    """Whether ``job`` (one entry of job_status's ``jobs``) has nothing left to run under the queue record whose digest
    is ``wanted`` (record_digest): the job is not running, its queue record on the box (launch's queue.json) has that
    digest, and every item of it (``ids``, by default the record's ``queue_items``) finished with exit code 0
    (is_done, the queue runner's own test). False when anything is unknown or different: a job whose liveness is
    unknown, another record, an item that failed or never ran, a record with no item."""
    if not isinstance(job, dict) or job.get("alive") is not False or job.get("items_source") != "launch":
        return False
    if not wanted or job.get("queue_sha256") != wanted:
        return False
    done = {row.get("item") for row in job.get("items") or () if isinstance(row, dict) and is_done(row)}
    ids = job.get("queue_items") if ids is None else ids
    return bool(ids) and all(item in done for item in ids)


def status_record(exit_code, started, item=None, finished=None, **extra):
    """The status of a job or item: ``item``, ``exit_code``, ``started``, ``finished`` (now) and any ``extra``."""
    record = dict(extra)
    record.update(item=item, exit_code=exit_code, started=started, finished=finished or now_iso())
    return record


def write_status(path, record):
    """THE writer of every status.json (a job's and each item's): JSON, atomically, parents created."""
    write_atomic(path, json.dumps(record, indent=1, sort_keys=True) + "\n", mode=0o644, make_dirs=True)


def read_meta(paths):
    """``job.meta.json`` as a dict; {} when it is absent or not a JSON object."""
    return _json_dict(read_text(paths["meta_file"])) or {}


MAX_META_BYTES = 1 << 20


def resolve_run_dir(run_dir, error=ValueError):
    """The run directory with ``~`` expanded, made absolute; raises ``error`` when it is empty or relative (the
    module's working directory is no place for jobs) or holds a newline or NUL."""
    if not isinstance(run_dir, str) or not run_dir.strip():
        raise error("run_dir is empty: give the directory of the job directories (default %s)" % DEFAULT_RUN_DIR)
    if "\n" in run_dir or "\x00" in run_dir:
        raise error("run_dir %r holds a newline or NUL byte: give a plain directory path" % run_dir)
    expanded = os.path.expanduser(run_dir)
    if not os.path.isabs(expanded):
        raise error("run_dir %r is relative: give an absolute path or one that starts with ~" % run_dir)
    return os.path.normpath(expanded)


def trusted_meta(paths, uid=None):
    """(meta, problem) of ``job.meta.json``: the meta dict (``{}`` when absent or not a JSON object) and None, or
    ``({}, why)`` when the file cannot be trusted to be the one detached_job wrote.

    Trusted: a regular file (not a symlink), owned by ``uid`` (the effective user), not writable by group or others,
    in a job directory that is not writable by others either. detached_job writes it with mode 0600 in a 0700
    directory; anything else may be planted, and its ``log_path`` would name the file job_status tails.
    """
    uid = os.geteuid() if uid is None else uid
    try:
        dir_st = os.stat(paths["job_dir"])
        fd = safe_read.open_regular(paths["meta_file"])  # never through a link, never blocking, regular only
    except FileNotFoundError:
        return {}, None
    except safe_read.ReadRefused as exc:
        if exc.errno == errno.ELOOP:
            return {}, "%s is a symbolic link" % paths["meta_file"]
        if exc.kind:
            return {}, "%s is not a regular file (a %s)" % (paths["meta_file"], exc.kind)
        return {}, "%s cannot be read: %s" % (paths["meta_file"], exc.reason)
    except OSError as exc:
        return {}, "%s cannot be read: %s" % (paths["job_dir"], exc.strerror)
    try:
        st = os.fstat(fd)
        if st.st_uid != uid:
            return {}, "%s is owned by uid %d, not by uid %d" % (paths["meta_file"], st.st_uid, uid)
        if st.st_mode & 0o022:
            return {}, "%s is writable by group or others (mode %04o)" % (paths["meta_file"], st.st_mode & 0o7777)
        if dir_st.st_mode & 0o002 and not dir_st.st_mode & stat.S_ISVTX:
            return {}, "the job directory %s is writable by others (mode %04o)" % (paths["job_dir"],
                                                                                   dir_st.st_mode & 0o7777)
        data = os.read(fd, MAX_META_BYTES + 1)
    except OSError as exc:
        return {}, "%s cannot be read: %s" % (paths["meta_file"], exc.strerror)
    finally:
        os.close(fd)
    if len(data) > MAX_META_BYTES:
        return {}, "%s is larger than %d bytes" % (paths["meta_file"], MAX_META_BYTES)
    return _json_dict(data.decode("utf-8", "replace")) or {}, None


def signal_trust_problem(paths, uid=None):
    """Why the job's PID files cannot be trusted to name the process to signal, or None.

    Trusted: ``job.pid`` and ``job.starttime`` are regular files owned by ``uid`` (the effective user) and not
    writable by others, in a job directory not writable by others. Anyone who could plant them could otherwise
    make ``state=stopped`` signal the process group of their choice.
    """
    uid = os.geteuid() if uid is None else uid
    try:
        dir_st = os.stat(paths["job_dir"])
        if dir_st.st_mode & 0o002 and not dir_st.st_mode & stat.S_ISVTX:
            return "the job directory %s is writable by others (mode %04o)" % (paths["job_dir"],
                                                                               dir_st.st_mode & 0o7777)
        for key in ("pid_file", "starttime_file"):
            st = os.lstat(paths[key])
            if not stat.S_ISREG(st.st_mode):
                return "%s is not a regular file" % paths[key]
            if st.st_uid != uid:
                return "%s is owned by uid %d, not by uid %d" % (paths[key], st.st_uid, uid)
            if st.st_mode & 0o002:
                return "%s is writable by others (mode %04o)" % (paths[key], st.st_mode & 0o7777)
    except OSError as exc:
        return "%s cannot be checked: %s" % (getattr(exc, "filename", None) or paths["job_dir"], exc.strerror)
    return None


def write_meta(paths, meta):
    write_atomic(paths["meta_file"], json.dumps(meta, indent=1, sort_keys=True) + "\n", mode=0o600)


def tmux_has_session(run_command, tmux, name):
    """Whether the job's tmux session exists; ``run_command(argv) -> (rc, out, err)`` (AnsibleModule's)."""
    if not tmux:
        return False
    return run_command([tmux, "has-session", "-t", "=" + tmux_session(name)])[0] == 0


def liveness(paths, has_session):
    """(pid or None, alive) of a job: its PID with the recorded start time, else (before the wrapper has written
    its PID file) its tmux session. ``has_session`` is a callable that says whether the session exists."""
    pid = parse_int_file(read_text(paths["pid_file"], follow=True))
    if pid is not None:
        alive = procfs.is_same_process(pid, parse_int_file(read_text(paths["starttime_file"], follow=True)))
        return (pid if alive else None), alive
    return None, bool(has_session())


def _alive_in_group(pid, starttime, group):
    if procfs.is_same_process(pid, starttime):
        return True
    return bool(group and procfs.group_members(pid, procfs.all_stats()))


def _signal(pid, group, sig):
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


def stop_job(paths, pid, timeout, poll=0.1, kill_wait=10):
    """SIGTERM the job's process group (when ``pid`` leads one, else the PID alone), wait ``timeout`` seconds,
    then SIGKILL and wait up to ``kill_wait`` -> True when it is gone. Only the recorded PID's group is signalled,
    never processes found by name; PermissionError is the caller's to report."""
    starttime = parse_int_file(read_text(paths["starttime_file"], follow=True))
    stat = procfs.read_stat(pid)
    group = stat is not None and stat["pgrp"] == pid
    _signal(pid, group, signal.SIGTERM)
    deadline = time.time() + timeout
    while time.time() < deadline and _alive_in_group(pid, starttime, group):
        time.sleep(poll)
    if _alive_in_group(pid, starttime, group):
        _signal(pid, group, signal.SIGKILL)
        deadline = time.time() + kill_wait
        while time.time() < deadline and _alive_in_group(pid, starttime, group):
            time.sleep(poll)
    return not _alive_in_group(pid, starttime, group)


def cli(argv=None):
    parser = argparse.ArgumentParser(prog="job_layout", description="remote_gpu.trainer job files (on the box)")
    sub = parser.add_subparsers(dest="cmd")
    p_status = sub.add_parser("status", help="write a final status.json")
    p_status.add_argument("file")
    p_status.add_argument("--exit-code", type=int, required=True)
    p_status.add_argument("--started", default=None)
    p_status.add_argument("--item", default=None)
    args = parser.parse_args(argv)
    if args.cmd == "status":
        write_status(args.file, status_record(args.exit_code, args.started or None, item=args.item or None))
        return 0
    parser.print_usage(sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(cli())
