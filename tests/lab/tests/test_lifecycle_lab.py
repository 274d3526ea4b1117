"""The lifecycle end to end, as a new user runs the README's commands, in order, on a three-host lab (issue 16,
item 9): launch a queue of three items over the two AutoDL hosts (one region, so one shared durable directory),
patrol them with the README's `-e patrol_queue_length=3`, then tear down one host, then the other.

What the user wants at the end: every result on the controller, verified against the sha256 recorded when it was
synced, and exactly one meter-stop per approved host (none on the third host, which was never approved).
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess

import pytest

from labhelpers import REPO, needs_root, started_fleet
from lab_teardown_support import checkpoint
from test_launch_lab import read_json, runs, wait_finished

pytestmark = needs_root
VENV_BIN = os.path.join(REPO, ".venv", "bin")
SHUTDOWN = ["shutdown", "-h", "now"]
QUEUE = ["q0", "q1", "q2"]
# The "training": one real safetensors checkpoint per item (teardown checks that every checkpoint loads), chosen by
# the item's argument, and a scratch file that launch prunes after the verified sync.
TRAIN_SH = r"""#!/usr/bin/env bash
echo "$TRAINER_ITEM $1 $(hostname)" >> "$HOME/launch-runs.log"
for e in 1 2; do echo "epoch $e/2"; sleep 0.1; done
echo scratch > "$TRAINER_OUTPUT_DIR/latest.pt"
cp "ckpt/$1.safetensors" "$TRAINER_OUTPUT_DIR/best.safetensors"
"""
SHARE = {"lab-01": ["000", "002"], "lab-02": ["001"]}
RUN = "train"  # launch's default run id (launch_name)


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    with started_fleet(tmp_path_factory.mktemp("lab")) as lab:  # the default: lab-01, lab-02 autodl; lab-03 runpod
        assert lab.groups["autodl"] == ["lab-01", "lab-02"]
        yield lab


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    root = tmp_path_factory.mktemp("src")
    (root / "train.sh").write_text(TRAIN_SH)
    (root / "ckpt").mkdir()
    for arg in QUEUE:
        (root / "ckpt" / ("%s.safetensors" % arg)).write_bytes(checkpoint(arg))
    return root


def playbook(fleet, cwd, name, *args):
    """``ansible-playbook -i INVENTORY playbooks/NAME ARGS`` as the README writes it, run from ``cwd`` (where the
    reports and the pulls land); stdin is /dev/null, so a prompt could never wait."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))
    return subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", fleet.inventory_path,
                           os.path.join(REPO, "playbooks", name), *args], capture_output=True, text=True, env=env,
                          cwd=str(cwd), stdin=subprocess.DEVNULL, timeout=600, check=False)


def shown(proc):
    return proc.stdout[-6000:] + proc.stderr[-3000:]


def test_launch_patrol_teardown_as_the_readme_says(fleet, src, tmp_path):
    laptop = tmp_path / "laptop"
    laptop.mkdir()

    # 1. launch.yml -l autodl with a queue of three items
    proc = playbook(fleet, laptop, "launch.yml", "-l", "autodl", "-e", "launch_src=%s" % src,
                    "-e", "launch_command='bash train.sh'",
                    # its items take a second: launch_min_seconds 0, or each would be item_too_fast (a WARN)
                    "-e", json.dumps({"launch_queue": QUEUE, "launch_min_seconds": 0}))
    assert proc.returncode == 0, shown(proc)
    for host, ids in SHARE.items():
        assert wait_finished(fleet, host, "train")["exit_code"] == 0
        assert sorted(line.split()[0] for line in runs(fleet, host) if line) == ids
        record = read_json(fleet, host, "~/.trainer/jobs/train/queue.json")
        assert [entry["item"] for entry in record["items"]] == ids and record["queue_length"] == 3

    # 2. patrol.yml -e patrol_queue_length=3: each host is graded on its own share, so the finished fan-out is PASS
    proc = playbook(fleet, laptop, "patrol.yml", "-l", "autodl", "-e", "patrol_queue_length=3")
    assert proc.returncode == 0, shown(proc)
    report = json.loads((laptop / "reports" / "patrol.json").read_text())
    rows = {row["host"]: row for row in report["hosts"]}
    for host, ids in SHARE.items():
        assert rows[host]["verdict"] == "PASS", rows[host]["line"]
        (job,) = rows[host]["jobs"]
        assert (job["items_done"], job["items_total"], job["items_source"]) == (len(ids), len(ids), "launch")
        assert "job_gone_incomplete" not in [f["code"] for f in rows[host]["findings"]]

    # 3. teardown.yml of one host, then of the other: no roster, no run id; launch's record says what to pull
    for host, ids in SHARE.items():
        proc = playbook(fleet, laptop, "teardown.yml", "-l", host, "-e", "teardown_approve=%s" % host)
        assert proc.returncode == 0, shown(proc)
        pulled = laptop / "pulls" / host / RUN
        verified = json.loads((pulled / "PULL_VERIFIED.json").read_text())
        assert sorted(f["path"] for f in verified["files"]) == sorted(
            "durable/%s/%s" % (item, name) for item in ids for name in ("best.safetensors", "trainer-item.log"))
        for item in ids:
            best = (pulled / "data" / "durable" / item / "best.safetensors").read_bytes()
            assert best == checkpoint(QUEUE[int(item)])
            status = read_json(fleet, host, "~/.trainer/jobs/train/items/%s/status.json" % item)
            recorded = {entry["path"]: entry["sha256"] for entry in status["synced"]}
            assert hashlib.sha256(best).hexdigest() == recorded["best.safetensors"]
        receipt = json.loads((laptop / "pulls" / host / "TEARDOWN_RECEIPT.json").read_text())
        assert (receipt["host"], receipt["verb"], receipt["jobs"]) == (host, "power_off", ["train"])
        assert [(run["run_id"], run["manifest_sha256"]) for run in receipt["runs"]] == [
            (RUN, verified["manifest_sha256"])]

    # the meter stopped exactly once per approved host, and never on the host nobody approved
    assert {host: [line["argv"] for line in fleet.meter(host)] for host in fleet.hosts} == {
        "lab-01": [SHUTDOWN], "lab-02": [SHUTDOWN], "lab-03": []}
