"""gpu_patrol.py: patrol's one --query-gpu run (clock event reasons under load, an empty sample) and the Xid events
since the job started, against the real captures in tests/fixtures/nvidia."""

from __future__ import annotations

import os
import time

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import gpu_patrol as gp
from ansible_collections.remote_gpu.trainer.plugins.module_utils.nvidia_smi import parse_full
from ansible_collections.remote_gpu.trainer.plugins.module_utils.xid import parse_kernel_log

NVIDIA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "nvidia")
QUERY_GPU = os.path.join(NVIDIA, "query-gpu")
HWSLOWDOWN_Q = "q-text/q__8x-nvidia-h100-80gb-hbm3__535.161.08__gpud-hwslowdown-powerbrake.txt"
# the newer spelling of a field in the all-fields captures of drivers that print it
ALIASES = {"clocks_throttle_reasons.active": "clocks_event_reasons.active", "clocks.sm": "clocks.current.sm"}
BOOT = 1790000000.0  # a boot time for the seconds-since-boot stamps of dmesg


def read(*parts):
    with open(os.path.join(NVIDIA, *parts), encoding="utf-8", newline="") as handle:
        return handle.read()


def project(name, table=gp.PATROL_FIELDS):
    """A real all-fields ``--query-gpu`` capture (with header and units) projected onto ``table`` in
    ``noheader,nounits`` form: DERIVED from the capture, values unchanged except the unit dropped."""
    lines = read("query-gpu", name).splitlines()
    header = [cell.strip().split(" [")[0] for cell in lines[0].split(", ")]
    cols = []
    for field, _key, _convert in table:
        cols.append(header.index(field) if field in header else header.index(ALIASES[field]))
    rows = []
    for line in lines[1:]:
        cells = line.split(", ")
        rows.append(", ".join(cells[col].split(" ")[0] if cells[col][:1].isdigit() else cells[col] for col in cols))
    return "\n".join(rows) + "\n"


ALL_FIELDS = sorted(name for name in os.listdir(QUERY_GPU) if name.startswith("query-gpu-all-fields"))


@pytest.mark.parametrize("name", ALL_FIELDS)
def test_every_real_capture_reads_with_every_patrol_field(name):
    gpus, findings = gp.read_sample(0, project(name), "")
    assert findings == [] and len(gpus) >= 1
    for gpu in gpus:
        assert set(gpu) == set(gp.GPU_KEYS)
        assert gpu["memory_total_mib"] > 0 and gpu["pci"] and gpu["pci"].count(":") == 2
        assert gpu["throttle_reasons"] is not None  # the bitmask is there on 465.27 and on 610.x alike
    assert gp.throttle_findings(gpus) == []  # no capture of this corpus is throttled


def test_h100_under_load_reads_its_clocks_power_and_reasons():
    sample = project("query-gpu-all-fields__nvidia-h100-80gb-hbm3__590.48.01__linux-x86_64.load.csv")
    gpu = gp.read_sample(0, sample, "")[0][0]
    assert gpu["utilization_pct"] == 100 and gpu["power_limit_w"] == 700.0 and gpu["sm_clock_max_mhz"] == 1980
    assert gpu["throttle_reasons"] == [] and gpu["pci"] == "0000:00:09"


def hwslowdown_gpus(utilization):
    """The 8x H100 capture whose HW Slowdown and HW Power Brake Slowdown are active (parsed from its real -q text),
    with the utilisation given: the capture itself is at 0 %."""
    gpus = []
    for gpu in parse_full(read(*HWSLOWDOWN_Q.split("/")))["gpus"]:
        row = dict.fromkeys(gp.GPU_KEYS)
        row.update(index=gpu["index"], pci=gpu["pci"], throttle_reasons=gpu["throttle_reasons"],
                   sm_clock_mhz=gpu["sm_clock_mhz"], sm_clock_max_mhz=gpu["sm_clock_max_mhz"],
                   power_draw_w=gpu["power_draw_w"], power_limit_w=gpu["power_limit_w"], utilization_pct=utilization)
        gpus.append(row)
    return gpus


def test_a_slowdown_of_an_idle_gpu_is_not_a_finding():
    gpus = hwslowdown_gpus(parse_full(read(*HWSLOWDOWN_Q.split("/")))["gpus"][0]["utilization_gpu_pct"])
    assert gpus[0]["utilization_pct"] == 0 and "hw_power_brake_slowdown" in gpus[0]["throttle_reasons"]
    assert gp.throttle_findings(gpus) == []


