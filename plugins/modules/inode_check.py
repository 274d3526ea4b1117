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
  - remote_gpu.trainer.attributes.read_only
  - remote_gpu.trainer.disk_thresholds
  - remote_gpu.trainer.fail_on
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

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.remote_gpu.trainer.plugins.module_utils import inode_check
from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import exit_by_fail_on, worst


class InodeCheckError(Exception):
    """Bad arguments or an unreadable filesystem, reported with fail_json by main()."""


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            paths=dict(type="list", elements="path", required=True),
            warn_pct=dict(type="int", default=85),
            fail_pct=dict(type="int", default=95),
            top=dict(type="int", default=5),
            budgets=dict(
                type="list", elements="dict", default=[],
                options=dict(
                    path=dict(type="path", required=True),
                    label=dict(type="str", default="projected need"),
                    bytes=dict(type="int", default=0),
                    inodes=dict(type="int", default=0),
                ),
            ),
            hf_cache=dict(type="str", default="~/.cache/huggingface"),
            hf_home=dict(type="str", default=""),
            durable_dir=dict(type="path", default=""),
            storage_tiers=dict(
                type="list", elements="dict", default=[],
                options=dict(
                    name=dict(type="str", default=""),
                    path=dict(type="path", required=True),
                    lost_on=dict(type="list", elements="str", default=[]),
                    survives=dict(type="list", elements="str", default=[]),
                    shared=dict(type="str"),
                    note=dict(type="str"),
                ),
            ),
            hf_cache_warn_gib=dict(type="int", default=10),
            fail_on=dict(type="str", choices=["FAIL", "WARN", "never"], default="FAIL"),
        ),
        supports_check_mode=True,
    )


def usage_of(path):
    try:
        return inode_check.usage_from_statvfs(path, os.statvfs(path))
    except (FileNotFoundError, NotADirectoryError):
        return inode_check.missing_usage(path)
    except OSError as exc:
        raise InodeCheckError("cannot read filesystem statistics of %s: %s" % (path, exc.strerror))


MAX_TOP = 1000


def validate(params):
    """Raise InodeCheckError for arguments that cannot describe a check."""
    if not 0 < params["warn_pct"] <= params["fail_pct"] <= 100:
        raise InodeCheckError("warn_pct (%d) and fail_pct (%d) must satisfy 0 < warn_pct <= fail_pct <= 100"
                              % (params["warn_pct"], params["fail_pct"]))
    if not 0 <= params["top"] <= MAX_TOP:
        raise InodeCheckError("top must be from 0 to %d (the number of largest inode consumers to list), got %d"
                              % (MAX_TOP, params["top"]))
    if not params["paths"]:
        raise InodeCheckError("paths is empty: give the storage tiers to check, for example the data disk")
    for number, path in enumerate(params["paths"], 1):
        if not path or not path.strip():
            raise InodeCheckError("paths entry %d is empty: give the path of a storage tier, or remove the entry "
                                  "(an unset profile variable?)" % number)
    for number, budget in enumerate(params["budgets"], 1):
        if not budget["path"] or not budget["path"].strip():
            raise InodeCheckError("budgets entry %d (%s) has an empty path: give a path on the filesystem the need "
                                  "applies to" % (number, budget["label"]))
        for key in ("bytes", "inodes"):
            if budget[key] < 0:
                raise InodeCheckError("budgets entry %d (%s): %s must be 0 or more, got %d" % (
                    number, budget["label"], key, budget[key]))
    if params["hf_cache_warn_gib"] < 0:
        raise InodeCheckError("hf_cache_warn_gib must be 0 or more, got %d" % params["hf_cache_warn_gib"])


def run(params):
    """Gather the report for the given module parameters; raises InodeCheckError."""
    validate(params)
    reports, findings = [], []
    for path in params["paths"]:
        usage = usage_of(path)
        usage["top"], usage["top_errors"] = [], []
        if usage["exists"] and params["top"] and os.path.isdir(path):
            usage["top"], usage["top_errors"] = inode_check.top_inode_consumers(path, params["top"])
        findings.extend(inode_check.threshold_findings(usage, params["warn_pct"], params["fail_pct"]))
        reports.append(usage)
    for budget in params["budgets"]:
        usage = usage_of(budget["path"])
        if not usage["exists"]:
            findings.extend(inode_check.threshold_findings(usage, params["warn_pct"], params["fail_pct"]))
            continue
        findings.extend(inode_check.budget_findings(usage, budget["label"], budget["bytes"], budget["inodes"]))
    findings.extend(inode_check.separation_findings(params["durable_dir"], params["storage_tiers"]))
    hf_cache, hf_home = hf_reports(params, findings)
    return {"status": worst(findings), "paths": reports, "findings": findings, "hf_cache": hf_cache,
            "hf_home": hf_home}


def hf_reports(params, findings):
    """The reports of ~/.cache/huggingface and of the profile's HF_HOME (the same one when they are one directory)."""
    home = os.path.expanduser("~")
    warn_bytes = params["hf_cache_warn_gib"] * 1024 ** 3
    hf_cache = hf_home = None
    if params["hf_cache"]:
        hf_cache = inode_check.hf_cache_report(os.path.expanduser(params["hf_cache"]), home)
        findings.extend(inode_check.hf_cache_findings(hf_cache, warn_bytes))
    if params["hf_home"]:
        path = os.path.expanduser(params["hf_home"])
        if hf_cache and os.path.realpath(path) == os.path.realpath(hf_cache["path"]):
            return hf_cache, hf_cache
        hf_home = inode_check.hf_cache_report(path, home)
        findings.extend(inode_check.hf_cache_findings(hf_home, warn_bytes, label="HF_HOME"))
    return hf_cache, hf_home


def main():
    module = build_module()
    try:
        result = run(module.params)
    except InodeCheckError as exc:
        module.fail_json(msg=str(exc), changed=False, status="FAIL", paths=[], findings=[], hf_cache=None,
                         hf_home=None)
    exit_by_fail_on(module, result, module.params["fail_on"])


if __name__ == "__main__":
    main()
