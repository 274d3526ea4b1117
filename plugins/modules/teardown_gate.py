#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: teardown_gate
short_description: Refuse to stop a box's meter while a job runs, or unless every pull is verified and the box approved by name
version_added: 0.1.0
author:
  - remote_gpu.trainer maintainers (@remote-gpu)
description:
  - Runs on the controller (an action plugin) before the meter-stop verb of the platform profile.
  - The gate is open only when all of these hold, and each refusal names the condition that failed (and the job it
    is about).
  - No job of O(jobs) (every job under the host's run directory, as M(remote_gpu.trainer.job_status) reports them)
    is alive or starting (C(job_alive), naming each job with its items done of its share and its progress line), and
    the jobs could be listed (C(jobs_unknown) with O(jobs_error)).
  - For every run of O(runs) (each job's, or the hand roster's; or the one O(run_id)), the controller holds a
    C(PULL_VERIFIED.json) for this host and run (written by M(remote_gpu.trainer.pull_verify) only when roster,
    bytes, sha256 and checkpoint loadability all matched), it recorded no problem, it lists at least one file (a
    verified pull of nothing never opens the gate), and its manifest is the manifest the box has now. A run
    whose manifest could not be written is C(manifest_unknown), two runs with one run id are C(run_id_shared) (their
    pulls would share a directory), and no run at all is C(nothing_to_pull) unless O(no_results).
  - A C(PULL_VERIFIED.json) that is not a regular file (a directory, a FIFO, a device) or not a JSON object counts as
    absent, and is read up to 256 MiB only.
  - A person approved this host by name. A blanket word such as V(all) or V(yes) is refused.
  - The meter-stop command, when it is the way the meter is stopped, holds no unresolved C($VAR) placeholder from the
    profile.
  - Where the meter stop is irreversible (O(reversible=false) - a terminate or destroy deletes the data disk), no
    item of O(runs) keeps files in its output directory that the pull does not hold (C(outputs_left_behind), from
    the item's C(left_behind) of M(remote_gpu.trainer.pull_manifest), named by job, item, count, bytes and the first
    paths), unless O(leave_behind). A reversible stop keeps the data disk, so they are only reported
    (RV(left_behind)).
  - It decides how the meter is stopped (RV(stop_with)) - through the provider's API
    (M(remote_gpu.trainer.instance)) when O(api) names a provider, the instance's id is known and the key's
    environment variable is set on the controller; else with O(command) on the box; else by hand. A profile whose
    only verb is an API verb that cannot be used is refused (C(api_unusable)), naming the missing variable or id.
  - Fails the host when the gate is closed. In check mode it reports the refusals without failing.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
attributes:
  check_mode:
    support: full
    details: Reports what the gate would decide and changes nothing.
options:
  run_id:
    description:
      - The one run whose pull must be verified, with O(manifest_sha256) and O(reason). Not used with O(runs).
      - Empty or omitted without O(runs), the gate refuses (C(manifest_unknown)).
    type: str
  runs:
    description:
      - Every run whose pull must be verified, as M(remote_gpu.trainer.pull_manifest) returns them in
        RV(remote_gpu.trainer.pull_manifest#module:runs) (C(job), C(run_id), C(sha256) of the box's manifest now,
        empty when it could not be written, and C(msg), why). Replaces O(run_id) and O(manifest_sha256).
      - An empty list refuses (C(nothing_to_pull), or C(manifest_unknown) with O(reason)) unless a job is alive.
    type: list
    elements: dict
  pulls:
    description:
      - The results of the M(remote_gpu.trainer.pull_verify) loop over O(runs) (each with its C(item)), for the
        message of a pull that did not verify. Only read with O(runs).
    type: list
    elements: dict
    default: []
  jobs:
    description:
      - Every job under the host's run directory, as M(remote_gpu.trainer.job_status) without a job name reports
        them in its RV(remote_gpu.trainer.job_status#module:jobs); an alive one refuses the gate (C(job_alive)).
      - Omitted, liveness is not checked (the playbook always gives it).
    type: list
    elements: dict
  jobs_error:
    description: Why the jobs could not be listed (the failed job_status's message); refuses (C(jobs_unknown)).
    type: str
    default: ""
  run_dir:
    description: The host's run directory, named in the messages.
    type: str
    default: ""
  pull_root:
    description: Controller directory holding the pulls, as C(<pull_root>/<host>/<run_id>/).
    type: path
    default: pulls
  manifest_sha256:
    description: sha256 of the manifest the box has now (from M(remote_gpu.trainer.pull_manifest)); empty when unknown.
    type: str
    default: ""
  approve:
    description: Host names a person approved, as a comma-separated string or a list.
    type: raw
  command:
    description: The meter-stop argv from the profile, checked for unresolved placeholders.
    type: list
    elements: str
    default: []
  api:
    description:
      - The profile's API verb (C(trainer_meter_stop.api)); empty or omitted when the profile has none.
    type: dict
    suboptions:
      provider:
        description: The provider whose API stops the instance (as M(remote_gpu.trainer.instance) takes it).
        type: str
      id:
        description: The provider's id of the instance; the inventory plugins set it.
        type: str
      state:
        description: The state the verb brings the instance to (V(stopped) or V(absent)).
        type: str
      key_env:
        description: The controller's environment variable that holds the API key (only its presence is checked).
        type: str
  reversible:
    description:
      - Whether the meter stop keeps the data disk (the profile's C(trainer_meter_stop.reversible)). An irreversible
        one is refused over files left behind (C(outputs_left_behind)) unless O(leave_behind).
    type: bool
    default: false
  no_results:
    description:
      - Open the gate for a host with no job at all under its run directory (O(jobs) listed and empty, no run, no
        roster) without a pull - the person's word that the box holds no results (a rented box never launched on).
        Without it such a host is refused (C(nothing_to_pull)). A host with any job is judged as always.
    type: bool
    default: false
  leave_behind:
    description:
      - Stop the meter even though items keep files that the pull does not hold (the user's C(teardown_leave_behind);
        they are listed in RV(left_behind) and lost with an irreversible stop).
    type: bool
    default: false
  reason:
    description:
      - Why an earlier step failed, appended to the first refusal. With O(runs), only used when O(runs) is empty (the
        manifest step failed before it named a run).
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Check the teardown gate for every job of the host
  remote_gpu.trainer.teardown_gate:
    jobs: "{{ teardown_jobs.jobs }}"
    runs: "{{ teardown_manifest.runs }}"
    pulls: "{{ teardown_pull.results }}"
    approve: "{{ teardown_approve }}"
    command: "{{ trainer_meter_stop.command }}"
    api: "{{ trainer_meter_stop.api }}"

- name: Check the teardown gate for one run
  remote_gpu.trainer.teardown_gate:
    run_id: exp42
    manifest_sha256: "{{ manifest.sha256 }}"
    approve: "{{ teardown_approve }}"
    command: "{{ trainer_meter_stop.command }}"
    api: "{{ trainer_meter_stop.api }}"
"""

RETURN = r"""
open:
  description: Whether every condition holds.
  type: bool
  returned: always
  sample: false
refusals:
  description: Each failed condition, with a stable code and a message.
  type: list
  elements: dict
  returned: always
  sample: [{"code": "not_approved", "message": "lab-01 was not approved by name (approved: lab-02)"}]
approved:
  description: Whether the host was approved by name.
  type: bool
  returned: always
  sample: true
stop_with:
  description: How the meter is stopped once the gate is open - V(api), V(command) or V(manual); null when the run
    id is unknown.
  type: str
  returned: always
  sample: api
api:
  description: The API verb's C(provider), C(id) and C(state) when RV(stop_with) is V(api), else null.
  type: dict
  returned: always
  sample: {"provider": "runpod", "id": "fakepod0001", "state": "absent"}
api_problem:
  description: Why the profile's API verb cannot be used (a missing key variable or instance id), else null.
  type: str
  returned: always
  sample: the environment variable RUNPOD_API_KEY is not set on the controller
pull_dir:
  description: The controller directory of this host's pull when there is exactly one run, else null.
  type: str
  returned: always
  sample: pulls/lab-01/exp42
host_dir:
  description: The controller directory of this host's pulls (C(<pull_root>/<host>)), where teardown.yml writes
    C(TEARDOWN_RECEIPT.json).
  type: str
  returned: always
  sample: pulls/lab-01
left_behind:
  description:
    - Each item of O(runs) whose output directory keeps files that the pull does not hold, with its C(job),
      C(run_id), C(item) and the C(left_behind) of M(remote_gpu.trainer.pull_manifest) (C(dir), C(count),
      C(bytes), C(files), C(cut)).
  type: list
  elements: dict
  returned: always
  sample: [{"job": "exp2", "run_id": "exp2", "item": "001", "dir": "/root/autodl-tmp/outputs/exp2/001", "count": 2,
            "bytes": 5120, "files": ["metrics.json", "samples/0.png"], "cut": false}]
runs:
  description:
    - Each run checked, with its C(job) (null for a roster), C(run_id), C(manifest_sha256), C(pull_dir), and from its
      C(PULL_VERIFIED.json) C(file_count) and C(total_bytes). A run whose manifest is unknown is not listed.
  type: list
  elements: dict
  returned: always
  sample: [{"job": "exp2", "run_id": "exp2", "manifest_sha256": "5e88...", "pull_dir": "pulls/lab-01/exp2",
            "file_count": 4, "total_bytes": 1048576}]
"""
