# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_health main() end to end with fake nvidia-smi executables that replay real captures.

The fakes are real executables in tmp_path, so the module's subprocess path (argv, C locale, timeout) runs for
real. `-q -x` replays a capture byte for byte with the manifest's exit code; `--query-gpu=...` replays a real
all-fields capture of the same driver, projected onto the requested columns.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.remote_gpu.trainer.plugins.modules import gpu_health

NVIDIA = Path(__file__).resolve().parents[3] / "fixtures" / "nvidia"
MANIFEST = dict((entry["file"], entry) for entry in json.loads((NVIDIA / "manifest.json").read_text()))
HINT = "shutdown (power off in the AutoDL console)"
RESULT_KEYS = {"status", "gpus", "findings", "xid_events", "driver_version", "cuda_version", "samples",
               "environment_only"}

FAKE_SMI = '''#!{python}
import sys, time
FULL, FULL_RC, QUERY, SLEEP, REJECT = {full!r}, {full_rc!r}, {query!r}, {sleep!r}, {reject!r}
ALIASES = {{"clocks.sm": ["clocks.current.sm"],
           "clocks_throttle_reasons.active": ["clocks_throttle_reasons.active", "clocks_event_reasons.active"]}}
args = sys.argv[1:]
if SLEEP:
    time.sleep(SLEEP)
if args[:2] == ["-q", "-x"]:
    sys.stdout.write(open(FULL).read())
    sys.exit(FULL_RC)
if args and args[0].startswith("--query-gpu=") and REJECT and REJECT in args[0].split("=", 1)[1].split(","):
    # the lab emulator's wording (tests/lab/gpu/nvsmi_emu/cli.py); the corpus holds no real capture of it
    sys.stderr.write("nvidia-smi (lab emulator): field %r is not a valid field to query\\n" % REJECT)
    sys.exit(2)
if args and args[0].startswith("--query-gpu=") and QUERY:
    lines = open(QUERY).read().splitlines()
    header = [cell.split(" [")[0] for cell in lines[0].split(", ")]
    for line in lines[1:]:
        cells = line.split(", ")
        out = []
        for field in args[0].split("=", 1)[1].split(","):
            name = [n for n in ALIASES.get(field, [field]) if n in header][0]
            out.append(cells[header.index(name)])
        print(", ".join(out))
    sys.exit(0)
sys.exit(2)
'''


def make_exec(path, text):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


def fake_smi(tmp_path, full, query=None, sleep=0, reject=None):
    rc = MANIFEST[full]["exit_code"] or 0
    text = FAKE_SMI.format(python=sys.executable, full=str(NVIDIA / full), full_rc=rc,
                           query=str(NVIDIA / query) if query else None, sleep=sleep, reject=reject)
    return make_exec(tmp_path / "nvidia-smi", text)


def cat_smi(tmp_path, rel):
    """A shell script that cats an error capture and exits with the manifest's exit code."""
    rc = MANIFEST[rel]["exit_code"]
    return make_exec(tmp_path / "nvidia-smi", "#!/bin/sh\ncat '%s'\nexit %d\n" % (NVIDIA / rel, 255 if rc is None else rc))


def run_module(capsys, **args):
    args.setdefault("platform_stop_hint", HINT)
    args.setdefault("sample_seconds", 0)
    # default: a real kernel log without Xids
    quiet_log = NVIDIA / "xid-logs" / "dmesg__no-nvidia-adapter-probed-nouveau-conflict__mattshma-bigdata-133.log"
    args.setdefault("kernel_log", str(quiet_log))
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            gpu_health.main()
    result = json.loads(capsys.readouterr().out)
    assert RESULT_KEYS <= set(result)
    assert result["changed"] is False
    return exc.value.code, result


def codes(result):
    return sorted(set(f["code"] for f in result["findings"]))


