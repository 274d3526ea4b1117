"""module_utils/vram_reaper.py: when "not listed by nvidia-smi" can be trusted, and which holders are candidates."""

from __future__ import annotations

import os
import stat

from ansible_collections.remote_gpu.trainer.plugins.module_utils import procfs
from ansible_collections.remote_gpu.trainer.plugins.module_utils import vram_reaper as reaper


def test_visibility_rules():
    assert reaper.visibility({5}, {5, 6}, None, []) == (False, None)
    unverified, reason = reaper.visibility({10291}, {5, 6}, None, [])
    assert unverified and "10291" in reason
    assert reaper.visibility(set(), {5}, None, [".dockerenv"])[0] is True
    assert reaper.visibility(set(), {5}, None, []) == (False, None)  # bare metal, nothing listed: the U11 case
    assert reaper.visibility(set(), {5}, "nvidia-smi is not installed", [])[0] is True


def test_classify_holders_reasons():
    info = {
        1: {"user": "root", "comm": "init", "cmdline": ["/sbin/init"], "age": 9999, "devices": ["/dev/nvidia0"]},
        5: {"user": "root", "comm": "python", "cmdline": ["python", "train.py"], "age": 9999, "devices": []},
        6: {"user": "root", "comm": "python", "cmdline": ["python"], "age": 5, "devices": []},
        7: {"user": "bob", "comm": "python", "cmdline": ["python"], "age": 9999, "devices": []},
        8: {"user": "root", "comm": "nvidia-persiste", "cmdline": ["/usr/bin/nvidia-persistenced"], "age": 9999},
        9: {"user": "root", "comm": "python", "cmdline": ["python", "zombie.py"], "age": 9999, "devices": ["/dev/x"]},
        10: {"user": "root", "comm": "python", "cmdline": ["python"], "age": 9999, "devices": []},
        11: {"user": "root", "comm": "python", "cmdline": ["python"], "age": 9999, "devices": []},
    }
    candidates, skipped = reaper.classify_holders(
        info, visible={5}, guarded={1: "pid_1", 10: "protected"}, exclude_pids={11}, exclude_users={"bob"},
        exclude_commands=set(reaper.DEFAULT_EXCLUDE_COMMANDS), min_age=120)
    assert [(c["pid"], c["reason"]) for c in candidates] == [(9, "invisible_to_nvidia_smi")]
    assert candidates[0]["cmdline"] == "python zombie.py" and candidates[0]["devices"] == ["/dev/x"]
    assert {s["pid"]: s["reason"] for s in skipped} == {
        1: "pid_1", 5: "visible", 6: "young", 7: "excluded_user", 8: "excluded_command", 10: "protected",
        11: "excluded_pid"}


def test_container_hints_from_markers_and_pid_1_cgroup(tmp_path):
    (tmp_path / "proc" / "1").mkdir(parents=True)
    (tmp_path / "proc" / "1" / "cgroup").write_text("0::/\n")
    assert reaper.container_hints(str(tmp_path / "proc"), str(tmp_path)) == []
    (tmp_path / ".dockerenv").write_text("")
    (tmp_path / "proc" / "1" / "cgroup").write_text("0::/kubepods/besteffort/pod1\n")
    assert reaper.container_hints(str(tmp_path / "proc"), str(tmp_path)) == [
        ".dockerenv", "pid 1 cgroup mentions kubepods"]


# /proc/devices of an H100 box (driver 550): the driver's names all start with "nvidia"; "nvidia" also names no
# block device, and the other devices (mem = /dev/null's major 1, tty) are not the driver's
PROC_DEVICES_WITH_DRIVER = """Character devices:
  1 mem
  4 /dev/vc/0
  4 tty
  5 /dev/tty
 10 misc
195 nvidia
195 nvidia-modeset
195 nvidiactl
234 nvidia-nvswitch
235 nvidia-nvlink
236 nvidia-caps
237 nvidia-caps-imex-channels
510 nvidia-uvm

Block devices:
  7 loop
  8 sd
259 blkext
"""


def test_nvidia_majors_from_proc_devices():
    assert reaper.parse_nvidia_majors(PROC_DEVICES_WITH_DRIVER) == {195, 234, 235, 236, 237, 510}
    assert reaper.parse_nvidia_majors("Character devices:\n  1 mem\n\nBlock devices:\n259 nvidia-fake\n") == set()
    assert reaper.parse_nvidia_majors("") == set() and reaper.parse_nvidia_majors(None) == set()
    assert reaper.parse_nvidia_majors("garbage\nCharacter devices:\nx nvidia\n195\n") == set()


