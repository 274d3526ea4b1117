#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: instance
short_description: Stop, start or terminate a rented GPU instance through its provider's API
version_added: 0.1.0
author:
  - remote_gpu.trainer maintainers (@remote-gpu)
description:
  - Brings one instance of RunPod, vast.ai, Lambda Cloud or AutoDL 容器实例 Pro to O(state) through the provider's own
    API, and waits until the provider reports that state (or until O(timeout)).
  - Idempotent. It first reads the instance's state; stopping a stopped instance, or terminating one that is gone,
    changes nothing.
  - "The verbs: RunPod C(POST /v1/pods/{id}/stop), C(POST /v1/pods/{id}/start), C(DELETE /v1/pods/{id}); vast.ai
    C(PUT /api/v0/instances/{id}/) with C(state) C(stopped) or C(running), C(DELETE /api/v0/instances/{id}/); Lambda
    C(POST /api/v1/instance-operations/terminate); AutoDL Pro C(POST /api/v1/dev/instance/pro/power_off), C(power_on)
    and C(release)."
  - "The instance's state is read from the provider's own status words by the same table as the inventory plugins
    (C(docs/providers.md)); RunPod's is the API v2 observed C(status) when RunPod answers C(GET /v2/pods/{id}), else
    the v1 C(desiredStatus), the intent. The module waits only while the instance is C(starting) or C(stopping).
    A state that does not change by itself (vast.ai C(frozen), C(exited), C(unknown), C(offline), an outbid bid
    instance; Lambda C(unhealthy), C(preempted); RunPod C(ERROR), a pod that exited while it should run, a spot pod
    the market stopped) is never waited out: the verb is called at once where the provider carries it out from
    there (for example a stop of a frozen vast.ai instance), else the module fails at once (C(error_kind)
    C(instance_unhealthy), C(instance_preempted) or C(instance_unknown)) with what the state means and what to do."
  - A verb that the provider does not have fails with a clear message and calls nothing; so does one that is not
    among the actions the provider lists as valid for the instance now, where it lists them (RunPod API v2
    C(actions), Lambda C(actions)) - C(error_kind) C(action_not_available). Lambda has no stop and no
    start (only terminate). AutoDL Pro releases only a powered-off instance; the module never powers off implicitly
    before a release, so O(state=absent) on a running AutoDL instance fails and asks for O(state=stopped) first.
  - Run it on the controller (C(delegate_to localhost)); it needs no access to the instance itself.
  - "Verified before any verb, when it is given a host: with O(identity) (the registered result of
    M(remote_gpu.trainer.box_identity) on the host) or O(expect_id), the box's own id (RunPod C(RUNPOD_POD_ID),
    vast.ai C(CONTAINER_ID)) must equal O(id), checked before any request, so a wrong id is never touched
    (C(identity_mismatch)). Where the box has no id of its own (Lambda, AutoDL Pro, or a box that sets none), the
    provider's record of O(id) must point at O(expect_address) and O(expect_port), the host's C(ansible_host) and
    C(ansible_port) (C(address_mismatch)). Then an id the provider does not know fails (C(instance_not_found)), and
    so does one it reports as terminated (C(instance_gone)): neither is ever taken for already stopped. RV(identity)
    says what was compared."
  - Without any of these options nothing is verified, and O(state=absent) of an id that the provider does not know
    stays idempotent (C(changed=false), RV(found=false), no failure).
  - The API key is never shown, at any verbosity; messages are scrubbed of it.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
attributes:
  check_mode:
    support: full
    details: Reads the instance's state and reports the verb it would call; calls no verb.
