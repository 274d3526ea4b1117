from __future__ import annotations

import collections
import pickle
import struct
import zipfile

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import checkpoint as ck

# fake_torch is a fixture
from checkpoint_files import (  # noqa: F401 pylint: disable=unused-import
    FakeStorage,
    FakeTensor,
    codes,
    fake_torch,
    flip_byte_in_member,
    torch_pickle,
    write_safetensors,
    write_torch_legacy,
    write_torch_zip,
)


# --------------------------------------------------------------------------- torch zip checkpoints


def test_torch_zip_checkpoint_is_loadable(tmp_path, fake_torch):
    path = write_torch_zip(tmp_path / "best.pt", fake_torch)
    assert ck.check_torch_zip(str(path)) == []
    assert ck.check_loadable(str(path), use_torch=False) == []


def test_torch_zip_persistent_ids_are_recovered_without_executing(fake_torch):
    data = torch_pickle(fake_torch, {"w": FakeTensor(FakeStorage("0", 6), (2, 3))})
    pids = ck.pickle_persistent_ids(data)
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
    assert ck.check_loadable(str(path)) == []
    assert calls == [(str(path), "cpu", True, True)]


def test_torch_load_failure_is_not_loadable(tmp_path, fake_torch):
    def load(path, map_location=None, weights_only=False):
        raise RuntimeError("Weights only load failed: unsupported global")

    fake_torch.load = load
    path = write_torch_zip(tmp_path / "best.pt", fake_torch)
    problems = ck.check_loadable(str(path), label="best.pt")
    assert codes(problems) == ["not_loadable"] and "Weights only load failed" in problems[0]["message"]


def test_flipped_byte_in_a_member_fails_the_crc(tmp_path, fake_torch):
    path = write_torch_zip(tmp_path / "best.pt", fake_torch)
    flip_byte_in_member(path, "archive/data/0")
    problems = ck.check_loadable(str(path), label="best.pt", use_torch=False)
    assert codes(problems) == ["not_loadable"]
    assert "archive/data/0 fails its CRC check" in problems[0]["message"]
    assert problems[0]["path"] == "best.pt"


def test_truncated_zip_is_not_loadable(tmp_path, fake_torch):
    path = write_torch_zip(tmp_path / "best.pt", fake_torch)
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    problems = ck.check_loadable(str(path), use_torch=False)
    assert codes(problems) == ["not_loadable"] and "broken zip archive" in problems[0]["message"]


def test_truncated_pickle_is_not_loadable(tmp_path, fake_torch):
    good = torch_pickle(fake_torch, {"w": FakeTensor(FakeStorage("0", 6), (2, 3))})
    path = write_torch_zip(tmp_path / "best.pt", fake_torch, data_pkl=good[:-20])
    problems = ck.check_torch_zip(str(path))
    assert codes(problems) == ["not_loadable"] and "data.pkl does not parse" in problems[0]["message"]


def test_pickle_without_stop_is_not_loadable():
    with pytest.raises(ValueError):
        ck.pickle_persistent_ids(pickle.dumps({"a": 1}, protocol=2)[:-1])


def test_zip_without_data_pkl_is_not_loadable(tmp_path):
    path = tmp_path / "model.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/version", "3\n")
    problems = ck.check_torch_zip(str(path))
    assert codes(problems) == ["not_loadable"] and "data.pkl" in problems[0]["message"]


def test_missing_storage_member_is_not_loadable(tmp_path, fake_torch):
    path = write_torch_zip(tmp_path / "best.pt", fake_torch, storage_bytes={"1": None})
    problems = ck.check_torch_zip(str(path))
    assert codes(problems) == ["not_loadable"] and "archive/data/1 is absent" in problems[0]["message"]


def test_short_storage_member_is_not_loadable(tmp_path, fake_torch):
    path = write_torch_zip(tmp_path / "best.pt", fake_torch, storage_bytes={"0": b"\x00" * 20})
    problems = ck.check_torch_zip(str(path))
    assert codes(problems) == ["not_loadable"] and "needs 24" in problems[0]["message"]


@pytest.mark.parametrize("protocol", range(0, pickle.HIGHEST_PROTOCOL + 1))
def test_ordinary_pickles_walk_cleanly_in_every_protocol(protocol):
    obj = {"a": [1, 2.5, "x", b"y", None, True], "t": (1, (2, 3)), "s": {1, 2}, "f": frozenset([3]),
           "n": collections.OrderedDict(k=1), "big": 2 ** 80, "shared": ["same"] * 3}
    assert ck.pickle_persistent_ids(pickle.dumps(obj, protocol=protocol)) == []


