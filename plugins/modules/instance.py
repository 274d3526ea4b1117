#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: instance
short_description: Rent, stop, start or terminate GPU instances through the provider's API
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
  - "O(state=present) rents: it makes sure that O(count) instances labelled O(name) exist (vast.ai C(label), RunPod
    and Lambda C(name)), creates the missing ones from O(spec), waits until the provider reports each one running with
    an SSH address (the same state table), and returns in RV(instances) the hostvars that the inventory plugin would
    give each one. It is idempotent by O(name): a second run with the same name and count creates nothing."
  - "vast.ai: searches offers (C(POST /api/v0/bundles/) with the GPU name and count), keeps those that fit the spec
    (C(max_price) per hour, C(min_vram_gb), C(min_reliability), C(min_direct_ports), C(regions), and not on a machine
    of O(exclude_machines)), cheapest first, and accepts them (C(PUT /api/v0/asks/{offer_id}/) with C(image),
    C(disk), C(runtype) C(ssh), C(onstart), C(label)); an offer that is gone is skipped for the next one. When fewer
    offers fit than are needed, nothing is rented and the message says which constraint excluded which offers
    (C(error_kind) C(no_offer)). RunPod: C(POST /v1/pods) (C(gpuTypeIds), C(gpuCount), C(imageName),
    C(containerDiskInGb), C(volumeInGb), C(ports) C(22/tcp), C(interruptible), C(cloudType), C(dataCenterIds), the
    public key as C(PUBLIC_KEY)). Lambda: C(POST /api/v1/instance-operations/launch) (C(region_name),
    C(instance_type_name), C(ssh_key_names), C(file_system_names), one instance per request). Field names are those
    of the providers' OpenAPI documents (vendored in the collection's C(tests/fixtures/openapi))."
  - A create request is sent once, never retried (a retried create could rent twice); a failed one leaves the label
    to find on the next run.
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
  - remote_gpu.trainer.provider_api
attributes:
  check_mode:
    support: full
    details: Reads the instance's state and reports the verb it would call; calls no verb. With O(state=present), it
      searches the offers and returns in RV(offers) those it would take, creating nothing.
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
      - Required unless O(state=present).
    type: str
  state:
    description:
      - V(running) starts a stopped instance, V(stopped) stops it (its disk is kept and may still bill), V(absent)
        terminates it (RunPod terminate, vast.ai destroy, Lambda terminate, AutoDL release), which deletes its disks.
      - V(restarted) restarts it where the provider has a verb for it (RunPod API v2 C(POST /v2/pods/{id}/action)
        C(restart), vast.ai C(PUT /api/v0/instances/reboot/{id}/), Lambda C(POST /api/v1/instance-operations/restart);
        AutoDL Pro has none) and waits until it runs again; it always acts (C(changed=true)).
      - V(present) rents O(count) instances labelled O(name) from O(spec) (RunPod, vast.ai, Lambda; not AutoDL).
    type: str
    required: true
    choices: [running, stopped, absent, restarted, present]
  name:
    description:
      - With O(state=present), the rent's name, set as each instance's label (vast.ai C(label), RunPod and Lambda
        C(name)); the instances that carry it are the rent's.
    type: str
  count:
    description: With O(state=present), how many instances labelled O(name) should exist.
    type: int
    default: 1
  spec:
    description:
      - With O(state=present), what to rent, a mapping. C(gpu) (a name or a list - vast.ai C(gpu_name) such as
        C(RTX_4090) or C(H100_SXM), RunPod GPU type ids such as C(NVIDIA H100 80GB HBM3), in the order to try),
        C(gpu_count) (default 1), C(image) (required for vast.ai and RunPod), C(disk_gb) (vast.ai C(disk), RunPod
        C(containerDiskInGb)), C(volume_gb) (RunPod), C(max_price) (per instance and hour, vast.ai; RunPod and Lambda
        refuse it, their create taking no price), C(min_vram_gb),
        C(min_reliability) (0 to 1), C(min_direct_ports) (vast.ai, default 1), C(regions) (vast.ai country codes or
        places, RunPod data center ids, Lambda exactly one region), C(interruptible) (vast.ai bid at C(max_price),
        RunPod spot), C(cloud_type) (RunPod C(SECURE) or C(COMMUNITY)), C(public_key) (RunPod), C(onstart) (vast.ai),
        C(env) (a mapping), and for Lambda C(instance_type), C(ssh_key_names) (exactly one) and C(file_system_names)
        (at most one).
      - An unknown key is refused (C(error_kind) C(bad_spec)).
    type: dict
  exclude_machines:
    description:
      - With O(state=present), machine ids (vast.ai C(machine_id)) whose offers are skipped - the machines a rent
        found bad before (C(reports/bad_machines.json) of C(playbooks/rent.yml)).
    type: list
    elements: str
    default: []
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

