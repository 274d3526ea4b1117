# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rented_without filter: a rented inventory without the boxes that are gone (documented in rented_without.yml)."""

from __future__ import annotations

import yaml

from ansible.errors import AnsibleFilterError

# the first line of every inventory that playbooks/rent.yml writes (older ones named playbooks/rent.yml after it)
MARKER = "# The boxes kept by "


def is_rented(text):
    """Whether ``text`` is an inventory that rent wrote (its first line is rent's)."""
    return isinstance(text, str) and text.startswith(MARKER)


def rented_without(text, hosts):
    """``text``, a rented inventory as rent writes it (its first line, then YAML: all.children.<group>.hosts), with
    ``hosts`` removed from every group; the first line is kept. Refuses any other text: a user's inventory is never
    rewritten."""
    if not is_rented(text):
        raise AnsibleFilterError("rented_without: the text is not an inventory that rent wrote (its first line is not "
                                 "%r): it is left as it is" % MARKER.strip())
    if not isinstance(hosts, (list, tuple)) or not all(isinstance(host, str) for host in hosts):
        raise AnsibleFilterError("rented_without: hosts must be a list of host names, got %r" % (hosts,))
    head, _newline, body = text.partition("\n")
    try:
        data = yaml.safe_load(body)
        children = data["all"]["children"]
        groups = dict((name, dict(group or {})) for name, group in children.items())
    except (yaml.YAMLError, AttributeError, KeyError, TypeError) as exc:
        raise AnsibleFilterError("rented_without: the rented inventory does not have rent's layout (all.children."
                                 "<group>.hosts): %s" % exc) from exc
    gone = set(hosts)
    for group in groups.values():
        group["hosts"] = dict((name, value) for name, value in (group.get("hosts") or {}).items() if name not in gone)
    data["all"]["children"] = groups
    return "%s\n%s" % (head, yaml.safe_dump(data, default_flow_style=False, indent=2, sort_keys=True, width=1000))


class FilterModule(object):
    def filters(self):
        return {"rented_without": rented_without}