def test_is_gpu_device():
    chr_mode, reg_mode, fifo_mode = stat.S_IFCHR | 0o666, stat.S_IFREG | 0o644, stat.S_IFIFO | 0o600
    nvidia, dev_null = os.makedev(195, 0), os.makedev(1, 3)
    driver = {195, 510}
    assert reaper.is_gpu_device("/dev/nvidia0", chr_mode, nvidia, driver)
    assert not reaper.is_gpu_device("/dev/null", chr_mode, dev_null, driver)
    assert not reaper.is_gpu_device("/dev/nvidia0", chr_mode, dev_null, driver)  # a look-alike node
    assert not reaper.is_gpu_device("/dev/nvidia0", reg_mode, 0, driver)
    assert not reaper.is_gpu_device("/dev/nvidia0", fifo_mode, 0, driver)
    # no driver loaded: only character devices with the driver's node names (an emulated GPU)
    assert reaper.is_gpu_device("/dev/nvidia0", chr_mode, dev_null, set())
    assert reaper.is_gpu_device("/dev/nvidia-caps/nvidia-cap1", chr_mode, dev_null, set())
    assert not reaper.is_gpu_device("/dev/null", chr_mode, dev_null, set())
    assert not reaper.is_gpu_device("/tmp/nvidia0", chr_mode, dev_null, set())
    assert not reaper.is_gpu_device("/dev/nvidia0", reg_mode, 0, set())


# ---------------------------------------------------------------------------------------------------------------
# The process trees of live jobs
# ---------------------------------------------------------------------------------------------------------------

def stat_map(parents):
    """A {pid: stat} map from {pid: ppid}, as procfs.all_stats() gives."""
    return {pid: {"pid": pid, "ppid": ppid, "pgrp": pid, "state": "S", "starttime": 1} for pid, ppid in parents.items()}


def test_tree_guard_protects_the_workers_and_the_launcher_of_a_listed_process():
    # init 1 -> sshd 10 -> torchrun 20 -> python 30 (listed) -> DataLoader workers 31, 32 -> 33 (a worker's child)
    # init 1 -> 40, the orphaned worker of a crashed run (its parent died, it was re-parented to init)
    # init 1 -> job wrapper 50 -> python 51 -> worker 52; 60 -> 61, a tree of protect_pids
    stats = stat_map({1: 0, 10: 1, 20: 10, 30: 20, 31: 30, 32: 30, 33: 31, 40: 1, 50: 1, 51: 50, 52: 51, 60: 1,
                      61: 60})
    guarded = reaper.tree_guard(stats, visible=[30], jobs=[50], protected=[60])
    assert {pid: guarded[pid] for pid in (31, 32, 33, 20, 10)} == dict.fromkeys((31, 32, 33, 20, 10), "visible_tree")
    assert 30 not in guarded  # the listed process keeps its own reason, "visible"
    assert {pid: guarded[pid] for pid in (50, 51, 52)} == dict.fromkeys((50, 51, 52), "job_tree")
    assert guarded[60] == guarded[61] == "protected"
    assert 40 not in guarded  # the classic zombie stays reapable
    assert reaper.tree_guard(stats) == {}


def test_a_listed_host_pid_that_is_not_in_this_namespace_guards_nothing():
    assert reaper.tree_guard(stat_map({1: 0, 5: 1}), visible=[10291]) == {}


def test_job_roots_are_the_live_jobs_of_the_run_directory(tmp_path):
    me = procfs.read_stat(os.getpid())
    live = tmp_path / "train"
    live.mkdir()
    (live / "job.pid").write_text("%d\n" % os.getpid())
    (live / "job.starttime").write_text("%d\n" % me["starttime"])
    no_starttime = tmp_path / "early"  # the wrapper wrote its PID, not yet its start time
    no_starttime.mkdir()
    (no_starttime / "job.pid").write_text("%d\n" % os.getppid())
    reused = tmp_path / "old"  # a stale file whose PID now names another process
    reused.mkdir()
    (reused / "job.pid").write_text("%d\n" % os.getpid())
    (reused / "job.starttime").write_text("%d\n" % (me["starttime"] + 1))
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "job.pid").write_text("1; rm -rf /\n")
    (tmp_path / "not-a-job").write_text("")
    assert sorted(reaper.job_roots(str(tmp_path))) == sorted([os.getpid(), os.getppid()])
    assert reaper.job_roots(str(tmp_path / "absent")) == []


# ---------------------------------------------------------------------------------------------------------------
# The idle gate
# ---------------------------------------------------------------------------------------------------------------

