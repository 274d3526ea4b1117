from __future__ import annotations

import errno
import os

from ansible_collections.remote_gpu.trainer.plugins.modules import inode_check


def fill_inodes(directory, count):
    """Create up to ``count`` empty files; stop at ENOSPC. Returns how many were created."""
    for i in range(count):
        try:
            os.close(os.open(os.path.join(directory, "f%06d" % i), os.O_CREAT | os.O_WRONLY, 0o644))
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                return i
            raise
    return count


def test_reports_every_path_and_same_keys_when_missing(module_runner, tmp_path):
    failed, result = module_runner(inode_check, {"paths": [str(tmp_path), str(tmp_path / "absent")],
                                                 "fail_on": "never", "hf_cache": ""})
    assert not failed and result["changed"] is False
    present, absent = result["paths"]
    assert present["exists"] and present["inodes_total"] and present["bytes_total"] > 0
    assert set(present) == set(absent)
    assert absent["exists"] is False
    assert [f["code"] for f in result["findings"]] == ["path_missing"]
    assert result["status"] == "FAIL"
    assert result["hf_cache"] is None


def test_missing_path_fails_the_task_by_default_with_the_code(module_runner, tmp_path):
    failed, result = module_runner(inode_check, {"paths": [str(tmp_path / "gone")], "hf_cache": ""})
    assert failed
    assert result["msg"].startswith("path_missing:")
    assert result["findings"][0]["code"] == "path_missing"


def test_bad_thresholds_are_a_clear_error(module_runner, tmp_path):
    failed, result = module_runner(inode_check, {"paths": [str(tmp_path)], "warn_pct": 96, "fail_pct": 95})
    assert failed and "warn_pct (96)" in result["msg"]
    assert set(result) >= {"status", "paths", "findings", "hf_cache"}


def test_check_mode_reports_the_same(module_runner, tmp_path):
    (tmp_path / "d").mkdir()
    failed, result = module_runner(inode_check, {"paths": [str(tmp_path)], "_ansible_check_mode": True,
                                                 "fail_on": "never", "hf_cache": ""})
    assert not failed and result["changed"] is False
    assert result["paths"][0]["top"][0]["path"] == str(tmp_path / "d")


def test_hf_cache_expands_home(module_runner, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".cache" / "huggingface").mkdir(parents=True)
    (tmp_path / ".cache" / "huggingface" / "token").write_bytes(b"abc")
    failed, result = module_runner(inode_check, {"paths": [str(tmp_path)], "fail_on": "never"})
    assert not failed
    assert result["hf_cache"]["path"] == str(tmp_path / ".cache" / "huggingface")
    assert result["hf_cache"]["bytes"] == 3


def test_inode_capped_tmpfs_reports_inodes_high_then_exhausted(module_runner, tmp_path, tmpfs):
    with tmpfs(tmp_path / "fs", "size=64m,nr_inodes=1000") as fs:
        data = fs / "eval_images"
        data.mkdir()
        fill_inodes(str(data), 880)  # ~88 % of the cap: warn, bytes still nearly empty
        failed, result = module_runner(inode_check, {"paths": [str(fs)], "fail_on": "never", "hf_cache": ""})
        usage = result["paths"][0]
        assert usage["inodes_total"] == 1000
        assert usage["bytes_pct"] < 5
        assert [(f["code"], f["level"]) for f in result["findings"]] == [("inodes_high", "WARN")]
        assert usage["top"][0]["path"] == str(data)
        created = fill_inodes(str(data), 1000)
        assert created < 1000  # the kernel said ENOSPC: the cap is real
        failed, result = module_runner(inode_check, {"paths": [str(fs)], "hf_cache": ""})
        assert failed
        assert [f["code"] for f in result["findings"]] == ["inodes_exhausted"]
        assert result["paths"][0]["inodes_free"] == 0


def test_budget_against_a_real_inode_cap(module_runner, tmp_path, tmpfs):
    with tmpfs(tmp_path / "fs", "size=8m,nr_inodes=500") as fs:
        failed, result = module_runner(inode_check, {
            "paths": [str(fs)], "top": 0, "hf_cache": "", "fail_on": "never",
            "budgets": [{"path": str(fs), "label": "export", "inodes": 1200, "bytes": 64 * 1024 * 1024}]})
        assert sorted(f["code"] for f in result["findings"]) == ["budget_bytes_short", "budget_inodes_short"]
        assert result["status"] == "FAIL"


