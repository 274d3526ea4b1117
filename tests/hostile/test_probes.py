"""Hostile inputs for the probes of a box and their fleet table: gpu_health, env_audit, inode_check, vram_reaper and
the fleet_report action (see conftest.py for the three expected outcomes)."""

from __future__ import annotations

import os
import pathlib
import re
import time

import pytest

from hostile import Case, start

from ansible_collections.remote_gpu.trainer.plugins.action.fleet_report import ActionModule as FleetReport
from ansible_collections.remote_gpu.trainer.plugins.module_utils import procfs
from ansible_collections.remote_gpu.trainer.plugins.modules import (
    env_audit, gpu_health, inode_check, preflight_probe, vram_reaper)


def codes(result):
    return [item["code"] for item in result.get("findings", [])]


# ---------------------------------------------------------------------------------------------------------------
# gpu_health: nvidia-smi is a path that does not exist (driver_unavailable), so only the hostile part runs
# ---------------------------------------------------------------------------------------------------------------

def gpu(tmp, **extra):
    args = {"nvidia_smi_path": str(tmp / "no-nvidia-smi"), "kernel_log": str(tmp / "kern.log"), "fail_on": "never",
            "sample_seconds": 0}
    args.update(extra)
    return args


def fifo(tmp, name="kern.fifo"):
    path = tmp / name
    os.mkfifo(str(path))
    return str(path)


def sparse(tmp, size):
    path = tmp / "huge.log"
    with open(str(path), "wb") as handle:
        handle.truncate(size)
        handle.seek(size - 200)
        handle.write(b"\n[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n")
    return str(path)


def no_log_finding(result, _tmp):
    assert "kernel_log_unreadable" not in codes(result) and "driver_unavailable" in codes(result)


GPU_HEALTH = [
    Case("gpu_health: sample_seconds 1e12 (would sleep for millennia)", gpu_health,
         lambda tmp: gpu(tmp, sample_seconds=1e12), "error", "sample_seconds must be a number from 0 to 600"),
    Case("gpu_health: sample_seconds inf (OverflowError in time.sleep)", gpu_health,
         lambda tmp: gpu(tmp, sample_seconds="inf"), "error", "sample_seconds must be a number from 0 to 600"),
    Case("gpu_health: sample_seconds nan (passes every < and >)", gpu_health,
         lambda tmp: gpu(tmp, sample_seconds="nan"), "error", "sample_seconds must be a number from 0 to 600"),
    Case("gpu_health: sample_seconds -1", gpu_health,
         lambda tmp: gpu(tmp, sample_seconds=-1), "error", "sample_seconds"),
    Case("gpu_health: kernel_log /dev/zero (an unbounded read)", gpu_health,
         lambda tmp: gpu(tmp, kernel_log="/dev/zero"), "error", "is a character device, not a regular file",
         timeout=10),
    Case("gpu_health: kernel_log a FIFO nobody writes (a hang on open)", gpu_health,
         lambda tmp: gpu(tmp, kernel_log=fifo(tmp)), "error", "is a FIFO, not a regular file", timeout=10),
    Case("gpu_health: kernel_log a directory", gpu_health,
         lambda tmp: gpu(tmp, kernel_log=str(tmp)), "error", "is a directory, not a regular file"),
    Case("gpu_health: kernel_log empty", gpu_health,
         lambda tmp: gpu(tmp, kernel_log=""), "error", "kernel_log is empty"),
    Case("gpu_health: kernel_log a 4 GiB sparse file: only its tail is read, and its Xid found", gpu_health,
         lambda tmp: gpu(tmp, kernel_log=sparse(tmp, 4 * 1024 ** 3)), "ok",
         check=lambda result, tmp: no_log_finding(result, tmp) or [e["xid"] for e in result["xid_events"]] == [79],
         timeout=20),
    Case("gpu_health: kernel_log missing, with a newline and $(...) in its name: a WARN, nothing run", gpu_health,
         lambda tmp: gpu(tmp, kernel_log=str(tmp / "k\n$(touch pwned).log")), "ok",
         check=lambda result, tmp: "kernel_log_unreadable" in codes(result) and not (tmp / "pwned").exists()),
    Case("gpu_health: nvidia_smi_path /etc/passwd is a wrong parameter, not an unfit box", gpu_health,
         lambda tmp: gpu(tmp, nvidia_smi_path="/etc/passwd"), "error",
         "nvidia_smi_path /etc/passwd is not an executable file: fix the parameter"),
    Case("gpu_health: nvidia_smi_path a directory", gpu_health,
         lambda tmp: gpu(tmp, nvidia_smi_path=str(tmp)), "error", "is not an executable file"),
    Case("gpu_health: expected_name an invalid regular expression", gpu_health,
         lambda tmp: gpu(tmp, expected_name="H100(("), "error", "expected_name is not a valid regular expression"),
    Case("gpu_health: timeout 0", gpu_health, lambda tmp: gpu(tmp, timeout=0), "error", "timeout must be a positive"),
]