options:
  provider:
    description: The instance's provider.
    type: str
    required: true
    choices: [runpod, vastai, lambda, autodl]
  id:
    description:
      - The provider's id of the instance (RunPod pod id, vast.ai instance id, Lambda instance id, AutoDL Pro
        C(instance_uuid)). The inventory plugins set it as C(provider_id).
    type: str
    required: true
  state:
    description:
      - V(running) starts a stopped instance, V(stopped) stops it (its disk is kept and may still bill), V(absent)
        terminates it (RunPod terminate, vast.ai destroy, Lambda terminate, AutoDL release), which deletes its disks.
      - V(restarted) restarts it where the provider has a verb for it (RunPod API v2 C(POST /v2/pods/{id}/action)
        C(restart), vast.ai C(PUT /api/v0/instances/reboot/{id}/), Lambda C(POST /api/v1/instance-operations/restart);
        AutoDL Pro has none) and waits until it runs again; it always acts (C(changed=true)).
    type: str
    required: true
    choices: [running, stopped, absent, restarted]
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
        a proxy or the test fake.
    type: str
  wait:
    description: Wait until the provider reports O(state). Also waits for an instance in a transition to settle first.
    type: bool
    default: true
  timeout:
    description: Seconds to wait for O(state) (and for a transition to settle).
    type: int
    default: 600
  poll_interval:
    description: Seconds between two reads of the instance's state while waiting.
    type: float
    default: 5
  retry_budget:
    description: Seconds spent retrying one request answered with 429, a 5xx or a network error (with backoff).
    type: float
    default: 60
  identity:
    description:
      - The registered result of M(remote_gpu.trainer.box_identity) on the host. Its C(id), when the box has one, must
        equal O(id); when it has none, O(expect_address) is required. A failed, skipped or unreachable result is
        refused (C(identity_unreadable)) - nothing is called.
    type: dict
  expect_id:
    description:
      - The id the box itself says it is, to compare with O(id) before any request. With O(identity), the two must
        agree.
    type: str
  expect_address:
    description:
      - The host's SSH address (C(ansible_host)). Used when no id is expected - the provider's record of O(id) must
        point at this address (equal, or resolving to a shared address) and at O(expect_port).
    type: str
  expect_port:
    description: The host's SSH port (C(ansible_port)), with O(expect_address).
    type: int
    default: 22
  host:
    description: The host's inventory name, for the messages.
    type: str
"""

EXAMPLES = r"""
- name: Stop a RunPod pod (the key comes from RUNPOD_API_KEY on the controller)
  remote_gpu.trainer.instance:
    provider: runpod
    id: "{{ provider_id }}"
    state: stopped
  delegate_to: localhost

- name: Terminate a RunPod pod only if it is the host (its RUNPOD_POD_ID, read on the box)
  remote_gpu.trainer.instance:
    provider: runpod
    id: "{{ runpod_pod_id }}"
    state: absent
    identity: "{{ box }}"  # registered by remote_gpu.trainer.box_identity on the host
    expect_address: "{{ ansible_host | default(inventory_hostname) }}"
    expect_port: "{{ ansible_port | default(22) }}"
    host: "{{ inventory_hostname }}"
  delegate_to: localhost

- name: Terminate a Lambda instance without waiting
  remote_gpu.trainer.instance:
    provider: lambda
    id: "{{ lambda_instance_id }}"
    state: absent
    wait: false
  delegate_to: localhost

- name: Reboot a vast.ai instance whose container exited (a crash)
  remote_gpu.trainer.instance:
    provider: vastai
    id: "{{ vastai_instance_id }}"
    state: restarted
  delegate_to: localhost

- name: Power off, then release, an AutoDL Pro instance
  remote_gpu.trainer.instance:
    provider: autodl
    id: "{{ autodl_instance_uuid }}"
    state: "{{ item }}"
  loop: [stopped, absent]
  delegate_to: localhost
"""

RETURN = r"""
provider:
  description: The provider.
  type: str
  returned: always
  sample: runpod
id:
  description: The instance's id.
  type: str
  returned: always
  sample: fakepod0001
state:
  description: The wanted state.
  type: str
  returned: always
  sample: stopped
previous:
  description:
    - The state the provider reported before (running, stopped, absent, transition, or one that does not change by
      itself - preempted, unhealthy, unknown).
  type: str
  returned: when the state could be read
  sample: running
