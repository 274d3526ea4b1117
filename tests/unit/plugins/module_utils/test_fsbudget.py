from __future__ import annotations

import os

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import fsbudget


def statvfs(frsize=4096, blocks=1000, bavail=500, files=1000, favail=830):
    """A real os.statvfs_result with chosen numbers (bsize, frsize, blocks, bfree, bavail, files, ffree, favail, flag, namemax)."""
    return os.statvfs_result((frsize, frsize, blocks, bavail, bavail, files, favail, favail, 0, 255))


@pytest.mark.parametrize("number, text", [(0, "0"), (830, "830"), (1200, "1 200"), (1234567, "1 234 567")])
def test_fmt_count_uses_a_plain_space(number, text):
    assert fsbudget.fmt_count(number) == text


def test_nearest_existing_walks_up_to_an_existing_ancestor(tmp_path):
    assert fsbudget.nearest_existing(str(tmp_path / "a" / "b" / "c")) == str(tmp_path)
    assert fsbudget.nearest_existing(str(tmp_path)) == str(tmp_path)


def test_fs_free_measures_the_ancestor_of_a_missing_path(tmp_path):
    probe, st = fsbudget.fs_free(str(tmp_path / "not" / "yet"))
    assert probe == str(tmp_path)
    assert fsbudget.free_bytes(st) == st.f_bavail * st.f_frsize


def test_check_budget_fits():
    assert fsbudget.check_budget(4096, 10, statvfs()) is None


def test_check_budget_inodes_message_has_the_numbers():
    message = fsbudget.check_budget(0, 1200, statvfs(favail=830), where="/root/autodl-fs")
    assert message == "needs 1 200 inodes, 830 free on /root/autodl-fs"


def test_check_budget_bytes_and_inodes_both_reported():
    message = fsbudget.check_budget(4096 * 501, 831, statvfs(), where="/d")
    assert message == "needs 2 052 096 bytes, 2 048 000 free on /d; needs 831 inodes, 830 free on /d"


def test_check_budget_margins_must_stay_free():
    st = statvfs(bavail=10, favail=10)
    assert fsbudget.check_budget(4096 * 5, 5, st, reserve_bytes=4096 * 5, min_free_inodes=5) is None
    message = fsbudget.check_budget(4096 * 5, 5, st, reserve_bytes=4096 * 5 + 1, min_free_inodes=6)
    assert "(+ 20 481 kept free)" in message and "needs 5 inodes (+ 6 kept free), 10 free" in message


def test_filesystem_without_inode_count_checks_bytes_only():
    st = statvfs(files=0, favail=0)
    assert fsbudget.free_inodes(st) is None
    assert fsbudget.check_budget(0, 10 ** 9, st) is None


def test_copy_needs_rounds_to_blocks_and_counts_dirs_and_temp_inode():
    need_bytes, need_inodes = fsbudget.copy_needs([1, 4096, 4097, 0], new_files=3, new_dirs=2, block_size=4096)
    assert need_bytes == 4096 + 4096 + 8192 + 0 + 2 * 4096
    assert need_inodes == 3 + 2 + 1
    assert fsbudget.copy_needs([], 0, 0, 4096) == (0, 0)


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount tmpfs")
def test_real_tmpfs_inode_cap_is_seen(tmp_path, tmpfs):
    with tmpfs(tmp_path / "mnt", "size=1m,nr_inodes=20") as mnt:
        probe, st = fsbudget.fs_free(str(mnt / "sub" / "dir"))
        assert probe == str(mnt)
        free = fsbudget.free_inodes(st)
        assert 0 < free < 20
        message = fsbudget.check_budget(0, free + 1, st, where=str(mnt))
        assert message == "needs %s inodes, %s free on %s" % (free + 1, free, mnt)
