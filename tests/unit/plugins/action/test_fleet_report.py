"""The fleet_report action: rows from each host's raw probe results, the targeted hosts, the failure message, the
argument checks and the reports it writes."""

from __future__ import annotations

import json
import time
import re
from unittest import mock

import pytest

from ansible_collections.remote_gpu.trainer.plugins.action import fleet_report as action
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import fleet_patrol, fleet_preflight

PREFLIGHT_VARS = {"inode_check": "preflight_storage", "gpu_health": "preflight_gpu", "env_audit": "preflight_env"}
PATROL_VARS = {"job_status": "patrol_probe"}
THROTTLE = {"level": "FAIL", "code": "throttle_active", "message": "GPU 3: HW slowdown active", "action": "stop"}
XID = {"level": "WARN", "code": "xid_app_fault", "message": "Xid 13 on GPU 0", "action": "look"}


def profile(name="autodl", interpreter="/root/miniconda3/bin/python"):
    return {"trainer_profile": name, "trainer_data_dir": "/root/autodl-tmp", "trainer_durable_dir": "/root/autodl-fs",
            "trainer_interpreter": interpreter}


def probed(gpu_findings=(), gpus=1):
    """The host variables of a host whose three preflight probes ran."""
    return dict(profile(), preflight_storage={"changed": False, "findings": [], "paths": [
        {"path": "/root/autodl-tmp", "bytes_pct": 12, "inodes_pct": 3},
        {"path": "/root/autodl-fs", "bytes_pct": 40, "inodes_pct": 91}]},
        preflight_gpu={"changed": False, "gpus": [{"name": "NVIDIA H100 80GB HBM3"}] * gpus,
                       "findings": list(gpu_findings)},
        preflight_env={"changed": False, "findings": []})


class BrokenProfile(dict):
    """The host variables of a host whose profile failed validation: its variables do not even template."""

    def get(self, key, default=None):
        raise ValueError("'trainer_data_dir' is undefined")


def fleet():
    return {
        "lab-01": probed(),
        "lab-02": probed([THROTTLE], gpus=8),
        "lab-03": dict(profile("runpod"), preflight_storage={
            "unreachable": True, "changed": False, "msg": "Task failed: ssh: connect to host 127.0.3.13 port 22"},
            preflight_gpu={"changed": False, "skipped": True}, preflight_env={"changed": False, "skipped": True}),
        "lab-04": probed([XID]),
        "lab-05": dict(profile(interpreter="/root/miniconda3/bin/nope"), preflight_storage={
            "failed": True, "rc": 127, "msg": "MODULE FAILURE", "module_stderr": "/bin/sh: 1: nope: not found"}),
        "lab-06": profile(),  # failed before the probe: no results registered
        "lab-07": BrokenProfile(),
        "lab-99": probed(),  # in the inventory, not in the play
    }


def task_vars(play_hosts=None, hostvars=None):
    play_hosts = play_hosts or ["lab-0%d" % i for i in range(7, 0, -1)]
    return {"ansible_play_hosts_all": play_hosts, "hostvars": hostvars or fleet(), "inventory_hostname": play_hosts[0]}


def run_action(args, variables):
    task = mock.MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = False
    task.action = "remote_gpu.trainer.fleet_report"
    plugin = action.ActionModule(task, mock.MagicMock(), mock.MagicMock(), mock.MagicMock(), mock.MagicMock())
    return plugin.run(task_vars=variables)


@pytest.fixture
def screen(monkeypatch):
    printed = []
    monkeypatch.setattr(action.display, "display", printed.append)
    return printed


