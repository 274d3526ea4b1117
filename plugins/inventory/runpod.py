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
  - The REST v1 C(desiredStatus) is the intent (RunPod's document calls it "the current expected status"), not what
    the pod does. So the plugin also reads RunPod's API v2 (C(GET /v2/pods)), whose C(status) is the observed one
    (C(PROVISIONING), C(STARTING), C(RUNNING), C(EXITED), C(ERROR), C(TERMINATED)), and prefers it; a pod that
    exited or failed while it should run is C(unhealthy) (a spot pod, C(preempted)), never running. Without the v2
    answer (O(observed_status=false), or it fails, with a warning) only the intent is read, and a C(RUNNING) pod without a
    public IP and a mapping for port 22 yet is C(starting).
  - A running pod that can never get direct SSH (its ports do not expose C(22/tcp), its machine has no public IP, or
    v2 reports no direct endpoint) is C(unreachable_direct), with a message that says how to expose C(22/tcp), since
    RunPod's SSH proxy carries no rsync.
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
  observed_status:
    description:
      - Read each pod's observed status from RunPod's API v2 (C(GET <api_v2_url>/v2/pods)) and prefer it to the v1
        C(desiredStatus).
    type: bool
    default: true
  api_v2_url:
    description:
      - Base URL of RunPod's API v2 (the plugin calls C(<api_v2_url>/v2/pods)).
      - By default C(https://api.runpod.io) when O(api_url) is RunPod's own, else O(api_url) without its trailing
        C(/v1) (a proxy or the test fake that serves both).
    type: str
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
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_http import (
    ProviderAPIError, ProviderHTTP, scrub)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_lifecycle import runpod_v2_url
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
        if self.get_option("observed_status"):
            observed = self._observed(client)
            for pod in body:
                if isinstance(pod, dict) and observed is not None and str(pod.get("id")) in observed:
                    pod["observed"] = observed[str(pod.get("id"))]
        return body

    def v2_url(self):
        return self.get_option("api_v2_url") or runpod_v2_url(self.get_option("api_url"))

    def _observed(self, client):
        """{pod id: its v2 record} from ``GET /v2/pods``, or None (with a warning) when RunPod does not answer it."""
        v2 = ProviderHTTP("runpod", self.v2_url(), client.api_key, self.ENV_VAR, timeout=self.get_option("timeout"),
                          retry_budget=self.get_option("retry_budget"), max_bytes=self.get_option("max_response_bytes"),
                          auth_scheme=self.AUTH_SCHEME)
        try:
            body = v2.get_json("/v2/pods")
            pods = body.get("pods") if isinstance(body, dict) else None
            if not isinstance(pods, list):
                raise ProviderAPIError("runpod: GET /v2/pods has no list 'pods'", kind="malformed")
        except ProviderAPIError as err:
            self.display.warning(scrub("runpod: no observed status (%s); each pod's state is read from its "
                                       "desiredStatus, the intent only." % err, client.api_key))
            return None
        return {str(pod["id"]): pod for pod in pods if isinstance(pod, dict) and pod.get("id") not in (None, "")}
