#!/usr/bin/env python
"""(Re)build tests/lab/gpu/scenarios/ from the real-capture corpus in tests/fixtures/nvidia/.

Every scenario is declared below: the capture it copies, the kern.log it copies, the marker files it holds,
and -- for EDITED scenarios only -- the exact edit applied (a list of (old line, new line, count) replacements or
GPU sections dropped). tests/lab/gpu/tests/test_scenarios.py re-runs these declarations and checks the stored
scenarios are exactly what this file produces, so an edit can never hide from its description.

Run:  python3 tests/lab/gpu/tools/build_scenarios.py   (from the repository root or anywhere)
"""
from __future__ import annotations

import os
import re
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
GPU_DIR = os.path.dirname(HERE)
SCEN = os.path.join(GPU_DIR, "scenarios")
FIX = os.path.join(os.path.dirname(os.path.dirname(GPU_DIR)), "fixtures", "nvidia")

H100_IDLE = "q-text/q__nvidia-h100-80gb-hbm3__590.48.01__linux-x86_64.idle.txt"
H100_LOAD = "q-text/q__nvidia-h100-80gb-hbm3__590.48.01__linux-x86_64.load.txt"
H100_8X = "q-text/q__8x-nvidia-h100-80gb-hbm3__565.57.01__thamada.txt"

NO_FINDINGS_FAIL = ["throttle_active", "ecc_uncorrectable_volatile", "remapped_rows_pending", "xid_fatal",
                    "driver_unavailable", "gpu_count_mismatch"]


def found_on_gpus(code, gpus=1):
    """The ``codes`` and ``gpu_codes`` of a scenario whose one finding ``code`` stands on each of its ``gpus`` GPUs."""
    return {"codes": [code], "gpu_codes": {index: [code] for index in range(gpus)}}


def value_edit(label, old, new, count=1):
    """The edit of a `-q` line's value only: ``label`` is the line up to its value, exactly (indent, padding and
    ': '); ``old`` and ``new`` the values -> the (old line, new line, count) replacement, ``count`` lines of it."""
    return (label + old, label + new, count)


