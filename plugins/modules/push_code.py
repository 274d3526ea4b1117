#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: push_code
short_description: Push a code directory from the controller to the box with resumable rsync, and record its commit
version_added: 0.1.0
author:
  - remote_gpu.trainer maintainers (@remote-gpu)
description:
  - Runs on the controller (an action plugin). Copies O(src) to O(dest) on the box with
    C(rsync -a --partial --delete-after --itemize-changes) over the host's own SSH settings (port, key, user and
    C(ansible_ssh_common_args), as Ansible uses them), leaving out O(exclude).
  - With O(lib_dest), also copies the collection's O(lib_files) (stdlib-only C(module_utils) that jobs run on the
    box) into O(lib_dest), in the same task.
  - Reports changed only when rsync transferred or deleted something.
  - Records the commit of O(src) and whether its work tree has uncommitted changes (C(git rev-parse HEAD),
    C(git status --porcelain) on the controller), with the files that have them; all are null when O(src) is not a
    git work tree. Uncommitted changes give a warning that names the files; with O(require_clean) they fail the
    task before anything is pushed.
  - With O(record), then records what was pushed in a JSON file on the box (launch's C(code.json)), with the
    checksum of the pushed tree, the commit and dirty state above, O(src), and the torch version and CUDA build of
    the job's Python (read from C(torch/version.py) without importing torch). It runs launch's helpers, pushed into
    O(lib_dest), through the host's connection in one SSH execution, under the C locale. The file is rewritten only
    when the record changed, which then counts as a change. Not in check mode.
  - Refuses, before anything is pushed, when a script has CRLF (Windows) line endings, which bash on the box reads
    as part of each command (C(command not found) at the first line); it checks every C(*.sh) file of O(src)
    (outside C(.git) and O(exclude)) and every file of O(src) that O(command) names.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes
  - remote_gpu.trainer.attributes.platform
attributes:
  check_mode:
    support: full
    details: Runs rsync with C(--dry-run) and reports what would be transferred; transfers nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  src:
    description: The code directory on the controller; its contents land in O(dest).
    type: path
    required: true
  dest:
    description:
      - The absolute path of the directory on the box. Its parent must exist.
      - Everything in it that O(src) lacks is deleted (C(--delete-after)), so it must lie at least two levels deep
        (not C(/) nor C(/root)); on the controller itself (local connection) it must not be O(src), lie inside it,
        or hold it.
    type: str
    required: true
  exclude:
    description: rsync C(--exclude) patterns, also protected from C(--delete-after).
    type: list
    elements: str
    default: [.git]
  lib_dest:
    description: Absolute path of the directory on the box for O(lib_files); empty pushes none.
    type: str
    default: ""
  lib_files:
    description: File names under the collection's C(plugins/module_utils) to copy into O(lib_dest).
    type: list
    elements: str
    default: []
  require_clean:
    description: Fail, before anything is pushed, when the work tree of O(src) has uncommitted changes.
    type: bool
    default: false
  command:
    description:
      - The job's command (C(launch_command)); the files of O(src) that its words name (C(train.sh),
        C(scripts/run.sh), C(src/train.py)) are checked for CRLF line endings with the C(*.sh) files.
    type: str
    default: ""
  timeout:
    description: Seconds allowed for each rsync, more than 0; a timed-out push resumes on the next run (C(--partial)).
    type: int
    default: 3600
  record:
    description:
      - Where and how to record what was pushed, after the push (see the description). Needs O(lib_dest) and
        O(lib_files) with C(launch.py) and the helpers it imports.
    type: dict
    suboptions:
      path:
        description: Absolute path of the record on the box (launch's C(<job dir>/code.json)).
        type: str
        required: true
      interpreter:
        description: The box's Python that runs launch's helpers (C(trainer_interpreter)).
        type: str
        required: true
      python:
        description:
          - The job's Python, whose torch build is recorded (launch's C(<launch_env_prefix>/bin/python), else
            O(record.interpreter)).
        type: str
        required: true
      pythonpath:
        description:
          - Absolute path of the directory that holds the C(ansible_collections) tree of O(lib_dest) (launch's
            C(~/.trainer/lib)), put on C(PYTHONPATH).
        type: str
        required: true
notes:
  - Needs C(rsync) on the controller and on the box.
  - "Paths (the policy): every path handed to rsync is checked first: not empty, not C(/), without a newline, a NUL
    or a C(..) part, and absolute on the box (so it can never start with C(-) or depend on C(~)); rsync gets them
    after C(--) with C(--protect-args), so no path is read as an option or split by a shell."
"""

EXAMPLES = r"""
- name: Push the code
  remote_gpu.trainer.push_code:
    src: "{{ playbook_dir }}/.."
    dest: /root/autodl-tmp/code/train
    exclude: [.git, data/]
    command: bash train.sh
    require_clean: true
  register: push
"""

RETURN = r"""
changes:
  description: rsync's C(--itemize-changes) lines, one per file or directory transferred or deleted.
  type: list
  elements: str
  returned: always
  sample: [">f+++++++++ train.py", "*deleting   old.py"]
commit:
  description: The commit of O(src) (C(git rev-parse HEAD)); null when O(src) is not a git work tree.
  type: str
  returned: always
  sample: 3f2a9c1d0b7e4c6f9a8b7c6d5e4f3a2b1c0d9e8f
dirty:
  description: Whether the work tree of O(src) has uncommitted changes; null when it is not a git work tree.
  type: bool
  returned: always
  sample: false
dirty_files:
  description: The files of O(src) with uncommitted changes, as C(git status --porcelain) names them (modified,
    staged, deleted, untracked); null when O(src) is not a git work tree.
  type: list
  elements: str
  returned: always
  sample: [train.py, notes.txt]
uses_wandb:
  description:
    - Whether the code uses Weights & Biases, a dependency file at the top of O(src) (C(requirements*.txt),
      C(pyproject.toml), ...) naming C(wandb), or a Python file importing it; launch warns when such code would run
      wandb online without C(WANDB_API_KEY).
  type: bool
  returned: always
  sample: true
code:
  description:
    - The record written with O(record) (C(tree_sha256), C(files), C(bytes), C(commit), C(dirty),
      C(dirty_files), C(src), C(dest), C(torch)); null without O(record), in check mode, or when the push failed.
  type: dict
  returned: always
  sample: {"tree_sha256": "5e0b3f0c9d7a4b1e8f2c6a9d3e7b1f4a0c8d2e6b9f3a7c1d5e9b2f6a0d4c8e1b", "files": 12,
           "bytes": 40960, "commit": "3f2a9c1d0b7e4c6f9a8b7c6d5e4f3a2b1c0d9e8f", "dirty": false, "dirty_files": [],
           "src": "/home/me/proj", "dest": "/root/autodl-tmp/code/train",
           "torch": {"python": "/root/miniconda3/bin/python", "installed": true,
                     "location": "/root/miniconda3/lib/python3.10/site-packages/torch", "version": "2.5.1+cu124",
                     "cuda": "12.4", "hip": null, "build": "cuda", "reason": null}}
crlf_files:
  description: The scripts with CRLF line endings that made the task fail, relative to O(src).
  type: list
  elements: str
  returned: when a script has CRLF line endings
  sample: [train.sh]
dest:
  description: Where the code landed on the box.
  type: str
  returned: always
  sample: /root/autodl-tmp/code/train
msg:
  description: What was done, in words.
  type: str
  returned: always
  sample: pushed 3 change(s) to /root/autodl-tmp/code/train
"""
