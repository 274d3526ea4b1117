from __future__ import annotations

import os
import subprocess

from ansible_collections.remote_gpu.trainer.plugins.module_utils import procfs


def test_parse_stat_survives_spaces_and_parentheses_in_the_name():
    # A real line shape: field 2 is "(comm)", field 22 the start time in ticks.
    text = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 98765 1234 56 18446744073709551615"
    stat = procfs.parse_stat(text)
    assert stat["pid"] == 4242 and stat["comm"] == "my (odd) name"
    assert stat["state"] == "S" and stat["ppid"] == 1 and stat["pgrp"] == 4242 and stat["session"] == 4242
    assert stat["starttime"] == 98765
    assert procfs.parse_stat("garbage") is None
    assert procfs.parse_stat("") is None


def test_uptime_uid_cmdline_and_age():
    assert procfs.parse_uptime("350735.47 234388.90\n") == 350735.47
    assert procfs.parse_uptime("") is None
    assert procfs.parse_status_uid("Name:\tbash\nUid:\t1000\t1000\t1000\t1000\n") == 1000
    assert procfs.parse_status_uid("Name: x\n") is None
    assert procfs.parse_cmdline(b"python\0-m\0train\0") == ["python", "-m", "train"]
    assert procfs.parse_cmdline(b"") == []
    assert procfs.age_seconds(1000, 110.0, 100) == 100.0
    assert procfs.age_seconds(None, 110.0, 100) is None
    assert procfs.user_name(0) == "root"
    assert procfs.user_name(987654) == "987654"


def test_live_process_readers():
    stat = procfs.read_stat(os.getpid())
    assert stat["pid"] == os.getpid() and stat["ppid"] == os.getppid()
    assert procfs.pid_exists(os.getpid())
    assert procfs.is_same_process(os.getpid(), stat["starttime"])
    assert not procfs.is_same_process(os.getpid(), stat["starttime"] + 1)  # a reused PID has another start time
    assert procfs.read_cmdline(os.getpid())
    assert procfs.process_age(os.getpid()) >= 0
    assert procfs.read_stat(2 ** 22 + 1) is None


def test_tree_ancestors_and_groups_are_pure():
    stats = {
        1: {"ppid": 0, "pgrp": 1, "state": "S"},
        10: {"ppid": 1, "pgrp": 10, "state": "S"},
        11: {"ppid": 10, "pgrp": 10, "state": "S"},
        12: {"ppid": 11, "pgrp": 10, "state": "Z"},
        20: {"ppid": 1, "pgrp": 20, "state": "S"},
    }
    assert procfs.descendants(10, stats) == {10, 11, 12}
    assert procfs.ancestors(12, stats) == [11, 10, 1]
    assert procfs.group_members(10, stats) == [10, 11]


def test_a_real_child_is_in_our_tree():
    child = subprocess.Popen(["sleep", "30"])
    try:
        stats = procfs.all_stats()
        assert child.pid in procfs.descendants(os.getpid(), stats)
        assert os.getpid() in procfs.ancestors(child.pid, stats)
    finally:
        child.kill()
        child.wait()


def test_holders_finds_a_real_process_with_the_file_open(tmp_path):
    device = tmp_path / "nvidia0"
    device.write_text("")
    other = tmp_path / "other"
    other.write_text("")
    holder = subprocess.Popen(["bash", "-c", 'exec 3<"$1"; exec sleep 60', "x", str(device)])
    try:
        for _attempt in range(50):
            found, _unreadable = procfs.holders(str(tmp_path / "nvidia*"))
            if holder.pid in found:
                break
            subprocess.run(["sleep", "0.1"], check=True)
        assert found[holder.pid] == [str(device)]
        assert procfs.match_targets(["/dev/nvidia0", "/dev/null", "/dev/nvidiactl"], "/dev/nvidia*") == [
            "/dev/nvidia0", "/dev/nvidiactl"]
    finally:
        holder.kill()
        holder.wait()


def test_rss_from_status():
    assert procfs.parse_status_rss_kib("Name:\tpython\nVmRSS:\t  123456 kB\nThreads: 4\n") == 123456
    assert procfs.parse_status_rss_kib("Name:\tkthreadd\n") is None
    assert procfs.read_rss_kib(os.getpid()) > 0
    assert procfs.read_rss_kib(2 ** 22 + 7) is None  # above pid_max: cannot exist