def test_a_slowdown_under_load_is_throttle_active_with_preflights_words():
    found = gp.throttle_findings(hwslowdown_gpus(97))
    assert [(f["code"], f["level"], f["gpu"]) for f in found] == [("throttle_active", "FAIL", i) for i in range(8)]
    first = found[0]
    assert first["reasons"] == ["hw_slowdown", "hw_power_brake_slowdown"]
    assert "HW slowdown, HW power brake slowdown active" in first["message"]
    assert "utilisation 97 %" in first["message"] and "SM clock 86 of 1980 MHz" in first["message"]
    assert first["message"].startswith("GPU 0 (0000:19:00) is being throttled by hardware/thermal limits under load")
    assert "pull what you have" in first["action"]


def test_sw_power_cap_and_idle_are_not_throttling():
    gpu = dict.fromkeys(gp.GPU_KEYS)
    gpu.update(index=0, utilization_pct=100, throttle_reasons=["sw_power_cap"])
    assert gp.throttle_findings([gpu]) == []
    gpu.update(throttle_reasons=["gpu_idle", "hw_slowdown"])  # the GPU reports itself idle
    assert gp.throttle_findings([gpu]) == []
    # MIG: no utilisation, so the load is judged by power, as in preflight
    gpu.update(utilization_pct=None, throttle_reasons=["sw_thermal_slowdown"], power_draw_w=600.0, power_limit_w=700.0)
    assert [f["code"] for f in gp.throttle_findings([gpu])] == ["throttle_active"]
    assert gp.throttle_findings(None) == []


@pytest.mark.parametrize("name,rc", [("no-devices-were-found__exit-UNVERIFIED.txt", 6),
                                     ("no-devices-were-found__exit-UNVERIFIED.txt", 0),
                                     ("nvml-no-supported-gpus__exit255.txt", 255)])
def test_no_gpu_row_while_nvidia_smi_runs_is_a_warn(name, rc):
    gpus, findings = gp.read_sample(rc, read("errors", name), "")
    assert gpus == [] and [(f["code"], f["level"]) for f in findings] == [("gpu_sample_empty", "WARN")]
    assert "gpu_health" in findings[0]["action"]
    assert "remote_gpu.trainer.preflight" in findings[0]["action"] and "playbooks/" not in findings[0]["action"]


def test_an_empty_answer_is_a_warn_never_silence():
    gpus, findings = gp.read_sample(0, "", "")
    assert gpus == [] and [f["code"] for f in findings] == ["gpu_sample_empty"]
    assert "exited 0 and printed no GPU row" in findings[0]["message"]


def test_a_broken_driver_stays_a_query_failure():
    gpus, findings = gp.read_sample(9, read("errors", "no-driver__nvidia-smi-has-failed__exit9.txt"), "")
    assert gpus is None and [f["code"] for f in findings] == ["gpu_query_failed"]
    gpus, findings = gp.read_sample(0, "something else entirely\n", "")
    assert gpus is None and "no usable rows" in findings[0]["message"]


def test_one_run_with_every_field(smi_script):
    rows = project("query-gpu-all-fields__nvidia-h200__590.48.01__linux-x86_64.load.csv")
    smi = smi_script("assert args == %r, args\nsys.stdout.write(%r)" % (
        ["--query-gpu=" + ",".join(f for f, _k, _c in gp.PATROL_FIELDS), "--format=csv,noheader,nounits"], rows))
    gpus, findings = gp.sample(smi, 5)
    assert findings == [] and gpus[0]["utilization_pct"] == 100


def test_a_field_the_driver_rejects_is_dropped_and_asked_again(smi_script):
    table = [entry for entry in gp.PATROL_FIELDS if entry[0] != "clocks_throttle_reasons.active"]
    rows = project("query-gpu-all-fields__nvidia-h200__590.48.01__linux-x86_64.load.csv", table)
    smi = smi_script("if 'clocks_throttle_reasons.active' in args[0]:\n"
                     "    sys.stderr.write('Field \"clocks_throttle_reasons.active\" is not a valid field to "
                     "query.\\n')\n    sys.exit(2)\nsys.stdout.write(%r)" % rows)
    gpus, findings = gp.sample(smi, 5)
    assert findings == [] and gpus[0]["throttle_reasons"] is None and gpus[0]["utilization_pct"] == 100


# ---------------------------------------------------------------------------------------------------------------
# Kernel-log times and the events since the job started
# ---------------------------------------------------------------------------------------------------------------

def first_xid_line(name):
    return next(event["line"] for event in parse_kernel_log(read("xid-logs", name)))


