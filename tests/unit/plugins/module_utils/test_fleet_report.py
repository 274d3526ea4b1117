from __future__ import annotations

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
