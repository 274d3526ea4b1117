"""cgroup.py: where a process's cgroup is and what its files say, against files laid out like v1 and v2 mounts."""

from __future__ import annotations

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import cgroup


def test_cgroup_v2_path_and_v1_only():
    assert cgroup.cgroup_v2_path("0::/system.slice/docker-abc.scope\n") == "/system.slice/docker-abc.scope"
    assert cgroup.cgroup_v2_path("0::/\n") == "/"
    hybrid = "12:memory:/docker/abc\n11:cpu,cpuacct:/docker/abc\n0::/docker/abc\n"
    assert cgroup.cgroup_v2_path(hybrid) == "/docker/abc"
    assert cgroup.cgroup_v2_path("12:memory:/docker/abc\n") is None


@pytest.mark.parametrize("text,expected", [("max\n", None), ("68719476736\n", 68719476736),
                                           ("9223372036854771712\n", None), ("", None)])
def test_parse_limit(text, expected):
    assert cgroup.parse_limit(text) == expected


def test_parse_keyed_and_cpu():
    events = cgroup.parse_keyed("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n")
    assert events["oom_kill"] == 2
    assert cgroup.parse_cpu_max("1200000 100000\n") == 12.0
    assert cgroup.parse_cpu_max("max 100000\n") is None
    assert cgroup.cpu_quota_v1("-1\n", "100000\n") is None
    assert cgroup.cpu_quota_v1("250000\n", "100000\n") == 2.5


def test_cgroup_paths():
    v2 = cgroup.parse_proc_cgroup("0::/user.slice/session-3.scope\n")
    assert cgroup.memory_events_candidates(v2, "/sys/fs/cgroup") == [
        "/sys/fs/cgroup/user.slice/session-3.scope/memory.events", "/sys/fs/cgroup/memory.events"]
    v1 = cgroup.parse_proc_cgroup("4:memory:/docker/abc\n1:cpu:/\n0::/\n")
    assert "/sys/fs/cgroup/memory/docker/abc/memory.oom_control" in cgroup.memory_events_candidates(v1)


def test_memory_events_of_a_hybrid_box_check_each_hierarchy_then_its_root():
    hybrid = cgroup.parse_proc_cgroup("4:memory:/docker/abc\n1:cpu:/\n0::/docker/abc\n")
    assert cgroup.memory_events_candidates(hybrid, "/cg") == [
        "/cg/docker/abc/memory.events", "/cg/memory.events", "/cg/memory/docker/abc/memory.oom_control",
        "/cg/memory/memory.oom_control"]
    assert cgroup.memory_events_candidates({"v2": None, "memory": None}) == []


def test_memory_usage_candidates_own_cgroup_first_then_the_roots():
    # The order of the sampler's bash loop: v2 leaf, v1 leaf, v2 root, v1 root.
    hybrid = cgroup.parse_proc_cgroup("4:memory:/docker/abc\n0::/job.scope\n")
    assert cgroup.memory_usage_candidates(hybrid, "/cg") == [
        "/cg/job.scope/memory.current", "/cg/memory/docker/abc/memory.usage_in_bytes", "/cg/memory.current",
        "/cg/memory/memory.usage_in_bytes"]
    assert cgroup.memory_usage_candidates(cgroup.parse_proc_cgroup("0::/\n"), "/cg") == ["/cg/memory.current"]


def test_memory_events_counters():
    assert cgroup.parse_keyed("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")["oom_kill"] == 1
    assert cgroup.parse_keyed(None) == {} and cgroup.parse_keyed("garbage\nx y\n") == {}


def fake_proc(tmp_path, text, pid="self"):
    proc = tmp_path / "proc"
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cgroup").write_text(text)
    return str(proc)


