# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure parsers for nvidia-smi output.

Two input shapes are turned into ONE normalised per-GPU dict (see ``GPU_KEYS``):

* ``nvidia-smi -q -x`` XML (DTD v10..v13, old and new spellings) -> ``parse_xml``
* ``nvidia-smi -q`` text (any label width, 610-style version lines) -> ``parse_text``

``--query-gpu`` CSV rows are read by ``gpu_query.parse_rows`` with the ``SAMPLE_FIELDS`` table below.

Error outputs (no driver, library mismatch, lost GPU, ...) are recognised by ``classify_error``.
Standard library only; runs on the target's Python 3.8+.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from ansible_collections.remote_gpu.trainer.plugins.module_utils.gpu_query import (
    NvidiaSmiParseError,
    is_no_value,
    to_int,
    to_number,
)

# Canonical clock event ("throttle") reasons, with the NVML bit used by the ``*.active`` bitmask.
REASON_BITS = (
    ("gpu_idle", 0x1),
    ("applications_clocks_setting", 0x2),
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sync_boost", 0x10),
    ("sw_thermal_slowdown", 0x20),
    ("hw_thermal_slowdown", 0x40),
    ("hw_power_brake_slowdown", 0x80),
    ("display_clocks_setting", 0x100),
)
REASONS = tuple(name for name, _bit in REASON_BITS)

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

# Every key of a normalised GPU dict; a value nvidia-smi does not report is None.
GPU_KEYS = (
    "index", "name", "uuid", "pci_bus_id", "pci",
    "memory_total_mib", "memory_used_mib", "temperature_c",
    "sm_clock_mhz", "sm_clock_max_mhz", "power_draw_w", "power_limit_w", "utilization_gpu_pct",
    "persistence_mode", "mig_mode", "throttle_reasons",
    "ecc_uncorrectable_volatile", "ecc_uncorrectable_aggregate",
    "retired_pages_pending", "remapped_rows_pending", "remapped_rows_failure",
    "pcie_gen_current", "pcie_gen_max", "pcie_width_current", "pcie_width_max",
)

_BUS_ID_RE = re.compile(r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.([0-7]))?")


# ---------------------------------------------------------------------------------------------------------------
# Value helpers
# ---------------------------------------------------------------------------------------------------------------

def to_bool(raw):
    """`Yes`/`Enabled`/`Active` -> True, `No`/`Disabled`/`Not Active` -> False, anything else None."""
    if is_no_value(raw):
        return None
    word = raw.strip().lower()
    if word in ("yes", "enabled", "active", "on", "true"):
        return True
    if word in ("no", "disabled", "not active", "off", "false", "none"):
        return False
    return None


def to_text(raw):
    return None if is_no_value(raw) else raw.strip()


def strip_deprecation(raw):
    """`610.57.04 [Deprecated; ...]` -> `610.57.04`."""
    if raw is None:
        return None
    return to_text(raw.split("[", 1)[0]) if not raw.strip().startswith("[") else None


def short_pci(bus_id):
    """Any bus id spelling (`00000000:19:00.0`, `PCI:0008:01:00`, `0000:b3:00.0`) -> `0000:19:00` (lower case)."""
    if not bus_id:
        return None
    match = _BUS_ID_RE.search(bus_id)
    if not match:
        return None
    domain, bus, device = match.group(1), match.group(2), match.group(3)
    return "%04x:%s:%s" % (int(domain, 16), bus.lower(), device.lower())


def reasons_from_bitmask(raw):
    """`0x0000000000000084` -> ['hw_power_brake_slowdown', 'sw_power_cap']; None when no value."""
    if is_no_value(raw):
        return None
    try:
        mask = int(raw.strip(), 16)
    except ValueError:
        return None
    return sorted(name for name, bit in REASON_BITS if mask & bit)


def active_reasons(states):
    """``{reason: True/False/None}`` of one GPU -> the sorted active reasons; None when no reason is known."""
    known = [name for name in REASONS if states.get(name) is not None]
    if not known:
        return None
    return sorted(name for name in known if states[name])


def empty_gpu(index):
    gpu = dict.fromkeys(GPU_KEYS)
    gpu["index"] = index
    return gpu


