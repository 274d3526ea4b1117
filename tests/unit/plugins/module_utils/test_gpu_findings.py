# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_findings decisions on real captures (tests/fixtures/nvidia/).

Where a decision has no real capture that triggers it (a PCIe downshift under load, a crushed clock), the test
takes a real parsed sample and edits ONE value; each such edit says so in a comment.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import findings
from ansible_collections.remote_gpu.trainer.plugins.module_utils import gpu_findings as gf
from ansible_collections.remote_gpu.trainer.plugins.module_utils import gpu_query as gq
from ansible_collections.remote_gpu.trainer.plugins.module_utils import nvidia_smi as smi
from ansible_collections.remote_gpu.trainer.plugins.module_utils import nvidia_smi_errors as smi_errors
from ansible_collections.remote_gpu.trainer.plugins.module_utils import xid

NVIDIA = Path(__file__).resolve().parents[3] / "fixtures" / "nvidia"
HINT = "shutdown (power off in the AutoDL console)"
H100_8X = "q-text/q__8x-nvidia-h100-80gb-hbm3__535.161.08__gpud-hwslowdown-powerbrake.txt"
# header names of the all-fields captures for the sample fields (the alias clocks.sm is clocks.current.sm there)
HEADER_ALIASES = {"clocks.sm": ("clocks.current.sm",),
                  "clocks_throttle_reasons.active": ("clocks_throttle_reasons.active", "clocks_event_reasons.active")}


def read(rel):
    return (NVIDIA / rel).read_text(encoding="utf-8")


def gpus_of(rel):
    return smi.parse_full(read(rel))["gpus"]


def sample_rows(rel):
    """Project a real all-fields --query-gpu capture (with header) onto gpu_health's sample fields."""
    lines = read(rel).splitlines()
    header = [cell.split(" [")[0] for cell in lines[0].split(", ")]
    rows = []
    for line in lines[1:]:
        cells = line.split(", ")
        picked = []
        for field, _key, _convert in smi.SAMPLE_FIELDS:
            name = next(n for n in HEADER_ALIASES.get(field, (field,)) if n in header)
            picked.append(cells[header.index(name)])
        rows.append(", ".join(picked))
    return gq.parse_rows("\n".join(rows), smi.SAMPLE_FIELDS)


def run(gpus, samples=(), events=(), extra=(), **options):
    options.setdefault("platform_stop_hint", HINT)
    return gf.evaluate(gpus, samples, events, options, list(extra))


def codes(result, gpu="any"):
    return sorted(set(f["code"] for f in result["findings"] if gpu == "any" or f["gpu"] == gpu))


def finding(result, code, gpu="any"):
    return [f for f in result["findings"] if f["code"] == code and (gpu == "any" or f["gpu"] == gpu)][0]


# ----------------------------------------------------------------------------------------- acceptance captures

def test_hw_slowdown_power_brake_fails_every_affected_gpu():
    result = run(gpus_of(H100_8X), expected_count=8)
    assert result["status"] == "FAIL"
    for index in range(8):
        found = finding(result, "throttle_active", index)
        assert found["level"] == "FAIL"
        assert "GPU %d (NVIDIA H100 80GB HBM3" % index in found["message"]
        assert "HW slowdown" in found["message"] and "HW power brake slowdown" in found["message"]
        assert HINT in found["message"] and HINT in found["action"]
        assert result["gpu_verdicts"][index] == "FAIL"


def test_a10_remap_pending_is_caught_on_gpu_0():
    result = run(gpus_of("q-text/q__1x-nvidia-a10__535.129.03__gpud-remap-pending.txt"))
    found = finding(result, "remapped_rows_pending")
    assert (found["level"], found["gpu"]) == ("FAIL", 0)
    assert "NVIDIA A10" in found["message"] and HINT in found["message"]
    assert result["status"] == "FAIL"


def test_reconstructed_remap_pending_xml():
    result = run(gpus_of("xml/RECONSTRUCTED__q-x__nvidia-rtx-4000-sff-ada-generation__595.84__remap-pending-EDITED.xml"))
    assert finding(result, "remapped_rows_pending", 0)["level"] == "FAIL"
    assert "remapped_rows_failure" not in codes(result)


