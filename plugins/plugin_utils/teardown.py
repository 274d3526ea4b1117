# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The teardown gate, as pure functions (controller side).

Nothing is stopped, released, terminated or destroyed unless all of these hold:
  0. no job under the host's run directory is alive or starting (every job, not only the ones pulled);
  1. the pull of every run to be verified (each job's run, or the hand roster's) was verified against the box's
     manifest (roster, bytes, sha256, checkpoints load);
  2. the controller holds a PULL_VERIFIED.json for this host and each of those runs, for the manifest the box has
     now, and it lists at least one file (a verified pull of nothing never opens the gate);
  3. a person approved this host by name.
Each refusal names the condition that failed, and the job it is about.
"""

from __future__ import annotations

import json
import os

from ansible_collections.remote_gpu.trainer.plugins.module_utils.digest import open_regular
from ansible_collections.remote_gpu.trainer.plugins.module_utils import launch_results

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
    refusals = run_refusals(host, run_id, verified, box_manifest_sha256)
    return refusals + approval_refusals(host, approvals, approval_error)


def approval_refusals(host, approvals, approval_error=None):
    """The refusal of a host that was not approved by name (or of a blanket approval); empty when approved."""
    if approval_error:
        return [refusal("approval_refused", approval_error)]
    if host not in approvals:
        return [refusal("not_approved",
                        "%s was not approved by name (approved: %s)%s" % (
                            host, ", ".join(sorted(approvals)) or "none",
                            "; to tear down only those, keep the run to them with -l %s" % ",".join(sorted(approvals))
                            if approvals else ""))]
    return []


def run_refusals(host, run_id, verified, box_manifest_sha256):
    """Why the pull of one run of ``host`` does not count as verified (see gate_refusals); empty when it does."""
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


# --- every job on the host (the playbook's default): liveness, every job's run, one gate --------------------------

def job_progress(job):
    """A job as job_status reports it (one of its ``jobs``), in words: its items done of its share, the item it
    runs and its last progress line, e.g. ``items 1/3 done, item 001 running, progress 'epoch 11/60'``."""
    parts = []
    done, total = job.get("items_done"), job.get("items_total")
    if isinstance(total, int) and total > 0:
        parts.append("items %d/%d done" % (done if isinstance(done, int) else 0, total))
    elif isinstance(done, int):
        parts.append("%d item(s) done" % done)
    if job.get("current_item"):
        parts.append("item %s running" % job["current_item"])
    progress = job.get("progress") if isinstance(job.get("progress"), dict) else {}
    text = str(progress.get("text") or "").strip()
    parts.append("progress %r" % text[:200] if text else "no progress line yet")
    return ", ".join(parts)


def live_job_refusals(jobs, jobs_error="", run_dir=""):
    """``job_alive`` for each job of ``jobs`` (job_status's ``jobs``: every job under the run directory) that is
    alive or starting, naming it and its progress; ``jobs_unknown`` when the jobs could not be listed
    (``jobs_error``), since then nothing says that none runs. ``jobs`` None: not checked (a module user's gate)."""
    where = " under %s" % run_dir if run_dir else ""
    if jobs_error:
        return [refusal("jobs_unknown", "cannot tell whether a job%s still runs: %s; fix that and run teardown again"
                        % (where, jobs_error))]
    refusals = []
    for job in jobs or []:
        if not isinstance(job, dict) or not job.get("alive"):
            continue
        state = "is running" if job.get("pid") else "is starting (its tmux session exists, no PID yet)"
        refusals.append(refusal(
            "job_alive", "job %s%s %s (%s): its results are not final. Wait until patrol says it is done, or stop it "
            "with remote_gpu.trainer.detached_job (state: stopped), then tear down" % (
                job.get("name"), where, state, job_progress(job))))
    return refusals


def pull_reasons(pulls):
    """{run id: message} of the runs whose pull did not verify, from the results of the pull_verify loop (each with
    its ``item``, a run of pull_manifest's ``runs``); skipped and verified ones are left out."""
    reasons = {}
    for result in pulls or []:
        if not isinstance(result, dict) or result.get("skipped") or result.get("verified"):
            continue
        item = result.get("item") if isinstance(result.get("item"), dict) else {}
        if item.get("run_id") and result.get("msg"):
            reasons[str(item["run_id"])] = str(result["msg"])
    return reasons


def shared_run_ids(runs):
    """{run id: [jobs]} of the run ids that more than one job records: their pulls would share one directory."""
    jobs_of = {}
    for run in runs:
        if run.get("run_id"):
            jobs_of.setdefault(run["run_id"], []).append(run.get("job") or "(roster)")
    return dict((run_id, jobs) for run_id, jobs in jobs_of.items() if len(jobs) > 1)


def _about(run, message):
    return "job %s: %s" % (run["job"], message) if run.get("job") else message


def runs_refusals(host, pull_root, runs, load, reasons=None):
    """(refusals, checked) of every run to verify: ``runs`` as pull_manifest returns them (``job``, ``run_id``,
    ``sha256``: the box's manifest now, empty when it could not be written, ``msg``: why), ``load(path)`` reads a
    PULL_VERIFIED.json (load_verified), ``reasons`` from pull_reasons. ``checked`` lists each run with its pull
    directory and, from its PULL_VERIFIED.json, the files and bytes verified (for the receipt)."""
    refusals, checked = [], []
    reasons = reasons or {}
    for run_id, jobs in sorted(shared_run_ids(runs).items()):
        refusals.append(refusal("run_id_shared", "jobs %s all record run id %s, so their pulls would share one "
                                "directory: relaunch all but one with a launch_run_id of its own, or pull one of them "
                                "(-e teardown_job=NAME)" % (", ".join(jobs), run_id)))
    for run in runs:
        run_id, sha = str(run.get("run_id") or ""), str(run.get("sha256") or "")
        if not sha:
            why = str(run.get("msg") or "run pull_manifest first")
            refusals.append(refusal("manifest_unknown", _about(run, "the box's manifest%s could not be written (%s)" % (
                " of run %s" % run_id if run_id else "", why))))
            continue
        try:
            directory = pull_dir(pull_root, host, run_id)
        except ValueError as exc:
            refusals.append(refusal("bad_run_id", _about(run, str(exc))))
            continue
        verified = load(os.path.join(directory, VERIFIED_NAME))
        found = [dict(r, message=_about(run, r["message"])) for r in run_refusals(host, run_id, verified, sha)]
        if found and reasons.get(run_id):
            found[0]["message"] += " (%s)" % reasons[run_id]
        refusals += found
        files = (verified or {}).get("files")
        checked.append({"job": run.get("job"), "run_id": run_id, "manifest_sha256": sha, "pull_dir": directory,
                        "file_count": len(files) if isinstance(files, list) else 0,
                        "total_bytes": (verified or {}).get("total_bytes")})
    return refusals, checked


def left_behind(runs):
    """Each item of ``runs`` (pull_manifest's) whose output directory keeps files the pull does not hold:
    ``[{job, run_id, item, dir, count, bytes, files, cut}]`` (pure)."""
    found = []
    for run in runs or ():
        if not isinstance(run, dict):
            continue
        for row in run.get("item_states") or ():
            behind = row.get("left_behind") if isinstance(row, dict) else None
            if isinstance(behind, dict):
                found.append(dict(dict((key, behind.get(key)) for key in ("dir", "count", "bytes", "files", "cut")),
                                  job=run.get("job"), run_id=run.get("run_id"), item=row.get("item")))
    return found


def left_behind_text(rows):
    """One phrase per item of :func:`left_behind`: 'job exp2 item 001: 2 file(s), 5.0 KiB under DIR (metrics.json,
    samples/0.png)'."""
    return "; ".join("job %s %s" % (row["job"] or row["run_id"], launch_results.left_behind_line(row["item"], row))
                     for row in rows)


def left_behind_refusals(rows, reversible, leave_behind):
    """The refusal of an irreversible meter stop over files that the pull does not hold (pure)."""
    if not rows or reversible or leave_behind:
        return []
    return [refusal("outputs_left_behind", "the meter stop is irreversible and deletes files that teardown does not "
                    "pull: %s. Pull them too, verified with the rest (-e teardown_pull_left_behind=true), or stop the "
                    "meter without them (-e teardown_leave_behind=true); launch_best_glob says what a run keeps"
                    % left_behind_text(rows))]


def nothing_to_pull(run_dir, reason=""):
    """The refusal of a host with no run to verify: no job under the run directory and no roster (or a manifest
    step that failed before it named any run, ``reason``)."""
    if reason:
        return refusal("manifest_unknown", "no run to verify: the box's manifests could not be written (%s)" % reason)
    return refusal("nothing_to_pull", "no job%s recorded results to pull, and no roster was given: nothing proves "
                   "the results are safe. Give the run directory launch used (-e teardown_run_dir=DIR), or a roster "
                   "(-e teardown_run_id=ID -e '{\"teardown_roster\": [...]}'); or, where the box holds no results of "
                   "yours (a rented box never launched on), stop it without a pull: -e teardown_no_results=true" % (
                       " under %s" % run_dir if run_dir else ""))
