from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import atomic


def test_writes_text_or_bytes_with_the_mode_and_no_temp_left(tmp_path):
    target = tmp_path / "sub" / "report.json"
    with pytest.raises(OSError):
        atomic.write_atomic(str(target), "no parent")
    atomic.write_atomic(str(target), '{"a": 1}\n', make_dirs=True)
    assert target.read_text() == '{"a": 1}\n'
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    atomic.write_atomic(str(target), b"new", mode=0o600)
    assert target.read_bytes() == b"new" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(os.listdir(target.parent)) == ["report.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "PULL_MANIFEST.json"
    target.write_text("old")

    def broken_replace(_src, _dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(atomic.os, "replace", broken_replace)
    with pytest.raises(OSError):
        atomic.write_atomic(str(target), "new")
    assert target.read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["PULL_MANIFEST.json"]


def test_fsync_dir_tolerates_only_filesystems_that_cannot(tmp_path, monkeypatch):
    atomic.fsync_dir(str(tmp_path))

    def einval(_fd):
        raise OSError(22, "Invalid argument")
    monkeypatch.setattr(atomic.os, "fsync", einval)
    atomic.fsync_dir(str(tmp_path))

    def eio(_fd):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(atomic.os, "fsync", eio)
    with pytest.raises(OSError):
        atomic.fsync_dir(str(tmp_path))


def test_replacing_lets_the_block_check_the_closed_temp_before_the_rename(tmp_path):
    target = tmp_path / "best.pt"
    target.write_bytes(b"old")
    seen = []
    with atomic.replacing(str(target), prefix=".best.pt.checked_sync.") as staged:
        staged.file.write(b"new")
        staged.close()
        staged.close()  # idempotent
        assert os.path.basename(staged.name).startswith(".best.pt.checked_sync.") and staged.name.endswith(".tmp")
        seen.append(open(staged.name, "rb").read())
        assert target.read_bytes() == b"old"  # not yet renamed
    assert seen == [b"new"] and target.read_bytes() == b"new"
    assert sorted(os.listdir(tmp_path)) == ["best.pt"]


def test_replacing_refused_by_the_block_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "best.pt"
    target.write_bytes(b"old")
    with pytest.raises(ValueError, match="read back differs"):
        with atomic.replacing(str(target)) as staged:
            staged.file.write(b"new")
            staged.close()
            raise ValueError("read back differs")
    with pytest.raises(KeyboardInterrupt):
        with atomic.replacing(str(target)) as staged:
            staged.file.write(b"half")
            raise KeyboardInterrupt
    assert target.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["best.pt"]
