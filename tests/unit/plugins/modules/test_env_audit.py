from __future__ import annotations

import textwrap

import pytest

from ansible_collections.remote_gpu.trainer.plugins.modules import env_audit


@pytest.fixture
def fake_torch(tmp_path, monkeypatch):
    """A stand-in torch package on PYTHONPATH, so the probe's child process imports it."""

    def make(version="2.5.1+cu124", cuda="12.4", available=True, broken=False, arch_flags=None):
        pkg = tmp_path / "site" / "torch"
        pkg.mkdir(parents=True, exist_ok=True)
        if broken:
            body = "raise OSError('libcudnn.so.9: cannot open shared object file')\n"
        else:
            body = textwrap.dedent("""
                __version__ = %r
                class version:
                    cuda = %r
                class cuda:
                    @staticmethod
                    def is_available():
                        return %r
                    @staticmethod
                    def device_count():
                        return 1
                def get_num_threads():
                    return 8
                """ % (version, cuda, available))
            if arch_flags is not None:  # like a CUDA build: get_arch_list() is empty without a GPU, the flags are not
                body += textwrap.dedent("""
                    cuda.get_arch_list = staticmethod(lambda: %r.split() if cuda.is_available() else [])
                    cuda.get_device_capability = staticmethod(lambda index: (8, 0))
                    class _C:
                        @staticmethod
                        def _cuda_getArchFlags():
                            return %r
                    """ % (arch_flags, arch_flags))
        (pkg / "__init__.py").write_text(body)
        monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    return make


def test_audit_reports_cgroup_torch_and_hook(module_runner, fake_torch, cgroup_root, tmp_path):
    fake_torch()
    hook = tmp_path / "network_turbo"
    hook.write_text("export http_proxy=http://127.0.0.1:3128\n")
    failed, result = module_runner(env_audit, {"cgroup_root": str(cgroup_root), "proxy_hook": str(hook),
                                               "driver_cuda_version": "12.8", "fail_on": "never"})
    assert not failed and result["changed"] is False
    assert result["torch"]["torch"] == "2.5.1+cu124" and result["torch"]["cuda_available"] is True
    cg = result["cgroup"]
    assert cg["version"] == 2 and cg["memory_max"] == 1073741824 and cg["oom_kills"] == 1
    assert cg["cpu_quota"] == 1.0
    codes = sorted(f["code"] for f in result["findings"])
    assert "cgroup_oom_kills" in codes
    if cg["host_cpus"] > 1:
        assert "cpu_quota_below_cores" in codes and cg["recommended_threads"] == 1
    assert result["proxy_hook"] == {"path": str(hook), "present": True}


def test_missing_hook_and_cpu_torch_fail(module_runner, fake_torch, cgroup_root, tmp_path):
    fake_torch(version="2.13.0+cpu", cuda=None, available=False)
    failed, result = module_runner(env_audit, {"cgroup_root": str(cgroup_root), "proxy_hook": str(tmp_path / "nope"),
                                               "driver_cuda_version": "12.8"})
    assert failed
    codes = sorted(f["code"] for f in result["findings"])
    assert {"proxy_hook_missing", "torch_cpu_only"} <= set(codes)
    assert result["msg"].split(":")[0] in codes


def test_broken_torch_import_is_a_finding_not_a_traceback(module_runner, fake_torch, cgroup_root):
    fake_torch(broken=True)
    failed, result = module_runner(env_audit, {"cgroup_root": str(cgroup_root), "fail_on": "never"})
    assert not failed
    assert [f["code"] for f in result["findings"] if f["code"].startswith("torch")] == ["torch_import_failed"]
    assert "libcudnn" in result["torch"]["error"]


def test_this_machines_real_cgroup(module_runner):
    failed, result = module_runner(env_audit, {"torch": False, "fail_on": "never"})
    assert not failed
    assert result["torch"] is None
    assert result["cgroup"]["host_cpus"] >= 1
    assert result["python"]["version"].startswith("3.")


CU124_FLAGS = "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90"


@pytest.mark.parametrize("available", [True, False])
def test_torch_without_kernels_for_the_gpu_is_a_finding(module_runner, fake_torch, cgroup_root, available):
    """An RTX 5090 (sm_120) with a cu124 build, also when torch cannot see the GPU (the arch list comes from the
    build's flags then)."""
    fake_torch(arch_flags=CU124_FLAGS, available=available)
    failed, result = module_runner(env_audit, {"cgroup_root": str(cgroup_root), "driver_cuda_version": "12.8",
                                               "gpu_names": ["NVIDIA GeForce RTX 5090"]})
    assert failed and result["torch"]["arch_list"] == CU124_FLAGS.split()
    unsupported = [f for f in result["findings"] if f["code"] == "torch_arch_unsupported"]
    assert len(unsupported) == 1 and "cu128" in unsupported[0]["action"] and unsupported[0]["level"] == "FAIL"
    assert unsupported[0]["message"].startswith("torch 2.5.1+cu124 has no kernels for GPU 0 (NVIDIA GeForce RTX 5090")
    if available:
        assert result["msg"].startswith("torch_arch_unsupported: ")


def test_torch_with_kernels_for_the_gpu_passes_the_arch_check(module_runner, fake_torch, cgroup_root):
    fake_torch(arch_flags=CU124_FLAGS)
    failed, result = module_runner(env_audit, {"cgroup_root": str(cgroup_root), "driver_cuda_version": "12.8",
                                               "gpu_names": ["NVIDIA H100 80GB HBM3"], "fail_on": "never"})
    assert not failed and not [f for f in result["findings"] if f["code"].startswith("torch_arch")]
    assert result["torch"]["capabilities"] == [[8, 0]]


def test_no_torch_at_all_is_one_clear_finding_and_no_arch_check(module_runner, tmp_path, monkeypatch, cgroup_root):
    empty = tmp_path / "no-torch"
    empty.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(empty))
    monkeypatch.setenv("PYTHONNOUSERSITE", "1")
    failed, result = module_runner(env_audit, {"cgroup_root": str(cgroup_root), "fail_on": "never",
                                               "gpu_names": ["NVIDIA GeForce RTX 5090"]})
    assert not failed
    torch_codes = [f["code"] for f in result["findings"] if f["code"].startswith("torch")]
    if result["torch"]["torch"] is None:  # this interpreter has no torch
        assert torch_codes == ["torch_import_failed"] and "torch" in result["torch"]["error"]
