"""A failed sync never causes retraining (issue 16, item 2), on a lab AutoDL box whose durable tier is a real tmpfs
with a small inode cap.

The item trains (best.pt written), then waits for a flag; meanwhile the test fills every inode of the durable FS,
from the host's side of its mount. The item's sync then fails for real (the kernel's ENOSPC budget, no mock): the
item is "trained, sync failed", patrol shows sync_failed naming the files and the reason, a relaunch while the FS
is still full retries only the sync (the command starts once), and after the inodes are freed a relaunch completes
it, with the item's log synced beside best.pt.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess

import pytest

from labhelpers import REPO, needs_root, started_fleet
from lab_teardown_support import fill_inodes, safetensors_bytes
from test_launch_lab import TRAIN_SH, launch, read_json, runs, wait_finished

pytestmark = needs_root
VENV_BIN = os.path.join(REPO, ".venv", "bin")
HOST = "lab-01"
DURABLE_INODES = 64
FLAG = "/root/go-s0"
STATUS = "~/.trainer/jobs/train/items/000/status.json"
# launch_min_seconds 0: the item ends as soon as the test lets it, which is no "too fast" training run
EXTRA = {"launch_queue": ["s0 --wait %s" % FLAG], "launch_min_seconds": 0}


# launch_lab's training script, with a real checkpoint as best.pt (teardown checks that every checkpoint loads)
BEST = safetensors_bytes()
WRITE_BEST = 'printf \'best-%s\' "$name" > "$TRAINER_OUTPUT_DIR/best.pt"'


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    assert WRITE_BEST in TRAIN_SH
    root = tmp_path_factory.mktemp("src")
    (root / "train.sh").write_text(TRAIN_SH.replace(WRITE_BEST, 'cp best.safetensors "$TRAINER_OUTPUT_DIR/best.pt"'))
    (root / "best.safetensors").write_bytes(BEST)
    return root


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "1", "--durable-inodes", str(DURABLE_INODES)) as lab:
        yield lab


def durable_mount(fleet):
    """The durable FS of HOST as the host namespace sees it (the lab binds it into the instance)."""
    hv = fleet.hosts[HOST]
    return os.path.join(fleet.state, "regions", "%s-%s" % (hv["lab_platform"], hv["lab_region"]))


def run_playbook(fleet, cwd, name, *args):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))
    return subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", fleet.inventory_path,
                           os.path.join(REPO, "playbooks", name), *args], capture_output=True, text=True, env=env,
                          cwd=str(cwd), stdin=subprocess.DEVNULL, timeout=300, check=False)


def patrol(fleet, tmp_path):
    report = tmp_path / "patrol.json"
    proc = run_playbook(fleet, tmp_path, "patrol.yml", "-e", "patrol_report_path=%s" % report)
    rows = {row["host"]: row for row in json.loads(report.read_text())["hosts"]}
    return proc, rows[HOST]


def test_a_full_durable_tier_never_causes_retraining(fleet, src, tmp_path):
    mount = durable_mount(fleet)
    launch(fleet, src, extra=EXTRA)
    fleet.ssh(HOST, "for i in $(seq 1 300); do grep -q '^000 s0 ' ~/launch-runs.log 2>/dev/null && exit 0; "
                    "sleep 0.2; done; exit 1")
    filler = fill_inodes(mount, DURABLE_INODES)  # while the item runs: its sync will find no free inode
    fleet.ssh(HOST, "touch %s" % FLAG)
    assert wait_finished(fleet, HOST, "train")["exit_code"] == 1

    status = read_json(fleet, HOST, STATUS)
    assert (status["exit_code"], status["command_exit_code"]) == (1, 0)
    output_dir = status["output_dir"]
    trained = fleet.ssh(HOST, "sha256sum %s/best.pt" % output_dir).stdout.split()[0]
    assert trained == hashlib.sha256(BEST).hexdigest()

    # Relaunch while the durable tier is still full: launch's preflight probe refuses the box, naming the full tier,
    # and nothing runs again (the trained checkpoint stays where it is, the item stays sync_failed).
    proc = run_playbook(fleet, tmp_path, "launch.yml", "-e", json.dumps(
        dict(EXTRA, launch_src=str(src), launch_command="bash train.sh")))
    assert proc.returncode != 0 and "inodes_exhausted: /root/autodl-fs" in proc.stdout, proc.stdout[-4000:]
    assert [line for line in runs(fleet, HOST) if line] == ["000 s0 %s" % HOST]
    assert fleet.ssh(HOST, "sha256sum %s/best.pt" % output_dir).stdout.split()[0] == trained
    status = read_json(fleet, HOST, STATUS)
    assert (status["exit_code"], status["command_exit_code"], status["state"]) == (1, 0, "sync_failed")
    assert status.get("sync_attempts", 1) == 1 and sorted(status["unsynced"]) == ["best.pt", "trainer-item.log"]
    assert "inodes" in status["sync_error"] and "not enough room" in status["sync_error"], status["sync_error"]

    proc, row = patrol(fleet, tmp_path)
    assert proc.returncode != 0 and row["verdict"] == "FAIL"
    assert row["top_finding"].startswith("sync_failed: "), row["top_finding"]
    sync_failed = [f for f in row["findings"] if f["code"] == "sync_failed"]
    assert len(sync_failed) == 1 and sync_failed[0]["level"] == "FAIL" and sync_failed[0]["item"] == "000"
    assert "best.pt" in sync_failed[0]["message"] and "inodes" in sync_failed[0]["message"]
    assert "(1 trained, not synced)" in row["line"]

    # Teardown now, with no roster: what would die with the box (the trained files on the data disk that never
    # reached the durable tier) is pulled and verified before the meter stops, once.
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    proc = run_playbook(fleet, laptop, "teardown.yml", "-e", "teardown_approve=%s" % HOST)
    assert proc.returncode == 0, proc.stdout[-5000:]
    pulled = laptop / "pulls" / HOST / "train"
    verified = json.loads((pulled / "PULL_VERIFIED.json").read_text())
    assert sorted(f["path"] for f in verified["files"]) == ["unsynced/000/best.pt", "unsynced/000/trainer-item.log"]
    assert hashlib.sha256((pulled / "data" / "unsynced" / "000" / "best.pt").read_bytes()).hexdigest() == trained
    assert [line["argv"] for line in fleet.meter(HOST)] == [["shutdown", "-h", "now"]]

    # Free the inodes, relaunch: the sync completes, still without a second run of the command.
    shutil.rmtree(filler)
    launch(fleet, src, extra=EXTRA)
    assert wait_finished(fleet, HOST, "train")["exit_code"] == 0
    done = read_json(fleet, HOST, STATUS)
    assert (done["exit_code"], done["state"], done["unsynced"], done["sync_error"]) == (0, "done", [], None)
    assert sorted(f["path"] for f in done["synced"]) == ["best.pt", "trainer-item.log"]
    durable = "/root/autodl-fs/runs/train/000"
    assert fleet.ssh(HOST, "sha256sum %s/best.pt" % durable).stdout.split()[0] == trained
    item_log = fleet.ssh(HOST, "cat %s/trainer-item.log" % durable).stdout
    assert item_log.startswith("==== trainer: item 000 started ") and "epoch 2/2" in item_log
    assert [line for line in runs(fleet, HOST) if line] == ["000 s0 %s" % HOST]
    log = fleet.ssh(HOST, "cat ~/.trainer/jobs/train/job.log").stdout
    assert log.count("==== trainer: item 000 started ") == 1  # one start of the item's command, ever
    assert log.count("its command is not run again, only its sync is retried") == 1  # the refused relaunch ran nothing

    proc, row = patrol(fleet, tmp_path)
    assert proc.returncode == 0 and row["verdict"] == "PASS", row["line"]
