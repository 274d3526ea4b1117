# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: vastai
short_description: vast.ai instances as inventory hosts, through vast.ai's API
version_added: 0.1.0
description:
  - Lists the account's instances with C(GET /api/v1/instances/), following C(next_token) page by page (25 a page,
    ordered by id, as vast's own CLI does), and makes each running instance a host of the group C(vastai).
  - The address is the one vast's CLI (C(vastai ssh-url)) picks, the direct mapping of C(22/tcp) on
    C(public_ipaddr) when the instance has one, else the proxy C(ssh_host:ssh_port) (C(ssh_port + 1) for a jupyter
    runtype).
  - "Each instance's state is read from C(actual_status), C(intended_status) and C(is_bid), as C(docs/providers.md) says.
    C(frozen) (the GPU still bills), C(exited) while it should run (a crash, not a stop), C(unknown) (no heartbeat)
    and C(offline) are C(unhealthy); a bid instance paused while it should run is C(preempted) (outbid). Only a
    running instance is listed by default (see O(include_states)). Its C(label) is the host's name and stays in
    hostvars (C(vastai.label)) for C(keyed_groups)."
  - The API key comes from O(api_key) or the environment variable E(VAST_API_KEY).
  - If one page fails, the whole source fails; a partial list is never used.
extends_documentation_fragment:
  - constructed
  - inventory_cache
  - remote_gpu.trainer.provider_inventory
  - remote_gpu.trainer.provider_inventory.paged
options:
  plugin:
    choices:
      - remote_gpu.trainer.vastai
  api_url:
    description:
      - Base URL of vast.ai's API (the plugin calls C(<api_url>/api/v1/instances/)). Change it for a proxy or the
        test fake.
    default: https://console.vast.ai
"""

EXAMPLES = r"""
# The smallest vastai.yml (the key comes from VAST_API_KEY) is one line:
#   plugin: remote_gpu.trainer.vastai
#
# vastai.yml: interruptible (bid) instances in their own group
plugin: remote_gpu.trainer.vastai
groups:
  vast_interruptible: interruptible
"""

import json

from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_hosts import vastai_host
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_http import ProviderAPIError
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.provider_inventory import ProviderInventory

PAGE_LIMIT = 25


def page_query(after_token=None):
    """The query of one page, as vast's CLI builds it (JSON-encoded values)."""
    query = {
        "select_filters": json.dumps({}),
        "order_by": json.dumps([{"col": "id", "dir": "asc"}]),
        "limit": json.dumps(PAGE_LIMIT),
    }
    if after_token:
        query["after_token"] = after_token
    return query


class InventoryModule(ProviderInventory):
    NAME = "remote_gpu.trainer.vastai"
    PROVIDER = "vastai"
    to_host = staticmethod(vastai_host)

    def fetch(self, client):
        records = []
        token = None
        seen = set()
        for page in self.pages():
            body = client.get_json("/api/v1/instances/", page_query(token))
            if not isinstance(body, dict) or not isinstance(body.get("instances"), list):
                raise ProviderAPIError("vastai: page %d of /api/v1/instances/ has no list 'instances'; "
                                       "nothing from this source is used." % page, kind="malformed")
            records.extend(body["instances"])
            token = body.get("next_token")
            if not token:
                break
            if not isinstance(token, str) or token in seen:
                raise ProviderAPIError("vastai: page %d of /api/v1/instances/ repeats or garbles next_token; "
                                       "nothing from this source is used." % page, kind="malformed")
            seen.add(token)
        return records
