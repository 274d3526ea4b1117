# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The queue_assign filter: spread a queue of items over hosts, deterministically, and queue_reassign: give each
host the share another host ran (documented in queue_assign.yml and queue_reassign.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.launch_plan import assign, reassign


def queue_assign(queue, hosts):
    """Item i goes to sorted(hosts)[i % n]; returns [{index, item, host, arg}] in queue order."""
    try:
        return assign(queue, hosts)
    except ValueError as exc:
        raise AnsibleFilterError("queue_assign: %s" % exc)


def queue_reassign(shares):
    """{host: recorded rows} -> [{index, item, host, arg}] in queue order, item ids kept."""
    if not isinstance(shares, dict):
        raise AnsibleFilterError("queue_reassign: expects a mapping of host to its recorded items, got a %s"
                                 % type(shares).__name__)
    try:
        return reassign(shares)
    except ValueError as exc:
        raise AnsibleFilterError("queue_reassign: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"queue_assign": queue_assign, "queue_reassign": queue_reassign}
