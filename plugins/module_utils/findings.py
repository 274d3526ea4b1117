# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Findings shared by every probe: a level, a stable code, the evidence and an action."""

from __future__ import annotations

LEVELS = ("PASS", "INFO", "WARN", "FAIL")
_RANK = {name: rank for rank, name in enumerate(LEVELS)}


def finding(level, code, message, action, **extra):
    """Build one finding. ``code`` is stable snake_case; tests match on it, never on ``message``."""
    if level not in _RANK or level == "PASS":
        raise ValueError("finding level must be INFO, WARN or FAIL, not %r" % (level,))
    result = {"level": level, "code": code, "message": message, "action": action}
    result.update(extra)
    return result


def worst(findings):
    """The verdict for a list of findings: PASS, WARN or FAIL (INFO counts as PASS)."""
    rank = max((_RANK[f["level"]] for f in findings), default=0)
    return "PASS" if rank <= _RANK["INFO"] else LEVELS[rank]


def at_or_above(status, threshold):
    """True when ``status`` reaches ``threshold`` (FAIL, WARN, or never)."""
    if threshold == "never":
        return False
    return _RANK[status] >= _RANK[threshold]
