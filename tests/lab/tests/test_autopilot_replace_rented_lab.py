"""The autopilot's replacement over the inventory that rent wrote, in the order a user runs the README's commands.

README.md's Rent section: ``rent`` writes ``inventories/rented/sweep-a.yml``, and every later command runs over it
(``-i inventories/rented/sweep-a.yml``): launch, the autopilot's ticks (``autopilot_replace: true``), teardown.
That inventory keeps what rent saw (provider_state: running), and the box the market takes stops answering, so:

* the tick asks vast.ai about the box that did not answer (instance_info: one GET of its id) and sees the
  preemption that the inventory cannot show; it rents a replacement (the rent's record: its spec), preflights it and
  relaunches the queue there from the durable tier;
* the replacement joins sweep-a.yml (the next tick, patrol and teardown see its job and its meter) and its rent
  writes its own record (reports/rent-sweep-a-r1.json: it can be replaced in turn);
* a later tick destroys the old instance once its items are covered, and the old box leaves sweep-a.yml;
* teardown of the replacement, approved by name, pulls the results to the laptop and terminates it: the meter is
  stopped once on each instance, the right one, and the inventory ends empty.

Without the API read the preempted box only ever read as unreachable (a static inventory has no provider_state to
change); without the inventory's update the replacement's job and meter were invisible to every later command.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import yaml

from labhelpers import LAB, REPO, fake_api, needs_root, started_fleet
from lab_teardown_support import checkpoint
from test_autopilot_lab import wait_for
# the queue, and the filesystem that outlives the instance (a directory of the checkout that every lab box binds)
from test_autopilot_replace_lab import DURABLE, QUEUE, SHARED
from test_launch_lab import runs, wait_finished

pytestmark = needs_root
VENV_BIN = os.path.join(REPO, ".venv", "bin")
FLEET = os.path.join(LAB, "fleet")
KEY = "LABKEY-replace-rented-never-shown"
RENTED = os.path.join("inventories", "rented", "sweep-a.yml")
# p0 finishes at once; p1 checkpoints to its durable directory, then trains forever on the first box (the market
# takes it mid-item) and, resumed from that checkpoint, finishes at once on its replacement
TRAIN_SH = r"""#!/usr/bin/env bash
echo "$TRAINER_ITEM $1 $(hostname) start" >> "$HOME/launch-runs.log"
if [ "$1" = p1 ]; then
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
    # lab-01 stays out of it: the rent's boxes are the ones its offers start (lab-02, then the replacement lab-03)
    with started_fleet(state, "--size", "1", "--platform", "lab-01=vastai") as fleet:
        provisioner = fake_api.LabProvisioner(state, delay=0.5, first_index=2)
        fake = fake_api.FakeAPI("vastai", KEY, offers=[fake_api.vastai_offer(1, "8xh100"),
                                                       fake_api.vastai_offer(2, "8xh100")],
                                provisioner=provisioner).start()
        os.makedirs(SHARED, exist_ok=True)
        try:
            yield fleet, fake, tmp_path_factory.mktemp("laptop")
        finally:
            fake.stop()
            shutil.rmtree(SHARED, ignore_errors=True)
        assert provisioner.errors == []


def playbook(lab, *argv):
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
    assert proc.returncode == 0, (argv, out[-8000:])
    assert KEY not in out
    return out


def job_vars(laptop):
    return json.dumps(dict(DURABLE, launch_src=str(laptop / "src"), launch_command="bash train.sh",
                           launch_queue=QUEUE, launch_min_seconds=0))


