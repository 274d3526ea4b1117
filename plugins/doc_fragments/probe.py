# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """What every read-only probe that ends by its findings shares (extended after remote_gpu.trainer.attributes.posix):
    full check mode, and the O(fail_on) option (module_utils/findings.py FAIL_ON_OPTION, run_check)."""

    DOCUMENTATION = r"""
options:
  fail_on:
    description: The level at which the task fails. V(never) only reports.
    type: str
    choices: [FAIL, WARN, never]
    default: FAIL
attributes:
  check_mode:
    support: full
    details: The module only reads, so check mode runs it as usual.
"""