def test_legacy_torch_file_is_loadable(tmp_path, fake_torch):
    path = write_torch_legacy(tmp_path / "old.pth", fake_torch)
    assert ck.check_loadable(str(path), use_torch=False) == []


def test_legacy_torch_file_without_magic_is_not_loadable(tmp_path, fake_torch):
    path = write_torch_legacy(tmp_path / "old.pth", fake_torch, magic=12345)
    problems = ck.check_loadable(str(path), use_torch=False)
    assert codes(problems) == ["not_loadable"] and "magic number" in problems[0]["message"]


def test_truncated_legacy_torch_file_is_not_loadable(tmp_path, fake_torch):
    path = write_torch_legacy(tmp_path / "old.pth", fake_torch, cut=120)
    problems = ck.check_loadable(str(path), use_torch=False)
    assert codes(problems) == ["not_loadable"] and "does not parse" in problems[0]["message"]


# --------------------------------------------------------------------------- safetensors


def test_safetensors_valid(tmp_path):
    path = write_safetensors(tmp_path / "model.safetensors")
    assert ck.check_safetensors(str(path)) == []
    assert ck.check_loadable(str(path)) == []


def test_safetensors_recognised_by_content_without_suffix(tmp_path):
    path = write_safetensors(tmp_path / "model.bin")
    assert ck.check_loadable(str(path)) == []


def test_safetensors_truncated(tmp_path):
    path = write_safetensors(tmp_path / "model.safetensors")
    path.write_bytes(path.read_bytes()[:-3])
    problems = ck.check_loadable(str(path))
    assert codes(problems) == ["not_loadable"] and "truncated" in problems[0]["message"]


def test_safetensors_offsets_beyond_eof(tmp_path):
    header = {"w": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4000]}}
    path = write_safetensors(tmp_path / "m.safetensors", header=header, data=b"\x00" * 4)
    problems = ck.check_safetensors(str(path))
    assert codes(problems) == ["not_loadable"] and "ends at byte 4000 of a 4-byte data area" in problems[0]["message"]


def test_safetensors_header_length_beyond_eof(tmp_path):
    path = tmp_path / "m.safetensors"
    path.write_bytes(struct.pack("<Q", 10 ** 6) + b"{}")
    problems = ck.check_safetensors(str(path))
    assert codes(problems) == ["not_loadable"] and "header length" in problems[0]["message"]


def test_safetensors_shorter_than_header_length_field(tmp_path):
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"\x02\x00")
    assert codes(ck.check_safetensors(str(path))) == ["not_loadable"]


def test_safetensors_invalid_json_header(tmp_path):
    path = write_safetensors(tmp_path / "m.safetensors", header=b'{"w": ', data=b"")
    problems = ck.check_safetensors(str(path))
    assert codes(problems) == ["not_loadable"] and "not valid JSON" in problems[0]["message"]


def test_safetensors_dtype_shape_inconsistent_with_bytes(tmp_path):
    path = write_safetensors(tmp_path / "m.safetensors", tensors={"w": ("F32", [2, 3], b"\x00" * 20)})
    problems = ck.check_safetensors(str(path))
    assert codes(problems) == ["not_loadable"] and "needs 24 bytes, data_offsets span 20" in problems[0]["message"]


def test_safetensors_gap_or_trailing_bytes(tmp_path):
    path = write_safetensors(tmp_path / "m.safetensors", trailing=b"\x00" * 8)
    problems = ck.check_safetensors(str(path))
    assert codes(problems) == ["not_loadable"] and "cover" in problems[0]["message"]


def test_safetensors_unknown_dtype_skips_only_the_size_check(tmp_path):
    path = write_safetensors(tmp_path / "m.safetensors", tensors={"w": ("X9", [3], b"\x00" * 5)})
    assert ck.check_safetensors(str(path)) == []


def test_unrecognised_format_is_not_loadable(tmp_path):
    path = tmp_path / "weights.pt"
    path.write_bytes(b"not a checkpoint at all")
    problems = ck.check_loadable(str(path))
    assert codes(problems) == ["not_loadable"] and "unrecognised" in problems[0]["message"]
