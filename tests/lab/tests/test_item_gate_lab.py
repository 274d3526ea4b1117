"""The item gate and launch's preflight on the lab fleet (issue 34, item 1). One fleet of two autodl instances:

* lab-01 (h100-idle): a queue of 4 items whose second fills the data disk (a real 64 MiB tmpfs) past the item
  budget: items 3 and 4 never start, the job pauses with exit 75, patrol's job_status names the disk in one
  item_gate_refused finding, and a relaunch after the disk is freed resumes at item 3;
* lab-02 (8xh100-hwslowdown, a real capture with HW Slowdown active on every GPU): launch is refused with
  preflight's top finding, and with launch_ignore_preflight it starts and the item runs (the gate lets the slowdown
  the user accepted pass).
"""
from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from labhelpers import REPO, needs_root, started_fleet

pytestmark = needs_root
VENV_BIN = os.path.join(REPO, ".venv", "bin")
MIB = 1 << 20

# usage: bash fill.sh MIB: writes best.pt and MIB MiB of fill.bin (neither best* nor latest*: it stays) in its output
FILL_SH = r"""#!/usr/bin/env bash
echo "$TRAINER_ITEM $1" >> "$HOME/gate-runs.log"
printf 'best-%s' "$TRAINER_ITEM" > "$TRAINER_OUTPUT_DIR/best.pt"
if [ "$1" -gt 0 ]; then dd if=/dev/zero of="$TRAINER_OUTPUT_DIR/fill.bin" bs=1M count="$1" status=none; fi
exit 0
"""


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "2", "--platform", "lab-02=autodl",
                       "--scenario", "lab-02=8xh100-hwslowdown") as lab:
        yield lab


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    root = tmp_path_factory.mktemp("src")
    (root / "fill.sh").write_text(FILL_SH)
    return root


def env():
    return dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))


def launch(fleet, src, host, queue, **extra):
    variables = {"launch_src": str(src), "launch_command": "bash fill.sh", "launch_queue": queue,
                 "launch_min_seconds": 0}
    variables.update(extra)
    return subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", fleet.inventory_path, "-l", host,
                           os.path.join(REPO, "playbooks", "launch.yml"), "-e", json.dumps(variables)],
                          capture_output=True, text=True, env=env(), timeout=600, check=False)


def read_json(fleet, host, path):
    out = fleet.ssh(host, "cat %s 2>/dev/null || true" % path).stdout
    return json.loads(out) if out.strip() else None


def wait_finished(fleet, host, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = read_json(fleet, host, "~/.trainer/jobs/train/status.json")
        if status is not None:
            return status
        time.sleep(0.5)
    raise AssertionError(fleet.ssh(host, "tail -30 ~/.trainer/jobs/train/job.log", check=False).stdout)


def job_status(fleet, host):
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible"), "-i", fleet.inventory_path, host, "-o", "-m",
                           "remote_gpu.trainer.job_status", "-a", json.dumps({"name": "train", "fail_on": "never"})],
                          capture_output=True, text=True, env=env(), timeout=120, check=False)
    line = next((line for line in proc.stdout.splitlines() if line.startswith(host + " | ")), "")
    assert " => " in line, proc.stdout + proc.stderr
    return json.loads(line.split(" => ", 1)[1])


def test_a_queue_pauses_before_the_item_that_would_not_fit_and_resumes_after_the_fix(fleet, src):
    budget = {"data_bytes": 30 * MIB}  # the disk has 64 MiB; item 001 leaves it about 24 MiB free
    proc = launch(fleet, src, "lab-01", ["0", "40", "0", "0"], launch_item_budget=budget)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    job = "~/.trainer/jobs/train"
    status = wait_finished(fleet, "lab-01")
    log = fleet.ssh("lab-01", "cat %s/job.log" % job).stdout
    assert status["exit_code"] == 75, log
    assert fleet.ssh("lab-01", "cat ~/gate-runs.log").stdout.split() == ["000", "0", "001", "40"], log
    assert fleet.ssh("lab-01", "ls %s/items" % job).stdout.split() == ["000", "001"]  # 002 and 003 never started
    refusal = read_json(fleet, "lab-01", "%s/gate-refused.json" % job)
    assert refusal["item"] == "002" and [f["cause"] for f in refusal["findings"]] == ["bytes_short"], refusal
    assert refusal["findings"][0]["path"] == "/root/autodl-tmp/outputs/train", refusal
    assert "item 002 refused by the item gate (bytes_short): the data disk /root/autodl-tmp/outputs/train" in log

    result = job_status(fleet, "lab-01")
    gate = [f for f in result["findings"] if f["code"] == "item_gate_refused"]
    assert len(gate) == 1 and "/root/autodl-tmp/outputs/train" in gate[0]["message"], result["findings"]
    assert "job_gone_incomplete" not in [f["code"] for f in result["findings"]]

    # the user frees the disk and relaunches: the queue resumes at item 002
    fleet.ssh("lab-01", "rm /root/autodl-tmp/outputs/train/001/fill.bin")
    proc = launch(fleet, src, "lab-01", ["0", "40", "0", "0"], launch_item_budget=budget)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    status = wait_finished(fleet, "lab-01")
    assert status["exit_code"] == 0, fleet.ssh("lab-01", "tail -20 %s/job.log" % job).stdout
    assert fleet.ssh("lab-01", "cat ~/gate-runs.log").stdout.split()[4:] == ["002", "0", "003", "0"]
    assert fleet.ssh("lab-01", "test ! -e %s/gate-refused.json" % job, check=False).returncode == 0


def test_a_throttled_box_is_refused_unless_preflight_is_ignored(fleet, src):
    proc = launch(fleet, src, "lab-02", ["0"])
    assert proc.returncode != 0
    assert "unfit to train on (preflight FAIL), nothing was launched: throttle_active" in proc.stdout, proc.stdout
    assert fleet.ssh("lab-02", "test ! -e ~/.trainer/jobs/train/queue.json", check=False).returncode == 0

    proc = launch(fleet, src, "lab-02", ["0"], launch_ignore_preflight=True)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    status = wait_finished(fleet, "lab-02")
    assert status["exit_code"] == 0, fleet.ssh("lab-02", "tail -20 ~/.trainer/jobs/train/job.log").stdout
    assert fleet.ssh("lab-02", "cat ~/gate-runs.log").stdout.split() == ["000", "0"]
