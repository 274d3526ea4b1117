# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What inode_check does on the box: its arguments, their checks, and the whole storage report. Called by the
modules inode_check and preflight_probe (the judgements are the pure functions of ``inode_check.py``)."""

from __future__ import annotations

import os

from ansible_collections.remote_gpu.trainer.plugins.module_utils import inode_check
from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import worst

MAX_TOP = 1000

# inode_check's options but fail_on (also preflight_probe's storage suboptions)
ARGUMENT_SPEC = dict(
    paths=dict(type="list", elements="path", required=True),
    warn_pct=dict(type="int", default=85),
    fail_pct=dict(type="int", default=95),
    top=dict(type="int", default=5),
    budgets=dict(
        type="list", elements="dict", default=[],
        options=dict(
            path=dict(type="path", required=True),
            label=dict(type="str", default="projected need"),
            bytes=dict(type="int", default=0),
            inodes=dict(type="int", default=0),
        ),
    ),
    hf_cache=dict(type="str", default="~/.cache/huggingface"),
    hf_home=dict(type="str", default=""),
    durable_dir=dict(type="path", default=""),
    storage_tiers=dict(
        type="list", elements="dict", default=[],
        options=dict(
            name=dict(type="str", default=""),
            path=dict(type="path", required=True),
            lost_on=dict(type="list", elements="str", default=[]),
            survives=dict(type="list", elements="str", default=[]),
            shared=dict(type="str"),
            note=dict(type="str"),
        ),
    ),
    hf_cache_warn_gib=dict(type="int", default=10),
)


class InodeCheckError(Exception):
    """Bad arguments or an unreadable filesystem, reported with fail_json."""


def empty_result():
    """The keys of a storage report that could not be made."""
    return dict(status="FAIL", paths=[], findings=[], hf_cache=None, hf_home=None)


def usage_of(path):
    try:
        return inode_check.usage_from_statvfs(path, os.statvfs(path))
    except (FileNotFoundError, NotADirectoryError):
        return inode_check.missing_usage(path)
    except OSError as exc:
        raise InodeCheckError("cannot read filesystem statistics of %s: %s" % (path, exc.strerror))


def validate(params):
    """Raise InodeCheckError for arguments that cannot describe a check."""
    if not 0 < params["warn_pct"] <= params["fail_pct"] <= 100:
        raise InodeCheckError("warn_pct (%d) and fail_pct (%d) must satisfy 0 < warn_pct <= fail_pct <= 100"
                              % (params["warn_pct"], params["fail_pct"]))
    if not 0 <= params["top"] <= MAX_TOP:
        raise InodeCheckError("top must be from 0 to %d (the number of largest inode consumers to list), got %d"
                              % (MAX_TOP, params["top"]))
    if not params["paths"]:
        raise InodeCheckError("paths is empty: give the storage tiers to check, for example the data disk")
    for number, path in enumerate(params["paths"], 1):
        if not path or not path.strip():
            raise InodeCheckError("paths entry %d is empty: give the path of a storage tier, or remove the entry "
                                  "(an unset profile variable?)" % number)
    for number, budget in enumerate(params["budgets"], 1):
        if not budget["path"] or not budget["path"].strip():
            raise InodeCheckError("budgets entry %d (%s) has an empty path: give a path on the filesystem the need "
                                  "applies to" % (number, budget["label"]))
        for key in ("bytes", "inodes"):
            if budget[key] < 0:
                raise InodeCheckError("budgets entry %d (%s): %s must be 0 or more, got %d" % (
                    number, budget["label"], key, budget[key]))
    if params["hf_cache_warn_gib"] < 0:
        raise InodeCheckError("hf_cache_warn_gib must be 0 or more, got %d" % params["hf_cache_warn_gib"])


def run(params):
    """Gather the report for the given parameters; raises InodeCheckError."""
    validate(params)
    reports, findings = [], []
    for path in params["paths"]:
        usage = usage_of(path)
        usage["top"], usage["top_errors"] = [], []
        if usage["exists"] and params["top"] and os.path.isdir(path):
            usage["top"], usage["top_errors"] = inode_check.top_inode_consumers(path, params["top"])
        # a full disk names its largest consumers (the HF cache, pip's cache, checkpoints, per-sample files)
        findings.extend(inode_check.with_hogs(inode_check.threshold_findings(usage, params["warn_pct"],
                                                                             params["fail_pct"])))
        reports.append(usage)
    for budget in params["budgets"]:
        usage = usage_of(budget["path"])
        if not usage["exists"]:
            findings.extend(inode_check.threshold_findings(usage, params["warn_pct"], params["fail_pct"]))
            continue
        findings.extend(inode_check.budget_findings(usage, budget["label"], budget["bytes"], budget["inodes"]))
    findings.extend(inode_check.separation_findings(params["durable_dir"], params["storage_tiers"]))
    hf_cache, hf_home = hf_reports(params, findings)
    return {"status": worst(findings), "paths": reports, "findings": findings, "hf_cache": hf_cache,
            "hf_home": hf_home}


def hf_reports(params, findings):
    """The reports of ~/.cache/huggingface and of the profile's HF_HOME (the same one when they are one directory)."""
    home = os.path.expanduser("~")
    warn_bytes = params["hf_cache_warn_gib"] * 1024 ** 3
    hf_cache = hf_home = None
    if params["hf_cache"]:
        hf_cache = inode_check.hf_cache_report(os.path.expanduser(params["hf_cache"]), home)
        findings.extend(inode_check.hf_cache_findings(hf_cache, warn_bytes))
    if params["hf_home"]:
        path = os.path.expanduser(params["hf_home"])
        if hf_cache and os.path.realpath(path) == os.path.realpath(hf_cache["path"]):
            return hf_cache, hf_cache
        hf_home = inode_check.hf_cache_report(path, home)
        findings.extend(inode_check.hf_cache_findings(hf_home, warn_bytes, label="HF_HOME"))
    return hf_cache, hf_home
