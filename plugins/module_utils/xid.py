# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""NVIDIA Xid catalogue and kernel-log parser (pure, standard library only).

The catalogue follows tests/fixtures/nvidia/xid_catalog.md. Each code has a class:

* ``fatal``     - hardware fault or a GPU/node that needs a reset/reboot (HW-FATAL and NEEDS-RESET in the
                  catalogue). On a rented box neither is possible, so gpu_health reports FAIL.
* ``app_fault`` - the offending job/context died, or a non-fatal link error; the GPU stays usable (WARN).
* ``info``      - informational or secondary event (INFO).

``parse_kernel_log`` finds Xid lines in any log format (dmesg, dmesg -T, dmesg --decode iso, syslog,
journalctl, message only) by searching for the ``NVRM: Xid (...)`` marker rather than parsing prefixes.
"""

from __future__ import annotations

import re

FATAL = "fatal"
APP_FAULT = "app_fault"
INFO = "info"

_RESET = "the GPU needs a reset or the node a reboot, impossible on a rental: stop the box and rent a different one"
_HW = "hardware fault: stop the box and rent a different one"
_APP = "restart the job; if it recurs with different jobs on the same GPU, treat the GPU as faulty"
_NONE = "no action by itself; act on the primary Xid or on the ECC / remapped-row counters"

# Key codes with our wording: code -> (mnemonic, meaning, class, action).
KEY_CODES = {
    8: ("ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "a channel stopped making progress (timeout)", APP_FAULT, _APP),
    13: ("ROBUST_CHANNEL_GR_EXCEPTION", "graphics/SM exception in a running kernel", APP_FAULT, _APP),
    31: ("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU MMU page fault (invalid GPU virtual address)", APP_FAULT, _APP),
    32: ("ROBUST_CHANNEL_PBDMA_ERROR", "corrupted push-buffer stream (check PCIe if frequent)", APP_FAULT, _APP),
    43: ("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "a user context faulted and was torn down", APP_FAULT, _APP),
    # 45 alone means the driver tore down a process's channels (killed, crashed, or stuck): an application fault
    # worth a warning. Next to another Xid, or with "caused by previous Xid N", it is only that Xid's echo and
    # is demoted to INFO (the catalogue's "Not Solo: IGNORE (follow other Xid)"); see _demote_secondary_45.
    45: ("ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "driver removed channels (process killed or an earlier error)",
         APP_FAULT, "check the job on this GPU (it was killed or crashed); if another Xid names the cause, follow it"),
    46: ("ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", FATAL, _RESET),
    48: ("ROBUST_CHANNEL_GPU_ECC_DBE", "uncorrectable (double-bit) ECC error in GPU memory", FATAL, _HW),
    54: ("SILENT_RUNNING_PWR_REDUCED_CLOCKING", "auxiliary power not connected", FATAL, _HW),
    62: ("PMU_HALT_ERROR", "internal micro-controller halted", FATAL, _RESET),
    63: ("INFOROM_DRAM_RETIREMENT_EVENT", "a memory row was remapped / page retired; applies after a GPU reset",
         INFO, "check remapped_rows / retired_pages pending: a pending remap needs a GPU reset"),
    64: ("INFOROM_DRAM_RETIREMENT_FAILURE", "row remap / page retirement failed", FATAL, _HW),
    68: ("ROBUST_CHANNEL_NVDEC0_ERROR", "video decoder exception", APP_FAULT, _APP),
    69: ("ROBUST_CHANNEL_GR_CLASS_ERROR", "graphics engine class error", APP_FAULT, _APP),
    74: ("NVLINK_ERROR", "NVLink error (this GPU, the link or the peer)", FATAL, _HW),
    79: ("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU no longer reachable over PCIe", FATAL, _HW),
    92: ("EXCESSIVE_SBE_INTERRUPTS", "high rate of corrected ECC errors", INFO, "watch the ECC counters"),
    93: ("INFOROM_ERASE_LIMIT_EXCEEDED", "InfoROM wear limit exceeded (non-fatal)", INFO, _NONE),
    94: ("ROBUST_CHANNEL_CONTAINED_ERROR", "uncorrectable memory error contained to the affected job",
         APP_FAULT, "restart the job; a pending row remap then makes the GPU unfit"),
    95: ("ROBUST_CHANNEL_UNCONTAINED_ERROR", "uncorrectable memory error that could not be contained", FATAL, _RESET),
    109: ("ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "context-switch timeout", FATAL, _RESET),
    110: ("SEC_FAULT_ERROR", "security fault", FATAL, _RESET),
    119: ("GSP_RPC_TIMEOUT", "driver timed out waiting for the GSP firmware", FATAL, _RESET),
    120: ("GSP_ERROR", "GSP firmware error / task exception", FATAL, _RESET),
    121: ("C2C_ERROR", "chip-to-chip link error", INFO, _NONE),
    136: ("ALI_TRAINING_FAIL", "NVLink link training failed", FATAL, _RESET),
    137: ("NVLINK_PRIV_ERR", "NVLink privilege error", INFO, _NONE),
    140: ("UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC error escaped recovery", FATAL, _HW),
    143: ("GPU_INIT_ERROR", "GPU failed to initialise", FATAL, _HW),
    151: ("ROBUST_CHANNEL_KEY_ROTATION_ERROR", "confidential-computing key rotation error", FATAL, _RESET),
    154: ("GPU_RECOVERY_ACTION_CHANGED", "driver announced the recovery action this GPU now needs", INFO,
          "perform the announced recovery action (impossible on a rental unless it is None)"),
    155: ("NVLINK_SW_DEFINED_ERROR", "NVLink software-defined error", FATAL, _RESET),
    156: ("RESOURCE_RETIREMENT_EVENT", "a resource was retired; a reset applies it", FATAL, _RESET),
    157: ("RESOURCE_RETIREMENT_FAILURE", "resource retirement failed", APP_FAULT, "escalate if it recurs"),
    158: ("GPU_FATAL_TIMEOUT", "fatal GPU timeout", FATAL, _RESET),
    159: ("ROBUST_CHANNEL_CHI_NON_DATA_ERROR", "coherent-interconnect non-data error", APP_FAULT, _APP),
    160: ("CHANNEL_RETIREMENT_EVENT", "channel retirement event", INFO, _NONE),
    161: ("CHANNEL_RETIREMENT_FAILURE", "channel retirement failure", INFO, _NONE),
    162: ("PSHC_REENGAGED", "power-smoothing circuitry re-engaged", INFO, _NONE),
    163: ("PSHC_DISENGAGED", "power-smoothing circuitry disengaged", INFO, _NONE),
    164: ("PSHC_LOW_LIFETIME", "power-smoothing circuitry lifetime low", APP_FAULT, "plan service of the board"),
    165: ("PSHC_ZERO_LIFETIME", "power-smoothing circuitry lifetime exhausted", APP_FAULT, "plan service of the board"),
    166: ("NVLINK_SECURE_CRYPTO_ERR", "NVLink secure crypto error", APP_FAULT, _APP),
    167: ("PCIE_FATAL_TIMEOUT", "PCIe fatal timeout", FATAL, _RESET),
    168: ("REDUCED_GPU_MEMORY_CAPACITY", "GPU memory capacity reduced", FATAL, _HW),
    169: ("SEC2_HALT_ERROR", "SEC2 micro-controller halted", FATAL, _RESET),
    170: ("NVLINK_SECURE_OTHER", "NVLink secure error", APP_FAULT, _APP),
    171: ("UNCORRECTABLE_DRAM_ERROR", "uncorrectable DRAM error", FATAL, _HW),
    172: ("UNCORRECTABLE_SRAM_ERROR", "uncorrectable SRAM error", FATAL, _HW),
}

# NVLink5 (Blackwell) unit errors: the class comes from the message's Fatal / Nonfatal word.
NVLINK5_CODES = {
    144: "NVLINK_SAW_ERROR", 145: "NVLINK_RLW_ERROR", 146: "NVLINK_TLW_ERROR", 147: "NVLINK_TREX_ERROR",
    148: "NVLINK_NVLPW_CTRL_ERROR", 149: "NVLINK_NETIR_ERROR", 150: "NVLINK_MSE_ERROR",
}

# Remaining catalogue entries, classified by NVIDIA's immediate resolution bucket.
BUCKET_CLASS = {"RESTART_APP": APP_FAULT, "IGNORE": INFO, "RESET_GPU": FATAL, "UPDATE_SWFW": FATAL,
                "CONTACT_SUPPORT": FATAL}
OTHER_CODES = {
    11: ("ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "RESTART_APP"), 25: ("ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "RESTART_APP"),
    37: ("ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD", "IGNORE"),
    38: ("ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "IGNORE"),
    39: ("ROBUST_CHANNEL_CE0_ERROR", "RESTART_APP"), 40: ("ROBUST_CHANNEL_CE1_ERROR", "RESTART_APP"),
    41: ("ROBUST_CHANNEL_CE2_ERROR", "RESTART_APP"), 44: ("ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "IGNORE"),
    60: ("ROBUST_CHANNEL_SEC2_ERROR", "RESTART_APP"), 66: ("ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION", "IGNORE"),
    67: ("ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION", "IGNORE"), 70: ("ROBUST_CHANNEL_CE3_ERROR", "RESTART_APP"),
    71: ("ROBUST_CHANNEL_CE4_ERROR", "RESTART_APP"), 72: ("ROBUST_CHANNEL_CE5_ERROR", "RESTART_APP"),
    75: ("ROBUST_CHANNEL_CE6_ERROR", "RESTART_APP"), 76: ("ROBUST_CHANNEL_CE7_ERROR", "RESTART_APP"),
    77: ("ROBUST_CHANNEL_CE8_ERROR", "RESTART_APP"), 78: ("VGPU_START_ERROR", "UPDATE_SWFW"),
    80: ("PBDMA_PUSHBUFFER_CRC_MISMATCH", "RESTART_APP"), 82: ("ROBUST_CHANNEL_NVJPG0_ERROR", "RESTART_APP"),
    83: ("ROBUST_CHANNEL_NVDEC1_ERROR", "RESTART_APP"), 84: ("ROBUST_CHANNEL_NVDEC2_ERROR", "RESTART_APP"),
    85: ("ROBUST_CHANNEL_CE9_ERROR", "RESTART_APP"), 86: ("ROBUST_CHANNEL_OFA0_ERROR", "RESTART_APP"),
    88: ("ROBUST_CHANNEL_NVDEC3_ERROR", "RESTART_APP"), 89: ("ROBUST_CHANNEL_NVDEC4_ERROR", "RESTART_APP"),
    96: ("ROBUST_CHANNEL_NVDEC5_ERROR", "RESTART_APP"), 97: ("ROBUST_CHANNEL_NVDEC6_ERROR", "RESTART_APP"),
    98: ("ROBUST_CHANNEL_NVDEC7_ERROR", "RESTART_APP"), 99: ("ROBUST_CHANNEL_NVJPG1_ERROR", "RESTART_APP"),
    100: ("ROBUST_CHANNEL_NVJPG2_ERROR", "RESTART_APP"), 101: ("ROBUST_CHANNEL_NVJPG3_ERROR", "RESTART_APP"),
    102: ("ROBUST_CHANNEL_NVJPG4_ERROR", "RESTART_APP"), 103: ("ROBUST_CHANNEL_NVJPG5_ERROR", "RESTART_APP"),
    104: ("ROBUST_CHANNEL_NVJPG6_ERROR", "RESTART_APP"), 105: ("ROBUST_CHANNEL_NVJPG7_ERROR", "RESTART_APP"),
    106: ("SMBPBI_TEST_MESSAGE", "IGNORE"), 107: ("SMBPBI_TEST_MESSAGE_SILENT", "IGNORE"),
    126: ("ROBUST_CHANNEL_CE10_ERROR", "RESTART_APP"), 127: ("ROBUST_CHANNEL_CE11_ERROR", "RESTART_APP"),
    128: ("ROBUST_CHANNEL_CE12_ERROR", "RESTART_APP"), 129: ("ROBUST_CHANNEL_CE13_ERROR", "RESTART_APP"),
    130: ("ROBUST_CHANNEL_CE14_ERROR", "RESTART_APP"), 131: ("ROBUST_CHANNEL_CE15_ERROR", "RESTART_APP"),
    132: ("ROBUST_CHANNEL_CE16_ERROR", "RESTART_APP"), 133: ("ROBUST_CHANNEL_CE17_ERROR", "RESTART_APP"),
    134: ("ROBUST_CHANNEL_CE18_ERROR", "RESTART_APP"), 135: ("ROBUST_CHANNEL_CE19_ERROR", "RESTART_APP"),
    139: ("ROBUST_CHANNEL_OFA1_ERROR", "RESTART_APP"), 141: ("ROBUST_CHANNEL_FAST_PATH_ERROR", "IGNORE"),
    142: ("ROBUST_CHANNEL_NVENC3_ERROR", "CONTACT_SUPPORT"), 152: ("ROBUST_CHANNEL_DLA_SMMU_ERROR", "IGNORE"),
    153: ("ROBUST_CHANNEL_DLA_TIMEOUT", "IGNORE"),
}

# Xid 154 recovery actions (NVML enum); only None leaves the GPU usable.
RECOVERY_ACTIONS = {0: "None", 1: "GPU Reset Required", 2: "Node Reboot Required", 3: "Drain P2P",
                    4: "Drain and Reset"}


def lookup(code):
    """Catalogue entry for ``code``: {xid, name, meaning, class, action}. Unknown codes are app_fault (WARN)."""
    if code in KEY_CODES:
        name, meaning, klass, action = KEY_CODES[code]
    elif code in NVLINK5_CODES:
        name, meaning, klass = NVLINK5_CODES[code], "NVLink5 unit error", FATAL
        action = "fatal: " + _RESET + "; non-fatal: watch for repetition"
    elif code in OTHER_CODES:
        name, bucket = OTHER_CODES[code]
        klass = BUCKET_CLASS.get(bucket, APP_FAULT)
        meaning = "catalogue bucket %s" % bucket
        action = {APP_FAULT: _APP, INFO: _NONE}.get(klass, _RESET)
    else:
        name, meaning, klass = "UNKNOWN", "not in the Xid catalogue", APP_FAULT
        action = "look the code up in NVIDIA's Xid catalogue; restart the job and watch for repetition"
    return {"xid": code, "name": name, "meaning": meaning, "class": klass, "action": action}


# ---------------------------------------------------------------------------------------------------------------
# Log parsing
# ---------------------------------------------------------------------------------------------------------------

_XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.\d)?\):\s*(?P<xid>\d+)\s*,?\s*"
    r"(?P<rest>.*)$")
_PID_RE = re.compile(r"^pid=(?:'?<unknown>'?|'?(?P<pid>\d+)'?)\s*,?\s*")
_NAME_RE = re.compile(r"^name=(?P<name>\S+?)\s*(?:,\s*|$)")
_CAUSED_BY_RE = re.compile(r"caused by previous Xid (\d+)", re.I)
_FATAL_WORD_RE = re.compile(r"\b(Fatal|Nonfatal|Non-fatal)\b", re.I)
_RECOVERY_RE = re.compile(r"recovery action changed from (0x[0-9a-fA-F]+)\s*\(([^)]*)\)\s*to\s*(0x[0-9a-fA-F]+)"
                          r"\s*\(([^)]*)\)", re.I)
_FALLEN_RE = re.compile(r"fallen off the bus", re.I)
_BUS_RE = re.compile(r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?")


def _short_pci(text):
    match = _BUS_RE.search(text or "")
    if not match:
        return None
    return "%04x:%s:%s" % (int(match.group(1), 16), match.group(2).lower(), match.group(3).lower())


def _severity(code, message, entry):
    """Class of one event: catalogue class, refined by the NVLink5 Fatal word and the Xid 154 action."""
    if code in NVLINK5_CODES:
        word = _FATAL_WORD_RE.search(message)
        if word and word.group(1).lower() != "fatal":
            return APP_FAULT
        return FATAL
    return entry["class"]


def _recovery_action(message):
    match = _RECOVERY_RE.search(message)
    if not match:
        return None
    label = match.group(4).strip()
    return label or RECOVERY_ACTIONS.get(int(match.group(3), 16), match.group(3))


def parse_xid_line(line):
    """One kernel-log line -> event dict, or None when it carries no Xid."""
    match = _XID_RE.search(line)
    if not match:
        return None
    code = int(match.group("xid"))
    rest = match.group("rest").strip()
    pid = name = None
    pid_match = _PID_RE.match(rest)
    if pid_match:
        pid = int(pid_match.group("pid")) if pid_match.group("pid") else None
        rest = rest[pid_match.end():]
    name_match = _NAME_RE.match(rest)
    if name_match:
        name = None if name_match.group("name") == "<unknown>" else name_match.group("name")
        rest = rest[name_match.end():]
    message = rest.strip()
    entry = lookup(code)
    caused = _CAUSED_BY_RE.search(message)
    event = {
        "xid": code,
        "pci": _short_pci(match.group("pci")),
        "pid": pid,
        "name": name,
        "message": message,
        "severity": _severity(code, message, entry),
        "recovery_action": None,
        "caused_by": int(caused.group(1)) if caused else None,
        "line": line.strip(),
        "mnemonic": entry["name"],
        "meaning": entry["meaning"],
        "action": entry["action"],
        "synthetic": False,
    }
    if code == 154:
        event["recovery_action"] = _recovery_action(message)
        event["severity"] = INFO if event["recovery_action"] in (None, "None") else FATAL
    return event


def _fallen_off_event(lines, index):
    """A 'fallen off the bus' message without an Xid line (possibly spread over 3 lines) -> synthetic Xid 79."""
    window = " ".join(lines[max(0, index - 2):index + 1])
    pci = _short_pci(lines[index]) or _short_pci(window)
    entry = lookup(79)
    return {
        "xid": 79, "pci": pci, "pid": None, "name": None,
        "message": "GPU has fallen off the bus (no Xid line; treated as Xid 79)",
        "severity": FATAL, "recovery_action": None, "caused_by": None,
        "line": " ".join(part.strip() for part in lines[max(0, index - 2):index + 1] if "NVRM" in part),
        "mnemonic": entry["name"], "meaning": entry["meaning"], "action": entry["action"],
        "synthetic": True,
    }


def parse_kernel_log(text):
    """All Xid events in a kernel log (any prefix format), in log order.

    "GPU has fallen off the bus" without an Xid 79 for the same PCI address yields a synthetic Xid 79 event.
    """
    lines = (text or "").splitlines()
    events = []
    for index, line in enumerate(lines):
        event = parse_xid_line(line)
        if event is not None:
            events.append(event)
        elif _FALLEN_RE.search(line):
            events.append(_fallen_off_event(lines, index))
    return _demote_secondary_45(_dedupe_fallen_off(events))


def _demote_secondary_45(events):
    """Xid 45 that echoes another Xid (a 'caused by' link, or another Xid on the same GPU) is INFO, not a fault."""
    others = set(event["pci"] for event in events if event["xid"] != 45)
    for event in events:
        if event["xid"] == 45 and (event["caused_by"] is not None or event["pci"] in others):
            event["severity"] = INFO
    return events


def _dedupe_fallen_off(events):
    """Drop synthetic Xid 79 events when a real Xid 79 (or another synthetic one) names the same PCI address."""
    real_79 = set(event["pci"] for event in events if event["xid"] == 79 and not _is_synthetic(event))
    seen = set()
    result = []
    for event in events:
        if _is_synthetic(event):
            if event["pci"] in real_79 or event["pci"] in seen:
                continue
            seen.add(event["pci"])
        result.append(event)
    return result


def _is_synthetic(event):
    return event["synthetic"]
