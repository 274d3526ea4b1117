# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pull a result root from the box with resumable rsync and verify it against the box's manifest."""

from __future__ import annotations

import datetime
import hashlib
import json
import os

from ansible.module_utils.common.text.converters import to_native

from ansible_collections.remote_gpu.trainer.plugins.module_utils import manifest as mf
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import rsync
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import teardown
from ansible_collections.remote_gpu.trainer.plugins.module_utils.atomic import write_atomic
from ansible_collections.remote_gpu.trainer.plugins.module_utils.digest import open_regular
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.version import TOOL
from ansible_collections.remote_gpu.trainer.plugins.modules.pull_verify import DOCUMENTATION as MODULE_DOCUMENTATION
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.doc_args import DocumentedAction

MAX_MANIFEST_BYTES = 256 * 1024 * 1024


def prepare_pull_dir(dest, data_dir, verified_path):
    """Remove an older PULL_VERIFIED.json and create ``data/``; an error message saying what to do, or None."""
    if os.path.isdir(verified_path) and not os.path.islink(verified_path):
        return ("%s is a directory, not the file this task writes; remove it (nothing in it is a verification) "
                "and run again" % verified_path)
    try:
        if os.path.lexists(verified_path):
            os.unlink(verified_path)
    except OSError as exc:
        return ("cannot remove the older %s (%s): a stale verification could open the teardown gate; make %s "
                "writable and run again" % (verified_path, exc.strerror or exc, dest))
    if os.path.lexists(data_dir) and (os.path.islink(data_dir) or not os.path.isdir(data_dir)):
        return ("%s is not a directory (a file or a symbolic link is in its place); remove it and run again: the "
                "pull goes into a real directory" % data_dir)
    try:
        os.makedirs(data_dir, exist_ok=True)
    except OSError as exc:
        return ("cannot create the pull directory %s (%s); choose a writable pull_root or fix its permissions"
                % (data_dir, exc.strerror or exc))
    return None


def read_pulled_manifest(path, box_sha256):
    """(manifest, None) of the manifest pulled to ``path`` when its sha256 is the box's, else (None, message)."""
    try:
        with open_regular(path) as handle:
            raw = handle.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        return None, "cannot read the pulled manifest %s: %s" % (path, exc.strerror)
    if len(raw) > MAX_MANIFEST_BYTES:
        return None, ("the pulled manifest %s is larger than %d bytes, which no roster needs; run pull_manifest "
                      "again and pull again" % (path, MAX_MANIFEST_BYTES))
    pulled_sha = hashlib.sha256(raw).hexdigest()
    if pulled_sha != box_sha256:
        return None, ("the pulled manifest's sha256 %s differs from the box's %s: the manifest changed during the "
                      "pull; run pull_manifest and pull again" % (pulled_sha, box_sha256))
    try:
        return mf.load_manifest(raw.decode("utf-8")), None
    except (mf.ManifestError, UnicodeDecodeError) as exc:
        return None, "the pulled manifest is not valid: %s" % to_native(exc)


