"""fleet_patrol: one patrol row and one line per host from a raw job_status result."""

from __future__ import annotations

from fleet_samples import finding_of, job, patrol_record, probe

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import fleet_patrol, fleet_preflight, fleet_table


def test_patrol_healthy_job_is_one_line_with_items_progress_and_log_age():
    row = fleet_patrol.patrol_row("lab-01", patrol_record(probe([job()])))
    assert row["verdict"] == "PASS" and row["reasons"] == []
    assert row["line"].startswith("lab-01 PASS train ALIVE items 3/7 epoch 12/20 log 0m | data 3%/1% durable 40%/91%")
    assert "\n" not in row["line"] and "last lines" not in row["line"]
    assert (row["data_inodes_pct"], row["durable_inodes_pct"], row["progress"]) == (1, 91, "epoch 12/20")
    assert row["jobs"][0]["state"] == "ALIVE" and row["gpu"] == "97% 70211/81559MiB"


def test_two_jobs_on_one_box_are_both_on_the_line_and_in_the_table():
    train = job(name="train", alive=False, last_exit_code=0, items_done=1, items_total=1, items_too_fast=1,
                progress={"unit": "epoch", "value": 2, "total": 2})
    exp2 = job(name="exp2", items_done=0, items_total=1, progress={"unit": "epoch", "value": 5})
    too_fast = finding_of("WARN", "item_too_fast", "train: 1 item(s) exited 0 sooner than launch_min_seconds (30 s)")
    row = fleet_patrol.patrol_row("lab-01", patrol_record(probe([train, exp2], [too_fast])))
    assert row["line"].startswith("lab-01 WARN train DONE items 1/1 (1 too fast) epoch 2/2 exit 0 log 0m; "
                                  "exp2 ALIVE items 0/1 epoch 5 log 0m | data "), row["line"]
    assert row["jobs_summary"] == "train DONE 1/1 (1 too fast), exp2 ALIVE 0/1"
    assert row["progress"] == "train epoch 2/2, exp2 epoch 5"
    assert [j["state"] for j in row["jobs"]] == ["DONE", "ALIVE"] and row["reasons"] == []  # a WARN: not escalated
    assert row["top_finding"].startswith("item_too_fast: ")
    table = fleet_table.render_table([row], fleet_patrol.COLUMNS)
    assert "train DONE 1/1 (1 too fast), exp2 ALIVE 0/1" in table[1] and "train epoch 2/2, exp2 epoch 5" in table[1]
    failing = dict(too_fast, level="FAIL")  # launch_min_seconds_fail: patrol escalates
    row = fleet_patrol.patrol_row("lab-01", patrol_record(probe([train, exp2], [failing])))
    assert row["verdict"] == "FAIL" and row["line"].endswith("| escalate: item_too_fast")


def test_a_box_without_jobs_is_shown_as_such_not_as_a_failure():
    no_jobs = dict(finding_of("INFO", "no_jobs", "No job under /root/.trainer/jobs: nothing was launched there"),
                   job=None)
    row = fleet_patrol.patrol_row("lab-01", patrol_record(probe([], [no_jobs])))
    assert row["verdict"] == "PASS" and row["reasons"] == [] and row["top_finding"] == "-"
    assert row["line"].startswith("lab-01 PASS no jobs (nothing launched) | data ")
    assert (row["jobs_summary"], row["progress"], row["no_jobs"], row["probed"]) == ("no jobs", "-", True, True)
    down = fleet_patrol.patrol_row("lab-02", patrol_record({"unreachable": True, "msg": "ssh: connect"}))
    assert (down["probed"], down["jobs"]) == (False, [])


def test_patrol_gone_job_escalates_by_name_with_exit_and_last_lines():
    gone = job(alive=False, pid=None, items_done=2, last_exit_code=137, vanished_reason="oom_kill",
               oom_kills_since_launch=1,
               tail=["epoch 3", "epoch 4", "Killed", "==== trainer: finished 2026-07-03T22:11:09Z exit 137 ===="])
    found = [finding_of("FAIL", "job_crashed", "1 crash marker(s)"),
             finding_of("FAIL", "job_gone_incomplete", "train is not running at 2/7 items (exit code 137)")]
    row = fleet_patrol.patrol_row("lab-02", patrol_record(probe([gone], found)), tail_lines=3)
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
    row = fleet_patrol.patrol_row("lab-03", patrol_record(probe([crashed], [
        finding_of("FAIL", "job_crashed")])))
    assert row["verdict"] == "FAIL" and "crash traceback x1 (line 9): last lines: Traceback" in row["line"]


