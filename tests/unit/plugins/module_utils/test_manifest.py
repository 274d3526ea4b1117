from __future__ import annotations

import hashlib
import json
import os
import stat

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


# --------------------------------------------------------------------------- hostile rosters and links


@pytest.mark.parametrize("entry, message", [
    ("a\x00b", "control character"),
    ("best.pt\nmetrics.json", "control character"),
    ("ckpt/../best.bin", "'..' component"),
    ("ckpt/..", "'..' component"),
])
def test_hostile_roster_entries_are_refused(entry, message):
    with pytest.raises(mf.ManifestError, match=message):
        mf.normalize_rel(entry)


def test_a_link_inside_the_root_is_recorded_as_the_file_it_points_to(result_root):
    (result_root / "best.bin").symlink_to("ckpt/best.bin")
    (result_root / "latest").symlink_to("ckpt", target_is_directory=True)
    got = mf.build_manifest(str(result_root), ["best.bin", "latest/best.bin", "ckpt/best.bin"])
    digests = set((f["bytes"], f["sha256"]) for f in got["files"])
    assert [f["path"] for f in got["files"]] == ["best.bin", "ckpt/best.bin", "latest/best.bin"]
    assert digests == {(3000, hashlib.sha256(b"\x01" * 3000).hexdigest())}


@pytest.mark.parametrize("make, message", [
    (lambda root, out: (root / "leak").symlink_to(out / "secret"), "leads outside the root"),
    (lambda root, out: (root / "leak").symlink_to("../outside/secret"), "leads outside the root"),
    (lambda root, out: (root / "leak").symlink_to("nothing-here"), "to nothing"),
    (lambda root, out: ((root / "leak").symlink_to("loop"), (root / "loop").symlink_to("leak")), "cannot be resolved"),
    (lambda root, out: os.mkfifo(str(root / "leak")), "not a regular file but a FIFO"),
])
def test_links_out_of_the_root_dangling_links_loops_and_fifos_are_refused(result_root, tmp_path, make, message):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"credential")
    make(result_root, outside)
    with pytest.raises(mf.ManifestError, match=message):
        mf.build_manifest(str(result_root), ["leak"])


def test_a_directory_link_out_of_the_root_is_refused(result_root, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "w.bin").write_bytes(b"w")
    (result_root / "shared").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(mf.ManifestError, match="shared -> .*leads outside the root"):
        mf.build_manifest(str(result_root), ["shared/w.bin"])


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_a_device_on_the_roster_is_refused_without_reading_it(result_root):
    os.mknod(str(result_root / "zero"), 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero
    with pytest.raises(mf.ManifestError, match="character device"):
        mf.build_manifest(str(result_root), ["zero"])


def test_a_manifest_with_no_files_is_refused():
    with pytest.raises(mf.ManifestError, match="lists no files"):
        mf.load_manifest('{"version": 1, "files": []}')


def test_roster_file_that_is_a_fifo_or_too_large_is_refused(tmp_path, monkeypatch):
    fifo = tmp_path / "roster"
    os.mkfifo(str(fifo))
    with pytest.raises(mf.ManifestError, match="FIFO"):
        mf.read_roster_file(str(fifo))
    big = tmp_path / "big"
    big.write_text("a\n" * 10)
    monkeypatch.setattr(mf, "MAX_ROSTER_FILE_BYTES", 8)
    with pytest.raises(mf.ManifestError, match="larger than 8 bytes"):
        mf.read_roster_file(str(big))


def test_a_link_in_the_copy_is_a_symlink_problem_and_is_never_read(pulled, tmp_path):
    built, copy = pulled
    secret = tmp_path / "secret"
    secret.write_bytes((copy / "notes.txt").read_bytes())   # the same bytes: only the link is wrong
    (copy / "notes.txt").unlink()
    (copy / "notes.txt").symlink_to(secret)
    problems = mf.compare_manifest(built, str(copy))
    assert [(p["code"], p["path"]) for p in problems] == [("symlink", "notes.txt")]
    assert "a verified pull holds real files" in problems[0]["message"]


def test_a_fifo_in_the_copy_is_not_a_file_and_does_not_hang(pulled):
    built, copy = pulled
    (copy / "notes.txt").unlink()
    os.mkfifo(str(copy / "notes.txt"))
    assert [(p["code"], p["path"]) for p in mf.compare_manifest(built, str(copy))] == [("not_a_file", "notes.txt")]


def test_links_and_fifos_not_on_the_roster_are_extra(pulled):
    built, copy = pulled
    (copy / "dangling").symlink_to("nowhere")
    (copy / "dirlink").symlink_to("ckpt", target_is_directory=True)
    os.mkfifo(str(copy / "pipe"))
    extras = [p["path"] for p in mf.compare_manifest(built, str(copy)) if p["code"] == "extra"]
    assert extras == ["dangling", "dirlink", "pipe"]


def test_materialize_links_makes_links_inside_real_and_leaves_links_out(tmp_path):
    copy = tmp_path / "copy"
    (copy / "epoch_10").mkdir(parents=True)
    (copy / "epoch_10" / "model.pt").write_bytes(b"M" * 10)
    (copy / "best.pt").symlink_to("epoch_10/model.pt")
    (copy / "latest").symlink_to("epoch_10", target_is_directory=True)
    (tmp_path / "out.pt").write_bytes(b"O")
    (copy / "leak.pt").symlink_to(tmp_path / "out.pt")
    manifest = {"files": [{"path": p} for p in ("best.pt", "epoch_10/model.pt", "latest/model.pt", "leak.pt")]}
    assert mf.materialize_links(manifest, str(copy)) == ["best.pt", "latest/model.pt"]
    for rel in ("best.pt", "latest/model.pt"):
        assert mf.link_in_path(str(copy), rel) is None and (copy / rel).read_bytes() == b"M" * 10
    assert (copy / "latest").is_dir() and not (copy / "latest").is_symlink()
    assert (copy / "leak.pt").is_symlink() and (tmp_path / "out.pt").read_bytes() == b"O"
