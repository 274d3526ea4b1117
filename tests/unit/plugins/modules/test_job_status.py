"""job_status: queue items, staleness, GPUs, disks and OOM evidence, read from real files and real processes."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import time

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import cgroup as cgroup_utils
from ansible_collections.remote_gpu.trainer.plugins.module_utils import gpu_patrol, job_layout
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


def queue_json(job_dir, ids, queue_length):
    items = [{"item": item, "arg": "cfg-%s" % item, "output_dir": "/o/%s" % item, "sync_dest": "/d/%s" % item}
             for item in ids]
    (job_dir / "queue.json").write_text(json.dumps({"version": 1, "job": job_dir.name, "run_id": "exp", "host": "h",
                                                    "queue_length": queue_length, "items": items}))


def test_a_job_launch_started_is_graded_on_its_own_share_of_the_queue(module_runner, tmp_path):
    """Two hosts ran items 000, 002 and 001 of a queue of 3; each finished its share. queue_length=3 (the whole
    queue, as the README's patrol command gives it) must not grade either host against the whole queue, and an
    item status left by an earlier launch (007) does not count."""
    run_dir = tmp_path / "jobs"
    final = {"item": None, "exit_code": 0, "started": "a", "finished": "b"}
    queue_json(make_job(run_dir, "a", final=final, items=[("000", 0), ("002", 0), ("007", 1)]), ["000", "002"], 3)
    queue_json(make_job(run_dir, "b", final=final, items=[("001", 0)]), ["001"], 3)
    make_job(run_dir, "c", final=final, items=[("001", 0)])  # not started by launch: queue_length grades it
    wanted = [{"name": "a", "queue_length": 3}, {"name": "b", "queue_length": 3}, {"name": "c", "queue_length": 3}]
    result = report(module_runner, {"run_dir": str(run_dir), "jobs": wanted})
    a, b, c = result["jobs"]
    assert (a["items_done"], a["items_failed"], a["items_total"], a["items_source"]) == (2, 0, 2, "launch")
    assert (a["queue_items"], a["queue_length"], a["run_id"]) == (["000", "002"], 3, "exp")
    assert (b["items_done"], b["items_total"]) == (1, 1)
    assert (c["items_done"], c["items_total"], c["items_source"], c["queue_items"]) == (1, 3, "queue_length", None)
    # the digest of each record, as launch compares it with the record it would write; none without a record
    record = json.loads((run_dir / "a" / "queue.json").read_text())
    assert a["queue_sha256"] == job_layout.record_digest(record) != b["queue_sha256"]
    assert a["queue_sha256"] == hashlib.sha256(json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
                                               ).hexdigest()
    assert c["queue_sha256"] is None
    by_job = {(f["job"], f["code"]) for f in result["findings"]}
    assert by_job == {("a", "job_finished"), ("b", "job_finished"), ("c", "job_gone_incomplete")}


def test_queue_record_says_whether_the_box_ran_that_record_to_the_end(module_runner, tmp_path):
    """launch's relaunch gives the record it would write: queue_done is true only for a job that is not running, whose
    queue.json is that record (whitespace and key order aside) and whose every item of it exited 0."""
    run_dir = tmp_path / "jobs"
    final = {"item": None, "exit_code": 0, "started": "a", "finished": "b"}
    queue_json(make_job(run_dir, "a", final=final, items=[("000", 0), ("002", 0)]), ["000", "002"], 3)
    queue_json(make_job(run_dir, "b", final=final, items=[("000", 0), ("002", 1)]), ["000", "002"], 3)
    record = json.loads((run_dir / "a" / "queue.json").read_text())
    same = json.dumps(record, indent=4, sort_keys=False)

    def done(name, text):
        return report(module_runner, {"run_dir": str(run_dir), "name": name, "queue_record": text})["jobs"][0]

    assert done("a", same)["queue_done"] is True
    assert done("a", json.dumps(dict(record, run_id="other")))["queue_done"] is False  # another run
    assert done("a", json.dumps(dict(record, queue_length=4)))["queue_done"] is False  # another queue
    record_b = json.loads((run_dir / "b" / "queue.json").read_text())
    assert done("b", json.dumps(record_b))["queue_done"] is False  # item 002 failed: it runs again
    assert done("missing", same)["queue_done"] is False
    assert "queue_done" not in report(module_runner, {"run_dir": str(run_dir), "name": "a"})["jobs"][0]
    for args, words in (({"name": "a", "queue_record": "not json"}, "queue_record is not JSON"),
                        ({"name": "a", "queue_record": "[1]"}, "must be a JSON object"),
                        ({"queue_record": same}, "applies to name only")):
        failed, result = module_runner(job_status, dict({"run_dir": str(run_dir), "fail_on": "never"}, **args))
        assert failed and words in result["msg"], result


def test_queue_pending_lists_the_items_of_the_given_record_not_done_yet(module_runner, tmp_path):
    """What launch would still run: the given record's items whose status.json does not say exit code 0, in the
    record's order, whichever record the box holds (the box's queue.json may be an earlier launch's)."""
    run_dir = tmp_path / "jobs"
    final = {"item": None, "exit_code": 0, "started": "a", "finished": "b"}
    queue_json(make_job(run_dir, "a", final=final, items=[("000", 0), ("002", 1)]), ["000", "002"], 3)
    record = json.loads((run_dir / "a" / "queue.json").read_text())

    def pending(name, items):
        text = json.dumps(dict(record, items=[{"item": item} for item in items]))
        return report(module_runner, {"run_dir": str(run_dir), "name": name, "queue_record": text})["jobs"][0]

    assert pending("a", ["002", "001", "000"])["queue_pending"] == ["002", "001"]  # 002 failed, 001 never ran
    assert pending("a", ["000"])["queue_pending"] == [] and pending("a", ["000"])["queue_done"] is False
    assert pending("missing", ["000", "001"])["queue_pending"] == ["000", "001"]
    assert "queue_pending" not in report(module_runner, {"run_dir": str(run_dir), "name": "a"})["jobs"][0]
    for items in ([{"item": "../x"}], ["000"], None):
        failed, result = module_runner(job_status, {"run_dir": str(run_dir), "name": "a", "fail_on": "never",
                                                    "queue_record": json.dumps(dict(record, items=items))})
        assert failed and "queue_record must hold a list of items, each an object with a valid id" in result["msg"]


@pytest.mark.parametrize("text", ["not json", "[]", '{"version": 2, "items": [{"item": "000"}]}',
                                  '{"version": 1, "items": []}', '{"version": 1, "items": [{"item": "../x"}]}',
                                  '{"version": 1, "items": [{"item": "000"}, {"item": "000"}]}'])
def test_a_queue_record_launch_did_not_write_is_a_warning_not_a_grade(module_runner, tmp_path, text):
    run_dir = tmp_path / "jobs"
    job_dir = make_job(run_dir, "q", items=[("000", 0)])
    (job_dir / "queue.json").write_text(text)
    result = report(module_runner, {"run_dir": str(run_dir), "jobs": [{"name": "q", "queue_length": 2}]})
    (job,) = result["jobs"]
    assert (job["items_total"], job["items_source"]) == (2, "queue_length")
    assert "queue_record_invalid" in codes(result) and "job_gone_incomplete" in codes(result)
    (invalid,) = [f for f in result["findings"] if f["code"] == "queue_record_invalid"]
    assert "remote_gpu.trainer.launch" in invalid["action"] and "playbooks/" not in invalid["action"]


def test_a_queue_record_behind_a_symlink_is_never_followed(module_runner, tmp_path):
    run_dir = tmp_path / "jobs"
    job_dir = make_job(run_dir, "q", items=[("000", 0)])
    elsewhere = tmp_path / "planted.json"  # a valid record, so only the refusal to follow can make it invalid
    elsewhere.write_text(json.dumps({"version": 1, "run_id": "x", "queue_length": 1, "items": [{"item": "000"}]}))
    os.symlink(str(elsewhere), str(job_dir / "queue.json"))
    result = report(module_runner, {"run_dir": str(run_dir), "jobs": [{"name": "q", "queue_length": 2}]})
    (job,) = result["jobs"]
    assert (job["items_total"], job["items_source"]) == (2, "queue_length")
    assert any(f["code"] == "queue_record_invalid" and "not a readable regular file" in f["message"]
               for f in result["findings"])


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


# the newer spelling of a field in the all-fields captures of drivers that print it
ALIASES = {"clocks_throttle_reasons.active": "clocks_event_reasons.active", "clocks.sm": "clocks.current.sm"}


def derived_gpu_rows(name):
    """Project a real ``--query-gpu`` capture (with header) onto patrol's fields (gpu_patrol.PATROL_FIELDS) in
    ``noheader,nounits`` form: DERIVED from the capture, values unchanged."""
    with open(os.path.join(QUERY_GPU, name)) as handle:
        lines = handle.read().splitlines()
    header = [cell.strip().split(" [")[0] for cell in lines[0].split(",")]
    cols = [header.index(field if field in header else ALIASES[field]) for field, _k, _c in gpu_patrol.PATROL_FIELDS]
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
    # a CPU-only box: its kernel log is not read for Xids (no kernel_log_unreadable either)
    (tmp_path / "jobs" / "g" / "job.meta.json").write_text(json.dumps({"launched_epoch": 0}))
    result = report(module_runner, {"name": "g", "run_dir": str(tmp_path / "jobs"), "gpu": True,
                                    "kernel_log": str(tmp_path / "absent.log")})
    assert codes(result) == ["gpu_unavailable", "job_finished"] and result["xid_since"] is None
    fake_nvidia_smi(tmp_path / "bin", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
                    rc=9)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    result = report(module_runner, {"name": "g", "run_dir": str(tmp_path / "jobs"), "gpu": True})
    assert result["gpus"] is None and "gpu_query_failed" in codes(result)


XID_LOGS = os.path.join(os.path.dirname(QUERY_GPU), "xid-logs")


def boot_epoch():
    with open("/proc/uptime") as handle:
        return time.time() - float(handle.read().split()[0])


def gpu_box(tmp_path, monkeypatch, launched=None, logs=()):
    """A finished job (launched at ``launched``), a fake nvidia-smi printing a real H200 sample and a kernel log
    file made of real captured logs."""
    fake_nvidia_smi(tmp_path / "bin", derived_gpu_rows(
        "query-gpu-all-fields__nvidia-h200__590.48.01__linux-x86_64.load.csv"))
    monkeypatch.setenv("PATH", "%s:%s" % (tmp_path / "bin", os.environ["PATH"]))
    make_job(tmp_path / "jobs", "g", final={"exit_code": 0},
             meta=None if launched is None else {"launched_epoch": launched})
    kern = tmp_path / "kern.log"
    kern.write_text("".join(open(os.path.join(XID_LOGS, name)).read() for name in logs))
    return {"name": "g", "run_dir": str(tmp_path / "jobs"), "gpu": True, "kernel_log": str(kern)}


def test_xid_events_since_the_job_started(module_runner, tmp_path, monkeypatch):
    """A GPU that fell off the bus at 1843 s after boot, then Xid 48 at 240314 s: a job launched in between sees
    only Xid 48, as xid_fatal; one launched after both sees nothing."""
    logs = ("dmesg__fallen-off-bus-multiline-no-xid__570.158.01__nvsentinel-155.log",
            "syslog__xid-48-dbe__TRUNCATED__gpu-operator-1146.log")
    boot = boot_epoch()
    args = gpu_box(tmp_path, monkeypatch, launched=boot + 100000, logs=logs)
    result = report(module_runner, args)
    assert [e["xid"] for e in result["xid_events"]] == [48] and result["xid_since"] == boot + 100000
    fatal = [f for f in result["findings"] if f["code"] == "xid_fatal"]
    assert len(fatal) == 1 and fatal[0]["level"] == "FAIL" and "Xid 48" in fatal[0]["message"]
    assert fatal[0]["action"] == gpu_patrol.DYING_ACTION and result["status"] == "FAIL"
    assert result["gpus"][0]["throttle_reasons"] == []

    meta = tmp_path / "jobs" / "g" / "job.meta.json"
    meta.write_text(json.dumps({"launched_epoch": boot + 300000}))
    result = report(module_runner, args)
    assert result["xid_events"] == [] and codes(result) == ["job_finished"]


def test_no_job_start_no_kernel_log_and_none(module_runner, tmp_path, monkeypatch):
    args = gpu_box(tmp_path, monkeypatch, launched=None, logs=("syslog__xid-48-dbe__TRUNCATED__gpu-operator-1146.log",))
    result = report(module_runner, args)  # no meta: no start, so nothing is new
    assert result["xid_since"] is None and result["xid_events"] == [] and codes(result) == ["job_finished"]
    (tmp_path / "jobs" / "g" / "job.meta.json").write_text(json.dumps({"launched_epoch": 0}))
    result = report(module_runner, dict(args, kernel_log="none"))
    assert result["xid_events"] == [] and codes(result) == ["job_finished"]
    result = report(module_runner, dict(args, kernel_log=str(tmp_path / "absent.log")))
    assert codes(result) == ["job_finished", "kernel_log_unreadable"] and result["status"] == "PASS"
    unreadable = [f for f in result["findings"] if f["code"] == "kernel_log_unreadable"][0]
    assert unreadable["level"] == "INFO" and "absent.log" in unreadable["message"]
    for bad, words in (("relative.log", "absolute path"), (str(tmp_path), "not a regular file")):
        failed, result = module_runner(job_status, dict(args, kernel_log=bad))
        assert failed and words in result["msg"] and "Traceback" not in result["msg"], result
        assert result["xid_events"] == [] and result["xid_since"] is None


def test_an_empty_gpu_sample_is_a_warn(module_runner, tmp_path, monkeypatch):
    make_job(tmp_path / "jobs", "g", final={"exit_code": 0})
    with open(os.path.join(os.path.dirname(QUERY_GPU), "errors", "no-devices-were-found__exit-UNVERIFIED.txt")) as fh:
        fake_nvidia_smi(tmp_path / "bin", fh.read(), rc=6)
    monkeypatch.setenv("PATH", "%s:%s" % (tmp_path / "bin", os.environ["PATH"]))
    result = report(module_runner, {"name": "g", "run_dir": str(tmp_path / "jobs"), "gpu": True, "kernel_log": "none"})
    assert result["gpus"] == [] and codes(result) == ["gpu_sample_empty", "job_finished"]
    assert result["status"] == "WARN"
    fake_nvidia_smi(tmp_path / "bin", "", rc=0)
    result = report(module_runner, {"name": "g", "run_dir": str(tmp_path / "jobs"), "gpu": True, "kernel_log": "none"})
    assert result["gpus"] == [] and codes(result) == ["gpu_sample_empty", "job_finished"]


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


def test_a_planted_meta_never_names_the_file_that_is_tailed(module_runner, tmp_path):
    """Issue 14, item 7: a job.meta.json that others could write named /etc/shadow, and its lines were shown."""
    run_dir = tmp_path / "jobs"
    job_dir = make_job(run_dir, "p", meta={"log_path": "/etc/passwd", "detach": "tmux"}, log="epoch 2\n")
    os.chmod(str(job_dir / "job.meta.json"), 0o666)
    result = report(module_runner, {"name": "p", "run_dir": str(run_dir)})
    job = result["jobs"][0]
    assert job["log_path"] == str(job_dir / "job.log") and job["progress"]["value"] == 2
    assert job["detach"] is None and not any(line.startswith("root:") for line in job["tail"])
    assert ("job_meta_untrusted", "WARN") in [(f["code"], f["level"]) for f in result["findings"]]
    os.chmod(str(job_dir / "job.meta.json"), 0o600)  # the user's own private meta is trusted...
    result = report(module_runner, {"name": "p", "run_dir": str(run_dir)})
    job = result["jobs"][0]
    assert job["detach"] == "tmux"
    # ...but the file it names outside the job directory is never read (issue 29)
    assert job["log_path"] == str(job_dir / "job.log") and not any(line.startswith("root:") for line in job["tail"])
    assert any(f["code"] == "job_meta_untrusted" and "/etc/passwd" in f["message"] for f in result["findings"])
    (job_dir / "logs").mkdir()
    (job_dir / "logs" / "train.log").write_text("epoch 5\n")
    (job_dir / "job.meta.json").write_text(json.dumps({"log_path": str(job_dir / "logs" / "train.log")}))
    result = report(module_runner, {"name": "p", "run_dir": str(run_dir)})
    assert result["jobs"][0]["log_path"] == str(job_dir / "logs" / "train.log")  # inside the job directory: read
    assert result["jobs"][0]["progress"]["value"] == 5 and "job_meta_untrusted" not in str(result["findings"])


@pytest.mark.root
def test_a_meta_owned_by_another_user_is_not_trusted(module_runner, tmp_path):
    run_dir = tmp_path / "jobs"
    job_dir = make_job(run_dir, "o", meta={"log_path": "/etc/passwd"})
    os.chmod(str(job_dir / "job.meta.json"), 0o600)
    os.chown(str(job_dir / "job.meta.json"), 65534, 65534)
    result = report(module_runner, {"name": "o", "run_dir": str(run_dir)})
    assert result["jobs"][0]["log_path"] == str(job_dir / "job.log")
    assert any(f["code"] == "job_meta_untrusted" and "owned by uid 65534" in f["message"]
               for f in result["findings"])


def test_the_default_log_is_never_followed_out_of_the_job_directory(module_runner, tmp_path):
    run_dir = tmp_path / "jobs"
    job_dir = make_job(run_dir, "s")
    (job_dir / "job.log").unlink()
    os.symlink("/etc/passwd", str(job_dir / "job.log"))
    result = report(module_runner, {"name": "s", "run_dir": str(run_dir)})
    assert result["jobs"][0]["tail"] == [] and result["jobs"][0]["log_exists"] is False
    assert any(f["code"] == "log_refused" and "outside" in f["message"] for f in result["findings"])


def test_unreadable_kinds_of_log_and_a_catastrophic_regex_are_clear_errors(module_runner, tmp_path):
    run_dir = tmp_path / "jobs"
    make_job(run_dir, "z", log="a" * 40 + "b\n")
    os.mkfifo(str(tmp_path / "fifo"))
    for path, words in (("/dev/zero", "character device"), (str(tmp_path / "fifo"), "FIFO")):
        failed, result = module_runner(job_status, {"name": "z", "run_dir": str(run_dir), "log_path": path})
        assert failed and path in result["msg"] and words in result["msg"]
    began = time.monotonic()
    failed, result = module_runner(job_status, {"name": "z", "run_dir": str(run_dir), "progress_regex": "(a+)+$",
                                                "scan_timeout": 1})
    assert failed and "scan_timeout (1 s)" in result["msg"] and "catastrophic" in result["msg"]
    assert time.monotonic() - began < 15
    for args, words in (({"run_dir": ""}, "run_dir is empty"), ({"tail_lines": -1}, "tail_lines"),
                        ({"tail_lines": 10 ** 6}, "at most")):
        failed, result = module_runner(job_status, dict({"name": "z", "run_dir": str(run_dir)}, **args))
        assert failed and words in result["msg"]


def test_without_name_or_jobs_every_job_under_the_run_dir_is_reported(module_runner, tmp_path):
    """Two experiments on one box: a finished one and a live one, both reported, by name; the live one listed."""
    run_dir = tmp_path / "jobs"
    make_job(run_dir, "train", final={"item": None, "exit_code": 0, "started": "a", "finished": "b"},
             items=[("001", 0)])
    live = make_job(run_dir, "exp2")
    (live / "job.pid").write_text("%d\n" % os.getpid())
    with open("/proc/self/stat", encoding="ascii") as fh:
        (live / "job.starttime").write_text(fh.read().rsplit(")", 1)[1].split()[19] + "\n")
    (run_dir / "notes").mkdir()                                      # holds no job file: not a job
    result = report(module_runner, {"run_dir": str(run_dir)})
    assert [job["name"] for job in result["jobs"]] == ["exp2", "train"]
    assert result["alive_jobs"] == ["exp2"] and result["discovered"] is True
    named = report(module_runner, {"run_dir": str(run_dir), "name": "train"})
    assert [job["name"] for job in named["jobs"]] == ["train"] and named["discovered"] is False


def test_an_empty_run_dir_is_no_jobs_not_a_failure(module_runner, tmp_path):
    result = report(module_runner, {"run_dir": str(tmp_path / "jobs")})
    assert (result["jobs"], codes(result), result["status"]) == ([], ["no_jobs"], "PASS")
    action = result["findings"][0]["action"]
    assert "remote_gpu.trainer.launch" in action and "playbooks/" not in action


def test_queue_length_without_a_name_grades_every_job_launch_did_not_start(module_runner, tmp_path):
    run_dir = tmp_path / "jobs"
    final = {"item": None, "exit_code": 0, "started": "a", "finished": "b"}
    make_job(run_dir, "hand", final=final, items=[("001", 0)])
    queue_json(make_job(run_dir, "train", final=final, items=[("000", 0)]), ["000"], 1)
    result = report(module_runner, {"run_dir": str(run_dir), "queue_length": 3})
    hand, train = result["jobs"]
    assert (hand["items_total"], hand["items_source"]) == (3, "queue_length")
    assert (train["items_total"], train["items_source"]) == (1, "launch")  # launch's record, not queue_length
    failed, result = module_runner(job_status, {"run_dir": str(run_dir), "log_path": "/x.log", "fail_on": "never"})
    assert failed and "applies to name only" in result["msg"]


def timed_item(job_dir, item, code, started, finished):
    (job_dir / "items" / item).mkdir(parents=True, exist_ok=True)
    (job_dir / "items" / item / "status.json").write_text(json.dumps(
        {"item": item, "exit_code": code, "started": started, "finished": finished}))


@pytest.mark.parametrize("fail, level", [(None, "WARN"), (True, "FAIL")])
def test_an_item_that_exits_0_sooner_than_launch_min_seconds_is_too_fast(module_runner, tmp_path, fail, level):
    run_dir = tmp_path / "jobs"
    job_dir = make_job(run_dir, "train", final={"item": None, "exit_code": 0, "started": "a", "finished": "b"})
    timed_item(job_dir, "000", 0, "2026-07-03T10:00:00Z", "2026-07-03T10:00:02Z")   # 2 s: too fast
    timed_item(job_dir, "001", 0, "2026-07-03T10:00:00Z", "2026-07-03T10:05:00Z")   # 300 s
    timed_item(job_dir, "002", 3, "2026-07-03T10:00:00Z", "2026-07-03T10:00:01Z")   # failed: not "too fast"
    timed_item(job_dir, "003", 0, "garbled", "2026-07-03T10:00:01Z")                # unknown: not judged
    queue_json(job_dir, ["000", "001", "002", "003"], 4)
    record = json.loads((job_dir / "queue.json").read_text())
    record.update(min_seconds=30, **({"min_seconds_fail": fail} if fail is not None else {}))
    (job_dir / "queue.json").write_text(json.dumps(record))
    result = report(module_runner, {"run_dir": str(run_dir)})
    (job,) = result["jobs"]
    items = dict((item["item"], (item["seconds"], item["too_fast"], item["state"])) for item in job["items"])
    assert items == {"000": (2, True, "done"), "001": (300, False, "done"), "002": (1, False, "failed"),
                     "003": (None, False, "done")}
    assert (job["items_too_fast"], job["min_seconds"], job["items_done"]) == (1, 30, 3)
    (fast,) = [f for f in result["findings"] if f["code"] == "item_too_fast"]
    assert (fast["level"], fast["job"], fast["items"], fast["min_seconds"]) == (level, "train", ["000"], 30)


def test_a_record_without_min_seconds_checks_nothing(module_runner, tmp_path):
    run_dir = tmp_path / "jobs"
    job_dir = make_job(run_dir, "train")
    timed_item(job_dir, "000", 0, "2026-07-03T10:00:00Z", "2026-07-03T10:00:02Z")
    queue_json(job_dir, ["000"], 1)
    (job,) = report(module_runner, {"run_dir": str(run_dir)})["jobs"]
    assert (job["items"][0]["seconds"], job["items"][0]["too_fast"], job["items_too_fast"]) == (2, False, 0)
    assert job["min_seconds"] is None