def test_patrol_escalates_log_stale_but_not_other_warnings_unless_strict():
    stale = fleet_patrol.patrol_row("h", patrol_record(probe([job(log_age_seconds=3600)], [
        finding_of("WARN", "log_stale", "silent for 60 min")])))
    assert stale["verdict"] == "FAIL" and stale["reasons"] == ["log_stale: silent for 60 min"]
    assert "log 60m STALE" in stale["line"]
    disk_warn = [finding_of("WARN", "bytes_high"), finding_of("WARN", "oom_killed")]
    row = fleet_patrol.patrol_row("h", patrol_record(probe([job()], disk_warn)))
    assert row["verdict"] == "WARN" and row["reasons"] == []
    assert fleet_patrol.patrol_row("h", patrol_record(probe([job()], disk_warn)), strict=True)[
        "verdict"] == "FAIL"
    full = fleet_patrol.patrol_row("h", patrol_record(probe([job()], [
        finding_of("FAIL", "inodes_exhausted", "/root/autodl-fs has used 97% of its inodes")], durable=(40, 97))))
    assert full["verdict"] == "FAIL" and full["reasons"][0].startswith("inodes_exhausted: ")


def test_patrol_finished_and_missing_jobs():
    done = job(alive=False, items_done=7, last_exit_code=0)
    row = fleet_patrol.patrol_row("h", patrol_record(probe([done], [
        {"level": "INFO", "code": "job_finished", "message": "ok", "action": "pull"}])))
    assert row["verdict"] == "PASS" and "train DONE items 7/7 epoch 12/20 exit 0 log 0m |" in row["line"]
    missing = fleet_patrol.patrol_row("h", patrol_record(probe([job(exists=False)], [
        finding_of("FAIL", "job_missing")])))
    assert missing["verdict"] == "FAIL" and "train MISSING (no job directory)" in missing["line"]


def test_patrol_unreachable_timeout_interpreter_and_no_result():
    row = fleet_patrol.patrol_row("lab-05", patrol_record(
        {"unreachable": True, "msg": "Task failed: ssh: connect to host 127.0.0.15 port 22: Connection refused"}))
    assert row["verdict"] == "UNREACHABLE" and row["line"] == (
        "lab-05 UNREACHABLE: ssh: connect to host 127.0.0.15 port 22: Connection refused")
    assert row["gpus"] is None and row["jobs"] == []
    timeout = fleet_patrol.patrol_row("lab-06", patrol_record(
        {"failed": True, "msg": "The task action timed out after 5 seconds.", "timedout": {"period": 5}}))
    assert timeout["verdict"] == "FAIL" and timeout["findings"][0]["code"] == "probe_timeout"
    no_python = fleet_patrol.patrol_row("lab-07", patrol_record(
        {"failed": True, "rc": 127, "msg": "MODULE FAILURE", "module_stderr": "/bin/sh: python: No such file"}))
    assert no_python["findings"][0]["code"] == "interpreter_missing"
    none = fleet_patrol.patrol_row("lab-08", patrol_record(None))
    assert none["verdict"] == "NO_RESULT" and none["line"].startswith("lab-08 NO_RESULT")
    assert fleet_table.failing_hosts([row, timeout, no_python, none]) == ["lab-05", "lab-06", "lab-07", "lab-08"]


def test_patrol_table_has_its_own_columns_and_preflight_keeps_its_own():
    rows = [fleet_patrol.patrol_row("lab-01", patrol_record(probe([job()]))),
            fleet_patrol.patrol_row("lab-05", patrol_record({"unreachable": True, "msg": "refused"}))]
    lines = fleet_table.render_table(rows, fleet_patrol.COLUMNS)
    assert lines[0].split() == ["HOST", "PLATFORM", "VERDICT", "JOBS", "PROGRESS", "DATA%B", "DATA%I", "DURABLE%I",
                                "GPU", "TOP", "FINDING"]
    assert lines[1].split()[:7] == ["lab-01", "autodl", "PASS", "train", "ALIVE", "3/7", "epoch"]
    assert lines[2].split()[:3] == ["lab-05", "autodl", "UNREACHABLE"]
    preflight_header = fleet_table.render_table([], fleet_preflight.COLUMNS)[0]
    assert preflight_header.split()[:4] == ["HOST", "PLATFORM", "GPUS", "VERDICT"]