def test_preflight_rows_from_raw_results_with_failed_unreachable_and_missing_hosts(tmp_path, screen):
    report = tmp_path / "reports" / "preflight.json"
    result = run_action({"result_vars": PREFLIGHT_VARS, "report_path": str(report), "title": "preflight"},
                        task_vars())
    data = json.loads(report.read_text())
    rows = {row["host"]: row for row in data["hosts"]}
    assert [row["host"] for row in data["hosts"]] == ["lab-0%d" % i for i in range(1, 8)]
    assert rows["lab-01"]["verdict"] == "PASS" and rows["lab-01"]["gpus"] == "1x NVIDIA H100 80GB HBM3"
    assert (rows["lab-01"]["data_bytes_pct"], rows["lab-01"]["durable_inodes_pct"]) == (12, 91)
    assert rows["lab-02"]["verdict"] == "FAIL" and rows["lab-02"]["top_finding"].startswith("throttle_active: GPU 3")
    assert rows["lab-03"]["verdict"] == "UNREACHABLE" and rows["lab-03"]["platform"] == "runpod"
    assert rows["lab-03"]["top_finding"] == "unreachable: ssh: connect to host 127.0.3.13 port 22"
    assert rows["lab-04"]["verdict"] == "WARN"
    assert rows["lab-05"]["verdict"] == "FAIL" and rows["lab-05"]["top_finding"].startswith(
        "interpreter_missing: the profile interpreter /root/miniconda3/bin/nope")
    assert rows["lab-06"]["verdict"] == "NO_RESULT" and rows["lab-06"]["platform"] == "autodl"
    assert rows["lab-07"]["verdict"] == "NO_RESULT" and rows["lab-07"]["platform"] == "-"
    assert data["kind"] == "preflight" and data["title"] == "preflight" and data["strict"] is False
    assert data["summary"] == {"PASS": 1, "FAIL": 2, "UNREACHABLE": 1, "WARN": 1, "NO_RESULT": 2}
    assert data["failing"] == ["lab-02", "lab-03", "lab-05", "lab-06", "lab-07"] == result["failing"]
    # failing hosts fail the task with their verdict and top finding; the table was printed first
    assert result["failed"] is True and result["msg"].startswith("5 host(s) not fit: lab-02: FAIL throttle_active: ")
    assert "; lab-03: UNREACHABLE unreachable: ssh: " in result["msg"] and "rows" not in result
    assert len(screen) == 1 and screen[0].splitlines()[0].split()[:4] == ["HOST", "PLATFORM", "GPUS", "VERDICT"]
    assert screen[0].splitlines()[-1] == "preflight: 7 host(s): FAIL 2, NO_RESULT 2, PASS 1, UNREACHABLE 1, WARN 1"
    assert result["report_path"] == str(report) and result["prom_path"] is None and result["changed"] is False


def test_fail_run_false_returns_the_rows_and_strict_fails_on_warn(screen):
    result = run_action({"result_vars": PREFLIGHT_VARS, "fail_run": False}, task_vars(["lab-04", "lab-01"]))
    assert "failed" not in result and result["failing"] == []
    assert [row["host"] for row in result["rows"]] == ["lab-01", "lab-04"] and len(result["table"]) == 3
    strict = run_action({"result_vars": PREFLIGHT_VARS, "strict": True}, task_vars(["lab-04", "lab-01"]))
    assert strict["failed"] is True and strict["failing"] == ["lab-04"]
    assert strict["msg"] == "1 host(s) not fit: lab-04: WARN xid_app_fault: Xid 13 on GPU 0"


def test_hosts_are_the_play_hosts_within_the_limit_unless_given():
    variables = task_vars(["lab-04", "lab-01"])
    assert action.targeted_hosts(None, variables) == ["lab-01", "lab-04"]
    assert action.targeted_hosts(["lab-99", "lab-02"], variables) == ["lab-02", "lab-99"]
    assert action.targeted_hosts(None, {}) == []


def test_explicit_hosts_replace_the_play_hosts(screen):
    result = run_action({"result_vars": PREFLIGHT_VARS, "hosts": ["lab-99"], "fail_run": False}, task_vars())
    assert [row["host"] for row in result["rows"]] == ["lab-99"]


def test_host_record_reads_the_profile_and_the_results_of_the_kind():
    record = action.host_record(fleet()["lab-01"], "preflight", PREFLIGHT_VARS)
    assert record["platform"] == "autodl" and record["interpreter"] == "/root/miniconda3/bin/python"
    assert set(record) == {"platform", "data_dir", "durable_dir", "interpreter", "storage", "gpu", "env"}
    assert record["gpu"]["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert action.host_record(BrokenProfile(), "patrol", PATROL_VARS) == dict.fromkeys(
        ("platform", "data_dir", "durable_dir", "interpreter", "probe"))
    assert action.host_record(None, "patrol", PATROL_VARS)["probe"] is None