SCENARIOS = [
    # ---------------------------------------------------------------- healthy boxes (unedited real captures)
    dict(name="h100-idle", capture=H100_IDLE, verdict="PASS", codes=[],
         description="1x H100 80GB HBM3, driver 590.48.01, idle (nvidia_gpu_exporter capture)",
         absent=NO_FINDINGS_FAIL + ["pcie_link_degraded", "power_capped", "persistence_off"]),
    dict(name="h100-load", capture=H100_LOAD, verdict="PASS", codes=[],
         description="1x H100 80GB HBM3, driver 590.48.01, gpu-burn + 2 memhog processes (100 % util, 629 W)",
         absent=NO_FINDINGS_FAIL + ["pcie_link_degraded", "clock_crushed", "running_hot"]),
    dict(name="8xh100", capture=H100_8X, verdict="PASS", codes=[],
         description="8x H100 80GB HBM3, driver 565.57.01, idle", options={"expected_count": 8},
         absent=NO_FINDINGS_FAIL),
    dict(name="l40s", capture="q-text/q__nvidia-l40s__595.80__linux-x86_64.load.txt", verdict="PASS",
         codes=["persistence_off"], description="1x L40S, driver 595.80, NVENC load, persistence mode off",
         absent=NO_FINDINGS_FAIL),
    dict(name="8xrtx4090", capture="q-text/q__8x-nvidia-geforce-rtx-4090__535.154.05__gpud-0.txt", verdict="PASS",
         codes=[], options={"expected_count": 8},
         description="8x GeForce RTX 4090, driver 535.154.05, three GPUs busy, idle ones at PCIe Gen1 (normal)",
         absent=NO_FINDINGS_FAIL + ["pcie_link_degraded"]),
    dict(name="rtx2080-xml", capture="xml/q-x__nvidia-geforce-rtx-2080__516.59__netdata.xml", verdict="PASS",
         codes=[], description="1x GeForce RTX 2080, driver 516.59 (Windows), XML-sourced scenario, idle x8 link",
         absent=NO_FINDINGS_FAIL + ["pcie_link_degraded"]),
    dict(name="h100-mig", capture="q-text/q__nvidia-h100-mig__590.48.01__linux-x86_64.load.txt", verdict="PASS",
         **found_on_gpus("mig_enabled"),
         description="1x H100 with MIG enabled (4 instances), driver 590.48.01, under load",
         absent=NO_FINDINGS_FAIL),
    # ---------------------------------------------------------------- real faults
    dict(name="8xh100-hwslowdown",
         capture="q-text/q__8x-nvidia-h100-80gb-hbm3__535.161.08__gpud-hwslowdown-powerbrake.txt",
         verdict="FAIL", **found_on_gpus("throttle_active", gpus=8),
         description="8x H100, driver 535.161.08, HW Slowdown + HW Power Brake Slowdown active on every GPU",
         absent=["xid_fatal", "power_capped"]),
    dict(name="a10-remap-pending", capture="q-text/q__1x-nvidia-a10__535.129.03__gpud-remap-pending.txt",
         verdict="FAIL", **found_on_gpus("remapped_rows_pending"),
         description="1x A10, driver 535.129.03, remapped rows Pending: Yes (4 uncorrectable)",
         absent=["remapped_rows_failure", "ecc_uncorrectable_volatile"]),
    # ---------------------------------------------------------------- EDITED real captures
    dict(name="h100-ecc-uncorrectable-edited", capture=H100_IDLE, verdict="FAIL",
         **found_on_gpus("ecc_uncorrectable_volatile"),
         description="1x H100 idle with 2 volatile (and aggregate) uncorrectable DRAM ECC errors",
         edits=[value_edit("            DRAM Uncorrectable                         : ", "0", "2", count=2)],
         edited="In the volatile and aggregate ECC blocks, 'DRAM Uncorrectable' changed from 0 to 2 (2 lines); "
                "nothing else changed.",
         absent=["throttle_active", "remapped_rows_pending"]),
    dict(name="h100-pcie-degraded-edited", capture=H100_LOAD, verdict="WARN",
         **found_on_gpus("pcie_link_degraded"),
         description="1x H100 under load (100 % util) with the PCIe link at Gen4 x8 of Gen5 x16",
         edits=[value_edit("                Current                                : ", "5", "4"),
                value_edit("                Device Current                         : ", "5", "4"),
                value_edit("                Current                                : ", "16x", "8x")],
         edited="PCIe 'Current' and 'Device Current' generation changed from 5 to 4 and link width 'Current' from "
                "16x to 8x (3 lines); Max values and everything else unchanged.",
         absent=["throttle_active", "xid_fatal"]),
    dict(name="h100-load-hwslowdown-edited", capture=H100_LOAD, verdict="FAIL",
         **found_on_gpus("throttle_active"),
         description="1x H100 under load (100 % util, 629 W) with HW Slowdown and HW Power Brake Slowdown active",
         edits=[value_edit("        HW Slowdown                                    : ", "Not Active", "Active"),
                value_edit("            HW Power Brake Slowdown                    : ", "Not Active", "Active")],
         edited="'HW Slowdown' and 'HW Power Brake Slowdown' changed from Not Active to Active (2 lines); "
                "nothing else changed.",
         absent=["xid_fatal", "pcie_link_degraded"]),
    dict(name="8xh100-gpu-missing-edited", capture=H100_8X, verdict="FAIL", codes=["gpu_count_mismatch"],
         options={"expected_count": 8},
         description="8x H100 box where nvidia-smi sees only 7 GPUs",
         drop_last_gpu=True,
         edits=[value_edit("Attached GPUs                             : ", "8", "7")],
         edited="The last GPU section (GPU 00000000:DB:00.0 ... up to the end) removed and 'Attached GPUs' changed "
                "from 8 to 7; the other 7 GPU sections are unchanged.",
         absent=["throttle_active"]),
    # ---------------------------------------------------------------- healthy capture + real kernel log
    dict(name="xid79-fallen-off-bus", capture=H100_IDLE,
         kern_log="xid-logs/msg-only__xid-79__nvsentinel-155-comment.log", verdict="FAIL", codes=["xid_fatal"],
         description="healthy H100 capture, kernel log holds Xid 79 (GPU has fallen off the bus)"),
    dict(name="xid48-dbe", capture=H100_IDLE, kern_log="xid-logs/syslog__xid-48-dbe__TRUNCATED__gpu-operator-1146.log",
         verdict="FAIL", codes=["xid_fatal"],
         description="healthy H100 capture, syslog holds Xid 48 (uncorrectable double-bit ECC error)"),
    dict(name="xid13-gr-exception", capture=H100_IDLE, kern_log="xid-logs/dmesg-decode-iso__xid-13-43__gpud.log",
         verdict="WARN", codes=["xid_app_fault"], absent=["xid_fatal"],
         description="healthy H100 capture, dmesg --decode holds a burst of Xid 13 (+ Xid 43): application faults"),
    dict(name="xid31-mmu-fault", capture=H100_IDLE,
         kern_log="xid-logs/dmesg__xid-32-31-OLD-FORMAT-2015__bumblebee-677.log",
         verdict="WARN", codes=["xid_app_fault"], absent=["xid_fatal"],
         description="healthy H100 capture, dmesg holds Xid 32 + Xid 31 (MMU fault) in the old 2015 format"),
    dict(name="xid45-preemptive-removal", capture=H100_IDLE,
         kern_log="xid-logs/dmesg-ctime__xid-45-then-hung-task__gpud-pr117.log",
         verdict="WARN", codes=["xid_app_fault"], absent=["xid_fatal"],
         description="healthy H100 capture, dmesg -T holds Xid 45 (channels removed) followed by a hung-task trace"),
    dict(name="xid120-gsp-error", capture=H100_IDLE,
         kern_log="xid-logs/journalctl__xid-120-gsp-task-exception__575.51.02__open-gpu-kernel-modules-829.log",
         verdict="FAIL", codes=["xid_fatal"],
         description="healthy H100 capture, journal holds Xid 120 (GSP task exception, needs a GPU reset)"),
    dict(name="kernel-log-unreadable", capture=H100_IDLE, markers=["MARKER-kernel-log-unreadable"],
         verdict="WARN", codes=["kernel_log_unreadable"], absent=["xid_fatal"],
         description="healthy H100 capture, but dmesg/journalctl are refused (unprivileged container)"),
    # ---------------------------------------------------------------- nvidia-smi itself broken
    dict(name="no-driver", capture=None, markers=["MARKER-no-driver"], verdict="FAIL", codes=["driver_unavailable"],
         source=["errors/no-driver__nvidia-smi-has-failed__exit9.txt"],
         description="no NVIDIA driver: nvidia-smi prints 'NVIDIA-SMI has failed ...' and exits 9"),
    dict(name="driver-library-mismatch", capture=None, markers=["MARKER-driver-library-mismatch"], verdict="FAIL",
         codes=["driver_unavailable"], source=["errors/driver-library-mismatch__nvml-535.161__exit18.txt"],
         description="driver upgraded without reload: 'Failed to initialize NVML: Driver/library version mismatch', "
                     "exit 18"),
    dict(name="no-devices", capture=None, markers=["MARKER-no-devices"], verdict="FAIL",
         codes=["driver_unavailable"], source=["errors/no-devices-were-found__exit-UNVERIFIED.txt"],
         description="the driver answers but nvidia-smi finds no GPU: 'No devices were found' (exit 6, unverified)"),
    dict(name="hang", capture=H100_IDLE, markers=["MARKER-hang"], verdict="FAIL", codes=["nvidia_smi_timeout"],
         description="nvidia-smi never returns (driver stuck, as after Xid 45/119); the caller's timeout fires"),
]

