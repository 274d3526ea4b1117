from __future__ import annotations

import hashlib
import os

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import digest


def test_sha256_file_reads_in_chunks(tmp_path):
    data = bytes(range(256)) * (5 * 4096 + 7)  # a bit over 5 MiB
    (tmp_path / "f").write_bytes(data)
    assert digest.sha256_file(str(tmp_path / "f")) == (hashlib.sha256(data).hexdigest(), len(data))
    assert digest.sha256_file(str(tmp_path / "f"), chunk_size=1000)[0] == hashlib.sha256(data).hexdigest()


def test_sha256_file_refuses_a_fifo_without_hanging(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(str(fifo))
    with pytest.raises(OSError, match="not a regular file .FIFO."):
        digest.sha256_file(str(fifo))


def test_sha256_file_refuses_a_directory_and_a_device(tmp_path):
    with pytest.raises(OSError, match="directory"):
        digest.sha256_file(str(tmp_path))
    with pytest.raises(OSError, match="character device"):
        digest.sha256_file("/dev/null")
