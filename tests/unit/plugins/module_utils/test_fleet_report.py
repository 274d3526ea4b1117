from __future__ import annotations

import re

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import fleet_report


def storage(data_pct, data_inodes, durable_inodes):
    return {"paths": [
        {"path": "/root/autodl-tmp", "bytes_pct": data_pct, "inodes_pct": data_inodes},
        {"path": "/root/autodl-fs", "bytes_pct": 10, "inodes_pct": durable_inodes},
    ]}


def record(findings, gpus=None):
    return {"platform": "autodl", "data_dir": "/root/autodl-tmp", "durable_dir": "/root/autodl-fs",
            "storage": storage(12, 3, 91), "gpu": {"gpus": gpus or []}, "findings": findings}


FAIL = {"level": "FAIL", "code": "throttle_active", "message": "GPU 3: HW slowdown active", "action": "stop"}
WARN = {"level": "WARN", "code": "inodes_high", "message": "/root/autodl-fs has used 91% of its inodes", "action": "x"}
INFO = {"level": "INFO", "code": "mig_enabled", "message": "MIG", "action": "none"}


def test_row_takes_the_worst_finding_and_the_tier_percentages():
    row = fleet_report.row_from_record("lab-01", record([WARN, FAIL, INFO], gpus=[{"name": "NVIDIA H100"}] * 8))
    assert row["verdict"] == "FAIL"
    assert row["top_finding"].startswith("throttle_active: GPU 3")
    assert (row["data_bytes_pct"], row["data_inodes_pct"], row["durable_inodes_pct"]) == (12, 3, 91)
    assert row["gpus"] == "8x NVIDIA H100"


def test_info_only_is_pass_with_no_top_finding():
    row = fleet_report.row_from_record("lab-02", record([INFO]))
    assert row["verdict"] == "PASS" and row["top_finding"] == "-"
    assert row["gpus"] == "-"


def test_unreachable_and_missing_rows():
    row = fleet_report.row_from_record("lab-03", {"platform": "runpod", "unreachable": True, "msg": "timed out"})
    assert row["verdict"] == "UNREACHABLE" and "timed out" in row["top_finding"]
    assert fleet_report.no_result_row("lab-04", "-")["verdict"] == "NO_RESULT"


def test_failing_hosts_strict_and_not():
    rows = [{"host": "a", "verdict": "PASS"}, {"host": "b", "verdict": "WARN"},
            {"host": "c", "verdict": "FAIL"}, {"host": "d", "verdict": "UNREACHABLE"}]
    assert fleet_report.failing_hosts(rows) == ["c", "d"]
    assert fleet_report.failing_hosts(rows, strict=True) == ["b", "c", "d"]
    assert fleet_report.summary(rows) == {"PASS": 1, "WARN": 1, "FAIL": 1, "UNREACHABLE": 1}


def test_table_aligns_columns_and_truncates_long_findings():
    rows = [fleet_report.row_from_record("lab-01", record([dict(FAIL, message="x" * 200)])),
            fleet_report.row_from_record("a-much-longer-host", record([]))]
    lines = fleet_report.render_table(rows)
    assert lines[0].startswith("HOST")
    assert len(lines) == 3
    verdict_col = lines[0].index("VERDICT")
    assert lines[1][verdict_col:].startswith("FAIL") and lines[2][verdict_col:].startswith("PASS")
    assert lines[1].endswith("...")
    assert "91%" in lines[1]


# ---- patrol ------------------------------------------------------------------------------------------------------

def job(**kw):
    base = {"name": "train", "exists": True, "alive": True, "pid": 812, "items_done": 3, "items_failed": 0,
            "items_total": 7, "last_exit_code": None,
            "progress": {"text": "Epoch 12/20", "unit": "epoch", "value": 12, "total": 20, "line_no": 40},
            "crash_markers": [], "crash_marker_count": 0, "log_path": "/root/.trainer/jobs/train/job.log",
            "log_exists": True, "log_age_seconds": 20, "tail": ["epoch 11", "epoch 12"], "vanished_reason": None}
    base.update(kw)
    return base


