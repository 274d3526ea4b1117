# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The teardown gate, as pure functions (controller side).

Nothing is stopped, released, terminated or destroyed unless all of these hold:
  1. the pull was verified against the box's manifest (roster, bytes, sha256, checkpoints load);
  2. the controller holds a PULL_VERIFIED.json for this host and run, for the manifest the box has now, and it
     lists at least one file (a verified pull of nothing never opens the gate);
  3. a person approved this host by name.
Each refusal names the condition that failed.
"""

from __future__ import annotations

import json
import os

from ansible_collections.remote_gpu.trainer.plugins.module_utils.digest import open_regular

VERIFIED_NAME = "PULL_VERIFIED.json"
MANIFEST_NAME = "PULL_MANIFEST.json"
RECEIPT_NAME = "TEARDOWN_RECEIPT.json"
DATA_DIR = "data"

# Words that approve everything at once; the gate wants host names.
BLANKET = frozenset(["all", "yes", "y", "true", "*", "everything", "ok", "1"])


def pull_dir(pull_root, host, run_id):
    """Where the pull of one host and run lives on the controller: <root>/<host>/<run_id>/."""
    for label, value in (("host", host), ("run_id", run_id)):
        if not value or "/" in value or value in (".", ".."):
            raise ValueError("%s %r cannot name a directory; use letters, digits, '.', '_' or '-'" % (label, value))
    return os.path.join(pull_root, host, run_id)


def parse_approvals(value):
    """Host names a person approved, from '-e teardown_approve=h1,h2' or a list.

    Returns (names, refusal message or None). A blanket word such as 'all' or 'yes' is refused.
    """
    if value is None:
        return set(), None
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    names = set(str(item).strip() for item in items if str(item).strip())
    blanket = sorted(name for name in names if name.lower() in BLANKET)
    if blanket:
        return set(), ("approval %r is a blanket word: name every host to stop, e.g. -e teardown_approve=host1,host2"
                       % ",".join(blanket))
    return names, None


def refusal(code, message):
    return {"code": code, "message": message}


def gate_refusals(host, run_id, verified, box_manifest_sha256, approvals, approval_error=None):
    """Every reason to refuse the meter-stop verb for ``host``; an empty list means the gate is open.

    ``verified`` is the parsed PULL_VERIFIED.json for this host and run on the controller, or None.
    ``box_manifest_sha256`` is the sha256 of the manifest the box has now (from pull_manifest).
    """
    refusals = []
    if not box_manifest_sha256:
        refusals.append(refusal("manifest_unknown", "the box's manifest could not be written: run pull_manifest first"))
    if verified is None:
        refusals.append(refusal("no_pull_verified",
                                "no %s for %s run %s on the controller: pull and verify first" % (VERIFIED_NAME, host, run_id)))
    else:
        if verified.get("host") != host or verified.get("run_id") != run_id:
            refusals.append(refusal("pull_verified_mismatch",
                                    "%s is for host %s run %s, not host %s run %s" % (
                                        VERIFIED_NAME, verified.get("host"), verified.get("run_id"), host, run_id)))
        files = verified.get("files")
        if not isinstance(files, list) or not files:
            refusals.append(refusal("pull_verified_empty",
                                    "%s for %s run %s lists no files: a verified pull of nothing proves nothing; "
                                    "pull and verify the run's results" % (VERIFIED_NAME, host, run_id)))
        if verified.get("problems"):
            refusals.append(refusal("pull_not_verified", "the last verification found %d problem(s)" % len(verified["problems"])))
        if box_manifest_sha256 and verified.get("manifest_sha256") != box_manifest_sha256:
            refusals.append(refusal("manifest_changed",
                                    "the box's manifest (sha256 %s) differs from the verified one (%s): the results "
                                    "changed after the pull; pull and verify again" % (
                                        box_manifest_sha256[:12], str(verified.get("manifest_sha256"))[:12])))
    if approval_error:
        refusals.append(refusal("approval_refused", approval_error))
    elif host not in approvals:
        refusals.append(refusal("not_approved",
                                "%s was not approved by name (approved: %s)" % (host, ", ".join(sorted(approvals)) or "none")))
    return refusals


MAX_VERIFIED_BYTES = 256 * 1024 * 1024


def load_verified(path):
    """Parsed PULL_VERIFIED.json, or None when it is absent, unreadable or not a JSON object (which refuses the gate).

    Only a regular file of at most MAX_VERIFIED_BYTES is read: a FIFO, a device or a directory in its place is
    refused without blocking or reading on.
    """
    try:
        with open_regular(path) as handle:
            raw = handle.read(MAX_VERIFIED_BYTES + 1)
        if len(raw) > MAX_VERIFIED_BYTES:
            return None
        data = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def unresolved_placeholders(argv):
    """Arguments of a meter-stop command that still hold a '$VAR' placeholder from the profile."""
    return [arg for arg in argv or [] if "$" in str(arg)]


def stop_path(command, api, environ):
    """How the meter is stopped -> (``api``, ``command`` or ``manual``; why the profile's API verb cannot be used,
    or None).

    The API verb (``api``: provider, id, state, key_env) is used when it names a provider, the instance's id is known
    and the key's environment variable is set on the controller; otherwise the profile's command on the box. A
    profile with an API verb and no command that cannot use it is refused by the gate (``api_unusable``)."""
    api = api if isinstance(api, dict) else {}
    problem = None
    if api.get("provider"):
        key_env = str(api.get("key_env") or "")
        if not (key_env and environ.get(key_env)):
            problem = "the environment variable %s is not set on the controller" % (key_env or "(none named)")
        elif not str(api.get("id") or "").strip():
            problem = "the instance id is unknown (use the inventory plugin, or set it in the inventory)"
        else:
            return "api", None
    return ("command" if command else "manual"), problem
