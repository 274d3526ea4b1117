# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A playbook's variables (names and types), checked once per play on the controller (see plugin_utils/play_vars)."""

from __future__ import annotations

import glob
import os

import yaml

from ansible.errors import AnsibleActionFail, AnsibleError

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import play_vars
from ansible_collections.remote_gpu.trainer.plugins.modules.play_vars import DOCUMENTATION as MODULE_DOCUMENTATION
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.doc_args import SAFE_LOADER, DocumentedAction
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.host_vars import HostVariables

COLLECTION = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_specs(path):
    """{entry point: options} of one role's argument_specs.yml; AnsibleActionFail when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            loaded = yaml.load(handle, Loader=SAFE_LOADER)
        return dict((entry, play_vars.entry_options(loaded, entry, path)) for entry in loaded["argument_specs"])
    except (OSError, yaml.YAMLError, ValueError, TypeError, KeyError) as exc:
        raise AnsibleActionFail("cannot read the variables' spec %s: %s" % (path, exc)) from exc


def role_specs(roles, root=COLLECTION):
    """({role: {"main": options, "internal": options}} of ``roles``, the names every other role's spec knows)."""
    specs = {}
    for role in roles:
        path = os.path.join(root, *(play_vars.SPEC_FILE % role).split("/"))
        if not os.path.isfile(path):
            raise AnsibleActionFail("roles: %s is no role of this collection with a spec (%s is missing)" % (
                role, play_vars.SPEC_FILE % role))
        specs[role] = load_specs(path)
    other = set()
    for path in sorted(glob.glob(os.path.join(root, "roles", "*", "meta", "argument_specs.yml"))):
        if os.path.basename(os.path.dirname(os.path.dirname(path))) in specs:
            continue
        for options in load_specs(path).values():
            other.update(options)
    return specs, other


class ActionModule(DocumentedAction):
    DOCUMENTATION = MODULE_DOCUMENTATION
    _requires_connection = False

    @staticmethod
    def host_values(view, check):
        """The host's variables that carry a prefix, templated; a value that cannot render here is left out."""
        values = {}
        for name in view.variables:
            if not name.startswith(check.prefixes) or name in check.internal or name in check.other_known:
                continue
            try:
                values[name] = view.get(name)
            except AnsibleError:
                if check.unknown(name):
                    values[name] = None
        return values

    def act(self, result, args, task_vars):
        hosts = args["hosts"] if args["hosts"] is not None else task_vars.get("ansible_play_batch") or []
        specs, other = role_specs(args["roles"])
        check = play_vars.PlayCheck(specs, other)
        fleet = HostVariables(task_vars.get("hostvars"), self._templar)
        values, present = {}, {}
        for host in hosts:
            view = fleet.get(host)
            if view is not None:
                values[host] = self.host_values(view, check)
                present[host] = set(view.variables)
        # the play's own variables (vars:, vars_files, an import_playbook's vars) are in no host's variables: the
        # names are checked, and the values as this host sees them (the roles' defaults are among them)
        names = [name for name in task_vars if name.startswith(check.prefixes)]
        here = task_vars.get("inventory_hostname")
        play_names = set(names) - present.get(here, set())
        if here in values:
            for name in names:
                if name in check.options:
                    try:
                        values[here][name] = self._templar.template(task_vars[name])
                    except AnsibleError:
                        continue  # it needs what only a later task has: left to the play
        problems = check.missing(present, play_names) + check.problems(values, names=names)
        result.update(changed=False, problems=problems, hosts_checked=len(values))
        if problems:
            result.update(failed=True, msg="The variables of this playbook have %d problem(s); fix them and run it "
                          "again:\n%s" % (len(problems), "\n".join("- " + problem for problem in problems)))
        else:
            result["msg"] = "%d host(s): every %s variable is known and well typed" % (
                len(values), ", ".join(prefix + "*" for prefix in check.prefixes))
        return result