def probe(jobs, findings=(), data=(3, 1), durable=(40, 91)):
    return {"status": "PASS", "changed": False, "jobs": jobs, "findings": list(findings),
            "paths": [{"path": "/root/autodl-tmp", "exists": True, "bytes_pct": data[0], "inodes_pct": data[1]},
                      {"path": "/root/autodl-fs", "exists": True, "bytes_pct": durable[0], "inodes_pct": durable[1]}],
            "gpus": [{"index": 0, "utilization_pct": 97, "memory_used_mib": 70211, "memory_total_mib": 81559}],
            "oom_kills": {"path": "/sys/fs/cgroup/memory.events", "counters": {"oom_kill": 2}}}


def patrol_record(result):
    return {"platform": "autodl", "data_dir": "/root/autodl-tmp", "durable_dir": "/root/autodl-fs", "probe": result}


def finding_of(level, code, message="evidence", job_name="train"):
    return {"level": level, "code": code, "message": message, "action": "act", "job": job_name}


def test_patrol_healthy_job_is_one_line_with_items_progress_and_log_age():
    row = fleet_report.patrol_row_from_record("lab-01", patrol_record(probe([job()])))
    assert row["verdict"] == "PASS" and row["reasons"] == []
    assert row["line"].startswith("lab-01 PASS train ALIVE items 3/7 epoch 12/20 log 0m | data 3%/1% durable 40%/91%")
    assert "\n" not in row["line"] and "last lines" not in row["line"]
    assert (row["data_inodes_pct"], row["durable_inodes_pct"], row["progress"]) == (1, 91, "epoch 12/20")
    assert row["jobs"][0]["state"] == "ALIVE" and row["gpu"] == "97% 70211/81559MiB"


def test_patrol_gone_job_escalates_by_name_with_exit_and_last_lines():
    gone = job(alive=False, pid=None, items_done=2, last_exit_code=137, vanished_reason="oom_kill",
               oom_kills_since_launch=1,
               tail=["epoch 3", "epoch 4", "Killed", "==== trainer: finished 2026-07-03T22:11:09Z exit 137 ===="])
    found = [finding_of("FAIL", "job_crashed", "1 crash marker(s)"),
             finding_of("FAIL", "job_gone_incomplete", "train is not running at 2/7 items (exit code 137)")]
    row = fleet_report.patrol_row_from_record("lab-02", patrol_record(probe([gone], found)), tail_lines=3)
    assert row["verdict"] == "FAIL"
    assert row["reasons"] == ["job_gone_incomplete: train is not running at 2/7 items (exit code 137)",
                              "job_crashed: 1 crash marker(s)"]
    assert "lab-02 FAIL train GONE items 2/7 epoch 12/20 exit 137 (oom_kill) log 0m oom_kill +1: last lines: " \
           "epoch 4 | Killed | " \
           "==== trainer: finished" in row["line"]
    assert row["line"].endswith("| escalate: job_gone_incomplete, job_crashed")
    assert row["top_finding"].startswith("job_gone_incomplete: ")


def test_patrol_crash_shows_marker_and_tail_while_alive():
    crashed = job(crash_marker_count=1, crash_markers=[{"line_no": 9, "kind": "traceback", "text": "Traceback ..."}],
                  tail=["Traceback (most recent call last):", "RuntimeError: boom"])
    row = fleet_report.patrol_row_from_record("lab-03", patrol_record(probe([crashed], [
        finding_of("FAIL", "job_crashed")])))
    assert row["verdict"] == "FAIL" and "crash traceback x1 (line 9): last lines: Traceback" in row["line"]