# ---------------------------------------------------------------------------------------------------------------
# env_audit: a cgroup hierarchy of our own (v2: cgroup.controllers at the root; v1: memory/ and cpu/)
# ---------------------------------------------------------------------------------------------------------------

def cgroup_v2(tmp, **files):
    root = tmp / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory\n")
    for name, text in files.items():
        (root / name.replace("_", ".")).write_text(text)
    return {"cgroup_root": str(root), "torch": False, "proxy_hook": ""}


def cgroup_v1(tmp, limit, quota, period):
    root = tmp / "cgroup"
    (root / "memory").mkdir(parents=True)
    (root / "cpu").mkdir()
    (root / "memory" / "memory.limit_in_bytes").write_text(limit)
    (root / "cpu" / "cpu.cfs_quota_us").write_text(quota)
    (root / "cpu" / "cpu.cfs_period_us").write_text(period)
    return {"cgroup_root": str(root), "torch": False}


def malformed(*names):
    def check(result, _tmp):
        found = [f for f in result["findings"] if f["code"] == "cgroup_malformed"]
        assert found and found[0]["level"] == "WARN", result["findings"]
        for name in names:
            assert name in found[0]["message"]
    return check


def not_audited(fragment):
    def check(result, _tmp):
        found = [f for f in result["findings"] if f["code"] == "cgroup_not_audited"]
        assert found and found[0]["level"] == "INFO" and fragment in found[0]["message"], result["findings"]
    return check


ENV_AUDIT = [
    Case("env_audit: memory.max holds garbage", env_audit,
         lambda tmp: cgroup_v2(tmp, memory_max="banana\n"), "ok", check=malformed("memory.max", "banana")),
    Case("env_audit: memory.max negative", env_audit,
         lambda tmp: cgroup_v2(tmp, memory_max="-4096\n"), "ok", check=malformed("memory.max")),
    Case("env_audit: cpu.max with a period of 0 (ZeroDivisionError)", env_audit,
         lambda tmp: cgroup_v2(tmp, cpu_max="200000 0\n"), "ok", check=malformed("cpu.max", "period of 0")),
    Case("env_audit: cpu.max of words", env_audit,
         lambda tmp: cgroup_v2(tmp, cpu_max="lots often\n"), "ok", check=malformed("cpu.max")),
    Case("env_audit: cpu.max with three fields", env_audit,
         lambda tmp: cgroup_v2(tmp, cpu_max="100000 100000 7\n"), "ok", check=malformed("cpu.max")),
    Case("env_audit: cgroup v1 with a garbage limit and a period of 0", env_audit,
         lambda tmp: cgroup_v1(tmp, "\x00\x01\n", "50000\n", "0\n"), "ok",
         check=malformed("memory.limit_in_bytes", "cpu.cfs_quota_us")),
    Case("env_audit: a limit of 2**75 means no limit, not an error", env_audit,
         lambda tmp: cgroup_v2(tmp, memory_max="%d\n" % 2 ** 75), "ok",
         check=lambda result, tmp: "cgroup_malformed" not in codes(result) and result["cgroup"]["memory_max"] is None),
    Case("env_audit: a missing cgroup_root says nothing was audited", env_audit,
         lambda tmp: {"cgroup_root": str(tmp / "absent"), "torch": False}, "ok",
         check=not_audited("is not a directory")),
    Case("env_audit: cgroup_root an empty directory says nothing was audited", env_audit,
         lambda tmp: {"cgroup_root": str(tmp), "torch": False}, "ok",
         check=not_audited("holds no cgroup v1 or v2 hierarchy")),
    Case("env_audit: torch_timeout 0", env_audit, {"torch_timeout": 0, "torch": True}, "error",
         "torch_timeout must be a positive number"),
    Case("env_audit: torch_timeout negative", env_audit, {"torch_timeout": -30}, "error",
         "torch_timeout must be a positive number"),
    Case("env_audit: proxy_hook with $(...) and a newline: reported missing, nothing run", env_audit,
         lambda tmp: {"proxy_hook": str(tmp / "hook\n$(touch pwned)"), "torch": False}, "error", "does not exist",
         check=lambda result, tmp: not (tmp / "pwned").exists()),
]