- name: Rent two vast.ai RTX 4090 boxes at most 0.50 $/h each (a second run creates nothing)
  remote_gpu.trainer.instance:
    provider: vastai
    state: present
    name: sweep-a
    count: 2
    spec:
      gpu: RTX_4090
      gpu_count: 1
      max_price: 0.5
      min_reliability: 0.98
      image: pytorch/pytorch:latest
      disk_gb: 64
    exclude_machines: "{{ (lookup('ansible.builtin.file', 'reports/bad_machines.json', errors='ignore') or '[]')
      | from_json | map(attribute='machine_id') | list }}"
  delegate_to: localhost
  register: rented

- name: Add the rented boxes to the play
  ansible.builtin.add_host:
    name: "{{ item.name }}"
    groups: [vastai, rented]
    ansible_host: "{{ item.hostvars.ansible_host }}"
    ansible_port: "{{ item.hostvars.ansible_port }}"
    vastai_instance_id: "{{ item.id }}"
  loop: "{{ rented.instances }}"

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
name:
  description: The rent's name (the instances' label).
  type: str
  returned: when O(state=present)
  sample: sweep-a
count:
  description: How many instances were wanted.
  type: int
  returned: when O(state=present)
  sample: 2
existing:
  description: The ids of the instances labelled O(name) before this run.
  type: list
  elements: str
  returned: when O(state=present)
  sample: ["9000004"]
created:
  description: The ids of the instances this run created.
  type: list
  elements: str
  returned: when O(state=present)
  sample: ["9000005"]
offers:
  description:
    - vast.ai - the offers taken (or, in check mode, that would be taken), cheapest first - C(id), C(machine_id),
      C(gpu_name), C(num_gpus), C(price_per_hour), C(reliability), C(geolocation). RunPod and Lambda choose the
      machine themselves - one entry per instance to create, with no id or price.
  type: list
  elements: dict
  returned: when O(state=present)
  sample: [{"id": 7100002, "machine_id": "20002", "gpu_name": "H100_SXM", "num_gpus": 1, "price_per_hour": 2.1}]
excluded:
  description: vast.ai - per constraint (C(max_price), C(min_reliability), C(bad_machine), ...), the offers it excluded.
  type: dict
  returned: when O(state=present)
  sample: {"max_price": [{"id": 7100003, "machine_id": "20003", "price_per_hour": 2.9}]}
instances:
  description:
    - One entry per instance labelled O(name) - C(id), C(name) (C(<name>-<id>)), C(created) (by this run),
      C(created_at) (epoch seconds, when the create call returned), C(running_at), C(state), C(provider_status),
      C(machine_id), C(offer), C(price_per_hour), and C(hostvars) - what the provider's inventory plugin would set
      (C(ansible_host), C(ansible_port), C(provider_id), C(vastai_instance_id) or C(runpod_pod_id), C(price_per_hour),
      C(provider_api_url), ...).
  type: list
  elements: dict
  returned: when O(state=present)
  sample: [{"id": "9000005", "name": "sweep-a-9000005", "created": true, "machine_id": "20002",
            "hostvars": {"ansible_host": "203.0.113.7", "ansible_port": 41022, "vastai_instance_id": "9000005"}}]
error_kind:
  description:
    - A stable code when the module failed, among them C(identity_mismatch), C(address_mismatch), C(instance_not_found),
      C(instance_gone), C(identity_unreadable), C(nothing_to_verify), C(instance_unhealthy), C(instance_preempted),
      C(instance_unknown), C(action_not_available), C(not_reached) (the wait ended without the wanted state), C(bad_spec),
      C(no_offer) (no offer fits the spec), C(not_rented), C(no_key) (no API key; the message names the variable),
      and the API's own (C(auth), C(http), C(absent), C(unsupported), ...).
  type: str
  returned: on failure
  sample: identity_mismatch
"""

import json
import os
import time
import urllib.parse

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_http import ProviderAPIError, resolve_api_key, scrub
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_identity import (
    check_address, check_found, check_id, expectation, record_address)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_lifecycle import (
    PROVIDERS, Lifecycle, make_client, make_v2_client, plan)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_hosts import (
    lambda_host, runpod_host, vastai_host)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_rent import (
    SpecError, check_spec, explain, filter_offers, labelled, lambda_launch_body, machine_id, offer_summary,
    runpod_create_body, vast_ask_body, vast_query)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.redact import url_secrets


def api_key_of(module, provider):
    """The key from the option, else the provider's environment variable (ProviderAPIError no_key naming it)."""
    return resolve_api_key(module.params["api_key"], PROVIDERS[provider]["env_var"], os.environ, provider)


