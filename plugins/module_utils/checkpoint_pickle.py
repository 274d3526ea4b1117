# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pickle streams walked WITHOUT executing them, and the globals ``torch.load(weights_only=True)`` allows.

Standard library only; runs on the target (Python 3.8+) and on the controller. Serves checkpoint.py, which
checks whole checkpoint files (torch zip, legacy torch, safetensors).

* ``walk_pickle`` follows a pickle with ``pickletools.genops`` and a small symbolic stack, and returns its
  persistent ids (a torch storage id comes back as ``('storage', Global, key, location, numel)``) and every
  global it names. Nothing is imported or executed.
* ``check_globals`` refuses every global outside ``ALLOWED_GLOBALS`` (torch's rebuild functions, storage and
  tensor types, dtypes, ``collections.OrderedDict``, ``builtins.set`` ...) with ``UnsafeGlobal``, naming it.
"""

from __future__ import annotations

import pickletools

# The default allow-list of torch.load(weights_only=True) (torch/_weights_only_unpickler.py, _get_allowed_globals),
# as "module.name". Protocol-2 pickles name Python 2 modules (__builtin__, copy_reg), mapped as pickle maps them.
_TORCH_DTYPES = (
    "float32 float64 float16 bfloat16 complex32 complex64 complex128 uint8 int8 int16 int32 int64 bool "
    "qint8 quint8 qint32 quint4x2 quint2x4 float8_e4m3fn float8_e5m2 float8_e4m3fnuz float8_e5m2fnuz "
    "float8_e8m0fnu float4_e2m1fn_x2 uint16 uint32 uint64 bits1x8 bits2x4 bits4x2 bits8 bits16 "
    "uint1 uint2 uint3 uint4 uint5 uint6 uint7 int1 int2 int3 int4 int5 int6 int7").split()
_TORCH_ELEMENT_TYPES = "Double Float Half BFloat16 Long Int Short Char Byte Bool ComplexDouble ComplexFloat".split()
_TORCH_REBUILD = (
    "_rebuild_parameter _rebuild_parameter_with_state _rebuild_qtensor _rebuild_tensor _rebuild_tensor_v2 "
    "_rebuild_tensor_v3 _rebuild_sparse_tensor _rebuild_meta_tensor_no_storage _rebuild_wrapper_subclass "
    "_rebuild_device_tensor_from_numpy _rebuild_device_tensor_from_cpu_tensor").split()
ALLOWED_GLOBALS = frozenset(
    ["collections.OrderedDict", "collections.Counter", "torch.nn.parameter.Parameter",
     "torch.serialization._get_layout", "torch.Size", "torch.Tensor", "torch.device", "_codecs.encode",
     "builtins.bytearray", "builtins.set", "builtins.complex", "torch._tensor._rebuild_from_type_v2",
     "torch.storage.TypedStorage", "torch.UntypedStorage", "torch.storage.UntypedStorage",
     "torch.per_tensor_affine", "torch.per_tensor_symmetric", "torch.per_channel_affine",
     "torch.per_channel_symmetric", "torch.per_channel_affine_float_qparams"]
    + ["torch.%s" % name for name in _TORCH_DTYPES]
    + ["torch._utils.%s" % name for name in _TORCH_REBUILD]
    + ["%s.%sStorage" % (module, kind) for module in ("torch", "torch.cuda")
       for kind in _TORCH_ELEMENT_TYPES + ["QInt8", "QUInt8", "QInt32", "QUInt4x2", "QUInt2x4"]]
    + ["%s.%sTensor" % (module, kind) for module in ("torch", "torch.cuda", "torch.sparse", "torch.cuda.sparse")
       for kind in _TORCH_ELEMENT_TYPES])
try:
    # how the unpickler (and torch's) maps the Python 2 names that protocols 0-2 write, e.g. __builtin__.set
    from _compat_pickle import IMPORT_MAPPING as _PY2_MODULES, NAME_MAPPING as _PY2_NAMES
except ImportError:  # pragma: no cover - CPython always has it
    _PY2_MODULES, _PY2_NAMES = {"__builtin__": "builtins", "copy_reg": "copyreg"}, {}

CONSTANT_OPS = frozenset([
    "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING",
    "SHORT_BINSTRING", "BININT", "BININT1", "BININT2", "LONG1", "LONG4", "INT", "LONG",
    "BINFLOAT", "FLOAT",
])

_MARK = object()


class Global:
    """A GLOBAL reference seen in a pickle (never imported)."""

    def __init__(self, module, name):
        if (module, name) in _PY2_NAMES:
            module, name = _PY2_NAMES[(module, name)]
        elif module in _PY2_MODULES:
            module = _PY2_MODULES[module]
        self.module = module
        self.name = name

    @property
    def full_name(self):
        return "%s.%s" % (self.module, self.name)

    @property
    def allowed(self):
        return isinstance(self.module, str) and isinstance(self.name, str) and self.full_name in ALLOWED_GLOBALS


class UnsafeGlobal(ValueError):
    """A pickle references a global that torch.load(weights_only=True) refuses."""


class _Opaque:
    """A stack value that the walker does not track."""


def pickle_persistent_ids(data):
    """Walk a pickle with ``pickletools.genops`` (nothing is executed) and return its persistent ids.

    A small symbolic stack follows constants, memo, globals and tuples, so a torch storage id
    comes back as ``('storage', Global, key, location, numel)``. Raises ValueError when the stream
    is malformed, truncated or does not end with STOP.
    """
    return walk_pickle(data)[0]


def check_globals(references):
    """UnsafeGlobal naming every reference (``Global``) outside ``ALLOWED_GLOBALS``; None when all are allowed."""
    refused = sorted(set(ref.full_name for ref in references if not ref.allowed))
    if refused:
        raise UnsafeGlobal("references %s, which torch.load(weights_only=True) refuses (only torch's tensor, "
                           "storage and dtype types, its rebuild functions, collections.OrderedDict and a few "
                           "builtins are allowed); do not load it, save a state_dict of tensors instead"
                           % ", ".join(refused))


def walk_pickle(data):
    """``(persistent ids, globals)`` of a pickle (bytes or a binary file), walked without executing it.

    ``globals`` lists every ``Global`` that GLOBAL, STACK_GLOBAL, INST or an extension code names (an
    extension code comes back as the module ``copyreg._extension_registry``, never allowed).
    """
    stack = []
    memo = {}
    pids = []
    references = []
    last = None
    for opcode, arg, pos in pickletools.genops(data):
        last = opcode.name
        name = opcode.name
        if name in CONSTANT_OPS:
            stack.append(arg)
        elif name in ("GLOBAL", "INST"):
            module, _sep, attr = str(arg).partition(" ")
            ref = Global(module, attr)
            references.append(ref)
            if name == "GLOBAL":
                stack.append(ref)
            else:
                _pop_to_mark(stack, pos)
                stack.append(_Opaque())
        elif name == "STACK_GLOBAL":
            attr, module = _pop(stack, 1, pos), _pop(stack, 1, pos)
            ref = Global(module if isinstance(module, str) else "?", attr if isinstance(attr, str) else "?")
            references.append(ref)
            stack.append(ref)
        elif name in ("EXT1", "EXT2", "EXT4"):
            references.append(Global("copyreg._extension_registry", str(arg)))
            stack.append(_Opaque())
        elif name == "MARK":
            stack.append(_MARK)
        elif name in ("TUPLE", "EMPTY_TUPLE", "TUPLE1", "TUPLE2", "TUPLE3"):
            stack.append(_build_tuple(name, stack, pos))
        elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
            memo[arg] = _top(stack, pos)
        elif name == "MEMOIZE":
            memo[len(memo)] = _top(stack, pos)
        elif name in ("BINGET", "LONG_BINGET", "GET"):
            if arg not in memo:
                raise ValueError("memo key %r read before it is written at byte %d" % (arg, pos))
            stack.append(memo[arg])
        elif name == "BINPERSID":
            pids.append(_pop(stack, 1, pos))
            stack.append(_Opaque())
        elif name == "PERSID":
            pids.append(arg)
            stack.append(_Opaque())
        else:
            _generic(opcode, stack, pos)
    if last != "STOP":
        raise ValueError("the pickle does not end with STOP")
    return pids, references


def _top(stack, pos):
    if not stack or stack[-1] is _MARK:
        raise ValueError("pickle stack underflow at byte %d" % pos)
    return stack[-1]


def _pop(stack, count, pos):
    value = None
    for _index in range(count):
        value = _top(stack, pos)
        stack.pop()
    return value


def _pop_to_mark(stack, pos):
    items = []
    while stack:
        value = stack.pop()
        if value is _MARK:
            items.reverse()
            return items
        items.append(value)
    raise ValueError("pickle MARK missing at byte %d" % pos)


def _build_tuple(name, stack, pos):
    if name == "TUPLE":
        return tuple(_pop_to_mark(stack, pos))
    count = {"EMPTY_TUPLE": 0, "TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}[name]
    items = [_pop(stack, 1, pos) for _index in range(count)]
    items.reverse()
    return tuple(items)


def _generic(opcode, stack, pos):
    """Apply an opcode's documented stack effect with opaque values."""
    before = list(opcode.stack_before)
    if pickletools.markobject in before:
        cut = before.index(pickletools.markobject)
        _pop_to_mark(stack, pos)
        before = before[:cut]
    _pop(stack, len(before), pos)
    for _item in opcode.stack_after:
        stack.append(_MARK if _item is pickletools.markobject else _Opaque())
