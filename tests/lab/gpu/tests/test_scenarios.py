"""Scenario directories: reproducible from the corpus, honest about edits, well-formed expect.yml."""
from __future__ import annotations

import os
import sys

import pytest
import yaml

from gpu_emu_helpers import FIX, GPU_DIR, SCENARIOS, fixture_text, run_tool

sys.path.insert(0, os.path.join(GPU_DIR, "tools"))
import build_scenarios  # noqa: E402

LEVEL = {
    "driver_unavailable": "FAIL", "nvidia_smi_timeout": "FAIL", "gpu_count_mismatch": "FAIL",
    "gpu_model_mismatch": "FAIL", "gpu_memory_below_min": "FAIL", "throttle_active": "FAIL",
    "power_capped": "INFO", "clock_crushed": "WARN", "running_hot": "WARN", "ecc_uncorrectable_volatile": "FAIL",
    "retired_pages_pending": "FAIL", "remapped_rows_pending": "FAIL", "remapped_rows_failure": "FAIL",
    "pcie_link_degraded": "WARN", "xid_fatal": "FAIL", "xid_app_fault": "WARN", "xid_info": "INFO",
    "kernel_log_unreadable": "WARN", "mig_enabled": "INFO", "persistence_off": "INFO",
}
RANK = {"PASS": 0, "INFO": 0, "WARN": 1, "FAIL": 2}
NAMES = sorted(os.listdir(SCENARIOS))
SPECS = {s["name"]: s for s in build_scenarios.SCENARIOS}


def _expect(name):
    with open(os.path.join(SCENARIOS, name, "expect.yml"), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def test_scenario_set_is_the_declared_one():
    assert NAMES == sorted(SPECS)


@pytest.mark.parametrize("name", NAMES)
def test_scenario_is_reproducible(name):
    """Stored files == what tools/build_scenarios.py makes from the corpus (so every edit is declared)."""
    want = build_scenarios.scenario_files(SPECS[name])
    d = os.path.join(SCENARIOS, name)
    assert sorted(os.listdir(d)) == sorted(want)
    for fname, content in want.items():
        with open(os.path.join(d, fname), encoding="utf-8", newline="") as fh:
            assert fh.read() == content, fname


@pytest.mark.parametrize("name", NAMES)
def test_expect_yml(name):
    e = _expect(name)
    assert set(e) <= {"description", "source", "edited", "verdict", "codes", "gpu_codes", "absent", "options"}
    assert {"description", "source", "edited", "verdict", "codes"} <= set(e)
    assert isinstance(e["description"], str) and "\n" not in e["description"]
    assert e["verdict"] in ("PASS", "WARN", "FAIL")
    for code in list(e["codes"]) + list(e.get("absent") or []):
        assert code in LEVEL, code
    assert not set(e["codes"]) & set(e.get("absent") or [])
    for idx, codes in (e.get("gpu_codes") or {}).items():
        assert isinstance(idx, int) and set(codes) <= set(e["codes"])
    worst = max([RANK[LEVEL[c]] for c in e["codes"]] + [0])
    assert ("PASS", "WARN", "FAIL")[worst] == e["verdict"]
    assert isinstance(e.get("options", {}), dict)
    for src in e["source"]:
        assert os.path.exists(os.path.join(FIX, src)), src


@pytest.mark.parametrize("name", NAMES)
def test_edit_convention(name):
    """Edited <=> name ends in -edited <=> expect.yml 'edited' is a sentence; unedited files are byte copies."""
    e = _expect(name)
    spec = SPECS[name]
    assert name.endswith("-edited") == bool(e["edited"])
    d = os.path.join(SCENARIOS, name)
    for fname, src in (("nvidia-smi-q.txt", spec.get("capture")), ("nvidia-smi-q.xml", spec.get("capture")),
                       ("kern.log", spec.get("kern_log"))):
        path = os.path.join(d, fname)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8", newline="") as fh:
            stored = fh.read()
        if e["edited"] and fname.startswith("nvidia-smi-q"):
            assert stored != fixture_text(src)
            if fname.endswith(".xml"):
                assert "<!-- EDITED" in stored.split("\n", 2)[1]
        else:
            assert stored == fixture_text(src), fname


@pytest.mark.parametrize("name", [n for n in NAMES if os.path.exists(os.path.join(SCENARIOS, n, "nvidia-smi-q.txt"))
                                  or os.path.exists(os.path.join(SCENARIOS, n, "nvidia-smi-q.xml"))])
def test_every_capture_scenario_answers(name):
    if os.path.exists(os.path.join(SCENARIOS, name, "MARKER-hang")):
        pytest.skip("hangs by design (test_behaviour.test_hang_runs_until_killed)")
    for args in (["-q"], ["-q", "-x"], ["-L"], [], ["-q", "-d", "PERFORMANCE"], ["dmon", "-c", "1"],
                 ["--query-gpu=index,name,temperature.gpu,clocks_throttle_reasons.active", "--format=csv"],
                 ["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]):
        r = run_tool("nvidia-smi", args, scenario=name)
        assert r.returncode == 0, (args, r.stderr)
        assert not r.stderr
        assert r.stdout or args[0].startswith("--query-compute-apps")  # no processes + noheader: empty


def _q(name, fields):
    r = run_tool("nvidia-smi", ["--query-gpu=" + fields, "--format=csv,noheader,nounits"], scenario=name)
    assert r.returncode == 0, r.stderr
    return [row.split(", ") for row in r.stdout.splitlines()]


def test_edited_values_show_through_every_view():
    assert _q("h100-ecc-uncorrectable-edited", "ecc.errors.uncorrected.volatile.total,"
              "ecc.errors.uncorrected.aggregate.dram") == [["2", "2"]]
    assert _q("h100-pcie-degraded-edited", "pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,"
              "pcie.link.width.max,utilization.gpu") == [["4", "5", "8", "16", "100"]]
    rows = _q("8xh100-gpu-missing-edited", "count,index")
    assert rows == [["7", str(i)] for i in range(7)]
    table = run_tool("nvidia-smi", [], scenario="h100-ecc-uncorrectable-edited").stdout
    assert "00000000:00:09.0 Off |                    2 |" in table


def test_fault_scenarios_show_their_fault():
    assert all(r == ["Active", "Active", "Not Active"] for r in
               _q("8xh100-hwslowdown", "clocks_event_reasons.hw_slowdown,"
                  "clocks_event_reasons.hw_power_brake_slowdown,clocks_event_reasons.sw_thermal_slowdown"))
    assert _q("a10-remap-pending", "remapped_rows.pending,remapped_rows.uncorrectable") == [["Yes", "4"]]
    assert _q("h100-mig", "mig.mode.current,utilization.gpu") == [["Enabled", "[N/A]"]]
    assert _q("l40s", "persistence_mode") == [["Disabled"]]
