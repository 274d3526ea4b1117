# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""nvidia_smi* parsers against the real captures in tests/fixtures/nvidia/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import gpu_query as gq
from ansible_collections.remote_gpu.trainer.plugins.module_utils import nvidia_smi as smi
from ansible_collections.remote_gpu.trainer.plugins.module_utils import nvidia_smi_errors as smi_errors
from ansible_collections.remote_gpu.trainer.plugins.module_utils import nvidia_smi_gpu as smi_gpu
from ansible_collections.remote_gpu.trainer.plugins.module_utils import nvidia_smi_text as smi_text
from ansible_collections.remote_gpu.trainer.plugins.module_utils import nvidia_smi_xml as smi_xml

NVIDIA = Path(__file__).resolve().parents[3] / "fixtures" / "nvidia"
MANIFEST = dict((entry["file"], entry) for entry in json.loads((NVIDIA / "manifest.json").read_text()))
XML_FILES = sorted(p.name for p in (NVIDIA / "xml").glob("*.xml"))
TEXT_FILES = sorted(p.name for p in (NVIDIA / "q-text").glob("*.txt"))
QUERY_FILES = sorted(p.name for p in (NVIDIA / "query-gpu").glob("*.csv"))


def read(rel):
    return (NVIDIA / rel).read_text(encoding="utf-8")


def xml(name):
    return smi_xml.parse_xml(read("xml/" + name))


def text(name):
    return smi_text.parse_text(read("q-text/" + name))


def query_fields(rel):
    """Field names in the order requested: from the manifest's command, else from the capture's header line."""
    command = MANIFEST[rel]["command"]
    fields = command.split("--query-gpu=", 1)[1].split()[0].split(",")
    if fields[0].startswith("<"):  # the manifest abbreviates long field lists
        fields = [cell.split(" [")[0] for cell in read(rel).splitlines()[0].split(", ")]
    return fields


# --------------------------------------------------------------------------------------------- every capture parses

@pytest.mark.parametrize("name", XML_FILES)
def test_every_xml_capture_parses(name):
    result = xml(name)
    assert result["gpus"], name
    for index, gpu in enumerate(result["gpus"]):
        assert set(gpu) == set(smi_gpu.GPU_KEYS)
        assert gpu["index"] == index
        assert gpu["name"]
        assert gpu["pci"] and len(gpu["pci"]) == 10
        assert gpu["throttle_reasons"] is None or set(gpu["throttle_reasons"]) <= set(smi_gpu.REASONS)


@pytest.mark.parametrize("name", TEXT_FILES)
def test_every_text_capture_parses(name):
    result = text(name)
    assert result["gpus"], name
    assert result["driver_version"] and "[" not in result["driver_version"]
    for gpu in result["gpus"]:
        assert set(gpu) == set(smi_gpu.GPU_KEYS)
        assert gpu["name"] and gpu["pci"]


@pytest.mark.parametrize("name", [n for n in TEXT_FILES if "TRUNCATED" not in n])
def test_text_gpu_count_matches_attached_gpus(name):
    raw = read("q-text/" + name)
    attached = int([line for line in raw.splitlines() if line.startswith("Attached GPUs")][0].split(":")[1])
    assert len(text(name)["gpus"]) == attached


def test_truncated_invalid_capture_gives_partial_result():
    # gpud's deliberately corrupted sample: labels prefixed with "Invalid", cut off after the reasons block.
    result = text("q__1x-nvidia-h100-80gb-hbm3__535.183.01__gpud-TRUNCATED-invalid.txt")
    assert result["driver_version"] == "535.183.01"
    assert len(result["gpus"]) == 1
    gpu = result["gpus"][0]
    assert gpu["name"] == "NVIDIA H100 80GB HBM3"
    assert gpu["memory_total_mib"] is None  # cut off before FB Memory Usage
    assert "hw_slowdown" not in gpu["throttle_reasons"]  # the "Invalid HW ..." labels are not recognised


# --------------------------------------------------------------------------------------------- specific values: text

