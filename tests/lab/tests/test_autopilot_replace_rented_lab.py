"""The autopilot's replacement over the inventory that rent wrote, in the order a user runs the README's commands,
with two experiments on two rented boxes.

README.md's Rent section: ``rent`` writes ``inventories/rented/sweep-a.yml``, and every later command runs over it
(``-i inventories/rented/sweep-a.yml``): launch of ``train`` and of ``exp2`` (``-e launch_name=exp2``), the
autopilot's ticks (``autopilot_replace: true``, from a timer: given no launch_* variable), teardown. That inventory
keeps what rent saw (provider_state: running), and the box the market takes stops answering, so:

* patrol, and the tick, ask vast.ai about the box that did not answer (instance_info: one GET of its id) and sees the
  preemption that the inventory cannot show; it rents a replacement (the rent's record: its spec), preflights it and
  relaunches there EVERY job of the old box, each with the variables its launch recorded
  (reports/launches/<host>/<job>.json) and only the old box's share of its queue, from the durable tier: the other
  box's items are not run twice;
* the replacement joins sweep-a.yml (the next tick, patrol and teardown see its job and its meter) and its rent
  writes its own record (reports/rent-sweep-a-r1.json: it can be replaced in turn);
* a later tick destroys the old instance once its items are covered, and the old box leaves sweep-a.yml;
* teardown of both boxes, approved by name, pulls every item of both experiments to the laptop and terminates
  them: the meter is stopped once on each instance, the right one, and the inventory ends empty.

Without the API read the preempted box only ever read as unreachable (a static inventory has no provider_state to
change); without the inventory's update the replacement's job and meter were invisible to every later command;
without the launch records a tick given no launch_* variables relaunched nothing (and one given them relaunched one
job, the whole queue of it, the other box's items included).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from labhelpers import LAB, REPO, fake_api, needs_root, started_fleet
from lab_teardown_support import checkpoint
from test_autopilot_lab import wait_for
# the queue, and the filesystem that outlives the instance (a directory of the checkout that every lab box binds)
from test_autopilot_replace_lab import DURABLE, SHARED
from test_launch_lab import runs, wait_finished

pytestmark = needs_root
VENV_BIN = os.path.join(REPO, ".venv", "bin")
FLEET = os.path.join(LAB, "fleet")
KEY = "LABKEY-replace-rented-never-shown"
RENTED = os.path.join("inventories", "rented", "sweep-a.yml")
# train's queue over the two boxes: the first (sorted) runs 000 p0 and 002 p2, the second 001 p1 and 003 p3; exp2's:
# q0 on the first, q1 on the second. p2 and q0 checkpoint to their durable directory, then train forever on the
# first box (the market takes it mid-item) and, resumed from that checkpoint, finish at once on its replacement;
# every other item finishes at once.
TRAIN_QUEUE = ["p0", "p1", "p2", "p3"]
EXP2_QUEUE = ["q0", "q1"]
TRAIN_SH = r"""#!/usr/bin/env bash
echo "$TRAINER_ITEM $1 $(hostname) start" >> "$HOME/launch-runs.log"
if [ "$1" = p2 ] || [ "$1" = q0 ]; then
    if [ -f "$TRAINER_DURABLE_DIR/ckpt-step" ]; then
        echo "$TRAINER_ITEM $1 $(hostname) resumed-from-step $(cat "$TRAINER_DURABLE_DIR/ckpt-step")" >> "$HOME/launch-runs.log"
    else
        mkdir -p "$TRAINER_DURABLE_DIR" && echo 5 > "$TRAINER_DURABLE_DIR/ckpt-step"
        sleep 3600
    fi
