"""preflight.yml on localhost through the GPU emulator: the GPU names reach env_audit's torch arch check."""

from __future__ import annotations

import json
import os
import sys

from pbhelpers import REPO, run_playbook

GPU_BIN = REPO / "tests/lab/gpu/bin"
SCENARIOS = REPO / "tests/lab/gpu/scenarios"
sys.path.insert(0, str(REPO / "tests/lab/gpu/tools"))
from fake_torch import NO_HOPPER, write_fake_torch  # noqa: E402  (the stand-in torch, shared with the unit tests)


def preflight(local_inventory, tmp_path, scenario, site):
    report = tmp_path / "preflight.json"
    proc = run_playbook(REPO / "playbooks/preflight.yml", local_inventory, "-e", "preflight_report_path=%s" % report,
                        "-e", "preflight_sample_seconds=0", "-e", "preflight_fail_run=false",
                        PATH="%s:%s" % (GPU_BIN, os.environ["PATH"]), FAKE_GPU_SCENARIO=str(SCENARIOS / scenario),
                        PYTHONPATH=str(site))
    return proc, json.loads(report.read_text())["hosts"][0]


def test_a_torch_build_without_kernels_for_the_gpu_fails_the_box(local_inventory, tmp_path):
    proc, row = preflight(local_inventory, tmp_path, "h100-idle", write_fake_torch(tmp_path / "site", NO_HOPPER))
    assert proc.returncode == 0, proc.stdout + proc.stderr  # preflight_fail_run=false: the report says it
    arch = [f for f in row["findings"] if f["code"] == "torch_arch_unsupported"]
    assert row["verdict"] == "FAIL" and len(arch) == 1, row["findings"]
    assert arch[0]["message"].startswith("torch 2.0.1+cu118 has no kernels for GPU 0 (NVIDIA H100 80GB HBM3, "
                                         "compute capability 9.0, sm_90, from NVIDIA's table)")
    assert "sm_90" in arch[0]["action"]


def test_a_torch_build_with_kernels_for_the_gpu_is_no_arch_finding(local_inventory, tmp_path):
    proc, row = preflight(local_inventory, tmp_path, "h100-idle", write_fake_torch(tmp_path / "site", NO_HOPPER + " sm_90"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not [f for f in row["findings"] if f["code"].startswith("torch_arch")], row["findings"]
