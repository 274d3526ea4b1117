# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What gpu_health reads of nvidia-smi: the full state and the sample table.

* ``parse_full``: ``nvidia-smi -q -x`` XML (``nvidia_smi_xml.parse_xml``) or ``-q`` text
  (``nvidia_smi_text.parse_text``), whichever the output is, -> one normalised dict per GPU
  (keys: ``nvidia_smi_gpu.GPU_KEYS``).
* ``SAMPLE_FIELDS``: the ``--query-gpu`` table whose rows ``gpu_query.parse_rows`` reads.
* ``classify_error`` (error outputs: no driver, library mismatch, lost GPU, ... -> kind, meaning and action)
  is in ``nvidia_smi_errors``, small, for the modules that only run ``--query-gpu``.

Standard library only; runs on the target's Python 3.8+.
"""

from __future__ import annotations

from ansible_collections.remote_gpu.trainer.plugins.module_utils.gpu_query import INDEX, to_int
from ansible_collections.remote_gpu.trainer.plugins.module_utils.nvidia_smi_gpu import (
    POWER_DRAW, SM_CLOCK, SM_CLOCK_MAX, THROTTLE_REASONS)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.nvidia_smi_text import parse_text
from ansible_collections.remote_gpu.trainer.plugins.module_utils.nvidia_smi_xml import parse_xml


# ---------------------------------------------------------------------------------------------------------------
# Full state (`nvidia-smi -q -x` or `nvidia-smi -q`)
# ---------------------------------------------------------------------------------------------------------------

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
    INDEX, SM_CLOCK, SM_CLOCK_MAX,
    ("temperature.gpu", "temperature_c", to_int),
    ("utilization.gpu", "utilization_gpu_pct", to_int),
    POWER_DRAW,
    ("pcie.link.gen.current", "pcie_gen_current", to_int),
    ("pcie.link.gen.max", "pcie_gen_max", to_int),
    ("pcie.link.width.current", "pcie_width_current", to_int),
    ("pcie.link.width.max", "pcie_width_max", to_int),
    THROTTLE_REASONS,
)
