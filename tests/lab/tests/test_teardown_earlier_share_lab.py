"""Teardown pulls what a box ran for an earlier share of the queue, and a failed item's log: three AutoDL boxes,
each in a region of its own (no durable directory shared), the README's commands in a user's order.

- launch train, a queue of three over the three boxes: item 000 on lab-01, 001 on lab-02, 002 on lab-03, each done
  and synced to its box's durable directory;
- the user relaunches train over lab-02 and lab-03 only (lab-01 is to go): the queue is spread again, lab-02 takes
  000 and 002 (it has no status for them, so it runs them), lab-03 takes 001, which fails with a traceback. lab-03's
  queue record now lists 001 only, but 002's result, trained there first, is still only on lab-03;
- teardown of lab-03 (approved by name) pulls both: 002's durable copy (an earlier share) and 001's trainer-item.log
  with the crash, each verified, and only then stops lab-03's meter, once; lab-01 and lab-02 are not touched.
"""
from __future__ import annotations

import hashlib
import json
import re

import pytest

from labhelpers import needs_root, started_fleet
from lab_teardown_support import checkpoint
from test_launch_lab import read_json, wait_finished
from test_teardown_every_job_lab import playbook, shown

pytestmark = needs_root
HOSTS = ("lab-01", "lab-02", "lab-03")
# The "training": a real safetensors checkpoint per argument (teardown checks that every checkpoint loads); on a
# box with ~/fail-<arg>, that item fails with a traceback in its log.
TRAIN_SH = r"""#!/usr/bin/env bash
arg=$1
echo "epoch 1/2"
if [ -e "$HOME/fail-$arg" ]; then
  echo "Traceback (most recent call last):"
  echo "RuntimeError: CUDA error: an illegal memory access was encountered"
  exit 1
fi
cp "ckpt/$arg.safetensors" "$TRAINER_OUTPUT_DIR/best.safetensors"
"""
QUEUE = ["t0", "t1", "t2"]


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    regions = [arg for index, host in enumerate(HOSTS) for arg in ("--region", "%s=region-%d" % (host, index))]
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "3", "--platform", "all=autodl", *regions) as lab:
        assert [lab.hosts[h]["lab_platform"] for h in HOSTS] == ["autodl"] * 3
        yield lab


def test_teardown_pulls_an_earlier_share_and_a_failed_items_log_before_the_meter_stops(fleet, tmp_path):
    laptop = tmp_path / "laptop"
    (laptop / "ckpt").mkdir(parents=True)
    (laptop / "train.sh").write_text(TRAIN_SH)
    for arg in QUEUE:
        (laptop / "ckpt" / ("%s.safetensors" % arg)).write_bytes(checkpoint(arg))
    for host in HOSTS:
        open(fleet.hosts[host]["lab_meter_log"], "w", encoding="utf-8").close()
    launch = ["-e", "launch_src=%s" % laptop, "-e", "launch_command='bash train.sh'",
              "-e", json.dumps({"launch_queue": QUEUE})]

    proc = playbook(fleet, laptop, "launch.yml", "-l", ",".join(HOSTS), *launch)
    assert proc.returncode == 0, shown(proc)
    for host in HOSTS:
        assert wait_finished(fleet, host, "train")["exit_code"] == 0
    first = read_json(fleet, "lab-03", "~/.trainer/jobs/train/items/002/status.json")
    assert first["exit_code"] == 0 and first["synced"]

    # the relaunch over two of the boxes spreads the queue again: lab-03's share is now item 001 alone, which fails
    fleet.ssh("lab-03", "touch ~/fail-t1")
    for host in ("lab-02", "lab-03"):
        fleet.ssh(host, "rm ~/.trainer/jobs/train/status.json")   # the first run's end: wait for the second's
    proc = playbook(fleet, laptop, "launch.yml", "-l", "lab-02,lab-03", *launch)
    assert proc.returncode == 0, shown(proc)
    wait_finished(fleet, "lab-03", "train")
    queue = read_json(fleet, "lab-03", "~/.trainer/jobs/train/queue.json")
    assert [entry["item"] for entry in queue["items"]] == ["001"]
    assert read_json(fleet, "lab-03", "~/.trainer/jobs/train/items/001/status.json")["exit_code"] == 1
    wait_finished(fleet, "lab-02", "train")

    proc = playbook(fleet, laptop, "teardown.yml", "-l", "lab-03", "-e", "teardown_approve=lab-03")
    assert proc.returncode == 0, shown(proc)
    pulled = laptop / "pulls" / "lab-03" / "train"
    verified = json.loads((pulled / "PULL_VERIFIED.json").read_text())
    listed = {entry["path"]: entry["sha256"] for entry in verified["files"]}
    # 002, trained here for the first share: its durable copy, as its sync verified it
    best = (pulled / "data" / "durable" / "002" / "best.safetensors").read_bytes()
    assert best == checkpoint("t2")
    recorded = {entry["path"]: entry["sha256"] for entry in first["synced"]}
    assert listed["durable/002/best.safetensors"] == recorded["best.safetensors"] == hashlib.sha256(best).hexdigest()
    # 001 failed here: its part of the job log, with the crash, is on the laptop
    log = (pulled / "data" / "unsynced" / "001" / "trainer-item.log").read_text()
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in log
    assert "unsynced/001/trainer-item.log" in listed
    receipt = json.loads((laptop / "pulls" / "lab-03" / "TEARDOWN_RECEIPT.json").read_text())
    assert receipt["acted"] is True
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", receipt["time"]), receipt["time"]  # UTC, and says so
    # the meter stopped once, on lab-03 only
    assert [line["argv"] for line in fleet.meter("lab-03")] == [["shutdown", "-h", "now"]]
    assert fleet.meter("lab-01") == [] and fleet.meter("lab-02") == []