class ActionModule(DocumentedAction):
    DOCUMENTATION = MODULE_DOCUMENTATION

    def act(self, result, args, task_vars):
        host = task_vars["inventory_hostname"]
        try:
            dest = teardown.pull_dir(os.path.abspath(args["pull_root"]), host, args["run_id"])
        except ValueError as exc:
            return dict(result, failed=True, msg=str(exc))
        data_dir = os.path.join(dest, teardown.DATA_DIR)
        verified_path = os.path.join(dest, teardown.VERIFIED_NAME)
        result.update(pull_dir=dest, verified_path=verified_path, problems=[], verified=False, changed=False)
        try:  # before anything is removed or pulled: no option, no whole filesystem reaches rsync
            if args["src"] is not None:
                rsync.check_path(args["src"], "src")
            rsync.check_path(args["manifest_path"], "manifest_path")
            rsync.check_timeout(args["timeout"])
        except rsync.RsyncError as exc:
            return dict(result, failed=True, msg=str(exc))
        if self._task.check_mode:
            result.update(changed=True, msg="would pull %s:%s into %s and verify it against %s" % (
                host, args["src"] or "(the manifest's sources)", data_dir, args["manifest_path"]))
            return result

        # A verification that fails now must not leave an older PULL_VERIFIED.json opening the gate.
        error = prepare_pull_dir(dest, data_dir, verified_path)
        if error:
            return dict(result, failed=True, msg=error)
        local_manifest = os.path.join(dest, teardown.MANIFEST_NAME)
        if args["pull"]:
            error = self._rsync(args["manifest_path"], local_manifest, [], args["timeout"], task_vars)
            if error:
                return dict(result, failed=True, msg=error)
        manifest, error = read_pulled_manifest(local_manifest, args["manifest_sha256"])
        if error:
            return dict(result, failed=True, msg=error)
        sources = manifest.get("sources")
        if args["pull"]:
            error = self._pull_files(sources, args, data_dir, dest, task_vars)
            if error:
                return dict(result, failed=True, msg=error)
        pulled_sha = args["manifest_sha256"]

        try:
            # links inside the pull that lead to a pulled file become real files (see manifest.materialize_links)
            mf.materialize_links(manifest, data_dir)
        except OSError as exc:
            return dict(result, failed=True, msg="cannot turn the symbolic links of the pull in %s into files: %s; "
                        "check that the pull directory is writable, or remove it and pull again" % (data_dir, exc))
        problems = mf.verify_directory(manifest, data_dir, allow_extra=args["allow_extra"] or bool(sources),
                                       use_torch=args["use_torch"])
        result["problems"] = problems
        if problems:
            shown = "; ".join("%s %s: %s" % (p["code"], p["path"], p["message"]) for p in problems[:10])
            more = " (and %d more)" % (len(problems) - 10) if len(problems) > 10 else ""
            return dict(result, failed=True, msg="the pull of %s run %s does not match the box: %s%s. Nothing was marked "
                        "verified; fix the cause and pull again." % (host, args["run_id"], shown, more))
        record = {
            "host": host,
            "run_id": args["run_id"],
            "manifest_sha256": pulled_sha,
            "files": manifest["files"],
            "total_bytes": sum(item["bytes"] for item in manifest["files"]),
            "verified_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "tool": TOOL,
            "problems": [],
        }
        try:
            write_atomic(verified_path, json.dumps(record, indent=2, sort_keys=True) + "\n")
        except OSError as exc:
            return dict(result, failed=True, msg="the pull verified, but %s cannot be written: %s; make %s writable "
                        "and run again" % (verified_path, exc, dest))
        result.update(changed=True, verified=True, manifest_sha256=pulled_sha, file_count=len(manifest["files"]),
                      total_bytes=record["total_bytes"],
                      msg="pulled and verified %d file(s), %d bytes" % (len(manifest["files"]), record["total_bytes"]))
        return result

    def _pull_files(self, sources, args, data_dir, dest, task_vars):
        """Pull the result root (``src``, whole) or each source of the manifest (only its listed paths, into
        ``data/<label>/``); an error message or None."""
        if not sources:
            if not args["src"]:
                return ("src is required: the manifest has one root; give the result root on the box that "
                        "pull_manifest described")
            return self._rsync(args["src"].rstrip("/") + "/", data_dir + "/", ["--delete"], args["timeout"],
                               task_vars)
        for source in sources:
            try:
                rsync.check_path(source["root"], "the manifest's %s root" % source["label"])
            except rsync.RsyncError as exc:
                return str(exc)
            listing = os.path.join(dest, ".transfer-%s" % source["label"])
            local = os.path.join(data_dir, source["label"])
            try:
                os.makedirs(local, exist_ok=True)
                write_atomic(listing, "".join(rel + "\0" for rel in source["transfer"]))
            except OSError as exc:
                return "cannot prepare the pull of %s in %s: %s" % (source["label"], dest, exc)
            try:
                error = self._rsync(source["root"].rstrip("/") + "/", local + "/",
                                    ["--files-from=" + listing, "--from0"], args["timeout"], task_vars)
            finally:
                os.unlink(listing)
            if error:
                return error
        return None

    def _rsync(self, remote, local, extra, timeout, task_vars):
        """Resumable rsync from the box; returns an error message or None."""
        # No device or special file of the box is recreated on the controller, and no link that leaves the tree is
        # copied (the verifier then reports the roster entry as missing instead of following it).
        flags = ["-a", "--partial", "--partial-dir=.rsync-partial", "--no-devices", "--no-specials", "--safe-links"]
        flags += extra
        target = rsync.Target.from_connection(self._connection, task_vars)
        try:
            rsync.run_rsync(rsync.rsync_argv(flags, target, remote, local, pushing=False), timeout, remote)
        except rsync.RsyncError as exc:
            return str(exc)
        return None
