from __future__ import annotations

import os
import subprocess

from ansible_collections.remote_gpu.trainer.plugins.module_utils import inode_check


class FakeStatvfs:
    """The fields of os.statvfs_result that usage_from_statvfs reads."""

    def __init__(self, blocks, bfree, bavail, files, ffree, favail, frsize=4096):
        self.f_frsize = frsize
        self.f_bsize = frsize
        self.f_blocks = blocks
        self.f_bfree = bfree
        self.f_bavail = bavail
        self.f_files = files
        self.f_ffree = ffree
        self.f_favail = favail


def codes(found):
    return sorted(f["code"] for f in found)


def test_percent_rounds_up_like_df():
    assert inode_check.percent(1, 199) == 1
    assert inode_check.percent(0, 100) == 0
    assert inode_check.percent(91, 9) == 91
    assert inode_check.percent(0, 0) is None


def test_usage_reports_bytes_and_inodes():
    usage = inode_check.usage_from_statvfs("/d", FakeStatvfs(1000, 400, 300, 200000, 18000, 18000))
    assert usage["bytes_total"] == 1000 * 4096
    assert usage["bytes_used"] == 600 * 4096
    assert usage["bytes_free"] == 300 * 4096
    assert usage["bytes_pct"] == 67  # 600 / (600 + 300), rounded up
    assert usage["inodes_used"] == 182000
    assert usage["inodes_pct"] == 91


def test_filesystem_without_inodes_reports_none_and_no_inode_finding():
    usage = inode_check.usage_from_statvfs("/btrfs", FakeStatvfs(1000, 900, 900, 0, 0, 0))
    assert usage["inodes_total"] is None and usage["inodes_pct"] is None
    assert inode_check.threshold_findings(usage, 85, 95) == []


def test_inodes_high_warns_while_bytes_are_fine():
    usage = inode_check.usage_from_statvfs("/root/autodl-fs", FakeStatvfs(1000, 700, 700, 200000, 18000, 18000))
    found = inode_check.threshold_findings(usage, 85, 95)
    assert codes(found) == ["inodes_high"]
    assert found[0]["level"] == "WARN"
    assert "18000 free of 200000" in found[0]["message"]


def test_inodes_exhausted_at_fail_threshold_and_at_zero_free():
    at_fail = inode_check.usage_from_statvfs("/fs", FakeStatvfs(1000, 700, 700, 1000, 40, 40))
    assert [(f["code"], f["level"]) for f in inode_check.threshold_findings(at_fail, 85, 95)] == [("inodes_exhausted", "FAIL")]
    zero = inode_check.usage_from_statvfs("/fs", FakeStatvfs(1000, 700, 700, 10 ** 9, 0, 0))
    assert codes(inode_check.threshold_findings(zero, 85, 95)) == ["inodes_exhausted"]


def test_bytes_high_levels():
    warn = inode_check.usage_from_statvfs("/d", FakeStatvfs(100, 10, 10, 100, 90, 90))
    assert [(f["code"], f["level"]) for f in inode_check.threshold_findings(warn, 85, 95)] == [("bytes_high", "WARN")]
    fail = inode_check.usage_from_statvfs("/d", FakeStatvfs(100, 2, 2, 100, 90, 90))
    assert [(f["code"], f["level"]) for f in inode_check.threshold_findings(fail, 85, 95)] == [("bytes_high", "FAIL")]


def test_missing_path_is_a_finding():
    found = inode_check.threshold_findings(inode_check.missing_usage("/nope"), 85, 95)
    assert codes(found) == ["path_missing"]
    assert found[0]["path"] == "/nope"


def test_budget_findings_name_the_numbers():
    usage = inode_check.usage_from_statvfs("/fs", FakeStatvfs(1000, 500, 500, 1000, 830, 830))
    found = inode_check.budget_findings(usage, "export", 10 * 1000 * 4096, 1200)
    assert codes(found) == ["budget_bytes_short", "budget_inodes_short"]
    inode_msg = [f["message"] for f in found if f["code"] == "budget_inodes_short"][0]
    assert "1200" in inode_msg and "830 free" in inode_msg
    assert inode_check.budget_findings(usage, "small", 4096, 10) == []


def make_tree(root):
    (root / "many").mkdir()
    for i in range(3000):
        (root / "many" / ("f%d" % i)).touch()
    (root / "nested" / "a" / "b").mkdir(parents=True)
    for i in range(50):
        (root / "nested" / "a" / "b" / ("g%d" % i)).write_bytes(b"x" * 10)
    (root / "single.bin").write_bytes(b"y" * 100)
    os.symlink("/usr", root / "link-to-usr")


def test_top_consumers_match_du_inodes(tmp_path):
    make_tree(tmp_path)
    rows, errors = inode_check.top_inode_consumers(str(tmp_path), 10)
    assert errors == []
    assert rows[0]["path"] == str(tmp_path / "many")
    ours = {row["path"]: row["inodes"] for row in rows}
    out = subprocess.run(["du", "--inodes", "-d1", str(tmp_path)], capture_output=True, text=True, check=True,
                         env={"LC_ALL": "C", "PATH": os.environ["PATH"]}).stdout
    theirs = {}
    for line in out.splitlines():
        count, path = line.split("\t", 1)
        if path != str(tmp_path):
            theirs[path] = int(count)
    # du does not list plain files with -d1; compare the directories
    for path, count in theirs.items():
        assert ours[path] == count, path


def test_top_consumers_limit_and_unreadable_root(tmp_path):
    make_tree(tmp_path)
    rows, _errors = inode_check.top_inode_consumers(str(tmp_path), 1)
    assert len(rows) == 1
    rows, errors = inode_check.top_inode_consumers(str(tmp_path / "absent"), 3)
    assert rows == [] and "absent" in errors[0]