def test_rtx3090_sw_power_cap_is_info_not_fail():
    result = run(gpus_of("xml/q-x__nvidia-geforce-rtx-3090__590.44.01__telegraf.xml"))
    found = finding(result, "power_capped", 0)
    assert found["level"] == "INFO"
    assert "idle" in found["message"]
    assert result["status"] == "PASS"
    assert "throttle_active" not in codes(result)


@pytest.mark.parametrize("rel", [
    "xml/q-x__nvidia-a100-sxm4-80gb__535.54.03__telegraf.xml",
    "xml/q-x__nvidia-a100-sxm4-40gb__510.47.03__netdata.xml",
    "q-text/q__nvidia-h100-mig__590.48.01__linux-x86_64.load.txt",
    "q-text/q__nvidia-h200-mig__590.48.01__linux-x86_64.idle.txt",
])
def test_mig_captures_report_mig_enabled(rel):
    result = run(gpus_of(rel))
    assert finding(result, "mig_enabled", 0)["level"] == "INFO"
    assert result["status"] == "PASS"


@pytest.mark.parametrize("rel", [
    "q-text/q__nvidia-h100-80gb-hbm3__590.48.01__linux-x86_64.load.txt",
    "q-text/q__nvidia-h100-80gb-hbm3__590.48.01__linux-x86_64.idle.txt",
    "q-text/q__8x-nvidia-h100-80gb-hbm3__565.57.01__thamada.txt",
    "q-text/q__1x-nvidia-l40s__550.127.05__thamada.txt",
    "q-text/q__nvidia-l40s__595.80__linux-x86_64.load.txt",
    "q-text/q__nvidia-geforce-rtx-2080-super__595.71.05__linux-x86_64.load.txt",
    "q-text/q__nvidia-geforce-rtx-2080-super__610.57.04__linux-x86_64.idle.txt",
    "xml/q-x__2x-nvidia-geforce-rtx-2080__590.44.01__telegraf.xml",
])
def test_healthy_captures_do_not_fail(rel):
    result = run(gpus_of(rel))
    assert result["status"] != "FAIL", result["findings"]


@pytest.mark.parametrize("load", ["idle", "load"])
def test_healthy_h100_with_real_samples_passes(load):
    gpus = gpus_of("q-text/q__nvidia-h100-80gb-hbm3__590.48.01__linux-x86_64.%s.txt" % load)
    samples = sample_rows("query-gpu/query-gpu-all-fields__nvidia-h100-80gb-hbm3__590.48.01__linux-x86_64.%s.csv"
                          % load)
    result = run(gpus, samples, expected_count=1, expected_name="H100", min_memory_mib=80000)
    assert result["status"] == "PASS"
    assert codes(result) == []


def test_idle_pcie_downshift_is_not_flagged():
    # real idle sample: PCIe Gen1 of max Gen3 (the link downshifts at idle)
    gpus = gpus_of("q-text/q__nvidia-geforce-rtx-2080-super__595.71.05__linux-x86_64.idle.txt")
    samples = sample_rows("query-gpu/query-gpu-all-fields__nvidia-geforce-rtx-2080-super__595.71.05__linux-x86_64"
                          ".idle.csv")
    assert (samples[0]["pcie_gen_current"], samples[0]["pcie_gen_max"]) == (1, 3)
    assert "pcie_link_degraded" not in codes(run(gpus, samples))


# ----------------------------------------------------------------------------------------- decisions on edited samples

def h100_load():
    gpus = gpus_of("q-text/q__nvidia-h100-80gb-hbm3__590.48.01__linux-x86_64.load.txt")
    samples = sample_rows("query-gpu/query-gpu-all-fields__nvidia-h100-80gb-hbm3__590.48.01__linux-x86_64.load.csv")
    return gpus, samples


def test_pcie_link_degraded_under_load_only():
    gpus, samples = h100_load()
    edited = copy.deepcopy(samples[0])
    edited["pcie_gen_current"] = 3  # EDITED: the real sample runs at Gen5 of Gen5
    result = run(gpus, [samples[0], edited])
    found = finding(result, "pcie_link_degraded", 0)
    assert found["level"] == "WARN" and "Gen3 x16 (max Gen5 x16)" in found["message"]
    idle = copy.deepcopy(edited)
    idle["utilization_gpu_pct"] = 0  # EDITED: same downshift while idle
    idle["throttle_reasons"] = ["gpu_idle"]
    assert "pcie_link_degraded" not in codes(run(gpus, [idle]))


