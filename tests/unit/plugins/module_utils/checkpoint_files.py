"""Real checkpoint files built by hand (torch zip, legacy torch, safetensors) for the checkpoint and manifest tests.

Nothing here needs torch: ``fake_torch`` puts importable stand-ins in ``sys.modules`` so that pickle writes
torch's GLOBAL names, as ``torch.save`` does.
"""

from __future__ import annotations

import collections
import io
import json
import os
import pickle
import struct
import sys
import types
import zipfile
import zlib

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils.checkpoint import TORCH_LEGACY_MAGIC


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

    class StoragePickler(pickle.Pickler):
        # a method of a subclass, as torch.save defines it: Python 3.13 made the attribute read-only on an instance
        def persistent_id(self, obj):
            if isinstance(obj, FakeStorage):
                return ("storage", torch.FloatStorage, obj.key, "cpu", obj.numel)
            return None

    StoragePickler(buf, protocol=2).dump(state)
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


def write_torch_legacy(path, torch, magic=TORCH_LEGACY_MAGIC, cut=None):
    """The pre-1.6 torch.save layout: magic, protocol, sys_info, object and storage-key pickles, raw storage."""
    state = {"w": FakeTensor(FakeStorage("0", 2), (1, 2))}
    data = (pickle.dumps(magic, protocol=2) + pickle.dumps(1001, protocol=2)
            + pickle.dumps({"protocol_version": 1001, "little_endian": True}, protocol=2)
            + torch_pickle(torch, state) + pickle.dumps(["0"], protocol=2)
            + struct.pack("<q", 2) + struct.pack("<2f", 1.0, 2.0))
    path.write_bytes(data[:cut] if cut else data)
    return path


def codes(problems):
    return [p["code"] for p in problems]


class Evil:
    """Pickles to a call of ``func(*args)`` (``__reduce__``); only ever pickled here, never unpickled."""

    def __init__(self, func, args):
        self.func = func
        self.args = args

    def __reduce__(self):
        return self.func, self.args


def evil_pickle(func=os.system, args=("touch /tmp/pwned",), protocol=2, wrap=True):
    """A real malicious pickle: a dict whose value calls ``func(*args)`` when unpickled (it is never unpickled)."""
    payload = {"model": collections.OrderedDict(), "epoch": Evil(func, args)} if wrap else Evil(func, args)
    return pickle.dumps(payload, protocol=protocol)


def write_legacy_with(path, object_pickle):
    """A pre-1.6 torch.save layout whose object pickle is ``object_pickle``."""
    data = (pickle.dumps(TORCH_LEGACY_MAGIC, protocol=2) + pickle.dumps(1001, protocol=2)
            + pickle.dumps({"protocol_version": 1001, "little_endian": True}, protocol=2)
            + object_pickle + pickle.dumps([], protocol=2))
    path.write_bytes(data)
    return path


def _deflate_zeros(count):
    """``(raw deflate stream, crc32)`` of ``count`` MiB of zero bytes, built from one repeated full-flush block."""
    chunk = b"\x00" * (1024 * 1024)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)
    tail = compressor.flush()
    crc = 0
    for _index in range(count):
        crc = zlib.crc32(chunk, crc)
    return block * count + tail, crc


def write_zip_bomb(path, mebibytes=2048, member="archive/data/0"):
    """A torch-like zip (a stored data.pkl and one deflated member) whose member inflates to ``mebibytes`` MiB of
    zeros from about 1 KiB per MiB on disk: a real zip bomb, written by hand without inflating anything."""
    members = [("archive/data.pkl", 0, pickle.dumps({"w": 1}, protocol=2), None, None)]
    stream, crc = _deflate_zeros(mebibytes)
    members.append((member, 8, stream, crc, mebibytes * 1024 * 1024))
    out, central = b"", b""
    for name, method, data, crc_value, size in members:
        raw_name = name.encode("ascii")
        crc_value = zlib.crc32(data) if crc_value is None else crc_value
        size = len(data) if size is None else size
        fields = struct.pack("<HHHHHIIIHH", 20, 0, method, 0, 0x21, crc_value, len(data), size, len(raw_name), 0)
        central += (struct.pack("<IH", 0x02014B50, 20) + fields + struct.pack("<HHHII", 0, 0, 0, 0, len(out))
                    + raw_name)
        out += struct.pack("<I", 0x04034B50) + fields + raw_name + data
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central), len(out), 0)
    path.write_bytes(out + central + end)
    return path
