#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: checked_sync
short_description: Atomic, verified copy of results to durable storage, with a budget check first
version_added: 0.1.0
author:
  - remote_gpu.trainer contributors (@remote-gpu)
description:
  - Copies a file or a directory tree on the target to a directory on the durable storage tier, and reports
    success only after every copied file has been read back from the destination and its sha256 matches the source.
  - Before anything is written it works out which files must be copied (the destination is missing, or differs in
    size or sha256) and checks that the free bytes and free inodes of the destination filesystem suffice. If they do
    not, the task fails with the numbers and writes nothing.
  - Each file is written to a temporary name in its destination directory (C(.<name>.checked_sync.<random>.tmp)),
    hashed while it is copied (the source is read once), flushed with fsync, read back and compared, then renamed
    over the destination with C(os.replace) and the directory is flushed. On any error (disk full, quota, mismatch,
    permission) the temporary file is removed, the previous durable copy is left as it was, and the task fails.
  - Idempotent. A destination file is unchanged when its size and its sha256 equal the source's. After a verified
    copy the module records both files' device, inode, size, mtime and ctime (under
    C(~/.cache/remote_gpu.trainer/checked_sync/)); a re-run skips reading a file whose source and copy are both
    exactly as recorded (O(unchanged_check=stat)), so an unchanged sync costs a few C(stat) calls, not two hashes.
  - Nothing is ever deleted from O(dest); files there that are not in O(src) are left alone.
  - "Symbolic links (the policy): a selected link whose target, fully resolved, is a regular file inside O(src)
    is copied as a regular file with its target's content (so C(best.pt -> epoch_10.pt) lands as real bytes). A
    selected link whose target lies outside O(src) (C(../../.ssh/id_rsa), C(/etc/passwd)), dangles, or loops fails
    the task before anything is written, naming the link: what it points to is never read. A link that O(include)
    does not select is never resolved. Symbolic links to directories are never followed (the files inside O(src)
    are copied by their real paths), and special files (FIFOs, sockets, devices) are never opened; both are listed
    in RV(left_out). O(src) itself may be a link: it is resolved once, and \"inside O(src)\" means inside its
    target."
  - A link or a special file in O(dest) at the place of a selected file is never written through; a link is
    replaced by the verified regular file, a FIFO, socket or device fails the task.
  - Mode bits and modification times are copied when the destination filesystem allows it (best effort; the
    content is what is verified).
  - A run killed with SIGKILL can leave a C(.*.checked_sync.*.tmp) file behind; it is never a durable copy and can
    be deleted.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
attributes:
  check_mode:
    support: full
    details: Plans, checks the budget and hashes the sources; reports what would be copied and writes nothing.
