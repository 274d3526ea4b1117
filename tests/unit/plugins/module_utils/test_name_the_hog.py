"""A full disk names its largest consumers with the command that clears or moves each (issue 34, item 4)."""
from __future__ import annotations

import os

from ansible_collections.remote_gpu.trainer.plugins.module_utils import inode_check


def fill(path, size):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(b"\0" * size)


def disk(tmp_path):
    root = tmp_path / "data"
    fill(str(root / "hf" / "hub" / "models--org--big" / "blobs" / "a"), 300_000)
    fill(str(root / ".cache" / "pip" / "http-v2" / "x"), 100_000)
    os.makedirs(str(root / ".cache" / "pip" / "wheels"))
    for i in range(3):
        fill(str(root / "outputs" / "ckpt" / ("epoch%d.pt" % i)), 50_000)
    for i in range(1200):
        fill(str(root / "samples" / ("%04d.png" % i)), 10)
    os.symlink("/", str(root / "link"))
    return str(root)


def test_largest_consumers_by_bytes_and_by_inodes_with_their_kinds(tmp_path):
    root = disk(tmp_path)
    rows = inode_check.largest_consumers(root, 3)
    assert [(os.path.relpath(r["path"], root), r["kind"]) for r in rows] == [
        ("hf", "hf_cache"), ("outputs", "checkpoints"), (".cache/pip", "pip_cache")]
    assert rows[0]["bytes"] == 300_000
    assert rows[0]["command"].startswith("huggingface-cli delete-cache --dir '%s/hf/hub'" % root)
    by_inodes = inode_check.largest_consumers(root, 1, by="inodes")[0]
    assert by_inodes["kind"] == "per_sample" and by_inodes["inodes"] == 1201
    assert by_inodes["command"].startswith("tar -cf '%s/samples.tar' -C '%s' 'samples' && rm -rf" % (root, root))
    kinds = {os.path.relpath(r["path"], root): r for r in inode_check.largest_consumers(root, 10)}
    assert kinds[".cache/pip"]["kind"] == "pip_cache"
    assert kinds[".cache/pip"]["command"] == "PIP_CACHE_DIR='%s/.cache/pip' pip cache purge" % root
    assert kinds["outputs"]["command"].endswith("(pull them first: the playbook remote_gpu.trainer.teardown)")
    assert inode_check.consumer_kind(os.path.join(root, "outputs", "ckpt"), 3, 150_000, 3) == "checkpoints"
    assert kinds["link"]["inodes"] == 1    # a symlink is never followed
    assert any(r["truncated"] for r in inode_check.largest_consumers(root, 10, max_entries=5))


def test_a_disk_finding_names_the_hogs_and_other_findings_are_unchanged(tmp_path):
    root = disk(tmp_path)
    usage = {"path": root, "exists": True, "bytes_pct": 97, "bytes_free": 1, "bytes_total": 100,
             "inodes_pct": 10, "inodes_free": 900, "inodes_total": 1000}
    other = {"level": "WARN", "code": "hf_cache_large", "message": "m", "action": "a", "path": root}
    found = inode_check.with_hogs(inode_check.threshold_findings(usage, 85, 95) + [other])
    assert found[1] == other
    full = found[0]
    assert full["code"] == "bytes_high" and full["level"] == "FAIL"
    assert "largest: Hugging Face cache %s/hf (293.0 KiB" % root in full["message"]
    assert "huggingface-cli delete-cache --dir" in full["action"] and full["consumers"][0]["kind"] == "hf_cache"
    assert inode_check.name_hogs(full, []) is full


def test_one_walk_per_path_for_its_bytes_and_its_inodes(tmp_path):
    root = disk(tmp_path)
    usage = {"path": root, "exists": True, "bytes_pct": 97, "bytes_free": 1, "bytes_total": 100,
             "inodes_pct": 97, "inodes_free": 1, "inodes_total": 1000}
    walks = []

    def measure(*args):
        walks.append(args)
        return inode_check.largest_consumers(*args)

    found = inode_check.with_hogs(inode_check.threshold_findings(usage, 85, 95), measure=measure)
    assert [f["code"] for f in found] == ["bytes_high", "inodes_exhausted"] and len(walks) == 1
    assert found[0]["consumers"][0]["kind"] == "hf_cache" and found[1]["consumers"][0]["kind"] == "per_sample"
    assert "samples.tar" in found[1]["action"]
