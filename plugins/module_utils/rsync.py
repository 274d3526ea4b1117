# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""rsync between the controller and a box over the host's own SSH settings: the one owner of the argv.

Used by the controller actions ``push_code`` (controller -> box) and ``pull_verify`` (box -> controller). The SSH
settings come from the connection's options (``Target.from_connection``), so the same port, key, user and
``ansible_ssh_common_args`` that Ansible uses reach rsync's ``-e``. Paths are always given after ``--`` style
separation: a path is never read as an option.
"""

from __future__ import annotations

import os
import shlex

from ansible_collections.remote_gpu.trainer.plugins.module_utils.command import run_with_timeout

LOCAL_TRANSPORTS = ("local", "ansible.builtin.local")


class RsyncError(Exception):
    """rsync could not run or failed; the message says what to do."""


class Target(object):
    """Where a box is and how to reach it over SSH (``address`` None: the controller itself)."""

    def __init__(self, address=None, user=None, port=None, private_key_file=None, ssh_args=()):
        self.address = address
        self.user = user
        self.port = port
        self.private_key_file = private_key_file
        self.ssh_args = list(ssh_args)

    @classmethod
    def from_connection(cls, connection, task_vars):
        """The target of an action's connection: its host, user, port, key and extra SSH arguments."""
        if connection.transport in LOCAL_TRANSPORTS:
            return cls()
        ssh_args = []
        for option in ("ssh_common_args", "ssh_extra_args"):
            ssh_args += shlex.split(connection.get_option(option) or "")
        key = connection.get_option("private_key_file")
        return cls(address=connection.get_option("host"),
                   user=connection.get_option("remote_user") or task_vars.get("ansible_user"),
                   port=connection.get_option("port"),
                   private_key_file=os.path.expanduser(key) if key else None,
                   ssh_args=ssh_args)

    @property
    def is_local(self):
        return not self.address

    def ssh_argv(self):
        """``ssh -o BatchMode=yes [-p PORT] [-i KEY] ARGS...``: never prompts, fails instead."""
        argv = ["ssh", "-o", "BatchMode=yes"]
        if self.port:
            argv += ["-p", str(self.port)]
        if self.private_key_file:
            argv += ["-i", self.private_key_file]
        return argv + self.ssh_args

    def spec(self, path):
        """``[user@]host:path`` for rsync, or the plain path for the controller itself."""
        if self.is_local:
            return path
        return "%s%s:%s" % ((self.user + "@") if self.user else "", self.address, path)


def rsync_argv(flags, target, source, dest, pushing):
    """The full rsync argv; ``pushing`` copies ``source`` (controller) to ``dest`` on the box, else the reverse."""
    ssh = [] if target.is_local else ["-e", " ".join(shlex.quote(a) for a in target.ssh_argv())]
    src, dst = (source, target.spec(dest)) if pushing else (target.spec(source), dest)
    # --protect-args: the remote path reaches the remote rsync as a literal name, never split or globbed by a shell
    return ["rsync"] + list(flags) + ["--protect-args"] + ssh + ["--", src, dst]


def run_rsync(argv, timeout, what):
    """Run rsync; returns its stdout, or raises RsyncError with a message that says what to do."""
    rc, out, err = run_with_timeout(argv, timeout)
    if rc == 127:
        raise RsyncError("rsync is not installed on the controller: install it (apt-get install rsync) and run again")
    if rc is None:
        raise RsyncError("rsync of %s did not finish within %d s; run again: --partial resumes where it stopped"
                         % (what, timeout))
    if rc != 0:
        raise RsyncError("rsync of %s failed (exit %d): %s. Run again: --partial resumes where it stopped"
                         % (what, rc, err.strip()[-500:]))
    return out