RTX3090_XML = "xml/q-x__nvidia-geforce-rtx-3090__590.44.01__telegraf.xml"
# No XML capture exists for the H100 590.48.01 box; its `-q` text capture is replayed for `-q -x` (the module
# accepts either form) together with that box's --query-gpu capture.
H100_LOAD = ("q-text/q__nvidia-h100-80gb-hbm3__590.48.01__linux-x86_64.load.txt",
             "query-gpu/query-gpu-all-fields__nvidia-h100-80gb-hbm3__590.48.01__linux-x86_64.load.csv")


def test_healthy_h100_under_load_passes(tmp_path, capsys):
    smi = fake_smi(tmp_path, *H100_LOAD)
    rc, result = run_module(capsys, nvidia_smi_path=smi, sample_seconds=0.2, expected_count=1, expected_name="H100",
                            min_memory_mib=80000)
    assert rc == 0
    assert result["status"] == "PASS" and result["findings"] == []
    assert result["samples"] == 5
    assert (result["driver_version"], result["cuda_version"]) == ("590.48.01", "13.1")
    gpu = result["gpus"][0]
    assert (gpu["index"], gpu["name"], gpu["verdict"]) == (0, "NVIDIA H100 80GB HBM3", "PASS")
    assert result["xid_events"] == []


def test_rejected_query_field_is_dropped(tmp_path, capsys):
    smi = fake_smi(tmp_path, *H100_LOAD, reject="pcie.link.gen.max")
    rc, result = run_module(capsys, nvidia_smi_path=smi)
    assert rc == 0 and result["samples"] == 1 and result["status"] == "PASS"


def test_one_sample_when_sample_seconds_is_zero(tmp_path, capsys):
    smi = fake_smi(tmp_path, *H100_LOAD)
    assert run_module(capsys, nvidia_smi_path=smi)[1]["samples"] == 1


def test_sw_power_cap_xml_is_info_and_passes(tmp_path, capsys):
    # No --query-gpu capture of this RTX 3090 exists: a real single-GPU idle capture of an RTX 2080 SUPER stands
    # in for the samples (both idle, SW power cap active in both).
    smi = fake_smi(tmp_path, RTX3090_XML,
                   "query-gpu/query-gpu-all-fields__nvidia-geforce-rtx-2080-super__595.71.05__linux-x86_64.idle.csv")
    rc, result = run_module(capsys, nvidia_smi_path=smi)
    assert rc == 0
    assert result["status"] == "PASS"
    assert [(f["code"], f["level"]) for f in result["findings"]] == [("power_capped", "INFO")]


def test_remap_pending_fails_the_task_with_the_worst_message(tmp_path, capsys):
    smi = fake_smi(tmp_path, "xml/RECONSTRUCTED__q-x__nvidia-rtx-4000-sff-ada-generation__595.84__remap-pending-EDITED.xml")
    rc, result = run_module(capsys, nvidia_smi_path=smi)
    assert rc == 1 and result["failed"] is True
    assert result["status"] == "FAIL"
    assert "remapped_rows_pending" in codes(result)
    assert "GPU 0 (NVIDIA RTX 4000 SFF Ada Generation" in result["msg"] and HINT in result["msg"]
    assert result["gpus"][0]["verdict"] == "FAIL"
    assert result["samples"] == 0  # the fake rejects --query-gpu without a capture: sampling degrades


def test_fail_on_never_reports_only(tmp_path, capsys):
    smi = fake_smi(tmp_path, "q-text/q__8x-nvidia-h100-80gb-hbm3__535.161.08__gpud-hwslowdown-powerbrake.txt")
    rc, result = run_module(capsys, nvidia_smi_path=smi, fail_on="never")
    assert rc == 0 and result["status"] == "FAIL"
    assert [g["verdict"] for g in result["gpus"]] == ["FAIL"] * 8


def test_fail_on_warn(tmp_path, capsys):
    smi = fake_smi(tmp_path, *H100_LOAD)
    rc, result = run_module(capsys, nvidia_smi_path=smi, fail_on="WARN", kernel_log=str(tmp_path / "missing.log"))
    assert rc == 1 and result["status"] == "WARN"
    assert codes(result) == ["kernel_log_unreadable"]
    assert "kernel log unreadable" in result["msg"]


