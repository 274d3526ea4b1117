"""module_utils/vram_reaper.py: when "not listed by nvidia-smi" can be trusted, and which holders are candidates."""

from __future__ import annotations

import os
import stat

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
