from __future__ import annotations

import errno
import hashlib
import os

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import fsbudget
from ansible_collections.remote_gpu.trainer.plugins.module_utils import sync
from ansible_collections.remote_gpu.trainer.plugins.modules import checked_sync

RETURN_KEYS = {"changed", "copied", "unchanged", "bytes_copied", "files", "dest", "free_bytes", "free_inodes", "msg"}


@pytest.fixture(autouse=True)
def private_home(tmp_path, monkeypatch):
    """The record of verified copies lives under ~/.cache: keep each test's own."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def sha(data):
    return hashlib.sha256(data).hexdigest()


def temp_leftovers(directory):
    found = []
    for current, _dirs, names in os.walk(str(directory)):
        found.extend(os.path.join(current, n) for n in names if ".checked_sync." in n)
    return found


def tree(directory):
    """{relative path: bytes} of every file under ``directory``."""
    out = {}
    for current, _dirs, names in os.walk(str(directory)):
        for name in names:
            full = os.path.join(current, name)
            with open(full, "rb") as handle:
                out[os.path.relpath(full, str(directory))] = handle.read()
    return out


@pytest.fixture
def src(tmp_path):
    root = tmp_path / "scratch" / "run"
    (root / "ckpt").mkdir(parents=True)
    (root / "ckpt" / "best.pt").write_bytes(b"B" * 5000)
    (root / "ckpt" / "last.pt").write_bytes(b"L" * 3000)
    (root / "metrics.json").write_bytes(b'{"acc": 0.9}\n')
    return root


def test_directory_mirrors_into_dest_and_verifies(module_runner, src, tmp_path):
    dest = tmp_path / "durable" / "run"
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
    assert not failed, result["msg"]
    assert RETURN_KEYS <= set(result)
    assert result["changed"] is True
    assert tree(dest) == tree(src)
    assert [c["path"] for c in result["copied"]] == ["ckpt/best.pt", "ckpt/last.pt", "metrics.json"]
    assert result["copied"][0] == {"path": "ckpt/best.pt", "bytes": 5000, "sha256": sha(b"B" * 5000)}
    assert result["bytes_copied"] == 5000 + 3000 + 13
    assert result["files"] == result["copied"] and result["unchanged"] == []
    assert result["dest"] == str(dest) and result["free_bytes"] > 0
    assert temp_leftovers(dest) == []


def test_second_run_is_unchanged(module_runner, src, tmp_path):
    dest = tmp_path / "durable"
    module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
    assert not failed and result["changed"] is False
    assert "skipped" not in result  # a true 'skipped' key would make Ansible mark the task as skipped
    assert result["copied"] == [] and result["bytes_copied"] == 0
    assert result["unchanged"] == ["ckpt/best.pt", "ckpt/last.pt", "metrics.json"]
    assert [f["sha256"] for f in result["files"]] == [sha(b"B" * 5000), sha(b"L" * 3000), sha(b'{"acc": 0.9}\n')]


def test_unchanged_rerun_reads_no_file(module_runner, src, tmp_path, monkeypatch):
    dest = tmp_path / "durable"
    module_runner(checked_sync, {"src": str(src), "dest": str(dest)})

    def no_reading(*_args, **_kwargs):
        raise AssertionError("an unchanged re-run must not hash files")
    monkeypatch.setattr(sync, "sha256_file", no_reading)
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
    assert not failed and result["changed"] is False
    assert [f["sha256"] for f in result["files"]] == [sha(b"B" * 5000), sha(b"L" * 3000), sha(b'{"acc": 0.9}\n')]


def test_content_check_hashes_every_time(module_runner, src, tmp_path, monkeypatch):
    dest = tmp_path / "durable"
    module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
    calls = []
    real = sync.sha256_file
    monkeypatch.setattr(sync, "sha256_file", lambda path: calls.append(path) or real(path))
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(dest), "unchanged_check": "content"})
    assert not failed and result["changed"] is False
    assert len(calls) == 6  # both sides of three files


def test_a_copy_changed_behind_our_back_is_hashed_and_replaced(module_runner, src, tmp_path):
    dest = tmp_path / "durable"
    module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
    copy = dest / "ckpt" / "best.pt"
    st = copy.stat()
    copy.write_bytes(b"X" * 5000)  # same size; restore the mtime: only ctime gives it away
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
    assert not failed and [c["path"] for c in result["copied"]] == ["ckpt/best.pt"]
    assert copy.read_bytes() == b"B" * 5000


def test_same_size_and_mtime_but_different_content_is_copied(module_runner, src, tmp_path):
    dest = tmp_path / "durable"
    module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
    best = src / "ckpt" / "best.pt"
    st = best.stat()
    best.write_bytes(b"C" * 5000)
    os.utime(best, ns=(st.st_atime_ns, st.st_mtime_ns))
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
    assert not failed and result["changed"] is True
    assert [c["path"] for c in result["copied"]] == ["ckpt/best.pt"]
    assert (dest / "ckpt" / "best.pt").read_bytes() == b"C" * 5000


def test_file_src_lands_as_dest_basename(module_runner, src, tmp_path):
    dest = tmp_path / "durable" / "final"
    failed, result = module_runner(checked_sync, {"src": str(src / "ckpt" / "best.pt"), "dest": str(dest)})
    assert not failed
    assert tree(dest) == {"best.pt": b"B" * 5000}
    assert result["files"] == [{"path": "best.pt", "bytes": 5000, "sha256": sha(b"B" * 5000)}]


def test_include_patterns_select_files(module_runner, src, tmp_path):
    dest = tmp_path / "durable"
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(dest), "include": ["*best*", "*.json"]})
    assert not failed
    assert sorted(tree(dest)) == ["ckpt/best.pt", "metrics.json"]
    assert [f["path"] for f in result["files"]] == ["ckpt/best.pt", "metrics.json"]


def test_nothing_selected_is_a_failure(module_runner, src, tmp_path):
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(tmp_path / "d"), "include": ["*.nope"]})
    assert failed and "nothing was copied" in result["msg"]
    assert RETURN_KEYS <= set(result)
    assert not (tmp_path / "d").exists()


def test_check_mode_reports_and_writes_nothing(module_runner, src, tmp_path):
    dest = tmp_path / "durable"
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(dest), "_ansible_check_mode": True})
    assert not failed and result["changed"] is True
    assert [c["path"] for c in result["copied"]] == ["ckpt/best.pt", "ckpt/last.pt", "metrics.json"]
    assert result["copied"][0]["sha256"] == sha(b"B" * 5000)
    assert "would copy 3 file(s)" in result["msg"]
    assert not dest.exists()


def test_extra_files_in_dest_are_left_alone(module_runner, src, tmp_path):
    dest = tmp_path / "durable"
    dest.mkdir()
    (dest / "older_run.pt").write_bytes(b"keep me")
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
    assert not failed
    assert (dest / "older_run.pt").read_bytes() == b"keep me"


def test_missing_src_fails_with_the_same_keys(module_runner, tmp_path):
    failed, result = module_runner(checked_sync, {"src": str(tmp_path / "nope"), "dest": str(tmp_path / "d")})
    assert failed and "does not exist" in result["msg"]
    assert RETURN_KEYS <= set(result) and result["changed"] is False


def test_dest_inside_src_is_refused(module_runner, src):
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(src / "backup")})
    assert failed and "lies inside" in result["msg"]
    assert not (src / "backup").exists()


def test_negative_margin_is_refused(module_runner, src, tmp_path):
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(tmp_path / "d"), "reserve_bytes": -1})
    assert failed and "reserve_bytes must be 0 or more" in result["msg"]


def test_budget_shortfall_fails_before_writing(module_runner, src, tmp_path, monkeypatch):
    dest = tmp_path / "durable"
    tiny = os.statvfs_result((4096, 4096, 1000, 100, 100, 1000, 2, 2, 0, 255))
    monkeypatch.setattr(sync, "fs_free", lambda path: (path, tiny))
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
    assert failed
    # 3 new files + 2 new directories (dest, dest/ckpt) + the temporary file
    assert "needs 6 inodes, 2 free on %s" % dest in result["msg"] and "nothing was written" in result["msg"]
    assert result["free_inodes"] == 2 and result["copied"] == []
    assert [f["sha256"] for f in result["files"]] == [None, None, None]
    assert not dest.exists()


def test_write_error_midway_removes_temp_and_keeps_old_copy(module_runner, src, tmp_path, monkeypatch):
    dest = tmp_path / "durable"
    module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
    (src / "ckpt" / "best.pt").write_bytes(b"N" * 7000)
    (src / "metrics.json").write_bytes(b'{"acc": 0.95}\n')
    real = sync.copy_hashing

    def quota_exceeded(path, out, planned):
        if path.endswith("metrics.json"):
            out.write(b"partial")
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
        return real(path, out, planned)

    monkeypatch.setattr(sync, "copy_hashing", quota_exceeded)
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
    assert failed and "quota" in result["msg"].lower()
    assert "1 file(s) were copied and verified before the failure" in result["msg"]
    assert result["changed"] is True and [c["path"] for c in result["copied"]] == ["ckpt/best.pt"]
    assert (dest / "ckpt" / "best.pt").read_bytes() == b"N" * 7000
    assert (dest / "metrics.json").read_bytes() == b'{"acc": 0.9}\n'
    assert temp_leftovers(dest) == []


def test_verify_mismatch_fails_and_keeps_old_copy(module_runner, src, tmp_path, monkeypatch):
    dest = tmp_path / "durable"
    module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
    (src / "ckpt" / "best.pt").write_bytes(b"N" * 7000)
    monkeypatch.setattr(sync, "read_back", lambda path: "0" * 64)
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
    assert failed and "verification failed" in result["msg"]
    assert result["changed"] is False and result["copied"] == []
    assert (dest / "ckpt" / "best.pt").read_bytes() == b"B" * 5000
    assert temp_leftovers(dest) == []


def test_source_changing_during_copy_fails(module_runner, src, tmp_path, monkeypatch):
    dest = tmp_path / "durable"
    real = sync.copy_hashing

    def writer_appends(path, out, planned):
        with open(path, "ab") as handle:
            handle.write(b"more")
        return real(path, out, planned)

    monkeypatch.setattr(sync, "copy_hashing", writer_appends)
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
    assert failed and "while it was copied" in result["msg"]
    assert temp_leftovers(dest) == [] and not (dest / "ckpt" / "best.pt").exists()


def test_permission_error_at_rename_removes_temp_and_keeps_old_copy(module_runner, src, tmp_path, monkeypatch):
    dest = tmp_path / "durable"
    module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
    (src / "metrics.json").write_bytes(b'{"acc": 0.99}\n')

    def denied(source, target):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), target)

    monkeypatch.setattr(sync.os, "replace", denied)
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
    assert failed and "Permission denied" in result["msg"]
    assert (dest / "metrics.json").read_bytes() == b'{"acc": 0.9}\n'
    assert temp_leftovers(dest) == []


def test_symlinked_file_is_copied_as_its_content(module_runner, src, tmp_path):
    (src / "latest.pt").symlink_to(src / "ckpt" / "best.pt")
    dest = tmp_path / "durable"
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(dest), "include": ["latest.pt"]})
    assert not failed
    assert not (dest / "latest.pt").is_symlink() and (dest / "latest.pt").read_bytes() == b"B" * 5000


def test_include_applies_to_the_basename_of_a_file_src(module_runner, src, tmp_path):
    args = {"src": str(src / "metrics.json"), "dest": str(tmp_path / "d")}
    failed, result = module_runner(checked_sync, dict(args, include=["*.json"]))
    assert not failed and [c["path"] for c in result["copied"]] == ["metrics.json"]
    failed, result = module_runner(checked_sync, dict(args, include=["*.pt"]))
    assert failed and "nothing was copied" in result["msg"]


def test_dest_path_that_is_a_directory_fails(module_runner, src, tmp_path):
    dest = tmp_path / "durable"
    (dest / "metrics.json").mkdir(parents=True)
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
    assert failed and "is a directory in dest" in result["msg"]


# --------------------------------------------------------------------------- real filesystems (root)


@pytest.mark.root
def test_inode_cap_fails_before_writing_and_keeps_old_copy(module_runner, tmp_path, tmpfs):
    src = tmp_path / "src"
    src.mkdir()
    for index in range(30):
        (src / ("sample_%02d.png" % index)).write_bytes(b"p%d" % index)
    with tmpfs(tmp_path / "durable", "size=4m,nr_inodes=16") as mnt:
        (mnt / "sample_00.png").write_bytes(b"old copy")
        failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(mnt)})
        assert failed, result["msg"]
        assert "inodes" in result["msg"] and "nothing was written" in result["msg"]
        assert "needs 30 inodes" in result["msg"]  # 29 new files + the temporary file
        assert tree(mnt) == {"sample_00.png": b"old copy"}
        assert result["copied"] == [] and result["changed"] is False
        assert RETURN_KEYS <= set(result)


@pytest.mark.root
def test_min_free_inodes_margin_on_a_real_tmpfs(module_runner, tmp_path, tmpfs):
    src = tmp_path / "src"
    src.mkdir()
    for index in range(4):
        (src / ("f%d" % index)).write_bytes(b"x")
    with tmpfs(tmp_path / "durable", "size=1m,nr_inodes=16") as mnt:
        args = {"src": str(src), "dest": str(mnt)}
        failed, result = module_runner(checked_sync, dict(args, min_free_inodes=12))
        assert failed and "kept free" in result["msg"] and tree(mnt) == {}
        failed, result = module_runner(checked_sync, dict(args, min_free_inodes=2))
        assert not failed and len(result["copied"]) == 4
        failed, result = module_runner(checked_sync, args)
        assert not failed and result["changed"] is False


@pytest.mark.root
def test_disk_filling_up_midway_leaves_no_temp_and_reports_failure(module_runner, tmp_path, monkeypatch, tmpfs):
    src = tmp_path / "src"
    src.mkdir()
    (src / "big.bin").write_bytes(os.urandom(700 * 1024))
    with tmpfs(tmp_path / "durable", "size=1m,nr_inodes=64") as mnt:
        (mnt / "big.bin").write_bytes(b"old checkpoint")
        real_check = sync.check_budget

        def another_writer_fills_the_disk(*args, **kwargs):
            verdict = real_check(*args, **kwargs)  # the plan fits ...
            (mnt / "filler").write_bytes(b"\0" * (600 * 1024))  # ... then someone else writes 600 KiB
            return verdict

        monkeypatch.setattr(sync, "check_budget", another_writer_fills_the_disk)
        failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(mnt)})
        assert failed
        assert "No space left on device" in result["msg"]
        assert result["changed"] is False and result["copied"] == []
        assert sorted(os.listdir(str(mnt))) == ["big.bin", "filler"]
        assert (mnt / "big.bin").read_bytes() == b"old checkpoint"
        assert RETURN_KEYS <= set(result)


@pytest.mark.root
def test_real_tmpfs_copy_check_mode_and_idempotence(module_runner, tmp_path, tmpfs):
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "w.safetensors").write_bytes(os.urandom(100 * 1024))
    (src / "log.txt").write_bytes(b"epoch 1\n")
    with tmpfs(tmp_path / "durable", "size=1m,nr_inodes=64") as mnt:
        dest = mnt / "run"
        failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(dest), "_ansible_check_mode": True})
        assert not failed and result["changed"] is True and tree(mnt) == {}
        failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
        assert not failed and result["changed"] is True and tree(dest) == tree(src)
        st = os.statvfs(str(mnt))
        assert result["free_bytes"] == fsbudget.free_bytes(st) and result["free_inodes"] == fsbudget.free_inodes(st)
        failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
        assert not failed and result["changed"] is False and len(result["unchanged"]) == 2


# --------------------------------------------------------------------------- symbolic links and identity (issue 14)


def test_link_outside_src_is_refused_before_anything_is_written(module_runner, src, tmp_path):
    (tmp_path / "id_rsa").write_bytes(b"PRIVATE KEY")
    (src / "ckpt" / "key.pt").symlink_to(tmp_path / "id_rsa")
    dest = tmp_path / "durable"
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
    assert failed and "ckpt/key.pt is a symbolic link to %s, outside src" % (tmp_path / "id_rsa") in result["msg"]
    assert not dest.exists() and result["copied"] == []
    assert RETURN_KEYS | {"left_out"} <= set(result)


def test_link_inside_src_is_copied_as_the_targets_bytes(module_runner, src, tmp_path):
    (src / "ckpt" / "best_link.pt").symlink_to("best.pt")
    dest = tmp_path / "durable"
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
    assert not failed, result["msg"]
    assert not (dest / "ckpt" / "best_link.pt").is_symlink()
    assert (dest / "ckpt" / "best_link.pt").read_bytes() == b"B" * 5000
    assert {"path": "ckpt/best_link.pt", "bytes": 5000, "sha256": sha(b"B" * 5000)} in result["copied"]


@pytest.mark.parametrize("make, fragment", [
    (lambda src: (src / "gone.pt").symlink_to("nothing.pt"), "dangling symbolic link"),
    (lambda src: (src / "loop.pt").symlink_to("loop.pt"), "symbolic link loop"),
])
def test_broken_links_fail_with_their_name(module_runner, src, tmp_path, make, fragment):
    make(src)
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(tmp_path / "durable")})
    assert failed and fragment in result["msg"] and not (tmp_path / "durable").exists()


def test_directory_links_and_fifos_are_left_out_and_listed(module_runner, src, tmp_path):
    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "x.bin").write_bytes(b"x")
    (src / "data").symlink_to(tmp_path / "datasets")
    os.mkfifo(str(src / "pipe"))
    dest = tmp_path / "durable"
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(dest)})
    assert not failed
    assert result["left_out"] == [
        {"path": "data", "reason": "symbolic link to a directory (%s), not followed" % (tmp_path / "datasets")},
        {"path": "pipe", "reason": "FIFO, not copied"}]
    assert sorted(tree(dest)) == ["ckpt/best.pt", "ckpt/last.pt", "metrics.json"]
    assert not (dest / "data").exists() and not (dest / "pipe").exists()


def test_a_link_in_dest_is_replaced_by_a_real_file(module_runner, src, tmp_path):
    dest = tmp_path / "durable"
    dest.mkdir()
    (tmp_path / "other.json").write_bytes(b'{"acc": 0.9}\n')  # same content: must still become a real copy
    (dest / "metrics.json").symlink_to(tmp_path / "other.json")
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(dest), "include": ["*.json"]})
    assert not failed and [c["path"] for c in result["copied"]] == ["metrics.json"]
    assert not (dest / "metrics.json").is_symlink()


def test_a_source_swapped_after_the_plan_is_not_copied(module_runner, src, tmp_path, monkeypatch):
    (tmp_path / "secret").write_bytes(b"S" * 5000)
    real = sync.open_source

    def swapped(path, planned):
        os.unlink(path)
        os.symlink(str(tmp_path / "secret"), path)  # a link planted between the plan and the copy
        return real(path, planned)

    monkeypatch.setattr(sync, "open_source", swapped)
    failed, result = module_runner(checked_sync, {"src": str(src), "dest": str(tmp_path / "d"), "include": ["*best*"]})
    assert failed and result["copied"] == []
    assert not (tmp_path / "d" / "ckpt" / "best.pt").exists()


def test_identity_covers_ctime_and_inode(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"a")
    before = os.stat(str(path))
    os.utime(str(path), ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(str(path))
    assert sync.identity(before)[:4] == sync.identity(after)[:4]
    assert len(sync.identity(before)) == 5 and sync.identity(before)[1] == before.st_ino
