#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: write_files
short_description: Create directories and write small text files on the box in one SSH execution
version_added: 0.1.0
author:
  - remote_gpu.trainer contributors (@remote-gpu)
description:
  - Creates the listed directories, then writes each file of O(files) from the text given in the task, in one module
    run. The collection's roles write their scripts, records and job-environment fragments with it.
  - "Why not C(ansible.builtin.copy) or C(ansible.builtin.template): for each file they change, those run two modules
    (C(stat), then C(copy)) and transfer the file in SSH executions of its own (a temporary directory, the transfer,
    the removal): about five SSH executions and two Python start-ups per file. This module takes the text as an
    argument, so any number of files costs one SSH execution, which matters on a rented box far away."
  - Each file is written to a temporary file beside it, flushed with fsync, given its mode and renamed over O(files[].path),
    so a reader sees the old text or the new one, never a part. A symbolic link, FIFO or socket at that path is
    replaced by the file, never written through or opened.
  - Idempotent. A regular file that already holds the same text is left alone, and only its mode is corrected when
    it differs.
  - Only for small text files (the text travels in the module's arguments); use C(ansible.builtin.copy) for large
    files and for secrets, whose text must not appear in the task's arguments.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
attributes:
  check_mode:
    support: full
    details: Reports which directories would be created and which files written; writes nothing.
  diff_mode:
    support: full
    details: Shows the old and new text of each file written (of an old file, at most its first 1 MiB).
options:
  directories:
    description:
      - Absolute paths of directories to create, in order, before any file is written. Missing parents are created
        too.
      - Each directory this creates gets O(directory_mode), and so does each listed directory that already exists;
        an existing parent that is not listed is left as it is.
      - An entry may also be a mapping with the keys C(path) and C(mode) (an octal string), for a directory whose
        mode differs from O(directory_mode); the parents it creates get that mode too.
      - A listed path that exists and is not a directory fails the task, and so does one that is a symbolic link,
        even to a directory - the mode of a link's target, a directory nobody listed, is never changed. List the
        real directory instead.
    type: list
    elements: raw
    default: []
  directory_mode:
    description: The mode of the directories, as an octal string such as V('0700').
    type: str
    default: "0700"
  files:
    description: The files to write, in order.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description:
          - The absolute path of the file. Its directory must exist, or be listed in O(directories). In check mode a
            missing directory is not an error, since an earlier task of the play may create it.
          - A directory at this path fails the task.
        type: path
        required: true
      content:
        description: The text of the file, written as UTF-8. Required unless O(files[].state=absent).
        type: str
      state:
        description:
          - V(absent) removes the file (or a link at its path) if it is there; a directory at the path fails the task.
        type: str
        choices: [present, absent]
        default: present
      mode:
        description: The mode of the file, as an octal string such as V('0644').
        type: str
        default: "0644"
      force:
        description:
          - V(false) leaves a path that already exists as it is, whatever it holds (for a script that may be
            running, which must never be rewritten under it).
        type: bool
        default: true
  links:
    description:
      - Symbolic links to make after the directories and the files, in order.
      - A missing link is created; one that already points at O(links[].src) is left alone. A link that points
        elsewhere is replaced only with O(links[].force=true), atomically; a file or directory at that path is never
        replaced and fails the task.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The absolute path of the link. Its directory must exist, or be listed in O(directories).
        type: path
        required: true
      src:
        description: The absolute path the link points at (it need not exist).
        type: path
        required: true
      force:
        description: V(true) replaces a link that points elsewhere.
        type: bool
        default: false
"""

EXAMPLES = r"""
- name: Write a job's scripts (never rewriting one that exists) and its record
  remote_gpu.trainer.write_files:
    directories:
      - /root/.trainer/jobs/train
    files:
      - path: /root/.trainer/jobs/train/queue-1c6c400a1a26.sh
        content: "{{ queue_text }}"
        mode: "0700"
        force: false
      - path: /root/.trainer/jobs/train/queue.json
        content: "{{ record | to_json }}"
        mode: "0600"

- name: A directory readable by others, and a link to it
  remote_gpu.trainer.write_files:
    directories:
      - path: /root/autodl-tmp/runs/exp42/tb
        mode: "0755"
    links:
      - path: /root/tf-logs/exp42
        src: /root/autodl-tmp/runs/exp42/tb

- name: Only the directories, private to the SSH user
  remote_gpu.trainer.write_files:
    directories:
      - /root/.trainer/lib
      - /root/code
    directory_mode: "0700"
"""

RETURN = r"""
changed:
  description: Whether any directory was (or, in check mode, would be) created or any file or mode changed.
  type: bool
  returned: always
  sample: true
directories:
  description:
    - Each directory created or corrected, with C(state) V(created) or V(mode) (its mode was corrected). Parents
      created on the way are listed too. Directories that were already right are not listed.
  type: list
  elements: dict
  returned: always
  sample: [{"path": "/root/.trainer/jobs/train", "state": "created"}]
files:
  description:
    - Each file of O(files), in order, with C(state) V(written) (created or replaced), V(mode) (same text, mode
      corrected), V(unchanged), or V(kept) (it exists and O(files[].force) is false).
  type: list
  elements: dict
  returned: always
  sample: [{"path": "/root/.trainer/jobs/train/queue.json", "state": "written"}]
links:
  description:
    - Each link of O(links), in order, with C(state) V(created), V(replaced) (it pointed elsewhere) or V(unchanged).
  type: list
  elements: dict
  returned: always
  sample: [{"path": "/root/tf-logs/exp42", "state": "created"}]
msg:
  description: What was done, in counts; on failure, what went wrong and what to do.
  type: str
  returned: always
  sample: 1 directory created, 2 written, 1 unchanged
"""

import os
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.remote_gpu.trainer.plugins.module_utils import atomic, safe_read

DIFF_LIMIT = 1 << 20  # the most bytes of an old file that diff mode shows


class WriteError(Exception):
    """What went wrong, for the task's message."""


def octal_mode(text, what):
    """'0644' -> 0o644; anything else is a WriteError naming ``what``."""
    text = str(text)
    if not text.isdigit() or not set(text) <= set("01234567") or int(text, 8) > 0o7777:
        raise WriteError("%s must be an octal string such as '0644', got %r (quote it in YAML)" % (what, text))
    return int(text, 8)


def absolute(path, what):
    if not path or not os.path.isabs(path):
        raise WriteError("%s must be an absolute path, got %r" % (what, path))
    return os.path.normpath(path)


def make_directory(path, mode, check, done, planned):
    """Create ``path`` and its missing parents with ``mode``, or correct the mode of an existing ``path``.
    ``planned``: the directories that check mode did not create; it adds those it would create."""
    if os.path.islink(path):
        raise WriteError("%s is a symbolic link (to %s): write_files never changes the mode of a link's target; list "
                         "the real directory instead, or remove the link" % (path, os.path.realpath(path)))
    missing = []
    current = path
    while not os.path.isdir(current) and current not in planned:
        if os.path.lexists(current):
            raise WriteError("%s exists and is not a directory: move it away, or choose another path" % current)
        missing.append(current)
        current = os.path.dirname(current)
    for directory in reversed(missing):
        if check:
            planned.add(directory)
        else:
            os.mkdir(directory, mode)
            chmod_directory(directory, mode)  # the umask took bits away
        done.append({"path": directory, "state": "created"})
    if not missing and path not in planned and stat.S_IMODE(os.stat(path).st_mode) != mode:
        if not check:
            chmod_directory(path, mode)
        done.append({"path": path, "state": "mode"})


def chmod_directory(path, mode):
    """Set the mode of the directory ``path`` itself: opened without following a link (one swapped in since it was
    looked at is refused), then fchmod."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        raise WriteError("%s is no longer a plain directory (%s): its mode is left alone; run the task again"
                         % (path, exc.strerror or exc))
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def open_regular(path):
    """An fd of the regular file ``path``, or None when it is no longer one (a link, a FIFO, a device swapped in
    since it was looked at): through the collection's one non-blocking reader, module_utils/safe_read.py."""
    try:
        return safe_read.open_regular(path)
    except (FileNotFoundError, safe_read.ReadRefused):
        return None


def write_file(spec, check, diffs):
    """Write one file of ``files`` -> its state."""
    path = absolute(spec["path"], "files[].path")
    mode = octal_mode(spec["mode"], "the mode of %s" % path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if spec.get("state") == "absent":
        if info is None:
            return "absent"
        if stat.S_ISDIR(info.st_mode):
            raise WriteError("%s is a directory, not a file to remove: move it away, or remove it by hand" % path)
        if not check:
            os.unlink(path)
        return "removed"
    if spec["content"] is None:
        raise WriteError("files[].content is required to write %s (or set its state to absent)" % path)
    data = spec["content"].encode("utf-8")
    if info is not None and not spec["force"]:
        return "kept"
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise WriteError("%s is a directory: move it away, or write the file elsewhere" % path)
    old = b""
    fd = open_regular(path) if info is not None and stat.S_ISREG(info.st_mode) else None
    if fd is not None:
        try:
            old = safe_read.read_fd(fd, max(len(data) + 1, DIFF_LIMIT if diffs is not None else 0))[0]
            if old == data:
                if stat.S_IMODE(os.fstat(fd).st_mode) == mode:
                    return "unchanged"
                if not check:
                    os.fchmod(fd, mode)  # the file that was read, never a link swapped in since
                return "mode"
        finally:
            os.close(fd)
    if not check and not os.path.isdir(os.path.dirname(path)):
        raise WriteError("the directory of %s does not exist: list it under directories" % path)
    if diffs is not None:
        diffs.append({"before_header": path, "after_header": path, "before": old.decode("utf-8", "replace"),
                      "after": spec["content"]})
    if not check:
        atomic.write_atomic(path, data, mode=mode)
    return "written"


def directory_entry(entry, default_mode):
    """An entry of ``directories`` (a path, or a mapping with path and mode) -> (absolute path, mode)."""
    if isinstance(entry, dict):
        unknown = sorted(set(entry) - {"path", "mode"})
        if unknown or "path" not in entry:
            raise WriteError("an entry of directories is a path, or a mapping with the keys path and mode; got the keys "
                             "%s" % ", ".join(sorted(entry)))
        path = absolute(os.path.expanduser(str(entry["path"] or "")), "directories[].path")
        return path, (octal_mode(entry["mode"], "the mode of %s" % path) if "mode" in entry else default_mode)
    if not isinstance(entry, str):
        raise WriteError("an entry of directories is a path, or a mapping with the keys path and mode; got %r" % (entry,))
    return absolute(os.path.expanduser(os.path.expandvars(entry)), "directories[]"), default_mode


def make_link(spec, check, planned):
    """Make the symbolic link of one entry of ``links`` -> its state."""
    path = absolute(spec["path"], "links[].path")
    src = absolute(spec["src"], "the src of the link %s" % path)
    if os.path.islink(path):
        target = os.readlink(path)
        if os.path.normpath(os.path.join(os.path.dirname(path), target)) == src:
            return "unchanged"
        if not spec["force"]:
            raise WriteError("%s is a link to %s, not to %s: set force to replace it, or choose another path"
                             % (path, target, src))
        state = "replaced"
    elif os.path.lexists(path):
        raise WriteError("%s exists and is not a link; it is never replaced: move it away, or choose another path"
                         % path)
    else:
        state = "created"
        if not os.path.isdir(os.path.dirname(path)) and not (check and os.path.dirname(path) in planned):
            raise WriteError("the directory of the link %s does not exist: list it under directories" % path)
    if not check:
        staged = "%s.%d.tmp" % (path, os.getpid())
        os.symlink(src, staged)
        try:
            os.rename(staged, path)  # atomic: a reader sees the old link or the new one
        except OSError:
            os.unlink(staged)
            raise
    return state


def summary(directories, files):
    counts = {}
    for entry in files:
        counts[entry["state"]] = counts.get(entry["state"], 0) + 1
    parts = []
    for state, verb in (("created", "created"), ("mode", "given its mode")):
        number = sum(1 for entry in directories if entry["state"] == state)
        if number:
            parts.append("%d director%s %s" % (number, "y" if number == 1 else "ies", verb))
    parts += ["%d %s" % (counts[state], state) for state in ("written", "mode", "unchanged", "kept", "removed")
              if state in counts]
    parts += ["%d link%s %s" % (counts[state], "" if counts[state] == 1 else "s", state)
              for state in ("created", "replaced") if state in counts]
    return ", ".join(parts) or "nothing to do"


def run(params, check, diff, result):
    """Do the work, recording each step in ``result`` (so that a failure still reports what was done)."""
    directory_mode = octal_mode(params["directory_mode"], "directory_mode")
    diffs = [] if diff else None
    planned = set()
    for entry in params["directories"]:
        path, entry_mode = directory_entry(entry, directory_mode)
        make_directory(path, entry_mode, check, result["directories"], planned)
    for spec in params["files"]:
        result["files"].append({"path": spec["path"], "state": write_file(spec, check, diffs)})
    for spec in params["links"]:
        result["links"].append({"path": spec["path"], "state": make_link(spec, check, planned)})
    result["msg"] = summary(result["directories"], result["files"] + result["links"])
    if diff:
        result["diff"] = diffs


def changed(result):
    return (bool(result["directories"])
            or any(entry["state"] in ("written", "mode", "removed") for entry in result["files"])
            or any(entry["state"] in ("created", "replaced") for entry in result.get("links", ())))


# AnsibleModule's keyword arguments; the write_files action validates a task's arguments against them on the
# controller when it runs this module without AnsiballZ (plugin_utils/direct)
MODULE_OPTIONS = dict(
    argument_spec=dict(
        directories=dict(type="list", elements="raw", default=[]),
        directory_mode=dict(type="str", default="0700"),
        files=dict(type="list", elements="dict", default=[], options=dict(
            path=dict(type="path", required=True),
            content=dict(type="str"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            mode=dict(type="str", default="0644"),
            force=dict(type="bool", default=True),
        )),
        links=dict(type="list", elements="dict", default=[], options=dict(
            path=dict(type="path", required=True),
            src=dict(type="path", required=True),
            force=dict(type="bool", default=False),
        )),
    ),
    supports_check_mode=True,
)


def build_module():
    return AnsibleModule(**MODULE_OPTIONS)


def main():
    module = build_module()
    result = {"directories": [], "files": [], "links": []}
    try:
        run(module.params, module.check_mode, module._diff, result)
    except WriteError as exc:
        module.fail_json(msg="write_files: %s" % exc, changed=changed(result), **result)
    except OSError as exc:
        module.fail_json(msg="write_files: %s: %s (check the path, its permissions and the free space)" % (
            exc.filename or "", exc.strerror or exc), changed=changed(result), **result)
    module.exit_json(changed=changed(result), **result)


if __name__ == "__main__":
    main()
