"""Issue 32, item 3: the autopilot replaces what the market takes (autopilot_replace).

One vast.ai fleet (lab-01, the rented box, over the vastai inventory plugin against the fake with
include_states: [preempted]) and one offer whose box the fake's LabProvisioner starts (lab-02) when it is rented.
The rent's record (reports/rent-sweep-a.json, as rent.yml writes it: its spec and its boxes) names lab-01's
instance. A one-item queue runs on lab-01; the bid instance is then preempted and never returns (the fake reports
it stopped, the box stops answering).

* Without the opt-in the tick rents nothing and escalates once.
* With ``autopilot_replace: true`` the tick rents a replacement with the record's spec (the rent's round, preflight's
  probe included), relaunches the queue there, and a later tick destroys the old instance once (one DELETE), after
  the replacement finished the item with a verified durable copy. One ``replaced`` event per step.

The lab's vast.ai boxes have no durable FS that outlives the instance (vast.ai's durable directory is the container
disk, lost on destroy), so the interrupted item restarts from scratch on the replacement: what the durable tier
held of it (nothing) is what it resumes from, and the old box is destroyed only once the replacement has finished
the item. Playbook runs: one launch and four ticks.
"""
from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from labhelpers import LAB, REPO, fake_api, needs_root, started_fleet
from test_launch_lab import runs, wait_finished
from test_launch_lab import launch as launch_yml
# hook is a fixture: pytest finds it by name in this module
from test_autopilot_lab import hook, wait_for  # noqa: F401  pylint: disable=unused-import

pytestmark = needs_root
VENV_BIN = os.path.join(REPO, ".venv", "bin")
FLEET = os.path.join(LAB, "fleet")
KEY = "LABKEY-32-replace-never-shown"
SINKS = [{"type": "webhook", "name": "lab", "url_env": "LAB_HOOK_URL"}]
SPEC = {"gpu": "H100_SXM", "gpu_count": 8, "max_price": 5, "image": "pytorch/pytorch:latest", "disk_gb": 64,
        "interruptible": False}
# the item trains forever on the old box (the market takes it mid-item) and at once on its replacement
TRAIN_SH = r"""#!/usr/bin/env bash
echo "$TRAINER_ITEM $1 $(hostname)" >> "$HOME/launch-runs.log"
if [ "$(hostname)" = lab-01 ]; then sleep 3600; fi
printf 'best-%s' "$1" > "$TRAINER_OUTPUT_DIR/best.pt"
"""
QUEUE = ["p0"]


@pytest.fixture(scope="module")
def lab(lab_free, tmp_path_factory):
    state = tmp_path_factory.mktemp("lab")
    with started_fleet(state, "--size", "1", "--platform", "lab-01=vastai") as fleet:
        addr, port = fleet.hosts["lab-01"]["ansible_host"], int(fleet.hosts["lab-01"]["ansible_port"])
        old = fake_api.vastai_instance(1, addr, port, label="sweep-a", bid=True)
        provisioner = fake_api.LabProvisioner(state, delay=0.5, first_index=2)
        fake = fake_api.FakeAPI("vastai", KEY, [old], offers=[fake_api.vastai_offer(1, "8xh100")],
                                provisioner=provisioner).start()
        try:
            yield fleet, fake, provisioner, tmp_path_factory.mktemp("laptop")
        finally:
            fake.stop()
        assert provisioner.errors == []


def tick(lab, hook, *args):
    fleet, fake, _prov, laptop = lab
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")), LAB_HOOK_URL=hook.url + "/hook",
               VAST_API_KEY=KEY)
    variables = {"autopilot_notify": True, "autopilot_notify_sinks": SINKS, "autopilot_replace_after_minutes": 0,
                 "ansible_timeout": 5, "launch_src": str(laptop / "src"), "launch_command": "bash train.sh",
                 "launch_queue": QUEUE, "launch_min_seconds": 0, "rent_poll_interval": 0.2}
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", str(laptop / "vastai.yml"),
                           os.path.join(REPO, "playbooks", "autopilot.yml"), "-e", json.dumps(variables), *args],
                          capture_output=True, text=True, env=env, cwd=str(laptop), stdin=subprocess.DEVNULL,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-3000:]
    assert KEY not in proc.stdout + proc.stderr
    report = json.loads((laptop / "reports" / "autopilot.json").read_text())
    return proc, dict((row["host"], row) for row in report["hosts"])


