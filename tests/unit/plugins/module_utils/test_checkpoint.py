from __future__ import annotations

import builtins
import collections
import os
import pickle
import struct
import subprocess
import zipfile

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import checkpoint as ck
from ansible_collections.remote_gpu.trainer.plugins.module_utils import checkpoint_pickle as ckp

# fake_torch is a fixture
from checkpoint_files import (  # noqa: F401 pylint: disable=unused-import
    FakeStorage,
    FakeTensor,
    codes,
    evil_pickle,
    write_legacy_with,
    write_zip_bomb,
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
    pids = ckp.pickle_persistent_ids(data)
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
        ckp.pickle_persistent_ids(pickle.dumps({"a": 1}, protocol=2)[:-1])


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
    assert ckp.pickle_persistent_ids(pickle.dumps(obj, protocol=protocol)) == []


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


# --------------------------------------------------------------------------- hostile inputs


def test_a_pickle_calling_os_system_is_not_loadable_and_the_global_is_named(tmp_path, fake_torch):
    path = write_torch_zip(tmp_path / "best.pt", fake_torch, data_pkl=evil_pickle(os.system, ("touch pwned",)))
    problems = ck.check_loadable(str(path), label="best.pt", use_torch=False)
    assert codes(problems) == ["not_loadable"]
    assert "references %s.system" % os.system.__module__ in problems[0]["message"]
    assert "weights_only=True" in problems[0]["message"]
    assert not (tmp_path / "pwned").exists() and not os.path.exists("pwned")


@pytest.mark.parametrize("func, name, protocol", [
    (builtins.eval, "builtins.eval", 2),            # GLOBAL __builtin__ eval, mapped to builtins
    (builtins.exec, "builtins.exec", 4),            # STACK_GLOBAL (protocol 4)
    (subprocess.call, "subprocess.call", 0),        # text protocol
    (getattr, "builtins.getattr", 3),
])
def test_every_unsafe_global_is_refused_in_every_protocol(tmp_path, fake_torch, func, name, protocol):
    path = write_torch_zip(tmp_path / "m.pt", fake_torch, data_pkl=evil_pickle(func, ("1",), protocol=protocol))
    problems = ck.check_torch_zip(str(path))
    assert codes(problems) == ["not_loadable"] and name in problems[0]["message"]


def test_inst_and_extension_opcodes_are_refused(tmp_path, fake_torch):
    inst = b"(S'touch pwned'\nios\nsystem\n."        # INST os system: a class call by name
    path = write_torch_zip(tmp_path / "inst.pt", fake_torch, data_pkl=inst)
    assert "os.system" in ck.check_torch_zip(str(path))[0]["message"]
    ext = b"\x80\x02\x82\x01)R."                     # EXT1 1: a global from copyreg's extension registry
    path = write_torch_zip(tmp_path / "ext.pt", fake_torch, data_pkl=ext)
    assert "copyreg._extension_registry" in ck.check_torch_zip(str(path))[0]["message"]


def test_the_allow_list_keeps_what_torch_save_writes(fake_torch):
    data = torch_pickle(fake_torch, {"w": FakeTensor(FakeStorage("0", 6), (2, 3)), "s": {1}, "b": bytearray(b"x"),
                                     "c": 1 + 2j, "o": collections.OrderedDict(a=1)})
    _pids, references = ckp.walk_pickle(data)
    assert sorted(set(ref.full_name for ref in references)) == [
        "_codecs.encode", "builtins.bytearray", "builtins.complex", "builtins.set", "collections.OrderedDict",
        "torch.FloatStorage", "torch._utils._rebuild_tensor_v2"]
    ckp.check_globals(references)


def test_a_legacy_file_with_an_unsafe_object_pickle_is_not_loadable(tmp_path):
    path = write_legacy_with(tmp_path / "old.pth", evil_pickle(os.system, ("true",)))
    problems = ck.check_loadable(str(path), use_torch=False)
    assert codes(problems) == ["not_loadable"] and "object pickle" in problems[0]["message"]
    assert "%s.system" % os.system.__module__ in problems[0]["message"]


def test_a_forged_string_length_in_a_legacy_file_is_a_parse_error_not_a_memory_error(tmp_path):
    path = tmp_path / "old.pth"
    path.write_bytes(pickle.dumps(ck.TORCH_LEGACY_MAGIC, protocol=2) + b"\x80\x04\x8d" + struct.pack("<Q", 2 ** 60)
                     + b"abc")
    problems = ck.check_loadable(str(path), use_torch=False)
    assert codes(problems) == ["not_loadable"] and "does not parse" in problems[0]["message"]


def test_a_zip_bomb_is_refused_without_inflating_it(tmp_path, monkeypatch):
    path = write_zip_bomb(tmp_path / "bomb.pt", mebibytes=8)
    monkeypatch.setattr(ck, "MAX_INFLATE_BYTES", 4 * 1024 * 1024)
    inflated = []
    monkeypatch.setattr(ck, "_crc_check", lambda *args: inflated.append(args))
    problems = ck.check_torch_zip(str(path))
    assert codes(problems) == ["not_loadable"] and "inflates to 8388608 bytes" in problems[0]["message"]
    assert inflated == []


def test_a_small_compressed_member_is_still_checked(tmp_path, monkeypatch):
    path = write_zip_bomb(tmp_path / "small.pt", mebibytes=2)
    monkeypatch.setattr(ck, "MAX_INFLATE_BYTES", 4 * 1024 * 1024)
    problems = ck.check_torch_zip(str(path))   # inflated and CRC-checked; its data.pkl names no storage
    assert problems == []


def test_a_safetensors_header_length_over_the_cap_is_refused_before_reading(tmp_path):
    path = tmp_path / "big.safetensors"
    with open(str(path), "wb") as handle:
        handle.write(struct.pack("<Q", ck.MAX_SAFETENSORS_HEADER + 1) + b"{")
        handle.truncate(ck.MAX_SAFETENSORS_HEADER + 64)     # sparse: the header length is within the file
    problems = ck.check_safetensors(str(path))
    assert codes(problems) == ["not_loadable"] and "100000000-byte cap" in problems[0]["message"]
