from __future__ import annotations

import collections
import hashlib
import io
import json
import pickle
import struct
import sys
import types
import zipfile

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import manifest as mf


# --------------------------------------------------------------------------- builders of real files


class FakeStorage:
    """Stands in for a torch storage: pickled as a persistent id, like torch.save does."""

    def __init__(self, key, numel):
        self.key = key
        self.numel = numel


class FakeTensor:
    """Reduces to torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks)."""

    def __init__(self, storage, size):
        self.storage = storage
        self.size = size

    def __reduce_ex__(self, protocol):
        rebuild = sys.modules["torch._utils"]._rebuild_tensor_v2
        return rebuild, (self.storage, 0, self.size, (self.size[1], 1), False, collections.OrderedDict())


@pytest.fixture
def fake_torch(monkeypatch):
    """Importable ``torch`` / ``torch._utils`` stand-ins so that pickle writes torch's GLOBAL names."""
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")
    torch.FloatStorage = type("FloatStorage", (), {"__module__": "torch"})

    def _rebuild_tensor_v2(*args):
        return args

    _rebuild_tensor_v2.__module__ = "torch._utils"
    _rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    torch._utils = utils
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch._utils", utils)
    return torch


def torch_pickle(torch, state):
    """Pickle ``state`` the way torch.save does (protocol 2, storages as persistent ids)."""
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=2)

    def persistent_id(obj):
        if isinstance(obj, FakeStorage):
            return ("storage", torch.FloatStorage, obj.key, "cpu", obj.numel)
        return None

    pickler.persistent_id = persistent_id
    pickler.dump(state)
    return buf.getvalue()


def write_torch_zip(path, torch, storage_bytes=None, data_pkl=None, members=None):
    """The PyTorch zip layout: archive/data.pkl, archive/data/<key>, archive/version, archive/byteorder."""
    weight = FakeStorage("0", 6)
    bias = FakeStorage("1", 2)
    state = collections.OrderedDict([("fc.weight", FakeTensor(weight, (2, 3))), ("fc.bias", FakeTensor(bias, (1, 2)))])
    payload = {"model": state, "epoch": 7, "best": 0.25, "names": ["a", "b"], "flags": {True, False}}
    storages = {"0": struct.pack("<6f", *range(6)), "1": struct.pack("<2f", 1.0, 2.0)}
    storages.update(storage_bytes or {})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", data_pkl if data_pkl is not None else torch_pickle(torch, payload))
        archive.writestr("archive/byteorder", "little")
        for key, data in storages.items():
            if data is not None:
                archive.writestr("archive/data/%s" % key, data)
        archive.writestr("archive/version", "3\n")
        for name, data in (members or {}).items():
            archive.writestr(name, data)
    return path


