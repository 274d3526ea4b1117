# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Push the code to the box with resumable rsync (the rsync argv is plugin_utils/rsync.py's), and record what was
pushed: its commit on the controller, and with ``record`` the pushed tree's checksum in code.json on the box."""

from __future__ import annotations

import json
import os
import shlex

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import code_check
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import rsync
from ansible_collections.remote_gpu.trainer.plugins.module_utils.command import run_with_timeout
from ansible_collections.remote_gpu.trainer.plugins.modules.push_code import DOCUMENTATION as MODULE_DOCUMENTATION
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.doc_args import DocumentedAction
# launch's box code (pushed with lib_files) whose "code" command writes code.json, as the queue runner runs it
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.launch_scripts import LAUNCH_CLI

FLAGS = ["-a", "--partial", "--delete-after", "--itemize-changes"]
# Directory times are left alone: Python writes __pycache__ into the lib directory, which must not count as a change.
LIB_FLAGS = ["-a", "--partial", "--itemize-changes", "--omit-dir-times", "--chmod=D700,F600"]
MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")


def git_state(src, timeout=30, exclude=()):
    """(commit, dirty, dirty_files) of the work tree at ``src``: ``dirty_files`` are the paths under ``src``
    (relative to it) that ``git status --porcelain`` lists (modified, staged, deleted, untracked), without those
    that ``exclude`` keeps out of the push; each is None when git cannot tell (not a work tree, no commit yet, git
    missing)."""
    rc, out, _err = run_with_timeout(["git", "-C", src, "rev-parse", "HEAD"], timeout)
    commit = (out.strip() or None) if rc == 0 else None
    rc, prefix, _err = run_with_timeout(["git", "-C", src, "rev-parse", "--show-prefix"], timeout)
    if rc != 0:
        return commit, None, None
    rc, out, _err = run_with_timeout(["git", "-C", src, "status", "--porcelain", "-z", "--untracked-files=all", "--", "."], timeout)
    if rc != 0:
        return commit, None, None
    files = code_check.pushed_files(code_check.porcelain_files(out), prefix.strip(), exclude)
    return commit, bool(files), files


def changes(stdout):
    """The itemized lines of a transfer (rsync prints nothing else with these flags)."""
    return [line for line in stdout.splitlines() if line.strip()]


def code_argv(args, target, dry_run):
    flags = FLAGS + (["--dry-run"] if dry_run else []) + ["--exclude=%s" % pattern for pattern in args["exclude"]]
    return rsync.rsync_argv(flags, target, args["src"].rstrip("/") + "/", args["dest"].rstrip("/") + "/",
                            pushing=True)


def lib_argv(args, target, dry_run):
    """Only the named files of module_utils (rsync filters: include each, exclude the rest)."""
    flags = LIB_FLAGS + (["--dry-run"] if dry_run else [])
    flags += ["--include=/%s" % name for name in args["lib_files"]] + ["--exclude=*"]
    return rsync.rsync_argv(flags, target, MODULE_UTILS + "/", args["lib_dest"].rstrip("/") + "/", pushing=True)


def record_command(args, commit, dirty, dirty_files):
    """The shell line that runs launch's code step on the box under the C locale: the pushed tree's checksum, the
    commit and dirty state found on the controller, and the torch build of the job's Python, into record.path. Every
    word is quoted (shlex), so no value is read as shell syntax or an option of another word."""
    record = args["record"]
    argv = [record["interpreter"], "-m", LAUNCH_CLI, "code", "--root", args["dest"], "--out", record["path"],
            "--commit", commit or "", "--dirty", "" if dirty is None else str(dirty).lower(),
            "--dirty-files", json.dumps(dirty_files), "--src", args["src"], "--python", record["python"]]
    return "LC_ALL=C LANG=C PYTHONPATH=%s %s" % (shlex.quote(record["pythonpath"]), shlex.join(argv))


def parse_record(rc, stdout, stderr):
    """code.json's record as the code step printed it (with its "changed"), or a ValueError that says what went
    wrong, from the step's exit code and the end of its error output."""
    if rc == 0:
        try:
            record = json.loads(stdout)
        except ValueError:
            record = None
        if isinstance(record, dict) and "tree_sha256" in record:
            return record
    raise ValueError("exit code %s; %s" % (rc, (stderr or stdout or "no output").strip()[-500:]))