# ---------------------------------------------------------------------------------------------------------------
# inode_check
# ---------------------------------------------------------------------------------------------------------------

def storage(tmp, **extra):
    args = {"paths": [str(tmp)], "hf_cache": "", "top": 0}
    args.update(extra)
    return args


INODE_CHECK = [
    Case("inode_check: an empty paths entry (an unset profile variable)", inode_check,
         lambda tmp: storage(tmp, paths=[str(tmp), ""]), "error", "paths entry 2 is empty"),
    Case("inode_check: paths empty", inode_check, lambda tmp: storage(tmp, paths=[]), "error", "paths is empty"),
    Case("inode_check: a negative byte budget", inode_check,
         lambda tmp: storage(tmp, budgets=[{"path": str(tmp), "bytes": -1}]), "error", "bytes must be 0 or more"),
    Case("inode_check: a negative inode budget", inode_check,
         lambda tmp: storage(tmp, budgets=[{"path": str(tmp), "inodes": -10 ** 12}]), "error",
         "inodes must be 0 or more"),
    Case("inode_check: a budget with an empty path", inode_check,
         lambda tmp: storage(tmp, budgets=[{"path": "", "bytes": 1}]), "error", "has an empty path"),
    Case("inode_check: warn_pct above fail_pct", inode_check,
         lambda tmp: storage(tmp, warn_pct=99, fail_pct=50), "error", "0 < warn_pct <= fail_pct <= 100"),
    Case("inode_check: a negative warn_pct", inode_check,
         lambda tmp: storage(tmp, warn_pct=-5), "error", "0 < warn_pct <= fail_pct <= 100"),
    Case("inode_check: fail_pct 1000", inode_check,
         lambda tmp: storage(tmp, fail_pct=1000), "error", "0 < warn_pct <= fail_pct <= 100"),
    Case("inode_check: top absurdly large", inode_check,
         lambda tmp: storage(tmp, top=10 ** 9), "error", "top must be from 0 to 1000"),
    Case("inode_check: top negative", inode_check, lambda tmp: storage(tmp, top=-1), "error",
         "top must be from 0 to 1000"),
    Case("inode_check: hf_cache_warn_gib negative", inode_check,
         lambda tmp: storage(tmp, hf_cache="~/.cache/huggingface", hf_cache_warn_gib=-1), "error",
         "hf_cache_warn_gib must be 0 or more"),
    Case("inode_check: a FIFO as a path is reported, never opened", inode_check,
         lambda tmp: storage(tmp, paths=[fifo(tmp, "tier")], top=5, fail_on="never"), "ok", timeout=10,
         check=lambda result, tmp: result["paths"][0]["exists"] is True and result["paths"][0]["top"] == []),
    Case("inode_check: a path starting with a dash is a path, not an option", inode_check,
         lambda tmp: storage(tmp, paths=["-rf"]), "error", "-rf does not exist",
         check=lambda result, tmp: tmp.exists()),
]


# ---------------------------------------------------------------------------------------------------------------
# vram_reaper: every case is a dry run or holds only files of its own test
# ---------------------------------------------------------------------------------------------------------------