def test_8x_h100_hw_slowdown_power_brake():
    result = text("q__8x-nvidia-h100-80gb-hbm3__535.161.08__gpud-hwslowdown-powerbrake.txt")
    assert (result["driver_version"], result["cuda_version"]) == ("535.161.08", "12.2")
    gpus = result["gpus"]
    assert len(gpus) == 8
    assert [g["pci"] for g in gpus][:3] == ["0000:19:00", "0000:3b:00", "0000:4c:00"]
    first = gpus[0]
    assert first["pci_bus_id"] == "00000000:19:00.0"
    assert first["uuid"] == "GPU-ee7954ec-da95-fd7a-ddfd-c6b32cc2f8aa"
    assert (first["memory_total_mib"], first["memory_used_mib"]) == (81559, 0)
    assert (first["sm_clock_mhz"], first["sm_clock_max_mhz"], first["temperature_c"]) == (86, 1980, 29)
    assert (first["power_draw_w"], first["power_limit_w"]) == (67.74, 700.0)
    assert (first["pcie_gen_current"], first["pcie_gen_max"], first["pcie_width_current"], first["pcie_width_max"]) \
        == (5, 5, 16, 16)
    assert first["persistence_mode"] is True and first["mig_mode"] is False
    assert (first["ecc_uncorrectable_volatile"], first["ecc_uncorrectable_aggregate"]) == (0, 0)
    assert (first["remapped_rows_pending"], first["remapped_rows_failure"]) == (False, False)
    for gpu in gpus:  # every GPU of this capture has HW Slowdown + HW Power Brake Slowdown active
        assert set(gpu["throttle_reasons"]) == {"hw_slowdown", "hw_power_brake_slowdown"}


def test_a10_remap_pending_text():
    gpu = text("q__1x-nvidia-a10__535.129.03__gpud-remap-pending.txt")["gpus"][0]
    assert gpu["name"] == "NVIDIA A10"
    assert gpu["remapped_rows_pending"] is True
    assert gpu["remapped_rows_failure"] is False


def test_610_deprecated_driver_line_and_kmd_version():
    result = text("q__nvidia-geforce-rtx-2080-super__610.57.04__linux-x86_64.load.txt")
    assert (result["driver_version"], result["cuda_version"]) == ("610.57.04", "13.3")
    gpu = result["gpus"][0]
    assert (gpu["power_draw_w"], gpu["power_limit_w"]) == (97.75, 250.0)
    assert gpu["sm_clock_mhz"] == 2070 and gpu["utilization_gpu_pct"] == 8


def test_55_wide_labels_590_h100_load():
    gpu = text("q__nvidia-h100-80gb-hbm3__590.48.01__linux-x86_64.load.txt")["gpus"][0]
    assert (gpu["sm_clock_mhz"], gpu["utilization_gpu_pct"], gpu["throttle_reasons"]) == (1980, 100, [])


def test_old_spelling_and_na_values_470():
    gpu = text("q__1x-geforce-gtx-680__470.256.02__thamada-gls.txt")["gpus"][0]
    assert gpu["throttle_reasons"] is None  # "Clocks Throttle Reasons : N/A"
    assert gpu["power_draw_w"] is None and gpu["utilization_gpu_pct"] is None


def test_mig_text_captures():
    for name in ("q__nvidia-h100-mig__590.48.01__linux-x86_64.load.txt",
                 "q__nvidia-h200-mig__590.48.01__linux-x86_64.idle.txt"):
        gpu = text(name)["gpus"][0]
        assert gpu["mig_mode"] is True
        assert gpu["utilization_gpu_pct"] is None  # N/A under MIG
        assert gpu["remapped_rows_pending"] is None  # "Remapped Rows : N/A"
    # the whole GPU's memory, not a MIG slice's
    assert text("q__nvidia-h200-mig__590.48.01__linux-x86_64.idle.txt")["gpus"][0]["memory_total_mib"] == 143771


def test_retired_pages_v100():
    for gpu in text("q__8x-tesla-v100__550.127.05__thamada-gls.txt")["gpus"]:
        assert gpu["retired_pages_pending"] is False


def test_leading_blank_lines_tolerated():
    raw = read("q-text/q__8x-nvidia-h100-80gb-hbm3__535.161.08__gpud-hwslowdown-powerbrake.txt")
    assert raw.startswith("\n")
    assert len(smi_text.parse_text(raw)["gpus"]) == 8


