# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The checks of detached_job before it writes or starts anything: its arguments (:func:`validate`), its log
(:func:`check_log`) and the free room on its filesystems (:func:`check_disks`). Every problem is a
:class:`JobError` whose message says what is wrong and what to do.
Standard library only (with job_layout.py, inode_check.py and fsbudget.py), Python 3.8+.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat

from ansible_collections.remote_gpu.trainer.plugins.module_utils import inode_check, job_layout
from ansible_collections.remote_gpu.trainer.plugins.module_utils.fsbudget import nearest_existing


class JobError(Exception):
    """A problem reported with fail_json: the message says what is wrong and what to do."""


ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# the job-environment fragments of an env_dir (the job_env role's NN-name.sh files), as ansible.builtin.find's
# patterns would match them
FRAGMENT_PATTERN = "[0-9][0-9]-*.sh"
MAX_FRAGMENTS = 256
MAX_STOP_TIMEOUT = 86400
DISK_REFUSE_PCT = 99


def no_nul(value, what):
    if "\x00" in value:
        raise JobError("%s holds a NUL byte, which no shell command or path can carry: remove it" % what)


def absolute(path, what):
    no_nul(path, what)
    if not os.path.isabs(path):
        raise JobError("%s %r must be an absolute path (or start with ~): the job runs in its job directory, not in "
                       "the directory this task runs in" % (what, path))


def validate_command(command, state):
    if isinstance(command, list):
        if not command or not all(isinstance(arg, (str, int, float)) and not isinstance(arg, bool)
                                  for arg in command):
            raise JobError("command must be a non-empty string or a list of strings")
        if not str(command[0]).strip():
            raise JobError("the first element of the command list (the program) is empty: name the program to run")
        for arg in command:
            no_nul(str(arg), "command")
    elif not isinstance(command, str) or not command.strip():
        raise JobError("command is required with state=%s: a string (run by bash -c) or a list" % state)
    else:
        no_nul(command, "command")


def validate_env_file(env_file):
    absolute(env_file, "env file")
    try:
        mode = os.stat(env_file).st_mode
    except FileNotFoundError:
        raise JobError("env file %s does not exist: create it or remove it from env_files" % env_file)
    except OSError as exc:
        raise JobError("env file %s cannot be read: %s" % (env_file, exc.strerror))
    if stat.S_ISDIR(mode):
        raise JobError("env file %s is a directory: name the file to source, or remove it from env_files" % env_file)
    if not stat.S_ISREG(mode):
        raise JobError("env file %s is not a regular file (a FIFO or device would be read forever or once): name a "
                       "file, or remove it from env_files" % env_file)
    if not os.access(env_file, os.R_OK):
        raise JobError("env file %s is not readable by this user: fix its permissions" % env_file)


def env_dir_files(env_dir):
    """The job-environment fragments in the directory ``env_dir``, in name order (bytewise, as in the C locale): its
    regular files whose names match FRAGMENT_PATTERN. Links and other types are left out (not followed), as are
    subdirectories; a missing ``env_dir`` holds none. JobError when it is not a directory, cannot be listed, holds
    more than MAX_FRAGMENTS fragments, or a fragment is not readable."""
    if env_dir is None:
        return []
    absolute(env_dir, "env_dir")
    names = []
    try:
        with os.scandir(env_dir) as entries:
            for entry in entries:
                if fnmatch.fnmatchcase(entry.name, FRAGMENT_PATTERN) and entry.is_file(follow_symlinks=False):
                    names.append(entry.name)
                    if len(names) > MAX_FRAGMENTS:
                        raise JobError("env_dir %s holds more than %d fragments (%s): remove the stale ones"
                                       % (env_dir, MAX_FRAGMENTS, FRAGMENT_PATTERN))
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        raise JobError("env_dir %s is not a directory: name the directory of the fragments, or omit env_dir" % env_dir)
    except OSError as exc:
        raise JobError("env_dir %s cannot be listed: %s: fix its permissions" % (env_dir, exc.strerror))
    files = [os.path.join(env_dir, name) for name in sorted(names)]
    for env_file in files:
        validate_env_file(env_file)
    return files


