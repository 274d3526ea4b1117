# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The teardown gate: refuse the meter-stop verb while a job runs on the host, unless the pull of every run is
verified, and unless the host was approved by name."""

from __future__ import annotations

import os

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import teardown
from ansible_collections.remote_gpu.trainer.plugins.modules.teardown_gate import DOCUMENTATION as MODULE_DOCUMENTATION
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.doc_args import DocumentedAction


class ActionModule(DocumentedAction):
    DOCUMENTATION = MODULE_DOCUMENTATION

    def act(self, result, args, task_vars):
        host = task_vars["inventory_hostname"]
        approvals, approval_error = teardown.parse_approvals(args["approve"])
        pull_root = os.path.abspath(args["pull_root"])
        try:
            host_dir = os.path.dirname(teardown.pull_dir(pull_root, host, "run"))
        except ValueError as exc:
            return dict(result, failed=True, msg=str(exc), refusals=[teardown.refusal("bad_host", str(exc))],
                        open=False, stop_with=None, api_problem=None, api=None, runs=[], host_dir=None,
                        left_behind=[])
        live = teardown.live_job_refusals(args["jobs"], args["jobs_error"], args["run_dir"])
        if args["runs"] is None:  # one run, named by run_id (a module user's gate)
            if not args["run_id"]:  # the manifest that would name it could not be written
                refusal = teardown.refusal("manifest_unknown", "no run id: the box's manifest could not be written%s" % (
                    " (%s)" % args["reason"] if args["reason"] else "; run pull_manifest first"))
                refusals = live + [refusal]
                msg = "teardown refused for %s: %s" % (host, "; ".join(
                    "%s: %s" % (r["code"], r["message"]) for r in refusals))
                return dict(result, failed=not self._task.check_mode, open=False, refusals=refusals, pull_dir=None,
                            host_dir=host_dir, runs=[], left_behind=[], approved=host in approvals, stop_with=None,
                            api_problem=None, api=None, msg="check mode: " + msg if self._task.check_mode else msg)
            runs = [{"job": None, "run_id": args["run_id"], "sha256": args["manifest_sha256"]}]
            reasons, reason = {}, args["reason"]
        else:
            runs = [run for run in args["runs"] if isinstance(run, dict)]
            reasons, reason = teardown.pull_reasons(args["pulls"]), ""
        found, checked = teardown.runs_refusals(host, pull_root, runs, teardown.load_verified, reasons)
        if found and found[0]["code"] == "bad_run_id" and args["runs"] is None:
            return dict(result, failed=True, msg=found[0]["message"], refusals=found, open=False, stop_with=None,
                        api_problem=None, api=None, runs=[], host_dir=host_dir, left_behind=[])
        refusals = live + found
        # no job at all on the box (the jobs were listed: no live one, none unknown), and no roster: open only when the
        # person said the box holds no results of theirs (a rented box never launched on)
        empty = not runs and not live and not args["reason"] and args["jobs"] == [] and args["no_results"]
        if not runs and not live and not empty:
            refusals.append(teardown.nothing_to_pull(args["run_dir"], args["reason"]))
        behind = teardown.left_behind(runs)
        refusals += teardown.left_behind_refusals(behind, args["reversible"], args["leave_behind"])
        refusals += teardown.approval_refusals(host, approvals, approval_error)
        stop_with, api_problem = teardown.stop_path(args["command"], args["api"], os.environ)
        api = args["api"] or {}
        if stop_with == "manual" and api_problem:
            refusals.append(teardown.refusal(
                "api_unusable", "the profile stops the meter through the %s API only, and %s" % (
                    api.get("provider"), api_problem)))
        placeholders = teardown.unresolved_placeholders(args["command"]) if stop_with == "command" else []
        if placeholders:
            refusals.append(teardown.refusal(
                "command_placeholder",
                "the meter-stop command still holds %s: set the matching inventory variable for %s (for example "
                "runpod_pod_id or vastai_instance_id)" % (", ".join(placeholders), host)))
        if reason and refusals:
            refusals[0]["message"] += " (%s)" % reason
        result.update(changed=False, open=not refusals, refusals=refusals, left_behind=behind,
                      pull_dir=checked[0]["pull_dir"] if len(checked) == 1 else None, host_dir=host_dir,
                      runs=checked, approved=host in approvals, stop_with=stop_with, api_problem=api_problem,
                      api=dict((key, str(api.get(key) or "").strip()) for key in ("provider", "id", "state"))
                      if stop_with == "api" else None)
        if refusals:
            msg = "teardown refused for %s: %s" % (host, "; ".join("%s: %s" % (r["code"], r["message"]) for r in refusals))
            if self._task.check_mode:
                result["msg"] = "check mode: " + msg
            else:
                result.update(failed=True, msg=msg)
        elif empty:
            result["msg"] = ("gate open for %s: no job under %s, nothing pulled (teardown_no_results: the box holds no "
                             "results) and approved by name" % (host, args["run_dir"] or "the run directory"))
        else:
            result["msg"] = "gate open for %s: pull verified for %s and approved by name" % (host, ", ".join(
                ("run %s" % run["run_id"]) + (" (job %s)" % run["job"] if run["job"] else "") for run in checked))
        return result