PERF = {  # q-performance/ file -> (driver, GPUs, reasons of GPU 0); 36-wide labels at 440, old spelling <= 495
    "RECONSTRUCTED__q-d-PERFORMANCE__1x-nvidia-geforce-rtx-2080-super__610.57.04__from-capture-q.txt":
        ("610.57.04", 1, ["gpu_idle"]),
    "RECONSTRUCTED__q-d-PERFORMANCE__1x-nvidia-h100-80gb-hbm3__590.48.01__from-capture-q.txt":
        ("590.48.01", 1, ["gpu_idle"]),
    "RECONSTRUCTED__q-d-PERFORMANCE__8x-nvidia-h100-80gb-hbm3__535.161.08__from-gpud-q.txt":
        ("535.161.08", 8, ["hw_power_brake_slowdown", "hw_slowdown"]),
    "q-d-PERFORMANCE__1x-unknown-geforce__495.44__mangohud-636.txt": ("495.44", 1, ["gpu_idle"]),
    "q-d-POWER-CLOCK-TEMPERATURE-PERFORMANCE__1x-unknown__440.33.01__PARTIAL__choderalab-perses-613.txt":
        ("440.33.01", 1, ["gpu_idle"]),
}


@pytest.mark.parametrize("name", sorted(PERF))
def test_performance_captures(name):
    result = smi_text.parse_text(read("q-performance/" + name))
    driver, count, reasons = PERF[name]
    assert (result["driver_version"], len(result["gpus"]), result["gpus"][0]["throttle_reasons"]) \
        == (driver, count, reasons)


def test_36_wide_labels_440_partial():
    rel = "q-performance/q-d-POWER-CLOCK-TEMPERATURE-PERFORMANCE__1x-unknown__440.33.01__PARTIAL__choderalab-perses-613.txt"
    gpu = smi_text.parse_text(read(rel))["gpus"][0]
    assert (gpu["pci"], gpu["temperature_c"]) == ("0000:84:00", 37)


def test_grep_excerpt_without_gpu_header_is_a_clean_error():
    with pytest.raises(gq.NvidiaSmiParseError):
        smi_text.parse_text(read("q-performance/q-grep-A8-Clocks-Throttle__unknown__circa-2018__kubeflow-68.txt"))


def test_text_without_gpu_section_is_a_clean_error():
    with pytest.raises(gq.NvidiaSmiParseError):
        smi_text.parse_text(read("errors/no-driver__nvidia-smi-has-failed__exit9.txt"))


# --------------------------------------------------------------------------------------------- specific values: XML

def test_rtx3090_590_sw_power_cap_v13():
    result = xml("q-x__nvidia-geforce-rtx-3090__590.44.01__telegraf.xml")
    assert (result["driver_version"], result["cuda_version"]) == ("590.44.01", "13.1")
    gpu = result["gpus"][0]
    assert gpu["throttle_reasons"] == ["sw_power_cap"]
    assert gpu["power_draw_w"] == 35.15 and gpu["power_limit_w"] == 350.0  # gpu_power_readings
    assert gpu["remapped_rows_pending"] is None  # <remapped_rows>N/A</remapped_rows>
    assert (gpu["pci"], gpu["memory_total_mib"], gpu["temperature_c"]) == ("0000:09:00", 24576, 32)
    assert (gpu["pcie_gen_current"], gpu["pcie_gen_max"]) == (1, 4)


def test_reconstructed_remap_pending_xml():
    gpu = xml("RECONSTRUCTED__q-x__nvidia-rtx-4000-sff-ada-generation__595.84__remap-pending-EDITED.xml")["gpus"][0]
    assert gpu["remapped_rows_pending"] is True and gpu["remapped_rows_failure"] is False
    original = xml("q-x__nvidia-rtx-4000-sff-ada-generation__595.84__telegraf.xml")["gpus"][0]
    assert original["remapped_rows_pending"] is False


def test_old_throttle_spelling_and_power_readings_418_no_doctype():
    result = xml("q-x__graphics-device-is-gtx-1660-ti__418.43__telegraf.xml")
    gpu = result["gpus"][0]
    assert result["driver_version"] == "418.43"
    assert gpu["name"] == "Graphics Device"
    assert gpu["throttle_reasons"] == ["gpu_idle"]
    assert (gpu["power_draw_w"], gpu["power_limit_w"]) == (8.93, 130.0)


def test_mig_xml_uses_the_physical_gpu_not_the_slices():
    for name, total in (("q-x__nvidia-a100-sxm4-80gb__535.54.03__telegraf.xml", 81920),
                        ("q-x__nvidia-a100-sxm4-40gb__510.47.03__netdata.xml", 40960)):
        gpu = xml(name)["gpus"][0]
        assert gpu["mig_mode"] is True
        assert gpu["memory_total_mib"] == total
        assert gpu["utilization_gpu_pct"] is None


