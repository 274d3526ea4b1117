#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pull_verify
short_description: Pull a result root to the controller with resumable rsync and verify it against the box's manifest
version_added: 0.1.0
author:
  - remote_gpu.trainer maintainers (@remote-gpu)
description:
  - Runs on the controller (an action plugin). Pulls the result root and its C(PULL_MANIFEST.json) with
    C(rsync --partial) over the host's own SSH settings into C(<pull_root>/<host>/<run_id>/).
  - Verifies the pull against the manifest. The roster must match exactly (nothing missing, nothing extra unless
    O(allow_extra)), and so must each file's bytes and sha256. Every checkpoint must load without torch.
    For PyTorch zip files that means zip CRCs, a C(data.pkl) and a pickle stream that parses. For safetensors
    the header JSON must parse and every tensor's offsets must lie within the file. C(torch.load(weights_only=True))
    is added when torch is importable.
  - Writes C(PULL_VERIFIED.json) (host, run id, manifest sha256, files, time, tool version) only when everything
    matches. It first removes an older one, so a failed re-verification cannot leave the teardown gate open.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
attributes:
  check_mode:
    support: full
    details: Reports what it would pull and verify; pulls and writes nothing.
options:
  src:
    description: The result root on the box.
    type: str
    required: true
  manifest_path:
    description: Path of the manifest on the box, as M(remote_gpu.trainer.pull_manifest) returned it.
    type: str
    required: true
  manifest_sha256:
    description: sha256 of the manifest on the box; the pulled copy must match it.
    type: str
    required: true
  run_id:
    description: The run id, part of the pull directory and recorded in C(PULL_VERIFIED.json).
    type: str
    required: true
  pull_root:
    description: Controller directory for pulls.
    type: path
    default: pulls
  allow_extra:
    description: Accept files in the pull that the roster does not list.
    type: bool
    default: false
  pull:
    description: Run rsync. V(false) only re-verifies what is already on the controller.
    type: bool
    default: true
  use_torch:
    description: Also C(torch.load(weights_only=True)) each checkpoint when torch is importable on the controller.
    type: bool
    default: true
  timeout:
    description: Seconds allowed for each rsync; a timed-out pull resumes on the next run.
    type: int
    default: 3600
notes:
  - Needs C(rsync) on the controller and on the box.
"""

EXAMPLES = r"""
- name: Pull the results and verify them against the manifest
  remote_gpu.trainer.pull_verify:
    src: /root/autodl-fs/runs/exp42
    manifest_path: "{{ manifest.manifest_path }}"
    manifest_sha256: "{{ manifest.sha256 }}"
    run_id: exp42
"""

RETURN = r"""
verified:
  description: Whether the pull matched the manifest and C(PULL_VERIFIED.json) was written.
  type: bool
  returned: always
  sample: true
problems:
  description: Each mismatch, with a code (C(missing), C(extra), C(size_mismatch), C(sha256_mismatch), C(not_loadable)), the path and a message.
  type: list
  elements: dict
  returned: always
  sample: [{"code": "sha256_mismatch", "path": "best.pt", "message": "sha256 differs"}]
pull_dir:
  description: Controller directory of this host's pull (C(data/), C(PULL_MANIFEST.json), C(PULL_VERIFIED.json)).
  type: str
  returned: always
  sample: pulls/lab-01/exp42
verified_path:
  description: Path of C(PULL_VERIFIED.json).
  type: str
  returned: always
  sample: pulls/lab-01/exp42/PULL_VERIFIED.json
manifest_sha256:
  description: sha256 of the verified manifest.
  type: str
  returned: success
  sample: 3a7bd3e2360a3d29eea436fcfb7e44c735d117c42d1c1835420b6b9942dd4f1b
"""
