"""fleet_table: the table, verdict counts, failing hosts and probe-failure classification shared by preflight and
patrol."""

from __future__ import annotations

import pytest

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import fleet_preflight, fleet_table


def preflight_record(findings):
    return {"platform": "autodl", "data_dir": "/root/autodl-tmp", "durable_dir": "/root/autodl-fs",
            "storage": {"findings": [], "paths": [
                {"path": "/root/autodl-tmp", "bytes_pct": 12, "inodes_pct": 3},
                {"path": "/root/autodl-fs", "bytes_pct": 10, "inodes_pct": 91}]},
            "gpu": {"gpus": [], "findings": findings}, "env": {"findings": []}}


FAIL = {"level": "FAIL", "code": "throttle_active", "message": "GPU 3: HW slowdown active", "action": "stop"}


def test_failing_hosts_strict_and_not():
    rows = [{"host": "a", "verdict": "PASS"}, {"host": "b", "verdict": "WARN"},
            {"host": "c", "verdict": "FAIL"}, {"host": "d", "verdict": "UNREACHABLE"}]
    assert fleet_table.failing_hosts(rows) == ["c", "d"]
    assert fleet_table.failing_hosts(rows, strict=True) == ["b", "c", "d"]
    assert fleet_table.summary(rows) == {"PASS": 1, "WARN": 1, "FAIL": 1, "UNREACHABLE": 1}
    assert fleet_table.footer("preflight", fleet_table.summary(rows)) == (
        "preflight: 4 host(s): FAIL 1, PASS 1, UNREACHABLE 1, WARN 1")
    assert fleet_table.footer("patrol", {}) == "patrol: 0 host(s): none"


def test_table_aligns_columns_and_truncates_long_findings():
    rows = [fleet_preflight.preflight_row("lab-01", preflight_record([dict(FAIL, message="x" * 200)])),
            fleet_preflight.preflight_row("a-much-longer-host", preflight_record([]))]
    lines = fleet_table.render_table(rows, fleet_preflight.COLUMNS)
    assert lines[0].startswith("HOST")
    assert len(lines) == 3
    verdict_col = lines[0].index("VERDICT")
    assert lines[1][verdict_col:].startswith("FAIL") and lines[2][verdict_col:].startswith("PASS")
    assert lines[1].endswith("...")
    assert "91%" in lines[1]
    assert len(lines[1].split("  ")[-1]) == 90


def test_cells_show_percentages_dashes_and_text():
    lines = fleet_table.render_table([{"a": 7, "b": None, "c": True, "d": "x"}],
                                     (("a", "A"), ("b", "B"), ("c", "C"), ("d", "D")))
    assert lines[1].split() == ["7%", "-", "True", "x"]


def test_unreachable_row_drops_the_task_failed_prefix_and_clips():
    row = fleet_table.unreachable_row("h", "runpod", {"unreachable": True, "msg": "Task failed: ssh:\n " + "y" * 300})
    assert row["verdict"] == "UNREACHABLE" and row["top_finding"].startswith("unreachable: ssh: yyy")
    # the message is clipped to 200 characters, then loses its prefix
    assert len(row["top_finding"]) == len("unreachable: ") + 200 - len("Task failed: ")
    assert row["top_finding"].endswith("...")
    assert fleet_table.unreachable_row("h", "-", {"unreachable": True})["top_finding"] == "unreachable: no answer"


@pytest.mark.parametrize("result,code", [
    ({"failed": True, "msg": "Task failed: Timed out after 5 second(s).", "timedout": {"period": 5}}, "probe_timeout"),
    ({"failed": True, "msg": "The task action timed out after 5 seconds."}, "probe_timeout"),
    ({"failed": True, "rc": 127, "msg": "MODULE FAILURE", "module_stderr": "/bin/sh: python: not found"},
     "interpreter_missing"),
    ({"failed": True, "rc": 1, "msg": "MODULE FAILURE", "module_stderr": "/bin/sh: /opt/py: No such file"},
     "interpreter_missing"),
    ({"failed": True, "msg": "Unsupported parameters"}, "probe_failed"),
    ({"failed": True}, "probe_failed"),
])
def test_probe_failure_classification(result, code):
    item = fleet_table.probe_failure(result, "patrol", probe="job_status")
    assert item["level"] == "FAIL" and item["code"] == code
    assert item["message"] and item["action"]


def test_probe_failure_texts_name_the_interpreter_the_profile_and_the_run():
    timeout = fleet_table.probe_failure({"timedout": {"period": 5}, "msg": "Timed out"}, "patrol", probe="job_status",
                                        timeout_hint="patrol_host_timeout")
    assert timeout["message"] == "job_status did not answer in time: Timed out"
    assert timeout["action"].endswith("; raise patrol_host_timeout if it is slow.")
    missing = fleet_table.probe_failure({"rc": 127, "module_stderr": "sh: /x/python: not found"}, "preflight",
                                        interpreter="/x/python", platform="autodl")
    assert missing["message"] == "the profile interpreter /x/python does not run on the box: sh: /x/python: not found"
    assert missing["action"] == "Set trainer_interpreter for this host (profile autodl) to a Python that exists there."
    failed = fleet_table.probe_failure({"msg": "boom " * 100}, "preflight")
    assert len(failed["message"]) == 300 and failed["action"].endswith("run preflight again.")
    assert fleet_table.probe_failure({}, "preflight", probe="env_audit")["message"] == "env_audit failed"


def test_number_and_integer_accept_real_numbers_only():
    assert [fleet_table.number(v) for v in (3, 2.5, True, "3", None, float("nan"), float("inf"), [1])] == [
        3, 2.5, None, None, None, None, None, None]
    assert fleet_table.integer(2.9) == 2 and fleet_table.integer("2") is None


def test_mappings_keep_the_usable_entries_and_say_what_is_malformed():
    good = {"level": "WARN", "code": "x"}
    assert fleet_table.mappings(None, "gpu_health", "findings") == ([], None)
    assert fleet_table.mappings([good], "gpu_health", "findings") == ([good], None)
    entries, problem = fleet_table.mappings([good, "FAIL: hot", 3], "gpu_health", "findings")
    assert entries == [good] and problem["code"] == "malformed_result" and problem["level"] == "FAIL"
    assert "2 of its findings are not mappings: 'FAIL: hot', 3" in problem["message"]
    entries, problem = fleet_table.mappings("FAIL", "env_audit", "findings")
    assert entries == [] and "findings is str, not a list" in problem["message"]
    entries, problem = fleet_table.mappings([{"level": ["FAIL"]}], "x", "findings", fleet_table.is_finding)
    assert entries == [] and problem is not None


def test_usage_of_ignores_malformed_paths():
    result = {"paths": ["/data", 5, {"path": "/data", "bytes_pct": "90", "inodes_pct": 12}]}
    assert fleet_table.usage_of(result, "/data") == {"path": "/data", "bytes_pct": None, "inodes_pct": 12}
    assert fleet_table.usage_of({"paths": "oops"}, "/data") == {}
