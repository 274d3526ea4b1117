# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """The thresholds on the bytes and inodes used of O(paths) (module_utils/inode_check.py threshold_findings)."""

    DOCUMENTATION = r"""
options:
  warn_pct:
    description: Percent used (bytes or inodes) of O(paths) at which a C(WARN) finding is raised.
    type: int
    default: 85
  fail_pct:
    description:
      - Percent used (bytes or inodes) of O(paths) at which a C(FAIL) finding is raised (C(bytes_high) at FAIL level,
        C(inodes_exhausted)).
    type: int
    default: 95
"""
