#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: autopilot_decide
short_description: Decide, per host, what the autopilot does in this tick, then record what it did
version_added: 0.1.0
author:
  - remote_gpu.trainer maintainers (@remote-gpu)
description:
  - Runs on the controller (an action plugin), once per tick (C(run_once)), for every host the play targets.
    C(playbooks/autopilot.yml) calls it twice, with O(phase=decide) after the probe and O(phase=record) after
    the actions.
  - V(decide) reads each host's probe result (the variable O(probe_var), registered by
    M(remote_gpu.trainer.job_status) without a job name, so that it reports every job under the run directory),
    its history (C(<history_dir>/<host>.jsonl)), its opt-ins and limits
    (C(autopilot_heal), C(autopilot_autostop), C(autopilot_notify), C(autopilot_max_restarts),
    C(autopilot_idle_minutes), C(autopilot_unreachable_minutes)) and its profile's C(trainer_meter_stop), and
    returns one decision per host in RV(decisions). The rules are the pure functions of
    C(plugins/plugin_utils/autopilot.py).
  - Every job on the host is judged. A job that is gone (not alive, not starting) while its queue is incomplete
    is healed by name (C(heal_jobs)); a live job is never started again. A park needs every job's queue done
    (an item that exited 0 too fast, C(too_fast), is not done), no job alive or starting, every item's files
    durable, and the GPUs idle for C(autopilot_idle_minutes). Where the profile's C(trainer_park.keeps_data_disk)
    is true, files that are done but not durable do not prevent the park; the reason names them and the
    platform's C(trainer_park.release_days).
  - A park holds until a job runs again. A job alive, or a job whose C(last_start) or C(launched_epoch) (from
    its own records on the box) is newer than the park, ends it, and the jobs are judged again.
  - A decision's C(act) names the action to run on the box (V(heal), V(retry_sync) or V(park)); it is set only
    for a host opted in to it, never in check mode, and for V(park) only when the profile's verb is reversible
    and runs in the box, with no unresolved C($VAR) placeholder (C(open) is then true).
  - With C(autopilot_replace), a box its provider preempted and does not give back (after
    C(autopilot_replace_after_minutes) where it may), or one with a GPU finding at FAIL, gets C(act) V(replace)
    (rent a box with the spec of the rent's record C(reports/rent-*.json) that names its C(provider_id), then
    relaunch there), and later V(retire) (destroy it once through the API) when every item of its queue is
    pulled, durable on a tier that survives the instance, or finished on the replacement. Their outcomes are
    read from the host variables C(autopilot_replace_outcome) and C(autopilot_retire_outcome).
  - A V(replace) decision carries C(relaunch), what the relaunch on the replacement takes from the records launch
    wrote for the old box (O(launch_record_dir)). C(jobs) gives each job's record C(path), its share of the queue
    C(items) and C(queue_length); C(missing) names the jobs of the box's last queue snapshot that have no record,
    C(refused) the records that cannot drive a relaunch, with why, and C(dir) where they were read.
  - V(record) settles each decision with the outcome of its action (the variables O(heal_var), O(park_var) and
    O(park_api_var)),
    prints one line per host, appends one record per host to its history (C(kind) V(autopilot), with the
    decision under C(ap)), writes a receipt for each park into C(<report dir>/receipts/), writes the JSON report
    O(report_path) and returns the events of the state changes in RV(events), and those of the hosts opted in to
    C(autopilot_notify) in RV(notify_events).
  - It never fails the tick because of one host. A bad opt-in or limit is that host's C(config_error), with the
    variable named.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
attributes:
  check_mode:
    support: full
    details: In check mode no decision acts, and nothing is written but the report.
