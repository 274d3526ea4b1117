#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: instance_info
short_description: Read one GPU instance through the provider's API, as the inventory plugins would see it now
version_added: 0.1.0
author:
  - remote_gpu.trainer maintainers (@remote-gpu)
description:
  - Reads one instance of RunPod, vast.ai, Lambda Cloud or AutoDL 容器实例 Pro through the provider's own API and
    returns what the provider's inventory plugin would set in hostvars for it now (RV(facts)), with its state as the
    inventory plugins name it (RV(state) - running, starting, stopping, stopped, preempted, unhealthy, terminated,
    unreachable_direct or unknown).
  - Meant for a play over a static inventory (the one C(playbooks/rent.yml) writes), whose C(provider_state) was
    frozen when it was written - ask the provider what the instance is now (preempted by the market, stopped,
    terminated, running).
  - "The reads: RunPod C(GET /v1/pods/{id}) and, when RunPod answers it, the API v2 C(GET /v2/pods/{id}) (the
    observed C(status)); vast.ai C(GET /api/v0/instances/{id}/); Lambda C(GET /api/v1/instances/{id}); AutoDL Pro
    C(GET /api/v1/dev/instance/pro/status) and, for a running instance, C(pro/snapshot) (its address and price;
    the list row's other fields, such as C(gpu_spec_uuid) or C(image_uuid), are not read)."
  - The state is read by the same table as the inventory plugins and M(remote_gpu.trainer.instance)
    (C(docs/providers.md)); a running instance that has no SSH address yet is C(starting).
  - An id the provider does not know (a 404, AutoDL's not-found code) is not a failure - RV(found=false) and
    RV(state=terminated).
  - Read-only - it calls no verb and never changes the instance; RV(changed) is always false.
  - Run it on the controller (C(delegate_to localhost)); it needs no access to the instance itself.
  - The API key is never shown, at any verbosity; messages are scrubbed of it.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
  - remote_gpu.trainer.provider_api
  - remote_gpu.trainer.attributes.read_only
options:
  provider:
    description: The instance's provider (the inventory plugins set it as C(provider)).
    type: str
    required: true
    choices: [autodl, lambda, runpod, vastai]
  id:
    description:
      - The provider's id of the instance (RunPod pod id, vast.ai instance id, Lambda instance id, AutoDL Pro
        C(instance_uuid)). The inventory plugins set it as C(provider_id).
    type: str
    required: true
  timeout:
    description: Seconds to wait for the answer of one request.
    type: int
    default: 30
seealso:
  - module: remote_gpu.trainer.instance
"""

EXAMPLES = r"""
- name: Ask the provider what each rented box is now (the key comes from the provider's variable on the controller)
  remote_gpu.trainer.instance_info:
    provider: "{{ provider }}"
    id: "{{ provider_id }}"
    api_url: "{{ provider_api_url | default(omit) }}"
  delegate_to: localhost
  register: now

- name: Stop here when the market took the box back
  ansible.builtin.fail:
    msg: "{{ inventory_hostname }} is {{ now.state }}: {{ now.message }}"
  when: now.state == 'preempted'

- name: Refresh the static inventory's frozen provider_state for the rest of the play
  ansible.builtin.set_fact:
    provider_state: "{{ now.state }}"
    provider_status: "{{ now.facts.provider_status }}"

- name: Read a vast.ai instance by hand
  remote_gpu.trainer.instance_info:
    provider: vastai
    id: "9000001"
  delegate_to: localhost
  register: box
"""

RETURN = r"""
changed:
  description: Always false - the module only reads.
  type: bool
  returned: always
  sample: false
found:
  description: Whether the provider knows the id (false - not found, a 404 or AutoDL's not-found code).
  type: bool
  returned: success
  sample: true
provider:
  description: The provider.
  type: str
  returned: always
  sample: vastai
id:
  description: The instance's id.
  type: str
  returned: always
  sample: "9000001"
state:
  description:
    - The instance's state as the inventory plugins name it - running, starting, stopping, stopped, preempted,
      unhealthy, terminated, unreachable_direct or unknown. A running instance without an SSH address yet is
      V(starting); an id the provider does not know is V(terminated).
  type: str
  returned: success
  sample: preempted
message:
  description:
    - What the state means and what to do, for a state that needs a person (preempted, unhealthy, ...); else null.
  type: str
  returned: success
  sample: vast.ai instance 9000001 is stopped (intended running) ...
address:
  description: The instance's SSH address; null unless RV(state=running).
  type: str
  returned: success
  sample: 198.51.100.1
port:
  description: The instance's SSH port; null unless RV(state=running).
  type: int
  returned: success
  sample: 40001
facts:
  description:
    - What the provider's inventory plugin would set in hostvars for the instance now - C(provider), C(provider_id),
      C(provider_status) (the provider's own status word), C(provider_state) (RV(state)), C(provider_state_message)
      (when there is a message), C(gpu_type), C(gpu_count), C(region), C(price_per_hour), C(interruptible),
      C(trainer_price_per_hour), the id under its teardown name (C(runpod_pod_id), C(vastai_instance_id),
      C(lambda_instance_id), C(autodl_instance_uuid)), the curated record under the provider's name (C(runpod),
      C(vastai), C(lambda), C(autodl)), C(provider_api_url), and C(ansible_host) and C(ansible_port) only when
      RV(state=running).
    - For an id the provider does not know - C(provider), C(provider_id), C(provider_state) (V(terminated)) and
      C(provider_status) (null) alone.
  type: dict
  returned: success
  sample: {"provider": "vastai", "provider_id": "9000001", "provider_state": "running", "provider_status": "running",
           "vastai_instance_id": "9000001", "ansible_host": "198.51.100.1", "ansible_port": 40001}
error_kind:
  description:
    - A stable code when the module failed - C(no_key) (no API key; the message names the variable), C(bad_input),
      C(malformed) (a record the module cannot read), and the API's own (C(auth), C(http), C(bad_url), ...).
  type: str
  returned: on failure
  sample: auth
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_hosts import (
    autodl_host, cache_record, lambda_host, runpod_host, vastai_host)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_http import ProviderAPIError, resolve_api_key, scrub
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_lifecycle import (
    PROVIDERS, Lifecycle, make_client, make_v2_client)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_state import provider_state
from ansible_collections.remote_gpu.trainer.plugins.module_utils.redact import url_secrets, without_secrets

TO_HOST = {"runpod": runpod_host, "vastai": vastai_host, "lambda": lambda_host, "autodl": autodl_host}


def autodl_row(life, pid, record):
    """AutoDL Pro: the row autodl_host reads, from ``pro/status`` (a bare status word, or an object) and, for a
    running instance, its ``pro/snapshot`` (the address and price; cache_record and autodl_host keep only those
    fields of it, never the root password)."""
    row = dict(record) if isinstance(record, dict) else {"status": record}
    row.setdefault("uuid", pid)
    if str(row.get("status") or "").strip().lower() == "running":
        snapshot = life.snapshot(pid)
        row["snapshot"] = dict(snapshot) if isinstance(snapshot, dict) else {}
        for key in ("region_name", "region_sign"):  # the list row's region, which the snapshot repeats
            if row["snapshot"].get(key) not in (None, "") and row.get(key) in (None, ""):
                row[key] = row["snapshot"][key]
    return row


def facts_of(host, api_url):
    """The hostvars the provider's inventory plugin sets for ``host`` (provider_hosts' host dict)."""
    facts = dict(host["hostvars"], provider_state=host["state"], provider_api_url=api_url)
    if host["message"]:
        facts["provider_state_message"] = host["message"]
    if host["address"]:  # provider_hosts gives an address to a running host only
        facts.update(ansible_host=host["address"], ansible_port=host["port"])
    return facts


def run(module, result, key):
    params = module.params
    provider, pid = params["provider"], result["id"]
    client = make_client(provider, key, params["api_url"], timeout=params["timeout"],
                         retry_budget=params["retry_budget"])
    v2 = make_v2_client(key, params["api_url"], timeout=params["timeout"],
                        retry_budget=params["retry_budget"]) if provider == "runpod" else None
    life = Lifecycle(provider, client, v2_client=v2)
    life.read(pid)
    if not life.found:
        gone = provider_state(provider, None)["state"]
        result.update(found=False, state=gone, message=None, address=None, port=None,
                      facts={"provider": provider, "provider_id": pid, "provider_state": gone,
                             "provider_status": None})
        return result
    record = autodl_row(life, pid, life.record) if provider == "autodl" else life.record
    # what the inventory plugins keep of a record before they read it: no secret-named field, the curated part only
    record = cache_record(provider, without_secrets(record))
    try:
        host = TO_HOST[provider](record)
    except (ValueError, TypeError, AttributeError) as err:
        raise ProviderAPIError("%s: the provider's record of instance %s cannot be read: %s" % (provider, pid, err),
                               kind="malformed") from None
    if host.get("warning"):
        module.warn(scrub(host["warning"], key))
    running = host["state"] == "running"
    result.update(found=True, state=host["state"], message=host["message"] or None,
                  address=host["address"] if running else None, port=host["port"] if running else None,
                  facts=facts_of(host, params["api_url"] or PROVIDERS[provider]["url"]))
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            provider=dict(type="str", required=True, choices=sorted(PROVIDERS)),
            id=dict(type="str", required=True),
            api_key=dict(type="str", no_log=True),
            api_url=dict(type="str"),
            timeout=dict(type="int", default=30),
            retry_budget=dict(type="float", default=60),
        ),
        supports_check_mode=True,
    )
    provider = module.params["provider"]
    env_var = PROVIDERS[provider]["env_var"]
    secret = module.params["api_key"] or os.environ.get(env_var)
    module.no_log_values.update(url_secrets(module.params["api_url"]))  # user:password@ in api_url: never shown
    result = {"changed": False, "provider": provider, "id": str(module.params["id"] or "").strip()}
    if not result["id"]:
        module.fail_json(msg="%s: id is empty; give the provider's id of the instance (provider_id)." % provider,
                         error_kind="bad_input", **result)
    if module.params["timeout"] <= 0:
        module.fail_json(msg="%s: timeout must be more than 0 seconds, not %d." % (provider, module.params["timeout"]),
                         error_kind="bad_input", **result)
    try:
        key = resolve_api_key(module.params["api_key"], env_var, os.environ, provider)
        module.exit_json(**run(module, result, key))
    except ProviderAPIError as err:
        module.fail_json(msg=scrub(str(err), secret), error_kind=err.kind, **result)
    except Exception as err:  # pylint: disable=broad-except
        module.fail_json(msg=scrub("%s: unexpected failure: %s: %s" % (provider, type(err).__name__, err), secret),
                         **result)


if __name__ == "__main__":
    main()
