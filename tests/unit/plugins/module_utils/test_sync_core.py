from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import sync, sync_select


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.run([sys.executable, "-m", "ansible_collections.remote_gpu.trainer.plugins.module_utils.sync"]
                          + list(args), capture_output=True, text=True, env=env, check=False)


def test_sync_returns_the_module_result_without_ansible(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "best.pt").write_bytes(b"B" * 10)
    (tmp_path / "src" / "latest.pt").write_bytes(b"L")
    params = {"src": str(tmp_path / "src"), "dest": str(tmp_path / "dest"), "include": ["best*"],
              "min_free_inodes": 0, "reserve_bytes": 0}
    failed, result = sync.sync(sync.Params(params))
    assert not failed and result["changed"] is True
    assert result["files"] == [{"path": "best.pt", "bytes": 10, "sha256": hashlib.sha256(b"B" * 10).hexdigest()}]
    assert sorted(os.listdir(str(tmp_path / "dest"))) == ["best.pt"]
    failed, again = sync.sync(sync.Params(params))
    assert not failed and again["changed"] is False and again["unchanged"] == ["best.pt"]


def test_cli_exit_codes_and_json(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "best.pt").write_bytes(b"B")
    ok = _cli(str(tmp_path / "src"), str(tmp_path / "dest"), "--include", "best*")
    assert ok.returncode == 0, ok.stderr
    result = json.loads(ok.stdout)
    assert result["failed"] is False and result["msg"].startswith("copied and verified 1 file(s)")
    bad = _cli(str(tmp_path / "src"), str(tmp_path / "dest2"), "--include", "nothing*")
    assert bad.returncode == 1
    assert json.loads(bad.stdout)["msg"].startswith("checked_sync failed: no file under")
    check = _cli(str(tmp_path / "src"), str(tmp_path / "dest3"), "--check")
    assert check.returncode == 0 and not (tmp_path / "dest3").exists()


def test_cli_reports_a_selection_error_as_json_not_a_traceback(tmp_path):
    # run as __main__, sync must still catch the SyncError that sync_select raises (one class, one owner)
    assert sync.SyncError is sync_select.SyncError
    (tmp_path / "src").mkdir()
    (tmp_path / "outside.pt").write_bytes(b"O")
    (tmp_path / "src" / "best.pt").symlink_to(tmp_path / "outside.pt")
    bad = _cli(str(tmp_path / "src"), str(tmp_path / "dest"))
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    result = json.loads(bad.stdout)
    assert result["failed"] is True and "outside src" in result["msg"]
    assert not (tmp_path / "dest").exists()


def test_run_sync_raises_only_sync_error_and_an_io_error_says_so(tmp_path, monkeypatch):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "best.pt").write_bytes(b"B")
    params = {"src": str(tmp_path / "src"), "dest": str(tmp_path / "dest"), "include": None,
              "min_free_inodes": 0, "reserve_bytes": 0}

    def no_space(*_args):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(sync, "copy_hashing", no_space)
    result = sync.empty_result(params["dest"])
    with pytest.raises(sync.SyncError) as caught:
        sync.run_sync(sync.Params(params), result)
    assert str(caught.value) == ("I/O error: [Errno 28] No space left on device; the filesystem is full: free space "
                                 "or choose another dest")
    failed, result = sync.sync(sync.Params(params))
    assert failed and result["msg"].startswith(
        "checked_sync failed: I/O error: [Errno 28] No space left on device; the filesystem is full: free space or "
        "choose another dest.")
    assert result["changed"] is False and result["free_bytes"] is not None


def test_a_directory_that_another_box_made_meanwhile_is_taken_a_file_or_link_there_is_refused(tmp_path):
    # Two AutoDL instances of one region share the durable FS: both plan runs/<job> as missing, one makes it first.
    # The other's sync failed with FileExistsError (an item trained, then sync_failed, in the 7-item lab queue).
    runs = tmp_path / "runs"
    planned = sync.missing_dirs(str(tmp_path), [{"dest": str(runs / "train" / "000" / "best.pt")}])
    assert planned == [str(runs), str(runs / "train"), str(runs / "train" / "000")]
    (runs / "train").mkdir(parents=True)  # the other box, between the plan and the mkdir
    sync.make_dirs(planned)
    assert (runs / "train" / "000").is_dir()
    other = tmp_path / "other"
    other.mkdir()
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(other)
    for path in (tmp_path / "file", tmp_path / "link"):
        with pytest.raises(sync.SyncError, match="appeared while the sync ran and is not a directory"):
            sync.make_dirs([str(path)])
