"""job_status: queue items, staleness, GPUs, disks and OOM evidence, read from real files and real processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import cgroup as cgroup_utils
from ansible_collections.remote_gpu.trainer.plugins.modules import detached_job, job_status

QUERY_GPU = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "nvidia", "query-gpu")


def report(runner, args):
    args = dict({"fail_on": "never"}, **args)
    failed, result = runner(job_status, args)
    assert not failed, result
    return result


def codes(result):
    return sorted(f["code"] for f in result["findings"])


def make_job(run_dir, name, final=None, items=(), meta=None, log="epoch 1\n"):
    """A job directory as detached_job and the run wrapper leave it, for a job that is no longer running."""
    job_dir = run_dir / name
    (job_dir / "items").mkdir(parents=True)
    (job_dir / "job.pid").write_text("%d\n" % (2 ** 22 + 7))  # a PID that cannot exist (above pid_max)
    (job_dir / "job.starttime").write_text("1\n")
    (job_dir / "job.log").write_text("==== trainer: started 2026-07-03T10:00:00Z pid 4194311 ====\n" + log)
    if final is not None:
        (job_dir / "status.json").write_text(json.dumps(final))
    for item, code in items:
        (job_dir / "items" / item).mkdir()
        (job_dir / "items" / item / "status.json").write_text(
            json.dumps({"item": item, "exit_code": code, "started": "a", "finished": "b"}))
    if meta is not None:
        (job_dir / "job.meta.json").write_text(json.dumps(meta))
    return job_dir


def test_queue_items_against_queue_length(module_runner, tmp_path):
    run_dir = tmp_path / "jobs"
    make_job(run_dir, "q", items=[("001", 0), ("002", 0), ("003", 1)])
    make_job(run_dir, "done", final={"item": None, "exit_code": 0, "started": "a", "finished": "b"},
             items=[("001", 0), ("002", 0)])
    wanted = [{"name": "q", "queue_length": 5}, {"name": "done", "queue_length": 2}]
    result = report(module_runner, {"run_dir": str(run_dir), "jobs": wanted})
    q, done = result["jobs"]
    assert (q["items_done"], q["items_failed"], q["items_total"], q["alive"]) == (2, 1, 5, False)
    assert (done["items_done"], done["last_exit_code"], done["vanished_reason"]) == (2, 0, "finished")
    by_job = {(f["job"], f["code"]) for f in result["findings"]}
    assert by_job == {("q", "job_gone_incomplete"), ("done", "job_finished")}
    assert "2/5" in [f for f in result["findings"] if f["job"] == "q"][0]["message"]


def test_missing_job_and_bad_input(module_runner, tmp_path):
    result = report(module_runner, {"name": "nope", "run_dir": str(tmp_path)})
    assert codes(result) == ["job_missing"] and result["status"] == "FAIL"
    failed, result = module_runner(job_status, {"name": "x", "progress_regex": "(unclosed", "run_dir": str(tmp_path)})
    assert failed and "progress_regex" in result["msg"]
    assert set(result) >= {"status", "jobs", "paths", "gpus", "oom_kills", "findings"}
    failed, result = module_runner(job_status, {"name": "../etc", "run_dir": str(tmp_path)})
    assert failed and "job name" in result["msg"]


def test_reboot_is_recognised_from_uptime(module_runner, tmp_path):
    run_dir = tmp_path / "jobs"
    make_job(run_dir, "rb", meta={"launched_epoch": 1000.0, "log_path": None})  # launched long before this boot
    job = report(module_runner, {"name": "rb", "run_dir": str(run_dir)})["jobs"][0]
    assert job["vanished_reason"] == "reboot"


def test_oom_kill_needs_a_counter_rise(module_runner, tmp_path):
    run_dir = tmp_path / "jobs"
    cgroup = tmp_path / "cgroup"
    (cgroup / "memory").mkdir(parents=True)
    (cgroup / "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 3\noom_kill 3\n")
    (cgroup / "memory" / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    path, _counters = cgroup_utils.read_oom_kills(root=str(cgroup))
    final = {"item": None, "exit_code": 137, "started": "a", "finished": "b"}
    make_job(run_dir, "oom", final=final, meta={"oom_kill_at_launch": 1, "oom_events_path": path,
                                                "launched_epoch": time.time()})
    make_job(run_dir, "kill", final=final, meta={"oom_kill_at_launch": 3, "oom_events_path": path,
                                                 "launched_epoch": time.time()})
    other = tmp_path / "session-7.scope"  # the job was launched from another SSH session's cgroup
    other.mkdir()
    (other / "memory.events").write_text("oom 5\noom_kill 5\n")
    make_job(run_dir, "elsewhere", final={"exit_code": 137}, meta={
        "oom_kill_at_launch": 4, "oom_events_path": str(other / "memory.events"), "launched_epoch": time.time()})
    make_job(run_dir, "unknown", final={"exit_code": 137}, meta={
        "oom_kill_at_launch": 0, "oom_events_path": str(tmp_path / "gone.events"), "launched_epoch": time.time()})
    wanted = [{"name": "oom"}, {"name": "kill"}, {"name": "elsewhere"}, {"name": "unknown"}]
    result = report(module_runner, {"jobs": wanted, "run_dir": str(run_dir), "cgroup_root": str(cgroup)})
    oom, kill, elsewhere, unknown = result["jobs"]
    assert (elsewhere["vanished_reason"], elsewhere["oom_kills_since_launch"]) == ("oom_kill", 1)
    assert (unknown["vanished_reason"], unknown["oom_kills_since_launch"]) == ("killed", None)
    assert result["oom_kills"]["counters"]["oom_kill"] == 3
    assert (oom["vanished_reason"], oom["oom_kills_since_launch"]) == ("oom_kill", 2)
    assert (kill["vanished_reason"], kill["oom_kills_since_launch"]) == ("killed", 0)  # 137 alone is not an OOM
    assert ("oom", "oom_killed") in {(f["job"], f["code"]) for f in result["findings"]}
    assert ("kill", "oom_killed") not in {(f.get("job"), f["code"]) for f in result["findings"]}


def test_silent_live_job_is_stale(module_runner, tmp_path):
    run_dir = tmp_path / "jobs"
    failed, started = module_runner(detached_job, {"name": "quiet", "command": "echo epoch 1; sleep 300",
                                                   "run_dir": str(run_dir), "detach": "nohup"})
    assert not failed
    try:
        log = run_dir / "quiet" / "job.log"
        deadline = time.time() + 10
        while "epoch 1" not in log.read_text() and time.time() < deadline:
            time.sleep(0.1)
        old = time.time() - 3600
        os.utime(str(log), (old, old))
        result = report(module_runner, {"name": "quiet", "run_dir": str(run_dir), "stale_minutes": 30})
        job = result["jobs"][0]
        assert job["alive"] and job["log_age_seconds"] >= 3600
        assert [(f["code"], f["level"]) for f in result["findings"]] == [("log_stale", "WARN")]
        assert codes(report(module_runner, {"name": "quiet", "run_dir": str(run_dir), "stale_minutes": 120})) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(started["pid"], signal.SIGKILL)


def fake_nvidia_smi(bin_dir, output, rc=0):
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "out.txt").write_text(output)
    script = bin_dir / "nvidia-smi"
    script.write_text("#!/bin/bash\ncat %s\nexit %d\n" % (bin_dir / "out.txt", rc))
    script.chmod(0o755)


def derived_gpu_rows(name):
    """Project a real ``--query-gpu`` capture (with header) onto index, utilization.gpu, memory.used, memory.total
    in ``noheader,nounits`` form: DERIVED from the capture, values unchanged."""
    with open(os.path.join(QUERY_GPU, name)) as handle:
        lines = handle.read().splitlines()
    header = [cell.strip().split(" [")[0] for cell in lines[0].split(",")]
    cols = [header.index(field) for field in ("index", "utilization.gpu", "memory.used", "memory.total")]
    rows = []
    for line in lines[1:]:
        cells = [cell.strip() for cell in line.split(",")]
        rows.append(", ".join(cells[col].split(" ")[0] if cells[col][0].isdigit() else cells[col] for col in cols))
    return "\n".join(rows) + "\n"


@pytest.mark.parametrize("capture,util", [
    ("query-gpu-all-fields__nvidia-h200__590.48.01__linux-x86_64.load.csv", 100),
    ("query-gpu-all-fields__nvidia-h200-mig__590.48.01__linux-x86_64.load.csv", None),  # [N/A] under MIG
])
def test_gpu_readings_from_one_nvidia_smi_call(module_runner, tmp_path, monkeypatch, capture, util):
    fake_nvidia_smi(tmp_path / "bin", derived_gpu_rows(capture))
    monkeypatch.setenv("PATH", "%s:%s" % (tmp_path / "bin", os.environ["PATH"]))
    make_job(tmp_path / "jobs", "g", final={"exit_code": 0})
    result = report(module_runner, {"name": "g", "run_dir": str(tmp_path / "jobs"), "gpu": True})
    assert result["gpus"][0]["utilization_pct"] == util
    assert result["gpus"][0]["memory_total_mib"] > 0
    assert codes(result) == ["job_finished"]


def test_gpu_missing_or_failing_is_never_a_failure(module_runner, tmp_path, monkeypatch):
    make_job(tmp_path / "jobs", "g", final={"exit_code": 0})
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = report(module_runner, {"name": "g", "run_dir": str(tmp_path / "jobs"), "gpu": True})
    assert result["gpus"] is None and codes(result) == ["gpu_unavailable", "job_finished"]
    assert result["status"] == "PASS"
    fake_nvidia_smi(tmp_path / "bin", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
                    rc=9)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    result = report(module_runner, {"name": "g", "run_dir": str(tmp_path / "jobs"), "gpu": True})
    assert result["gpus"] is None and "gpu_query_failed" in codes(result)


def test_paths_reuse_the_disk_findings(module_runner, tmp_path):
    make_job(tmp_path / "jobs", "p", final={"exit_code": 0})
    result = report(module_runner, {"name": "p", "run_dir": str(tmp_path / "jobs"),
                                    "paths": [str(tmp_path), str(tmp_path / "absent")]})
    assert result["paths"][0]["exists"] and result["paths"][0]["inodes_total"]
    assert "path_missing" in codes(result)


def test_the_probe_changes_nothing(module_runner, tmp_path):
    job_dir = make_job(tmp_path / "jobs", "ro", final={"exit_code": 1})
    before = {p: os.stat(str(job_dir / p)).st_mtime_ns for p in os.listdir(str(job_dir))}
    failed, result = module_runner(job_status, {"name": "ro", "run_dir": str(tmp_path / "jobs")})
    assert failed and result["changed"] is False  # fail_on FAIL by default
    assert {p: os.stat(str(job_dir / p)).st_mtime_ns for p in os.listdir(str(job_dir))} == before
