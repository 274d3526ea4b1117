"""module_utils/vram_reaper.py: when "not listed by nvidia-smi" can be trusted, and which holders are candidates."""

from __future__ import annotations

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
