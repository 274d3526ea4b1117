# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every host's variables, as a controller action that reads the whole fleet sees them (fleet_report,
autopilot_decide, profile_check).

``hostvars[host][name]`` runs Ansible's variable manager for the host on every lookup, then templates the whole
value, also a registered result of many kilobytes that holds no template at all. At 16 hosts, patrol's report
spent 0.3 CPU s of every tick that way. Here each host's variables are read once (``hostvars.raw_get``), and a value
is templated, with that host's variables, only when it holds Jinja syntax, which is the same value Ansible returns:

    fleet = HostVariables(task_vars["hostvars"], self._templar)
    host = fleet.get("lab-01")          # None for a name that the inventory does not hold
    host.get("trainer_data_dir")        # templated; AnsibleError when its template fails
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.profile_check import has_template


class HostView:
    """One host's variables: ``variables``, untemplated; ``get(name)``, templated when it holds Jinja syntax (each
    value at most once)."""

    def __init__(self, variables, templar):
        self.variables = variables
        self._templar = templar
        self._host_templar = None
        self._templated = {}

    def get(self, name, default=None):
        if name not in self.variables:
            return default
        value = self.variables[name]
        if not has_template(value):
            return value
        if name not in self._templated:
            if self._host_templar is None:
                self._host_templar = self._templar.copy_with_new_env(available_variables=self.variables)
            self._templated[name] = self._host_templar.template(value)
        return self._templated[name]


class HostVariables:
    """Every host's HostView, each read at most once. ``hostvars`` is Ansible's (``raw_get``), or a plain
    ``{host: {name: value}}`` mapping (unit tests)."""

    def __init__(self, hostvars, templar):
        self._hostvars = hostvars if hostvars is not None else {}
        self._templar = templar
        self._views = {}

    def __contains__(self, host):
        return host in self._hostvars

    def get(self, host):
        if host not in self._views:
            raw_get = getattr(self._hostvars, "raw_get", None)
            # Ansible's raw_get answers an unknown host with an Undefined, which outside a template raises "A
            # required TemplateContext context is not active": an unknown host is asked about first
            try:
                variables = raw_get(host) if raw_get else self._hostvars.get(host)
                self._views[host] = HostView(variables, self._templar) if isinstance(variables, Mapping) else None
            except Exception:  # pylint: disable=broad-except
                self._views[host] = None
        return self._views[host]
