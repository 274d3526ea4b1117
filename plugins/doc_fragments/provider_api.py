# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """How the modules that talk to a provider's API (instance, instance_info) find it and its key."""

    DOCUMENTATION = r"""
options:
  api_key:
    description:
      - The provider's API key.
      - When unset, the module reads the provider's environment variable on the controller, E(RUNPOD_API_KEY),
        E(VAST_API_KEY), E(LAMBDA_API_KEY) or E(AUTODL_TOKEN).
    type: str
  api_url:
    description:
      - Base URL of the provider's API, as for the inventory plugins (RunPod C(https://rest.runpod.io/v1), vast.ai
        C(https://console.vast.ai), Lambda C(https://cloud.lambda.ai), AutoDL C(https://api.autodl.com)). Change it for
        a proxy or the test fake. The inventory plugins set it as C(provider_api_url).
    type: str
  retry_budget:
    description: Seconds spent retrying one request answered with 429, a 5xx or a network error (with backoff).
    type: float
    default: 60
"""