options:
  phase:
    description: V(decide) before the actions, V(record) after them.
    type: str
    choices: [decide, record]
    required: true
  probe_var:
    description: The variable that registered each host's M(remote_gpu.trainer.job_status) result.
    type: str
    default: autopilot_probe
  provider_var:
    description:
      - The variable that registered each host's M(remote_gpu.trainer.instance_info) result, where the tick asked the
        provider about a rented box that did not answer while its inventory said it runs (an inventory that
        C(playbooks/rent.yml) wrote keeps the state of the rent). Its C(facts) take the place of the inventory's
        C(provider_state) and the rest, so that a preemption is seen there as the provider inventory plugins see it.
    type: str
    default: provider_now
  history_dir:
    description:
      - The directory of the per-host history files (shared with patrol and preflight).
      - Omitted, C(history) next to O(report_path) (C(reports/history) by default), where patrol and preflight keep
        theirs.
    type: path
  launch_record_dir:
    description:
      - Where launch recorded each job it started on each box (C(<launch_record_dir>/<host>/<job>.json), the role
        P(remote_gpu.trainer.launch#role)'s C(launch_record_dir)), read with O(phase=decide) for each host to
        replace (at most 100 records of 1 MiB each; a link or a file that is not regular is refused, not followed).
      - The default is launch's own (C(launch_record_dir)); a relative path is taken from the directory the tick
        runs in, as launch takes it from the one it runs in.
    type: path
    default: reports/launches
  report_path:
    description: The JSON report of the tick (written by V(record), also in check mode).
    type: path
    default: reports/autopilot.json
  decisions:
    description: With O(phase=record), RV(decisions) of the V(decide) call of this tick.
    type: dict
    default: {}
  heal_var:
    description:
      - The variable that registered each host's heal (M(remote_gpu.trainer.detached_job) V(resumed)), a loop
        over the decision's C(heal_jobs), one result per job (C(item) the job's name).
    type: str
    default: autopilot_heal_result
  park_var:
    description: The variable that registered each host's park in the box (the profile's C(trainer_park.command)).
    type: str
    default: autopilot_park_result
  park_api_var:
    description: The variable that registered each host's park through the API (M(remote_gpu.trainer.instance)).
    type: str
    default: autopilot_park_api_result
"""

EXAMPLES = r"""
- name: Decide what to do on each host
  remote_gpu.trainer.autopilot_decide:
    phase: decide
  register: autopilot_plan
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
decisions:
  description:
    - One decision per host, by host name, with C(action) (none, heal, retry_sync, park, escalate, report,
      replace, retire),
      C(wanted) (what it would do when opted in), C(act) (what the playbook runs, or null), C(open), C(state),
      C(reason), C(item), C(job) (the job that leads the decision) and C(events).
    - C(jobs) lists the decision of each job on the host (C(job), C(state), C(action), C(wanted), C(reason),
      C(item), C(run)); absent when the jobs were not judged (unreachable, probe error, a park that holds).
      C(heal_jobs) names the jobs the heal restarts, by name. C(park_ended) says which job ended an earlier
      park.
  type: dict
  returned: always
  sample:
    lab-01: {action: heal, wanted: heal, act: heal, open: false, state: "gone:001", item: "001", job: exp2,
             heal_jobs: [exp2], reason: "job exp2 is gone at 1/3 items; item 001 was interrupted ...; job train
             running (3/5 items done)", jobs: [{job: exp2, state: "gone:001", action: heal}, {job: train,
             state: running, action: none}], events: []}
events:
  description: With O(phase=record), the events of every host's state change, C({host, kind, level, text}).
  type: list
  elements: dict
  returned: always
  sample: [{host: lab-01, kind: healed, level: WARN, text: "lab-01: job train is gone at 1/3 items ..."}]
notify_events:
  description: The RV(events) of the hosts opted in to C(autopilot_notify).
  type: list
  elements: dict
  returned: always
  sample: []
acting:
  description: With O(phase=decide), the hosts whose decision acts (C(act) set), sorted.
  type: list
  elements: str
  returned: always
  sample: [lab-01]
records_dir:
  description:
    - With O(phase=decide), the directory where the rents' records (C(rent-<name>.json)) are read, the report's
      (O(report_path)); a replacement's rent (C(autopilot_replace)) writes its own record there.
  type: str
  returned: when O(phase=decide)
  sample: /home/me/proj/reports
config_errors:
  description:
    - With O(phase=record), each host whose C(autopilot_*) settings were refused (state C(fail:config_error), where
      nothing is healed or stopped), each as the host, a colon and the reason. C(playbooks/autopilot.yml) fails the
      tick with them, after recording the decisions.
  type: list
  elements: str
  returned: always
  sample: ["lab-01: autopilot_idle_minutes must be a whole number of at least 1, got 0: nothing is healed or stopped on this host"]
notify_available:
  description: Whether the collection's M(remote_gpu.trainer.notify) action is installed.
  type: bool
  returned: always
  sample: true
history_warnings:
  description:
    - The history files that could not be read or written, each with the reason (a FIFO, a device or a symlink is
      skipped without being opened or followed; of a file larger than the bound only its last records are read).
  type: list
  elements: str
  returned: always
  sample: ["history file lab-01.jsonl skipped: lab-01.jsonl is a FIFO, not a regular file: not read"]
"""
