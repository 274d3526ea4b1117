from __future__ import annotations

import hashlib
import json

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import manifest as mf

# fake_torch is a fixture
from checkpoint_files import (  # noqa: F401 pylint: disable=unused-import
    codes,
    fake_torch,
    flip_byte_in_member,
    write_safetensors,
    write_torch_zip,
)


# --------------------------------------------------------------------------- roster


def test_parse_roster_skips_blanks_and_comments():
    text = "# results\nbest.pt\n\n  metrics/val.json  \n# ckpt/old.pt\n"
    assert mf.parse_roster(text) == ["best.pt", "metrics/val.json"]


@pytest.mark.parametrize("entry", ["/etc/passwd", "../x", "a/../../x", "", ".", None])
def test_roster_entries_must_stay_inside_the_root(entry):
    with pytest.raises(mf.ManifestError):
        mf.normalize_rel(entry)


def test_read_roster_file_missing_is_a_manifest_error(tmp_path):
    with pytest.raises(mf.ManifestError, match="cannot read roster file"):
        mf.read_roster_file(str(tmp_path / "absent"))


@pytest.fixture
def result_root(tmp_path):
    root = tmp_path / "run"
    (root / "ckpt").mkdir(parents=True)
    (root / "ckpt" / "best.bin").write_bytes(b"\x01" * 3000)
    (root / "metrics.json").write_text('{"acc": 0.9}\n')
    (root / "notes.txt").write_text("hello\n")
    return root


def test_build_manifest_sorted_with_bytes_and_sha(result_root):
    got = mf.build_manifest(str(result_root), ["metrics.json", "./ckpt/best.bin", "metrics.json"])
    assert got["version"] == 1 and got["root"] == str(result_root)
    assert [f["path"] for f in got["files"]] == ["ckpt/best.bin", "metrics.json"]
    assert got["files"][0] == {"path": "ckpt/best.bin", "bytes": 3000,
                               "sha256": hashlib.sha256(b"\x01" * 3000).hexdigest()}
    assert got["total_bytes"] == 3000 + len('{"acc": 0.9}\n')


def test_build_manifest_missing_entry_names_the_file(result_root):
    with pytest.raises(mf.ManifestError, match="roster file ckpt/last.bin is missing"):
        mf.build_manifest(str(result_root), ["metrics.json", "ckpt/last.bin"])


def test_build_manifest_directory_entry_is_an_error(result_root):
    with pytest.raises(mf.ManifestError, match="not a regular file"):
        mf.build_manifest(str(result_root), ["ckpt"])


def test_empty_roster_is_an_error(result_root):
    with pytest.raises(mf.ManifestError, match="empty"):
        mf.build_manifest(str(result_root), [])


def test_manifest_round_trips_through_canonical_json(result_root):
    built = mf.build_manifest(str(result_root), ["metrics.json", "notes.txt"])
    data = mf.manifest_bytes(built)
    assert data.endswith(b"\n") and data == mf.manifest_bytes(json.loads(data))
    assert mf.load_manifest(data) == built


@pytest.mark.parametrize("broken, message", [
    ("[]", "not a JSON object"),
    ('{"version": 2, "files": []}', "unsupported manifest version"),
    ('{"version": 1}', "no 'files' list"),
    ('{"version": 1, "files": [{"path": "../x", "bytes": 1, "sha256": "%s"}]}' % ("0" * 64), "outside the root"),
    ('{"version": 1, "files": [{"path": "x", "bytes": -1, "sha256": "%s"}]}' % ("0" * 64), "valid 'bytes'"),
    ('{"version": 1, "files": [{"path": "x", "bytes": 1, "sha256": "abc"}]}', "valid 'sha256'"),
    ("{not json", "not valid JSON"),
])
def test_load_manifest_rejects_malformed(broken, message):
    with pytest.raises(mf.ManifestError, match=message):
        mf.load_manifest(broken)


# --------------------------------------------------------------------------- comparison


@pytest.fixture
def pulled(result_root, tmp_path):
    built = mf.build_manifest(str(result_root), ["ckpt/best.bin", "metrics.json", "notes.txt"])
    copy = tmp_path / "pulled"
    for item in built["files"]:
        target = copy / item["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((result_root / item["path"]).read_bytes())
    return built, copy


def test_compare_clean_copy_has_no_problems(pulled):
    built, copy = pulled
    assert mf.compare_manifest(built, str(copy)) == []


def test_compare_reports_each_problem_with_its_code(pulled):
    built, copy = pulled
    (copy / "notes.txt").unlink()
    (copy / "metrics.json").write_text('{"acc": 0.1}\n')  # same size, different bytes
    (copy / "ckpt" / "best.bin").write_bytes(b"\x01" * 2999)
    (copy / "ckpt" / "stray.tmp").write_bytes(b"x")
    problems = mf.compare_manifest(built, str(copy))
    assert sorted((p["code"], p["path"]) for p in problems) == [
        ("extra", "ckpt/stray.tmp"), ("missing", "notes.txt"),
        ("sha256_mismatch", "metrics.json"), ("size_mismatch", "ckpt/best.bin")]
    size = [p for p in problems if p["code"] == "size_mismatch"][0]
    assert "2999" in size["message"] and "3000" in size["message"]
    assert "extra" not in codes(mf.compare_manifest(built, str(copy), allow_extra=True))


# --------------------------------------------------------------------------- the whole verification


def test_verify_directory_checks_roster_then_loadability(tmp_path, fake_torch):
    root = tmp_path / "root"
    root.mkdir()
    write_torch_zip(root / "best.pt", fake_torch)
    write_safetensors(root / "last.safetensors")
    (root / "metrics.json").write_text("{}\n")
    built = mf.build_manifest(str(root), ["best.pt", "last.safetensors", "metrics.json"])
    assert mf.verify_directory(built, str(root), use_torch=False) == []

    flip_byte_in_member(root / "best.pt", "archive/data/1")
    problems = mf.verify_directory(built, str(root), use_torch=False)
    assert codes(problems) == ["sha256_mismatch"]  # a file that fails the hash is not also load-checked

    rebuilt = mf.build_manifest(str(root), ["best.pt", "last.safetensors", "metrics.json"])
    problems = mf.verify_directory(rebuilt, str(root), use_torch=False)
    assert [(p["code"], p["path"]) for p in problems] == [("not_loadable", "best.pt")]