def sent(hook, host):
    return [event["kind"] for message in hook.messages("/hook") for event in (message["body"] or {}).get("events") or []
            if event["host"] == host]


def calls(fake, method, prefix):
    return [r for r in fake.api_requests() if r["method"] == method and r["path"].startswith(prefix)]


def test_a_preempted_bid_instance_is_replaced_relaunched_and_destroyed_once_only_with_the_opt_in(lab, hook):
    fleet, fake, _prov, laptop = lab
    src = laptop / "src"
    src.mkdir()
    (src / "train.sh").write_text(TRAIN_SH)
    allvars = fleet.inventory["all"]["vars"]
    (laptop / "group_vars").mkdir()
    (laptop / "group_vars" / "all.yml").write_text(json.dumps({
        "ansible_user": "root", "ansible_ssh_private_key_file": allvars["ansible_ssh_private_key_file"],
        "ansible_ssh_common_args": " ".join(fleet.common), "preflight_check_torch": False,
        "preflight_sample_seconds": 1}))
    (laptop / "vastai.yml").write_text("plugin: remote_gpu.trainer.vastai\napi_url: %s\nretry_budget: 3\n"
                                       "include_states: [preempted]\n" % fake.url)
    (laptop / "reports").mkdir()
    (laptop / "reports" / "rent-sweep-a.json").write_text(json.dumps({
        "rent": "sweep-a", "provider": "vastai", "count": 1, "spec": SPEC, "api_url": fake.url,
        "boxes": [{"host": "sweep-a-9000001", "id": 9000001, "outcome": "kept", "verdict": "PASS"}]}))
    launch_yml(fleet, src, "-l", "lab-01", extra={"launch_min_seconds": 0, "launch_queue": QUEUE})
    wait_for(lambda: any(line.startswith("000") for line in runs(fleet, "lab-01")), what="item 000 to start")

    # a tick while it trains: the decision keeps the queue's snapshot (what the old box held)
    _proc, rows = tick(lab, hook, "-e", "autopilot_replace=true")
    assert rows["sweep-a"]["state"].startswith("running"), rows["sweep-a"]

    # the market takes it and never gives it back
    fake.records = [fake_api.vastai_instance(1, fleet.hosts["lab-01"]["ansible_host"],
                                             int(fleet.hosts["lab-01"]["ansible_port"]), label="sweep-a",
                                             status="stopped", bid=True, intended="running")]
    subprocess.run([FLEET, "vanish", "lab-01"], env=dict(os.environ, LAB_STATE_DIR=fleet.state), check=True,
                   capture_output=True)

    # without the opt-in: nothing is rented, it escalates
    _proc, rows = tick(lab, hook)
    assert (rows["sweep-a"]["state"], rows["sweep-a"]["action"]) == ("preempted_escalated", "escalate"), rows
    assert "autopilot_replace: true" in rows["sweep-a"]["reason"]
    assert calls(fake, "PUT", "/api/v0/asks/") == []

    # with it: a replacement with the record's spec, preflight, relaunch
    _proc, rows = tick(lab, hook, "-e", "autopilot_replace=true")
    old = rows["sweep-a"]
    assert (old["action"], old["ok"], old["state"]) == ("replace", True, "replaced"), old
    assert len(calls(fake, "PUT", "/api/v0/asks/")) == 1 and calls(fake, "DELETE", "/api/v0/instances/") == []
    with open(fleet.inventory_path, encoding="utf-8") as handle:  # fleet add wrote the rented box there
        fleet.hosts.update(yaml.safe_load(handle)["all"]["children"]["lab"]["hosts"])
    assert wait_finished(fleet, "lab-02", "train")["exit_code"] == 0

    # the replacement finished the item with a durable copy: the old instance is destroyed, once
    _proc, rows = tick(lab, hook, "-e", "autopilot_replace=true")
    old = rows["sweep-a"]
    assert (old["action"], old["ok"], old["state"]) == ("retire", True, "retired"), old
    (destroy,) = calls(fake, "DELETE", "/api/v0/instances/")
    assert destroy["path"].rstrip("/").endswith("/9000001")
    assert rows["sweep-a-r1"]["state"] == "done", rows["sweep-a-r1"]
    # the item ran twice (interrupted on the old box, from scratch on the replacement), never on a third box
    assert [line.split()[2] for line in runs(fleet, "lab-02") if line.strip()] == ["lab-02"]
    assert sent(hook, "sweep-a") == ["escalated", "replaced", "replaced"]