def test_current_equal_to_max_is_not_degraded():
    gpus, samples = h100_load()
    assert "pcie_link_degraded" not in codes(run(gpus, samples))


def test_clock_crushed_warn_then_fail_when_hot():
    gpus, samples = h100_load()
    crushed = copy.deepcopy(samples[0])
    crushed["sm_clock_mhz"] = 1000  # EDITED: real sample is 1980 of 1980 MHz at 100 % utilisation
    result = run(gpus, [crushed])
    assert finding(result, "clock_crushed", 0)["level"] == "WARN"
    assert "1000 MHz of 1980 MHz" in finding(result, "clock_crushed", 0)["message"]
    hot = copy.deepcopy(crushed)
    hot["temperature_c"] = 88  # EDITED: and hot
    result = run(gpus, [hot])
    assert finding(result, "clock_crushed", 0)["level"] == "FAIL"
    assert finding(result, "running_hot", 0)["level"] == "WARN"
    assert result["status"] == "FAIL"


def test_clock_floor_option():
    gpus, samples = h100_load()
    crushed = copy.deepcopy(samples[0])
    crushed["sm_clock_mhz"] = 1500  # EDITED: 76 % of max
    assert "clock_crushed" not in codes(run(gpus, [crushed]))
    assert "clock_crushed" in codes(run(gpus, [crushed], sm_clock_floor_pct=80))


def test_running_hot_threshold_option():
    gpus = gpus_of("q-text/q__nvidia-l40s__595.80__linux-x86_64.idle.txt")  # 64 C in the real capture
    assert "running_hot" not in codes(run(gpus))
    found = finding(run(gpus, temp_hot_c=60), "running_hot", 0)
    assert found["level"] == "WARN" and "64 C" in found["message"]


def test_sw_power_cap_under_load_is_info():
    gpus, samples = h100_load()
    capped = copy.deepcopy(samples[0])
    capped["throttle_reasons"] = ["sw_power_cap"]  # EDITED: bitmask 0x4 under load
    found = finding(run(gpus, [capped]), "power_capped", 0)
    assert found["level"] == "INFO" and "under load" in found["message"]


def test_ecc_and_retired_pages_and_remap_failure():
    gpu = copy.deepcopy(gpus_of("q-text/q__8x-tesla-v100__550.127.05__thamada-gls.txt")[2])
    gpu["ecc_uncorrectable_volatile"] = 2  # EDITED
    gpu["retired_pages_pending"] = True  # EDITED
    gpu["remapped_rows_failure"] = True  # EDITED
    result = run([gpu])
    for code in ("ecc_uncorrectable_volatile", "retired_pages_pending", "remapped_rows_failure"):
        assert finding(result, code, 2)["level"] == "FAIL"


# ----------------------------------------------------------------------------------------- identity

def test_count_model_memory():
    gpus = gpus_of(H100_8X)
    result = run(gpus, expected_count=4, expected_name="A100|A800", min_memory_mib=96000)
    count = finding(result, "gpu_count_mismatch")
    assert count["gpu"] is None and "8 GPUs, expected 4" in count["message"] and HINT in count["message"]
    assert len([f for f in result["findings"] if f["code"] == "gpu_model_mismatch"]) == 8
    assert "81559 MiB" in finding(result, "gpu_memory_below_min", 3)["message"]


def test_identity_matches():
    result = run(gpus_of(H100_8X), expected_count=8, expected_name="h100", min_memory_mib=80000)
    assert not set(codes(result)) & {"gpu_count_mismatch", "gpu_model_mismatch", "gpu_memory_below_min"}


def test_persistence_off_is_info():
    result = run(gpus_of("xml/q-x__nvidia-a100-sxm4-80gb__535.54.03__telegraf.xml"))
    assert finding(result, "persistence_off", 0)["level"] == "INFO"


# ----------------------------------------------------------------------------------------- Xid

