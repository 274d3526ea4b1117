"""Liveness from artifacts (issue 34): the silent-log judgement, the evidence readers, memory pressure, and the
autopilot's answer to a hung job."""
from __future__ import annotations

import os
import time

import pytest

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import autopilot as ap
from ansible_collections.remote_gpu.trainer.plugins.module_utils import cgroup, jobs, liveness

NOW = 1_800_000_000.0
STALE, HUNG = 30 * 60, 60 * 60


def job(log_age, art_age=None, readings=0, busy=0, alive=True, roots=("/data/out",)):
    return {"name": "train", "alive": alive, "log_path": "/j/train/job.log", "log_age_seconds": log_age,
            "artifacts": {"roots": list(roots), "path": "/data/out/001/last.pt" if art_age is not None else None,
                          "age_seconds": art_age},
            "gpu_activity": {"readings": readings, "busy": busy, "max_util_pct": 97 if busy else 0}}


def codes(found):
    return [(f["code"], f["level"]) for f in found]


@pytest.mark.parametrize("report, expected", [
    (job(10 * 60), []),                                                      # not yet stale
    (job(45 * 60, art_age=5 * 60, readings=3), [("log_quiet", "INFO")]),     # fresh checkpoint
    (job(45 * 60, art_age=50 * 60, readings=3, busy=1), [("log_quiet", "INFO")]),   # busy GPU
    (job(45 * 60, art_age=50 * 60, readings=3), [("log_stale", "WARN")]),    # not yet hung_minutes
    (job(90 * 60, art_age=120 * 60, readings=3), [("job_hung", "FAIL")]),    # everything idle for long
    (job(90 * 60, art_age=None, readings=1, roots=()), [("job_hung", "FAIL")]),    # no outputs known, idle GPU
    (job(90 * 60, art_age=45 * 60, readings=3), [("log_stale", "WARN")]),    # checkpoint within hung_minutes
    (job(90 * 60, art_age=120 * 60, readings=0), [("log_stale", "WARN")]),   # no GPU reading: never hung
    (job(90 * 60, art_age=120 * 60, readings=3, alive=False), []),           # a dead job is judged elsewhere
])
def test_silence_is_judged_with_checkpoints_and_gpu(report, expected):
    assert codes(liveness.silence_findings(report, STALE, HUNG)) == expected


def test_the_findings_carry_the_evidence():
    hung = liveness.silence_findings(job(90 * 60, art_age=120 * 60, readings=3), STALE, HUNG)[0]
    assert hung["log_age_seconds"] == 5400 and hung["artifact_age_seconds"] == 7200 and hung["gpu_readings"] == 3
    assert "/j/train/job.log has not been written for 90 min" in hung["message"]
    assert "/data/out/001/last.pt was written 120 min ago" in hung["message"] and "GPU was idle" in hung["message"]
    quiet = liveness.silence_findings(job(45 * 60, art_age=5 * 60, readings=3), STALE, HUNG)[0]
    assert "last.pt was written 5 min ago" in quiet["message"]
    # jobs.job_findings uses the same judgement (seconds)
    assert codes(jobs.job_findings(dict(job(90 * 60, art_age=120 * 60, readings=3), exists=True, crash_markers=[],
                                        items_total=0, items_done=0), STALE, HUNG)) == [("job_hung", "FAIL")]


def test_newest_mtime_follows_no_symlink_and_skips_the_log(tmp_path):
    out = tmp_path / "out"
    (out / "001").mkdir(parents=True)
    old, new = out / "001" / "epoch1.pt", out / "001" / "epoch2.pt"
    old.write_text("a")
    new.write_text("b")
    os.utime(old, (NOW - 600, NOW - 600))
    os.utime(new, (NOW - 300, NOW - 300))
    log = out / "001" / "trainer-item.log"
    log.write_text("x")
    os.utime(log, (NOW, NOW))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "fresh.pt").write_text("c")
    os.utime(elsewhere / "fresh.pt", (NOW + 100, NOW + 100))
    os.symlink(str(elsewhere), str(out / "link"))
    found = liveness.newest_mtime([str(out)])
    assert found["path"] == str(new) and found["epoch"] == NOW - 300 and not found["truncated"]
    assert liveness.newest_mtime([str(out)], skip=[str(new)])["path"] == str(old)
    assert liveness.newest_mtime([str(out)], max_entries=1)["truncated"]
    assert liveness.newest_mtime([str(tmp_path / "missing")])["epoch"] is None


def test_artifact_roots_come_from_launch_else_the_jobs_chdir():
    queue = {"output_root": "/data/outputs/train", "items": [{"item": "000", "output_dir": "/data/outputs/train/000"}]}
    assert liveness.artifact_roots(queue, {"chdir": "/code"}) == ["/data/outputs/train"]
    assert liveness.artifact_roots(None, {"chdir": "/code"}) == ["/code"]
    assert liveness.artifact_roots(None, {"chdir": "relative"}) == [] == liveness.artifact_roots(None, {})