def test_xid_log_file_is_scanned(tmp_path, capsys):
    smi = fake_smi(tmp_path, *H100_LOAD)
    log = NVIDIA / "xid-logs" / "syslog__xid-48-dbe__TRUNCATED__gpu-operator-1146.log"
    rc, result = run_module(capsys, nvidia_smi_path=smi, kernel_log=str(log))
    assert rc == 1
    assert result["xid_events"][0]["xid"] == 48
    assert codes(result) == ["xid_fatal"]


@pytest.mark.parametrize("rel, kind", [
    ("errors/no-driver__nvidia-smi-has-failed__exit9.txt", "no_driver"),
    ("errors/driver-library-mismatch__nvml-535.161__exit18.txt", "driver_library_mismatch"),
    ("errors/nvml-no-supported-gpus__exit255.txt", "no_supported_gpus"),
    ("errors/command-not-found__sh__exit127.txt", "command_not_found"),
    ("errors/gpu-lost__device-handle__linux.txt", "gpu_lost"),
    ("errors/inforom-corrupted__table-then-WARNING__tesla-p100__470.82.01__exit14__DEINDENTED.txt",
     "inforom_corrupted"),
])
def test_nvidia_smi_errors_are_driver_unavailable(tmp_path, capsys, rel, kind):
    smi = cat_smi(tmp_path, rel)
    rc, result = run_module(capsys, nvidia_smi_path=smi)
    assert rc == 1 and result["status"] == "FAIL"
    found = [f for f in result["findings"] if f["code"] == "driver_unavailable"][0]
    assert found["error"] == kind and found["level"] == "FAIL"
    assert result["gpus"] == [] and result["driver_version"] is None
    assert HINT in result["msg"]


def test_missing_binary_is_driver_unavailable(tmp_path, capsys):
    rc, result = run_module(capsys, nvidia_smi_path=str(tmp_path / "no-such-nvidia-smi"))
    assert rc == 1
    assert codes(result) == ["driver_unavailable"]
    assert "Traceback" not in json.dumps(result)


