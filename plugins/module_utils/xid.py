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

# How a key code is handled: its class and the action we advise. Most codes share one of the first four.
_HANDLING = {
    "app": (APP_FAULT, _APP),
    "reset": (FATAL, _RESET),
    "hw": (FATAL, _HW),
    "none": (INFO, _NONE),
    # 45 alone means the driver tore down a process's channels (killed, crashed, or stuck): an application fault
    # worth a warning. Next to another Xid, or with "caused by previous Xid N", it is only that Xid's echo and
    # is demoted to INFO (the catalogue's "Not Solo: IGNORE (follow other Xid)"); see _demote_secondary_45.
    "killed": (APP_FAULT,
               "check the job on this GPU (it was killed or crashed); if another Xid names the cause, follow it"),
    "remap": (INFO, "check remapped_rows / retired_pages pending: a pending remap needs a GPU reset"),
    "ecc": (INFO, "watch the ECC counters"),
    "retry": (APP_FAULT, "restart the job; a pending row remap then makes the GPU unfit"),
    "action": (INFO, "perform the announced recovery action (impossible on a rental unless it is None)"),
    "recur": (APP_FAULT, "escalate if it recurs"),
    "board": (APP_FAULT, "plan service of the board"),
}

# Key codes with our wording, one a line: code, handling (a key of _HANDLING), mnemonic, meaning.
_KEY_TABLE = """
8   app    ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT    a channel stopped making progress (timeout)
13  app    ROBUST_CHANNEL_GR_EXCEPTION               graphics/SM exception in a running kernel
31  app    ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT     GPU MMU page fault (invalid GPU virtual address)
32  app    ROBUST_CHANNEL_PBDMA_ERROR                corrupted push-buffer stream (check PCIe if frequent)
43  app    ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR   a user context faulted and was torn down
45  killed ROBUST_CHANNEL_PREEMPTIVE_REMOVAL         driver removed channels (process killed or an earlier error)
46  reset  ROBUST_CHANNEL_GPU_TIMEOUT_ERROR          GPU stopped processing
48  hw     ROBUST_CHANNEL_GPU_ECC_DBE                uncorrectable (double-bit) ECC error in GPU memory
54  hw     SILENT_RUNNING_PWR_REDUCED_CLOCKING       auxiliary power not connected
62  reset  PMU_HALT_ERROR                            internal micro-controller halted
63  remap  INFOROM_DRAM_RETIREMENT_EVENT             a memory row was remapped / page retired; applies after a GPU reset
64  hw     INFOROM_DRAM_RETIREMENT_FAILURE           row remap / page retirement failed
68  app    ROBUST_CHANNEL_NVDEC0_ERROR               video decoder exception
69  app    ROBUST_CHANNEL_GR_CLASS_ERROR             graphics engine class error
74  hw     NVLINK_ERROR                              NVLink error (this GPU, the link or the peer)
79  hw     ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS GPU no longer reachable over PCIe
92  ecc    EXCESSIVE_SBE_INTERRUPTS                  high rate of corrected ECC errors
93  none   INFOROM_ERASE_LIMIT_EXCEEDED              InfoROM wear limit exceeded (non-fatal)
94  retry  ROBUST_CHANNEL_CONTAINED_ERROR            uncorrectable memory error contained to the affected job
95  reset  ROBUST_CHANNEL_UNCONTAINED_ERROR          uncorrectable memory error that could not be contained
109 reset  ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR        context-switch timeout
110 reset  SEC_FAULT_ERROR                           security fault
119 reset  GSP_RPC_TIMEOUT                           driver timed out waiting for the GSP firmware
120 reset  GSP_ERROR                                 GSP firmware error / task exception
121 none   C2C_ERROR                                 chip-to-chip link error
136 reset  ALI_TRAINING_FAIL                         NVLink link training failed
137 none   NVLINK_PRIV_ERR                           NVLink privilege error
140 hw     UNRECOVERABLE_ECC_ERROR_ESCAPE            ECC error escaped recovery
143 hw     GPU_INIT_ERROR                            GPU failed to initialise
151 reset  ROBUST_CHANNEL_KEY_ROTATION_ERROR         confidential-computing key rotation error
154 action GPU_RECOVERY_ACTION_CHANGED               driver announced the recovery action this GPU now needs
155 reset  NVLINK_SW_DEFINED_ERROR                   NVLink software-defined error
156 reset  RESOURCE_RETIREMENT_EVENT                 a resource was retired; a reset applies it
157 recur  RESOURCE_RETIREMENT_FAILURE               resource retirement failed
158 reset  GPU_FATAL_TIMEOUT                         fatal GPU timeout
159 app    ROBUST_CHANNEL_CHI_NON_DATA_ERROR         coherent-interconnect non-data error
160 none   CHANNEL_RETIREMENT_EVENT                  channel retirement event
161 none   CHANNEL_RETIREMENT_FAILURE                channel retirement failure
162 none   PSHC_REENGAGED                            power-smoothing circuitry re-engaged
163 none   PSHC_DISENGAGED                           power-smoothing circuitry disengaged
164 board  PSHC_LOW_LIFETIME                         power-smoothing circuitry lifetime low
165 board  PSHC_ZERO_LIFETIME                        power-smoothing circuitry lifetime exhausted
166 app    NVLINK_SECURE_CRYPTO_ERR                  NVLink secure crypto error
167 reset  PCIE_FATAL_TIMEOUT                        PCIe fatal timeout
168 hw     REDUCED_GPU_MEMORY_CAPACITY               GPU memory capacity reduced
169 reset  SEC2_HALT_ERROR                           SEC2 micro-controller halted
170 app    NVLINK_SECURE_OTHER                       NVLink secure error
171 hw     UNCORRECTABLE_DRAM_ERROR                  uncorrectable DRAM error
172 hw     UNCORRECTABLE_SRAM_ERROR                  uncorrectable SRAM error
"""