def check_args(args):
    """RsyncError for arguments that must not reach rsync (rsync.check_path, rsync.check_timeout), before anything
    runs. ``dest`` also must not be a top-level directory: --delete-after empties whatever src lacks."""
    rsync.check_path(args["dest"], "dest")
    if len([part for part in args["dest"].split("/") if part not in ("", ".")]) < 2:
        raise rsync.RsyncError("dest %r is a top-level directory: push_code deletes everything in dest that src lacks "
                               "(--delete-after), so it pushes only into a directory at least two levels deep, such "
                               "as %s/code" % (args["dest"], args["dest"].rstrip("/")))
    if args["lib_dest"]:
        rsync.check_path(args["lib_dest"], "lib_dest")
    rsync.check_timeout(args["timeout"])
    if args.get("record"):
        if not args["lib_dest"]:
            raise rsync.RsyncError("record needs lib_dest and lib_files: the helpers that write code.json on the box "
                                   "(launch.py and what it imports)")
        rsync.check_path(args["record"]["path"], "record.path")
        rsync.check_path(args["record"]["pythonpath"], "record.pythonpath")


def overlap(src, dest):
    """True when ``src`` and ``dest`` (both on this machine) are the same directory or one holds the other."""
    real_src, real_dest = os.path.realpath(src), os.path.realpath(dest)
    return any(a == b or a.startswith(b.rstrip("/") + "/") for a, b in ((real_src, real_dest), (real_dest, real_src)))


def missing_lib_files(names):
    return [name for name in names if os.path.basename(name) != name or
            not os.path.isfile(os.path.join(MODULE_UTILS, name))]


class ActionModule(DocumentedAction):
    DOCUMENTATION = MODULE_DOCUMENTATION

    def act(self, result, args, task_vars):
        src = os.path.abspath(os.path.expanduser(args["src"]))
        args["src"] = src
        result.update(changed=False, changes=[], commit=None, dirty=None, dirty_files=None, uses_wandb=False,
                      dest=args["dest"], code=None)
        if not os.path.isdir(src):
            return dict(result, failed=True, msg="src %s is not a directory on the controller: give the code "
                                                 "directory (launch_src)" % src)
        try:
            check_args(args)
        except rsync.RsyncError as exc:
            return dict(result, failed=True, msg=str(exc))
        missing = missing_lib_files(args["lib_files"])
        if missing:
            return dict(result, failed=True,
                        msg="lib_files %s are not files of %s" % (", ".join(missing), MODULE_UTILS))
        result["commit"], result["dirty"], result["dirty_files"] = git_state(src, exclude=args["exclude"])
        crlf = code_check.crlf_files(src, code_check.scripts(src, args["command"], args["exclude"]))
        if crlf:
            return dict(result, failed=True, crlf_files=crlf, msg=code_check.crlf_message(src, crlf))
        result["uses_wandb"] = code_check.uses_wandb(src, args["exclude"])
        if result["dirty"]:
            if args["require_clean"]:
                return dict(result, failed=True, msg=code_check.dirty_message(src, result["dirty_files"], True))
            result["warnings"] = [code_check.dirty_message(src, result["dirty_files"], False)]
        target = rsync.Target.from_connection(self._connection, task_vars)
        if target.is_local and overlap(src, args["dest"]):
            return dict(result, failed=True, msg="dest %s and src %s are the same directory or one holds the other: "
                        "--delete-after would delete the code or copy it into itself; give a dest outside src"
                        % (args["dest"], src))
        check = bool(self._task.check_mode)
        try:
            steps = [(code_argv(args, target, check), "the code %s" % src)]
            if args["lib_dest"] and args["lib_files"]:
                steps.append((lib_argv(args, target, check), "the helpers"))
        except rsync.RsyncError as exc:
            return dict(result, failed=True, msg=str(exc))
        try:
            for argv, what in steps:
                result["changes"] += changes(rsync.run_rsync(argv, args["timeout"], what))
        except rsync.RsyncError as exc:
            if check:  # a dry run cannot compare against a directory that the real run would create first
                return dict(result, changed=True, msg="would push %s to %s (the dry run could not compare: %s)"
                            % (src, args["dest"], exc))
            return dict(result, failed=True, msg=str(exc))
        result["changed"] = bool(result["changes"])
        verb = "would push" if check else "pushed"
        result["msg"] = ("%s %d change(s) to %s" % (verb, len(result["changes"]), args["dest"])
                         if result["changes"] else "%s is up to date" % args["dest"])
        if args["record"] and not check:
            # the same connection, without a module of its own: one SSH execution, no second worker on the
            # controller and no AnsiballZ run on the box
            response = self._low_level_execute_command(
                record_command(args, result["commit"], result["dirty"], result["dirty_files"]), sudoable=True)
            try:
                result["code"] = parse_record(response.get("rc"), response.get("stdout"), response.get("stderr"))
            except ValueError as exc:
                return dict(result, failed=True, msg="%s, but recording it in %s failed (%s): run the launch again"
                            % (result["msg"], args["record"]["path"], exc))
            recorded = result["code"].pop("changed", False) is True
            result["changed"] = result["changed"] or recorded
        return result
