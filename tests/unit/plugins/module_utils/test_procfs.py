from __future__ import annotations

import os
import subprocess

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import procfs

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "nvidia", "compute-apps")


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


@pytest.mark.parametrize("name", sorted(n for n in os.listdir(FIXTURES) if n.startswith("query-compute-apps")))
def test_parse_compute_apps_on_the_real_captures(name):
    with open(os.path.join(FIXTURES, name), newline="") as handle:
        text = handle.read()
    rows = procfs.parse_compute_apps(text)
    data_lines = [line for line in text.splitlines()[1:] if line.strip()]
    assert len(rows) == len(data_lines)
    for row in rows:
        assert row["pid"] > 0 and row["process_name"]


def test_parse_compute_apps_h200_load_values():
    with open(os.path.join(FIXTURES, "query-compute-apps__nvidia-h200__590.48.01__linux-x86_64.load.csv")) as handle:
        rows = procfs.parse_compute_apps(handle.read())
    assert [(r["pid"], r["used_memory_mib"], r["process_name"]) for r in rows] == [
        (10291, 2566, "/root/tools/memhog"), (10293, 1542, "/root/tools/memhog"), (10309, 28234, "./gpu_burn")]


def test_parse_compute_apps_noheader_with_a_comma_in_the_name():
    # Our own query order (pid, used_memory, process_name), noheader, nounits; names may contain commas.
    rows = procfs.parse_compute_apps("4123, 30512, python train.py --tags a,b\n77, [N/A], C:\\x\\app.exe\n")
    assert rows == [{"pid": 4123, "used_memory_mib": 30512, "process_name": "python train.py --tags a, b"},
                    {"pid": 77, "used_memory_mib": None, "process_name": "C:\\x\\app.exe"}]
    assert procfs.parse_compute_apps("") == []


def test_visibility_rules():
    assert procfs.visibility({5}, {5, 6}, None, []) == (False, None)
    unverified, reason = procfs.visibility({10291}, {5, 6}, None, [])
    assert unverified and "10291" in reason
    assert procfs.visibility(set(), {5}, None, [".dockerenv"])[0] is True
    assert procfs.visibility(set(), {5}, None, []) == (False, None)  # bare metal, nothing listed: the U11 case
    assert procfs.visibility(set(), {5}, "nvidia-smi is not installed", [])[0] is True


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
    candidates, skipped = procfs.classify_holders(
        info, visible={5}, guarded={1: "pid_1", 10: "protected"}, exclude_pids={11}, exclude_users={"bob"},
        exclude_commands=set(procfs.DEFAULT_EXCLUDE_COMMANDS), min_age=120)
    assert [(c["pid"], c["reason"]) for c in candidates] == [(9, "invisible_to_nvidia_smi")]
    assert candidates[0]["cmdline"] == "python zombie.py" and candidates[0]["devices"] == ["/dev/x"]
    assert {s["pid"]: s["reason"] for s in skipped} == {
        1: "pid_1", 5: "visible", 6: "young", 7: "excluded_user", 8: "excluded_command", 10: "protected",
        11: "excluded_pid"}


def test_cgroup_paths():
    v2 = procfs.parse_proc_cgroup("0::/user.slice/session-3.scope\n")
    assert procfs.memory_events_candidates(v2, "/sys/fs/cgroup") == [
        "/sys/fs/cgroup/user.slice/session-3.scope/memory.events", "/sys/fs/cgroup/memory.events"]
    v1 = procfs.parse_proc_cgroup("4:memory:/docker/abc\n1:cpu:/\n0::/\n")
    assert "/sys/fs/cgroup/memory/docker/abc/memory.oom_control" in procfs.memory_events_candidates(v1)
