"""The item gate (issue 34, item 1): its pure judgement, the gate on a box replayed by the lab's GPU emulator (real
captures), the queue runner that stops before a refused item, and what patrol and the autopilot make of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import autopilot as ap
from ansible_collections.remote_gpu.trainer.plugins.module_utils import item_gate, jobs
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import launch_scripts

REPO = Path(__file__).resolve().parents[4]
EMULATOR_BIN = REPO / "tests" / "lab" / "gpu" / "bin"
SCENARIOS = REPO / "tests" / "lab" / "gpu" / "scenarios"
COLLECTIONS = Path(sys.modules["ansible_collections"].__path__[0]).parent
GIB = 1 << 30


def usage(path, free_gib=50, free_inodes=100000, pct=10, ipct=5):
    return {"path": path, "exists": True, "bytes_free": free_gib * GIB, "bytes_pct": pct, "inodes_free": free_inodes,
            "inodes_pct": ipct}


DISKS = {"data": usage("/root/autodl-tmp/outputs/x"), "durable": usage("/root/autodl-fs/runs/x")}
BUDGET = {"data_bytes": 20 * GIB, "data_inodes": 1000, "durable_bytes": GIB, "durable_inodes": 500}
IDLE_GPU = [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "pci": "00000000:18:00.0", "throttle_reasons": []}]


def causes(found):
    assert all(f["code"] == "item_gate_refused" and f["level"] == "FAIL" for f in found), found
    return [f["cause"] for f in found]


def test_a_fit_box_lets_the_item_start():
    assert item_gate.judge(DISKS, BUDGET, IDLE_GPU, apps=[{"pid": 7, "used_memory_mib": 512}]) == []
    assert item_gate.judge(DISKS, {}, None) == []  # no budget, no nvidia-smi (a CPU box)


def test_a_data_disk_below_the_budget_is_refused_and_named():
    disks = dict(DISKS, data=usage("/root/autodl-tmp/outputs/x", free_gib=8))
    found = item_gate.judge(disks, BUDGET, IDLE_GPU)
    assert causes(found) == ["bytes_short"]
    assert "data disk /root/autodl-tmp/outputs/x" in found[0]["message"] and "8.0 GiB" in found[0]["message"]
    assert found[0]["path"] == "/root/autodl-tmp/outputs/x" and "launch_item_budget" in found[0]["action"]


def test_durable_inodes_a_full_disk_and_a_missing_path():
    disks = {"data": usage("/d", pct=99), "durable": usage("/fs", free_inodes=100)}
    assert causes(item_gate.judge(disks, BUDGET)) == ["bytes_short", "inodes_short"]
    assert "99 % full" in item_gate.judge(disks, {})[0]["message"]  # 99 % refuses even without a budget
    missing = {"data": {"path": "/gone", "exists": False}}
    assert causes(item_gate.judge(missing, BUDGET)) == ["path_missing"]


def test_gpu_memory_held_outside_the_job():
    apps = [{"pid": 11327, "used_memory_mib": 2566, "process_name": "/root/tools/memhog"},
            {"pid": 42, "used_memory_mib": 70000, "process_name": "python"},   # the job's own
            {"pid": 43, "used_memory_mib": 900, "process_name": "small"}]      # under the threshold
    found = item_gate.judge(DISKS, BUDGET, IDLE_GPU, apps=apps, job_pids={42})
    assert causes(found) == ["gpu_memory_held"] and found[0]["pid"] == 11327 and "2566 MiB" in found[0]["message"]
    assert item_gate.judge(DISKS, BUDGET, IDLE_GPU, apps=apps, job_pids={42}, gpu_mib=4096) == []


def test_an_active_slowdown_is_refused_unless_preflight_was_ignored():
    gpus = [dict(IDLE_GPU[0], throttle_reasons=["hw_slowdown", "hw_power_brake_slowdown"])]
    found = item_gate.judge(DISKS, BUDGET, gpus)
    assert causes(found) == ["throttle_active"] and "launch_ignore_preflight" in found[0]["action"]
    assert item_gate.judge(DISKS, BUDGET, gpus, accept_slowdown=True) == []
    unreadable = item_gate.judge(DISKS, BUDGET, None, gpu_error="nvidia-smi timed out")
    assert causes(unreadable) == ["gpu_unreadable"]
    assert "remote_gpu.trainer.preflight" in unreadable[0]["action"] and "playbooks/" not in unreadable[0]["action"]


def test_a_new_fatal_xid_is_refused():
    events = item_gate.fatal_events((SCENARIOS / "xid48-dbe" / "kern.log").read_text())
    assert events and all(e["severity"] == "fatal" for e in events)
    found = item_gate.judge(DISKS, BUDGET, IDLE_GPU, new_xids=events[:1])
    assert causes(found) == ["xid_fatal"] and "Xid 48" in found[0]["message"]
    # an application fault (Xid 13) is not the gate's business: the next item may well run
    assert item_gate.fatal_events((SCENARIOS / "xid13-gr-exception" / "kern.log").read_text()) == []


def test_bad_budgets_are_named():
    for budget, word in (({"data_bytes": -1}, "data_bytes"), ({"dataa_bytes": 1}, "unknown"), ([1], "mapping"),
                         ({"durable_inodes": "lots"}, "durable_inodes")):
        with pytest.raises(item_gate.GateError, match=word):
            item_gate.judge(DISKS, budget)


# --- on a box: the emulator replays real captures ---

@pytest.fixture
def box(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "%s:%s" % (EMULATOR_BIN, os.environ["PATH"]))

    def scenario(name):
        monkeypatch.setenv("FAKE_GPU_SCENARIO", str(SCENARIOS / name))
    scenario("h100-idle")
    job = tmp_path / "job"
    job.mkdir()
    return job, scenario


def test_the_gate_takes_the_xids_it_finds_first_as_its_baseline_and_refuses_a_new_one(box, tmp_path):
    job, scenario = box
    scenario("xid79-fallen-off-bus")  # a fatal Xid already in the log: preflight judged it (launch refuses FAIL)
    assert item_gate.run_gate(str(job), "000", str(tmp_path), None, {}) == ([], None)
    assert json.loads((job / item_gate.STATE_FILE).read_text())["xid_seen"]
    scenario("xid48-dbe")  # written since the last item
    found, line = item_gate.run_gate(str(job), "001", str(tmp_path), None, {})
    assert causes(found) == ["xid_fatal"] and "item 001 refused" in line
    record = json.loads((job / "gate-refused.json").read_text())
    assert record["item"] == "001" and record["exit_code"] == item_gate.REFUSED_EXIT


def test_the_gate_reads_the_slowdown_and_removes_a_refusal_once_it_passes(box, tmp_path):
    job, scenario = box
    scenario("8xh100-hwslowdown")
    found, _line = item_gate.run_gate(str(job), "000", str(tmp_path), None, {})
    assert causes(found) == ["throttle_active"] * 8 and (job / "gate-refused.json").exists()
    assert item_gate.run_gate(str(job), "000", str(tmp_path), None, {}, accept_slowdown=True) == ([], None)
    assert not (job / "gate-refused.json").exists()


def test_the_gate_counts_foreign_gpu_memory(box, tmp_path):
    job, scenario = box
    scenario("h100-load")  # the capture's processes (memhog, gpu_burn) are not this job's
    found, _line = item_gate.run_gate(str(job), "000", str(tmp_path), None, {}, runner_pid=os.getpid())
    assert sorted(set(causes(found))) == ["gpu_memory_held"]


def test_environment_only_mode_judges_the_disks_only(box, tmp_path):
    # a box declared GPU-less in AutoDL's no-GPU mode, launched with launch_no_gpu_ok: nvidia-smi fails as it does
    # without a driver, which must not refuse a CPU item (and a full disk still does)
    job, scenario = box
    scenario("no-driver")
    assert causes(item_gate.run_gate(str(job), "000", str(tmp_path), None, {})[0]) == ["gpu_unreadable"]
    assert item_gate.run_gate(str(job), "000", str(tmp_path), None, {}, gpu=False) == ([], None)
    found, _line = item_gate.run_gate(str(job), "000", str(tmp_path), None, {"data_bytes": 1 << 60}, gpu=False)
    assert causes(found) == ["bytes_short"], found
    line = [l for l in launch_scripts.gate_lines({"data": "/d", "gpu": False}) if "--job-dir" in l][0]
    assert line.endswith(" --no-gpu"), line


# --- the queue runner stops before a refused item ---

def test_the_queue_runner_stops_before_a_refused_item_and_exits_75(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    marker = tmp_path / "ran"
    run_item = tmp_path / "run-item.sh"
    run_item.write_text('#!/usr/bin/env bash\necho "$1" >> %s\n' % marker)
    gate = {"data": str(tmp_path), "durable": "", "data_bytes": 1 << 62, "gpu_mib": 1024, "accept_slowdown": False}
    items = [{"item": "000", "arg": "a"}, {"item": "001", "arg": "b"}]
    text = launch_scripts.queue_text("t", "h", items, str(run_item), str(job), sys.executable, str(COLLECTIONS),
                                     gate=gate)
    queue = tmp_path / "queue.sh"
    queue.write_text(text)
    env = dict(os.environ, PATH="/usr/bin:/bin")  # no nvidia-smi: the disk decides
    proc = subprocess.run(["bash", str(queue)], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert proc.returncode == 75, proc.stdout + proc.stderr
    assert not marker.exists() and "item 000 refused by the item gate (bytes_short)" in proc.stdout
    assert json.loads((job / "gate-refused.json").read_text())["findings"][0]["path"] == str(tmp_path)
    # without the gate (the old runner) the same queue runs both items
    plain = launch_scripts.queue_text("t", "h", items, str(run_item), str(job), sys.executable, str(COLLECTIONS))
    assert "item_gate" not in plain and "--data-bytes %d" % (1 << 62) in text


# --- patrol and the autopilot report it once ---

REFUSAL = {"item": "002", "time": "2026-12-03T09:00:00Z", "exit_code": 75, "findings": [
    {"code": "item_gate_refused", "level": "FAIL", "cause": "bytes_short", "path": "/root/autodl-tmp/outputs/x",
     "message": "the data disk /root/autodl-tmp/outputs/x has 8.0 MiB free", "action": "Free space on /root"}]}


def gone_job(**extra):
    job = {"name": "train", "exists": True, "alive": False, "crash_markers": [], "items_total": 4, "items_done": 2,
           "last_exit_code": 75, "vanished_reason": "exited_nonzero", "log_path": "/j/job.log", "log_age_seconds": 5,
           "gate_refused": jobs.gate_refusal(REFUSAL, ["000", "001", "002", "003"], ["000", "001"])}
    job.update(extra)
    return job


def test_patrol_reports_one_item_gate_refused_instead_of_a_gone_job():
    found = jobs.job_findings(gone_job(), 1800)
    assert [f["code"] for f in found] == ["item_gate_refused"]
    assert "/root/autodl-tmp/outputs/x" in found[0]["message"] and found[0]["item"] == "002"
    assert "resumes at item 002" in found[0]["action"]
    assert "relaunch (remote_gpu.trainer.launch)" in found[0]["action"] and "playbooks/" not in found[0]["action"]
    # a stale record (the item is done since, or not in this share) is ignored
    assert jobs.gate_refusal(REFUSAL, ["000", "001", "002"], ["002"]) is None
    assert jobs.gate_refusal(REFUSAL, ["000", "001"], []) is None
    assert jobs.gate_refusal({"item": 3}, None, []) is None


def test_the_autopilot_escalates_once_and_never_restarts_the_paused_queue():
    job = dict(gone_job(), run_id="train", queue_items=["000", "001", "002", "003"],
               items=[{"item": i, "state": "done", "exit_code": 0, "synced": 1, "sync_dest": "/fs/" + i,
                       "unsynced": []} for i in ("000", "001")])
    result = {"jobs": [job], "gpus": [], "findings": [], "status": "FAIL"}
    on = ap.settings_of({"heal": True, "autostop": True, "notify": True})
    meter = {"verb": "power_off", "how": "power off", "command": ["shutdown", "-h", "now"], "reversible": True}
    park = {"verb": "power_off", "how": "shutdown", "command": ["shutdown", "-h", "now"], "api": {},
            "keeps": "the data disk"}
    first = ap.decide("h", result, [], on, meter, 1790000000, park=park)
    assert (first["action"], first["state"]) == ("escalate", "gate_refused:002"), first["reason"]
    assert [e["kind"] for e in first["events"]] == ["escalated"] and "bytes_short" in first["reason"]
    history = [{"t": 1790000000, "kind": "autopilot", "host": "h", "ap": ap.history_fields(ap.settle(first))}]
    again = ap.decide("h", result, history, on, meter, 1790000060, park=park)
    assert again["action"] == "escalate" and again["events"] == []