def test_not_on_path_is_driver_unavailable(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(gpu_health.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: None)
    rc, result = run_module(capsys)
    assert rc == 1 and codes(result) == ["driver_unavailable"]


def test_hung_nvidia_smi_is_a_timeout_fail(tmp_path, capsys):
    smi = fake_smi(tmp_path, *H100_LOAD, sleep=30)
    rc, result = run_module(capsys, nvidia_smi_path=smi, timeout=1)
    assert rc == 1
    assert codes(result) == ["nvidia_smi_timeout"]
    assert "did not answer within 1 s" in result["msg"]


def test_auto_kernel_log_falls_back_to_dmesg(tmp_path, capsys, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    make_exec(bindir / "journalctl", "#!/bin/sh\nexit 1\n")
    log = NVIDIA / "xid-logs" / "dmesg-ctime__xid-13-109__gpud-pr46.log"
    make_exec(bindir / "dmesg", "#!/bin/sh\n[ \"$LC_ALL\" = C ] || exit 3\ncat '%s'\n" % log)
    monkeypatch.setenv("PATH", str(bindir) + os.pathsep + os.environ.get("PATH", ""))
    smi = fake_smi(tmp_path, *H100_LOAD)
    rc, result = run_module(capsys, nvidia_smi_path=smi, kernel_log="auto")
    assert [e["xid"] for e in result["xid_events"]] == [13, 13, 13, 109]
    assert "xid_fatal" in codes(result) and "kernel_log_unreadable" not in codes(result)


def test_auto_kernel_log_unreadable(tmp_path, capsys, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    make_exec(bindir / "journalctl", "#!/bin/sh\nexit 1\n")
    make_exec(bindir / "dmesg", "#!/bin/sh\nexit 1\n")
    monkeypatch.setenv("PATH", str(bindir) + os.pathsep + os.environ.get("PATH", ""))
    smi = fake_smi(tmp_path, *H100_LOAD)
    rc, result = run_module(capsys, nvidia_smi_path=smi, kernel_log="auto")
    assert rc == 0 and result["status"] == "WARN"
    assert codes(result) == ["kernel_log_unreadable"]


def test_bad_regex_is_a_clean_failure(tmp_path, capsys):
    smi = fake_smi(tmp_path, *H100_LOAD)
    rc, result = run_module(capsys, nvidia_smi_path=smi, expected_name="H100(")
    assert rc == 1 and "expected_name is not a valid regular expression" in result["msg"]


def test_check_mode_is_supported(tmp_path, capsys):
    smi = fake_smi(tmp_path, *H100_LOAD)
    rc, result = run_module(capsys, nvidia_smi_path=smi, _ansible_check_mode=True)
    assert rc == 0 and result["status"] == "PASS"


# environment_only: a box declared GPU-less (AutoDL's no-GPU mode). Only a GPU that is not there at all is
# environment-only; a GPU that is there but broken, a hung nvidia-smi and a box that was not declared so still FAIL.
@pytest.mark.parametrize("rel, kind", [
    ("errors/no-driver__nvidia-smi-has-failed__exit9.txt", "no_driver"),
    ("errors/no-devices-were-found__exit-UNVERIFIED.txt", "no_devices"),
    ("errors/command-not-found__sh__exit127.txt", "command_not_found"),
])
def test_declared_gpu_less_box_without_a_gpu_is_environment_only(tmp_path, capsys, rel, kind):
    smi = cat_smi(tmp_path, rel)
    log = NVIDIA / "xid-logs" / "syslog__xid-48-dbe__TRUNCATED__gpu-operator-1146.log"
    rc, result = run_module(capsys, nvidia_smi_path=smi, environment_only=True, expected_count=8,
                            kernel_log=str(log))
    assert rc == 0 and result["status"] == "PASS" and result["environment_only"] is True
    assert codes(result) == ["no_gpu_environment_only"]  # no count mismatch, no Xid of a GPU this box has not
    found = result["findings"][0]
    assert found["level"] == "INFO" and found["error"] == kind and "_error" not in found
    assert found["message"].startswith("no GPU: environment-only mode")
    # the same box, not declared GPU-less: the FAIL it always was
    rc, result = run_module(capsys, nvidia_smi_path=smi, expected_count=8, kernel_log=str(log))
    assert rc == 1 and result["environment_only"] is False and "driver_unavailable" in codes(result)
    assert "_error" not in json.dumps(result)


def test_declared_gpu_less_box_without_nvidia_smi_is_environment_only(tmp_path, capsys):
    rc, result = run_module(capsys, nvidia_smi_path=str(tmp_path / "no-such-nvidia-smi"), environment_only=True,
                            kernel_log=str(tmp_path / "missing.log"))
    assert rc == 0 and result["environment_only"] is True and codes(result) == ["no_gpu_environment_only"]


@pytest.mark.parametrize("rel", [
    "errors/driver-library-mismatch__nvml-535.161__exit18.txt",
    "errors/nvml-no-supported-gpus__exit255.txt",
    "errors/gpu-lost__device-handle__linux.txt",
])
def test_declared_gpu_less_box_with_a_broken_gpu_still_fails(tmp_path, capsys, rel):
    rc, result = run_module(capsys, nvidia_smi_path=cat_smi(tmp_path, rel), environment_only=True)
    assert rc == 1 and result["status"] == "FAIL" and result["environment_only"] is False
    assert "driver_unavailable" in codes(result) and "no_gpu_environment_only" not in codes(result)


def test_declared_gpu_less_box_with_gpus_is_judged_as_any_box(tmp_path, capsys):
    smi = fake_smi(tmp_path, *H100_LOAD)
    rc, result = run_module(capsys, nvidia_smi_path=smi, environment_only=True, kernel_log=str(tmp_path / "no.log"))
    assert result["environment_only"] is False and result["gpus"]
    assert "no_gpu_environment_only" not in codes(result)
    rc, result = run_module(capsys, nvidia_smi_path=fake_smi(tmp_path, *H100_LOAD, sleep=30), timeout=1,
                            environment_only=True)
    assert rc == 1 and codes(result) == ["nvidia_smi_timeout"] and result["environment_only"] is False