def _list_labelled(provider, client, name):
    """Every instance of the account that carries the rent's label, not terminated (by id)."""
    if provider == "vastai":
        records, token, seen = [], None, set()
        for _page in range(200):
            query = {"select_filters": json.dumps({}), "order_by": json.dumps([{"col": "id", "dir": "asc"}]),
                     "limit": json.dumps(25)}
            if token:
                query["after_token"] = token
            body = client.get_json("/api/v1/instances/", query)
            if not isinstance(body, dict) or not isinstance(body.get("instances"), list):
                raise ProviderAPIError("vastai: /api/v1/instances/ answered no list 'instances'.", kind="malformed")
            records.extend(body["instances"])
            token = body.get("next_token")
            if not token or token in seen:
                break
            seen.add(token)
    elif provider == "runpod":
        records = client.get_json("/pods")
    else:
        body = client.get_json("/api/v1/instances")
        records = body.get("data") if isinstance(body, dict) else None
    if not isinstance(records, list):
        raise ProviderAPIError("%s: the instance list is not a list." % provider, kind="malformed")
    return labelled(provider, records, name)


def _host_of(provider, record):
    to_host = {"vastai": vastai_host, "runpod": runpod_host, "lambda": lambda_host}[provider]
    return to_host(record)


def _create_one(provider, client, spec, name, offer):
    """Create one instance -> its id (vast.ai from ``offer``; RunPod and Lambda choose the machine)."""
    if provider == "vastai":
        answer = client.request_json("PUT", "/api/v0/asks/%s/" % urllib.parse.quote(str(offer["id"]), safe=""),
                                     body=vast_ask_body(spec, name, offer))
        if not isinstance(answer, dict) or answer.get("success") is False or not answer.get("new_contract"):
            raise ProviderAPIError("vastai: offer %s was not accepted: %s" % (
                offer["id"], " ".join(str((answer or {}).get("msg") or answer).split())[:300]), kind="refused")
        return str(answer["new_contract"])
    if provider == "runpod":
        answer = client.request_json("POST", "/pods", body=runpod_create_body(spec, name))
        if not isinstance(answer, dict) or not answer.get("id"):
            raise ProviderAPIError("runpod: POST /pods answered no pod id.", kind="malformed")
        return str(answer["id"])
    answer = client.request_json("POST", "/api/v1/instance-operations/launch", body=lambda_launch_body(spec, name))
    ids = ((answer or {}).get("data") or {}).get("instance_ids") if isinstance(answer, dict) else None
    if not isinstance(ids, list) or not ids:
        raise ProviderAPIError("lambda: launch answered no instance_ids.", kind="malformed")
    return str(ids[0])


def _search(client, spec, exclude):
    """vast.ai offers for ``spec`` -> (kept, excluded, seen)."""
    answer = client.request_json("POST", "/api/v0/bundles/", body=vast_query(spec))
    offers = answer.get("offers") if isinstance(answer, dict) else None
    if not isinstance(offers, list):
        raise ProviderAPIError("vastai: the offer search answered no list 'offers'.", kind="malformed")
    kept, excluded = filter_offers(offers, spec, exclude)
    return kept, excluded, len(offers)


