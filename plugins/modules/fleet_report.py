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
  - Runs on the controller (an action plugin). Builds one row per targeted host from the raw results that the
    probing play registered for it (O(result_vars)), prints a fixed-width table, and writes the rows to a JSON
    report.
  - V(preflight) prints host, platform, GPUs, verdict, data disk %bytes and %inodes, durable FS %inodes and the top
    finding; V(patrol) prints one line per host, then its own columns (see O(kind)).
  - A host whose probe did not answer is C(UNREACHABLE); a probe task that failed is a C(FAIL) finding,
    C(probe_timeout), C(interpreter_missing) (the profile's C(trainer_interpreter) does not run on the box) or
    C(probe_failed); a host without a result (failed before the probe, for example in profile validation) is
    reported as C(NO_RESULT) instead of being dropped silently.
  - Fails when a host is C(FAIL), C(UNREACHABLE) or C(NO_RESULT), and also on C(WARN) with O(strict).
  - Above the table it prints the danger clocks of the hosts' profiles (C(trainer_danger_clocks)), once per
    platform, for example AutoDL's release of an instance powered off for 15 days; they are not a finding.
  - With O(kind=patrol), a host whose jobs all finished more than O(idle_minutes) ago, on a box whose profile says
    C(trainer_billed), gets the C(WARN) finding C(idle_billing) with the hours idle (from the finish time in the job's
    status) and, when C(trainer_price_per_hour) is set, the money in C(trainer_price_currency). Computed on the
    controller, with no extra SSH execution.
  - A registered result may hold anything. Findings or jobs that are not mappings (or a C(findings) that is not a
    list) make the C(FAIL) finding C(malformed_result), since that host cannot be judged. Progress values, counters
    and percentages that are not numbers are shown as unknown (C(?) or C(-)) and are left out of the Prometheus
    textfile.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
attributes:
  check_mode:
    support: full
    details: Nothing on the hosts is changed; the report on the controller is written in check mode too, as output.
options:
  hosts:
    description:
      - The hosts to report. A name that is not in the inventory is refused (a typo is not a host that failed).
      - Default is every host the play targets (C(ansible_play_hosts_all), the play's host pattern within
        C(--limit)), also the hosts that failed or were unreachable earlier in the run.
    type: list
    elements: str
  result_vars:
    description:
      - Names of the host variables that hold the raw registered results of the probe tasks (unreachable and
        failed results included; a variable that a host never set means the host failed before the probe).
      - The row also reads the host's profile, C(trainer_profile), C(trainer_data_dir), C(trainer_durable_dir) and
        C(trainer_interpreter); the danger clocks and C(idle_billing) read C(trainer_danger_clocks),
        C(trainer_billed), C(trainer_price_per_hour), C(trainer_price_currency) and C(trainer_meter_stop).
    type: dict
    required: true
    suboptions:
      preflight_probe:
        description:
          - With O(kind=preflight), the result of M(remote_gpu.trainer.preflight_probe), which holds the three checks'
            results (the way C(playbooks/preflight.yml) probes a box, in one SSH execution). Given, the three
            options below are not read.
          - A probe that was unreachable or failed as a whole makes the row C(UNREACHABLE) or the C(FAIL) finding of
            the failed probe, as for the separate tasks.
        type: str
      inode_check:
        description:
          - With O(kind=preflight) and no O(result_vars.preflight_probe), the result of M(remote_gpu.trainer.inode_check)
            (required).
        type: str
      gpu_health:
        description:
          - With O(kind=preflight) and no O(result_vars.preflight_probe), the result of M(remote_gpu.trainer.gpu_health)
            (required).
        type: str
      env_audit:
        description:
          - With O(kind=preflight) and no O(result_vars.preflight_probe), the result of M(remote_gpu.trainer.env_audit)
            (required).
        type: str
      job_status:
        description: With O(kind=patrol), the result of M(remote_gpu.trainer.job_status) (required).
        type: str
      instance_info:
        description:
          - With O(kind=patrol), the loop of M(remote_gpu.trainer.instance_info) reads (one result per host, its
            C(item) the host) that asked the provider about the rented boxes that did not answer
            (C(playbooks/tasks/provider_now.yml) registers it as C(provider_now)). A host that did not answer is
            told with what its provider says of it now (preempted, stopped, terminated, or running with its SSH
            path broken) instead of the bare SSH error; without a read, with what the inventory's
            C(provider_state) says, where it is not V(running).
        type: str
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
  fleet_name:
    description:
      - The fleet's name, the dashboard's title (O(html_path)).
      - Default is the name of the first inventory source (C(my_fleet.yml) names the fleet C(my_fleet);
        C(inventories/autodl/hosts.yml) names it C(autodl), since C(hosts), C(inventory) and C(main) say nothing).
        The playbooks pass the variable C(fleet_name) when it is set (in the inventory's C(all.vars), or C(-e)).
    type: str
  fail_run:
    description:
      - Fail the task when a host is not fit. V(false) only prints and reports (the rows then show the verdicts).
    type: bool
    default: true
  kind:
    description:
      - >-
        V(preflight) builds each row from the O(result_vars.preflight_probe) result (or the O(result_vars.inode_check),
        O(result_vars.gpu_health) and O(result_vars.env_audit) results). The verdict is the worst finding level; the top finding is the first
        finding at that level (GPU findings first, then storage, then environment).
      - >-
        V(patrol) builds each row from the O(result_vars.job_status) result, prints one line per host (every job's
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
  history_dir:
    description:
      - Append one compact record per reported host to C(<history_dir>/<host>.jsonl) on the controller (time,
        verdict, top finding, every job of the box by name in C(by_job) with its state, items done and total,
        items too fast, progress and log age, data and durable bytes and inodes %, GPU utilisation and memory %,
        and the price per hour of a box that bills, C(trainer_billed) and C(trainer_price_per_hour)).
        Omit to keep no history.
      - A host name becomes a file name of the characters C([A-Za-z0-9._-]) (plus a hash of the name when others
        were replaced); a name with a path separator is refused with a warning. A symlink in the directory is never
        followed; each file is read from its last 64 MiB only.
      - Records older than 7 days are compacted to one per hour, older than 90 days to one per day, and dropped
        after 730 days (a year of five-minute ticks over 20 hosts stays within about 25 MB). A torn last line (a
        run killed mid-write) is skipped with a warning.
    type: path
  html_path:
    description:
      - Write the fleet dashboard, one self-contained HTML page (no script, no network fetch), from the history
        of every host in O(history_dir), and its JSON index next to it (the same name ending in C(.json)).
        Must end in C(.html) and needs O(history_dir). Omit to write none.
      - Cards for the hosts of the current inventory only; a host that has history but is no longer in the
        inventory is listed under C(Gone) (name, last verdict, when it was last checked), outside the summary.
      - A card per host (verdict, top finding and its action, queue, each job's state, items, progress and log
        age, GPU, disks, price), trend charts over the last O(chart_days) days (one per job of the host, so two
        experiments on one box are two lines), the fleet summary (verdicts, queue completion, estimated finish,
        money spent and burning per hour) and, on top, the danger clocks and C(idle_billing) hosts.
      - Under C(Pulled curves), a link to the TensorBoard events that teardown pulled and verified for each host
        and run (see O(pull_root)), with the C(tensorboard --logdir) command that shows them.
    type: path
  pull_root:
    description:
      - Where teardown pulls (its C(teardown_pull_root)); the dashboard links the TensorBoard events listed in each
        C(<pull_root>/<host>/<run>/PULL_VERIFIED.json) of the inventory's hosts. Empty links none.
    type: path
    default: pulls
  chart_days:
    description: Days of history the dashboard's charts show.
    type: int
    default: 7
  disk_warn_pct:
    description: The warning threshold drawn on the dashboard's disk charts (patrol's C(warn_pct)).
    type: int
    default: 85
  disk_fail_pct:
    description: The failure threshold drawn on the dashboard's disk charts (patrol's C(fail_pct)).
    type: int
    default: 95
  tail_lines:
    description:
      - With O(kind=patrol), how many last log lines of a dead or crashed job the host's line shows (0 or more; a
        negative number is refused).
    type: int
    default: 3
  idle_minutes:
    description:
      - With O(kind=patrol), how many minutes after its queue finished a box that still bills is C(idle_billing).
    type: int
    default: 30