MARKER_TEXT = {
    "MARKER-no-driver": "nvidia-smi answers like a box without the NVIDIA driver (exit 9).\n",
    "MARKER-driver-library-mismatch": "nvidia-smi answers 'Driver/library version mismatch' (exit 18).\n",
    "MARKER-hang": "nvidia-smi sleeps until it is killed.\n",
    "MARKER-no-devices": "nvidia-smi answers 'No devices were found' (exit 6).\n",
    "MARKER-kernel-log-unreadable": "fake dmesg/journalctl refuse to read the kernel log (exit 1).\n",
}


def _read(rel):
    with open(os.path.join(FIX, rel), "r", encoding="utf-8", newline="") as fh:
        return fh.read()


def build_capture(spec):
    """The capture text of a scenario (edits applied), or None."""
    if not spec.get("capture"):
        return None
    text = _read(spec["capture"])
    if spec.get("drop_last_gpu"):
        starts = [m.start() for m in re.finditer(r"^GPU [0-9A-Fa-f]{8}:", text, re.M)]
        text = text[:starts[-1]].rstrip("\n") + "\n"  # the capture ends with one newline after its last GPU
    for old, new, count in spec.get("edits", []):
        if text.count(old) != count:
            raise SystemExit("%s: expected %d x %r, found %d" % (spec["name"], count, old, text.count(old)))
        text = text.replace(old, new)
    if spec["capture"].endswith(".xml") and spec.get("edits"):
        text = text.replace("?>\n", "?>\n<!-- EDITED by tests/lab/gpu: %s -->\n" % spec["edited"], 1)
    return text