def hold(path, mode="<"):
    """A process of this test holding ``path`` open (bash redirection ``mode``)."""
    proc = start(["bash", "-c", 'exec 3%s"$0"; exec sleep 120' % mode, str(path)])
    deadline = time.time() + 10
    while time.time() < deadline and not any(target == str(path) for _fd, target in procfs.fd_entries(proc.pid)):
        time.sleep(0.05)
    return proc


def reaper(tmp, **extra):
    args = {"min_age": 0, "kill_grace": 1, "timeout": 5}
    args.update(extra)
    return args


def _held_args(tmp, path, holder):
    """force and allow_unverified: on a code that counted such a file, the holder (a process of this test) dies."""
    (tmp / "holder.pid").write_text(str(holder.pid))
    return reaper(tmp, device_glob=str(path.parent / (path.name[:6] + "*")), force=True, allow_unverified=True,
                  signal="KILL")


def held_regular_file(tmp):
    path = tmp / "nvidia0"
    path.write_text("")
    return _held_args(tmp, path, hold(path))


def held_fifo(tmp):
    path = tmp / "nvidia-fifo"
    os.mkfifo(str(path))
    holder = hold(path, "<>")
    return _held_args(tmp, path, holder)


def untouched(result, tmp):
    pid = int((tmp / "holder.pid").read_text())
    listed = [row["pid"] for row in result["candidates"] + result["passed_over"]]
    assert pid not in listed and result["killed"] == [] and procfs.pid_exists(pid)


def dev_null_holder(tmp):
    hold("/dev/null")
    return reaper(tmp, device_glob="/dev/null")  # a dry run: never force on a glob that may match other processes


VRAM_REAPER = [
    Case("vram_reaper: device_glob empty", vram_reaper, lambda tmp: reaper(tmp, device_glob=""), "error",
         "device_glob is empty"),
    Case("vram_reaper: device_glob blank", vram_reaper, lambda tmp: reaper(tmp, device_glob="  "), "error",
         "device_glob is empty"),
    Case("vram_reaper: device_glob relative", vram_reaper, lambda tmp: reaper(tmp, device_glob="nvidia*"), "error",
         "is not absolute"),
    Case("vram_reaper: /dev/null as the glob lists no shell", vram_reaper, dev_null_holder, "ok",
         check=lambda result, tmp: result["candidates"] == [] and result["passed_over"] == []),
    Case("vram_reaper: a regular file held open never makes a process killable", vram_reaper, held_regular_file,
         "ok", check=untouched),
    Case("vram_reaper: a FIFO held open never makes a process killable", vram_reaper, held_fifo, "ok",
         check=untouched),
    Case("vram_reaper: min_age negative", vram_reaper, lambda tmp: reaper(tmp, min_age=-1), "error",
         "min_age must be 0 or more"),
    Case("vram_reaper: kill_grace negative", vram_reaper, lambda tmp: reaper(tmp, kill_grace=-5), "error",
         "kill_grace must be 0 or more"),
    Case("vram_reaper: a protect_pid_files entry that does not exist", vram_reaper,
         lambda tmp: reaper(tmp, protect_pid_files=[str(tmp / "job.pid")], force=True), "error",
         "protect_pid_files"),
    Case("vram_reaper: a protect_pid_files entry holding garbage", vram_reaper,
         lambda tmp: (tmp / "job.pid").write_text("1; rm -rf /\n") and reaper(
             tmp, protect_pid_files=[str(tmp / "job.pid")], force=True), "error", "holds no PID"),
]


# ---------------------------------------------------------------------------------------------------------------
# fleet_report: the rows come from results registered on the hosts, which may be anything
# ---------------------------------------------------------------------------------------------------------------

PREFLIGHT_VARS = {"inode_check": "storage", "gpu_health": "gpu", "env_audit": "env"}
GOOD = {"changed": False, "status": "PASS", "findings": []}


def preflight_vars(**results):
    host = {"trainer_profile": "autodl", "storage": dict(GOOD, paths=[]), "gpu": dict(GOOD, gpus=[]), "env": GOOD}
    host.update(results)
    return {"ansible_play_hosts_all": ["box1"], "hostvars": {"box1": host}}


