# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parser of ``nvidia-smi -q`` text (any label width, 610-style version lines) -> normalised GPU dicts.

The text is read into a tree by indentation (``_Node``); ``parse_text`` returns
{driver_version, cuda_version, gpus: [GPU dict]} with the keys of ``nvidia_smi_gpu.GPU_KEYS``. Truncated output
yields partial GPUs; output without any GPU section raises ``NvidiaSmiParseError``.
Standard library only; runs on the target's Python 3.8+.
"""

from __future__ import annotations

import re

from ansible_collections.remote_gpu.trainer.plugins.module_utils.gpu_query import NvidiaSmiParseError, to_int, to_number
from ansible_collections.remote_gpu.trainer.plugins.module_utils.nvidia_smi_gpu import (
    active_reasons, any_true, empty_gpu, finish_gpu, first_value, strip_deprecation, to_bool, to_text,
    uncorrectable_total,
)

# `-q` text labels of the reason flags -> canonical name.
TEXT_REASON_LABELS = {
    "idle": "gpu_idle",
    "gpu idle": "gpu_idle",
    "applications clocks setting": "applications_clocks_setting",
    "sw power cap": "sw_power_cap",
    "hw slowdown": "hw_slowdown",
    "hw thermal slowdown": "hw_thermal_slowdown",
    "hw power brake slowdown": "hw_power_brake_slowdown",
    "sync boost": "sync_boost",
    "sw thermal slowdown": "sw_thermal_slowdown",
    "display clock setting": "display_clocks_setting",
    "display clocks setting": "display_clocks_setting",
}

# Canonical key -> (converter, candidate label paths below `GPU <bus id>`). The first candidate with a value wins.
TEXT_FIELDS = (
    ("name", to_text, (("Product Name",),)),
    ("uuid", to_text, (("GPU UUID",),)),
    ("pci_bus_id", to_text, (("PCI", "Bus Id"),)),
    ("memory_total_mib", to_int, (("FB Memory Usage", "Total"),)),
    ("memory_used_mib", to_int, (("FB Memory Usage", "Used"),)),
    ("temperature_c", to_int, (("Temperature", "GPU Current Temp"),)),
    ("sm_clock_mhz", to_int, (("Clocks", "SM"),)),
    ("sm_clock_max_mhz", to_int, (("Max Clocks", "SM"),)),
    ("power_draw_w", to_number, (
        ("GPU Power Readings", "Power Draw"), ("GPU Power Readings", "Instantaneous Power Draw"),
        ("GPU Power Readings", "Instant Power Draw"), ("GPU Power Readings", "Average Power Draw"),
        ("Power Readings", "Power Draw"),
    )),
    ("power_limit_w", to_number, (
        ("GPU Power Readings", "Current Power Limit"),
        ("GPU Power Readings", "GPU Ceiling Power Limit", "Current Power Limit"),  # 610+
        ("Power Readings", "Enforced Power Limit"),
        ("Power Readings", "Power Limit"),
    )),
    ("utilization_gpu_pct", to_int, (("Utilization", "Gpu"),)),
    ("persistence_mode", to_bool, (("Persistence Mode",),)),
    ("mig_mode", to_bool, (("MIG Mode", "Current"),)),
    ("remapped_rows_pending", to_bool, (("Remapped Rows", "Pending"),)),
    ("remapped_rows_failure", to_bool, (("Remapped Rows", "Remapping Failure Occurred"),)),
    ("pcie_gen_current", to_int, (("PCI", "GPU Link Info", "PCIe Generation", "Current"),)),
    ("pcie_gen_max", to_int, (("PCI", "GPU Link Info", "PCIe Generation", "Max"),)),
    ("pcie_width_current", to_int, (("PCI", "GPU Link Info", "Link Width", "Current"),)),
    ("pcie_width_max", to_int, (("PCI", "GPU Link Info", "Link Width", "Max"),)),
)
TEXT_REASON_SECTIONS = ("Clocks Event Reasons", "Clocks Throttle Reasons")
TEXT_RETIRED_PENDING = (("Retired Pages", "Pending Page Blacklist"), ("Retired Pages", "Pending Page Retirement"))
# Driver/CUDA version labels, preferred first (610+: "KMD Version", "CUDA UMD Version").
TEXT_DRIVER_LABELS = ("KMD Version", "Driver Version")
TEXT_CUDA_LABELS = ("CUDA UMD Version", "CUDA Version")


_TEXT_LINE_RE = re.compile(r"^(\s*)(\S.*?)\s+:(?: (.*))?$")
_GPU_HEADER_RE = re.compile(r"^GPU ([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s*$")


class _Node(object):
    """One `-q` text line: label, value (None for a section) and the lines indented below it."""

    __slots__ = ("label", "value", "children", "indent")

    def __init__(self, label, value, indent):
        self.label = label
        self.value = value
        self.children = []
        self.indent = indent

    def child(self, label):
        wanted = label.lower()
        for node in self.children:
            if node.label.lower() == wanted:
                return node
        return None

    def path(self, labels):
        node = self
        for label in labels:
            node = node.child(label)
            if node is None:
                return None
        return node

    def value_at(self, labels):
        node = self.path(labels)
        return None if node is None else node.value


def _text_tree(text):
    """Build a tree from indentation. Returns (root, [(bus_id, gpu_node)])."""
    root = _Node("", None, -1)
    gpus = []
    stack = [root]
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("="):
            continue
        header = _GPU_HEADER_RE.match(line)
        if header:
            node = _Node("GPU", header.group(1), 0)
            root.children.append(node)
            gpus.append((header.group(1), node))
            stack = [root, node]
            continue
        match = _TEXT_LINE_RE.match(line)
        if match:
            indent, label, value = len(match.group(1)), match.group(2).strip(), match.group(3)
            value = "" if value is None else value.strip()
        else:
            indent, label, value = len(line) - len(line.lstrip()), line.strip(), None
        while len(stack) > 1 and stack[-1].indent >= indent:
            stack.pop()
        node = _Node(label, value, indent)
        stack[-1].children.append(node)
        stack.append(node)
    return root, gpus


def _text_reasons(gpu_node):
    for section in TEXT_REASON_SECTIONS:
        node = gpu_node.child(section)
        if node is None:
            continue
        states = {}
        pending = list(node.children)
        while pending:  # HW Thermal/Power Brake Slowdown sit one level below HW Slowdown
            child = pending.pop(0)
            pending.extend(child.children)
            name = TEXT_REASON_LABELS.get(child.label.lower())
            if name:
                states[name] = to_bool(child.value)
        return active_reasons(states)
    return None


def _text_ecc(gpu_node, block):
    node = gpu_node.path(("ECC Errors", block))
    if node is None:
        return None
    counters = dict((child.label, child.value) for child in node.children if not child.children)
    old_total = node.path(("Double Bit", "Total"))
    if old_total is not None:
        counters["double_bit_total"] = old_total.value
    return uncorrectable_total(counters)


def _parse_text_gpu(index, bus_id, gpu_node):
    gpu = empty_gpu(index)
    for key, convert, candidates in TEXT_FIELDS:
        gpu[key] = first_value(gpu_node.value_at, convert, candidates)
    if gpu["pci_bus_id"] is None:
        gpu["pci_bus_id"] = bus_id
    gpu["throttle_reasons"] = _text_reasons(gpu_node)
    gpu["ecc_uncorrectable_volatile"] = _text_ecc(gpu_node, "Volatile")
    gpu["ecc_uncorrectable_aggregate"] = _text_ecc(gpu_node, "Aggregate")
    gpu["retired_pages_pending"] = any_true(to_bool(gpu_node.value_at(path)) for path in TEXT_RETIRED_PENDING)
    return finish_gpu(gpu)


def parse_text(text):
    """Parse `nvidia-smi -q` text -> {driver_version, cuda_version, gpus}.

    Tolerates leading blank lines, any label width and truncated output (partial GPUs are returned).
    Raises NvidiaSmiParseError when there is no GPU section at all.
    """
    root, gpu_nodes = _text_tree(text or "")
    if not gpu_nodes:
        raise NvidiaSmiParseError("no 'GPU <bus id>' section in the nvidia-smi -q output")
    return {
        "driver_version": first_value(root.value_at, strip_deprecation, [(label,) for label in TEXT_DRIVER_LABELS]),
        "cuda_version": first_value(root.value_at, strip_deprecation, [(label,) for label in TEXT_CUDA_LABELS]),
        "gpus": [_parse_text_gpu(index, bus_id, node) for index, (bus_id, node) in enumerate(gpu_nodes)],
    }
