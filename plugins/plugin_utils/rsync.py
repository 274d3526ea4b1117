# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""rsync between the controller and a box over the host's own SSH settings: the one owner of the argv.

Used by the controller actions ``push_code`` (controller -> box) and ``pull_verify`` (box -> controller). The SSH
settings come from the connection's options (``Target.from_connection``), so the same port, key, user, ``ssh_args``
and ``ansible_ssh_common_args`` that Ansible uses reach rsync's ``-e``, and rsync's ssh runs over the connection that
Ansible keeps open to the box (``shared_connection``). Paths are checked first (``check_path``: not
empty, not ``/``, no newline or NUL, absolute on the box) and always given after ``--``: a path is never read as
an option.
"""

from __future__ import annotations

import os
import posixpath
import shlex

from ansible.utils.path import unfrackpath

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
        """The target of an action's connection: its host, user, port, key and SSH arguments (``ssh_args``, where
        Ansible's ControlMaster and ControlPersist are, then the common and extra ones), with the ControlPath of
        the connection Ansible keeps open to the box (``shared_connection``)."""
        if connection.transport in LOCAL_TRANSPORTS:
            return cls()
        ssh_args = []
        for option in ("ssh_args", "ssh_common_args", "ssh_extra_args"):
            ssh_args += shlex.split(connection.get_option(option) or "")
        ssh_args += shared_connection(connection, ssh_args)
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


def check_path(path, what, absolute=True):
    """Refuse a path that must not reach rsync as an operand; returns it unchanged when it may.

    Refused: an empty path, one with a NUL, a newline or a carriage return, one with a ``..`` part, the root of the
    filesystem (``/``, ``//``, ``/./``), and, when ``absolute`` (every path on a box), a relative one, which
    includes one that starts with ``-`` or ``~``. Raises RsyncError naming ``what`` and what to give instead.
    """
    if not isinstance(path, str) or not path.strip():
        raise RsyncError("%s is empty: give an absolute path (an empty path would mean the whole filesystem or the "
                         "home directory)" % what)
    for char, name in (("\0", "a NUL byte"), ("\n", "a newline"), ("\r", "a carriage return")):
        if char in path:
            raise RsyncError("%s %r holds %s: no path handed to rsync may; rename it" % (what, path, name))
    if absolute and not path.startswith("/"):
        raise RsyncError("%s %r is not an absolute path: give one that starts with / (a leading - would be read "
                         "as an option, a relative or ~ path depends on the login directory)" % (what, path))
    if ".." in path.split("/"):
        raise RsyncError("%s %r has a .. part: give the path without it" % (what, path))
    if path.startswith("/") and posixpath.normpath(path).strip("/") == "":
        raise RsyncError("%s is %r, the root of the filesystem: give the directory meant" % (what, path))
    return path


def check_timeout(timeout):
    """Refuse a timeout that would kill rsync before it starts (0 or negative)."""
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
        raise RsyncError("timeout must be a positive number of seconds, got %r" % (timeout,))
    return timeout


def shared_connection(connection, ssh_args):
    """``["-o", "ControlPath=..."]``: the socket of the master connection that Ansible's ssh connection keeps to the
    box, where ``ssh_args`` ask for one (ControlPersist) and name no ControlPath (then they carry it already), so
    that rsync's ssh runs over it instead of opening a connection of its own: 8 to 10 round trips and a key
    exchange on both sides, for each push and each pull. The path is made as ansible-core's ssh connection makes it
    (its option control_path, else its ``_create_control_path`` of the host, port and user, in control_path_dir);
    ``[]`` where that cannot be known, and rsync connects on its own as before."""
    lowered = [arg.lower() for arg in ssh_args]
    if not any("controlpersist" in arg for arg in lowered) or any("controlpath" in arg for arg in lowered):
        return []
    try:
        # pylint: disable-next=protected-access
        path = connection.get_option("control_path") or connection._create_control_path(
            connection.host, connection.get_option("port"), connection.get_option("remote_user"))
        directory = unfrackpath(connection.get_option("control_path_dir"))
        return ["-o", "ControlPath=%s" % (path % {"directory": directory})]
    except Exception:  # pylint: disable=broad-exception-caught
        return []


def rsync_argv(flags, target, source, dest, pushing):
    """The full rsync argv; ``pushing`` copies ``source`` (controller) to ``dest`` on the box, else the reverse.

    Both paths pass ``check_path`` first (the one on the box must be absolute; a relative one on the controller
    stays after ``--``). Raises RsyncError for a path that must not reach rsync.
    """
    check_path(source, "the source", absolute=not pushing)
    check_path(dest, "the destination", absolute=pushing)
    ssh = [] if target.is_local else ["-e", " ".join(shlex.quote(a) for a in target.ssh_argv())]
    src, dst = (source, target.spec(dest)) if pushing else (target.spec(source), dest)
    # --protect-args: the remote path reaches the remote rsync as a literal name, never split or globbed by a shell
    return ["rsync"] + list(flags) + ["--protect-args"] + ssh + ["--", src, dst]


def run_rsync(argv, timeout, what):
    """Run rsync; returns its stdout, or raises RsyncError with a message that says what to do."""
    check_timeout(timeout)
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