def patrol_vars():
    job = {"name": "train", "exists": True, "alive": False, "items_done": 2, "items_total": 7, "last_exit_code": 137,
           "log_age_seconds": 30, "tail": ["epoch 4", "Killed"], "vanished_reason": "killed"}
    gone = {"level": "FAIL", "code": "job_gone_incomplete", "message": "train is not running at 2/7 items"}
    return {
        "lab-01": dict(profile(), patrol_probe={"jobs": [dict(job, alive=True, last_exit_code=None)], "findings": [],
                                                "paths": [], "gpus": []}),
        "lab-02": dict(profile(), patrol_probe={"jobs": [job], "findings": [gone], "paths": [], "gpus": []}),
        "lab-05": dict(profile(), patrol_probe={"unreachable": True, "msg": "Task failed: refused"}),
        "lab-06": dict(profile(), patrol_probe={"failed": True, "msg": "Task failed: Timed out after 5 second(s).",
                                                "timedout": {"period": 5}}),
    }


def test_patrol_rows_lines_and_escalation_message(tmp_path, screen):
    prom = tmp_path / "textfile" / "trainer.prom"
    result = run_action({"result_vars": PATROL_VARS, "kind": "patrol", "title": "patrol", "prom_path": str(prom)},
                        task_vars(["lab-06", "lab-05", "lab-02", "lab-01"], patrol_vars()))
    assert result["failing"] == ["lab-02", "lab-05", "lab-06"]
    assert result["msg"] == ("3 host(s) escalated: lab-02: job_gone_incomplete: train is not running at 2/7 items || "
                             "lab-05: unreachable: refused || lab-06: probe_timeout: job_status did not answer in "
                             "time: Task failed: Timed out after 5 second(s).")
    lines = screen[0].splitlines()
    assert lines[0].startswith("lab-01 PASS train ALIVE items 2/7 log 0m |")
    assert lines[1].startswith(
        "lab-02 FAIL train GONE items 2/7 exit 137 (killed) log 0m: last lines: epoch 4 | Killed")
    assert lines[2] == "lab-05 UNREACHABLE: refused" and lines[4] == ""
    assert lines[5].split()[:4] == ["HOST", "PLATFORM", "VERDICT", "JOBS"]
    assert lines[-1] == "patrol: 4 host(s): FAIL 2, PASS 1, UNREACHABLE 1"
    text = prom.read_text()
    assert 'trainer_patrol_verdict{host="lab-06",verdict="FAIL"} 1\n' in text
    assert 'trainer_job_alive{host="lab-01",job="train"} 1\n' in text
    assert [p.name for p in prom.parent.iterdir()] == ["trainer.prom"]


def test_columns_per_kind():
    assert action.COLUMNS_BY_KIND["preflight"] is fleet_preflight.COLUMNS
    assert action.COLUMNS_BY_KIND["patrol"] is fleet_patrol.COLUMNS


@pytest.mark.parametrize("args,message", [
    ({"result_vars": PATROL_VARS, "kind": "patrol", "prom_path": "/tmp/trainer.txt"}, "must end in .prom"),
    ({"result_vars": PATROL_VARS}, "kind=preflight needs result_vars.inode_check, result_vars.gpu_health, "
                                   "result_vars.env_audit"),
    ({"result_vars": PREFLIGHT_VARS, "kind": "patrol"}, "kind=patrol needs result_vars.job_status"),
    ({"result_vars": dict(PREFLIGHT_VARS, bogus="x")}, "bogus"),
    ({"result_vars": PREFLIGHT_VARS, "record_var": "preflight_record"}, "Invalid options"),
    ({}, "result_vars"),
])
def test_bad_arguments_are_refused_before_anything_is_written(args, message, tmp_path, screen):
    report = tmp_path / "report.json"
    result = run_action(dict(args, report_path=str(report)), task_vars(["lab-01"]))
    assert result["failed"] and re.search(message, result["msg"])
    assert not report.exists() and screen == []


def test_an_unwritable_report_path_is_a_message_not_a_traceback(tmp_path, screen):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = run_action({"result_vars": PREFLIGHT_VARS, "report_path": str(blocker / "r.json")}, task_vars(["lab-01"]))
    assert result["failed"] and re.search("cannot write the report to %s/r.json: .*Set a writable report path"
                                          % blocker, result["msg"])