options:
  src:
    description:
      - An absolute path of a file or a directory on the target; not empty, not C(/).
      - A file lands as O(dest)/<basename of src>.
      - A directory's contents land under O(dest) with the same relative paths, so C(src/a/b.pt) becomes
        C(dest/a/b.pt); the directory O(src) itself is not recreated inside O(dest).
    type: path
    required: true
  dest:
    description:
      - The absolute path of the destination directory on the durable tier. It and any missing parents are created.
      - Must not be C(/), a file, O(src) or lie inside it.
    type: path
    required: true
  include:
    description:
      - Shell-style patterns (Python C(fnmatch), case-sensitive) matched against each file's path relative to
        O(src), for example C(*.pt) or C(best/*). C(*) also matches C(/). For a file O(src) the relative path is
        its basename.
      - A file is copied when any pattern matches. When omitted, every file is copied.
      - A pattern that can never match (empty, starting with C(/), or with a C(..) part) fails the task.
      - When no file is selected at all the task fails (a sync that selects nothing is never reported as success).
    type: list
    elements: str
  min_free_inodes:
    description: Inodes that must still be free on the destination filesystem after the copy.
    type: int
    default: 0
  reserve_bytes:
    description: Bytes that must still be free on the destination filesystem after the copy.
    type: int
    default: 0
  unchanged_check:
    description:
      - How a re-run decides that an existing destination file is unchanged.
      - V(stat) trusts the record of the last verified copy when both files still have the same device, inode,
        size, mtime and ctime (a rewrite changes ctime, which users cannot set back); anything else is hashed.
        Silent corruption of the copy after it was verified is not seen by a re-run; the teardown's pull
        verification hashes every file.
      - V(content) always compares sha256 on both sides.
    type: str
    choices: [stat, content]
    default: stat
notes:
  - Free space is what an unprivileged user may use (statvfs C(f_bavail), C(f_favail)). File sizes are rounded up to
    whole blocks and each new directory counts one block and one inode; one more inode is counted for the temporary
    file. A replaced file's old copy is not counted as freed.
  - When the filesystem reports no inode count (statvfs C(f_files) is 0, for example btrfs), only bytes are checked.
  - The read-back asks the kernel to drop the cached pages first (C(posix_fadvise) DONTNEED) where that is available,
    so it reads what the filesystem stored rather than what is still in memory.
  - If a source file changes while it is copied (a checkpoint still being written), the task fails; run it again when
    the writer is done. A change is seen when the source's device, inode, size, mtime or ctime differ between the
    plan and the end of the copy (a rewrite in place changes ctime even when the writer restores mtime), and a
    source of at most 64 MiB is also read a second time and must hash the same (the kernel stamps ctime with a
    coarse clock, so a rewrite within one tick of the previous change can keep it).
"""

EXAMPLES = r"""
- name: Copy the best checkpoints to the durable tier, verified
  remote_gpu.trainer.checked_sync:
    src: "{{ trainer_data_dir }}/runs/exp42"
    dest: "{{ trainer_durable_dir }}/runs/exp42"
    include:
      - "best*.pt"
      - "*.json"
    min_free_inodes: 1000
    reserve_bytes: 1073741824

- name: Copy one file; it lands as /root/autodl-fs/final/model.safetensors
  remote_gpu.trainer.checked_sync:
    src: /root/autodl-tmp/out/model.safetensors
    dest: /root/autodl-fs/final

- name: What would be copied (writes nothing)
  remote_gpu.trainer.checked_sync:
    src: /root/autodl-tmp/out
    dest: /root/autodl-fs/out
  check_mode: true
  register: plan
"""

RETURN = r"""
changed:
  description: Whether any file was (or, in check mode, would be) copied.
  type: bool
  returned: always
  sample: true
copied:
  description:
    - The files copied and verified in this run (in check mode, those that would be copied), relative to O(dest).
    - On failure, the files that were completed before the failure; they are verified durable copies.
  type: list
  elements: dict
  returned: always
  sample: [{"path": "best.pt", "bytes": 1048576, "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}]
unchanged:
  description:
    - Relative paths of the files whose destination was already identical (size and sha256), so not copied.
    - Named C(unchanged), not C(skipped), because Ansible marks any task whose result has a true C(skipped) key as
      skipped.
  type: list
  elements: str
  returned: always
  sample: ["config.json"]
bytes_copied:
  description: Sum of the bytes of RV(copied).
  type: int
  returned: always
  sample: 1048576
files:
  description:
    - Every selected file, relative to O(dest), with the sha256 of its source.
    - C(sha256) is null for a file that was not read, for example when the budget check failed.
  type: list
  elements: dict
  returned: always
  sample:
    - {"path": "best.pt", "bytes": 1048576, "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
    - {"path": "config.json", "bytes": 2, "sha256": "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"}
left_out:
  description:
    - Entries under O(src) that are not copied because they are not regular files, each with the reason
      (C(path) relative to O(src), C(reason)). Symbolic links to directories are listed whether or not O(include)
      selects them; FIFOs, sockets, devices and links to them only when selected.
  type: list
  elements: dict
  returned: always
  sample: [{"path": "data", "reason": "symbolic link to a directory (/datasets/imagenet), not followed"}]
dest:
  description: The destination directory.
  type: str
  returned: always
  sample: /root/autodl-fs/runs/exp42
free_bytes:
  description: Free bytes on the destination filesystem, measured last (after the copy, or when it failed). Null if
    it could not be measured.
  type: int
  returned: always
  sample: 52428800000
free_inodes:
  description: Free inodes on the destination filesystem, measured last. Null when the filesystem reports none.
  type: int
  returned: always
  sample: 183200
msg:
  description: What happened, with the numbers; on failure, what went wrong and what to do.
  type: str
  returned: always
  sample: copied and verified 1 file(s) (1 048 576 bytes) into /root/autodl-fs/runs/exp42, 1 unchanged
"""

from ansible_collections.remote_gpu.trainer.plugins.module_utils.log_safe import LogSafeModule
from ansible_collections.remote_gpu.trainer.plugins.module_utils import sync as sync_core
from ansible_collections.remote_gpu.trainer.plugins.module_utils.command import C_LOCALE

# The plan, budget check, copy and verification live in module_utils/sync.py, shared with the run wrapper that
# launch ships to the box (which calls sync_core.cli).


def build_module():
    module = LogSafeModule(
        argument_spec=dict(
            src=dict(type="path", required=True),
            dest=dict(type="path", required=True),
            include=dict(type="list", elements="str"),
            min_free_inodes=dict(type="int", default=0),
            reserve_bytes=dict(type="int", default=0),
            unchanged_check=dict(type="str", choices=["stat", "content"], default="stat"),
        ),
        supports_check_mode=True,
    )
    module.run_command_environ_update = dict(C_LOCALE)
    return module


def main():
    module = build_module()
    result = sync_core.empty_result(module.params["dest"])
    try:
        sync_core.run_sync(module, result)
    except sync_core.SyncError as exc:
        module.fail_json(**sync_core.failed_result(result, exc))
    module.exit_json(**sync_core.remeasure(result))


if __name__ == "__main__":
    main()
