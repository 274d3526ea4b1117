from __future__ import annotations

import hashlib
import json
import os
import stat

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import manifest as mf
from ansible_collections.remote_gpu.trainer.plugins.modules import pull_manifest

RETURN_KEYS = {"changed", "manifest_path", "manifest", "sha256", "total_bytes", "file_count", "msg"}


@pytest.fixture
def root(tmp_path):
    run = tmp_path / "runs" / "exp42"
    (run / "ckpt").mkdir(parents=True)
    (run / "ckpt" / "best.pt").write_bytes(b"B" * 4096)
    (run / "metrics.json").write_bytes(b"{}\n")
    (run / "scratch.tmp").write_bytes(b"not in the roster")
    return run


def default_path(root):
    return root.parent / "PULL_MANIFEST.exp42.json"


def test_writes_the_manifest_next_to_the_root(module_runner, root):
    failed, result = module_runner(pull_manifest, {"root": str(root), "roster": ["metrics.json", "ckpt/best.pt"],
                                                   "run_id": "exp42"})
    assert not failed, result["msg"]
    assert RETURN_KEYS <= set(result) and result["changed"] is True
    path = default_path(root)
    assert result["manifest_path"] == str(path)
    data = path.read_bytes()
    assert result["sha256"] == hashlib.sha256(data).hexdigest()
    written = json.loads(data)
    assert written == result["manifest"]
    assert written["run_id"] == "exp42" and written["root"] == str(root)
    assert [f["path"] for f in written["files"]] == ["ckpt/best.pt", "metrics.json"]
    assert written["files"][0]["sha256"] == hashlib.sha256(b"B" * 4096).hexdigest()
    assert result["total_bytes"] == 4096 + 3 and result["file_count"] == 2
    assert mf.compare_manifest(mf.load_manifest(data), str(root), allow_extra=True) == []
    assert [n for n in os.listdir(str(root.parent)) if n.endswith(".tmp")] == []


def test_unchanged_root_is_not_changed_and_a_change_is(module_runner, root):
    args = {"root": str(root), "roster": ["metrics.json", "ckpt/best.pt"]}
    module_runner(pull_manifest, args)
    before = default_path(root).stat().st_mtime_ns
    failed, result = module_runner(pull_manifest, args)
    assert not failed and result["changed"] is False
    assert default_path(root).stat().st_mtime_ns == before
    (root / "metrics.json").write_bytes(b'{"acc": 1}\n')
    failed, result = module_runner(pull_manifest, args)
    assert not failed and result["changed"] is True
    assert json.loads(default_path(root).read_bytes())["total_bytes"] == 4096 + 11


def test_check_mode_writes_nothing(module_runner, root):
    failed, result = module_runner(pull_manifest, {"root": str(root), "roster": ["metrics.json"],
                                                   "_ansible_check_mode": True})
    assert not failed and result["changed"] is True and result["file_count"] == 1
    assert not default_path(root).exists()


def test_roster_file_with_comments(module_runner, root, tmp_path):
    roster = tmp_path / "roster.txt"
    roster.write_text("# what must come home\nckpt/best.pt\n\nmetrics.json\n")
    manifest_path = tmp_path / "out" / "m.json"
    manifest_path.parent.mkdir()
    failed, result = module_runner(pull_manifest, {"root": str(root), "roster_file": str(roster),
                                                   "manifest_path": str(manifest_path)})
    assert not failed and result["file_count"] == 2 and manifest_path.exists()


def test_missing_roster_entry_fails_naming_the_file(module_runner, root):
    failed, result = module_runner(pull_manifest, {"root": str(root), "roster": ["metrics.json", "ckpt/last.pt"]})
    assert failed and "ckpt/last.pt" in result["msg"]
    assert RETURN_KEYS <= set(result) and result["changed"] is False and result["manifest"] == {}
    assert not default_path(root).exists()


def test_manifest_inside_root_is_refused(module_runner, root):
    inside = root / "PULL_MANIFEST.json"
    failed, result = module_runner(pull_manifest, {"root": str(root), "roster": ["metrics.json"],
                                                   "manifest_path": str(inside)})
    assert failed and "inside root" in result["msg"]
    assert not inside.exists()


def test_root_must_be_a_directory(module_runner, tmp_path):
    failed, result = module_runner(pull_manifest, {"root": str(tmp_path / "absent"), "roster": ["x"]})
    assert failed and "is not a directory" in result["msg"]


def test_roster_and_roster_file_are_exclusive(module_runner, root, tmp_path):
    failed, result = module_runner(pull_manifest, {"root": str(root), "roster": ["metrics.json"],
                                                   "roster_file": str(tmp_path / "r")})
    assert failed and "mutually exclusive" in result["msg"]
    failed, result = module_runner(pull_manifest, {"root": str(root)})
    assert failed and "one of the following is required" in result["msg"]


def test_unwritable_manifest_location_fails_cleanly(module_runner, root, tmp_path):
    failed, result = module_runner(pull_manifest, {"root": str(root), "roster": ["metrics.json"],
                                                   "manifest_path": str(tmp_path / "no" / "such" / "m.json")})
    assert failed and "failed to write" in result["msg"]
    assert RETURN_KEYS <= set(result)


def test_default_path_ignores_a_trailing_slash_on_root(module_runner, root):
    failed, result = module_runner(pull_manifest, {"root": str(root) + "/", "roster": ["metrics.json"]})
    assert not failed and result["manifest_path"] == str(default_path(root))
    assert result["manifest"]["root"] == str(root)


def test_a_link_inside_the_root_is_listed_as_its_target(module_runner, root):
    (root / "best.pt").symlink_to("ckpt/best.pt")
    failed, result = module_runner(pull_manifest, {"root": str(root), "roster": ["best.pt", "ckpt/best.pt"]})
    assert not failed, result["msg"]
    assert [f["sha256"] for f in result["manifest"]["files"]] == [hashlib.sha256(b"B" * 4096).hexdigest()] * 2


def test_a_link_out_of_the_root_fails_and_writes_nothing(module_runner, root, tmp_path):
    (tmp_path / "id_rsa").write_bytes(b"secret")
    (root / "best.pt").symlink_to(tmp_path / "id_rsa")
    failed, result = module_runner(pull_manifest, {"root": str(root), "roster": ["best.pt"]})
    assert failed and "leads outside the root" in result["msg"] and "best.pt" in result["msg"]
    assert not default_path(root).exists()


@pytest.mark.parametrize("args, message", [
    ({"root": "/", "manifest_path": "/tmp/m.json"}, "whole filesystem"),
    ({"root": "/tmp/a\x00b"}, "control character"),
])
def test_hostile_paths_fail_with_a_message(module_runner, root, args, message):
    full = {"root": str(root), "roster": ["metrics.json"]}
    full.update(args)
    failed, result = module_runner(pull_manifest, full)
    assert failed and message in result["msg"], result["msg"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_a_manifest_path_that_is_a_device_is_never_replaced(module_runner, root, tmp_path):
    null = tmp_path / "null"   # a null device of its own: a regression must not replace the machine's /dev/null
    os.mknod(str(null), 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    failed, result = module_runner(pull_manifest, {"root": str(root), "roster": ["metrics.json"],
                                                   "manifest_path": str(null)})
    assert failed and "character device, not a regular file" in result["msg"], result["msg"]
    assert stat.S_ISCHR(os.lstat(str(null)).st_mode)