def test_every_stamp_of_the_real_logs():
    now = time.time()
    # dmesg: seconds since boot
    assert gp.line_epoch(first_xid_line("dmesg__xid-32-31-OLD-FORMAT-2015__bumblebee-677.log"), BOOT, now) == \
        pytest.approx(BOOT + 24128.828315)
    # syslog with dmesg's stamp inside: the stamp since boot wins over the year-less syslog date
    assert gp.line_epoch(first_xid_line("syslog__xid-48-dbe__TRUNCATED__gpu-operator-1146.log"), BOOT, now) == \
        pytest.approx(BOOT + 240314.528856)
    # dmesg --time-format iso, with its offset: exact
    assert gp.line_epoch(first_xid_line("dmesg-decode-iso__xid-13-43__gpud.log"), BOOT, now) == \
        pytest.approx(1737434504.283302)
    # dmesg -T (local time, with a year)
    expected = time.mktime((2024, 8, 30, 11, 43, 9, 0, 0, -1))
    assert gp.line_epoch(first_xid_line("dmesg-ctime__xid-13-109__gpud-pr46.log"), BOOT, now) == expected
    # journalctl short / syslog without a year: the latest Apr 19 not after now
    stamp = gp.line_epoch(first_xid_line("journalctl__xid-120-gsp-task-exception__575.51.02__open-gpu-kernel-modules-"
                                         "829.log"), BOOT, now)
    assert time.localtime(stamp)[1:6] == (4, 19, 13, 16, 41) and now - 366 * 86400 - 86400 < stamp <= now + 86400
    # the message alone: no time
    assert gp.line_epoch(first_xid_line("msg-only__xid-79__nvsentinel-155-comment.log"), BOOT, now) is None
    # seconds since boot without a boot time: unknown
    assert gp.line_epoch("[ 1843.308145] NVRM: Xid (PCI:0000:b3:00): 79, x", None, now) is None


def test_journalctl_short_iso_stamps():
    line = "2026-07-03T22:11:09+0000 lab-01 kernel: NVRM: Xid (PCI:0000:07:00): 48, x"
    assert gp.line_epoch(line, None, 0) == 1783116669
    assert gp.line_epoch(line.replace("+0000", "+02:00"), None, 0) == 1783116669 - 7200


def test_only_the_events_since_the_job_start_are_reported():
    """A fatal Xid before the start (a fallen-off GPU at 1843 s) is not reported; one after it (Xid 48 at
    240314 s) is, as xid_fatal with the patrol action."""
    text = read("xid-logs", "dmesg__fallen-off-bus-multiline-no-xid__570.158.01__nvsentinel-155.log") + \
        read("xid-logs", "syslog__xid-48-dbe__TRUNCATED__gpu-operator-1146.log")
    events = parse_kernel_log(text)
    assert sorted(event["xid"] for event in events) == [48, 79]
    new = gp.events_since(events, BOOT + 100000, BOOT, time.time())
    assert [(event["xid"], event["severity"]) for event in new] == [(48, "fatal")]
    assert new[0]["epoch"] == pytest.approx(BOOT + 240314.528856, abs=0.001)
    found = gp.xid_findings([], new)
    assert [(f["code"], f["level"]) for f in found] == [("xid_fatal", "FAIL")]
    assert found[0]["action"] == gp.DYING_ACTION and "This box is unfit" not in found[0]["message"]
    assert "remote_gpu.trainer.teardown" in gp.DYING_ACTION and "playbooks/" not in gp.DYING_ACTION
    assert "Xid 48" in found[0]["message"]
    assert gp.events_since(events, BOOT + 300000, BOOT, time.time()) == []
    both = gp.events_since(events, BOOT, BOOT, time.time())
    assert [event["xid"] for event in both] == [79, 48]


def test_app_faults_and_info_keep_preflights_codes():
    events = parse_kernel_log(read("xid-logs", "dmesg__xid-32-31-OLD-FORMAT-2015__bumblebee-677.log"))
    new = gp.events_since(events, BOOT, BOOT, time.time())
    found = gp.xid_findings([{"index": 0, "pci": "0000:01:00"}], new)
    assert {(f["code"], f["level"], f["gpu"]) for f in found} == {("xid_app_fault", "WARN", 0)}
    assert all("This box is unfit" not in f["message"] for f in found)


def test_undated_events_are_never_new():
    events = parse_kernel_log(read("xid-logs", "msg-only__xid-79__nvsentinel-155-comment.log"))
    assert events and gp.events_since(events, 0, BOOT, time.time()) == []


def test_the_log_read_is_bounded():
    line = "[ 1.000000] x\n"
    text = line * (gp.MAX_KERNEL_LOG_CHARS // len(line) + 10)
    bounded = gp.bound_log(text)
    assert len(bounded) <= gp.MAX_KERNEL_LOG_CHARS and bounded.startswith("[ 1.000000]")
    assert gp.bound_log("short") == "short" and gp.bound_log(None) is None


def test_the_job_start_is_the_earliest_launch():
    assert gp.job_start([{"launched_epoch": 20.5}, {}, {"launched_epoch": 10}, {"launched_epoch": True}]) == 10
    assert gp.job_start([{}, {"launched_epoch": "soon"}]) is None and gp.job_start([]) is None


def test_an_unreadable_kernel_log_is_info():
    found = gp.kernel_log_unreadable("dmesg: read kernel buffer failed: Operation not permitted")
    assert (found["code"], found["level"]) == ("kernel_log_unreadable", "INFO")
