# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Checkpoint loadability, checked WITHOUT executing a pickle.

Standard library only; runs on the target (Python 3.8+) and on the controller. Nothing here writes files, and
every file is opened through digest.open_regular (safe_read.py: a FIFO or device in a checkpoint's place is never
read, never blocks).

* PyTorch zip checkpoints (``torch.save`` since 1.6): every member passes its CRC test, there is a
  ``<prefix>/data.pkl`` member, its pickle stream parses to STOP (walked with ``pickletools.genops``),
  and every storage it references exists as ``<prefix>/data/<key>`` with at least the bytes it needs.
  torch.save stores members uncompressed; a compressed member is inflated only when it declares at most
  ``MAX_INFLATE_BYTES`` (zip bombs are refused from the central directory, before any inflating).
* safetensors: the 8-byte little-endian header length (at most ``MAX_SAFETENSORS_HEADER``, 100 MB, the cap of
  the reference implementation), a JSON object header, and tensors whose ``data_offsets`` tile the data area
  exactly, each as long as ``dtype`` and ``shape`` require.
* legacy (pre-1.6, non-zip) torch.save files: the magic number and the four pickles that follow parse.
* Every pickle may reference only the globals that ``torch.load(weights_only=True)`` allows
  (``ALLOWED_GLOBALS`` of checkpoint_pickle.py, which walks the pickles: torch's rebuild functions, storage and
  tensor types, dtypes, ``collections.OrderedDict``, ``builtins.set`` ...). Any other global, such as
  ``os.system``, makes the file not loadable, and the problem names it. Nothing is imported or executed.
* When torch is importable, ``torch.load(weights_only=True)`` as well (optional, see ``use_torch``).