# ---------------------------------------------------------------------------------------------------------------
# Field tables: canonical key -> (converter, candidate paths). The first candidate with a value wins.
# ---------------------------------------------------------------------------------------------------------------

XML_FIELDS = (
    ("name", to_text, ("product_name",)),
    ("uuid", to_text, ("uuid",)),
    ("pci_bus_id", to_text, ("pci/pci_bus_id",)),
    ("memory_total_mib", to_int, ("fb_memory_usage/total",)),
    ("memory_used_mib", to_int, ("fb_memory_usage/used",)),
    ("temperature_c", to_int, ("temperature/gpu_temp",)),
    ("sm_clock_mhz", to_int, ("clocks/sm_clock",)),
    ("sm_clock_max_mhz", to_int, ("max_clocks/sm_clock",)),
    ("power_draw_w", to_number, (
        "gpu_power_readings/power_draw", "gpu_power_readings/instant_power_draw",
        "gpu_power_readings/average_power_draw", "power_readings/power_draw",
    )),
    ("power_limit_w", to_number, (
        "gpu_power_readings/current_power_limit", "power_readings/enforced_power_limit",
        "power_readings/power_limit",
    )),
    ("utilization_gpu_pct", to_int, ("utilization/gpu_util",)),
    ("persistence_mode", to_bool, ("persistence_mode",)),
    ("mig_mode", to_bool, ("mig_mode/current_mig",)),
    ("remapped_rows_pending", to_bool, ("remapped_rows/remapped_row_pending",)),
    ("remapped_rows_failure", to_bool, ("remapped_rows/remapped_row_failure",)),
    ("pcie_gen_current", to_int, ("pci/pci_gpu_link_info/pcie_gen/current_link_gen",)),
    ("pcie_gen_max", to_int, ("pci/pci_gpu_link_info/pcie_gen/max_link_gen",)),
    ("pcie_width_current", to_int, ("pci/pci_gpu_link_info/link_widths/current_link_width",)),
    ("pcie_width_max", to_int, ("pci/pci_gpu_link_info/link_widths/max_link_width",)),
)
XML_REASON_SECTIONS = (("clocks_event_reasons", "clocks_event_reason_"),
                       ("clocks_throttle_reasons", "clocks_throttle_reason_"))
XML_RETIRED_PENDING = ("retired_pages/pending_blacklist", "retired_pages/pending_retirement")

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


def _first(lookup, convert, candidates):
    for candidate in candidates:
        value = convert(lookup(candidate))
        if value is not None:
            return value
    return None


def _any_true(values):
    known = [value for value in values if value is not None]
    if not known:
        return None
    return any(known)


def uncorrectable_total(counters):
    """Sum uncorrectable ECC counters from ``{label: raw}`` of one Volatile/Aggregate block.

    New layout: every counter whose name contains "uncorrectable" (SRAM parity/SEC-DED, DRAM).
    Old layout: the ``double_bit`` / ``Double Bit`` block's total (passed as key ``double_bit_total``).
    """
    if counters.get("double_bit_total") is not None:
        return to_int(counters["double_bit_total"])
    values = [to_int(raw) for key, raw in counters.items() if "uncorrectable" in key.lower().replace(" ", "_")]
    values = [value for value in values if value is not None]
    return sum(values) if values else None


def finish_gpu(gpu):
    """Derive the short PCI key used to match Xid lines."""
    gpu["pci"] = short_pci(gpu.get("pci_bus_id"))
    return gpu


# ---------------------------------------------------------------------------------------------------------------
# XML (`nvidia-smi -q -x`)
# ---------------------------------------------------------------------------------------------------------------

_DOCTYPE_RE = re.compile(r"<!DOCTYPE[^>\[]*(\[.*?\])?\s*>", re.DOTALL)
_XML_END = "</nvidia_smi_log>"


def _xml_root(text):
    if not text or "<nvidia_smi_log" not in text:
        raise NvidiaSmiParseError("no <nvidia_smi_log> element in the nvidia-smi -q -x output")
    if "<!ENTITY" in text:
        raise NvidiaSmiParseError("refusing nvidia-smi XML that declares entities")
    # The DTD is never loaded: drop the DOCTYPE, and anything printed after the document (e.g. WARNING lines).
    text = _DOCTYPE_RE.sub("", text)
    end = text.find(_XML_END)
    if end >= 0:
        text = text[:end + len(_XML_END)]
    start = text.find("<?xml")
    text = text[start:] if start >= 0 else text[text.find("<nvidia_smi_log"):]
    try:
        return ET.fromstring(text.encode("utf-8"))
    except ET.ParseError as exc:
        raise NvidiaSmiParseError("nvidia-smi XML is not well-formed (%s)" % exc)


