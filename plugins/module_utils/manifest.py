# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Manifests of result roots (roster, bytes, sha256) and their comparison with a copy.

Standard library only; runs on the target (Python 3.8+) and on the controller. Nothing here writes files.
Whether the checkpoints of a copy load is checkpoint.py's (``verify_directory`` runs both); the sha256 of a
file is digest.py's.

Problems are dicts ``{code, path, message}``; codes are ``missing``, ``extra``, ``size_mismatch``,
``sha256_mismatch``, ``not_loadable``.
"""

from __future__ import annotations

import json
import os
import posixpath

from ansible_collections.remote_gpu.trainer.plugins.module_utils.checkpoint import checkpoint_problems
from ansible_collections.remote_gpu.trainer.plugins.module_utils.digest import sha256_file

MANIFEST_VERSION = 1


class ManifestError(Exception):
    """Bad roster, missing file or malformed manifest; the message says which."""


# --------------------------------------------------------------------------- roster


def normalize_rel(entry):
    """A roster entry as a clean relative POSIX path; ManifestError when it leaves the root."""
    text = entry.strip() if isinstance(entry, str) else entry
    if not isinstance(text, str) or not text:
        raise ManifestError("roster entry %r is not a non-empty string" % (entry,))
    if text.startswith("/"):
        raise ManifestError("roster entry %r is absolute; list paths relative to the root" % entry)
    clean = posixpath.normpath(text)
    if clean == "." or clean == ".." or clean.startswith("../"):
        raise ManifestError("roster entry %r points outside the root" % entry)
    return clean


def parse_roster(text):
    """Roster file text: one relative path per line; blank lines and ``#`` comment lines are ignored."""
    entries = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        entries.append(stripped)
    return entries


def read_roster_file(path):
    """The entries of a roster file (UTF-8); ManifestError when it cannot be read."""
    try:
        with open(path, "r", encoding="utf-8") as handle:
            return parse_roster(handle.read())
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError("cannot read roster file %s: %s" % (path, exc)) from exc


def normalize_roster(entries):
    """Sorted, de-duplicated clean relative paths; ManifestError on a bad or empty roster."""
    if not entries:
        raise ManifestError("the roster is empty; list the files that must be pulled")
    return sorted(set(normalize_rel(entry) for entry in entries))


# --------------------------------------------------------------------------- manifests


def build_manifest(root, roster):
    """``{version, root, files: [{path, bytes, sha256}], total_bytes}`` for ``roster`` under ``root``.

    Every roster entry must be a regular file (a symbolic link to one is hashed as its target);
    a missing entry raises ManifestError naming the file.
    """
    paths = normalize_roster(roster)
    files = []
    for rel in paths:
        full = os.path.join(root, *rel.split("/"))
        if not os.path.exists(full):
            raise ManifestError("roster file %s is missing under %s" % (rel, root))
        if not os.path.isfile(full):
            raise ManifestError("roster entry %s under %s is not a regular file" % (rel, root))
        try:
            digest, size = sha256_file(full)
        except OSError as exc:
            raise ManifestError("cannot read %s: %s" % (full, exc)) from exc
        files.append({"path": rel, "bytes": size, "sha256": digest})
    return {
        "version": MANIFEST_VERSION,
        "root": root,
        "files": files,
        "total_bytes": sum(item["bytes"] for item in files),
    }


def manifest_bytes(manifest):
    """The canonical serialisation (sorted keys, 2-space indent, trailing newline), UTF-8."""
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("utf-8")


def validate_manifest(data):
    """Check the shape of a loaded manifest; returns it, or raises ManifestError saying what is wrong."""
    if not isinstance(data, dict):
        raise ManifestError("the manifest is not a JSON object")
    if data.get("version") != MANIFEST_VERSION:
        raise ManifestError("unsupported manifest version %r (expected %d)"
                            % (data.get("version"), MANIFEST_VERSION))
    files = data.get("files")
    if not isinstance(files, list):
        raise ManifestError("the manifest has no 'files' list")
    seen = set()
    for item in files:
        if not isinstance(item, dict):
            raise ManifestError("a manifest entry is not an object: %r" % (item,))
        rel = normalize_rel(item.get("path"))
        if rel != item.get("path") or rel in seen:
            raise ManifestError("manifest path %r is not clean or is listed twice" % (item.get("path"),))
        seen.add(rel)
        size = item.get("bytes")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ManifestError("manifest entry %s has no valid 'bytes'" % rel)
        digest = item.get("sha256")
        if not isinstance(digest, str) or len(digest) != 64:
            raise ManifestError("manifest entry %s has no valid 'sha256'" % rel)
    return data


def load_manifest(text):
    """Parse and validate manifest JSON text (str or bytes)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ManifestError("the manifest is not valid JSON: %s" % exc) from exc
    return validate_manifest(data)


def list_files(directory):
    """Relative POSIX paths of every regular file (or link to one) under ``directory``, sorted."""
    found = []
    for current, _dirs, names in os.walk(directory):
        rel_dir = os.path.relpath(current, directory)
        for name in names:
            if os.path.isfile(os.path.join(current, name)):
                rel = name if rel_dir == "." else posixpath.join(rel_dir.replace(os.sep, "/"), name)
                found.append(rel)
    return sorted(found)


def _problem(code, path, message):
    return {"code": code, "path": path, "message": message}


def compare_manifest(manifest, directory, allow_extra=False):
    """Problems of ``directory`` against ``manifest``: exact roster, then bytes, then sha256.

    ``extra`` (a file not in the manifest) is reported unless ``allow_extra``. The sha256 is only
    computed when the size matches.
    """
    problems = []
    expected = {}
    for item in manifest["files"]:
        expected[item["path"]] = item
    for rel in sorted(expected):
        item = expected[rel]
        full = os.path.join(directory, *rel.split("/"))
        if not os.path.isfile(full):
            problems.append(_problem("missing", rel, "%s is missing from %s" % (rel, directory)))
            continue
        size = os.path.getsize(full)
        if size != item["bytes"]:
            problems.append(_problem("size_mismatch", rel, "%s has %d bytes, the manifest says %d"
                                     % (rel, size, item["bytes"])))
            continue
        try:
            digest, _size = sha256_file(full)
        except OSError as exc:
            problems.append(_problem("missing", rel, "%s cannot be read: %s" % (rel, exc)))
            continue
        if digest != item["sha256"]:
            problems.append(_problem("sha256_mismatch", rel, "%s has sha256 %s, the manifest says %s"
                                     % (rel, digest, item["sha256"])))
    if not allow_extra:
        for rel in list_files(directory):
            if rel not in expected:
                problems.append(_problem("extra", rel, "%s is in %s but not in the manifest"
                                         % (rel, directory)))
    return problems


def verify_directory(manifest, directory, allow_extra=False, check_checkpoints=True, use_torch=True):
    """Everything the teardown gate needs: roster, bytes, sha256, then loadability of checkpoints.

    Loadability is only checked for files that passed the byte and hash comparison.
    """
    problems = compare_manifest(manifest, directory, allow_extra=allow_extra)
    if check_checkpoints:
        failed = set(p["path"] for p in problems)
        good = [item["path"] for item in manifest["files"] if item["path"] not in failed]
        problems.extend(checkpoint_problems(directory, good, use_torch=use_torch))
    return problems