"""

EXAMPLES = r"""
- name: Preflight table and report from the registered preflight_probe results
  remote_gpu.trainer.fleet_report:
    result_vars:
      preflight_probe: preflight_probe
    report_path: reports/preflight.json
    title: preflight
  delegate_to: localhost
  run_once: true

- name: The same from separate inode_check, gpu_health and env_audit results
  remote_gpu.trainer.fleet_report:
    result_vars:
      inode_check: preflight_storage
      gpu_health: preflight_gpu
      env_audit: preflight_env
    report_path: reports/preflight.json
    title: preflight
  delegate_to: localhost
  run_once: true

- name: Patrol table, escalation and a Prometheus textfile from registered job_status results
  remote_gpu.trainer.fleet_report:
    result_vars:
      job_status: patrol_probe
      instance_info: provider_now
    kind: patrol
    report_path: reports/patrol.json
    prom_path: /var/lib/node_exporter/textfile/trainer_patrol.prom
    history_dir: reports/history
    html_path: reports/fleet.html
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
  description:
    - One dict per host, as written to the report.
    - With O(kind=patrol), C(jobs) holds every job job_status reported (each with its C(state)), C(probed) says
      whether the probe answered, and C(no_jobs) is true for a box without any job (shown, never a failure).
  type: list
  elements: dict
  returned: when no host fails
  sample: [{"host": "lab-01", "platform": "autodl", "verdict": "PASS", "probed": true, "no_jobs": false,
            "jobs_summary": "exp2 ALIVE 0/1, train DONE 1/1", "progress": "exp2 epoch 37/100, train epoch 2/2"}]
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
danger_clocks:
  description:
    - The danger clocks of the reported hosts' profiles, once per platform (platforms without one are left out).
      Also in the JSON report.
  type: list
  elements: dict
  returned: always
  sample:
    - platform: autodl
      hosts: [lab-01, lab-02]
      clocks:
        - {clock: "a powered-off instance is released automatically after 15 days", verified: "2026-06"}
html_path:
  description: Where the dashboard was written, or null.
  type: str
  returned: always
  sample: reports/fleet.html
index_path:
  description: Where the dashboard's JSON index was written, or null.
  type: str
  returned: always
  sample: reports/fleet.json
history_warnings:
  description: What the history could not use (a torn line, a refused host name, a symlink); also printed as warnings.
  type: list
  elements: str
  returned: always
  sample: ["lab-01.jsonl: line 12 is torn (a run killed mid-write?), skipped"]
prom_path:
  description: Where the Prometheus textfile was written, or null.
  type: str
  returned: always
  sample: /var/lib/node_exporter/textfile/trainer_patrol.prom
"""