def test_patrol_escalates_log_stale_but_not_other_warnings_unless_strict():
    stale = fleet_report.patrol_row_from_record("h", patrol_record(probe([job(log_age_seconds=3600)], [
        finding_of("WARN", "log_stale", "silent for 60 min")])))
    assert stale["verdict"] == "FAIL" and stale["reasons"] == ["log_stale: silent for 60 min"]
    assert "log 60m STALE" in stale["line"]
    disk_warn = [finding_of("WARN", "bytes_high"), finding_of("WARN", "oom_killed")]
    row = fleet_report.patrol_row_from_record("h", patrol_record(probe([job()], disk_warn)))
    assert row["verdict"] == "WARN" and row["reasons"] == []
    assert fleet_report.patrol_row_from_record("h", patrol_record(probe([job()], disk_warn)), strict=True)[
        "verdict"] == "FAIL"
    full = fleet_report.patrol_row_from_record("h", patrol_record(probe([job()], [
        finding_of("FAIL", "inodes_exhausted", "/root/autodl-fs has used 97% of its inodes")], durable=(40, 97))))
    assert full["verdict"] == "FAIL" and full["reasons"][0].startswith("inodes_exhausted: ")


def test_patrol_finished_and_missing_jobs():
    done = job(alive=False, items_done=7, last_exit_code=0)
    row = fleet_report.patrol_row_from_record("h", patrol_record(probe([done], [
        {"level": "INFO", "code": "job_finished", "message": "ok", "action": "pull"}])))
    assert row["verdict"] == "PASS" and "train DONE items 7/7 epoch 12/20 exit 0 log 0m |" in row["line"]
    missing = fleet_report.patrol_row_from_record("h", patrol_record(probe([job(exists=False)], [
        finding_of("FAIL", "job_missing")])))
    assert missing["verdict"] == "FAIL" and "train MISSING (no job directory)" in missing["line"]


def test_patrol_unreachable_timeout_interpreter_and_no_result():
    row = fleet_report.patrol_row_from_record("lab-05", patrol_record(
        {"unreachable": True, "msg": "Task failed: ssh: connect to host 127.0.0.15 port 22: Connection refused"}))
    assert row["verdict"] == "UNREACHABLE" and row["line"] == (
        "lab-05 UNREACHABLE: ssh: connect to host 127.0.0.15 port 22: Connection refused")
    assert row["gpus"] is None and row["jobs"] == []
    timeout = fleet_report.patrol_row_from_record("lab-06", patrol_record(
        {"failed": True, "msg": "The task action timed out after 5 seconds.", "timedout": {"period": 5}}))
    assert timeout["verdict"] == "FAIL" and timeout["findings"][0]["code"] == "probe_timeout"
    no_python = fleet_report.patrol_row_from_record("lab-07", patrol_record(
        {"failed": True, "rc": 127, "msg": "MODULE FAILURE", "module_stderr": "/bin/sh: python: No such file"}))
    assert no_python["findings"][0]["code"] == "interpreter_missing"
    none = fleet_report.patrol_row_from_record("lab-08", patrol_record(None))
    assert none["verdict"] == "NO_RESULT" and none["line"].startswith("lab-08 NO_RESULT")
    assert fleet_report.failing_hosts([row, timeout, no_python, none]) == ["lab-05", "lab-06", "lab-07", "lab-08"]


def test_patrol_table_has_its_own_columns_and_preflight_keeps_its_own():
    rows = [fleet_report.patrol_row_from_record("lab-01", patrol_record(probe([job()]))),
            fleet_report.patrol_row_from_record("lab-05", patrol_record({"unreachable": True, "msg": "refused"}))]
    lines = fleet_report.render_table(rows, columns=fleet_report.COLUMNS_BY_KIND["patrol"])
    assert lines[0].split() == ["HOST", "PLATFORM", "VERDICT", "JOBS", "PROGRESS", "DATA%B", "DATA%I", "DURABLE%I",
                                "GPU", "TOP", "FINDING"]
    assert lines[1].split()[:7] == ["lab-01", "autodl", "PASS", "train", "ALIVE", "3/7", "epoch"]
    assert lines[2].split()[:3] == ["lab-05", "autodl", "UNREACHABLE"]
    assert fleet_report.COLUMNS_BY_KIND["preflight"] is fleet_report.COLUMNS
    assert fleet_report.render_table([])[0].split()[:4] == ["HOST", "PLATFORM", "GPUS", "VERDICT"]