def test_samples_and_the_ticks_reading_make_the_gpu_activity(tmp_path):
    def row(epoch, utils):
        return "%s\t001\t1\t2\t3\t%s\t100\n" % (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)), utils)
    text = "time\titem\tcgroup_memory_bytes\tmain_pid\tmain_rss_kib\tgpu_util_pct\tgpu_mem_used_mib\n"
    text += row(NOW - 7200, "99;99") + row(NOW - 600, "0;3") + row(NOW - 300, "NA;NA") + "garbage\n"
    (tmp_path / "samples.tsv").write_text(text)
    samples = liveness.read_samples(str(tmp_path))
    assert samples[0] == (NOW - 7200, [99.0, 99.0]) and len(samples) == 3
    idle = liveness.gpu_activity(samples, NOW - 3600, [{"utilization_pct": 0}])
    assert (idle["readings"], idle["busy"], idle["samples"], idle["now"]) == (2, 0, 1, True)
    busy = liveness.gpu_activity(samples, None, None)
    assert (busy["readings"], busy["busy"], busy["max_util_pct"]) == (2, 1, 99.0)
    assert liveness.gpu_activity([], NOW, None)["readings"] == 0
    assert liveness.read_samples(str(tmp_path / "nope")) == []
    # a FIFO or a symlink planted as samples.tsv is never read (safe_read): no reading, never a hang
    (tmp_path / "fifo").mkdir()
    os.mkfifo(str(tmp_path / "fifo" / "samples.tsv"))
    assert liveness.read_samples(str(tmp_path / "fifo")) == []
    (tmp_path / "link").mkdir()
    os.symlink(str(tmp_path / "samples.tsv"), str(tmp_path / "link" / "samples.tsv"))
    assert liveness.read_samples(str(tmp_path / "link")) == []


@pytest.mark.parametrize("memory, level", [
    ({"path": "/cg", "current": 95, "peak": 96, "max": 100}, "WARN"),
    ({"path": "/cg", "current": 50, "peak": 91, "max": 100}, "WARN"),     # the peak came near the limit
    ({"path": "/cg", "current": 90, "peak": 90, "max": 100}, None),       # 90 % is not above 90 %
    ({"path": "/cg", "current": 99, "peak": None, "max": None}, None),    # no limit
    (None, None),
])
def test_memory_pressure_above_90_percent(memory, level):
    found = liveness.memory_pressure_finding("train", memory)
    assert (found["level"] if found else None) == level
    if found:
        assert found["code"] == "memory_pressure" and found["memory_max"] == 100 and "memory.max 100" in found["message"]


def test_job_memory_reads_the_jobs_own_cgroup_v1_and_v2(tmp_path):
    proc = tmp_path / "proc"
    (proc / "42").mkdir(parents=True)
    (proc / "42" / "cgroup").write_text("0::/box/job\n")
    v2 = tmp_path / "v2"
    (v2 / "box" / "job").mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("memory\n")
    (v2 / "box" / "memory.max").write_text("1000\n")           # the limit on a parent
    (v2 / "box" / "job" / "memory.max").write_text("max\n")
    (v2 / "box" / "job" / "memory.current").write_text("950\n")
    (v2 / "box" / "job" / "memory.peak").write_text("970\n")
    assert cgroup.job_memory(42, str(proc), str(v2)) == {"path": str(v2 / "box" / "job"), "version": 2,
                                                         "current": 950, "peak": 970, "max": 1000}
    (proc / "42" / "cgroup").write_text("4:memory:/box/job\n")
    v1 = tmp_path / "v1"
    (v1 / "memory" / "box" / "job").mkdir(parents=True)
    (v1 / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")   # no limit at the root
    (v1 / "memory" / "box" / "job" / "memory.limit_in_bytes").write_text("2000\n")
    (v1 / "memory" / "box" / "job" / "memory.usage_in_bytes").write_text("1900\n")
    (v1 / "memory" / "box" / "job" / "memory.max_usage_in_bytes").write_text("1950\n")
    found = cgroup.job_memory(42, str(proc), str(v1))
    assert (found["version"], found["current"], found["peak"], found["max"]) == (1, 1900, 1950, 2000)
    assert cgroup.job_memory(43, str(proc), str(v1)) is None


def test_the_autopilot_escalates_a_hung_job_and_never_restarts_it():
    hung = {"level": "FAIL", "code": "job_hung", "job": "train", "message": "train is alive but hung: ..."}
    report = {"name": "train", "exists": True, "alive": True, "run_id": "r", "queue_items": ["000", "001"],
              "items": [], "items_done": 0, "items_total": 2, "crash_markers": [], "current_item": "000",
              "earlier_crashes": [], "last_exit_code": None}
    result = {"jobs": [report], "gpus": [], "findings": [hung], "status": "FAIL", "alive_jobs": ["train"],
              "discovered": True}
    settings = ap.settings_of({"heal": True, "autostop": True})
    found = ap.decide("h", result, [], settings, None, NOW)
    assert (found["action"], found["state"]) == ("escalate", "escalated:000"), found
    assert "hung (job_hung)" in found["reason"] and "not stopped or restarted" in found["reason"]
    assert found.get("heal_jobs") in (None, []) and [e["kind"] for e in found["events"]] == ["escalated"]


def test_the_hosts_line_marks_a_hung_or_quiet_job():
    from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import fleet_patrol
    report = {"name": "train", "alive": True, "log_age_seconds": 4500, "items_total": 0, "items_done": 0}
    assert fleet_patrol.job_line(report, {"train": "HUNG"}).endswith("log 75m HUNG")
    assert fleet_patrol.job_line(report, {"train": "quiet"}).endswith("log 75m quiet")
    assert fleet_patrol.job_line(report, ["train"]).endswith("log 75m STALE")
    assert fleet_patrol.job_line(report, {}).endswith("log 75m")