def _key_codes(table):
    """code -> (mnemonic, meaning, class, action) from the lines of _KEY_TABLE."""
    codes = {}
    for line in table.strip().splitlines():
        code, handling, name, meaning = line.split(None, 3)
        codes[int(code)] = (name, meaning) + _HANDLING[handling]
    return codes


KEY_CODES = _key_codes(_KEY_TABLE)

# NVLink5 (Blackwell) unit errors: the class comes from the message's Fatal / Nonfatal word.
NVLINK5_CODES = {
    144: "NVLINK_SAW_ERROR", 145: "NVLINK_RLW_ERROR", 146: "NVLINK_TLW_ERROR", 147: "NVLINK_TREX_ERROR",
    148: "NVLINK_NVLPW_CTRL_ERROR", 149: "NVLINK_NETIR_ERROR", 150: "NVLINK_MSE_ERROR",
}

# Remaining catalogue entries, classified by NVIDIA's immediate resolution bucket.
BUCKET_CLASS = {"RESTART_APP": APP_FAULT, "IGNORE": INFO, "RESET_GPU": FATAL, "UPDATE_SWFW": FATAL,
                "CONTACT_SUPPORT": FATAL}
# One a line: code, bucket, mnemonic.
_OTHER_TABLE = """
11  RESTART_APP     ROBUST_CHANNEL_GR_ERROR_MISSING_HW
25  RESTART_APP     ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY
37  IGNORE          ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD
38  IGNORE          ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT
39  RESTART_APP     ROBUST_CHANNEL_CE0_ERROR
40  RESTART_APP     ROBUST_CHANNEL_CE1_ERROR
41  RESTART_APP     ROBUST_CHANNEL_CE2_ERROR
44  IGNORE          ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW
60  RESTART_APP     ROBUST_CHANNEL_SEC2_ERROR
66  IGNORE          ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION
67  IGNORE          ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION
70  RESTART_APP     ROBUST_CHANNEL_CE3_ERROR
71  RESTART_APP     ROBUST_CHANNEL_CE4_ERROR
72  RESTART_APP     ROBUST_CHANNEL_CE5_ERROR
75  RESTART_APP     ROBUST_CHANNEL_CE6_ERROR
76  RESTART_APP     ROBUST_CHANNEL_CE7_ERROR
77  RESTART_APP     ROBUST_CHANNEL_CE8_ERROR
78  UPDATE_SWFW     VGPU_START_ERROR
80  RESTART_APP     PBDMA_PUSHBUFFER_CRC_MISMATCH
82  RESTART_APP     ROBUST_CHANNEL_NVJPG0_ERROR
83  RESTART_APP     ROBUST_CHANNEL_NVDEC1_ERROR
84  RESTART_APP     ROBUST_CHANNEL_NVDEC2_ERROR
85  RESTART_APP     ROBUST_CHANNEL_CE9_ERROR
86  RESTART_APP     ROBUST_CHANNEL_OFA0_ERROR
88  RESTART_APP     ROBUST_CHANNEL_NVDEC3_ERROR
89  RESTART_APP     ROBUST_CHANNEL_NVDEC4_ERROR
96  RESTART_APP     ROBUST_CHANNEL_NVDEC5_ERROR
97  RESTART_APP     ROBUST_CHANNEL_NVDEC6_ERROR
98  RESTART_APP     ROBUST_CHANNEL_NVDEC7_ERROR
99  RESTART_APP     ROBUST_CHANNEL_NVJPG1_ERROR
100 RESTART_APP     ROBUST_CHANNEL_NVJPG2_ERROR
101 RESTART_APP     ROBUST_CHANNEL_NVJPG3_ERROR
102 RESTART_APP     ROBUST_CHANNEL_NVJPG4_ERROR
103 RESTART_APP     ROBUST_CHANNEL_NVJPG5_ERROR
104 RESTART_APP     ROBUST_CHANNEL_NVJPG6_ERROR
105 RESTART_APP     ROBUST_CHANNEL_NVJPG7_ERROR
106 IGNORE          SMBPBI_TEST_MESSAGE
107 IGNORE          SMBPBI_TEST_MESSAGE_SILENT
126 RESTART_APP     ROBUST_CHANNEL_CE10_ERROR
127 RESTART_APP     ROBUST_CHANNEL_CE11_ERROR
128 RESTART_APP     ROBUST_CHANNEL_CE12_ERROR
129 RESTART_APP     ROBUST_CHANNEL_CE13_ERROR
130 RESTART_APP     ROBUST_CHANNEL_CE14_ERROR
131 RESTART_APP     ROBUST_CHANNEL_CE15_ERROR
132 RESTART_APP     ROBUST_CHANNEL_CE16_ERROR
133 RESTART_APP     ROBUST_CHANNEL_CE17_ERROR
134 RESTART_APP     ROBUST_CHANNEL_CE18_ERROR
135 RESTART_APP     ROBUST_CHANNEL_CE19_ERROR
139 RESTART_APP     ROBUST_CHANNEL_OFA1_ERROR
141 IGNORE          ROBUST_CHANNEL_FAST_PATH_ERROR
142 CONTACT_SUPPORT ROBUST_CHANNEL_NVENC3_ERROR
152 IGNORE          ROBUST_CHANNEL_DLA_SMMU_ERROR
153 IGNORE          ROBUST_CHANNEL_DLA_TIMEOUT
"""
OTHER_CODES = dict((int(code), (name, bucket)) for code, bucket, name in
                   (line.split() for line in _OTHER_TABLE.strip().splitlines()))

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
