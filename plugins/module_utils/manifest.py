# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Manifests of result roots (roster, bytes, sha256) and their comparison with a copy.

Standard library only; runs on the target (Python 3.8+) and on the controller. Only ``materialize_links``
writes (on the controller, inside the pull). Whether the checkpoints of a copy load is checkpoint.py's
(``verify_directory`` runs both); the sha256 of a file is digest.py's.

Symbolic links: a roster entry may be (or pass through) a link whose target, followed to the end, is a regular
file inside the root (``best.pt -> epoch_10.pt``); the manifest records it under its roster path with the bytes
and sha256 of that file. A link that leaves the root, dangles or loops, and anything that is not a regular file
(FIFO, device, socket, directory), is refused. On the controller ``materialize_links`` turns such an entry of the
pull back into a real file (a hard link to, or a copy of, its target inside the pull), and the comparison accepts
only real files: a roster path that is still a link is the problem ``symlink``.

Problems are dicts ``{code, path, message}``; codes are ``missing``, ``extra``, ``symlink``, ``not_a_file``,
``size_mismatch``, ``sha256_mismatch``, ``not_loadable``.
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
import stat

from ansible_collections.remote_gpu.trainer.plugins.module_utils.checkpoint import checkpoint_problems
from ansible_collections.remote_gpu.trainer.plugins.module_utils.digest import file_kind, open_regular, sha256_file

MANIFEST_VERSION = 1


class ManifestError(Exception):
    """Bad roster, missing file or malformed manifest; the message says which."""


# --------------------------------------------------------------------------- roster


def normalize_rel(entry):
    """A roster entry as a clean relative POSIX path; ManifestError when it leaves the root.

    Refused: a non-string or empty entry, a control character (NUL, newline, ...), an absolute path and any
    ``..`` component (even one that would stay inside, such as ``a/../b``: list the path without it).
    """
    text = entry.strip() if isinstance(entry, str) else entry
    if not isinstance(text, str) or not text:
        raise ManifestError("roster entry %r is not a non-empty string" % (entry,))
    if any(ord(char) < 32 or ord(char) == 127 for char in text):
        raise ManifestError("roster entry %r holds a control character (NUL, newline, ...); list plain relative "
                            "paths" % entry)
    if text.startswith("/"):
        raise ManifestError("roster entry %r is absolute; list paths relative to the root" % entry)
    if ".." in text.split("/"):
        raise ManifestError("roster entry %r has a '..' component, which points outside the root; list the path "
                            "relative to the root without '..'" % entry)
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


MAX_ROSTER_FILE_BYTES = 16 * 1024 * 1024