current:
  description: The state the provider reports at the end (the wanted one, unless the wait timed out or O(wait=false)).
  type: str
  returned: when the state could be read
  sample: stopped
provider_status:
  description:
    - The provider's own status word at the end (RunPod API v2 C(status) with the v1 C(desiredStatus), vast.ai
      C(actual_status) with C(intended_status), Lambda and AutoDL C(status)).
  type: str
  returned: when the state could be read
  sample: EXITED (desired EXITED)
provider_state:
  description:
    - The state at the end as the inventory plugins name it - running, starting, stopping, stopped, preempted,
      unhealthy, terminated, unreachable_direct or unknown.
  type: str
  returned: when the state could be read
  sample: stopped
message:
  description: What the instance's state meant and what to do, when it needed a person (preempted, unhealthy, ...).
  type: str
  returned: when the state needed a person
  sample: vast.ai instance 9000011 is frozen (intended frozen) ...
verb:
  description: The provider's verb called (or that would be called in check mode); null when nothing was to be done.
  type: str
  returned: always
  sample: stop
request:
  description: The API request of the verb, method and path (no key, no body).
  type: str
  returned: always
  sample: POST /pods/fakepod0001/stop
waited:
  description: Whether the module waited for the provider to report O(state), and reached it.
  type: bool
  returned: always
  sample: true