def test_screen_text_puts_a_blank_line_between_the_lines_and_the_table():
    assert action.screen_text([{"line": "a"}, {}], ["HOST", "a"], "t: 1") == "a\n\nHOST\na\nt: 1"
    assert action.screen_text([{}], ["HOST"], "t: 0") == "HOST\nt: 0"


CLOCKS = [{"clock": "a powered-off instance is released after 15 days", "verified": "2026-06"}]


def billed_profile(name="autodl", clocks=None, **kw):
    base = dict(profile(name), trainer_danger_clocks=CLOCKS if clocks is None else clocks, trainer_billed=True, trainer_price_per_hour=0,
                trainer_price_currency="CNY", trainer_meter_stop={"verb": "power_off"})
    base.update(kw)
    return base


def finished_job(hours_ago):
    finished = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - hours_ago * 3600))
    return {"name": "train", "exists": True, "alive": False, "items_done": 7, "items_total": 7, "last_exit_code": 0,
            "final_status": {"exit_code": 0, "finished": finished}, "log_age_seconds": 60, "tail": []}


def test_danger_clocks_are_printed_once_per_platform_above_the_table_and_reported(tmp_path, screen):
    hostvars = {"lab-01": dict(probed(), **billed_profile()), "lab-02": dict(probed(), **billed_profile()),
                "lab-03": dict(probed(), **billed_profile("runpod", [{"clock": "zero balance deletes pods",
                                                                      "verified": "2026-06"}])),
                "lab-04": dict(probed(), **billed_profile("local", []))}
    report = tmp_path / "preflight.json"
    result = run_action({"result_vars": PREFLIGHT_VARS, "report_path": str(report), "fail_run": False},
                        task_vars(["lab-04", "lab-03", "lab-02", "lab-01"], hostvars))
    lines = screen[0].splitlines()
    assert lines[:3] == [
        "danger clocks, autodl (2 hosts): a powered-off instance is released after 15 days (verified 2026-06)",
        "danger clocks, runpod (1 host): zero balance deletes pods (verified 2026-06)", ""]
    assert lines[3].split()[:4] == ["HOST", "PLATFORM", "GPUS", "VERDICT"] and lines[-1].startswith("fleet: 4 host")
    # a clock is not a finding: every host still passes
    assert [row["verdict"] for row in result["rows"]] == ["PASS"] * 4
    assert result["danger_clocks"] == json.loads(report.read_text())["danger_clocks"]
    assert [(e["platform"], e["hosts"]) for e in result["danger_clocks"]] == [
        ("autodl", ["lab-01", "lab-02"]), ("runpod", ["lab-03"])]


def test_patrol_idle_billing_with_the_price_from_the_inventory(screen):
    hostvars = {
        "lab-01": dict(billed_profile(trainer_price_per_hour=2.5),
                       patrol_probe={"jobs": [finished_job(4)], "findings": [], "paths": [], "gpus": []}),
        "lab-02": dict(billed_profile(), patrol_probe={"jobs": [finished_job(4)], "findings": [], "paths": [],
                                                       "gpus": []}),
        "lab-03": dict(billed_profile(trainer_billed=False),
                       patrol_probe={"jobs": [finished_job(4)], "findings": [], "paths": [], "gpus": []}),
        "lab-04": dict(billed_profile(), patrol_probe={"jobs": [finished_job(0.1)], "findings": [], "paths": [],
                                                       "gpus": []}),
    }
    result = run_action({"result_vars": PATROL_VARS, "kind": "patrol"}, task_vars(sorted(hostvars), hostvars))
    rows = {row["host"]: row for row in result["rows"]}
    assert "failed" not in result and result["failing"] == []
    assert rows["lab-01"]["verdict"] == "WARN" and rows["lab-01"]["top_finding"] == (
        "idle_billing: the queue finished 4.0 h ago and the box still bills: about 10.00 CNY so far at 2.50 CNY/h")
    assert rows["lab-02"]["verdict"] == "WARN" and rows["lab-02"]["findings"][0]["hours_idle"] == 4.0
    assert "cost" not in rows["lab-02"]["findings"][0]
    # not billed; finished 6 minutes ago (under idle_minutes, 30)
    assert rows["lab-03"]["verdict"] == rows["lab-04"]["verdict"] == "PASS"
    quick = run_action({"result_vars": PATROL_VARS, "kind": "patrol", "idle_minutes": 5},
                       task_vars(["lab-04"], hostvars))
    assert quick["rows"][0]["verdict"] == "WARN" and quick["rows"][0]["top_finding"].startswith("idle_billing: ")