def flip_byte_in_member(path, member):
    """Flip one byte inside a stored member's data (its CRC then fails)."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(member)
    raw = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len
    raw[start] ^= 0xFF
    path.write_bytes(bytes(raw))


def write_safetensors(path, tensors=None, header=None, data=None, trailing=b""):
    """A safetensors file by hand: u64 LE header length, JSON header, data area."""
    if header is None:
        tensors = tensors if tensors is not None else {
            "w": ("F32", [2, 3], struct.pack("<6f", *range(6))),
            "b": ("F16", [2], b"\x00\x3c\x00\x40"),
        }
        header, data, offset = {"__metadata__": {"format": "pt"}}, b"", 0
        for name, (dtype, shape, raw) in tensors.items():
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
            data += raw
            offset += len(raw)
    raw_header = json.dumps(header).encode("utf-8") if not isinstance(header, bytes) else header
    path.write_bytes(struct.pack("<Q", len(raw_header)) + raw_header + (data or b"") + trailing)
    return path


def codes(problems):
    return [p["code"] for p in problems]


# --------------------------------------------------------------------------- hashing and roster


def test_sha256_file_reads_in_chunks(tmp_path):
    data = bytes(range(256)) * (5 * 4096 + 7)  # a bit over 5 MiB
    (tmp_path / "f").write_bytes(data)
    assert mf.sha256_file(str(tmp_path / "f")) == (hashlib.sha256(data).hexdigest(), len(data))
    assert mf.sha256_file(str(tmp_path / "f"), chunk_size=1000)[0] == hashlib.sha256(data).hexdigest()


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


# --------------------------------------------------------------------------- torch zip checkpoints


def test_torch_zip_checkpoint_is_loadable(tmp_path, fake_torch):
    path = write_torch_zip(tmp_path / "best.pt", fake_torch)
    assert mf.check_torch_zip(str(path)) == []
    assert mf.check_loadable(str(path), use_torch=False) == []


def test_torch_zip_persistent_ids_are_recovered_without_executing(fake_torch):
    data = torch_pickle(fake_torch, {"w": FakeTensor(FakeStorage("0", 6), (2, 3))})
    pids = mf.pickle_persistent_ids(data)
    assert len(pids) == 1
    kind, storage_type, key, location, numel = pids[0]
    assert (kind, storage_type.module, storage_type.name, key, location, numel) == (
        "storage", "torch", "FloatStorage", "0", "cpu", 6)


def test_torch_load_is_used_when_torch_is_importable(tmp_path, fake_torch):
    calls = []

    def load(path, map_location=None, weights_only=False, mmap=None):
        calls.append((path, map_location, weights_only, mmap))

    fake_torch.load = load
    path = write_torch_zip(tmp_path / "best.pt", fake_torch)
    assert mf.check_loadable(str(path)) == []
    assert calls == [(str(path), "cpu", True, True)]


def test_torch_load_failure_is_not_loadable(tmp_path, fake_torch):
    def load(path, map_location=None, weights_only=False):
        raise RuntimeError("Weights only load failed: unsupported global")

    fake_torch.load = load
    path = write_torch_zip(tmp_path / "best.pt", fake_torch)
    problems = mf.check_loadable(str(path), label="best.pt")
    assert codes(problems) == ["not_loadable"] and "Weights only load failed" in problems[0]["message"]


def test_flipped_byte_in_a_member_fails_the_crc(tmp_path, fake_torch):
    path = write_torch_zip(tmp_path / "best.pt", fake_torch)
    flip_byte_in_member(path, "archive/data/0")
    problems = mf.check_loadable(str(path), label="best.pt", use_torch=False)
    assert codes(problems) == ["not_loadable"]
    assert "archive/data/0 fails its CRC check" in problems[0]["message"]
    assert problems[0]["path"] == "best.pt"


def test_truncated_zip_is_not_loadable(tmp_path, fake_torch):
    path = write_torch_zip(tmp_path / "best.pt", fake_torch)
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    problems = mf.check_loadable(str(path), use_torch=False)
    assert codes(problems) == ["not_loadable"] and "broken zip archive" in problems[0]["message"]


def test_truncated_pickle_is_not_loadable(tmp_path, fake_torch):
    good = torch_pickle(fake_torch, {"w": FakeTensor(FakeStorage("0", 6), (2, 3))})
    path = write_torch_zip(tmp_path / "best.pt", fake_torch, data_pkl=good[:-20])
    problems = mf.check_torch_zip(str(path))
    assert codes(problems) == ["not_loadable"] and "data.pkl does not parse" in problems[0]["message"]


def test_pickle_without_stop_is_not_loadable():
    with pytest.raises(ValueError):
        mf.pickle_persistent_ids(pickle.dumps({"a": 1}, protocol=2)[:-1])


def test_zip_without_data_pkl_is_not_loadable(tmp_path):
    path = tmp_path / "model.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/version", "3\n")
    problems = mf.check_torch_zip(str(path))
    assert codes(problems) == ["not_loadable"] and "data.pkl" in problems[0]["message"]


def test_missing_storage_member_is_not_loadable(tmp_path, fake_torch):
    path = write_torch_zip(tmp_path / "best.pt", fake_torch, storage_bytes={"1": None})
    problems = mf.check_torch_zip(str(path))
    assert codes(problems) == ["not_loadable"] and "archive/data/1 is absent" in problems[0]["message"]


def test_short_storage_member_is_not_loadable(tmp_path, fake_torch):
    path = write_torch_zip(tmp_path / "best.pt", fake_torch, storage_bytes={"0": b"\x00" * 20})
    problems = mf.check_torch_zip(str(path))
    assert codes(problems) == ["not_loadable"] and "needs 24" in problems[0]["message"]


@pytest.mark.parametrize("protocol", range(0, pickle.HIGHEST_PROTOCOL + 1))
def test_ordinary_pickles_walk_cleanly_in_every_protocol(protocol):
    obj = {"a": [1, 2.5, "x", b"y", None, True], "t": (1, (2, 3)), "s": {1, 2}, "f": frozenset([3]),
           "n": collections.OrderedDict(k=1), "big": 2 ** 80, "shared": ["same"] * 3}
    assert mf.pickle_persistent_ids(pickle.dumps(obj, protocol=protocol)) == []


def write_torch_legacy(path, torch, magic=mf.TORCH_LEGACY_MAGIC, cut=None):
    """The pre-1.6 torch.save layout: magic, protocol, sys_info, object and storage-key pickles, raw storage."""
    state = {"w": FakeTensor(FakeStorage("0", 2), (1, 2))}
    data = (pickle.dumps(magic, protocol=2) + pickle.dumps(1001, protocol=2)
            + pickle.dumps({"protocol_version": 1001, "little_endian": True}, protocol=2)
            + torch_pickle(torch, state) + pickle.dumps(["0"], protocol=2)
            + struct.pack("<q", 2) + struct.pack("<2f", 1.0, 2.0))
    path.write_bytes(data[:cut] if cut else data)
    return path


def test_legacy_torch_file_is_loadable(tmp_path, fake_torch):
    path = write_torch_legacy(tmp_path / "old.pth", fake_torch)
    assert mf.check_loadable(str(path), use_torch=False) == []


def test_legacy_torch_file_without_magic_is_not_loadable(tmp_path, fake_torch):
    path = write_torch_legacy(tmp_path / "old.pth", fake_torch, magic=12345)
    problems = mf.check_loadable(str(path), use_torch=False)
    assert codes(problems) == ["not_loadable"] and "magic number" in problems[0]["message"]


def test_truncated_legacy_torch_file_is_not_loadable(tmp_path, fake_torch):
    path = write_torch_legacy(tmp_path / "old.pth", fake_torch, cut=120)
    problems = mf.check_loadable(str(path), use_torch=False)
    assert codes(problems) == ["not_loadable"] and "does not parse" in problems[0]["message"]


# --------------------------------------------------------------------------- safetensors


def test_safetensors_valid(tmp_path):
    path = write_safetensors(tmp_path / "model.safetensors")
    assert mf.check_safetensors(str(path)) == []
    assert mf.check_loadable(str(path)) == []


def test_safetensors_recognised_by_content_without_suffix(tmp_path):
    path = write_safetensors(tmp_path / "model.bin")
    assert mf.check_loadable(str(path)) == []


def test_safetensors_truncated(tmp_path):
    path = write_safetensors(tmp_path / "model.safetensors")
    path.write_bytes(path.read_bytes()[:-3])
    problems = mf.check_loadable(str(path))
    assert codes(problems) == ["not_loadable"] and "truncated" in problems[0]["message"]


def test_safetensors_offsets_beyond_eof(tmp_path):
    header = {"w": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4000]}}
    path = write_safetensors(tmp_path / "m.safetensors", header=header, data=b"\x00" * 4)
    problems = mf.check_safetensors(str(path))
    assert codes(problems) == ["not_loadable"] and "ends at byte 4000 of a 4-byte data area" in problems[0]["message"]


def test_safetensors_header_length_beyond_eof(tmp_path):
    path = tmp_path / "m.safetensors"
    path.write_bytes(struct.pack("<Q", 10 ** 6) + b"{}")
    problems = mf.check_safetensors(str(path))
    assert codes(problems) == ["not_loadable"] and "header length" in problems[0]["message"]


def test_safetensors_shorter_than_header_length_field(tmp_path):
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"\x02\x00")
    assert codes(mf.check_safetensors(str(path))) == ["not_loadable"]


def test_safetensors_invalid_json_header(tmp_path):
    path = write_safetensors(tmp_path / "m.safetensors", header=b'{"w": ', data=b"")
    problems = mf.check_safetensors(str(path))
    assert codes(problems) == ["not_loadable"] and "not valid JSON" in problems[0]["message"]


def test_safetensors_dtype_shape_inconsistent_with_bytes(tmp_path):
    path = write_safetensors(tmp_path / "m.safetensors", tensors={"w": ("F32", [2, 3], b"\x00" * 20)})
    problems = mf.check_safetensors(str(path))
    assert codes(problems) == ["not_loadable"] and "needs 24 bytes, data_offsets span 20" in problems[0]["message"]


def test_safetensors_gap_or_trailing_bytes(tmp_path):
    path = write_safetensors(tmp_path / "m.safetensors", trailing=b"\x00" * 8)
    problems = mf.check_safetensors(str(path))
    assert codes(problems) == ["not_loadable"] and "cover" in problems[0]["message"]


def test_safetensors_unknown_dtype_skips_only_the_size_check(tmp_path):
    path = write_safetensors(tmp_path / "m.safetensors", tensors={"w": ("X9", [3], b"\x00" * 5)})
    assert mf.check_safetensors(str(path)) == []


def test_unrecognised_format_is_not_loadable(tmp_path):
    path = tmp_path / "weights.pt"
    path.write_bytes(b"not a checkpoint at all")
    problems = mf.check_loadable(str(path))
    assert codes(problems) == ["not_loadable"] and "unrecognised" in problems[0]["message"]


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
