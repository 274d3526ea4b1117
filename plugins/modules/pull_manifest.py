#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pull_manifest
short_description: Write the roster, byte sizes and sha256 of a result root as an external manifest
version_added: 0.1.0
author:
  - remote_gpu.trainer contributors (@remote-gpu)
description:
  - Hashes every file of an expected roster under a result root on the target and writes the manifest
    (C(PULL_MANIFEST.json)) outside that root, so that the pull to the controller can be verified against it
    before teardown (exact roster, bytes, sha256).
  - Every roster entry must exist as a regular file; a missing entry fails the task and names the file.
  - The manifest lists at least one file; an empty roster is refused.
  - The manifest is written atomically (a temporary file in the same directory, fsync, then C(os.replace)). It is
    deterministic (sorted keys and paths, no timestamp), so an unchanged root gives C(changed=false).
  - "With O(job) instead of a roster (launch mode): the results that the C(remote_gpu.trainer.launch) role recorded
    for this host, with no hand-written roster. From the job's C(queue.json) (this host's share of the queue) and
    its items' status files, the manifest lists the files each item synced to the durable tier, with the bytes and
    sha256 recorded at sync time (checked for their size on the box, not hashed again), under C(durable/<item>/),
    and what would die with the box: the outputs on the data disk that never reached the durable tier (the
    unsynced files of an item whose sync failed, and the files matching the best patterns of an item that failed,
    never finished or ran with the sync off), hashed now, under C(unsynced/<item>/). Only this host's items are
    listed, so hosts that share a durable directory never see each other's files. This host's items are its share
    and those it ran for an earlier share of the same run (a relaunch over another host set moves items between
    hosts; their status files stay here): what they left on this box is listed too, so that tearing it down never
    loses it. A durable copy of such an item that changed since its sync (a shared durable directory, where the
    item's new host ran it again) is its new host's result and is left out (C(superseded)). A job that still runs
    is refused: stop it or wait for it."
  - "With O(jobs) (a list of job names, as teardown gives every job under O(run_dir)): the manifest of each job, as
    with O(job), written in its own job directory, in one run of the module. One job's refusal (it still runs, it
    has no launch record, none of its items left a file) does not stop the others: RV(runs) lists every job with
    its manifest or the reason it has none, and the task fails naming the jobs without one."
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
attributes:
  check_mode:
    support: full
    details: Hashes the roster and reports the manifest and whether it would change; writes nothing.
notes:
  - "Symbolic links: a roster entry may be a symbolic link (or lie under a linked directory) when the link, followed
    to the end, reaches a regular file inside O(root), as in C(best.pt -> epoch_10.pt). The manifest records it
    under its roster path with the bytes and sha256 of the file it points to, and M(remote_gpu.trainer.pull_verify)
    turns it into a real file in the pull. A link that leaves O(root), points to nothing or loops is refused and
    named, and nothing outside O(root) is read."
  - "Paths: roster entries are relative to O(root); an absolute entry, a C(..) component, a NUL byte, a newline or
    another control character is refused. A FIFO, a device, a socket or a directory on the roster is refused
    without being opened. Files in O(root) that are not on the roster are not read."
  - "Sizes: a O(roster_file) is a regular file of at most 16 MiB; a roster file that is a FIFO or a device is
    refused without reading it."
