# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The platform profile of every host of the play, checked once on the controller (see plugin_utils/profile_check)."""

from __future__ import annotations

import os

import yaml

from ansible.errors import AnsibleActionFail, AnsibleError

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import profile_check
from ansible_collections.remote_gpu.trainer.plugins.modules.profile_check import DOCUMENTATION as MODULE_DOCUMENTATION
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.doc_args import SAFE_LOADER, DocumentedAction
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.host_vars import HostVariables

# The role's schema: the single source of truth for the profile's keys and types (ansible-doc -t role shows it).
SPEC_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                         *profile_check.SPEC_FILE.split("/"))


def load_spec(path=SPEC_PATH):
    """The schema's options from the role's argument_specs.yml; AnsibleActionFail when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            return profile_check.spec_options(yaml.load(handle, Loader=SAFE_LOADER))
    except (OSError, yaml.YAMLError, ValueError) as exc:
        raise AnsibleActionFail("cannot read the profile schema %s: %s" % (path, exc)) from exc


class ActionModule(DocumentedAction):
    DOCUMENTATION = MODULE_DOCUMENTATION
    _requires_connection = False

    @staticmethod
    def host_values(fleet, host):
        """(the host's trainer_* values, templates resolved; {key: why} for those that could not be resolved)."""
        view = fleet.get(host)
        if view is None:
            return {}, {"inventory_hostname": "not a host of the inventory"}
        values, errors = {}, {}
        for key in profile_check.profile_values(view.variables):
            try:
                values[key] = view.get(key)
            except AnsibleError as exc:
                errors[key] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return values, errors

    def act(self, result, args, task_vars):
        hosts = args["hosts"] if args["hosts"] is not None else task_vars.get("ansible_play_batch") or []
        spec = load_spec()
        fleet = HostVariables(task_vars["hostvars"], self._templar)
        values, errors = {}, {}
        for host in hosts:
            values[host], failed = self.host_values(fleet, host)
            if failed:
                errors[host] = failed
        problems, profiles = profile_check.fleet_problems(spec, values, errors)
        result.update(changed=False, problems=problems, hosts_checked=len(values), profiles_checked=profiles)
        result["msg"] = "%d host(s), %d distinct profile(s): %s" % (
            len(values), profiles, "%d host(s) with a broken profile" % len(problems) if problems else "all valid")
        return result
