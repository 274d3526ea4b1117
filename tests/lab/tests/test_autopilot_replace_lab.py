"""Issue 32, item 3: the autopilot replaces what the market takes (autopilot_replace).

One vast.ai fleet (lab-01, the rented box, over the vastai inventory plugin against the fake with
include_states: [preempted]) and one offer whose box the fake's LabProvisioner starts (lab-02) when it is rented.
The rent's record (reports/rent-sweep-a.json, as rent.yml writes it: its spec and its boxes) names lab-01's
instance. A two-item queue runs on lab-01: item 000 finishes with a verified durable copy, item 001 writes a
checkpoint to its durable directory (TRAINER_DURABLE_DIR) and is still training when the bid instance is preempted
and never returns (the fake reports it stopped, the box stops answering).

* Without the opt-in the tick rents nothing and escalates once.
* With ``autopilot_replace: true`` the tick rents a replacement with the record's spec (the rent's round, preflight's
  probe included) and relaunches the queue there from the durable tier: item 000 is taken as done from its verified
  copy (never trained again), item 001 resumes from its checkpoint. A later tick destroys the old instance once
  (one DELETE). One ``replaced`` event per step.

vast.ai's own durable directory is the container disk (/workspace), lost on destroy: a queue resumes on a
replacement only from storage that outlives the instance (a network filesystem mounted on every box, declared as
trainer_durable_dir with a tier that survives destroy). The lab stands one in with a directory of the checkout, which
every lab box binds at the same path. Playbook runs: one launch and four ticks.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
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
# p0 finishes at once; p1 checkpoints to its durable directory, then trains forever on the old box (the market takes
# it mid-item) and, resumed from that checkpoint, finishes at once on its replacement
TRAIN_SH = r"""#!/usr/bin/env bash
echo "$TRAINER_ITEM $1 $(hostname) start" >> "$HOME/launch-runs.log"
if [ "$1" = p1 ]; then
    if [ -f "$TRAINER_DURABLE_DIR/ckpt-step" ]; then
        echo "$TRAINER_ITEM $1 $(hostname) resumed-from-step $(cat "$TRAINER_DURABLE_DIR/ckpt-step")" >> "$HOME/launch-runs.log"
    else
        mkdir -p "$TRAINER_DURABLE_DIR" && echo 5 > "$TRAINER_DURABLE_DIR/ckpt-step"
    fi
    if [ "$(hostname)" = lab-01 ]; then sleep 3600; fi
fi
printf 'best-%s' "$1" > "$TRAINER_OUTPUT_DIR/best.pt"
"""
QUEUE = ["p0", "p1"]
# a filesystem that outlives the instance, mounted on every box at the same path (the lab: a directory of the
# checkout, which every lab box binds)
SHARED = os.path.join(REPO, ".cache", "lab-durable-%d" % os.getpid())
DURABLE = {"trainer_durable_dir": SHARED, "trainer_storage_tiers": [
    {"name": "data", "path": "/workspace", "survives": ["stop"], "lost_on": ["destroy"], "shared": "none"},
    {"name": "durable", "path": SHARED, "survives": ["stop", "destroy"], "lost_on": [], "shared": "team"}]}


@pytest.fixture(scope="module")
def lab(lab_free, tmp_path_factory):
    state = tmp_path_factory.mktemp("lab")
    with started_fleet(state, "--size", "1", "--platform", "lab-01=vastai") as fleet:
        addr, port = fleet.hosts["lab-01"]["ansible_host"], int(fleet.hosts["lab-01"]["ansible_port"])
        old = fake_api.vastai_instance(1, addr, port, label="sweep-a", bid=True)
        provisioner = fake_api.LabProvisioner(state, delay=0.5, first_index=2)
        fake = fake_api.FakeAPI("vastai", KEY, [old], offers=[fake_api.vastai_offer(1, "8xh100")],
                                provisioner=provisioner).start()
        os.makedirs(SHARED, exist_ok=True)
        try:
            yield fleet, fake, provisioner, tmp_path_factory.mktemp("laptop")
        finally:
            fake.stop()
            shutil.rmtree(SHARED, ignore_errors=True)
        assert provisioner.errors == []


def tick(lab, hook, *args):
    fleet, fake, _prov, laptop = lab
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")), LAB_HOOK_URL=hook.url + "/hook",
               VAST_API_KEY=KEY)
    variables = {"autopilot_notify": True, "autopilot_notify_sinks": SINKS, "autopilot_replace_after_minutes": 0,
                 "ansible_timeout": 5, "launch_src": str(laptop / "src"), "launch_command": "bash train.sh",
                 "launch_queue": QUEUE, "launch_min_seconds": 0, "rent_poll_interval": 0.2, **DURABLE}
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
    launch_yml(fleet, src, "-l", "lab-01", extra=dict(DURABLE, launch_min_seconds=0, launch_queue=QUEUE))
    wait_for(lambda: any(line.startswith("001") for line in runs(fleet, "lab-01")), what="item 001 to start")
    before = [line for line in runs(fleet, "lab-01") if line.strip()]
    assert before == ["000 p0 lab-01 start", "001 p1 lab-01 start"], before
    durable = glob.glob(os.path.join(SHARED, "runs", "*", "*"))
    assert sorted(os.path.basename(path) for path in durable) == ["000", "001"], durable
    wait_for(lambda: os.path.exists(os.path.join(os.path.dirname(durable[0]), ".trainer-done", "000.json")),
             what="item 000's durable record")

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

    # the replacement took item 000 as done from its verified copy and resumed item 001 from its checkpoint
    assert [line for line in runs(fleet, "lab-02") if line.strip()] == [
        "001 p1 lab-02 start", "001 p1 lab-02 resumed-from-step 5"], runs(fleet, "lab-02")
    adopted = json.loads(fleet.ssh("lab-02", "cat ~/.trainer/jobs/train/items/000/status.json").stdout)
    assert (adopted["state"], adopted["trained_on"], adopted["host"]) == ("done", "lab-01", "lab-02"), adopted

    # every item is covered (000 durable beyond the instance, 001 finished on the replacement): the old instance is
    # destroyed, once
    _proc, rows = tick(lab, hook, "-e", "autopilot_replace=true")
    old = rows["sweep-a"]
    assert (old["action"], old["ok"], old["state"]) == ("retire", True, "retired"), old
    (destroy,) = calls(fake, "DELETE", "/api/v0/instances/")
    assert destroy["path"].rstrip("/").endswith("/9000001")
    assert rows["sweep-a-r1"]["state"] == "done", rows["sweep-a-r1"]
    assert sent(hook, "sweep-a") == ["escalated", "replaced", "replaced"]
