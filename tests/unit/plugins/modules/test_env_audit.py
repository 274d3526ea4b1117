from __future__ import annotations

import textwrap

import pytest

from ansible_collections.remote_gpu.trainer.plugins.modules import env_audit


@pytest.fixture
def fake_torch(tmp_path, monkeypatch):
    """A stand-in torch package on PYTHONPATH, so the probe's child process imports it."""

    def make(version="2.5.1+cu124", cuda="12.4", available=True, broken=False):
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
        (pkg / "__init__.py").write_text(body)
        monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    return make


@pytest.fixture
def cgroup_root(tmp_path):
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "memory.max").write_text("1073741824\n")
    (root / "memory.current").write_text("104857600\n")
    (root / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 1\noom_kill 1\n")
    (root / "cpu.max").write_text("100000 100000\n")
    return root


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