def test_xids_are_attached_to_the_gpu_by_pci():
    # Real coincidence: the Xid 13/109 log names PCI 0000:cb:00, GPU 6 of the 8x H100 capture.
    events = xid.parse_kernel_log(read("xid-logs/dmesg-ctime__xid-13-109__gpud-pr46.log"))
    healthy = [dict(g, throttle_reasons=[]) for g in gpus_of(H100_8X)]  # EDITED: drop the throttle reasons
    result = run(healthy, events=events)
    fatal = finding(result, "xid_fatal", 6)
    assert fatal["level"] == "FAIL" and "Xid 109" in fatal["message"] and HINT in fatal["message"]
    app = finding(result, "xid_app_fault", 6)
    assert app["level"] == "WARN" and "3 time(s)" in app["message"]
    assert result["gpu_verdicts"][6] == "FAIL" and result["gpu_verdicts"][0] == "PASS"


def test_xid_on_unknown_pci_is_host_level_fail():
    events = xid.parse_kernel_log(read("xid-logs/syslog__xid-48-dbe__TRUNCATED__gpu-operator-1146.log"))
    result = run(gpus_of("q-text/q__nvidia-h100-80gb-hbm3__590.48.01__linux-x86_64.idle.txt"), events=events)
    found = finding(result, "xid_fatal")
    assert found["gpu"] is None and "0000:07:00" in found["message"]
    assert result["status"] == "FAIL"


def test_xid_info_and_caused_by():
    events = xid.parse_kernel_log(read("xid-logs/dmesg__xid-63-row-remapper__stas00-ml-engineering-debug-md.log"))
    result = run(gpus_of("q-text/q__nvidia-h100-80gb-hbm3__590.48.01__linux-x86_64.idle.txt"), events=events)
    assert finding(result, "xid_info")["level"] == "INFO"
    events = xid.parse_kernel_log(read(
        "xid-logs/journalctl-k-short__xid-45-caused-by-previous-xid-149-145__590.48.01__open-gpu-kernel-modules-1150.log"))
    result = run([], events=events)
    assert any("caused by previous Xid 149" in f["message"] for f in result["findings"])


def test_fallen_off_bus_without_xid_fails():
    events = xid.parse_kernel_log(read(
        "xid-logs/dmesg__fallen-off-bus-multiline-no-xid__570.158.01__nvsentinel-155.log"))
    result = run([], events=events)
    assert finding(result, "xid_fatal")["level"] == "FAIL"


# ----------------------------------------------------------------------------------------- probe findings, verdicts

def test_probe_findings():
    error = smi_errors.classify_error(read("errors/no-driver__nvidia-smi-has-failed__exit9.txt"), 9)
    options = {"platform_stop_hint": HINT}
    unavailable = gf.driver_unavailable(error, options)
    assert (unavailable["level"], unavailable["code"], unavailable["error"]) == ("FAIL", "driver_unavailable", "no_driver")
    assert "exit 9" in unavailable["message"] and HINT in unavailable["message"]
    timeout = gf.smi_timeout(["nvidia-smi", "-q", "-x"], 20, options)
    assert timeout["code"] == "nvidia_smi_timeout" and timeout["level"] == "FAIL"
    log = gf.kernel_log_unreadable("dmesg: Operation not permitted", options)
    assert log["level"] == "WARN" and "rests only on" in log["message"]
    result = run([], extra=[log])
    assert result["status"] == "WARN"


def test_default_stop_hint():
    result = gf.evaluate(gpus_of("q-text/q__1x-nvidia-a10__535.129.03__gpud-remap-pending.txt"))
    assert gf.DEFAULT_STOP_HINT in finding(result, "remapped_rows_pending")["message"]


def test_worst_and_sorting():
    assert findings.verdict([]) == "PASS"
    assert findings.verdict(["INFO"]) == "PASS"
    assert findings.verdict(["INFO", "WARN"]) == "WARN"
    assert findings.verdict(["WARN", "FAIL", "INFO"]) == "FAIL"
    result = run(gpus_of(H100_8X), extra=[gf.kernel_log_unreadable("x", {})])
    levels = [f["level"] for f in result["findings"]]
    assert levels == sorted(levels, key=lambda level: -findings.rank(level))
    assert findings.worst_finding(result["findings"])["level"] == "FAIL"