fi
cp "ckpt-$1.safetensors" "$TRAINER_OUTPUT_DIR/best.safetensors"
"""


@pytest.fixture(scope="module")
def lab(lab_free, tmp_path_factory):
    state = tmp_path_factory.mktemp("lab")
    # lab-01 stays out of it: the rent's boxes are the ones its offers start (lab-02 and lab-03, then the
    # replacement lab-04)
    with started_fleet(state, "--size", "1", "--platform", "lab-01=vastai") as fleet:
        provisioner = fake_api.LabProvisioner(state, delay=0.5, first_index=2)
        fake = fake_api.FakeAPI("vastai", KEY, offers=[fake_api.vastai_offer(n, "8xh100") for n in (1, 2, 3)],
                                provisioner=provisioner).start()
        os.makedirs(SHARED, exist_ok=True)
        try:
            yield fleet, fake, tmp_path_factory.mktemp("laptop")
        finally:
            fake.stop()
            shutil.rmtree(SHARED, ignore_errors=True)
        assert provisioner.errors == []


def playbook(lab, *argv, ok=True):
    """ansible-playbook as the user runs it, in the laptop's project directory, with what the lab needs added (the
    fake's URL, the lab's SSH key, preflight's lab settings); the provider key only in the environment."""
    fleet, fake, laptop = lab
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1", VAST_API_KEY=KEY,
               PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))
    lab_needs = {"rent_api_url": fake.url, "preflight_sample_seconds": 1, "preflight_check_torch": False,
                 "ansible_ssh_private_key_file": fleet.inventory["all"]["vars"]["ansible_ssh_private_key_file"],
                 "ansible_timeout": 5}
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), *argv, "-e", json.dumps(lab_needs)],
                          capture_output=True, text=True, env=env, cwd=str(laptop), stdin=subprocess.DEVNULL,
                          timeout=600, check=False)
    out = proc.stdout + proc.stderr
    assert (proc.returncode == 0) is ok, (argv, out[-8000:])
    assert KEY not in out
    return out


def job_vars(laptop, name, queue):
    return json.dumps(dict(DURABLE, launch_src=str(laptop / "src"), launch_command="bash train.sh",
                           launch_name=name, launch_queue=queue, launch_min_seconds=0))


def tick(lab):
    """A tick as the timer runs it: the inventory, the profile's durable tier (the lab's stand-in, in -e) and the
    autopilot's settings; no launch_* variable (each job's are in its launch record)."""
    _fleet, _fake, laptop = lab
    playbook(lab, "-i", RENTED, "remote_gpu.trainer.autopilot", "-e", json.dumps(DURABLE), "-e", json.dumps({
        "autopilot_replace": True, "autopilot_replace_after_minutes": 0, "rent_poll_interval": 0.2}))
    report = json.loads((laptop / "reports" / "autopilot.json").read_text())
    return dict((row["host"], row) for row in report["hosts"])


def rented_hosts(laptop):
    text = (laptop / RENTED).read_text()
    assert text.startswith("# The boxes kept by remote_gpu.trainer.rent for rent sweep-a (vastai)"), text[:200]
    return {group: sorted(value["hosts"]) for group, value in yaml.safe_load(text)["all"]["children"].items()}


def lab_name(fleet, address_port):
    """The lab instance behind a rented host's address (fleet add wrote it into the fleet's inventory)."""
    with open(fleet.inventory_path, encoding="utf-8") as handle:
        fleet.hosts.update(yaml.safe_load(handle)["all"]["children"]["lab"]["hosts"])
    return next(name for name, host in fleet.hosts.items()
                if (host["ansible_host"], int(host["ansible_port"])) == address_port)


def deletes(fake):
    return [r["path"].rstrip("/").rsplit("/", 1)[1] for r in fake.api_requests() if r["method"] == "DELETE"]


def box_of(fleet, laptop, host):
    found = yaml.safe_load((laptop / RENTED).read_text())["all"]["children"]["vastai"]["hosts"][host]
    return found, lab_name(fleet, (found["ansible_host"], int(found["ansible_port"])))


def recorded_items(laptop, host, job):
    path = laptop / "reports" / "launches" / host / (job + ".json")
    assert oct(path.stat().st_mode & 0o777) == "0o600", oct(path.stat().st_mode)
    record = json.loads(path.read_text())
    assert record["launch_name"] == job and record["launch_command"] == "bash train.sh", record
    return [row["item"] for row in record["_launch_recorded"]["items"]]


