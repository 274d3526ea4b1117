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
  - remote_gpu.trainer.attributes
  - remote_gpu.trainer.attributes.platform
attributes:
  check_mode:
    support: full
    details: Nothing on the hosts is changed; the report on the controller is written in check mode too, as output.
  diff_mode:
    support: none
  platform:
    platforms: posix
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
"""

EXAMPLES = r"""
- name: Print the fleet table and write the report
  remote_gpu.trainer.fleet_report:
    hosts: "{{ groups['autodl'] }}"
    record_var: preflight_record
    report_path: reports/preflight.json
    title: preflight
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
"""