def test_hf_cache_symlinked_onto_another_filesystem(module_runner, tmp_path, monkeypatch, tmpfs):
    home = tmp_path / "home"
    (home / ".cache").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    with tmpfs(tmp_path / "data", "size=8m,nr_inodes=500") as data:
        (data / "huggingface_cache").mkdir()
        os.symlink(data / "huggingface_cache", home / ".cache" / "huggingface")
        failed, result = module_runner(inode_check, {"paths": [str(home)], "top": 0, "fail_on": "never"})
        assert result["hf_cache"]["is_symlink"] and result["hf_cache"]["other_filesystem"] is True


def test_hf_home_is_audited_as_well_as_the_home_cache(module_runner, tmp_path, monkeypatch):
    """A big HF_HOME on the home filesystem is hf_cache_large, with its own report; ~/.cache stays audited."""
    home = tmp_path / "home"
    model = home / "hf" / "hub" / "models--org--big"
    model.mkdir(parents=True)
    with open(model / "weights.safetensors", "wb") as fh:  # sparse: 2 GiB apparent size
        fh.truncate(2 * 1024 ** 3)
    monkeypatch.setenv("HOME", str(home))
    failed, result = module_runner(inode_check, {"paths": [str(home)], "top": 0, "fail_on": "never",
                                                 "hf_home": "~/hf", "hf_cache_warn_gib": 1})
    assert not failed
    assert result["hf_cache"]["path"] == str(home / ".cache" / "huggingface") and not result["hf_cache"]["exists"]
    assert result["hf_home"]["path"] == str(home / "hf") and result["hf_home"]["bytes"] == 2 * 1024 ** 3
    large = [f for f in result["findings"] if f["code"] == "hf_cache_large"]
    assert len(large) == 1 and large[0]["message"].startswith("HF_HOME %s holds 2.0 GiB" % (home / "hf"))
    assert "models--org--big" in large[0]["message"]


def test_hf_home_that_is_the_home_cache_is_reported_once(module_runner, tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".cache" / "huggingface").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    failed, result = module_runner(inode_check, {"paths": [str(home)], "top": 0, "fail_on": "never",
                                                 "hf_home": str(home / ".cache" / "huggingface"),
                                                 "hf_cache_warn_gib": 0})
    assert not failed and result["hf_home"] == result["hf_cache"]
    assert [f["code"] for f in result["findings"]] == ["hf_cache_large"]


RUNPOD_TIERS = [
    {"name": "system", "path": "/", "lost_on": ["stop", "terminate"], "note": "container disk"},
    {"name": "data", "path": "/workspace", "lost_on": ["terminate"], "note": "volume disk"},
    {"name": "durable", "path": "/workspace", "lost_on": [], "note": "only when a Network Volume is attached"},
]


def tiers_at(container, workspace):
    return [dict(t, path=str(container if t["path"] == "/" else workspace)) for t in RUNPOD_TIERS]


def test_durable_dir_on_the_container_disk_is_a_finding(module_runner, tmp_path, tmpfs):
    """RunPod without a Network Volume: /workspace is a directory of the container's filesystem."""
    with tmpfs(tmp_path / "container", "size=8m,nr_inodes=500") as container:
        (container / "workspace").mkdir()
        workspace = container / "workspace"
        failed, result = module_runner(inode_check, {
            "paths": [str(workspace)], "top": 0, "hf_cache": "", "durable_dir": str(workspace),
            "storage_tiers": tiers_at(container, workspace)})
    assert not failed  # a WARN: the box can train, but nothing synced to the durable tier outlives it
    separate = [f for f in result["findings"] if f["code"] == "durable_not_separate"]
    assert len(separate) == 1 and separate[0]["level"] == "WARN" and separate[0]["path"] == str(workspace)
    assert "(mounted at %s)" % container in separate[0]["message"]


def test_durable_dir_on_its_own_filesystem_is_no_finding(module_runner, tmp_path, tmpfs):
    """A Network Volume (here a tmpfs) mounted at /workspace."""
    (tmp_path / "container").mkdir()
    with tmpfs(tmp_path / "container" / "workspace", "size=8m,nr_inodes=500") as workspace:
        failed, result = module_runner(inode_check, {
            "paths": [str(workspace)], "top": 0, "hf_cache": "", "durable_dir": str(workspace),
            "storage_tiers": tiers_at(tmp_path / "container", workspace), "fail_on": "WARN"})
    assert not failed and result["findings"] == []
