# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One GPU as every nvidia-smi full-state reader returns it, and the helpers that build it.

* ``GPU_KEYS``: every key of a normalised GPU dict (a value nvidia-smi does not report is None);
  ``empty_gpu`` starts one, ``finish_gpu`` derives its short PCI key.
* ``REASON_BITS``/``REASONS``: the canonical clock event ("throttle") reasons.
* Value converters on top of ``gpu_query``'s (``to_bool``, ``to_text``, ``strip_deprecation``, ``short_pci``,
  ``reasons_from_bitmask``) and the field-table helpers the parsers share (``first_value``, ``any_true``,
  ``active_reasons``, ``uncorrectable_total``).

The parsers are ``nvidia_smi_xml.parse_xml`` (``-q -x``) and ``nvidia_smi_text.parse_text`` (``-q``);
``nvidia_smi.parse_full`` picks one. Standard library only; runs on the target's Python 3.8+.
"""

from __future__ import annotations

import re

from ansible_collections.remote_gpu.trainer.plugins.module_utils.gpu_query import is_no_value, to_int, to_number

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


# `--query-gpu` columns that gpu_health's samples (nvidia_smi.SAMPLE_FIELDS) and patrol's query
# (gpu_patrol.PATROL_FIELDS) both read: (field, key, converter), as in gpu_query.
SM_CLOCK = ("clocks.sm", "sm_clock_mhz", to_int)
SM_CLOCK_MAX = ("clocks.max.sm", "sm_clock_max_mhz", to_int)
POWER_DRAW = ("power.draw", "power_draw_w", to_number)
THROTTLE_REASONS = ("clocks_throttle_reasons.active", "throttle_reasons", reasons_from_bitmask)


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
# Helpers of the parsers' field tables: canonical key -> (converter, candidate paths); the first with a value wins.
# ---------------------------------------------------------------------------------------------------------------

def first_value(lookup, convert, candidates):
    """``convert(lookup(path))`` of the first candidate path that gives a value; None when none does."""
    for candidate in candidates:
        value = convert(lookup(candidate))
        if value is not None:
            return value
    return None


def any_true(values):
    """True when any known value is true, False when all known ones are false, None when none is known."""
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
