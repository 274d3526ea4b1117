# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""nvidia-smi's failure outputs (no driver, library mismatch, lost GPU, ...) -> kind, meaning and action
(``classify_error``). Its own small file, so that a module that only runs ``--query-gpu`` (job_status)
does not carry the ``-q``/``-q -x`` parsers. Standard library only; runs on the target's Python 3.8+.
"""

from __future__ import annotations

import re

from ansible_collections.remote_gpu.trainer.plugins.module_utils.nvidia_smi_gpu import short_pci

_RENT_ANOTHER = "stop the box and rent a different one"
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
     "the driver is loaded but sees no usable GPU", _RENT_ANOTHER),
    ("no_devices", re.compile(r"No devices were found", re.I), "nvidia-smi found no GPU", _RENT_ANOTHER),
    ("gpu_lost", re.compile(r"GPU is lost", re.I), "a GPU fell off the bus (GPU is lost)", _RENT_ANOTHER),
    ("gpu_unknown_error", re.compile(r"Unable to determine the device handle for GPU", re.I),
     "nvidia-smi cannot open a GPU", _RENT_ANOTHER),
    ("inforom_corrupted", re.compile(r"infoROM is corrupted", re.I),
     "a GPU's infoROM is corrupted (ECC and retirement records unreliable)", _RENT_ANOTHER),
    ("nvml_init_failed", re.compile(r"Failed to initialize NVML", re.I), "NVML failed to initialise", _RENT_ANOTHER),
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