def _xml_text(element, path):
    node = element.find(path)
    if node is None or node.text is None or len(node):
        return None
    return node.text


def _xml_reasons(gpu_el):
    for section, prefix in XML_REASON_SECTIONS:
        node = gpu_el.find(section)
        if node is None:
            continue
        if not len(node):
            return None  # text node such as `N/A` (vGPU)
        return active_reasons(dict((child.tag[len(prefix):], to_bool(child.text))
                                   for child in node if child.tag.startswith(prefix)))
    return None


def _xml_ecc(gpu_el, block):
    node = gpu_el.find("ecc_errors/" + block)
    if node is None:
        return None
    counters = dict((child.tag, child.text) for child in node if not len(child))
    old_total = node.find("double_bit/total")
    if old_total is not None:
        counters["double_bit_total"] = old_total.text
    return uncorrectable_total(counters)


def _parse_xml_gpu(index, gpu_el):
    gpu = empty_gpu(index)

    def lookup(path):
        return _xml_text(gpu_el, path)

    for key, convert, candidates in XML_FIELDS:
        gpu[key] = _first(lookup, convert, candidates)
    if gpu["pci_bus_id"] is None:
        gpu["pci_bus_id"] = gpu_el.get("id")
    gpu["throttle_reasons"] = _xml_reasons(gpu_el)
    gpu["ecc_uncorrectable_volatile"] = _xml_ecc(gpu_el, "volatile")
    gpu["ecc_uncorrectable_aggregate"] = _xml_ecc(gpu_el, "aggregate")
    gpu["retired_pages_pending"] = _any_true(to_bool(lookup(path)) for path in XML_RETIRED_PENDING)
    return finish_gpu(gpu)


def parse_xml(text):
    """Parse `nvidia-smi -q -x` output -> {driver_version, cuda_version, gpus: [normalised GPU dict]}.

    Raises NvidiaSmiParseError (never an ElementTree exception) when the document is unusable.
    """
    root = _xml_root(text)
    return {
        "driver_version": strip_deprecation(_xml_text(root, "driver_version")),
        "cuda_version": strip_deprecation(_xml_text(root, "cuda_version")),
        "gpus": [_parse_xml_gpu(index, gpu_el) for index, gpu_el in enumerate(root.findall("gpu"))],
    }


# ---------------------------------------------------------------------------------------------------------------
# Text (`nvidia-smi -q`)
# ---------------------------------------------------------------------------------------------------------------

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
        gpu[key] = _first(gpu_node.value_at, convert, candidates)
    if gpu["pci_bus_id"] is None:
        gpu["pci_bus_id"] = bus_id
    gpu["throttle_reasons"] = _text_reasons(gpu_node)
    gpu["ecc_uncorrectable_volatile"] = _text_ecc(gpu_node, "Volatile")
    gpu["ecc_uncorrectable_aggregate"] = _text_ecc(gpu_node, "Aggregate")
    gpu["retired_pages_pending"] = _any_true(to_bool(gpu_node.value_at(path)) for path in TEXT_RETIRED_PENDING)
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
        "driver_version": _first(root.value_at, strip_deprecation, [(label,) for label in TEXT_DRIVER_LABELS]),
        "cuda_version": _first(root.value_at, strip_deprecation, [(label,) for label in TEXT_CUDA_LABELS]),
        "gpus": [_parse_text_gpu(index, bus_id, node) for index, (bus_id, node) in enumerate(gpu_nodes)],
    }


def parse_full(text):
    """Parse either `-q -x` XML or `-q` text, whichever the output is."""
    if text and "<nvidia_smi_log" in text:
        return parse_xml(text)
    return parse_text(text)


# ---------------------------------------------------------------------------------------------------------------
# `--query-gpu` samples (run and read by gpu_query)
# ---------------------------------------------------------------------------------------------------------------