found:
  description:
    - Whether the provider knows the id (false - not found, a 404 or AutoDL's not-found code). An id that is not found
      is never "stopped" - with a check asked for the module fails (C(instance_not_found)); without one, O(state=absent)
      changes nothing.
  type: bool
  returned: when the state could be read
  sample: true
identity:
  description:
    - What was verified before the verb - C(by) (V(id), V(address), or null when nothing was asked), C(expected) (the
      box's id, or the host's address:port), C(source) (where the expected value came from), C(observed) (the id the
      verb uses, or the address:port of the provider's record) and C(match).
  type: dict
  returned: always
  sample: {"by": "id", "expected": "fakepod0001", "source": "/proc/1/environ", "observed": "fakepod0001", "match": true}
error_kind:
  description:
    - A stable code when the module failed, among them C(identity_mismatch), C(address_mismatch), C(instance_not_found),
      C(instance_gone), C(identity_unreadable), C(nothing_to_verify), C(instance_unhealthy), C(instance_preempted),
      C(instance_unknown), C(action_not_available), C(not_reached) (the wait ended without the wanted state), and the API's own (C(auth),
      C(http), C(absent), C(unsupported), ...).
  type: str
  returned: on failure
  sample: identity_mismatch
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_http import ProviderAPIError, scrub
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_identity import (
    check_address, check_found, check_id, expectation, record_address)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_lifecycle import (
    PROVIDERS, STUCK, Lifecycle, make_client, make_v2_client, plan)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.redact import url_secrets


def run(module, result):
    params = module.params
    provider, pid, state = params["provider"], str(params["id"] or "").strip(), params["state"]
    env_var = PROVIDERS[provider]["env_var"]
    if not pid:
        module.fail_json(msg="%s: id is empty; give the provider's id of the instance (provider_id)." % provider,
                         **result)
    key = params["api_key"] if params["api_key"] not in (None, "") else os.environ.get(env_var, "")
    key = (key or "").strip()
    if not key:
        module.fail_json(msg="%s: no API key. Set the environment variable %s on the controller, or the option "
                             "api_key." % (provider, env_var), **result)
    host = params["host"]
    expected = expectation(params["identity"], params["expect_id"], params["expect_address"], params["expect_port"])
    if expected["by"] == "id":
        result["identity"] = {"by": "id", "expected": expected["id"], "source": expected["source"], "observed": pid,
                              "match": expected["id"] == pid}
    check_id(provider, pid, expected, host)  # before any request: a wrong id is never touched
    client = make_client(provider, key, params["api_url"], retry_budget=params["retry_budget"])
    v2 = make_v2_client(key, params["api_url"], retry_budget=params["retry_budget"]) if provider == "runpod" else None
    life = Lifecycle(provider, client, v2_client=v2)
    interval = max(0.05, float(params["poll_interval"]))
    current, raw = life.read(pid)
    result.update(previous=current, current=current, provider_status=raw, found=life.found,
                  provider_state=life.state["state"] if life.state else None)
    if life.state and life.state.get("warning"):
        module.warn(life.state["warning"])
    if expected["by"] is not None:
        check_found(provider, pid, life.found, current, host)
    if expected["by"] == "address":
        observed = record_address(provider, life.record, life.snapshot(pid) if provider == "autodl" else None)
        result["identity"] = {"by": "address", "expected": "%s:%s" % (expected["address"], expected["port"]),
                              "source": expected["source"], "match": False,
                              "observed": "%s:%s" % observed if observed[0] else None}
        check_address(provider, pid, expected, observed, host)
        result["identity"]["match"] = True
    if current == "transition" and params["wait"]:  # only starting/stopping: they end by themselves
        current, raw = life.settle(pid, params["timeout"], interval)
        result.update(current=current, provider_status=raw,
                      provider_state=life.state["state"] if life.state else None)
    if life.state and life.state.get("message"):
        result["message"] = life.state["message"]
    request = plan(provider, state, current, pid, life.state)
    if request is None:
        return result
    result.update(changed=True, verb=request["name"], request="%s %s" % (request["method"], request["path"]))
    if module.check_mode:
        return result
    life.act(request)
    if params["wait"]:
        wanted = "running" if state == "restarted" else state
        before = current
        reached, current, raw = life.wait_for(pid, wanted, params["timeout"], interval, before=before)
        result.update(current=current, provider_status=raw, waited=reached,
                      provider_state=life.state["state"] if life.state else None)
        what = (life.state or {}).get("message") or ""
        if not reached and current in STUCK and current != before:
            module.fail_json(msg="%s: called %s on %s, and the provider now reports %s (%s), which does not change "
                                 "by itself, so the module stopped waiting. %s"
                                 % (provider, request["name"], pid, current, raw, what),
                             error_kind="instance_%s" % current, **result)
        if not reached:
            module.fail_json(msg="%s: called %s on %s, but after %d s the provider still reports %s (%s), not %s.%s"
                                 % (provider, request["name"], pid, params["timeout"], current, raw, wanted,
                                    (" " + what) if what else ""), error_kind="not_reached", **result)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            provider=dict(type="str", required=True, choices=sorted(PROVIDERS)),
            id=dict(type="str", required=True),
            state=dict(type="str", required=True, choices=["running", "stopped", "absent", "restarted"]),
            api_key=dict(type="str", no_log=True),
            api_url=dict(type="str"),
            wait=dict(type="bool", default=True),
            timeout=dict(type="int", default=600),
            poll_interval=dict(type="float", default=5),
            retry_budget=dict(type="float", default=60),
            identity=dict(type="dict"),
            expect_id=dict(type="str"),
            expect_address=dict(type="str"),
            expect_port=dict(type="int", default=22),
            host=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    secret = module.params["api_key"] or os.environ.get(PROVIDERS[module.params["provider"]]["env_var"])
    module.no_log_values.update(url_secrets(module.params["api_url"]))  # user:password@ in api_url: never shown
    result = {"changed": False, "provider": module.params["provider"], "id": str(module.params["id"] or "").strip(),
              "state": module.params["state"], "verb": None, "request": None, "waited": False,
              "identity": {"by": None, "expected": None, "source": None, "observed": None, "match": None}}
    try:
        module.exit_json(**run(module, result))
    except ProviderAPIError as err:
        module.fail_json(msg=scrub(str(err), secret), error_kind=err.kind, **result)
    except Exception as err:  # pylint: disable=broad-except
        module.fail_json(msg=scrub("%s: unexpected failure: %s: %s" % (module.params["provider"], type(err).__name__,
                                                                       err), secret), **result)


if __name__ == "__main__":
    main()
