"""fleet_preflight: one preflight row from the raw inode_check, gpu_health and env_audit results of a host."""

from __future__ import annotations

import pytest

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import fleet_preflight, fleet_table


def storage(data_pct, data_inodes, durable_inodes, findings=()):
    return {"changed": False, "status": "PASS", "findings": list(findings), "paths": [
        {"path": "/root/autodl-tmp", "bytes_pct": data_pct, "inodes_pct": data_inodes},
        {"path": "/root/autodl-fs", "bytes_pct": 10, "inodes_pct": durable_inodes},
    ]}


def record(findings, gpus=None, storage_findings=(), env_findings=()):
    """A host whose three probes ran: ``findings`` are gpu_health's."""
    return {"platform": "autodl", "data_dir": "/root/autodl-tmp", "durable_dir": "/root/autodl-fs",
            "interpreter": "/root/miniconda3/bin/python", "storage": storage(12, 3, 91, storage_findings),
            "gpu": {"changed": False, "gpus": gpus or [], "findings": findings},
            "env": {"changed": False, "findings": list(env_findings)}}


FAIL = {"level": "FAIL", "code": "throttle_active", "message": "GPU 3: HW slowdown active", "action": "stop"}
WARN = {"level": "WARN", "code": "inodes_high", "message": "/root/autodl-fs has used 91% of its inodes", "action": "x"}
INFO = {"level": "INFO", "code": "mig_enabled", "message": "MIG", "action": "none"}


def test_row_takes_the_worst_finding_and_the_tier_percentages():
    row = fleet_preflight.preflight_row("lab-01", record([WARN, FAIL, INFO], gpus=[{"name": "NVIDIA H100"}] * 8))
    assert row["verdict"] == "FAIL"
    assert row["top_finding"].startswith("throttle_active: GPU 3")
    assert (row["data_bytes_pct"], row["data_inodes_pct"], row["durable_inodes_pct"]) == (12, 3, 91)
    assert row["gpus"] == "8x NVIDIA H100"


def test_info_only_is_pass_with_no_top_finding():
    row = fleet_preflight.preflight_row("lab-02", record([INFO]))
    assert row["verdict"] == "PASS" and row["top_finding"] == "-"
    assert row["gpus"] == "-"


def test_findings_of_the_three_probes_gpu_first_and_worst_first():
    env_warn = dict(WARN, code="proxy_hook_missing")
    row = fleet_preflight.preflight_row("lab-01", record([INFO, dict(WARN, code="ecc_volatile")],
                                                         storage_findings=[WARN], env_findings=[env_warn]))
    assert [f["code"] for f in row["findings"]] == ["ecc_volatile", "inodes_high", "proxy_hook_missing", "mig_enabled"]
    assert row["verdict"] == "WARN" and row["top_finding"].startswith("ecc_volatile: ")
    assert set(row) == {"host", "platform", "gpus", "verdict", "data_bytes_pct", "data_inodes_pct",
                        "durable_inodes_pct", "top_finding", "findings"}


def test_gpu_summary_counts_each_model():
    gpus = [{"name": "NVIDIA A10"}, {"name": "NVIDIA L40S"}, {"name": "NVIDIA A10"}, {}]
    assert fleet_preflight.gpu_summary(gpus) == "2x NVIDIA A10 + 1x NVIDIA L40S + 1x unknown GPU"


def test_unreachable_and_missing_rows():
    row = fleet_preflight.preflight_row("lab-03", {"platform": "runpod", "storage": {
        "unreachable": True, "changed": False, "msg": "Task failed: Failed to connect to the host via ssh: timed out"}})
    assert row["verdict"] == "UNREACHABLE" and "timed out" in row["top_finding"]
    assert row["top_finding"] == "unreachable: Failed to connect to the host via ssh: timed out"
    assert row["platform"] == "runpod" and row["findings"] == []
    assert fleet_table.no_result_row("lab-04", "-")["verdict"] == "NO_RESULT"


def test_a_host_that_failed_before_the_probe_has_no_result():
    row = fleet_preflight.preflight_row("lab-04", {"platform": "autodl", "storage": None, "gpu": None, "env": None})
    assert row["verdict"] == "NO_RESULT" and row["platform"] == "autodl"
    assert fleet_table.failing_hosts([row]) == ["lab-04"]


def test_missing_interpreter_is_a_finding_that_names_the_interpreter_and_the_profile():
    failed = {"failed": True, "rc": 127, "msg": "The module failed to execute correctly.",
              "module_stderr": "/bin/sh: 1: /root/miniconda3/bin/nope: not found\n", "changed": False}
    row = fleet_preflight.preflight_row("lab-01", dict(record([]), storage=failed, gpu=None, env=None,
                                                       interpreter="/root/miniconda3/bin/nope"))
    assert row["verdict"] == "FAIL" and [f["code"] for f in row["findings"]] == ["interpreter_missing"]
    assert row["top_finding"].startswith("interpreter_missing: the profile interpreter /root/miniconda3/bin/nope")
    assert "(profile autodl)" in row["findings"][0]["action"]
    assert row["data_bytes_pct"] is None and row["gpus"] == "-"