# Sample fields gpu_health asks for, with the key and converter of each (all exist from 465.27 to 610.x).
SAMPLE_FIELDS = (
    ("index", "index", to_int),
    ("clocks.sm", "sm_clock_mhz", to_int),
    ("clocks.max.sm", "sm_clock_max_mhz", to_int),
    ("temperature.gpu", "temperature_c", to_int),
    ("utilization.gpu", "utilization_gpu_pct", to_int),
    ("power.draw", "power_draw_w", to_number),
    ("pcie.link.gen.current", "pcie_gen_current", to_int),
    ("pcie.link.gen.max", "pcie_gen_max", to_int),
    ("pcie.link.width.current", "pcie_width_current", to_int),
    ("pcie.link.width.max", "pcie_width_max", to_int),
    ("clocks_throttle_reasons.active", "throttle_reasons", reasons_from_bitmask),
)


# ---------------------------------------------------------------------------------------------------------------
# Error outputs
# ---------------------------------------------------------------------------------------------------------------

# (kind, pattern, what it means, what to do); matched in order against stdout+stderr.
ERROR_PATTERNS = (
    ("command_not_found", re.compile(r"nvidia-smi: (command )?not found|No such file or directory", re.I),
     "nvidia-smi is not installed", "rent a box with the NVIDIA driver installed, or install the driver"),
    ("no_driver", re.compile(r"couldn't communicate with the NVIDIA driver", re.I),
     "the NVIDIA kernel driver is not loaded", "the box has no working driver: stop it and rent a different one"),
    ("driver_library_mismatch", re.compile(r"Driver/library version mismatch", re.I),
     "the loaded kernel module and the user-space NVML library differ (driver upgraded without reboot)",
     "reboot the box if you may, otherwise stop it and rent a different one"),
    ("no_supported_gpus", re.compile(r"No supported GPUs were found", re.I),
     "the driver is loaded but sees no usable GPU", "stop the box and rent a different one"),
    ("no_devices", re.compile(r"No devices were found", re.I),
     "nvidia-smi found no GPU", "stop the box and rent a different one"),
    ("gpu_lost", re.compile(r"GPU is lost", re.I),
     "a GPU fell off the bus (GPU is lost)", "stop the box and rent a different one"),
    ("gpu_unknown_error", re.compile(r"Unable to determine the device handle for GPU", re.I),
     "nvidia-smi cannot open a GPU", "stop the box and rent a different one"),
    ("inforom_corrupted", re.compile(r"infoROM is corrupted", re.I),
     "a GPU's infoROM is corrupted (ECC and retirement records unreliable)", "stop the box and rent a different one"),
    ("nvml_init_failed", re.compile(r"Failed to initialize NVML", re.I),
     "NVML failed to initialise", "stop the box and rent a different one"),
)
_ERROR_BUS_RE = re.compile(r"GPU ?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])|"
                           r"gpu ([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])")


def classify_error(output, rc):
    """Recognise a known nvidia-smi failure in ``output`` (stdout+stderr) -> dict or None.

    Returns {kind, rc, meaning, action, pci (short bus id or None), evidence (first matching line)}.
    A non-zero ``rc`` with unrecognised output yields kind ``exit_<rc>``; rc 127 is always command_not_found.
    """
    text = output or ""
    for kind, pattern, meaning, action in ERROR_PATTERNS:
        match = pattern.search(text)
        if match:
            line_start = text.rfind("\n", 0, match.start()) + 1
            line_end = text.find("\n", match.end())
            evidence = text[line_start:line_end if line_end >= 0 else len(text)].strip()
            bus = _ERROR_BUS_RE.search(text[line_start:])
            pci = short_pci(bus.group(1) or bus.group(2)) if bus else None
            return {"kind": kind, "rc": rc, "meaning": meaning, "action": action, "pci": pci, "evidence": evidence}
    if rc == 127:
        return {"kind": "command_not_found", "rc": rc, "meaning": "nvidia-smi is not installed",
                "action": "rent a box with the NVIDIA driver installed", "pci": None, "evidence": text.strip()[:200]}
    if rc:
        return {"kind": "exit_%d" % rc, "rc": rc, "meaning": "nvidia-smi exited with %d" % rc,
                "action": "run nvidia-smi on the box and read its message", "pci": None,
                "evidence": text.strip()[:200]}
    return None