def validate(module):
    params = module.params
    problem = job_layout.name_problem(params["name"])
    if problem:
        raise JobError(problem)
    if not 0 <= params["stop_timeout"] <= MAX_STOP_TIMEOUT:
        raise JobError("stop_timeout must be 0 to %d seconds, got %d" % (MAX_STOP_TIMEOUT, params["stop_timeout"]))
    if params["log_path"] is not None:
        if not params["log_path"].strip():
            raise JobError("log_path is empty: omit it for <run_dir>/<name>/job.log, or give a file path")
        absolute(params["log_path"], "log_path")
    if params["state"] in ("stopped", "resumed"):
        return
    validate_command(params["command"], params["state"])
    for env_file in params["env_files"]:
        validate_env_file(env_file)
    if params["chdir"] is not None:
        absolute(params["chdir"], "chdir")
        if not os.path.isdir(params["chdir"]):
            raise JobError("chdir %s is not a directory" % params["chdir"])
    for key, value in params["env"].items():
        if not isinstance(key, str) or not ENV_KEY_RE.fullmatch(key):
            raise JobError("env key %r is not a valid shell variable name (letters, digits and '_', not starting "
                           "with a digit)" % key)
        if value is None or isinstance(value, (dict, list)):
            raise JobError("env value of %s must be a string or a number, got %s" % (
                key, "null" if value is None else type(value).__name__))
        no_nul(str(value), "env value of %s" % key)


def check_log(paths, check_mode):
    """The log must be a regular file this user can append to (created when absent), and not one of the job's own
    files; raises JobError naming the path. In check mode nothing is created: permission is asked with access()."""
    log = os.path.normpath(paths["log_path"])
    own = [paths[key] for key in ("pid_file", "starttime_file", "meta_file", "status_file")]
    if log in own or log == paths["job_dir"] or any(
            log.startswith(paths[key] + os.sep) or log == paths[key] for key in ("lib_dir", "items_dir")) or (
            os.path.dirname(log) == paths["job_dir"] and os.path.basename(log).startswith("wrapper-")):
        raise JobError("log_path %s is one of the job's own files: choose another file" % log)
    try:
        mode = os.stat(log).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise JobError("cannot use the log %s: %s: choose a log_path in a directory you can write" % (log,
                                                                                                      exc.strerror))
    if mode is not None and stat.S_ISDIR(mode):
        raise JobError("log_path %s is a directory: give the path of a file" % log)
    if mode is not None and not stat.S_ISREG(mode):
        raise JobError("log_path %s is not a regular file: the job's output would be lost and job_status could not "
                       "read it; give the path of a file" % log)
    if check_mode:
        probe = log if mode is not None else nearest_existing(os.path.dirname(log))
        if not os.access(probe, os.W_OK):
            raise JobError("the log %s cannot be written (%s is not writable): choose another log_path or fix the "
                           "filesystem" % (log, probe))
        return
    try:
        os.makedirs(os.path.dirname(log), exist_ok=True)
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o644)
        os.close(fd)
    except OSError as exc:
        raise JobError("the log %s cannot be written: %s: choose another log_path, or fix the filesystem (read-only "
                       "or full?)" % (getattr(exc, "filename", None) or log, exc.strerror))


def check_disks(paths):
    """Refuse to start on a full or inode-exhausted filesystem (job directory or log)."""
    problems = []
    seen = set()
    for path in (paths["job_dir"], os.path.dirname(paths["log_path"])):
        probe = nearest_existing(path)
        try:
            st = os.statvfs(probe)
        except OSError as exc:
            raise JobError("cannot read filesystem statistics of %s: %s" % (probe, exc.strerror))
        if st.f_fsid in seen and st.f_fsid:
            continue
        seen.add(st.f_fsid)
        usage = inode_check.usage_from_statvfs(probe, st)
        problems.extend(f for f in inode_check.threshold_findings(usage, DISK_REFUSE_PCT, DISK_REFUSE_PCT)
                        if f["level"] == "FAIL")
    if problems:
        raise JobError("refusing to start: %s. %s" % (
            "; ".join("%s: %s" % (f["code"], f["message"]) for f in problems), problems[0]["action"]))
