from __future__ import annotations

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import env_audit


def codes(found):
    return sorted(f["code"] for f in found)


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


def test_cgroup_findings_say_what_was_not_audited():
    assert env_audit.cgroup_findings("/sys/fs/cgroup", 2, True, []) == []
    missing = env_audit.cgroup_findings("/nope", None, False, [])
    assert codes(missing) == ["cgroup_not_audited"] and missing[0]["level"] == "INFO"
    assert "/nope is not a directory" in missing[0]["message"]
    empty = env_audit.cgroup_findings("/tmp", None, True, [])
    assert "/tmp holds no cgroup v1 or v2 hierarchy" in empty[0]["message"]
    bad = env_audit.cgroup_findings("/sys/fs/cgroup", 2, True, ["/sys/fs/cgroup/cpu.max holds '1 0' (a period of 0)"])
    assert codes(bad) == ["cgroup_malformed"] and bad[0]["level"] == "WARN" and "a period of 0" in bad[0]["message"]


CU124_ARCHS = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]


def test_rtx_5090_with_a_torch_build_without_its_kernels_fails_naming_the_build_to_install():
    found = env_audit.arch_findings(probe(arch_list=CU124_ARCHS), ["NVIDIA GeForce RTX 5090"] * 2)
    assert codes(found) == ["torch_arch_unsupported"] and found[0]["level"] == "FAIL"
    message = found[0]["message"]
    assert "GPU 0,1 (NVIDIA GeForce RTX 5090, compute capability 12.0, sm_120" in message
    assert "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90" in message and "2.5.1+cu124" in message
    assert "cu128" in found[0]["action"] and "torch 2.7 or newer" in found[0]["action"]


def test_supported_gpus_are_no_finding():
    assert env_audit.arch_findings(probe(arch_list=CU124_ARCHS), ["NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090"]) == []
    cu128 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]
    assert env_audit.arch_findings(probe(arch_list=cu128), ["NVIDIA GeForce RTX 5090"]) == []


def test_an_unknown_name_uses_the_capability_torch_reported_or_says_it_was_not_checked():
    unknown = env_audit.arch_findings(probe(arch_list=CU124_ARCHS), ["Graphics Device"])
    assert codes(unknown) == ["torch_arch_unchecked"] and unknown[0]["level"] == "INFO"
    assert "GPU 0 (Graphics Device)" in unknown[0]["message"]
    found = env_audit.arch_findings(probe(arch_list=CU124_ARCHS, capabilities=[[12, 0]]), ["Graphics Device"])
    assert codes(found) == ["torch_arch_unsupported"] and "from torch" in found[0]["message"]


@pytest.mark.parametrize("torch_probe", [
    None,                                                                       # torch not probed
    {"torch": None, "error": "ModuleNotFoundError: No module named 'torch'"},  # torch_import_failed says so
    probe(cuda_build=None, torch="2.5.1+cpu", arch_list=[]),                   # torch_cpu_only says so
])
def test_no_torch_or_a_cpu_build_is_not_an_arch_finding(torch_probe):
    assert env_audit.arch_findings(torch_probe, ["NVIDIA GeForce RTX 5090"]) == []


def test_a_build_without_an_arch_list_is_unchecked_with_the_reason():
    found = env_audit.arch_findings(probe(arch_list=[]), ["NVIDIA GeForce RTX 5090"])
    assert codes(found) == ["torch_arch_unchecked"] and "get_arch_list() is empty" in found[0]["message"]
    found = env_audit.arch_findings(probe(arch_error="AttributeError: no _C"), ["NVIDIA GeForce RTX 5090"])
    assert "AttributeError: no _C" in found[0]["message"]
    assert env_audit.arch_findings(probe(arch_list=CU124_ARCHS), []) == []