def test_remapped_rows_children_and_ecc_xml():
    gpu = xml("q-x__nvidia-a10g__515.105.01__telegraf.xml")["gpus"][0]
    assert (gpu["remapped_rows_pending"], gpu["remapped_rows_failure"]) == (False, False)
    assert (gpu["ecc_uncorrectable_volatile"], gpu["ecc_uncorrectable_aggregate"]) == (0, 0)


def test_vgpu_reasons_text_node_na():
    gpu = xml("q-x__grid-p4-1q__513.46__telegraf.xml")["gpus"][0]
    assert gpu["name"] == "GRID P4-1Q" and gpu["throttle_reasons"] is None


def test_retired_pages_xml_t4():
    assert xml("q-x__tesla-t4__512.78__telegraf.xml")["gpus"][0]["retired_pages_pending"] is False


def test_two_gpu_xml_indexes_in_order():
    gpus = xml("q-x__2x-nvidia-rtx-a5000__590.44.01__telegraf.xml")["gpus"]
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[0]["pci"] != gpus[1]["pci"]


def test_truncated_xml_is_a_clean_error():
    raw = read("xml/q-x__nvidia-geforce-rtx-3090__590.44.01__telegraf.xml")
    with pytest.raises(gq.NvidiaSmiParseError):
        smi_xml.parse_xml(raw[: len(raw) // 2])  # a real capture cut in half


def test_xml_with_entity_declaration_is_refused():
    raw = read("xml/q-x__nvidia-geforce-rtx-3090__590.44.01__telegraf.xml")
    hostile = raw.replace("<nvidia_smi_log>", '<!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]>\n<nvidia_smi_log>', 1)
    with pytest.raises(gq.NvidiaSmiParseError):
        smi_xml.parse_xml(hostile)


def test_xml_with_trailing_warning_line_still_parses():
    raw = read("xml/q-x__nvidia-geforce-rtx-3090__590.44.01__telegraf.xml")
    warning = read("errors/inforom-corrupted__table-then-WARNING__tesla-p100__470.82.01__exit14__DEINDENTED.txt")
    tail = [line for line in warning.splitlines() if line.startswith("WARNING")][0]
    assert len(smi_xml.parse_xml(raw + tail + "\n")["gpus"]) == 1


def test_parse_full_dispatches():
    assert smi.parse_full(read("xml/q-x__tesla-t4__515.105.01__telegraf.xml"))["gpus"][0]["name"] == "Tesla T4"
    assert smi.parse_full(read("q-text/q__1x-nvidia-l4__550.90.07__thamada.txt"))["gpus"][0]["name"] == "NVIDIA L4"


# --------------------------------------------------------------------------------------------- --query-gpu CSV

@pytest.mark.parametrize("name", QUERY_FILES)
def test_every_query_capture_splits_by_position(name):
    rel = "query-gpu/" + name
    fields = query_fields(rel)
    rows = gq.parse_query_csv(read(rel), fields)
    assert rows
    for row in rows:
        assert list(row) == fields
        for value in row.values():
            assert value is None or not gq.is_no_value(value)


def test_query_no_value_spellings_become_none():
    rel = "query-gpu/query-gpu-all-fields__nvidia-geforce-rtx-2080-super__610.62__windows-x86_64.load.csv"
    raw = read(rel)
    row = gq.parse_query_csv(raw, query_fields(rel))[0]
    cells = raw.splitlines()[1].split(", ")
    for spelling in ("[N/A]", "[Requested functionality has been deprecated]", "[Function Not Found]"):
        assert spelling in cells
    assert row["bbx.time_run"] is None  # [Function Not Found]
    assert all(value is None for field, value in row.items() if cells[list(row).index(field)].startswith("["))


@pytest.mark.parametrize("spelling", ["[N/A]", "N/A", "[Not Supported]", "[Requested functionality has been deprecated]",
                                      "[Function Not Found]", "[Unknown Error]", "", "  "])
def test_is_no_value(spelling):
    assert gq.is_no_value(spelling)
    assert gq.to_number(spelling) is None


def test_derived_health_fields_h100_load():
    rel = "query-gpu/DERIVED__noheader-nounits-health-fields__nvidia-h100-80gb-hbm3__590.48.01__linux-x86_64.load.csv"
    row = gq.parse_query_csv(read(rel), query_fields(rel))[0]
    assert row["index"] == "0" and row["utilization.gpu"] == "100"
    assert row["retired_pages.pending"] is None  # [N/A]
    assert smi_gpu.reasons_from_bitmask(row["clocks_event_reasons.active"]) == []


def test_mig_query_utilisation_is_none():
    rel = "query-gpu/DERIVED__noheader-nounits-health-fields__nvidia-h100-mig__590.48.01__linux-x86_64.load.csv"
    assert gq.parse_query_csv(read(rel), query_fields(rel))[0]["utilization.gpu"] is None


def test_query_row_with_wrong_cell_count_is_a_clean_error():
    rel = "query-gpu/DERIVED__noheader-nounits-health-fields__nvidia-h100-80gb-hbm3__590.48.01__linux-x86_64.load.csv"
    with pytest.raises(gq.NvidiaSmiParseError):
        gq.parse_query_csv(read(rel), ["index", "name"])


def test_sample_fields_exist_on_every_driver():
    """Every field gpu_health samples is accepted from 465.27 to 610.x (help captures, DERIVED matrix)."""
    lines = read("help/query-gpu-field-names-by-driver.DERIVED.csv").splitlines()
    header = lines[0].split(",")
    drivers = [i for i, name in enumerate(header) if "/" in name]
    table = {}
    for line in lines[1:]:
        cells = line.split(",")
        for name in [cells[0]] + [alias for alias in cells[1].split(";") if alias]:
            table[name] = [cells[i] for i in drivers]
    for field, _key, _convert in smi.SAMPLE_FIELDS:
        assert table[field] == ["Y"] * len(drivers), field


def test_reason_bitmasks():
    assert smi_gpu.reasons_from_bitmask("0x0000000000000001") == ["gpu_idle"]
    assert smi_gpu.reasons_from_bitmask("0x0000000000000004") == ["sw_power_cap"]
    assert set(smi_gpu.reasons_from_bitmask("0x00000000000001FF")) == set(smi_gpu.REASONS)
    assert smi_gpu.reasons_from_bitmask("[N/A]") is None


def test_short_pci_spellings():
    assert smi_gpu.short_pci("00000000:19:00.0") == "0000:19:00"
    assert smi_gpu.short_pci("PCI:0008:01:00") == "0008:01:00"
    assert smi_gpu.short_pci("00000018:01:00.0") == "0018:01:00"
    assert smi_gpu.short_pci("0000:B3:00.0") == "0000:b3:00"
    assert smi_gpu.short_pci(None) is None


# --------------------------------------------------------------------------------------------- error outputs

ERROR_KINDS = {
    "command-not-found__sh__exit127.txt": "command_not_found",
    "driver-library-mismatch__nvml-535.161__exit18.txt": "driver_library_mismatch",
    "gpu-lost__device-handle__linux.txt": "gpu_lost",
    "gpu-lost__device-handle__windows-369.30-two-spaces-wrapped.txt": "gpu_lost",
    "inforom-corrupted__table-then-WARNING__tesla-p100__470.82.01__exit14__DEINDENTED.txt": "inforom_corrupted",
    "no-devices-were-found__exit-UNVERIFIED.txt": "no_devices",
    "no-driver__nvidia-smi-has-failed__exit9.txt": "no_driver",
    "nvml-no-supported-gpus__exit255.txt": "no_supported_gpus",
    "unknown-error__device-handle__NO-space-after-GPU-2024.txt": "gpu_unknown_error",
    "unknown-error__device-handle__with-space-2015.txt": "gpu_unknown_error",
}


def test_error_table_covers_every_capture():
    assert set(ERROR_KINDS) == set(p.name for p in (NVIDIA / "errors").iterdir())


@pytest.mark.parametrize("name", sorted(ERROR_KINDS))
def test_error_outputs_are_recognised(name):
    rel = "errors/" + name
    rc = MANIFEST[rel]["exit_code"]
    error = smi_errors.classify_error(read(rel), rc if rc is not None else 255)
    assert error["kind"] == ERROR_KINDS[name]
    assert error["evidence"] and error["meaning"] and error["action"]


def test_error_bus_ids():
    lost = smi_errors.classify_error(read("errors/unknown-error__device-handle__NO-space-after-GPU-2024.txt"), 255)
    assert lost["pci"] == "0000:07:00"
    inforom = smi_errors.classify_error(
        read("errors/inforom-corrupted__table-then-WARNING__tesla-p100__470.82.01__exit14__DEINDENTED.txt"), 14)
    assert inforom["pci"] == "0000:0b:00"


def test_clean_output_is_not_an_error():
    assert smi_errors.classify_error(read("q-text/q__1x-nvidia-l4__550.90.07__thamada.txt"), 0) is None
    assert smi_errors.classify_error("", 2)["kind"] == "exit_2"