# /proc/driver/nvidia/gpus/0000:00:04.0/information of a Colab K80, as published (its tabs kept)
K80_INFORMATION = ("Model: \t\t Tesla K80\nIRQ:   \t\t 33\nGPU UUID: \t GPU-c6398fd0-9366-8e15-5d6a-369da852f85b\n"
                   "Video BIOS: \t 80.21.25.00.02\nBus Type: \t PCI\nDMA Size: \t 40 bits\nDMA Mask: \t 0xffffffffff\n"
                   "Bus Location: \t 0000:00:04.0\nDevice Minor: \t 0\nBlacklisted:\t No\n")


def test_device_minor_and_bus_ids():
    assert reaper.parse_device_minor(K80_INFORMATION) == 0
    assert reaper.parse_device_minor(K80_INFORMATION.replace("Minor: \t 0", "Minor: \t 7")) == 7
    assert reaper.parse_device_minor("") is None and reaper.parse_device_minor(None) is None
    assert reaper.norm_bus_id("00000000:83:00.0") == reaper.norm_bus_id("0000:83:00.0") == "0000:83:00.0"
    assert reaper.norm_bus_id("00000000:0B:00.0") == "0000:0b:00.0"
    assert reaper.norm_bus_id("garbage") is None and reaper.norm_bus_id(None) is None


def test_driver_minors_from_the_drivers_proc_directory(tmp_path):
    for bus, minor in (("0000:07:00.0", 2), ("0000:48:00.0", 0)):  # minors need not follow the bus order
        (tmp_path / bus).mkdir()
        (tmp_path / bus / "information").write_text(K80_INFORMATION.replace("Minor: \t 0", "Minor: \t %d" % minor))
    (tmp_path / "junk").mkdir()
    assert reaper.driver_minors(str(tmp_path)) == {2: "0000:07:00.0", 0: "0000:48:00.0"}
    assert reaper.driver_minors(str(tmp_path / "absent")) == {}


def reading(*utils):
    buses = ["00000000:07:00.0", "00000000:48:00.0"]
    return [{"index": i, "bus_id": buses[i], "utilization_pct": util} for i, util in enumerate(utils)]


def test_peak_utilization_keeps_the_highest_reading_and_unknown_wins():
    peaks = reaper.peak_utilization([reading(0, 3), reading(97, 1), reading(0, None)])
    assert peaks == [{"index": 0, "bus_id": "0000:07:00.0", "peak_pct": 97},
                     {"index": 1, "bus_id": "0000:48:00.0", "peak_pct": None}]
    assert reaper.peak_utilization([]) == []


def candidate(pid, *devices):
    return {"pid": pid, "devices": list(devices), "reason": "invisible_to_nvidia_smi"}


def test_idle_gate_holds_back_candidates_on_a_busy_or_unknown_gpu():
    gpus = reaper.peak_utilization([reading(0, 97)])  # GPU 0 (bus 07, minor 2) idle, GPU 1 (bus 48, minor 0) busy
    minors = {2: "0000:07:00.0", 0: "0000:48:00.0"}
    rows = [candidate(5, "/dev/nvidia2", "/dev/nvidiactl"), candidate(6, "/dev/nvidia0"),
            candidate(7, "/dev/nvidiactl", "/dev/nvidia-uvm"), candidate(8, "/dev/nvidia9")]
    kill, held = reaper.idle_gate(rows, gpus, minors, 5)
    assert [(row["pid"], row["gpu_peak_pct"]) for row in kill] == [(5, 0)]
    # 6 is on the busy GPU; 7 holds no GPU node and 8 one that matches no GPU, so each may use any GPU
    assert [(row["pid"], row["reason"], row["gpu_peak_pct"]) for row in held] == [
        (6, "gpu_busy", 97), (7, "gpu_busy", 97), (8, "gpu_busy", 97)]
    assert reaper.idle_gate(rows, gpus, minors, 97)[1] == []  # at the threshold is idle
    # without the driver's minors (a container, the lab) every candidate is on every GPU
    assert [row["pid"] for row in reaper.idle_gate(rows, gpus, {}, 5)[0]] == []
    assert [row["pid"] for row in reaper.idle_gate(rows, reaper.peak_utilization([reading(1, 2)]), {}, 5)[0]] == [
        5, 6, 7, 8]


def test_idle_gate_without_a_value_kills_nothing():
    rows = [candidate(5, "/dev/nvidia0")]
    kill, held = reaper.idle_gate(rows, reaper.peak_utilization([reading(None)]), {}, 5)
    assert kill == [] and held[0]["reason"] == "gpu_util_unknown" and held[0]["gpu_peak_pct"] is None
    kill, held = reaper.idle_gate(rows, [], {}, 5)  # nothing sampled at all
    assert kill == [] and held[0]["reason"] == "gpu_util_unknown"