def read_roster_file(path):
    """The entries of a roster file (UTF-8, a regular file of at most 16 MiB); ManifestError otherwise."""
    try:
        with open_regular(path) as handle:
            raw = handle.read(MAX_ROSTER_FILE_BYTES + 1)
        if len(raw) > MAX_ROSTER_FILE_BYTES:
            raise ManifestError("roster file %s is larger than %d bytes; list only the files that must be pulled"
                                % (path, MAX_ROSTER_FILE_BYTES))
        return parse_roster(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ManifestError("cannot read roster file %s: %s" % (path, exc)) from exc


def normalize_roster(entries):
    """Sorted, de-duplicated clean relative paths; ManifestError on a bad or empty roster."""
    if not entries:
        raise ManifestError("the roster is empty; list the files that must be pulled")
    return sorted(set(normalize_rel(entry) for entry in entries))


# --------------------------------------------------------------------------- manifests


def inside(path, root):
    """Whether ``path`` is ``root`` or lies under it (both taken as given: resolve them first)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def link_in_path(directory, rel):
    """The first component of ``rel`` under ``directory`` that is a symbolic link (as a relative path), or None."""
    current = directory
    parts = rel.split("/")
    for index, part in enumerate(parts):
        current = os.path.join(current, part)
        try:
            if stat.S_ISLNK(os.lstat(current).st_mode):
                return "/".join(parts[:index + 1])
        except OSError:
            return None
    return None


def resolve_entry(root, rel):
    """The real path of roster entry ``rel`` under ``root``: a regular file inside the root, links followed.

    ManifestError when the entry is missing, is a link (or passes through one) that leaves the root, dangles or
    loops, or is not a regular file (a FIFO, a device, a socket or a directory).
    """
    full = os.path.join(root, *rel.split("/"))
    real_root = os.path.realpath(root)
    real = os.path.realpath(full)
    link = link_in_path(root, rel)
    if not os.path.lexists(full) and link is None:
        raise ManifestError("roster file %s is missing under %s" % (rel, root))
    if link is not None and not inside(real, real_root):
        raise ManifestError("roster entry %s is a symbolic link (%s -> %s) that leads outside the root, to %s; "
                            "copy the file into the root or take it off the roster"
                            % (rel, link, _readlink(os.path.join(root, *link.split("/"))), real))
    try:
        mode = os.lstat(real).st_mode
    except OSError:
        raise ManifestError("roster entry %s is a symbolic link (%s) to nothing (%s does not exist); fix the link "
                            "or take it off the roster" % (rel, link, real))
    if stat.S_ISLNK(mode):
        raise ManifestError("roster entry %s is a symbolic link that cannot be resolved (a loop?); fix the link or "
                            "take it off the roster" % rel)
    if not stat.S_ISREG(mode):
        raise ManifestError("roster entry %s under %s is not a regular file but a %s; list regular files only"
                            % (rel, root, file_kind(mode)))
    return real


def _readlink(path):
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def build_manifest(root, roster):
    """``{version, root, files: [{path, bytes, sha256}], total_bytes}`` for ``roster`` under ``root``.

    Every roster entry must be a regular file; a symbolic link to one inside the root is hashed as its target
    (see ``resolve_entry``). Anything else raises ManifestError naming the file.
    """
    paths = normalize_roster(roster)
    files = []
    for rel in paths:
        real = resolve_entry(root, rel)
        try:
            digest, size = sha256_file(real)
        except OSError as exc:
            raise ManifestError("cannot read %s: %s" % (os.path.join(root, rel), exc)) from exc
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
    if not files:
        raise ManifestError("the manifest lists no files, and a verified pull of nothing proves nothing; run "
                            "pull_manifest with the roster of the files that must be pulled")
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
    validate_sources(data)
    return data


# A manifest of several roots (pull_manifest's launch mode): ``sources`` is ``[{"label", "root", "transfer"}]``;
# each file's path starts with its source's label (``durable/000/best.pt``), and ``transfer`` lists the paths
# (relative to that root) to pull: the files, and the targets of those that are links inside the root.
SOURCE_LABELS = ("durable", "unsynced")


def validate_sources(data):
    """Check ``sources`` of a manifest (absent: one root); returns it or None; ManifestError when malformed."""
    sources = data.get("sources")
    if sources is None:
        return None
    if not isinstance(sources, list) or not sources:
        raise ManifestError("the manifest's 'sources' is not a non-empty list")
    labels = []
    for source in sources:
        if not isinstance(source, dict) or source.get("label") not in SOURCE_LABELS or source["label"] in labels:
            raise ManifestError("a manifest source is not one of %s, or is listed twice: %r"
                                % (", ".join(SOURCE_LABELS), source))
        root, transfer = source.get("root"), source.get("transfer")
        if not isinstance(root, str) or not root.startswith("/") or not isinstance(transfer, list) or not transfer:
            raise ManifestError("manifest source %s needs an absolute 'root' and a non-empty 'transfer' list"
                                % source["label"])
        for rel in transfer:
            if normalize_rel(rel) != rel:
                raise ManifestError("manifest source %s transfers %r, which is not a clean relative path"
                                    % (source["label"], rel))
        labels.append(source["label"])
    for item in data["files"]:
        if item["path"].split("/")[0] not in labels:
            raise ManifestError("manifest path %s is under none of the sources %s" % (item["path"], ", ".join(labels)))
    return sources


def load_manifest(text):
    """Parse and validate manifest JSON text (str or bytes)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ManifestError("the manifest is not valid JSON: %s" % (exc if isinstance(exc, ValueError)
                                                                    else "nested too deeply")) from exc
    return validate_manifest(data)


def list_files(directory):
    """Relative POSIX paths of everything under ``directory`` that is not a real directory, sorted.

    Links are not followed: a link (to a file, to a directory or to nothing), a FIFO, a device or a socket is
    listed as itself.
    """
    found = []
    for current, dirs, names in os.walk(directory):
        rel_dir = os.path.relpath(current, directory)
        linked_dirs = [name for name in dirs if os.path.islink(os.path.join(current, name))]
        for name in names + linked_dirs:
            found.append(name if rel_dir == "." else posixpath.join(rel_dir.replace(os.sep, "/"), name))
    return sorted(found)


def _problem(code, path, message):
    return {"code": code, "path": path, "message": message}


def _entry_problem(directory, rel):
    """A ``missing``, ``symlink`` or ``not_a_file`` problem of ``rel`` in the copy, or None for a real file."""
    link = link_in_path(directory, rel)
    if link is not None:
        target = _readlink(os.path.join(directory, *link.split("/")))
        return _problem("symlink", rel, "%s is a symbolic link (%s -> %s), not a file with the manifest's bytes: a "
                        "verified pull holds real files; pull again" % (rel, link, target))
    try:
        mode = os.lstat(os.path.join(directory, *rel.split("/"))).st_mode
    except OSError:
        return _problem("missing", rel, "%s is missing from %s" % (rel, directory))
    if not stat.S_ISREG(mode):
        return _problem("not_a_file", rel, "%s is a %s in %s, not a regular file; remove it and pull again"
                        % (rel, file_kind(mode), directory))
    return None


def compare_manifest(manifest, directory, allow_extra=False):
    """Problems of ``directory`` against ``manifest``: exact roster, real files, then bytes, then sha256.

    ``extra`` (anything not in the manifest, links and special files included) is reported unless
    ``allow_extra``. A roster path that is or passes through a symbolic link is ``symlink`` and is never read.
    The sha256 is only computed when the size matches.
    """
    problems = []
    expected = {}
    for item in manifest["files"]:
        expected[item["path"]] = item
    for rel in sorted(expected):
        item = expected[rel]
        problem = _entry_problem(directory, rel)
        if problem:
            problems.append(problem)
            continue
        full = os.path.join(directory, *rel.split("/"))
        size = os.lstat(full).st_size
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


def materialize_links(manifest, directory):
    """Turn each manifest entry of a pulled copy that is (or passes through) a symbolic link into a real file.

    An entry whose link resolves, inside ``directory``, to a regular file is replaced by a hard link to that
    file (a copy where hard links fail); every link on its path is replaced by a real directory. An entry whose
    link leaves ``directory``, dangles or loops is left alone: the comparison then reports it as ``symlink``.
    Returns the paths made real. Raises OSError when the copy cannot be changed.
    """
    real_dir = os.path.realpath(directory)
    plan = []
    for item in manifest["files"]:
        rel = item["path"]
        if link_in_path(directory, rel) is None:
            continue
        target = os.path.realpath(os.path.join(directory, *rel.split("/")))
        try:
            regular = stat.S_ISREG(os.lstat(target).st_mode)
        except OSError:
            regular = False
        if regular and inside(target, real_dir) and target != real_dir:
            plan.append((rel, target))
    done = []
    for rel, target in plan:
        current = directory
        parts = rel.split("/")
        for index, part in enumerate(parts):
            current = os.path.join(current, part)
            last = index == len(parts) - 1
            if os.path.islink(current):
                os.unlink(current)
            if not last and not os.path.isdir(current):
                os.mkdir(current)
        try:
            os.link(target, current)
        except OSError:
            shutil.copyfile(target, current)
        done.append(rel)
    return done


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