def patrol_vars(probe):
    return {"ansible_play_hosts_all": ["box1"],
            "hostvars": {"box1": {"trainer_profile": "autodl", "trainer_data_dir": "/data", "probe": probe}}}


def job(**extra):
    entry = {"name": "train", "exists": True, "alive": True, "items_total": 3, "items_done": 1,
             "progress": {"unit": "epoch", "value": 4, "total": 10}, "log_age_seconds": 30}
    entry.update(extra)
    return entry


def patrol(tmp, **extra):
    args = {"kind": "patrol", "result_vars": {"job_status": "probe"}, "fail_run": False,
            "prom_path": str(tmp / "trainer.prom")}
    args.update(extra)
    return args


SAMPLE = re.compile(r'^[a-z_]+\{[^}]*\} -?[0-9.e+]+$')


def row_and_prom(fragment):
    def check(result, tmp):
        row = result["rows"][0]
        assert fragment in row["line"], row["line"]
        for line in (tmp / "trainer.prom").read_text().splitlines():
            assert line.startswith("#") or SAMPLE.match(line), line
    return check


def malformed_row(result, _tmp):
    assert result["rows"][0]["verdict"] == "FAIL"
    assert "malformed_result" in [f["code"] for f in result["rows"][0]["findings"]]


FLEET_REPORT = [
    Case("fleet_report: a host in hosts that is not in the inventory", FleetReport,
         {"result_vars": PREFLIGHT_VARS, "hosts": ["box1", "lab-98"]}, "error",
         "hosts names 'lab-98', not in the inventory", task_vars=preflight_vars()),
    Case("fleet_report: an empty host name in hosts", FleetReport,
         {"result_vars": PREFLIGHT_VARS, "hosts": [""]}, "error", "not in the inventory", task_vars=preflight_vars()),
    Case("fleet_report: findings that are not mappings", FleetReport,
         {"result_vars": PREFLIGHT_VARS}, "error", "malformed_result",
         task_vars=preflight_vars(gpu=dict(GOOD, gpus=[], findings=["FAIL: hot", 3, None]))),
    Case("fleet_report: findings that are a string", FleetReport,
         {"result_vars": PREFLIGHT_VARS, "fail_run": False}, "ok", check=malformed_row,
         task_vars=preflight_vars(env=dict(GOOD, findings="FAIL"))),
    Case("fleet_report: a finding whose level is a list", FleetReport,
         {"result_vars": PREFLIGHT_VARS, "fail_run": False}, "ok", check=malformed_row,
         task_vars=preflight_vars(storage=dict(GOOD, paths=[], findings=[{"level": ["FAIL"], "code": "x"}]))),
    Case("fleet_report: a FAIL finding without code or message still names its host", FleetReport,
         {"result_vars": PREFLIGHT_VARS}, "error", "1 host(s) not fit: box1: FAIL",
         task_vars=preflight_vars(gpu=dict(GOOD, gpus=[], findings=[{"level": "FAIL"}]))),
    Case("fleet_report: gpus and paths that are not lists of mappings", FleetReport,
         {"result_vars": PREFLIGHT_VARS, "fail_run": False}, "ok",
         check=lambda result, tmp: result["rows"][0]["gpus"] == "-" and result["rows"][0]["verdict"] == "PASS",
         task_vars=preflight_vars(gpu=dict(GOOD, gpus="8x H100"), storage=dict(GOOD, paths=["/data", 5]))),
    Case("fleet_report: non-numeric progress", FleetReport, patrol, "ok", check=row_and_prom("epoch ?"),
         task_vars=patrol_vars(dict(GOOD, jobs=[job(progress={"unit": "epoch", "value": "four", "text": "e4"})]))),
    Case("fleet_report: non-numeric items, exit code and log age", FleetReport,
         patrol, "ok", check=row_and_prom("train GONE"),
         task_vars=patrol_vars(dict(GOOD, jobs=[job(alive=False, items_total="3", items_done="x",
                                                    last_exit_code="137", log_age_seconds="old")]))),
    Case("fleet_report: progress that is a list, a NaN log age and a string crash count", FleetReport,
         patrol, "ok", check=row_and_prom("train ALIVE"),
         task_vars=patrol_vars(dict(GOOD, jobs=[job(progress=[1, 2], log_age_seconds=float("nan"),
                                                    crash_marker_count="many")]))),
    Case("fleet_report: jobs that are not mappings", FleetReport, patrol, "ok",
         check=malformed_row, task_vars=patrol_vars(dict(GOOD, jobs=["train", 7]))),
    Case("fleet_report: gpus and oom counters of the wrong type in a patrol", FleetReport, patrol,
         "ok", check=row_and_prom("gpu -"),
         task_vars=patrol_vars(dict(GOOD, jobs=[job()], gpus=["GPU0"], oom_kills="none"))),
    Case("fleet_report: report_path is a directory", FleetReport,
         lambda tmp: {"result_vars": PREFLIGHT_VARS, "report_path": str(tmp)}, "error", "cannot write the report",
         task_vars=preflight_vars()),
    Case("fleet_report: prom_path that node_exporter would not read", FleetReport,
         lambda tmp: patrol(tmp, prom_path=str(tmp / "trainer.txt")), "error", "must end in .prom",
         task_vars=patrol_vars(GOOD)),
]


