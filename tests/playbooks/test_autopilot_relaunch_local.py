"""The autopilot's relaunch of one job on a replacement (playbooks/tasks/autopilot_relaunch.yml), on localhost: the
job's launch_* variables come from the record launch wrote for the old box, and the replacement's plan is the old
box's share of the queue alone, under the same item ids. A launch_* variable given to the tick with -e that differs
from the record (a tick once given one job's variables) would outrank it: the job is refused, the variable named,
before anything is written; the same value given with -e is no conflict."""

from __future__ import annotations

import json
import re

from pbhelpers import REPO, run_playbook

SITE = """---
- name: Relaunch exp2 of old on box-new, as autopilot.yml's relaunch play does
  hosts: local
  gather_facts: false
  vars:
    autopilot_relaunch: "{{ autopilot_plan.decisions[autopilot_replaces].relaunch }}"
  tasks:
    - name: Relaunch the job
      ansible.builtin.include_tasks: %s/playbooks/tasks/autopilot_relaunch.yml
      vars:
        autopilot_relaunch_job: exp2
""" % REPO


def relaunch(tmp_path, *extra):
    (tmp_path / "group_vars").symlink_to(REPO / "group_vars")
    record = tmp_path / "launches" / "old" / "exp2.json"
    record.parent.mkdir(parents=True)
    # the old box ran item 001 of exp2's two; launch_sampler_interval 0 breaks one of launch's rules, so that the
    # launch entered stops at its rules, before anything is written
    items = [{"index": 1, "item": "001", "host": "old", "arg": "q1"}]
    record.write_text(json.dumps({
        "launch_name": "exp2", "launch_src": str(tmp_path), "launch_command": "bash exp2.sh",
        "launch_queue": ["q0", "q1"], "launch_sampler_interval": 0, "launch_min_seconds": 0,
        "_launch_recorded": {"version": 1, "host": "old", "job": "exp2", "queue_length": 2, "items": items}}))
    job = {"path": str(record), "items": items, "queue_length": 2}
    relaunch = {"jobs": {"exp2": job}, "missing": [], "refused": [], "dir": str(record.parent)}
    plan = {"decisions": {"old": {"relaunch": relaunch}}}
    (tmp_path / "hosts.yml").write_text("local:\n  hosts:\n    box-new:\n      ansible_connection: local\n"
                                        "      autopilot_replaces: old\n")
    (tmp_path / "site.yml").write_text(SITE)
    data = tmp_path / "data"
    proc = run_playbook(tmp_path / "site.yml", tmp_path / "hosts.yml", "-e", json.dumps({"autopilot_plan": plan}),
                        "-e", "trainer_data_dir=%s" % data, *extra, cwd=tmp_path)
    assert proc.returncode != 0, proc.stdout
    assert not data.exists(), "written before the refusal: %s" % sorted(data.rglob("*"))
    return proc.stdout + proc.stderr, record


def test_a_launch_variable_given_to_the_tick_that_differs_from_the_record_refuses_the_job(tmp_path):
    out, record = relaunch(tmp_path, "-e", "launch_command='bash train.sh'", "-e", '{"launch_queue": ["p0"]}')
    assert re.search(r"the tick was given launch_command, launch_queue \(-e\), which outrank the record of job\s+exp2 "
                     r"\(%s\)" % re.escape(str(record)), out), out
    assert "run the tick without launch_* variables; each job's are in its record" in out, out
    assert "ITEM  HOST" not in out, out  # launch was not entered


def test_the_record_drives_the_launch_and_its_plan_is_the_old_boxs_share(tmp_path):
    # the same command given with -e is no conflict: launch runs with the record's variables and the old box's share
    out, _record = relaunch(tmp_path, "-e", "launch_command='bash exp2.sh'")
    assert "outrank the record" not in out, out
    table = out[out.index("ITEM  HOST"):]
    assert re.search(r"^\s*001\s+box-new\s+q1\s*$", table, re.M), table
    assert not re.search(r"^\s*000\s", table, re.M), table  # q0 is another box's item: not started twice
    assert "launch_sampler_interval must be more than 0" in out, out  # the record's value reached launch's rules


BOX_SITE = """---
- name: Relaunch the jobs of old on box-new, as autopilot.yml's relaunch play does
  hosts: box-new
  gather_facts: false
  tasks:
    - name: Relaunch every job of the replaced host
      ansible.builtin.import_tasks: %s/playbooks/tasks/autopilot_relaunch_box.yml
    - name: Keep the outcome recorded on the old host
      ansible.builtin.copy:
        content: "{{ hostvars['old'].autopilot_replace_outcome | to_json }}"
        dest: "{{ playbook_dir }}/outcome.json"
        mode: "0600"
""" % REPO


def test_a_job_of_the_old_box_without_a_launch_record_is_named_with_the_command_that_relaunches_it(tmp_path):
    """exp6 ran on the old box and has an item left, but launch wrote no record of it (launched before launch
    recorded, or from another directory), and the tick has no launch_src: nothing is launched, and the outcome on
    the old host names the job, where its record was looked for, and the command."""
    (tmp_path / "group_vars").symlink_to(REPO / "group_vars")
    (tmp_path / "hosts.yml").write_text("local:\n  hosts:\n    box-new:\n      ansible_connection: local\n"
                                        "      autopilot_replaces: old\n    old:\n      ansible_connection: local\n")
    (tmp_path / "site.yml").write_text(BOX_SITE)
    where = str(tmp_path / "launches" / "old")
    plan = {"decisions": {"old": {"relaunch": {"jobs": {}, "missing": ["exp6"], "refused": [], "dir": where}}}}
    proc = run_playbook(tmp_path / "site.yml", tmp_path / "hosts.yml", "-e", json.dumps({"autopilot_plan": plan}),
                        cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out  # the failure is the outcome's, recorded on the old host
    outcome = json.loads((tmp_path / "outcome.json").read_text())
    assert outcome["ok"] is False, outcome
    assert ("box-new rented and passed preflight, but its relaunch failed: Not relaunched on box-new: job exp6: no "
            "launch record in %s. Launch each on box-new as you launched it on old, with -l box-new -e "
            "launch_adopt_durable=true" % where) in outcome["msg"], outcome
    assert "ITEM  HOST" not in out, out  # launch was not entered
