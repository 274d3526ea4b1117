# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The bash wrapper that runs a detached job, and the small library it calls on the box.

The wrapper is generated here, in Python (no Jinja on the box), as a new versioned file ``wrapper-<sha12>.sh``.
It writes the job's final ``status.json`` through job_layout.py's one writer, run with the interpreter that ran
detached_job from a copy of the library in ``<job dir>/lib`` (:func:`install_lib`).
"""

from __future__ import annotations

import hashlib
import os
import shlex

from ansible_collections.remote_gpu.trainer.plugins.module_utils import atomic, job_layout, procfs, safe_read
from ansible_collections.remote_gpu.trainer.plugins.module_utils.atomic import write_atomic

PACKAGE = "ansible_collections/remote_gpu/trainer/plugins/module_utils"
# What the wrapper runs on the box: job_layout.py and every module_util it imports (a unit test holds the list
# closed under imports). The one list: detached_job installs it, the tests use it.
JOB_LIB = (job_layout, atomic, procfs, safe_read)


def command_line(command):
    """The shell line that runs ``command``: a string goes to ``bash -c``, a list is quoted word by word."""
    if isinstance(command, (list, tuple)):
        return " ".join(shlex.quote(str(arg)) for arg in command)
    return "bash -c %s" % shlex.quote(command)


def status_call(python, lib_dir, status_var, code, started_var):
    """The bash line that writes a final status.json with job_layout.write_status (the one writer)."""
    return 'PYTHONPATH=%s %s -m %s status "%s" --exit-code "%s" --started "%s"' % (
        shlex.quote(lib_dir), shlex.quote(python), job_layout.CLI_MODULE, status_var, code, started_var)


def wrapper_text(name, paths, command, chdir=None, env_files=(), env=None, python="python3", lib_dir=None):
    """The bash wrapper for a job. Pure: the same inputs give the same bytes (and so the same file name).

    ``python`` and ``lib_dir`` run job_layout.py when the command ends (``lib_dir`` defaults to
    ``<job dir>/lib``, where detached_job installs it).
    """
    q = shlex.quote
    lib_dir = lib_dir or os.path.join(paths["job_dir"], "lib")
    lines = [
        "#!/usr/bin/env bash",
        "# Written by remote_gpu.trainer.detached_job for job %s. Never edited in place: a changed command or" % name,
        "# environment gets a new wrapper-<sha>.sh, so a running copy is not rewritten under bash.",
        "JOB_DIR=%s" % q(paths["job_dir"]),
        "LOG=%s" % q(paths["log_path"]),
        "STATUS=%s" % q(paths["status_file"]),
        'now() { date -u +%Y-%m-%dT%H:%M:%SZ; }',
        'write_status() {',
        '    ' + status_call(python, lib_dir, "$STATUS", "$1", "$STARTED"),
        '    printf \'==== trainer: finished %s exit %d ====\\n\' "$(now)" "$1"',
        '}',
        'rm -f "$STATUS"',
        'read -r STAT < /proc/$$/stat',
        'set -- ${STAT##*) }',
        '# umask 022 in a subshell: PID files that others could write are never trusted to name a process to signal',
        '(umask 022; printf \'%s\\n\' "${20}" > "$JOB_DIR/job.starttime.tmp") && mv -f "$JOB_DIR/job.starttime.tmp" '
        '"$JOB_DIR/job.starttime"',
        '(umask 022; printf \'%s\\n\' "$$" > "$JOB_DIR/job.pid.tmp") && mv -f "$JOB_DIR/job.pid.tmp" '
        '"$JOB_DIR/job.pid"',
        'mkdir -p "$(dirname "$LOG")"',
        '# fd 9 keeps the tmux pane (or /dev/null under nohup) open: a pane whose terminal is closed is reaped.',
        '# a log that cannot be written (read-only filesystem, a directory) ends the job with exit 74, not in silence',
        'exec 9>&1 >> "$LOG" 2>&1 < /dev/null || {',
        '    echo "trainer: cannot write the log $LOG"; write_status 74; exit 74',
        '}',
        'STARTED=$(now)',
        'printf \'==== trainer: started %s pid %s ====\\n\' "$STARTED" "$$"',
        "trap 'write_status 143; exit 143' TERM",
        "trap 'write_status 130; exit 130' INT",
        "trap 'write_status 129; exit 129' HUP",
    ]
    for env_file in env_files or ():
        lines += [
            "if [ ! -r %s ]; then echo 'trainer: env file %s is missing or unreadable'; write_status 127; exit 127; fi"
            % (q(env_file), env_file.replace("'", "")),
            ". %s" % q(env_file),
        ]
    lines += [
        "export PYTHONUNBUFFERED=1",
        "export TRAINER_JOB_NAME=%s TRAINER_JOB_DIR=%s TRAINER_ITEMS_DIR=%s"
        % (q(name), q(paths["job_dir"]), q(paths["items_dir"])),
    ]
    for key in sorted(env or {}):
        lines.append("export %s=%s" % (key, q(str(env[key]))))
    if chdir:
        lines.append("cd %s || { echo 'trainer: cannot cd to %s'; write_status 1; exit 1; }"
                     % (q(chdir), chdir.replace("'", "")))
    lines += [
        command_line(command),
        "RC=$?",
        'write_status "$RC"',
        'exit "$RC"',
        "",
    ]
    return "\n".join(lines)


def wrapper_name(text):
    return "wrapper-%s.sh" % hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def module_source(module):
    """The source text of an imported module, also from the zip that Ansible ships a module in."""
    source = module.__loader__.get_source(module.__name__)
    if source is None:
        raise OSError("cannot read the source of %s" % module.__name__)
    return source


def install_lib(lib_dir, modules=JOB_LIB):
    """Write the sources of ``modules`` (module_utils of this collection) under ``lib_dir``, each only when it
    differs, atomically -> True when a file was written. ``PYTHONPATH=lib_dir`` then imports them by name."""
    package = os.path.join(lib_dir, *PACKAGE.split("/"))
    changed = False
    for module in modules:
        path = os.path.join(package, module.__name__.rsplit(".", 1)[-1] + ".py")
        text = module_source(module)
        if job_layout.read_text(path) != text:
            write_atomic(path, text, mode=0o600, make_dirs=True)
            changed = True
    return changed