def test_non_numeric_progress_and_counters_are_unknown_not_a_traceback():
    odd = job(progress={"unit": "epoch", "value": "four", "text": "epoch four"}, items_total="7", items_done=None,
              log_age_seconds="old")
    row = fleet_patrol.patrol_row("lab-01", patrol_record(probe([odd])))
    assert "epoch ? (epoch four)" in row["line"] and row["progress"] == "epoch ? (epoch four)"
    assert "items" not in row["line"] and "log " not in row["line"]
    assert fleet_patrol.patrol_row("lab-01", patrol_record(probe([job(progress=[4])])))["progress"] == "progress ?"


def test_jobs_and_findings_that_are_not_mappings_are_a_malformed_result():
    record = patrol_record(probe([job(), "train"]))
    record["probe"]["findings"] = ["log_stale"]
    row = fleet_patrol.patrol_row("lab-01", record)
    assert row["verdict"] == "FAIL" and [f["code"] for f in row["findings"]].count("malformed_result") == 2
    assert len(row["jobs"]) == 1


def test_patrol_a_dying_gpu_says_why_the_job_is_gone_and_gpu_findings_escalate():
    """Issue 16, item 6: xid_fatal explains a dead job, so it is the top finding; throttle_active escalates; an empty
    GPU sample is a WARN that is shown, not escalated."""
    gone = job(alive=False, pid=None, items_done=2, last_exit_code=1, vanished_reason="unknown")
    found = [finding_of("FAIL", "job_gone_incomplete", "train is not running at 2/7 items (exit code 1)"),
             finding_of("FAIL", "throttle_active", "GPU 0 (0000:19:00) is being throttled ... under load"),
             finding_of("FAIL", "xid_fatal", "GPU at PCI 0000:07:00 (not listed by nvidia-smi) logged Xid 48 ...")]
    row = fleet_patrol.patrol_row("lab-02", patrol_record(probe([gone], found)))
    assert row["verdict"] == "FAIL" and row["top_finding"].startswith("xid_fatal: ")
    assert [reason.split(":")[0] for reason in row["reasons"]] == ["xid_fatal", "job_gone_incomplete",
                                                                   "throttle_active"]
    row = fleet_patrol.patrol_row("lab-03", patrol_record(probe([job()], [
        finding_of("WARN", "gpu_sample_empty", "the GPU sample came back empty: ...")])))
    assert row["verdict"] == "WARN" and row["reasons"] == [] and row["top_finding"].startswith("gpu_sample_empty: ")


def test_a_box_that_did_not_answer_says_what_its_provider_says_of_it():
    """The inventory rent wrote says running; the run's read of the provider (provider_facts, read=True) says
    preempted, or running (then the SSH path is broken, not the box); the inventory's own running says nothing."""
    down = {"unreachable": True, "msg": "Task failed: ssh: connect to host 203.0.113.7 port 41007: Connection refused"}
    preempted = {"state": "preempted", "provider": "vastai", "id": "9000002", "read": True,
                 "message": "vast.ai instance 9000002 is stopped by the market (a bid instance outbid)"}
    row = fleet_patrol.patrol_row("sweep-a-9000002", dict(patrol_record(down), provider=preempted))
    assert row["verdict"] == "UNREACHABLE", row
    assert row["line"] == ("sweep-a-9000002 UNREACHABLE: vastai says instance 9000002 is preempted: vast.ai instance "
                           "9000002 is stopped by the market (a bid instance outbid) (ssh: connect to host 203.0.113.7 "
                           "port 41007: Connection refused)")
    assert row["reasons"] == [row["top_finding"]] and row["top_finding"].startswith("unreachable: vastai says")
    runs = dict(preempted, state="running", message=None)
    assert "vastai says instance 9000002 runs: its SSH path is broken, not the box" in fleet_patrol.patrol_row(
        "h", dict(patrol_record(down), provider=runs))["line"]
    # the inventory's running (not read in this run) and a static inventory's host: the SSH error alone
    for provider in (dict(runs, read=False), None):
        assert fleet_patrol.patrol_row("h", dict(patrol_record(down), provider=provider))["line"] == (
            "h UNREACHABLE: ssh: connect to host 203.0.113.7 port 41007: Connection refused")
    # a dynamic inventory's stopped box (not read in this run, but not running): its word
    stopped = dict(preempted, state="stopped", read=False, message="")
    assert fleet_patrol.patrol_row("h", dict(patrol_record(down), provider=stopped))["line"].startswith(
        "h UNREACHABLE: vastai says instance 9000002 is stopped (ssh: connect")
