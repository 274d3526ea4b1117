#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: inode_check
short_description: Report bytes and inodes of storage tiers, with thresholds, budgets and the largest inode consumers
version_added: 0.1.0
author:
  - remote_gpu.trainer maintainers (@remote-gpu)
description:
  - Reports, for each path, the bytes and inodes of the filesystem that holds it (total, used, free, percent), as
    C(df) and C(df -i) would.
  - Rented boxes run out of inodes long before bytes (a durable FS with a cap of about 200K inodes fills up with
    per-sample evaluation images while C(df -h) shows a third used). This module checks both.
  - Returns findings with stable codes against thresholds, projected budgets (bytes and inodes a job will need),
    the largest inode consumers under each path, and where the Hugging Face cache lives and how big it is
    (C(hf_cache_large) when a big cache sits on the home disk instead of the data disk), for C(~/.cache/huggingface)
    and for the profile's C(HF_HOME).
  - Checks that the durable tier is a filesystem of its own, apart from the tiers the profile says are lost on some
    verb (C(durable_not_separate)).
  - Read-only. It never changes anything on the host.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
  - remote_gpu.trainer.probe
  - remote_gpu.trainer.disk_thresholds
options:
  paths:
    description:
      - The paths to report on, usually the storage tiers of the platform profile (data disk, durable FS, home).
      - A path that does not exist yields a C(path_missing) finding, not an error. An empty entry, or an empty
        list, is refused.
    type: list
    elements: path
    required: true
  top:
    description:
      - How many of the largest inode consumers (the direct children of each path, like C(du --inodes -d1)) to list.
      - C(0) skips the walk. The walk does not cross into other filesystems and does not follow symlinks.
      - At most 1000.
    type: int
    default: 5
  budgets:
    description:
      - Projected needs to check against free bytes and inodes, for example
        checkpoint bytes times the number of kept checkpoints plus scratch, or the number of files an export will write.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: A path on the filesystem the need applies to.
        type: path
        required: true
      label:
        description: What the need is for, used in messages.
        type: str
        default: projected need
      bytes:
        description: Bytes needed (0 or more).
        type: int
        default: 0
      inodes:
        description: Inodes (files and directories) needed (0 or more).
        type: int
        default: 0
  hf_cache:
    description:
      - The Hugging Face cache to audit. C(~) expands to the home of the remote user.
      - Set to an empty string to skip the audit.
    type: str
    default: ~/.cache/huggingface
  hf_home:
    description:
      - The profile's C(HF_HOME) (C(trainer_hf_home)), audited like O(hf_cache) and returned as RV(hf_home). Jobs
        download models there, so a big one on the home filesystem is also C(hf_cache_large). C(~) expands to the
        home of the remote user.
      - Empty, or the same directory as O(hf_cache), skips it.
    type: str
    default: ""
  durable_dir:
    description:
      - The durable tier (C(trainer_durable_dir)), checked against O(storage_tiers).
      - When it shares a filesystem with a tier that the profile says is lost on some verb (RunPod's container disk,
        when no Network Volume is mounted at C(/workspace)), that is the finding C(durable_not_separate) (WARN).
      - Empty skips the check.
    type: path
    default: ""
  storage_tiers:
    description:
      - The profile's C(trainer_storage_tiers). Only C(path), C(name), C(lost_on) and C(note) are used; tiers at the
        path of O(durable_dir) and tiers lost on nothing are not compared.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The tier's name, used in messages.
        type: str
        default: ""
      path:
        description: A path on the tier.
        type: path
        required: true
      lost_on:
        description: The verbs that destroy this tier (C(terminate), C(release), ...).
        type: list
        elements: str
        default: []
      survives:
        description: The verbs this tier survives (not used).
        type: list
        elements: str
        default: []
      shared:
        description: Who shares the tier (not used).
        type: str
      note:
        description: The profile's note, quoted in messages.
        type: str
  hf_cache_warn_gib:
    description:
      - Size from which a Hugging Face cache on the home filesystem (not moved to another disk) is a
        C(hf_cache_large) finding. 0 or more.
    type: int
    default: 10
notes:
  - Percentages are computed as C(df) does, C(used / (used + available)), rounded up.
  - Filesystems that do not track inodes (btrfs, many FUSE and network filesystems) report inode values as null.
"""

EXAMPLES = r"""
- name: Check the AutoDL storage tiers
  remote_gpu.trainer.inode_check:
    paths:
      - /root/autodl-tmp
      - /root/autodl-fs
      - /root
    fail_on: never
  register: storage

- name: Refuse to launch when ten checkpoints of 4 GiB and 150000 exported images do not fit
  remote_gpu.trainer.inode_check:
    paths: [/root/autodl-tmp, /root/autodl-fs]
    top: 0
    budgets:
      - path: /root/autodl-tmp
        label: 10 checkpoints x 4 GiB + 20 GiB scratch
        bytes: "{{ (10 * 4 + 20) * 1024 ** 3 }}"
      - path: /root/autodl-fs
        label: evaluation export
        inodes: 150000
"""

RETURN = r"""
status:
  description: The worst level among the findings; C(INFO) counts as C(PASS).
  type: str
  returned: always
  sample: WARN
paths:
  description: One entry per requested path, in the order given.
  type: list
  elements: dict
  returned: always
  sample:
    - path: /root/autodl-fs
      exists: true
      bytes_total: 214748364800
      bytes_used: 71582788267
      bytes_free: 143165576533
      bytes_pct: 34
      inodes_total: 200000
      inodes_used: 182000
      inodes_free: 18000
      inodes_pct: 91
      top:
        - path: /root/autodl-fs/eval_images
          inodes: 176003
      top_errors: []
findings:
  description: Problems found, each with a level, a stable code, the path, a message with the evidence and an action.
  type: list
  elements: dict
  returned: always
  sample:
    - level: WARN
      code: inodes_high
      path: /root/autodl-fs
      message: /root/autodl-fs has used 91% of its inodes (18000 free of 200000)
      action: Pack small files or delete per-sample outputs.
hf_home:
  description:
    - The same report as RV(hf_cache), for O(hf_home).
    - Null when O(hf_home) is empty; the same report as RV(hf_cache) when both are the same directory.
  type: dict
  returned: always
  sample:
    path: /root/autodl-tmp/huggingface_cache
    exists: true
    is_symlink: false
    target: /root/autodl-tmp/huggingface_cache
    other_filesystem: true
    bytes: 0
    files: 0
    models: []
hf_cache:
  description:
    - Where the Hugging Face cache lives, whether it is a symlink onto another filesystem, and its size.
    - Null when O(hf_cache) is empty.
  type: dict
  returned: always
  sample:
    path: /root/.cache/huggingface
    exists: true
    is_symlink: true
    target: /root/autodl-tmp/huggingface_cache
    other_filesystem: true
    bytes: 15032385536
    files: 112
    models:
      - name: models--meta-llama--Llama-3.1-8B
        bytes: 16060522496
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.remote_gpu.trainer.plugins.module_utils import storage_probe
from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import FAIL_ON_OPTION, run_check


def build_module():
    return AnsibleModule(argument_spec=dict(storage_probe.ARGUMENT_SPEC, fail_on=FAIL_ON_OPTION),
                         supports_check_mode=True)


def main():
    run_check(build_module(), storage_probe.run, storage_probe.InodeCheckError, storage_probe.empty_result)


if __name__ == "__main__":
    main()
