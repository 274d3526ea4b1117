"""patrol.yml on localhost with the local profile: a real detached job, the line, the table, the reports."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest

from pbhelpers import REPO, VENV_BIN, ansible_env, run_playbook

GPU_BIN = REPO / "tests/lab/gpu/bin"
SCENARIOS = REPO / "tests/lab/gpu/scenarios"


def gpu_env():
    return {"PATH": "%s:%s" % (GPU_BIN, os.environ["PATH"]), "FAKE_GPU_SCENARIO": str(SCENARIOS / "h100-idle")}


def job(local_inventory, run_dir, state, command=None):
    args = {"name": "train", "run_dir": str(run_dir), "state": state, "stop_timeout": 2, "detach": "nohup"}
    if command:
        args["command"] = command
    proc = subprocess.run([str(VENV_BIN / "ansible"), "-i", str(local_inventory), "localhost", "-m",
                           "remote_gpu.trainer.detached_job", "-a", json.dumps(args)],
                          capture_output=True, text=True, env=ansible_env(), timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture
def running_job(local_inventory, tmp_path):
    run_dir = tmp_path / "jobs"
    job(local_inventory, run_dir, "started", 'mkdir -p "$TRAINER_ITEMS_DIR/001" && '
        'echo \'{"item": "001", "exit_code": 0}\' > "$TRAINER_ITEMS_DIR/001/status.json"; '
        'for i in $(seq 1 600); do echo "Epoch $i/600 val_error=0.31"; sleep 1; done')
    deadline = time.monotonic() + 10
    while not (run_dir / "train" / "items" / "001" / "status.json").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        yield run_dir
    finally:
        job(local_inventory, run_dir, "stopped")


def patrol(local_inventory, tmp_path, *args):
    report = tmp_path / "patrol.json"
    proc = run_playbook(REPO / "playbooks/patrol.yml", local_inventory, "-e", "patrol_report_path=%s" % report,
                        *args, **gpu_env())
    return proc, json.loads(report.read_text())


def test_patrol_reports_a_live_job_with_progress_and_writes_a_textfile(local_inventory, running_job, tmp_path):
    prom = tmp_path / "node_exporter" / "trainer.prom"
    proc, report = patrol(local_inventory, tmp_path, "-e", "patrol_run_dir=%s" % running_job,
                          "-e", "patrol_queue_length=4", "-e", "patrol_prom_path=%s" % prom)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    row = report["hosts"][0]
    assert report["kind"] == "patrol" and row["host"] == "localhost" and row["verdict"] == "PASS"
    assert re.search(r"^localhost PASS train ALIVE items 1/4 epoch \d+/600 log 0m \| ", proc.stdout, re.M)
    assert "JOBS" in proc.stdout and "patrol: 1 host(s): PASS 1" in proc.stdout
    text = prom.read_text()
    assert 'trainer_job_alive{host="localhost",job="train"} 1\n' in text
    assert 'trainer_job_items_total{host="localhost",job="train"} 4\n' in text
    assert sorted(p.name for p in prom.parent.iterdir()) == ["trainer.prom"]


def test_patrol_escalates_a_stopped_job_and_refuses_a_textfile_without_prom_suffix(local_inventory, tmp_path):
    run_dir = tmp_path / "jobs"
    job(local_inventory, run_dir, "started", "echo epoch 1; sleep 600")
    job(local_inventory, run_dir, "stopped")
    proc, report = patrol(local_inventory, tmp_path, "-e", "patrol_run_dir=%s" % run_dir,
                          "-e", "patrol_queue_length=3")
    assert proc.returncode != 0
    row = report["hosts"][0]
    assert row["verdict"] == "FAIL" and any(r.startswith("job_gone_incomplete: ") for r in row["reasons"])
    assert "localhost FAIL train GONE items 0/3 epoch 1 exit 143 (stopped)" in proc.stdout
    assert "fatal: [localhost]: FAILED!" in proc.stdout and "escalated: job_gone_incomplete" in proc.stdout
    proc = run_playbook(REPO / "playbooks/patrol.yml", local_inventory, "-e", "patrol_run_dir=%s" % run_dir,
                        "-e", "patrol_report_path=%s" % (tmp_path / "r.json"), "-e",
                        "patrol_prom_path=%s" % (tmp_path / "trainer.txt"), **gpu_env())
    assert proc.returncode != 0 and "must end in .prom" in proc.stdout