def test_the_readmes_rent_flow_replaces_a_preempted_box_with_both_its_experiments_and_stops_each_meter_once(lab):
    fleet, fake, laptop = lab
    src = laptop / "src"
    src.mkdir()
    (src / "train.sh").write_text(TRAIN_SH)
    for arg in TRAIN_QUEUE + EXP2_QUEUE:
        (src / ("ckpt-%s.safetensors" % arg)).write_bytes(checkpoint(arg))
    (laptop / "my_fleet.yml").write_text("autodl:\n  hosts:\n    autodl-4090: {ansible_host: 127.0.0.1, ansible_port: 9}\n")

    # rent two bid boxes (the market may take them), then launch two experiments over the inventory rent wrote
    playbook(lab, "-i", "my_fleet.yml", "remote_gpu.trainer.rent", "-e", json.dumps({
        "rent_name": "sweep-a", "rent_provider": "vastai", "rent_count": 2, "rent_gpu": "H100_SXM", "rent_gpu_count": 8,
        "rent_max_price": 5, "rent_image": "pytorch/pytorch:latest", "rent_disk_gb": 64, "rent_interruptible": True,
        "rent_poll_interval": 0.2}))
    old, other = rented_hosts(laptop)["vastai"]  # sorted: old takes items 000 and 002 of train, 000 of exp2
    old_vars, old_box = box_of(fleet, laptop, old)
    other_vars, other_box = box_of(fleet, laptop, other)
    assert old_vars["provider_state"] == "running"  # what rent saw, and all the inventory will ever say
    playbook(lab, "-i", RENTED, "remote_gpu.trainer.launch", "-e", job_vars(laptop, "train", TRAIN_QUEUE))
    playbook(lab, "-i", RENTED, "remote_gpu.trainer.launch", "-e", job_vars(laptop, "exp2", EXP2_QUEUE))
    # launch recorded each job on the laptop, with each box's share of its queue
    assert recorded_items(laptop, old, "train") == ["000", "002"] and recorded_items(laptop, old, "exp2") == ["000"]
    assert recorded_items(laptop, other, "train") == ["001", "003"] and recorded_items(laptop, other, "exp2") == ["001"]
    for job in ("train", "exp2"):
        assert wait_finished(fleet, other_box, job)["exit_code"] == 0
    wait_for(lambda: {line.split(" ")[1] for line in runs(fleet, old_box) if line.strip()} >= {"p2", "q0"},
             what="items p2 and q0 to start")

    # a tick while they train keeps the queue's snapshot (what the old box held)
    rows = tick(lab)
    assert rows[old]["state"].startswith("running"), rows[old]
    # the user goes on editing the project on the laptop: a relaunch pushes the code as it is then, and says so
    with open(src / "train.sh", "a", encoding="utf-8") as handle:
        handle.write("# tuned after the launch\n")

    # the market takes it (vast.ai: stopped while intended running, a bid instance) and never gives it back
    (record,) = [r for r in fake.records if str(r["id"]) == str(old_vars["provider_id"])]
    record.update(actual_status="stopped", cur_state="stopped", intended_status="running")
    subprocess.run([FLEET, "vanish", old_box], env=dict(os.environ, LAB_STATE_DIR=fleet.state), check=True,
                   capture_output=True)

    # the user's patrol tells the box apart from a broken SSH path: the provider says it is preempted (asked by the
    # patrol too: the inventory still says it runs)
    out = playbook(lab, "-i", RENTED, "remote_gpu.trainer.patrol", ok=False)
    assert re.search(r"%s UNREACHABLE: vastai says instance %s is preempted: " % (old, old_vars["provider_id"]),
                     out), out[-3000:]
    assert re.search(r"^%s PASS " % other, out, re.M), out[-3000:]

    def reads():
        return len([r for r in fake.api_requests() if r["method"] == "GET" and r["path"].rstrip("/").endswith(
            "/api/v0/instances/%s" % old_vars["provider_id"])])
    before = reads()
    rows = tick(lab)
    assert (rows[old]["action"], rows[old]["ok"], rows[old]["state"]) == ("replace", True, "replaced"), rows[old]
    assert "relaunched exp2, train" in json.dumps(rows[old]), rows[old]
    assert re.search(r"relaunched exp2, train; launch_src changed since the launch of exp2, train on %s \(commit "
                     r"- -> -, tree [0-9a-f]{12} -> [0-9a-f]{12}\): the remaining items run the new code" % old,
                     rows[old]["reason"]), rows[old]
    # the tick asked vast.ai about the box that did not answer: the inventory still says it runs
    assert reads() > before, fake.api_requests()[-10:]
    assert len([r for r in fake.api_requests() if r["method"] == "PUT" and r["path"].startswith("/api/v0/asks/")]) == 3
    assert deletes(fake) == []

    # the replacement joined the inventory rent wrote, in each of its groups, with its own rent's record
    groups = rented_hosts(laptop)
    (new,) = [host for host in groups["vastai"] if host not in (old, other)]
    assert groups == {"vastai": sorted([old, other, new]), "rent_sweep_a": sorted([old, other, new])}, groups
    new_vars, new_box = box_of(fleet, laptop, new)
    replacement_rent = json.loads((laptop / "reports" / "rent-sweep-a-r1.json").read_text())
    assert [(b["host"], b["outcome"]) for b in replacement_rent["boxes"]] == [(new, "kept")], replacement_rent
    assert replacement_rent["spec"]["gpu"] == "H100_SXM" and replacement_rent["provider"] == "vastai"
    # both experiments run there, the old box's share alone, each resumed from its durable checkpoint; the other
    # box's items (train 001 and 003, exp2 001) are not run again, and it was left alone
    for job in ("train", "exp2"):
        assert wait_finished(fleet, new_box, job)["exit_code"] == 0
    assert sorted(line for line in runs(fleet, new_box) if line.strip()) == sorted([
        "000 q0 %s start" % new_box, "000 q0 %s resumed-from-step 5" % new_box,
        "002 p2 %s start" % new_box, "002 p2 %s resumed-from-step 5" % new_box]), runs(fleet, new_box)
    assert sorted(line for line in runs(fleet, other_box) if line.strip()) == sorted([
        "001 p1 %s start" % other_box, "003 p3 %s start" % other_box, "001 q1 %s start" % other_box])
    # the replacement's launches recorded its share in turn (it can be replaced the same way)
    assert recorded_items(laptop, new, "train") == ["000", "002"] and recorded_items(laptop, new, "exp2") == ["000"]

    # every item is covered: the old instance is destroyed once, and leaves the inventory
    rows = tick(lab)
    assert (rows[old]["action"], rows[old]["ok"], rows[old]["state"]) == ("retire", True, "retired"), rows[old]
    assert rows[new]["state"] == "done" and rows[other]["state"] == "done", (rows[new], rows[other])
    assert deletes(fake) == [str(old_vars["provider_id"])]
    assert rented_hosts(laptop) == {"vastai": sorted([other, new]), "rent_sweep_a": sorted([other, new])}
    # the destroyed box's launch records go with it (the replacement's stand)
    assert sorted(p.name for p in (laptop / "reports" / "launches").iterdir()) == sorted([other, new])

    # the user pulls the results to the laptop and stops both meters, approved by name
    playbook(lab, "-i", RENTED, "remote_gpu.trainer.teardown", "-e", json.dumps(DURABLE),
             "-e", "teardown_approve=%s,%s" % (new, other))
    assert deletes(fake)[0] == str(old_vars["provider_id"])
    assert sorted(deletes(fake)) == sorted(str(v["provider_id"]) for v in (old_vars, new_vars, other_vars))
    for job, queue in (("train", TRAIN_QUEUE), ("exp2", EXP2_QUEUE)):
        pulled = [laptop / "pulls" / host / job for host in (new, other)]
        for where in pulled:
            assert (where / "PULL_VERIFIED.json").exists(), sorted(str(p) for p in (laptop / "pulls").rglob("*"))[:40]
        best = [p.read_bytes() for where in pulled for p in where.rglob("best.safetensors")]
        assert sorted(best) == sorted(checkpoint(a) for a in queue), job
    assert rented_hosts(laptop) == {"vastai": [], "rent_sweep_a": []}
    assert list((laptop / "reports" / "launches").iterdir()) == []
