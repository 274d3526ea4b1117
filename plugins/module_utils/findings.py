# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one vocabulary of findings: a level, a stable code, the evidence and an action.

Every probe (modules, GPU checks, the fleet reports) ranks levels with ``rank`` and picks its verdict with
``worst``: the ranking is defined here and nowhere else.
"""

from __future__ import annotations

LEVELS = ("PASS", "INFO", "WARN", "FAIL")
# INFO ranks with PASS: it informs, it never changes a verdict.
_RANK = {"PASS": 0, "INFO": 0, "WARN": 1, "FAIL": 2}
FAIL_ON_CHOICES = ("FAIL", "WARN", "never")
# the fail_on option of every probe module (its documentation: the doc fragment remote_gpu.trainer.probe)
FAIL_ON_OPTION = dict(type="str", choices=list(FAIL_ON_CHOICES), default="FAIL")


def rank(level):
    """0 for PASS and INFO (and anything unknown), 1 for WARN, 2 for FAIL."""
    return _RANK.get(level, 0)


def finding(level, code, message, action, **extra):
    """Build one finding. ``code`` is stable snake_case; tests match on it, never on ``message``."""
    if level not in _RANK or level == "PASS":
        raise ValueError("finding level must be INFO, WARN or FAIL, not %r" % (level,))
    result = {"level": level, "code": code, "message": message, "action": action}
    result.update(extra)
    return result


def verdict(levels):
    """The verdict for an iterable of levels: PASS, WARN or FAIL (INFO counts as PASS)."""
    return ("PASS", "WARN", "FAIL")[max((rank(level) for level in levels), default=0)]


def worst(findings):
    """The verdict for a list of findings: PASS, WARN or FAIL (INFO counts as PASS)."""
    return verdict(f.get("level") for f in findings)


def worst_finding(findings):
    """The finding with the highest level (the first one on ties), or None when there is none."""
    best = None
    for item in findings:
        if best is None or rank(item.get("level")) > rank(best.get("level")):
            best = item
    return best


def sort_findings(findings, *keys):
    """Findings worst first; ``keys`` are further sort keys (functions of a finding) for ties."""
    return sorted(findings, key=lambda f: (-rank(f.get("level")),) + tuple(key(f) for key in keys))


def at_or_above(status, threshold):
    """True when ``status`` reaches ``threshold`` (FAIL, WARN, or never)."""
    if threshold == "never":
        return False
    return rank(status) >= rank(threshold)


def finding_message(item):
    """``code: message``, the one-line form of a finding used in failure messages."""
    return "%s: %s" % (item["code"], item["message"])


def exit_by_fail_on(module, result, fail_on, message=finding_message, findings=None):
    """End a module: fail when ``result['status']`` reaches ``fail_on`` (with the worst of ``findings``, by default
    ``result['findings']``, as the message), else exit. ``result`` holds the same keys either way, and ``changed``
    defaults to False."""
    result.setdefault("changed", False)
    if findings is None:
        findings = result.get("findings") or []
    if at_or_above(result["status"], fail_on):
        top = worst_finding(findings)
        module.fail_json(msg=message(top) if top else "status %s" % result["status"], **result)
    module.exit_json(**result)


def run_check(module, check, error_type, empty_result, message=finding_message):
    """The end every check module shares: ``check(module.params)`` -> its result, ended by ``fail_on``; the check's
    one error type -> a failure with that message and the check's empty result (the same keys)."""
    try:
        result = check(module.params)
    except error_type as exc:
        module.fail_json(msg=str(exc), changed=False, **empty_result())
    exit_by_fail_on(module, result, module.params["fail_on"], message)
