# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A GPU's compute capability from its product name, and whether a torch build has kernels for it (pure).

nvidia-smi prints ``compute_cap`` only from driver 510 or so on, and the lab's GPU emulator cannot print it at all,
so the capability is looked up by the product name that every driver prints (``NVIDIA GeForce RTX 5090``,
``Tesla V100-SXM2-16GB``, ``GRID P4-1Q``). The table holds NVIDIA's published compute capabilities:

    Source: NVIDIA, "CUDA GPU Compute Capability", https://developer.nvidia.com/cuda-gpus (checked 2026-06),
    the tables "CUDA-Enabled Datacenter Products", "CUDA-Enabled NVIDIA RTX / Quadro Products" and
    "CUDA-Enabled GeForce and TITAN Products". Jetson modules are left out (they are not rented).

Standard library only: this runs on the box's interpreter.
"""

from __future__ import annotations

import re

# (pattern on the normalized name, (major, minor)), first match wins, so the more specific patterns come first.
# The normalized name is upper case, without the brand words NVIDIA, GEFORCE, TESLA, QUADRO and GRID, with '-' and
# parentheses as spaces: "NVIDIA GeForce RTX 3060 Laptop GPU" -> "RTX 3060 LAPTOP GPU",
# "Tesla V100-SXM2-16GB" -> "V100 SXM2 16GB".
CAPABILITIES = (
    (r"RTX \d+ (SFF )?ADA\b", (8, 9)),  # before the GeForce RTX 50xx: "NVIDIA RTX 5000 Ada Generation" is Ada
    # Blackwell
    (r"GB10\b", (12, 1)),
    (r"RTX 50\d\d\b", (12, 0)),
    (r"RTX PRO \d+ BLACKWELL\b", (12, 0)),
    (r"G?B300\b", (10, 3)),
    (r"G?B200\b", (10, 0)),
    # Hopper
    (r"(GH200|H200|H100|H800|H20)\b", (9, 0)),
    # Ada Lovelace
    (r"(L40S|L40|L20|L4)\b", (8, 9)),
    (r"RTX [4-8]000$", (7, 5)),  # Quadro RTX 4000-8000 (Turing); the Ada ones say "Ada Generation"
    (r"RTX 40\d\d\b", (8, 9)),
    # Ampere
    (r"(A100|A800|A30)\b", (8, 0)),
    (r"(A40|A10G|A10|A16|A2)\b", (8, 6)),
    (r"RTX A\d+\b", (8, 6)),
    (r"RTX 30\d\d\b", (8, 6)),
    # Turing
    (r"T4\b", (7, 5)),
    (r"(RTX 20\d\d|GTX 16\d\d|TITAN RTX)\b", (7, 5)),
    # Volta
    (r"(V100S|V100|TITAN V|GV100)\b", (7, 0)),
    # Pascal
    (r"(P100|GP100)\b", (6, 0)),
    (r"(P40|P4|P6|GTX 10\d\d|GT 10\d\d|TITAN XP|TITAN X PASCAL|P\d{3,4})\b", (6, 1)),
    # Maxwell
    (r"(M40|M60|M6|M4|GTX 9\d\d|GTX TITAN X|TITAN X)\b", (5, 2)),
    (r"(GTX 750|GTX 745|M10)\b", (5, 0)),
    # Kepler
    (r"K80\b", (3, 7)),
    (r"(K40|K20|GTX TITAN|GTX 780)\b", (3, 5)),
    (r"(K10|GTX 6\d\d|GTX 7[0-7]\d)\b", (3, 0)),
)
_COMPILED = tuple((re.compile(pattern), cap) for pattern, cap in CAPABILITIES)
_BRANDS = re.compile(r"\b(NVIDIA|GEFORCE|TESLA|QUADRO|GRID)\b")

# The first torch builds with kernels for an architecture family that older builds lack, for the action of a finding.
# PyTorch's release notes: 2.7.0 (April 2025) is the first with CUDA 12.8 wheels, which add Blackwell (sm_100, sm_120).
INSTALL_HINTS = {
    10: "torch 2.7 or newer from the CUDA 12.8 index (pip install torch --index-url "
        "https://download.pytorch.org/whl/cu128); the driver must support CUDA 12.8 (driver 570 or newer)",
    12: "torch 2.7 or newer from the CUDA 12.8 index (pip install torch --index-url "
        "https://download.pytorch.org/whl/cu128); the driver must support CUDA 12.8 (driver 570 or newer)",
}


def normalize(name):
    text = _BRANDS.sub(" ", re.sub(r"[-()]", " ", str(name or "").upper()))
    return " ".join(text.split())


def capability(name):
    """(major, minor) of a GPU product name as nvidia-smi prints it, or None when the table does not know it."""
    text = normalize(name)
    for pattern, cap in _COMPILED:
        if pattern.match(text):
            return cap
    return None


def sm_name(cap):
    """(12, 0) -> 'sm_120'."""
    return "sm_%d%d" % cap


def _parse_arch(arch):
    """'sm_86' -> ('sm', (8, 6), ''); 'sm_90a' -> ('sm', (9, 0), 'a'); 'compute_90' -> ('compute', (9, 0), '')."""
    match = re.match(r"^(sm|compute)_(\d+)(\d)([a-z]?)$", str(arch).strip())
    if not match:
        return None
    return match.group(1), (int(match.group(2)), int(match.group(3))), match.group(4)


def arch_supported(cap, arch_list):
    """Whether a torch build compiled for ``arch_list`` (``torch.cuda.get_arch_list()``) can run on ``cap``.

    A cubin (``sm_XY``) runs on the same major version with an equal or higher minor; an architecture-specific one
    (``sm_90a``) only on exactly that capability; a family one (``sm_100f``) like a plain one. PTX
    (``compute_XY``) is compiled by the driver for any capability at or above X.Y (``compute_90a`` only for 9.0).
    """
    for arch in arch_list:
        parsed = _parse_arch(arch)
        if parsed is None:
            continue
        kind, built, suffix = parsed
        if suffix == "a":
            if built == tuple(cap):
                return True
        elif kind == "sm":
            if built[0] == cap[0] and built[1] <= cap[1]:
                return True
        elif built <= tuple(cap):
            return True
    return False


def install_hint(cap):
    return INSTALL_HINTS.get(cap[0], "a torch build whose CUDA architecture list includes %s (check "
                                     "python -c 'import torch; print(torch.cuda.get_arch_list())')" % sm_name(cap))