# ---------------------------------------------------------------------------------------------------------------
# preflight_probe: every hostile input of the three checks, given as that check's suboptions (the others benign).
# A wrong parameter is refused naming its check; what a check survives alone, it survives inside the probe.
# ---------------------------------------------------------------------------------------------------------------

LAB_GPU = pathlib.Path(__file__).resolve().parents[1] / "lab" / "gpu"


def healthy_gpu(tmp):
    """An nvidia-smi that is the lab's emulator replaying an idle H100 (a real capture)."""
    path = tmp / "healthy-nvidia-smi"
    path.write_text("#!/bin/sh\nFAKE_GPU_SCENARIO='%s' exec '%s' \"$@\"\n" % (
        LAB_GPU / "scenarios" / "h100-idle", LAB_GPU / "bin" / "nvidia-smi"))
    path.chmod(0o755)
    return str(path)


PROBE_SECTIONS = {gpu_health: ("gpu", "gpu_health"), env_audit: ("env", "env_audit"),
                  inode_check: ("storage", "inode_check")}


def in_probe(case):
    section, key = PROBE_SECTIONS[case.target]

    def args(tmp):
        own = dict(case.args(tmp) if callable(case.args) else case.args)
        fail_on = own.pop("fail_on", "FAIL")
        params = {"storage": {"paths": [str(tmp)], "top": 0, "hf_cache": ""},
                  "gpu": {"nvidia_smi_path": str(tmp / "no-nvidia-smi"), "kernel_log": str(tmp / "no-kern.log"),
                          "sample_seconds": 0},
                  "env": {"torch": False, "cgroup_root": str(tmp / "no-cgroup")}, "fail_on": fail_on}
        if section != "gpu":  # a healthy GPU (a box without nvidia-smi is a FAIL, whose message would come first)
            params["gpu"]["nvidia_smi_path"] = healthy_gpu(tmp)
        params[section] = own
        return params

    def check(result, tmp):
        if case.expect == "error" and result.get(key) is None:  # a wrong parameter, not a finding
            assert result["msg"].startswith(section + ": "), result["msg"]
        own = result[key] if result.get(key) is not None else result
        return case.check(own, tmp) if case.check else True

    return Case("preflight_probe, " + case.name, preflight_probe, args, case.expect, case.fragment, check, case.timeout)


PREFLIGHT_PROBE = [in_probe(case) for case in GPU_HEALTH + ENV_AUDIT + INODE_CHECK]


# every table of this sweep, one test: each case's name starts with its module (``-k gpu_health`` selects one)
CASES = PREFLIGHT_PROBE + GPU_HEALTH + ENV_AUDIT + INODE_CHECK + VRAM_REAPER + FLEET_REPORT


@pytest.mark.parametrize("case", CASES, ids=str)
def test_probes(case, hostile):
    hostile(case)


def test_the_sweep_is_big_enough():
    assert len(GPU_HEALTH + ENV_AUDIT + INODE_CHECK + VRAM_REAPER + FLEET_REPORT) >= 40
