"""Behaviour of the fake nvidia-smi / dmesg / journalctl: errors, runtime apps, markers, XML, selection."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from xml.sax.saxutils import escape

import pytest

from gpu_emu_helpers import BIN, SCENARIOS, fixture_text, run_tool, smi_runner
from nvsmi_emu import xmlmap


@pytest.fixture
def smi():
    return smi_runner()


NO_DRIVER = fixture_text("errors/no-driver__nvidia-smi-has-failed__exit9.txt")
MISMATCH = fixture_text("errors/driver-library-mismatch__nvml-535.161__exit18.txt")
NO_DEVICES = fixture_text("errors/no-devices-were-found__exit-UNVERIFIED.txt")


# ------------------------------------------------------------------------------------------------ no driver
@pytest.mark.parametrize("scenario", [None, "/nonexistent/scenario", "no-driver"])
@pytest.mark.parametrize("args", [[], ["-q"], ["-L"], ["--query-gpu=name", "--format=csv"]])
def test_no_driver_is_real_text_and_exit_9(smi, scenario, args):
    r = smi(args, scenario=scenario)
    assert r.returncode == 9
    assert r.stdout == NO_DRIVER
    assert r.stderr == ""


def test_unparseable_capture_is_no_driver(smi, tmp_path):
    (tmp_path / "nvidia-smi-q.txt").write_text("garbage\nnot a capture\n")
    r = smi(["-q"], scenario=str(tmp_path))
    assert (r.returncode, r.stdout) == (9, NO_DRIVER)
    (tmp_path / "nvidia-smi-q.txt").unlink()
    (tmp_path / "nvidia-smi-q.xml").write_text("<?xml version='1.0'?><broken>")
    r = smi(["-q", "-x"], scenario=str(tmp_path))
    assert (r.returncode, r.stdout) == (9, NO_DRIVER)


def test_driver_library_mismatch(smi):
    for args in ([], ["-q"], ["--query-gpu=name", "--format=csv"], ["dmon", "-c", "1"]):
        r = smi(args, scenario="driver-library-mismatch")
        assert (r.returncode, r.stdout, r.stderr) == (18, MISMATCH, "")


def test_no_devices_is_real_text_and_exit_6(smi):
    for args in ([], ["-q"], ["-L"], ["--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits"]):
        r = smi(args, scenario="no-devices")
        assert (r.returncode, r.stdout, r.stderr) == (6, NO_DEVICES, "")


def test_hang_runs_until_killed():
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_GPU_")}
    env.update(FAKE_GPU_PYTHON=sys.executable, FAKE_GPU_SCENARIO=os.path.join(SCENARIOS, "hang"))
    proc = subprocess.Popen([os.path.join(BIN, "nvidia-smi"), "-q"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=1.5)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert proc.stdout.read() == b""


# ------------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("args", [["--bogus"], ["-Z"], ["-q", "--what"], ["--query-gpu=name"]])
def test_unknown_flag_exit_2(smi, args):
    r = smi(args, scenario="h100-idle")
    assert r.returncode == 2
    assert r.stdout == ""
    assert "lab emulator" in r.stderr and "no real capture" in r.stderr


def test_unknown_query_field_exit_2(smi):
    r = smi(["--query-gpu=name,not.a.field", "--format=csv"], scenario="h100-idle")
    assert r.returncode == 2 and r.stdout == ""
    assert "not.a.field" in r.stderr


def test_field_validity_follows_the_capture_driver(smi):
    # remapped_rows.* and gpu_recovery_action are absent from the 465.27 help but valid on 590
    ok = smi(["--query-gpu=remapped_rows.pending,gpu_recovery_action", "--format=csv,noheader"],
             scenario="h100-idle")
    assert ok.returncode == 0 and ok.stdout == "No, None\n"
    # both spellings of the clock reasons are accepted on 590 (help: "clocks_event_reasons.X" or "...throttle...")
    r = smi(["--query-gpu=clocks_throttle_reasons.hw_slowdown,clocks_event_reasons.hw_slowdown",
             "--format=csv"], scenario="8xh100-hwslowdown")
    assert r.returncode == 0
    assert r.stdout.splitlines()[1] == "Active, Active"


def test_help_is_a_real_capture(smi):
    r = smi(["-h"], scenario="h100-idle")
    assert r.returncode == 0
    assert r.stdout == fixture_text("help/nvidia-smi-h__nvidia-h100-80gb-hbm3__590.48.01__linux-x86_64.txt")


# ------------------------------------------------------------------------------------------------ CSV formats
def test_csv_noheader_nounits(smi):
    q = ["--query-gpu=index,name,memory.total,power.limit,temperature.gpu,pcie.link.width.current"]
    full = smi(q + ["--format=csv"], scenario="h100-load").stdout.splitlines()
    assert full == ["index, name, memory.total [MiB], power.limit [W], temperature.gpu, pcie.link.width.current",
                    "0, NVIDIA H100 80GB HBM3, 81559 MiB, 700.00 W, 59, 16"]
    assert smi(q + ["--format=csv,noheader"], scenario="h100-load").stdout == \
        "0, NVIDIA H100 80GB HBM3, 81559 MiB, 700.00 W, 59, 16\n"
    assert smi(q + ["--format=csv,noheader,nounits"], scenario="h100-load").stdout == \
        "0, NVIDIA H100 80GB HBM3, 81559, 700.00, 59, 16\n"
    # nounits keeps the units in the header (query-gpu-csv-nounits__tesla-p100...netdata.csv)
    assert smi(q + ["--format=csv,nounits"], scenario="h100-load").stdout.splitlines()[0] == full[0]


def test_selection_by_index(smi):
    r = smi(["--query-gpu=index,pci.bus_id", "--format=csv,noheader", "-i", "3"], scenario="8xh100")
    assert r.stdout == "3, 00000000:5D:00.0\n"
    assert smi(["-L"], scenario="8xh100").stdout.count("\n") == 8


def test_throttle_bitmask(smi):
    r = smi(["--query-gpu=clocks_event_reasons.active,clocks_event_reasons.supported", "--format=csv,noheader"],
            scenario="8xh100-hwslowdown")
    # HW Slowdown (0x8) + HW Power Brake Slowdown (0x80)
    assert r.stdout.splitlines() == ["0x0000000000000088, 0x00000000000001FF"] * 8


# ------------------------------------------------------------------------------------------------ runtime apps
def _apps(tmp_path, rows, mode=None):
    (tmp_path / "apps").write_text("".join("\t".join(r) + "\n" for r in rows))
    if mode:
        (tmp_path / "pid-mode").write_text(mode + "\n")
    return tmp_path


def test_registered_apps_added_everywhere(smi, tmp_path):
    rt = _apps(tmp_path, [("4242", "1234", "python train.py", "987654")])
    q = ["--query-compute-apps=pid,process_name,used_gpu_memory", "--format=csv,noheader"]
    base = smi(q, scenario="h100-load").stdout
    r = smi(q, scenario="h100-load", runtime=rt)
    assert r.stdout == base + "4242, python train.py, 1234 MiB\n"
    text = smi(["-q"], scenario="h100-idle", runtime=rt).stdout
    assert "    Processes\n        GPU instance ID                   : N/A\n" in text
    assert "        Process ID                        : 4242\n" in text
    assert "            Used GPU Memory               : 1234 MiB\n" in text
    root = ET.fromstring(smi(["-q", "-x"], scenario="h100-idle", runtime=rt).stdout)
    pids = [p.findtext("pid") for p in root.iter("process_info")]
    assert pids == ["4242"]
    table = smi([], scenario="h100-idle", runtime=rt).stdout
    assert "4242" in table and "1234MiB" in table
    assert "No running processes found" not in table


def test_registered_apps_on_xml_scenario(smi, tmp_path):
    rt = _apps(tmp_path, [("77", "512", "worker")])
    out = smi(["-q", "-x"], scenario="rtx2080-xml", runtime=rt).stdout
    root = ET.fromstring(out)
    assert [p.findtext("pid") for p in root.iter("process_info")][-1] == "77"
    assert smi(["--query-compute-apps=pid", "--format=csv,noheader"], scenario="rtx2080-xml",
               runtime=rt).stdout.splitlines()[-1] == "77"


def test_pid_mode_host(smi, tmp_path):
    rt = _apps(tmp_path, [("4242", "100", "python", "987654"), ("5000", "10", "nohost")], mode="host")
    r = smi(["--query-compute-apps=pid", "--format=csv,noheader"], scenario="h100-idle", runtime=rt)
    assert r.stdout == "987654\n5000\n"
    (tmp_path / "pid-mode").write_text("namespace\n")
    r = smi(["--query-compute-apps=pid", "--format=csv,noheader"], scenario="h100-idle", runtime=rt)
    assert r.stdout == "4242\n5000\n"


def test_apps_gpu_column(smi, tmp_path):
    rt = _apps(tmp_path, [("1", "10", "a", "", "0"), ("2", "20", "b", "", "5")])
    r = smi(["--query-compute-apps=gpu_bus_id,pid", "--format=csv,noheader"], scenario="8xh100", runtime=rt)
    assert r.stdout == "00000000:18:00.0, 1\n00000000:AB:00.0, 2\n"


# ------------------------------------------------------------------------------------------------ kernel log
@pytest.mark.parametrize("tool,args", [("dmesg", []), ("dmesg", ["-T"]), ("dmesg", ["--ctime", "-k"]),
                                       ("journalctl", ["-k", "-b", "--no-pager", "-o", "short-iso"]),
                                       ("journalctl", ["-q", "-k"])])
def test_kernel_log_served_verbatim(tool, args):
    r = run_tool(tool, args, scenario="xid79-fallen-off-bus")
    assert r.returncode == 0
    assert r.stdout == fixture_text("xid-logs/msg-only__xid-79__nvsentinel-155-comment.log")


@pytest.mark.parametrize("tool", ["dmesg", "journalctl"])
def test_no_kern_log_prints_nothing(tool):
    r = run_tool(tool, ["-T"], scenario="h100-idle")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")


def test_kernel_log_unreadable():
    r = run_tool("dmesg", ["-T"], scenario="kernel-log-unreadable")
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == "dmesg: read kernel buffer failed: Operation not permitted\n"
    j = run_tool("journalctl", ["-k"], scenario="kernel-log-unreadable")
    assert j.returncode == 1 and j.stdout == "" and "insufficient permissions" in j.stderr


# ------------------------------------------------------------------------------------------------ wrappers
def test_wrapper_works_through_a_symlink_without_python3_on_path(tmp_path):
    link = tmp_path / "nvidia-smi"
    os.symlink(os.path.join(BIN, "nvidia-smi"), link)
    env = {"PATH": "/usr/bin:/bin", "FAKE_GPU_PYTHON": sys.executable,
           "FAKE_GPU_SCENARIO": os.path.join(SCENARIOS, "h100-idle")}
    r = subprocess.run([str(link), "-L"], env=env, capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: ")


def test_startup_imports_stay_light():
    code = ("import sys; sys.path.insert(0, %r); import nvsmi_emu.cli, nvsmi_emu.kernlog;"
            "bad = [m for m in ('xml.etree.ElementTree', 'json', 'yaml', 'subprocess') if m in sys.modules];"
            "print(bad)") % os.path.dirname(BIN)
    r = subprocess.run([sys.executable, "-E", "-S", "-c", code], capture_output=True, text=True, timeout=30, check=False)
    assert r.stdout.strip() == "[]", r.stderr


def test_xml_view_imports_no_network_stack():
    # each call of the fake is a new process: xml.sax.saxutils would pull in urllib.request and http.client (~40 ms)
    code = ("import sys; sys.path.insert(0, %r); import nvsmi_emu.xmlmap;"
            "print([m for m in ('xml.sax.saxutils', 'urllib.request', 'http.client', 'email') if m in sys.modules])"
            ) % os.path.dirname(BIN)
    r = subprocess.run([sys.executable, "-E", "-S", "-c", code], capture_output=True, text=True, timeout=30, check=False)
    assert r.stdout.strip() == "[]", r.stderr


@pytest.mark.parametrize("text", ["plain", "a & b", "<tag>", "&amp; > <", "N/A", ""])
def test_xml_escape_is_saxutils_escape(text):
    assert xmlmap.escape(text) == escape(text)


# ------------------------------------------------------------------------------------------------ XML view
KEYS = [
    ("clocks_event_reasons/clocks_event_reason_hw_slowdown", "Clocks Event Reasons/HW Slowdown"),
    ("clocks_event_reasons/clocks_event_reason_hw_power_brake_slowdown",
     "Clocks Event Reasons/HW Slowdown/HW Power Brake Slowdown"),
    ("clocks_event_reasons/clocks_event_reason_sw_thermal_slowdown", "Clocks Event Reasons/SW Thermal Slowdown"),
    ("clocks_event_reasons/clocks_event_reason_sw_power_cap", "Clocks Event Reasons/SW Power Cap"),
    ("remapped_rows/remapped_row_pending", "Remapped Rows/Pending"),
    ("remapped_rows/remapped_row_failure", "Remapped Rows/Remapping Failure Occurred"),
    ("remapped_rows/remapped_row_unc", "Remapped Rows/Uncorrectable Error"),
    ("ecc_errors/volatile/dram_uncorrectable", "ECC Errors/Volatile/DRAM Uncorrectable"),
    ("ecc_errors/aggregate/dram_uncorrectable", "ECC Errors/Aggregate/DRAM Uncorrectable"),
    ("pci/pci_gpu_link_info/pcie_gen/current_link_gen", "PCI/GPU Link Info/PCIe Generation/Current"),
    ("pci/pci_gpu_link_info/pcie_gen/max_link_gen", "PCI/GPU Link Info/PCIe Generation/Max"),
    ("pci/pci_gpu_link_info/link_widths/current_link_width", "PCI/GPU Link Info/Link Width/Current"),
    ("pci/pci_gpu_link_info/link_widths/max_link_width", "PCI/GPU Link Info/Link Width/Max"),
    ("temperature/gpu_temp", "Temperature/GPU Current Temp"),
    ("fb_memory_usage/total", "FB Memory Usage/Total"),
    ("product_name", "Product Name"),
    ("uuid", "GPU UUID"),
    ("persistence_mode", "Persistence Mode"),
    ("mig_mode/current_mig", "MIG Mode/Current"),
]


def _text_scenarios():
    return sorted(d for d in os.listdir(SCENARIOS) if os.path.exists(os.path.join(SCENARIOS, d, "nvidia-smi-q.txt"))
                  and not os.path.exists(os.path.join(SCENARIOS, d, "MARKER-hang")))


@pytest.mark.parametrize("scenario", _text_scenarios())
def test_xml_from_text_round_trips_health_values(smi, scenario):
    from nvsmi_emu import model
    cap = model.load_capture(os.path.join(SCENARIOS, scenario))
    r = smi(["-q", "-x"], scenario=scenario)
    assert r.returncode == 0
    assert r.stdout.startswith('<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v1')
    root = ET.fromstring(r.stdout)
    assert root.findtext("driver_version") == cap.driver
    gpus = root.findall("gpu")
    assert len(gpus) == len(cap.gpus)
    checked = 0
    for g_xml, g in zip(gpus, cap.gpus):
        assert g_xml.get("id") == g.bus_id
        for xpath, tpath in KEYS:
            if not g.has(tpath):
                continue
            want = g.get(tpath).strip()
            el = g_xml.find(xpath)
            assert el is not None, (xpath, scenario)
            assert el.text.strip() == want, (xpath, scenario)
            checked += 1
    assert checked >= 10 * len(gpus)
    # and back: the XML parses into the same model values
    back = model.parse_xml(r.stdout.encode())
    for g_back, g in zip(back.gpus, cap.gpus):
        for _x, tpath in KEYS:
            if g.has(tpath):
                assert g_back.get(tpath).strip() == g.get(tpath).strip(), tpath


def test_xml_scenario_served_as_captured(smi):
    r = smi(["-q", "-x"], scenario="rtx2080-xml")
    assert r.stdout == fixture_text("xml/q-x__nvidia-geforce-rtx-2080__516.59__netdata.xml")


def test_xml_scenario_text_view(smi):
    r = smi(["-q"], scenario="rtx2080-xml")
    assert r.returncode == 0
    assert "    Product Name                          : NVIDIA GeForce RTX 2080\n" in r.stdout
    assert re.search(r"\n            Link Width\n                Max +: 16x\n                Current +: 8x\n", r.stdout)
    assert r.stdout.index("    Processes\n") > r.stdout.index("    Clocks\n")


def test_dmon_without_count_samples_until_killed():
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_GPU_")}
    env.update(FAKE_GPU_PYTHON=sys.executable, FAKE_GPU_SCENARIO=os.path.join(SCENARIOS, "h100-load"))
    proc = subprocess.Popen([os.path.join(BIN, "nvidia-smi"), "dmon", "-d", "0.05"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        head = [proc.stdout.readline() for _line in range(4)]
        assert head[0].startswith(b"# gpu ") and head[1].startswith(b"# Idx ")
        assert head[2] == head[3] and head[2].startswith(b"    0 ")
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_dmon_select_groups(smi):
    r = smi(["dmon", "-c", "2", "-s", "pc", "-i", "0"], scenario="h100-load")
    assert r.stdout.splitlines() == [
        "# gpu    pwr  gtemp  mtemp   mclk   pclk ",
        "# Idx      W      C      C    MHz    MHz ",
        "    0    629     59     55   2619   1980 ",
        "    0    629     59     55   2619   1980 "]
    assert smi(["dmon", "-c", "1", "-s", "e"], scenario="h100-load").returncode == 2


def test_q_selection_and_performance(smi):
    r = smi(["-q", "-i", "1"], scenario="8xh100")
    assert r.returncode == 0
    assert "\nGPU 00000000:2A:00.0\n" in r.stdout and "\nGPU 00000000:18:00.0\n" not in r.stdout
    p = smi(["-q", "-d", "PERFORMANCE"], scenario="8xh100-hwslowdown").stdout
    assert p.count("            HW Power Brake Slowdown       : Active\n") == 8
    assert "FB Memory Usage" not in p
    bad = smi(["-q", "-i", "9"], scenario="8xh100")
    assert bad.returncode == 6 and bad.stdout == fixture_text("errors/no-devices-were-found__exit-UNVERIFIED.txt")
