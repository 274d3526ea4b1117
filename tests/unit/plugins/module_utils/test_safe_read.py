"""module_utils/safe_read.py: bounded reads that never block and follow no link they should not."""

from __future__ import annotations

import os
import time

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import safe_read


def test_a_regular_file_is_read_to_its_bound_from_the_start_or_the_end(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"0123456789")
    assert safe_read.read_bounded(str(path), 4) == (b"0123", 10, True)
    assert safe_read.read_bounded(str(path), 4, tail=True) == (b"6789", 10, True)
    assert safe_read.read_bounded(str(path), 100) == (b"0123456789", 10, False)
    assert safe_read.read_text(str(path), 3) == "012"


def test_a_fifo_a_device_a_directory_and_a_link_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(str(fifo))
    link = tmp_path / "link"
    (tmp_path / "target").write_text("secret")
    os.symlink(str(tmp_path / "target"), str(link))
    started = time.monotonic()
    for path, words in ((fifo, "FIFO"), ("/dev/zero", "character device"), (tmp_path, "directory"),
                        (link, "symlink")):
        with pytest.raises(safe_read.ReadRefused, match=words):
            safe_read.read_bounded(str(path))
        assert safe_read.read_text(str(path)) is None
    assert time.monotonic() - started < 2
    assert safe_read.read_text(str(link), follow=True) == "secret"
    with pytest.raises(FileNotFoundError):
        safe_read.read_bounded(str(tmp_path / "missing"))


def test_relative_to_an_open_directory(tmp_path):
    (tmp_path / "a.jsonl").write_text("x\n")
    os.mkfifo(str(tmp_path / "b.jsonl"))
    dir_fd = os.open(str(tmp_path), os.O_RDONLY)
    try:
        fd = safe_read.open_regular("a.jsonl", dir_fd=dir_fd)
        os.close(fd)
        with pytest.raises(safe_read.ReadRefused, match="FIFO"):
            safe_read.open_regular("b.jsonl", dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def test_inside_lexically_and_resolved(tmp_path):
    root = tmp_path / "job"
    (root / "logs").mkdir(parents=True)
    os.symlink("/etc", str(root / "out"))
    assert safe_read.inside(str(root / "logs" / "a.log"), str(root))
    assert safe_read.inside("logs/a.log", str(root))
    assert not safe_read.inside(str(root / ".." / "x"), str(root))
    assert not safe_read.inside("/etc/shadow", str(root))
    assert not safe_read.inside(str(tmp_path / "job2" / "x"), str(root))  # a sibling that shares the prefix
    assert safe_read.inside(str(root / "out" / "shadow"), str(root))
    assert not safe_read.resolved_inside(str(root / "out" / "shadow"), str(root))
    assert safe_read.resolved_inside(str(root / "logs" / "a.log"), str(root))
    assert not safe_read.inside(None, str(root)) and not safe_read.inside("a\x00b", str(root))