def _yaml_list(items):
    return "[" + ", ".join(items) + "]"


def _yaml_block(key, items):
    """A block list, one item a line, so that long file names stay within yamllint's line length."""
    items = list(items)
    if not items:
        return ["%s: []" % key]
    return ["%s:" % key] + ["  - %s" % item for item in items]


def expect_yml(spec):
    source = list(spec.get("source", []))
    if spec.get("capture"):
        source.insert(0, spec["capture"])
    if spec.get("kern_log"):
        source.append(spec["kern_log"])
    lines = ["---", "description: %s" % _q(spec["description"])]
    lines += _yaml_block("source", (_q(s) for s in source))
    lines += ["edited: %s" % (_q(spec["edited"]) if spec.get("edited") else "null"),
              "verdict: %s" % spec["verdict"],
              "codes: %s" % _yaml_list(spec["codes"])]
    if spec.get("gpu_codes"):
        lines.append("gpu_codes: {%s}" % ", ".join("%d: %s" % (k, _yaml_list(v))
                                                   for k, v in sorted(spec["gpu_codes"].items())))
    if spec.get("absent"):
        lines += _yaml_block("absent", spec["absent"])
    lines.append("options: {%s}" % ", ".join("%s: %s" % kv for kv in sorted(spec.get("options", {}).items())))
    return "\n".join(lines) + "\n"


def _q(s):
    return '"%s"' % s.replace("\\", "\\\\").replace('"', '\\"')


def scenario_files(spec):
    """{file name: bytes-as-str} of one scenario directory."""
    files = {"expect.yml": expect_yml(spec)}
    cap = build_capture(spec)
    if cap is not None:
        files["nvidia-smi-q.xml" if spec["capture"].endswith(".xml") else "nvidia-smi-q.txt"] = cap
    if spec.get("kern_log"):
        files["kern.log"] = _read(spec["kern_log"])
    for m in spec.get("markers", []):
        files[m] = MARKER_TEXT[m]
    return files


def main():
    names = set()
    for spec in SCENARIOS:
        assert bool(spec.get("edits") or spec.get("drop_last_gpu")) == bool(spec.get("edited")) \
            == spec["name"].endswith("-edited"), spec["name"]
        d = os.path.join(SCEN, spec["name"])
        if os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)
        for fname, content in scenario_files(spec).items():
            with open(os.path.join(d, fname), "w", encoding="utf-8", newline="") as fh:
                fh.write(content)
        names.add(spec["name"])
    for stale in set(os.listdir(SCEN)) - names:
        shutil.rmtree(os.path.join(SCEN, stale))
    print("built %d scenarios in %s" % (len(names), SCEN))


if __name__ == "__main__":
    main()