options:
  root:
    description:
      - The result root on the target; roster paths are relative to it. It cannot be V(/).
      - Required with O(roster) or O(roster_file); not used with O(job).
    type: path
  roster:
    description:
      - The files that must be pulled, as paths relative to O(root).
      - Exactly one of O(roster), O(roster_file), O(job) and O(jobs) is required.
    type: list
    elements: str
  roster_file:
    description:
      - A file on the target with one path relative to O(root) per line. Blank lines and lines starting with C(#)
        are ignored.
      - Exactly one of O(roster), O(roster_file), O(job) and O(jobs) is required.
    type: path
  job:
    description:
      - The name of a job that the launch role started (its C(launch_name)). The manifest then lists what launch
        recorded for this host (see the description). Exactly one of O(roster), O(roster_file), O(job) and O(jobs)
        is required.
    type: str
  jobs:
    description:
      - Several jobs that the launch role started, each manifest written as with O(job) (see the description);
        a name given twice counts once. An empty list is refused. O(manifest_path) is not used with it.
    type: list
    elements: str
  run_dir:
    description: The directory of the job directories, with O(job) or O(jobs) (launch's C(launch_run_dir)).
    type: path
    default: ~/.trainer/jobs
  manifest_path:
    description:
      - Where to write the manifest. It must lie outside O(root) (the task refuses otherwise).
      - Defaults to C(<dirname of root>/PULL_MANIFEST.<basename of root>.json), and with O(job) to
        C(PULL_MANIFEST.json) in the job directory.
    type: path
  run_id:
    description:
      - An identifier of the run, recorded in the manifest as C(run_id).
      - With O(job) it defaults to the run id that launch recorded, and a different one is refused (with O(jobs),
        for each job).
    type: str
  pull_left_behind:
    description:
      - With O(job) or O(jobs), list in the manifest (source C(unsynced), from the data disk) what each item left in
        its output directory beyond its best files and its log, so that it is pulled and verified with the rest
        instead of being reported in C(left_behind) (see RV(item_states)). An item whose walk was cut short keeps its
        C(left_behind). Every such file is hashed on the box.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Manifest of the durable result root before the pull
  remote_gpu.trainer.pull_manifest:
    root: /root/autodl-fs/runs/exp42
    roster:
      - best.pt
      - last.safetensors
      - metrics.json
    run_id: exp42
  register: pull

- name: What launch recorded for this host (its items' synced files, and the unsynced outputs on the data disk)
  remote_gpu.trainer.pull_manifest:
    job: train
  register: pull

- name: Every job of the host, each in its own manifest (what teardown.yml does)
  remote_gpu.trainer.pull_manifest:
    jobs: [train, exp2]
  register: pull

- name: Roster kept in a file; the manifest goes next to the root
  remote_gpu.trainer.pull_manifest:
    root: /workspace/runs/exp42
    roster_file: /workspace/runs/exp42.roster
    manifest_path: /workspace/runs/PULL_MANIFEST.exp42.json
"""

RETURN = r"""
manifest_path:
  description: Where the manifest is (or, in check mode, would be) written.
  type: str
  returned: always
  sample: /root/autodl-fs/runs/PULL_MANIFEST.exp42.json
manifest:
  description:
    - The manifest, as written; C(files) is sorted by path. Empty on failure.
  type: dict
  returned: always
  sample:
    version: 1
    root: /root/autodl-fs/runs/exp42
    run_id: exp42
    files:
      - {"path": "best.pt", "bytes": 1048576, "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
    total_bytes: 1048576
sha256:
  description: sha256 of the manifest file's bytes. Empty on failure.
  type: str
  returned: always
  sample: 5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8
total_bytes:
  description: Sum of the bytes of the files in the manifest.
  type: int
  returned: always
  sample: 1048576
file_count:
  description: Number of files in the manifest.
  type: int
  returned: always
  sample: 3
run_id:
  description: The run id recorded in the manifest (with O(job), launch's).
  type: str
  returned: always
  sample: exp42
item_states:
  description:
    - With O(job), each item of this host's share with its state (C(done), C(sync_failed), C(failed) or
      C(not_finished)) and how many of its files come from the durable tier and from the data disk (C(unsynced)), then
      each item this host ran for an earlier share of the run, with C(earlier=true) and C(superseded) (its durable
      copies left out because they changed since its sync). Empty otherwise.
    - An item whose output directory keeps files that the manifest does not list (neither a best pattern nor the
      item's log, outside the scratch entries the run wrapper prunes) has C(left_behind) - C(dir), C(count), C(bytes),
      C(files) (the first five paths, relative to C(dir)) and C(cut) (the walk stopped after 20000 entries; a symlink
      is neither followed nor counted). They stay on the box; M(remote_gpu.trainer.teardown_gate) refuses an
      irreversible meter stop over them unless told to leave them.
  type: list
  elements: dict
  returned: always
  sample: [{"item": "000", "state": "done", "durable": 2, "unsynced": 0, "left_behind": {
      "dir": /root/autodl-tmp/outputs/train/000, "count": 2, "bytes": 5120, "files": [metrics.json, samples/0.png],
      "cut": false}}]
runs:
  description:
    - Every run the manifests describe, one per job with O(jobs) (in the order given), else the one run. Each has
      C(job) (null with a roster), C(run_id) (null when it could not be read), C(manifest_path), C(sha256) of the
      manifest (empty when it could not be written), C(file_count), C(total_bytes), C(item_states) (as
      RV(item_states)), C(changed) and C(msg) (a summary, or what is wrong and what to do).
    - M(remote_gpu.trainer.pull_verify) pulls each run with a C(sha256), and M(remote_gpu.trainer.teardown_gate)
      takes the list as it is.
  type: list
  elements: dict
  returned: always
  sample:
    - {job: train, run_id: train, manifest_path: /root/.trainer/jobs/train/PULL_MANIFEST.json, sha256: 5e88...,
       file_count: 4, total_bytes: 1048576, item_states: [{item: "000", state: done, durable: 2, unsynced: 0}],
       changed: true, msg: "manifest of 4 file(s), 1048576 bytes"}
    - {job: exp2, run_id: exp2, manifest_path: "", sha256: "", file_count: 0, total_bytes: 0, item_states: [],
       changed: false, msg: "job exp2 is still running on this host: its results are not final. ..."}
msg:
  description: A summary; on failure, what is wrong and what to do.
  type: str
  returned: always
  sample: manifest of 3 file(s), 1048576 bytes
"""

import hashlib
import os
import stat

from ansible_collections.remote_gpu.trainer.plugins.module_utils.log_safe import LogSafeModule
from ansible_collections.remote_gpu.trainer.plugins.module_utils import job_layout, launch_results
from ansible_collections.remote_gpu.trainer.plugins.module_utils.atomic import write_atomic
from ansible_collections.remote_gpu.trainer.plugins.module_utils.digest import file_kind, open_regular
from ansible_collections.remote_gpu.trainer.plugins.module_utils.manifest import (
    ManifestError,
    build_manifest,
    inside as mf_inside,
    manifest_bytes,
    read_roster_file,
)


def default_manifest_path(root):
    return os.path.join(os.path.dirname(root), "PULL_MANIFEST.%s.json" % os.path.basename(root))


def inside(path, root):
    return mf_inside(os.path.realpath(path), os.path.realpath(root))


def check_path(label, value):
    """``value`` unless it holds a control character, which no path option may (ManifestError)."""
    if any(ord(char) < 32 or ord(char) == 127 for char in value):
        raise ManifestError("%s %r holds a control character (NUL, newline, ...); give a plain path" % (label, value))
    return value


def current_bytes(path):
    try:
        with open_regular(path) as handle:
            return handle.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


def roster_manifest(_module, params):
    """(manifest, default manifest path, the root it must lie outside) of a hand-written roster."""
    if not params["root"]:
        raise ManifestError("root is required with roster or roster_file: give the run's result directory")
    root = os.path.normpath(check_path("root", params["root"]))
    if not os.path.isdir(root):
        raise ManifestError("root %s is not a directory" % root)
    if os.path.realpath(root) == os.sep:
        raise ManifestError("root %s is the whole filesystem; give the run's result directory" % root)
    roster = (params["roster"] if params["roster"] is not None
              else read_roster_file(check_path("roster_file", params["roster_file"])))
    manifest = build_manifest(root, roster)
    manifest["run_id"] = params["run_id"]
    return manifest, default_manifest_path(root), [root], []


def job_manifest(module, params, name=None, run_dir=None):
    """(manifest, default manifest path, roots, items) of what launch recorded for this host's job (``name``, by
    default the option job)."""
    if params["root"]:
        raise ManifestError("root is not used with job or jobs: the roots are the ones launch recorded; drop root, or "
                            "give a roster instead")
    name = name or params["job"]
    if job_layout.name_problem(name):
        raise ManifestError(job_layout.name_problem(name))
    paths = job_layout.job_paths(run_dir or job_layout.resolve_run_dir(check_path("run_dir", params["run_dir"]),
                                                                       ManifestError), name)
    queue, problem = job_layout.read_queue(paths)
    if queue is None:
        raise ManifestError(problem or "%s does not exist: job %s was not started by the launch role on this host "
                            "(or run_dir is not launch_run_dir); give a roster and a root instead" % (
                                paths["queue_file"], name))
    _pid, alive = job_layout.liveness(paths, lambda: job_layout.tmux_has_session(
        module.run_command, module.get_bin_path("tmux"), name))
    if alive:
        raise ManifestError("job %s is still running on this host: its results are not final. Wait until patrol "
                            "says DONE, or stop it with remote_gpu.trainer.detached_job (state: stopped), then "
                            "tear down" % name)
    recorded = queue.get("run_id")
    if params["run_id"] and params["run_id"] != recorded:
        raise ManifestError("run_id %s is not the run of job %s on this host, which launch recorded as %s" % (
            params["run_id"], name, recorded))
    try:
        statuses = launch_results.read_statuses(paths, queue)
        # with what this host ran for an earlier share of the run (a relaunch over another host set)
        queue, earlier = launch_results.earlier_share(paths, queue)
        statuses.update(earlier)
        manifest, wanted = launch_results.build(queue, statuses, pull_left=params["pull_left_behind"])
    except OSError as exc:
        raise ManifestError("cannot read a result of job %s: %s" % (name, exc)) from exc
    manifest["run_id"] = recorded
    return manifest, os.path.join(paths["job_dir"], "PULL_MANIFEST.json"), \
        [source["root"] for source in manifest["sources"]], wanted["items"]


def run(module, result):
    """Build the manifest and write it unless it is unchanged. Fills ``result``; raises ManifestError (only)."""
    params = module.params
    build = job_manifest if params["job"] else roster_manifest
    manifest, default_path, roots, items = build(module, params)
    write(module, manifest, check_path("manifest_path", params["manifest_path"] or default_path), roots, items, result)


def write(module, manifest, path, roots, items, result):
    """Write ``manifest`` at ``path`` (outside every root) unless it is unchanged; fills ``result``."""
    result.update(manifest_path=path, item_states=items, run_id=manifest.get("run_id"))
    for root in roots:
        if inside(path, root):
            raise ManifestError("manifest_path %s lies inside root %s; write it outside the root so that it is not "
                                "part of what it describes" % (path, root))
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        raise ManifestError("manifest_path %s is a %s, not a regular file; give a file path outside the root"
                            % (path, file_kind(mode)))
    data = manifest_bytes(manifest)
    result.update(manifest=manifest, sha256=hashlib.sha256(data).hexdigest(),
                  total_bytes=manifest["total_bytes"], file_count=len(manifest["files"]))
    try:
        if current_bytes(path) == data:
            return
        result["changed"] = True
        if not module.check_mode:
            write_atomic(path, data)
    except OSError as exc:
        raise ManifestError("failed to write %s: %s; free space there or choose another manifest_path"
                            % (path, exc)) from exc


def summary(result):
    msg = "manifest of %d file(s), %d bytes" % (result["file_count"], result["total_bytes"])
    if result["item_states"]:
        msg += " from launch's record of items %s" % ", ".join(
            "%s (%s%s)" % (item["item"], item["state"], ", an earlier share" if item.get("earlier") else "")
            for item in result["item_states"])
    behind = [launch_results.left_behind_line(item["item"], item["left_behind"]) for item in result["item_states"]
              if item.get("left_behind")]
    if behind:
        msg += "; left on the box, not pulled: %s" % "; ".join(behind)
    return msg


RUN_KEYS = ("run_id", "manifest_path", "sha256", "file_count", "total_bytes", "item_states", "changed")


def run_entry(job, result):
    """One entry of ``runs`` from a result of run() or write()."""
    return dict(dict((key, result[key]) for key in RUN_KEYS), job=job, msg=result["msg"])


def empty_run(job=None, run_id=None):
    return dict(job=job, run_id=run_id, manifest_path="", sha256="", file_count=0, total_bytes=0, item_states=[],
                changed=False, msg="")


def run_jobs(module, result):
    """The manifest of every job of the option jobs, each written in its job directory; fills ``result["runs"]``
    (one entry per job, with its manifest or the reason it has none) and returns the entries that failed."""
    params = module.params
    if params["manifest_path"]:
        raise ManifestError("manifest_path is not used with jobs: each job's manifest is written in its job directory")
    names = list(dict.fromkeys(params["jobs"]))
    if not names:
        raise ManifestError("jobs is empty: name at least one job (teardown gives every job under run_dir)")
    run_dir = job_layout.resolve_run_dir(check_path("run_dir", params["run_dir"]), ManifestError)
    for name in names:
        entry = dict(empty_run(name), manifest={})
        try:
            manifest, default_path, roots, items = job_manifest(module, params, name, run_dir)
            write(module, manifest, default_path, roots, items, entry)
            entry["msg"] = summary(entry)
        except ManifestError as exc:
            entry.update(empty_run(name, entry.get("run_id")), msg="job %s: %s" % (name, exc))
        entry.pop("manifest", None)
        result["runs"].append(run_entry(name, entry))
    result["changed"] = any(entry["changed"] for entry in result["runs"])
    return [entry for entry in result["runs"] if not entry["sha256"]]


# AnsibleModule's keyword arguments; the pull_manifest action validates a task's arguments against them on the
# controller when it runs this module without AnsiballZ (plugin_utils/direct)
MODULE_OPTIONS = dict(
    argument_spec=dict(
        root=dict(type="path"),
        roster=dict(type="list", elements="str"),
        roster_file=dict(type="path"),
        job=dict(type="str"),
        jobs=dict(type="list", elements="str"),
        run_dir=dict(type="path", default=job_layout.DEFAULT_RUN_DIR),
        manifest_path=dict(type="path"),
        run_id=dict(type="str"),
        pull_left_behind=dict(type="bool", default=False),
    ),
    mutually_exclusive=[("roster", "roster_file", "job", "jobs")],
    required_one_of=[("roster", "roster_file", "job", "jobs")],
    supports_check_mode=True,
)


def build_module():
    module = LogSafeModule(**MODULE_OPTIONS)
    module.run_command_environ_update = {"LANG": "C", "LC_ALL": "C", "LANGUAGE": "C"}
    return module


def main():
    module = build_module()
    result = dict(changed=False, manifest_path="", manifest={}, sha256="", total_bytes=0, file_count=0, run_id=None,
                  item_states=[], runs=[], msg="")
    if module.params["jobs"] is not None:
        try:
            failed = run_jobs(module, result)
        except ManifestError as exc:
            result["msg"] = "pull_manifest failed: %s" % exc
            module.fail_json(**result)
        result["msg"] = "; ".join("%s: %s" % (entry["job"], entry["msg"]) if entry["sha256"] else entry["msg"]
                                  for entry in result["runs"])
        if failed:
            result["msg"] = "pull_manifest failed for job(s) %s: %s" % (
                ", ".join(entry["job"] for entry in failed), result["msg"])
            module.fail_json(**result)
        module.exit_json(**result)
    try:
        run(module, result)
    except ManifestError as exc:
        result.update(changed=False, manifest={}, sha256="", total_bytes=0, file_count=0)
        result["msg"] = "pull_manifest failed: %s" % exc
        result["runs"] = [dict(empty_run(module.params["job"], result["run_id"] or module.params["run_id"]),
                               msg=result["msg"])]
        module.fail_json(**result)
    result["msg"] = summary(result)
    result["runs"] = [run_entry(module.params["job"], result)]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