def test_150k_file_directory_is_the_top_consumer(tmp_path):
    big = tmp_path / "eval_images"
    big.mkdir()
    for i in range(150000):
        os.close(os.open(str(big / ("%06d.png" % i)), os.O_CREAT | os.O_WRONLY, 0o644))
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "last.pt").write_bytes(b"z")
    rows, _errors = inode_check.top_inode_consumers(str(tmp_path), 3)
    assert rows[0] == {"path": str(big), "inodes": 150001}


def test_hf_cache_symlink_onto_another_directory(tmp_path):
    target = tmp_path / "data" / "huggingface_cache"
    model = target / "hub" / "models--org--tiny"
    (model / "blobs").mkdir(parents=True)
    (model / "blobs" / "abc").write_bytes(b"w" * 1234)
    (model / "snapshots" / "rev").mkdir(parents=True)
    os.symlink("../../blobs/abc", model / "snapshots" / "rev" / "model.bin")
    home = tmp_path / "home"
    (home / ".cache").mkdir(parents=True)
    os.symlink(target, home / ".cache" / "huggingface")
    report = inode_check.hf_cache_report(str(home / ".cache" / "huggingface"), str(home))
    assert report["exists"] and report["is_symlink"]
    assert report["target"] == str(target)
    assert report["bytes"] == 1234 and report["files"] == 1
    assert report["models"] == [{"name": "models--org--tiny", "bytes": 1234}]
    assert report["other_filesystem"] is False  # same tmp filesystem here; the root test covers True


def test_hf_cache_absent_and_dangling(tmp_path):
    assert inode_check.hf_cache_report(str(tmp_path / "none"), str(tmp_path))["exists"] is False
    os.symlink(tmp_path / "gone", tmp_path / "dangling")
    report = inode_check.hf_cache_report(str(tmp_path / "dangling"), str(tmp_path))
    assert report["is_symlink"] and not report["exists"]


def test_hf_cache_large_only_on_the_home_filesystem():
    report = {"path": "/root/.cache/huggingface", "exists": True, "bytes": 12 * 1024 ** 3, "other_filesystem": False,
              "models": [{"name": "models--meta-llama--Llama-3.1-8B", "bytes": 11 * 1024 ** 3}]}
    found = inode_check.hf_cache_findings(report, 10 * 1024 ** 3)
    assert codes(found) == ["hf_cache_large"] and "Llama-3.1-8B" in found[0]["message"]
    assert inode_check.hf_cache_findings(dict(report, other_filesystem=True), 10 * 1024 ** 3) == []
    assert inode_check.hf_cache_findings(dict(report, bytes=1024), 10 * 1024 ** 3) == []
    assert inode_check.hf_cache_findings(None, 1) == []


def test_human_bytes():
    assert inode_check.human_bytes(512) == "512 B"
    assert inode_check.human_bytes(1536) == "1.5 KiB"
    assert inode_check.human_bytes(5 * 1024 ** 3) == "5.0 GiB"


RUNPOD_TIERS = [
    {"name": "system", "path": "/", "lost_on": ["stop", "terminate"], "note": "container disk"},
    {"name": "data", "path": "/workspace", "lost_on": ["terminate"], "note": "volume disk"},
    {"name": "durable", "path": "/workspace", "lost_on": [], "note": "only when a Network Volume is attached"},
]


def fake_devices(devices):
    return devices.get, (lambda path: "/")


def test_durable_dir_on_the_container_disk_is_not_separate():
    device, mount = fake_devices({"/": 1, "/workspace": 1})
    found = inode_check.separation_findings("/workspace", RUNPOD_TIERS, device, mount)
    assert [(f["code"], f["level"]) for f in found] == [("durable_not_separate", "WARN")]
    assert "same filesystem as the system tier / (container disk)" in found[0]["message"]
    assert "lost on stop, terminate" in found[0]["message"]
    assert "only when a Network Volume is attached" in found[0]["action"]


def test_durable_dir_on_its_own_filesystem_is_no_finding():
    device, mount = fake_devices({"/": 1, "/workspace": 2})
    assert inode_check.separation_findings("/workspace", RUNPOD_TIERS, device, mount) == []


def test_tiers_at_the_durable_path_lost_on_nothing_or_missing_are_not_compared():
    device, mount = fake_devices({"/": 1, "/workspace": 1})
    # the data tier shares the durable path (RunPod's volume disk and Network Volume are both /workspace)
    assert inode_check.separation_findings("/workspace", RUNPOD_TIERS[1:], device, mount) == []
    # a tier lost on nothing, a tier whose path does not exist, no durable dir, a durable dir that does not exist
    tiers = [{"name": "home", "path": "/", "lost_on": []}, {"name": "gone", "path": "/gone", "lost_on": ["x"]}]
    assert inode_check.separation_findings("/workspace", tiers, device, mount) == []
    assert inode_check.separation_findings("", RUNPOD_TIERS, device, mount) == []
    assert inode_check.separation_findings("/nope", RUNPOD_TIERS, device, mount) == []


def test_separation_against_real_filesystems(tmp_path):
    """Two directories of one filesystem are not separate; /proc is another filesystem."""
    (tmp_path / "durable").mkdir()
    tiers = [{"name": "system", "path": str(tmp_path), "lost_on": ["terminate"]}]
    found = inode_check.separation_findings(str(tmp_path / "durable"), tiers)
    assert [f["code"] for f in found] == ["durable_not_separate"]
    assert "(mounted at %s)" % inode_check.mount_point(str(tmp_path)) in found[0]["message"]
    assert inode_check.separation_findings("/proc", tiers) == []
    assert inode_check.mount_point("/proc/self") == "/proc"