def present(module, result):
    """state=present: the instances labelled ``name``, ``count`` of them, created through the API where missing,
    each waited for until it runs with an SSH address."""
    params = module.params
    provider, name = params["provider"], str(params["name"] or "").strip()
    if provider == "autodl":
        module.fail_json(msg="autodl: state=present is not supported (AutoDL Pro's create is not part of this "
                             "module); rent in AutoDL's console.", error_kind="unsupported", **result)
    if not name:
        module.fail_json(msg="%s: state=present needs name: the rent's name, set as every instance's label (vast.ai "
                             "label, RunPod and Lambda name) so that a second run finds them." % provider,
                         error_kind="bad_spec", **result)
    try:
        spec = check_spec(provider, params["spec"])
    except SpecError as err:
        module.fail_json(msg=str(err), error_kind="bad_spec", **result)
    count = params["count"]
    if count < 0:
        module.fail_json(msg="%s: count must be 0 or more, not %d." % (provider, count), error_kind="bad_spec",
                         **result)
    exclude = [str(m) for m in params["exclude_machines"] or []]
    key = api_key_of(module, provider)
    client = make_client(provider, key, params["api_url"], retry_budget=params["retry_budget"])
    once = make_client(provider, key, params["api_url"], retry_budget=0)  # a create is never sent twice
    v2 = make_v2_client(key, params["api_url"], retry_budget=params["retry_budget"]) if provider == "runpod" else None
    existing = _list_labelled(provider, client, name)
    need = max(0, count - len(existing))
    result.update(name=name, count=count, existing=[str(r.get("id")) for r in existing], created=[], offers=[],
                  excluded={}, instances=[])
    ids = [str(r.get("id")) for r in existing]
    created_at = {}
    offers_of = {}
    if need and provider == "vastai":
        kept, excluded, seen = _search(client, spec, exclude)
        result["excluded"] = excluded
        result["offers"] = [offer_summary(o) for o in kept[:need]]
        if len(kept) < need:
            module.fail_json(msg="vastai: %d instance(s) to create, %d offer(s) fit the spec: %s Nothing was rented."
                                 % (need, len(kept), explain(spec, excluded, seen)), error_kind="no_offer", **result)
        if module.check_mode:
            result["changed"] = True
            return result
        tried = []
        for offer in kept:
            if len(result["created"]) >= need:
                break
            try:
                pid = _create_one(provider, once, spec, name, offer)
            except ProviderAPIError as err:
                if err.kind == "auth":
                    raise
                tried.append("%s: %s" % (offer["id"], err))
                module.warn("vastai: offer %s could not be rented (%s); trying the next offer." % (offer["id"], err))
                continue
            created_at[pid] = time.time()
            offers_of[pid] = offer_summary(offer)
            result["created"].append(pid)
            result["changed"] = True
            ids.append(pid)
        if len(result["created"]) < need:
            module.fail_json(msg="vastai: only %d of %d instance(s) could be rented: %s"
                                 % (len(result["created"]), need, "; ".join(tried)[:1200]),
                             error_kind="not_rented", **result)
    elif need:
        gpu_label = ", ".join(spec["gpu"] or [spec.get("instance_type") or ""])
        result["offers"] = [{"id": None, "machine_id": None, "gpu_name": gpu_label, "num_gpus": spec["gpu_count"],
                             "price_per_hour": None}] * need
        if module.check_mode:
            result["changed"] = True
            return result
        for _i in range(need):
            pid = _create_one(provider, once, spec, name, None)
            created_at[pid] = time.time()
            result["created"].append(pid)
            result["changed"] = True
            ids.append(pid)
    if module.check_mode:
        return result
    life = Lifecycle(provider, client, v2_client=v2)
    interval = max(0.05, float(params["poll_interval"]))
    for pid in ids:
        if params["wait"]:
            reached, current, raw = life.wait_for(pid, "running", params["timeout"], interval)
        else:
            current, raw = life.read(pid)
            reached = current == "running"
        host = _host_of(provider, life.record) if isinstance(life.record, dict) else None
        while params["wait"] and reached and host is not None and not host["address"]:
            # running, but no SSH address yet: the state table calls it starting; wait for the address
            if time.time() > created_at.get(pid, time.time()) + params["timeout"]:
                break
            time.sleep(interval)
            current, raw = life.read(pid)
            host = _host_of(provider, life.record) if isinstance(life.record, dict) else None
        entry = {"id": pid, "created": pid in created_at, "created_at": created_at.get(pid),
                 "running_at": time.time(), "provider_status": raw, "state": current,
                 "machine_id": machine_id(provider, life.record), "offer": offers_of.get(pid),
                 "name": "%s-%s" % (name, pid), "hostvars": None}
        if host is not None:
            hostvars = dict(host["hostvars"], provider_api_url=params["api_url"] or PROVIDERS[provider]["url"])
            if host["address"]:
                hostvars.update(ansible_host=host["address"], ansible_port=host["port"])
            entry.update(name="%s-%s" % (name, pid), hostvars=hostvars,
                         price_per_hour=hostvars.get("price_per_hour"))
        result["instances"].append(entry)
        if params["wait"] and not (host and host["address"]):
            what = (life.state or {}).get("message") or ""
            module.fail_json(msg="%s: instance %s (rent %s) did not come up with an SSH address: the provider "
                                 "reports %s (%s).%s It is still billing: destroy it (state=absent, id=%s) or wait."
                                 % (provider, pid, name, current, raw, (" " + what) if what else "", pid),
                             error_kind="not_reached", **result)
    return result


def run(module, result):
    params = module.params
    provider, pid, state = params["provider"], str(params["id"] or "").strip(), params["state"]
    if state == "present":
        return present(module, result)
    if not pid:
        module.fail_json(msg="%s: id is empty; give the provider's id of the instance (provider_id)." % provider,
                         **result)
    key = api_key_of(module, provider)
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
        if not reached and life.stuck:
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
            id=dict(type="str"),
            state=dict(type="str", required=True, choices=["running", "stopped", "absent", "restarted", "present"]),
            name=dict(type="str"),
            count=dict(type="int", default=1),
            spec=dict(type="dict"),
            exclude_machines=dict(type="list", elements="str", default=[]),
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
        required_if=[("state", "running", ["id"]), ("state", "stopped", ["id"]), ("state", "absent", ["id"]),
                     ("state", "restarted", ["id"]), ("state", "present", ["name", "spec"])],
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
