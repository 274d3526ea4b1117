# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parser of ``nvidia-smi -q -x`` XML (DTD v10..v13, old and new spellings) -> normalised GPU dicts.

``parse_xml`` returns {driver_version, cuda_version, gpus: [GPU dict]} with the keys of
``nvidia_smi_gpu.GPU_KEYS``; an unusable document raises ``NvidiaSmiParseError``. The DTD is never loaded and
entity declarations are refused. Standard library only; runs on the target's Python 3.8+.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from ansible_collections.remote_gpu.trainer.plugins.module_utils.gpu_query import NvidiaSmiParseError, to_int, to_number
from ansible_collections.remote_gpu.trainer.plugins.module_utils.nvidia_smi_gpu import (
    active_reasons, any_true, empty_gpu, finish_gpu, first_value, strip_deprecation, to_bool, to_text,
    uncorrectable_total,
)

# Canonical key -> (converter, candidate element paths below <gpu>). The first candidate with a value wins.
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
        gpu[key] = first_value(lookup, convert, candidates)
    if gpu["pci_bus_id"] is None:
        gpu["pci_bus_id"] = gpu_el.get("id")
    gpu["throttle_reasons"] = _xml_reasons(gpu_el)
    gpu["ecc_uncorrectable_volatile"] = _xml_ecc(gpu_el, "volatile")
    gpu["ecc_uncorrectable_aggregate"] = _xml_ecc(gpu_el, "aggregate")
    gpu["retired_pages_pending"] = any_true(to_bool(lookup(path)) for path in XML_RETIRED_PENDING)
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
