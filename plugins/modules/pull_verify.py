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
  - A manifest that lists no files is refused, so a verified pull always holds at least one file.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
attributes:
  check_mode:
    support: full
    details: Reports what it would pull and verify; pulls and writes nothing.
options:
  src:
    description:
      - The result root on the box, pulled whole (C(rsync -a --delete)).
      - Required for a manifest of one root. A manifest of several sources (M(remote_gpu.trainer.pull_manifest)
        with O(remote_gpu.trainer.pull_manifest#module:job)) names its roots itself, and O(src) is ignored.
    type: str
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
    description:
      - Accept files in the pull that the roster does not list.
      - A manifest of several sources always accepts them. Only its listed files are pulled (C(rsync
        --files-from)), so an extra file is one left by an earlier pull, or the target of a listed link.
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
  - "Order: the manifest is pulled first and checked against O(manifest_sha256), then the files. A manifest of
    several sources is pulled source by source into C(data/<label>/) (C(data/durable/000/best.pt),
    C(data/unsynced/001/best.pt)), only the files it lists."
  - "Paths: O(src) and O(manifest_path) must be absolute paths on the box, not C(/), with no C(..) part, newline or
    NUL; they reach rsync after C(--), never as options. The pull recreates no device or special file and copies no
    link that leaves the result root."
  - "Symbolic links: a verified pull holds real files with the manifest's bytes. A roster entry that arrives as a
    symbolic link (C(best.pt -> epoch_10.pt)), or under a linked directory, whose target is a regular file inside
    the pull is replaced by a real file (a hard link to that file, or a copy) before the comparison. A roster
    entry that is still a link, because it leads outside the pull or to nothing, is the problem C(symlink) and is
    never read. Links, FIFOs and devices that are not on the roster are C(extra) (unless O(allow_extra)) and are
    not read either."
  - "Loadability: a pickle in a checkpoint may reference only the globals that C(torch.load(weights_only=True))
    allows by default (torch's tensor, storage and dtype types, its rebuild functions, C(collections.OrderedDict),
    C(builtins.set) and a few more). Any other global, such as C(os.system), makes the file C(not_loadable) and
    the message names it. Nothing is imported or executed."
  - "Sizes: a compressed zip member that declares more than 256 MiB is refused without inflating it (torch.save
    stores members uncompressed); a C(data.pkl) over 1 GiB is not walked; a safetensors header length over
    100 MB (the cap of the reference implementation) is refused; a pulled manifest over 256 MiB is refused."
  - "Paths: O(pull_root) must be writable. A C(data) that is a file or a link, and a C(PULL_VERIFIED.json) that is a
    directory, fail with what to remove."
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
  description:
    - Each mismatch, with a code, the path and a message.
    - The codes are C(missing), C(extra), C(symlink) (a roster path that is a link in the pull), C(not_a_file)
      (a FIFO, device or directory on a roster path), C(size_mismatch), C(sha256_mismatch) and C(not_loadable).
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
