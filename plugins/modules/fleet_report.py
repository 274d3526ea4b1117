#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_report
short_description: Print the fleet table and write the JSON report of a preflight or patrol run
version_added: 0.1.0
author:
  - remote_gpu.trainer maintainers (@remote-gpu)
description:
  - Runs on the controller (an action plugin). Collects one row per host from a host variable that the probing
    play set, prints a fixed-width table (host, platform, GPUs, verdict, data disk %bytes and %inodes, durable FS
    %inodes, top finding), and writes the rows to a JSON report.
  - A host without a row (unreachable, or failed before the probe) is reported as C(NO_RESULT) instead of being
    dropped silently.
  - Fails when a host is C(FAIL), C(UNREACHABLE) or C(NO_RESULT), and also on C(WARN) with O(strict).
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
attributes:
  check_mode:
    support: full
    details: Nothing on the hosts is changed; the report on the controller is written in check mode too, as output.
options:
  hosts:
    description: The hosts of the run, usually C(ansible_play_hosts_all) of the probing play.
    type: list
    elements: str
    required: true
  record_var:
    description:
      - Name of the host variable holding what the probing play recorded for each host, a dict with C(platform),
        C(data_dir), C(durable_dir), C(storage) (an M(remote_gpu.trainer.inode_check) result), C(gpu) (a
        M(remote_gpu.trainer.gpu_health) result), and C(findings) (all findings of the host); or C(unreachable=true)
        and C(msg).
      - The verdict is the worst finding level; the top finding is the first finding at that level.
    type: str
    required: true
  report_path:
    description: Where to write the JSON report on the controller. Omit to write none.
    type: path
  strict:
    description: Fail on C(WARN) as well.
    type: bool
    default: false
  title:
    description: Name of the run, printed under the table and stored in the report.
    type: str
    default: fleet
  fail_run:
    description: Fail the task when a host is not fit. V(false) only prints and reports (the rows then show the verdicts).
    type: bool
    default: true
  kind:
    description:
      - V(preflight) reads O(record_var) as a preflight record and prints the preflight columns.
      - >-
        V(patrol) reads O(record_var) as the raw result of a M(remote_gpu.trainer.job_status) task (unreachable or
        failed results included), takes the platform and the data and durable directories from the host's profile
        (C(trainer_profile), C(trainer_data_dir), C(trainer_durable_dir)), prints one line per host (every job's
        state, items, progress, exit code, log age, and the last log lines of a dead or crashed job), then the
        patrol columns (jobs, progress, data disk and durable FS, GPU, top finding).
      - >-
        A patrol verdict is C(FAIL) (escalate) on every C(FAIL) finding and on the WARN finding C(log_stale), and
        on every WARN with O(strict). The failure message lists every escalating finding of every host.
    type: str
    choices: [preflight, patrol]
    default: preflight
  prom_path:
    description:
      - Also write the rows as a Prometheus textfile for node_exporter's textfile collector (metrics
        C(trainer_patrol_verdict), C(trainer_job_alive), C(trainer_job_items_done), C(trainer_job_progress),
        C(trainer_disk_bytes_pct), C(trainer_disk_inodes_pct), C(trainer_gpu_utilization_pct), ...).
      - Must end in C(.prom). Written to a temporary file in the same directory and renamed, so the collector never
        reads half a file. Omit to write none.
    type: path
  tail_lines:
    description: With O(kind=patrol), how many last log lines of a dead or crashed job the host's line shows.
    type: int
    default: 3
"""

EXAMPLES = r"""
- name: Print the fleet table and write the report
  remote_gpu.trainer.fleet_report:
    hosts: "{{ groups['autodl'] }}"
    record_var: preflight_record
    report_path: reports/preflight.json
    title: preflight

- name: Patrol table, escalation and a Prometheus textfile from registered job_status results
  remote_gpu.trainer.fleet_report:
    hosts: "{{ ansible_play_hosts_all }}"
    record_var: patrol_probe
    kind: patrol
    report_path: reports/patrol.json
    prom_path: /var/lib/node_exporter/textfile/trainer_patrol.prom
    title: patrol
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
table:
  description: The printed table, one string per line (header first).
  type: list
  elements: str
  returned: when no host fails (on failure the table is already printed and the rows are in the report)
  sample: ["HOST    PLATFORM  GPUS       VERDICT ...", "lab-01  autodl    1x H100 ... PASS ..."]
rows:
  description: One dict per host, as written to the report.
  type: list
  elements: dict
  returned: when no host fails
  sample: [{"host": "lab-01", "platform": "autodl", "verdict": "PASS"}]
summary:
  description: Number of hosts per verdict.
  type: dict
  returned: always
  sample: {"PASS": 2, "FAIL": 1}
failing:
  description: Hosts whose verdict fails the run.
  type: list
  elements: str
  returned: always
  sample: ["lab-03"]
report_path:
  description: Where the JSON report was written, or null.
  type: str
  returned: always
  sample: reports/preflight.json
prom_path:
  description: Where the Prometheus textfile was written, or null.
  type: str
  returned: always
  sample: /var/lib/node_exporter/textfile/trainer_patrol.prom
"""