def tick(lab):
    _fleet, _fake, laptop = lab
    playbook(lab, "-i", RENTED, "remote_gpu.trainer.autopilot", "-e", job_vars(laptop), "-e", json.dumps({
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


def test_the_readmes_rent_flow_replaces_a_preempted_box_in_the_rented_inventory_and_stops_each_meter_once(lab):
    fleet, fake, laptop = lab
    src = laptop / "src"
    src.mkdir()
    (src / "train.sh").write_text(TRAIN_SH)
    for arg in QUEUE:
        (src / ("ckpt-%s.safetensors" % arg)).write_bytes(checkpoint(arg))
    (laptop / "my_fleet.yml").write_text("autodl:\n  hosts:\n    autodl-4090: {ansible_host: 127.0.0.1, ansible_port: 9}\n")

    # rent one bid box (the market may take it), then launch the queue there, over the inventory rent wrote
    playbook(lab, "-i", "my_fleet.yml", "remote_gpu.trainer.rent", "-e", json.dumps({
        "rent_name": "sweep-a", "rent_provider": "vastai", "rent_count": 1, "rent_gpu": "H100_SXM", "rent_gpu_count": 8,
        "rent_max_price": 5, "rent_image": "pytorch/pytorch:latest", "rent_disk_gb": 64, "rent_interruptible": True,
        "rent_poll_interval": 0.2}))
    (old,) = rented_hosts(laptop)["vastai"]
    old_vars = yaml.safe_load((laptop / RENTED).read_text())["all"]["children"]["vastai"]["hosts"][old]
    assert old_vars["provider_state"] == "running"  # what rent saw, and all the inventory will ever say
    old_box = lab_name(fleet, (old_vars["ansible_host"], int(old_vars["ansible_port"])))
    playbook(lab, "-i", RENTED, "remote_gpu.trainer.launch", "-e", job_vars(laptop))
    wait_for(lambda: any(line.startswith("001") for line in runs(fleet, old_box)), what="item 001 to start")

    # a tick while it trains keeps the queue's snapshot (what the old box held)
    rows = tick(lab)
    assert rows[old]["state"].startswith("running"), rows[old]

    # the market takes it (vast.ai: stopped while intended running, a bid instance) and never gives it back
    (record,) = [r for r in fake.records if str(r["id"]) == str(old_vars["provider_id"])]
    record.update(actual_status="stopped", cur_state="stopped", intended_status="running")
    subprocess.run([FLEET, "vanish", old_box], env=dict(os.environ, LAB_STATE_DIR=fleet.state), check=True,
                   capture_output=True)
    reads = len([r for r in fake.api_requests() if r["method"] == "GET" and r["path"].startswith("/api/v0/instances/")])
    rows = tick(lab)
    assert (rows[old]["action"], rows[old]["ok"], rows[old]["state"]) == ("replace", True, "replaced"), rows[old]
    # the tick asked vast.ai about the box that did not answer: the inventory still says it runs
    assert len([r for r in fake.api_requests() if r["method"] == "GET" and r["path"].rstrip("/").endswith(
        "/api/v0/instances/%s" % old_vars["provider_id"])]) > reads, fake.api_requests()[-10:]
    assert len([r for r in fake.api_requests() if r["method"] == "PUT" and r["path"].startswith("/api/v0/asks/")]) == 2
    assert deletes(fake) == []

    # the replacement joined the inventory rent wrote, in each of its groups, with its own rent's record
    groups = rented_hosts(laptop)
    (new,) = [host for host in groups["vastai"] if host != old]
    assert groups == {"vastai": sorted([old, new]), "rent_sweep_a": sorted([old, new])}, groups
    new_vars = yaml.safe_load((laptop / RENTED).read_text())["all"]["children"]["vastai"]["hosts"][new]
    new_box = lab_name(fleet, (new_vars["ansible_host"], int(new_vars["ansible_port"])))
    replacement_rent = json.loads((laptop / "reports" / "rent-sweep-a-r1.json").read_text())
    assert [(b["host"], b["outcome"]) for b in replacement_rent["boxes"]] == [(new, "kept")], replacement_rent
    assert replacement_rent["spec"]["gpu"] == "H100_SXM" and replacement_rent["provider"] == "vastai"
    assert wait_finished(fleet, new_box, "train")["exit_code"] == 0
    assert [line for line in runs(fleet, new_box) if line.strip()] == [
        "001 p1 %s start" % new_box, "001 p1 %s resumed-from-step 5" % new_box], runs(fleet, new_box)

    # every item is covered: the old instance is destroyed once, and leaves the inventory
    rows = tick(lab)
    assert (rows[old]["action"], rows[old]["ok"], rows[old]["state"]) == ("retire", True, "retired"), rows[old]
    assert rows[new]["state"] == "done", rows[new]
    assert deletes(fake) == [str(old_vars["provider_id"])]
    assert rented_hosts(laptop) == {"vastai": [new], "rent_sweep_a": [new]}

    # the user pulls the results to the laptop and stops the replacement's meter, approved by name
    playbook(lab, "-i", RENTED, "remote_gpu.trainer.teardown", "-l", new, "-e", "teardown_approve=%s" % new)
    assert deletes(fake) == [str(old_vars["provider_id"]), str(new_vars["provider_id"])]
    pulled = laptop / "pulls" / new / "train"
    assert (pulled / "PULL_VERIFIED.json").exists(), sorted(str(p) for p in (laptop / "pulls").rglob("*"))[:40]
    best = sorted(p.relative_to(pulled).as_posix() for p in pulled.rglob("best.safetensors"))
    assert len(best) == 2, best
    assert sorted(p.read_bytes() for p in pulled.rglob("best.safetensors")) == sorted(checkpoint(a) for a in QUEUE)
    assert rented_hosts(laptop) == {"vastai": [], "rent_sweep_a": []}
