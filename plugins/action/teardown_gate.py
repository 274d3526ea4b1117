# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The teardown gate: refuse the meter-stop verb unless the pull is verified and the host approved by name."""

from __future__ import annotations

import os

from ansible_collections.remote_gpu.trainer.plugins.module_utils import teardown
from ansible_collections.remote_gpu.trainer.plugins.modules.teardown_gate import DOCUMENTATION as MODULE_DOCUMENTATION
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.doc_args import DocumentedAction


class ActionModule(DocumentedAction):
    DOCUMENTATION = MODULE_DOCUMENTATION

    def act(self, result, args, task_vars):
        host = task_vars["inventory_hostname"]
        approvals, approval_error = teardown.parse_approvals(args["approve"])
        if not args["run_id"]:  # the manifest that would name it could not be written
            refusal = teardown.refusal("manifest_unknown", "no run id: the box's manifest could not be written%s" % (
                " (%s)" % args["reason"] if args["reason"] else "; run pull_manifest first"))
            msg = "teardown refused for %s: %s: %s" % (host, refusal["code"], refusal["message"])
            return dict(result, failed=not self._task.check_mode, open=False, refusals=[refusal], pull_dir=None,
                        approved=host in approvals, stop_with=None, api_problem=None, api=None,
                        msg="check mode: " + msg if self._task.check_mode else msg)
        try:
            directory = teardown.pull_dir(os.path.abspath(args["pull_root"]), host, args["run_id"])
        except ValueError as exc:
            return dict(result, failed=True, msg=str(exc), refusals=[teardown.refusal("bad_run_id", str(exc))],
                        open=False, stop_with=None, api_problem=None, api=None)
        verified = teardown.load_verified(os.path.join(directory, teardown.VERIFIED_NAME))
        refusals = teardown.gate_refusals(host, args["run_id"], verified, args["manifest_sha256"], approvals,
                                          approval_error)
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
        if args["reason"] and refusals:
            refusals[0]["message"] += " (%s)" % args["reason"]
        result.update(changed=False, open=not refusals, refusals=refusals, pull_dir=directory,
                      approved=host in approvals, stop_with=stop_with, api_problem=api_problem,
                      api=dict((key, str(api.get(key) or "").strip()) for key in ("provider", "id", "state"))
                      if stop_with == "api" else None)
        if refusals:
            msg = "teardown refused for %s: %s" % (host, "; ".join("%s: %s" % (r["code"], r["message"]) for r in refusals))
            if self._task.check_mode:
                result["msg"] = "check mode: " + msg
            else:
                result.update(failed=True, msg=msg)
        else:
            result["msg"] = "gate open for %s: pull verified for run %s and approved by name" % (host, args["run_id"])
        return result
