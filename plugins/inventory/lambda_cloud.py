# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: lambda_cloud
short_description: Lambda Cloud instances as inventory hosts, through Lambda's Cloud API
version_added: 0.1.0
description:
  - Lists the account's instances with Lambda's Cloud API (C(GET /api/v1/instances), one unpaged answer whose
    C(data) is the list of instances) and makes each active instance a host of the group C(lambda), addressed at its public
    C(ip), port 22. The SSH user C(ubuntu) comes from C(group_vars/lambda.yml), as for a static inventory.
  - Only an C(active) instance with an IP is running and listed by default; C(booting) is C(starting), C(unhealthy)
    (it bills but is not usable) is C(unhealthy), C(preempted) (Lambda took it back) is C(preempted), C(terminating)
    and C(terminated) are C(stopping) and C(terminated) (see O(include_states)).
  - C(lambda_durable_dir), the profile's durable directory, is where the instance's filesystem is really mounted
    (its C(file_system_mounts) entry, when it was mounted elsewhere at launch), else C(/lambda/nfs/<name>) for the
    first of its C(file_system_names) (also C(lambda_nfs_name)). The instance's C(tags) stay in hostvars
    (C(lambda.tags)) for C(keyed_groups).
  - C(price_per_hour) is the instance type's C(price_cents_per_hour) / 100 (USD). The record has no spot flag, so
    C(interruptible) is false; an instance that Lambda preempts says so in its state.
  - The API key comes from O(api_key) or the environment variable E(LAMBDA_API_KEY), sent as a bearer token.
extends_documentation_fragment:
  - constructed
  - inventory_cache
  - remote_gpu.trainer.provider_inventory
options:
  plugin:
    choices:
      - remote_gpu.trainer.lambda_cloud
  api_url:
    description:
      - Base URL of Lambda's Cloud API (the plugin calls C(<api_url>/api/v1/instances)). Change it for a proxy or the
        test fake.
    default: https://cloud.lambda.ai
"""

EXAMPLES = r"""
# The smallest lambda_cloud.yml (the key comes from LAMBDA_API_KEY) is one line:
#   plugin: remote_gpu.trainer.lambda_cloud
#
# lambda_cloud.yml: grouped by region, 8-GPU boxes in their own group
plugin: remote_gpu.trainer.lambda_cloud
keyed_groups:
  - key: region
    prefix: region
groups:
  lambda_8x: gpu_count == 8
"""

from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_hosts import lambda_host
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_http import ProviderAPIError
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.provider_inventory import ProviderInventory


class InventoryModule(ProviderInventory):
    NAME = "remote_gpu.trainer.lambda_cloud"
    PROVIDER = "lambda"
    FILE_SUFFIX = "lambda_cloud"
    to_host = staticmethod(lambda_host)

    def fetch(self, client):
        body = client.get_json("/api/v1/instances")
        if not isinstance(body, dict) or not isinstance(body.get("data"), list):
            raise ProviderAPIError("lambda: GET /api/v1/instances has no list 'data'; nothing from this source is used.",
                                   kind="malformed")
        return body["data"]