def test_read_oom_kills_and_usage_file_follow_the_named_cgroup(tmp_path):
    proc = fake_proc(tmp_path, "0::/job.scope\n", pid=4242)
    root = tmp_path / "cg"
    (root / "job.scope").mkdir(parents=True)
    (root / "memory.events").write_text("oom 9\noom_kill 9\n")
    (root / "job.scope" / "memory.events").write_text("oom 2\noom_kill 1\n")
    (root / "memory.current").write_text("999\n")
    assert cgroup.read_oom_kills(proc=proc, root=str(root), pid=4242) == (
        str(root / "job.scope" / "memory.events"), {"oom": 2, "oom_kill": 1})
    assert cgroup.memory_usage_file(4242, proc, str(root)) == str(root / "memory.current")  # leaf has none
    (root / "job.scope" / "memory.current").write_text("123\n")
    assert cgroup.memory_usage_file(4242, proc, str(root)) == str(root / "job.scope" / "memory.current")
    assert cgroup.read_oom_kills(proc=proc, root=str(tmp_path / "absent"), pid=4242) == (None, {})
    assert cgroup.memory_usage_file(1, proc, str(root)) is None  # no /proc/1/cgroup in the fake proc


def test_limits_v2_take_the_smallest_limit_up_the_tree(tmp_path):
    proc = fake_proc(tmp_path, "0::/a/b\n")
    root = tmp_path / "cg"
    (root / "a" / "b").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    (root / "a" / "memory.max").write_text("1073741824\n")
    (root / "a" / "b" / "memory.max").write_text("max\n")
    (root / "a" / "b" / "memory.current").write_text("52428800\n")
    (root / "a" / "b" / "memory.events").write_text("oom 0\noom_kill 2\n")
    (root / "a" / "cpu.max").write_text("400000 100000\n")
    (root / "a" / "b" / "cpu.max").write_text("max 100000\n")
    assert cgroup.limits(str(root), proc) == {"version": 2, "memory_max": 1073741824, "memory_current": 52428800,
                                              "oom_kills": 2, "cpu_quota": 4.0}


def test_limits_v1_and_none(tmp_path):
    proc = fake_proc(tmp_path, "4:memory:/\n")
    root = tmp_path / "cg"
    (root / "memory").mkdir(parents=True)
    (root / "cpu").mkdir()
    (root / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (root / "memory" / "memory.usage_in_bytes").write_text("4096\n")
    (root / "memory" / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n")
    (root / "cpu" / "cpu.cfs_quota_us").write_text("250000\n")
    (root / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup.limits(str(root), proc) == {"version": 1, "memory_max": None, "memory_current": 4096,
                                              "oom_kills": 5, "cpu_quota": 2.5}
    assert cgroup.limits(str(tmp_path / "absent"), proc) == dict.fromkeys(
        ("version", "memory_max", "memory_current", "oom_kills", "cpu_quota"))


def test_reads_are_bounded_and_never_raise(tmp_path):
    big = tmp_path / "big"
    big.write_text("x" * (cgroup.MAX_READ + 100))
    assert len(cgroup.read_text(str(big))) == cgroup.MAX_READ
    assert cgroup.read_text(str(tmp_path / "absent")) is None and cgroup.read_text(None) is None
    assert cgroup.read_counters(str(tmp_path / "absent")) is None and cgroup.read_counters(None) is None


@pytest.mark.parametrize("parser,text", [
    (cgroup.parse_limit, "banana\n"), (cgroup.parse_limit, "-4096\n"), (cgroup.parse_cpu_max, "200000 0\n"),
    (cgroup.parse_cpu_max, "lots often\n"), (cgroup.parse_cpu_max, "1 2 3\n"), (cgroup.parse_cpu_max, "-5 100000\n"),
])
def test_malformed_limit_files_raise_value_error(parser, text):
    with pytest.raises(ValueError):
        parser(text)


def test_cpu_quota_v1_rejects_a_zero_period():
    with pytest.raises(ValueError):
        cgroup.cpu_quota_v1("50000\n", "0\n")
    assert cgroup.cpu_quota_v1("-1\n", "0\n") is None  # unlimited, whatever the period


def test_limits_describe_malformed_files_and_count_them_unknown(tmp_path):
    proc = fake_proc(tmp_path, "0::/\n")
    root = tmp_path / "cg"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory\n")
    (root / "memory.max").write_text("banana\n")
    (root / "cpu.max").write_text("200000 0\n")
    malformed = []
    info = cgroup.limits(str(root), proc, malformed=malformed)
    assert info["version"] == 2 and info["memory_max"] is None and info["cpu_quota"] is None
    assert len(malformed) == 2 and "memory.max holds 'banana'" in malformed[0] and "period of 0" in malformed[1]
    assert cgroup.limits(str(root), proc)["version"] == 2  # without the list: the same values, never raises
