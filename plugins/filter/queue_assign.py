# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The queue_assign filter: spread a queue of items over hosts, deterministically (documented in queue_assign.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.launch_plan import assign


def queue_assign(queue, hosts):
    """Item i goes to sorted(hosts)[i % n]; returns [{index, item, host, arg}] in queue order."""
    try:
        return assign(queue, hosts)
    except ValueError as exc:
        raise AnsibleFilterError("queue_assign: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"queue_assign": queue_assign}