# A strict reader of the Prometheus text exposition format (version 0.0.4), enough for what patrol writes.
PROM_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
PROM_SAMPLE = re.compile(r'^(?P<name>%s)(?:\{(?P<labels>[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
                         r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")*)\})? (?P<value>-?(?:\d+(?:\.\d*)?'
                         r'(?:[eE][+-]?\d+)?|NaN|[+-]Inf))$' % PROM_NAME)


def parse_exposition(text):
    """{(name, labels text): value}; asserts the format rules node_exporter's textfile collector enforces."""
    assert text.endswith("\n") and "\r" not in text
    families, current, samples = {}, None, {}
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            kind, name = line.split(" ", 3)[1:3]
            assert re.match("^%s$" % PROM_NAME, name)
            assert kind not in families.setdefault(name, set()), "duplicate %s for %s" % (kind, name)
            families[name].add(kind)
            if kind == "TYPE":
                assert line.split(" ", 3)[3] in ("gauge", "counter", "untyped")
                assert not any(key[0] == name for key in samples), "TYPE after samples of %s" % name
            current = name
            continue
        match = PROM_SAMPLE.match(line)
        assert match, "not a valid sample line: %r" % line
        assert match.group("name") == current, "sample of %s outside its family" % match.group("name")
        key = (match.group("name"), match.group("labels"))
        assert key not in samples, "duplicate series %r" % (key,)
        samples[key] = float(match.group("value"))
    assert all(kinds == {"HELP", "TYPE"} for kinds in families.values())
    return samples


def test_prometheus_textfile_is_valid_exposition_format():
    gone = job(name='we"ird\\name', alive=False, last_exit_code=137, items_done=2)
    rows = [fleet_report.patrol_row_from_record("lab-01", patrol_record(probe([job()]))),
            fleet_report.patrol_row_from_record("lab-02", patrol_record(probe([gone], [
                finding_of("FAIL", "job_gone_incomplete")]))),
            fleet_report.patrol_row_from_record("lab-05", patrol_record({"unreachable": True, "msg": "x\ny"}))]
    samples = parse_exposition(fleet_report.prometheus_text(rows, 1790000000.5))
    assert samples[("trainer_job_alive", 'host="lab-01",job="train"')] == 1
    assert samples[("trainer_job_alive", 'host="lab-02",job="we\\"ird\\\\name"')] == 0
    assert samples[("trainer_job_items_done", 'host="lab-01",job="train"')] == 3
    assert samples[("trainer_job_progress", 'host="lab-01",job="train",unit="epoch"')] == 12
    assert samples[("trainer_job_last_exit_code", 'host="lab-02",job="we\\"ird\\\\name"')] == 137
    assert samples[("trainer_disk_inodes_pct", 'host="lab-01",tier="durable"')] == 91
    assert samples[("trainer_gpu_memory_used_mib", 'host="lab-01",gpu="0"')] == 70211
    assert samples[("trainer_cgroup_oom_kills", 'host="lab-01"')] == 2
    assert samples[("trainer_patrol_verdict", 'host="lab-02",verdict="FAIL"')] == 1
    assert samples[("trainer_patrol_verdict", 'host="lab-05",verdict="UNREACHABLE"')] == 1
    assert samples[("trainer_patrol_verdict", 'host="lab-05",verdict="PASS"')] == 0
    assert samples[("trainer_patrol_timestamp_seconds", 'host="lab-05"')] == 1790000000
    assert not any(key[1] and "lab-05" in key[1] and key[0].startswith("trainer_job") for key in samples)


def test_exposition_reader_rejects_bad_lines():
    for bad in ('x{a="1"} 1\n', "# TYPE x gauge\nx{a=1} 1\n", "# HELP x h\n# TYPE x gauge\nx 1\nx 2\n",
                "# HELP x h\n# TYPE x gauge\nx one\n"):
        with pytest.raises(AssertionError):
            parse_exposition(bad)
