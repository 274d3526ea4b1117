# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rented_without and rented_with filters: a rented inventory without the boxes that are gone, or with the boxes
that replace them (documented in rented_without.yml and rented_with.yml)."""

from __future__ import annotations

import json

import yaml

from ansible.errors import AnsibleFilterError

# the first line of every inventory that playbooks/rent.yml writes (older ones named playbooks/rent.yml after it)
MARKER = "# The boxes kept by "


def is_rented(text):
    """Whether ``text`` is an inventory that rent wrote (its first line is rent's)."""
    return isinstance(text, str) and text.startswith(MARKER)


def _parsed(name, text):
    """(first line, data, {group: group dict}) of a rented inventory; refuses any other text."""
    if not is_rented(text):
        raise AnsibleFilterError("%s: the text is not an inventory that rent wrote (its first line is not %r): it is "
                                 "left as it is" % (name, MARKER.strip()))
    head, _newline, body = text.partition("\n")
    try:
        data = yaml.safe_load(body)
        children = data["all"]["children"]
        groups = dict((group, dict(value or {})) for group, value in children.items())
        for group in groups.values():
            group["hosts"] = dict(group.get("hosts") or {})
    except (yaml.YAMLError, AttributeError, KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("%s: the rented inventory does not have rent's layout (all.children.<group>.hosts): "
                                 "%s" % (name, exc)) from exc
    return head, data, groups


def _written(head, data, groups):
    data["all"]["children"] = groups
    return "%s\n%s" % (head, yaml.safe_dump(data, default_flow_style=False, indent=2, sort_keys=True, width=1000))


def rented_without(text, hosts):
    """``text``, a rented inventory as rent writes it (its first line, then YAML: all.children.<group>.hosts), with
    ``hosts`` removed from every group; the first line is kept. Refuses any other text: a user's inventory is never
    rewritten."""
    head, data, groups = _parsed("rented_without", text)
    if not isinstance(hosts, (list, tuple)) or not all(isinstance(host, str) for host in hosts):
        raise AnsibleFilterError("rented_without: hosts must be a list of host names, got %r" % (hosts,))
    gone = set(hosts)
    for group in groups.values():
        group["hosts"] = dict((name, value) for name, value in group["hosts"].items() if name not in gone)
    return _written(head, data, groups)


def rented_with(text, hosts):
    """``text``, a rented inventory as rent writes it, with ``hosts`` ({name: variables}) added to every group (all
    of them are the rent's: its provider's and rent_<name>), a host already listed taking the new variables. Refuses
    any other text, as rented_without does."""
    head, data, groups = _parsed("rented_with", text)
    if not isinstance(hosts, dict) or not all(
            isinstance(name, str) and name and isinstance(value, dict) for name, value in hosts.items()):
        raise AnsibleFilterError("rented_with: hosts must be a dict of host names to their variables, got %r"
                                 % (hosts,))
    if not groups:
        raise AnsibleFilterError("rented_with: the rented inventory has no group to add the hosts to")
    try:  # Ansible's own str and dict types (tagged, unsafe) as the plain ones YAML's safe dumper writes
        hosts = json.loads(json.dumps(hosts))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("rented_with: a host's variables are not plain data: %s" % exc) from exc
    for group in groups.values():
        group["hosts"].update(hosts)
    return _written(head, data, groups)


class FilterModule(object):
    def filters(self):
        return {"rented_without": rented_without, "rented_with": rented_with}