@pytest.mark.parametrize("failed_probe", ["gpu", "env"])
def test_a_later_probe_that_failed_is_a_probe_failed_finding(failed_probe):
    host = record([FAIL])
    host[failed_probe] = {"failed": True, "msg": "Unsupported parameters for (gpu_health) module: bogus"}
    if failed_probe == "gpu":
        host["env"] = None  # the block stopped at the failed task
    row = fleet_preflight.preflight_row("lab-01", host)
    assert row["verdict"] == "FAIL" and [f["code"] for f in row["findings"]] == ["probe_failed"]
    assert row["top_finding"] == "probe_failed: Unsupported parameters for (gpu_health) module: bogus"
    assert "run preflight again" in row["findings"][0]["action"]
    assert row["data_bytes_pct"] == 12  # the storage probe did answer


def test_a_skipped_gpu_probe_after_an_unreachable_storage_probe_is_unreachable():
    skipped = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}
    row = fleet_preflight.preflight_row("lab-03", {"platform": "autodl", "storage": {"unreachable": True, "msg": ""},
                                                   "gpu": skipped, "env": skipped})
    assert row["verdict"] == "UNREACHABLE" and row["top_finding"] == "unreachable: no answer"


def test_new_preflight_codes_reach_the_row():
    """torch_arch_unsupported (env_audit) makes a box with a healthy GPU FAIL; durable_not_separate (inode_check) and
    torch_arch_unchecked are listed at their levels."""
    arch = {"level": "FAIL", "code": "torch_arch_unsupported", "action": "install torch 2.7",
            "message": "torch 2.5.1+cu124 has no kernels for GPU 0 (NVIDIA GeForce RTX 5090, compute capability 12.0"}
    unchecked = {"level": "INFO", "code": "torch_arch_unchecked", "message": "GPU 1 not checked", "action": "look"}
    durable = {"level": "WARN", "code": "durable_not_separate", "message": "the durable tier /workspace ...",
               "action": "attach a Network Volume", "path": "/workspace"}
    row = fleet_preflight.preflight_row("lab-05", record([INFO], gpus=[{"name": "NVIDIA GeForce RTX 5090"}],
                                                         storage_findings=[durable], env_findings=[unchecked, arch]))
    assert row["verdict"] == "FAIL" and row["top_finding"].startswith("torch_arch_unsupported: torch 2.5.1+cu124")
    assert [f["code"] for f in row["findings"]] == ["torch_arch_unsupported", "durable_not_separate", "mig_enabled",
                                                    "torch_arch_unchecked"]


def probe_record(result, **extra):
    """A host whose preflight_probe task registered ``result``."""
    base = record([])
    return dict(dict((key, base[key]) for key in ("platform", "data_dir", "durable_dir", "interpreter")),
                probe=result, **extra)


def test_one_probe_result_gives_the_row_of_the_three():
    three = record([FAIL], gpus=[{"name": "NVIDIA H100"}] * 8, storage_findings=[WARN], env_findings=[INFO])
    probe = {"changed": False, "status": "FAIL", "inode_check": three["storage"], "gpu_health": three["gpu"],
             "env_audit": three["env"], "seconds": {"total": 1.0}}
    assert fleet_preflight.preflight_row("lab-01", probe_record(probe)) == fleet_preflight.preflight_row("lab-01", three)


def test_a_probe_that_failed_or_timed_out_is_named_with_its_message():
    failed = {"failed": True, "changed": False, "status": "FAIL", "msg": "gpu: kernel_log /x is a directory, not a "
              "regular file", "inode_check": record([])["storage"], "gpu_health": None, "env_audit": None}
    row = fleet_preflight.preflight_row("lab-01", probe_record(failed))
    assert row["verdict"] == "FAIL" and row["top_finding"] == "probe_failed: gpu: kernel_log /x is a directory, not " \
        "a regular file"
    assert row["data_bytes_pct"] == 12  # the storage result that came back is still shown
    timeout = {"failed": True, "changed": False, "msg": "The command action failed to execute in the expected time "
               "frame (60) and was terminated", "timedout": {"frame": 60}}
    row = fleet_preflight.preflight_row("lab-01", probe_record(timeout))
    assert row["top_finding"].startswith("probe_timeout: preflight_probe did not answer in time"), row
    unreachable = {"unreachable": True, "changed": False, "msg": "Task failed: ssh: connect to host"}
    assert fleet_preflight.preflight_row("lab-01", probe_record(unreachable))["verdict"] == "UNREACHABLE"
    assert fleet_preflight.preflight_row("lab-01", probe_record(None))["verdict"] == "NO_RESULT"


def test_a_probe_result_without_a_check_is_malformed_not_a_pass():
    row = fleet_preflight.preflight_row("lab-01", probe_record({"changed": False, "status": "PASS",
                                                                "inode_check": record([])["storage"],
                                                                "gpu_health": "oops"}))
    assert row["verdict"] == "FAIL" and [f["code"] for f in row["findings"]] == ["malformed_result"]
    assert "the result of preflight_probe is malformed: it holds no gpu_health or env_audit result" in \
        row["top_finding"]
    assert row["gpus"] == "-" and row["data_bytes_pct"] == 12


def test_environment_only_box_passes_and_says_so_in_the_gpus_column():
    absent = {"level": "INFO", "code": "no_gpu_environment_only", "message": "no GPU: environment-only mode (...)",
              "action": "nothing", "error": "no_driver"}
    rec = record([absent])
    rec["gpu"]["environment_only"] = True
    row = fleet_preflight.preflight_row("lab-01", rec)
    assert row["verdict"] == "PASS" and row["gpus"] == "no GPU: environment-only mode"
    assert fleet_table.failing_hosts([row]) == []
    # a gpu_health result without the key (or false) is the column it always was
    assert fleet_preflight.preflight_row("lab-01", record([absent]))["gpus"] == "-"
