from __future__ import annotations

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import env_audit


def codes(found):
    return sorted(f["code"] for f in found)


def test_cgroup_v2_path_and_v1_only():
    assert env_audit.cgroup_v2_path("0::/system.slice/docker-abc.scope\n") == "/system.slice/docker-abc.scope"
    assert env_audit.cgroup_v2_path("0::/\n") == "/"
    hybrid = "12:memory:/docker/abc\n11:cpu,cpuacct:/docker/abc\n0::/docker/abc\n"
    assert env_audit.cgroup_v2_path(hybrid) == "/docker/abc"
    assert env_audit.cgroup_v2_path("12:memory:/docker/abc\n") is None


@pytest.mark.parametrize("text,expected", [("max\n", None), ("68719476736\n", 68719476736),
                                           ("9223372036854771712\n", None), ("", None)])
def test_parse_limit(text, expected):
    assert env_audit.parse_limit(text) == expected


def test_parse_keyed_and_cpu():
    events = env_audit.parse_keyed("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n")
    assert events["oom_kill"] == 2
    assert env_audit.parse_cpu_max("1200000 100000\n") == 12.0
    assert env_audit.parse_cpu_max("max 100000\n") is None
    assert env_audit.cpu_quota_v1("-1\n", "100000\n") is None
    assert env_audit.cpu_quota_v1("250000\n", "100000\n") == 2.5


def test_memory_findings():
    assert codes(env_audit.memory_findings(None, 10, 0)) == []
    assert codes(env_audit.memory_findings(1000, 950, 0)) == ["memory_near_limit"]
    found = env_audit.memory_findings(2 ** 34, 2 ** 30, 3)
    assert codes(found) == ["cgroup_oom_kills"] and "3 process" in found[0]["message"]


def test_cpu_quota_below_cores_names_the_thread_count():
    found, threads = env_audit.cpu_findings(12.0, 64, 64)
    assert codes(found) == ["cpu_quota_below_cores"] and threads == 12
    assert "OMP_NUM_THREADS=12" in found[0]["action"]
    found, threads = env_audit.cpu_findings(None, 16, 4)  # a cpuset limit counts too
    assert threads == 4 and codes(found) == ["cpu_quota_below_cores"]
    assert env_audit.cpu_findings(None, 8, 8) == ([], 8)
    assert env_audit.cpu_findings(0.5, 8, 8)[1] == 1


def probe(**kw):
    base = {"torch": "2.5.1+cu124", "cuda_build": "12.4", "cuda_available": True, "device_count": 1, "error": None}
    base.update(kw)
    return base


@pytest.mark.parametrize("torch_probe,driver,expected", [
    (probe(), "12.8", []),
    (probe(), "12.2", ["torch_cuda_minor_newer"]),
    (probe(cuda_build="13.0"), "12.8", ["torch_cuda_too_new"]),
    (probe(cuda_build=None, torch="2.13.0+cpu"), "12.8", ["torch_cpu_only"]),
    (probe(cuda_available=False), "12.8", ["torch_cuda_unavailable"]),
    ({"torch": None, "error": "ModuleNotFoundError: No module named 'torch'"}, "12.8", ["torch_import_failed"]),
    (probe(), None, []),
    (None, "12.8", []),
])
def test_torch_findings(torch_probe, driver, expected):
    assert codes(env_audit.torch_findings(torch_probe, driver, True)) == expected


def test_cpu_only_torch_is_fine_on_a_cpu_box():
    assert env_audit.torch_findings(probe(cuda_build=None), None, False) == []