def test_billing_settings_read_the_profile_and_survive_a_broken_one():
    settings = action.billing_settings(billed_profile(trainer_price_per_hour=1.5), 100.0, 30)
    assert settings == {"billed": True, "price_per_hour": 1.5, "currency": "CNY", "now": 100.0, "idle_minutes": 30,
                        "verb": "power_off"}
    assert action.billing_settings(BrokenProfile(), 1.0, 30)["billed"] is None
    assert action.billing_settings(None, 1.0, 30)["verb"] is None


def test_screen_text_puts_the_danger_clocks_above_the_table():
    clocks = [{"platform": "autodl", "hosts": ["a"], "clocks": [{"clock": "c", "verified": None}]}]
    assert action.screen_text([{"line": "a"}], ["HOST"], "t: 1", clocks) == (
        "a\n\ndanger clocks, autodl (1 host): c\n\nHOST\nt: 1")


def one_probe(host_vars):
    """The host variables of ``host_vars`` as preflight_probe registers them: one result holding the three."""
    if not isinstance(host_vars, dict) or type(host_vars) is not dict:  # pylint: disable=unidiomatic-typecheck
        return host_vars
    out = dict((key, value) for key, value in host_vars.items() if not key.startswith("preflight_"))
    storage = host_vars.get("preflight_storage")
    if storage is None:
        return out
    if storage.get("unreachable") or storage.get("failed"):
        out["preflight_probe"] = storage
    else:
        out["preflight_probe"] = {"changed": False, "status": "PASS", "inode_check": storage,
                                  "gpu_health": host_vars["preflight_gpu"], "env_audit": host_vars["preflight_env"]}
    return out


def test_one_preflight_probe_result_gives_the_rows_of_the_three_results(tmp_path, screen):
    """Issue 15: result_vars.preflight_probe alone, the same rows (and verdicts, top findings) as three results."""
    three = run_action({"result_vars": PREFLIGHT_VARS, "report_path": str(tmp_path / "three.json")}, task_vars())
    hostvars = dict((host, one_probe(host_vars)) for host, host_vars in fleet().items())
    one = run_action({"result_vars": {"preflight_probe": "preflight_probe"}, "report_path": str(tmp_path / "one.json")},
                     task_vars(hostvars=hostvars))
    assert json.loads((tmp_path / "one.json").read_text())["hosts"] == json.loads(
        (tmp_path / "three.json").read_text())["hosts"]
    assert one["failing"] == three["failing"] == ["lab-02", "lab-03", "lab-05", "lab-06", "lab-07"]


def test_preflight_needs_the_probe_or_the_three_results(screen):
    result = run_action({"result_vars": {"inode_check": "preflight_storage"}}, task_vars())
    assert result["failed"] and "needs result_vars.gpu_health, result_vars.env_audit" in result["msg"]
    assert "(or result_vars.preflight_probe alone)" in result["msg"]


def test_a_rented_box_that_did_not_answer_is_told_with_its_providers_word(screen):
    """patrol.yml asks the provider about a rented box that did not answer (provider_now, one result per host
    asked about); its row says preempted where the inventory rent wrote still says running."""
    hostvars = patrol_vars()
    rented = {"provider": "vastai", "provider_id": "9000002", "provider_state": "running"}
    hostvars["lab-05"].update(rented)
    read = {"changed": False, "results": [{"item": "lab-05", "found": True, "state": "preempted", "facts": dict(
        rented, provider_state="preempted", provider_state_message="vast.ai instance 9000002 is stopped by the market")}]}
    for host in hostvars:
        hostvars[host]["provider_now"] = read
    result = run_action({"result_vars": dict(PATROL_VARS, instance_info="provider_now"), "kind": "patrol",
                         "title": "patrol"}, task_vars(None, hostvars))
    lines = screen[0].splitlines()
    assert "lab-05 UNREACHABLE: vastai says instance 9000002 is preempted: vast.ai instance 9000002 is stopped by the " \
           "market (refused)" in lines, lines
    assert "lab-05: unreachable: vastai says instance 9000002 is preempted" in result["msg"], result["msg"]