Problems have the shape of manifest.py's (``{code, path, message}``), always with the code ``not_loadable``.
"""

from __future__ import annotations

import inspect
import json
import os
import pickletools
import struct
import zipfile
import zlib

from ansible_collections.remote_gpu.trainer.plugins.module_utils.digest import open_regular
from ansible_collections.remote_gpu.trainer.plugins.module_utils.checkpoint_pickle import (
    CONSTANT_OPS, Global, UnsafeGlobal, check_globals, walk_pickle)

CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".safetensors")
TORCH_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C

# Bytes per element of the legacy typed storage classes that torch.save names in its pickles.
_TORCH_STORAGE_ITEMSIZE = {
    "DoubleStorage": 8, "FloatStorage": 4, "HalfStorage": 2, "BFloat16Storage": 2,
    "LongStorage": 8, "IntStorage": 4, "ShortStorage": 2, "CharStorage": 1, "ByteStorage": 1,
    "BoolStorage": 1, "ComplexDoubleStorage": 16, "ComplexFloatStorage": 8, "UntypedStorage": 1,
}

# Bits per element of safetensors dtypes. An unknown dtype skips only its size check.
_SAFETENSORS_DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64, "C64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}

# Bounds of what the check reads: a compressed zip member declaring more is refused without inflating it, a
# data.pkl larger than MAX_PICKLE_BYTES is not walked, a safetensors header above 100 MB (the reference cap) is
# refused.
MAX_INFLATE_BYTES = 256 * 1024 * 1024
MAX_PICKLE_BYTES = 1024 * 1024 * 1024
MAX_SAFETENSORS_HEADER = 100 * 1000 * 1000


def is_checkpoint(path):
    """True for the file names that the loadability check covers."""
    return path.lower().endswith(CHECKPOINT_SUFFIXES)


def _not_loadable(path, reason):
    """The one problem of a checkpoint that does not load, in the shape of manifest problems."""
    return [{"code": "not_loadable", "path": path, "message": "%s is not loadable: %s" % (path, reason)}]


def _zip_bomb(infos):
    """A message when the compressed members would inflate to more than MAX_INFLATE_BYTES; None otherwise."""
    total = 0
    for info in infos:
        if info.compress_type == zipfile.ZIP_STORED:
            if info.file_size != info.compress_size:
                return "stored zip member %s declares %d bytes but holds %d" % (
                    info.filename, info.file_size, info.compress_size)
            continue
        total += info.file_size
        if total > MAX_INFLATE_BYTES:
            return ("zip member %s inflates to %d bytes (%d compressed); this check inflates at most %d bytes of "
                    "compressed members, and torch.save stores its members uncompressed: a zip bomb or not a "
                    "torch.save checkpoint" % (info.filename, info.file_size, info.compress_size, MAX_INFLATE_BYTES))
    return None


def _crc_check(archive, infos):
    """The name of the first member that fails its CRC check, or None; reads each member once, in chunks."""
    for info in infos:
        try:
            with archive.open(info) as member:
                while member.read(1024 * 1024):
                    pass
        except zipfile.BadZipFile:
            return info.filename
    return None


def check_torch_zip(path, label=None):
    """Problems (``not_loadable``) of a PyTorch zip checkpoint; an empty list when it looks loadable."""
    label = label or path
    try:
        with open_regular(path) as raw, zipfile.ZipFile(raw) as archive:
            infos = archive.infolist()
            bomb = _zip_bomb(infos)
            if bomb:
                return _not_loadable(label, bomb)
            bad = _crc_check(archive, infos)
            if bad is not None:
                return _not_loadable(label, "zip member %s fails its CRC check" % bad)
            names = archive.namelist()
            pickles = [n for n in names if n.count("/") == 1 and n.endswith("/data.pkl")]
            if len(pickles) != 1:
                return _not_loadable(label, "expected one <prefix>/data.pkl member, found %d" % len(pickles))
            prefix = pickles[0][:-len("data.pkl")]
            if archive.getinfo(pickles[0]).file_size > MAX_PICKLE_BYTES:
                return _not_loadable(label, "%s is larger than the %d bytes this check walks"
                                     % (pickles[0], MAX_PICKLE_BYTES))
            with archive.open(pickles[0]) as stream:
                pids, references = walk_pickle(stream)
            check_globals(references)
            sizes = dict((info.filename, info.file_size) for info in infos)
    except UnsafeGlobal as exc:
        return _not_loadable(label, "data.pkl %s" % exc)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError,
            NotImplementedError, RuntimeError) as exc:
        return _not_loadable(label, "broken zip archive (%s)" % exc)
    except ValueError as exc:
        return _not_loadable(label, "data.pkl does not parse (%s)" % exc)
    return _check_storages(label, prefix, pids, sizes)


class _BoundedReader:
    """A binary file's ``read``/``readline`` that never ask for more than what is left of the file.

    pickletools reads a length-prefixed argument with one ``read(n)``; a forged length (2**60) would otherwise
    allocate before it fails.
    """

    def __init__(self, handle, size):
        self._handle = handle
        self._size = size

    def _left(self):
        return max(0, self._size - self._handle.tell())

    def read(self, count=-1):
        left = self._left()
        return self._handle.read(left if count is None or count < 0 else min(count, left))

    def readline(self, limit=-1):
        left = self._left()
        return self._handle.readline(left if limit is None or limit < 0 else min(limit, left))

    def tell(self):
        return self._handle.tell()


def check_torch_legacy(path, label=None):
    """Problems (``not_loadable``) of a pre-1.6 (non-zip) torch.save file.

    The file is a sequence of pickles: the magic number, the protocol version, sys_info, the object and
    the storage keys, followed by raw storage bytes. The five pickles must parse, reference only allowed
    globals, and the magic number must match; the raw storage bytes are not checked.
    """
    label = label or path
    try:
        with open_regular(path) as raw:
            handle = _BoundedReader(raw, os.fstat(raw.fileno()).st_size)
            magic = _first_constant(handle)
            if magic != TORCH_LEGACY_MAGIC:
                return _not_loadable(label, "a pickle without the torch.save magic number (not a torch checkpoint)")
            for part in ("protocol version", "sys_info", "object", "storage keys"):
                try:
                    _pids, references = walk_pickle(handle)
                except ValueError as exc:
                    raise ValueError("the %s pickle does not parse (%s)" % (part, exc)) from exc
                try:
                    check_globals(references)
                except UnsafeGlobal as exc:
                    raise UnsafeGlobal("its %s pickle %s" % (part, exc)) from exc
    except OSError as exc:
        return _not_loadable(label, "cannot read it (%s)" % exc)
    except UnsafeGlobal as exc:
        return _not_loadable(label, "legacy torch file: %s" % exc)
    except ValueError as exc:
        return _not_loadable(label, "legacy torch file: %s" % exc)
    return []


def _first_constant(handle):
    """The first constant of the next pickle in ``handle`` (read up to its STOP)."""
    value, last = None, None
    for opcode, arg, _pos in pickletools.genops(handle):
        last = opcode.name
        if value is None and opcode.name in CONSTANT_OPS:
            value = arg
    if last != "STOP":
        raise ValueError("the magic number pickle does not end with STOP")
    return value


def _check_storages(label, prefix, pids, sizes):
    """Every torch storage id must name a data member with enough bytes."""
    for pid in pids:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            continue
        storage_type, key, numel = pid[1], pid[2], pid[4]
        member = "%sdata/%s" % (prefix, key)
        if member not in sizes:
            return _not_loadable(label, "data.pkl references storage %s but %s is absent" % (key, member))
        itemsize = None
        if isinstance(storage_type, Global):
            itemsize = _TORCH_STORAGE_ITEMSIZE.get(storage_type.name)
        if itemsize and isinstance(numel, int) and sizes[member] < numel * itemsize:
            return _not_loadable(label, "%s has %d bytes but storage %s needs %d"
                                 % (member, sizes[member], key, numel * itemsize))
    return []


def _prod(values):
    total = 1
    for value in values:
        total *= value
    return total


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def safetensors_header(path):
    """``(header_dict, data_start, file_size)``; ValueError saying what is wrong."""
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size < 8:
            raise ValueError("file is %d bytes, shorter than the 8-byte header length" % size)
        (length,) = struct.unpack("<Q", handle.read(8))
        if length > MAX_SAFETENSORS_HEADER:
            raise ValueError("header length %d exceeds the %d-byte cap of safetensors (a forged or corrupt header)"
                             % (length, MAX_SAFETENSORS_HEADER))
        if length > size - 8:
            raise ValueError("header length %d exceeds the %d bytes after it" % (length, size - 8))
        raw = handle.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError("header is not valid JSON (%s)" % exc) from exc
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    return header, 8 + length, size


def check_safetensors(path, label=None):
    """Problems (``not_loadable``) of a safetensors file; an empty list when it is consistent."""
    label = label or path
    try:
        header, data_start, size = safetensors_header(path)
        _check_tensor_table(header, size - data_start)
    except OSError as exc:
        return _not_loadable(label, "cannot read it (%s)" % exc)
    except ValueError as exc:
        return _not_loadable(label, str(exc))
    return []


def _check_tensor_table(header, data_len):
    """The tensors' ``data_offsets`` tile ``[0, data_len)`` exactly, each sized by dtype and shape."""
    ranges = []
    for name, info in header.items():
        if name == "__metadata__":
            if not isinstance(info, dict):
                raise ValueError("__metadata__ is not an object")
            continue
        if not isinstance(info, dict):
            raise ValueError("tensor %s is not an object" % name)
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(dtype, str):
            raise ValueError("tensor %s has no dtype" % name)
        if not isinstance(shape, list) or not all(_is_count(dim) for dim in shape):
            raise ValueError("tensor %s has an invalid shape %r" % (name, shape))
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(o) for o in offsets)
                or offsets[0] > offsets[1]):
            raise ValueError("tensor %s has invalid data_offsets %r" % (name, offsets))
        if offsets[1] > data_len:
            raise ValueError("tensor %s ends at byte %d of a %d-byte data area (file truncated?)"
                             % (name, offsets[1], data_len))
        bits = _SAFETENSORS_DTYPE_BITS.get(dtype)
        if bits is not None:
            need = -(-(_prod(shape) * bits) // 8)
            if offsets[1] - offsets[0] != need:
                raise ValueError("tensor %s (%s %r) needs %d bytes, data_offsets span %d"
                                 % (name, dtype, shape, need, offsets[1] - offsets[0]))
        ranges.append((offsets[0], offsets[1], name))
    position = 0
    for begin, end, name in sorted(ranges):
        if begin != position:
            raise ValueError("tensor %s starts at byte %d, expected %d (gap or overlap)" % (name, begin, position))
        position = end
    if position != data_len:
        raise ValueError("tensors cover %d bytes of a %d-byte data area" % (position, data_len))


def _torch_load_problems(path, label, zip_format):
    """``torch.load(weights_only=True)`` when torch is importable; [] when it loads or torch is absent.

    Zip checkpoints are memory-mapped where torch supports it (``mmap=True``, torch 2.1+), so a large
    checkpoint is not read into RAM; a legacy file is loaded whole.
    """
    try:
        import torch  # pylint: disable=import-outside-toplevel,import-error
    except ImportError:
        return []
    kwargs = {"map_location": "cpu", "weights_only": True}
    try:
        if zip_format and "mmap" in inspect.signature(torch.load).parameters:
            kwargs["mmap"] = True
    except (TypeError, ValueError):
        pass
    try:
        torch.load(path, **kwargs)
    except Exception as exc:  # pylint: disable=broad-exception-caught
        return _not_loadable(label, "torch.load(weights_only=True) failed: %s" % exc)
    return []


def check_loadable(path, label=None, use_torch=True):
    """Problems (``not_loadable``) of one checkpoint file, chosen by content, not only by name.

    A zip file is checked as a PyTorch checkpoint; a ``.safetensors`` name or a plausible safetensors
    header as safetensors; a file that starts with a pickle PROTO opcode as a legacy (pre-1.6)
    torch.save file. Torch files are also loaded with torch when ``use_torch`` and torch is importable.
    Anything else is ``not_loadable`` (unrecognised format).
    """
    label = label or path
    try:
        with open_regular(path) as handle:
            head = handle.read(8)
    except OSError as exc:
        return _not_loadable(label, "cannot read it (%s)" % exc)
    if head.startswith(b"PK\x03\x04"):
        problems = check_torch_zip(path, label)
        if not problems and use_torch:
            problems = _torch_load_problems(path, label, zip_format=True)
        return problems
    if path.lower().endswith(".safetensors") or _looks_like_safetensors(path):
        return check_safetensors(path, label)
    if head.startswith(b"\x80"):
        problems = check_torch_legacy(path, label)
        if not problems and use_torch:
            problems = _torch_load_problems(path, label, zip_format=False)
        return problems
    return _not_loadable(label, "unrecognised checkpoint format (not a PyTorch zip, legacy torch file or safetensors)")


def _looks_like_safetensors(path):
    try:
        with open_regular(path) as handle:
            head = handle.read(9)
    except OSError:
        return False
    return len(head) == 9 and head[8:9] == b"{"


def checkpoint_problems(directory, rel_paths, use_torch=True):
    """``not_loadable`` problems of every checkpoint (by suffix, see ``is_checkpoint``) among ``rel_paths``."""
    problems = []
    for rel in rel_paths:
        if is_checkpoint(rel):
            problems.extend(check_loadable(os.path.join(directory, *rel.split("/")), label=rel,
                                           use_torch=use_torch))
    return problems
