# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: runpod
short_description: RunPod pods as inventory hosts, through RunPod's REST API
version_added: 0.1.0
description:
  - Lists the account's pods with RunPod's REST API (C(GET /v1/pods?includeMachine=true)) and makes each running pod
    a host of the group C(runpod), addressed at its public IP and the public port that RunPod maps to the pod's
    private port 22.
  - Why REST and not GraphQL C(myself { pods }) - the REST answer carries C(portMappings), the public port for each
    private port, directly, and takes the key in the C(Authorization) header; RunPod's GraphQL examples pass the key
    in the URL (C(?api_key=)), where proxies and logs keep it. The REST list is one unpaged array.
  - A pod that RunPod reports as C(RUNNING) without a public IP or a mapping for port 22 yet goes into the group
    C(starting), with no address, and a warning.
  - The API key comes from O(api_key) or the environment variable E(RUNPOD_API_KEY).
extends_documentation_fragment:
  - constructed
  - inventory_cache
  - remote_gpu.trainer.provider_inventory
options:
  plugin:
    choices:
      - remote_gpu.trainer.runpod
  api_url:
    description:
      - Base URL of RunPod's REST API (the plugin calls C(<api_url>/pods)). Change it for a proxy or the test fake.
    default: https://rest.runpod.io/v1
"""

EXAMPLES = r"""
# The smallest runpod.yml (the key comes from RUNPOD_API_KEY) is one line:
#   plugin: remote_gpu.trainer.runpod
#
# runpod.yml: H100 pods only, grouped by data center, cached for 5 minutes
plugin: remote_gpu.trainer.runpod
filters:
  - gpu_type is search('H100')
keyed_groups:
  - key: region
    prefix: dc
cache: true
cache_plugin: ansible.builtin.jsonfile
cache_connection: ~/.cache/remote_gpu_inventory
cache_timeout: 300
"""

from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_hosts import runpod_host
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_http import ProviderAPIError
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.provider_inventory import ProviderInventory


class InventoryModule(ProviderInventory):
    NAME = "remote_gpu.trainer.runpod"
    PROVIDER = "runpod"
    to_host = staticmethod(runpod_host)

    def fetch(self, client):
        body = client.get_json("/pods", {"includeMachine": "true"})
        if not isinstance(body, list):
            raise ProviderAPIError("runpod: GET /pods answered %s, not the list of pods." % type(body).__name__,
                                   kind="malformed")
        return body
