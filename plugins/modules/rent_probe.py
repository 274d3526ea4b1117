#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rent_probe
short_description: Probe each newly rented box as soon as it answers, and give back a FAIL one at once
version_added: 0.1.0
author:
  - remote_gpu.trainer maintainers (@remote-gpu)
description:
  - Runs on the controller (an action plugin), once for the new instances of a rent (C(playbooks/rent.yml) gives it
    those that M(remote_gpu.trainer.instance) O(remote_gpu.trainer.instance#module:state=present) created with
    C(wait=false)). Each instance is handled on its own, at once with the others, and never waits for them.
  - "For each one: read the provider's record every O(poll_interval) seconds until the provider reports it running
    with an SSH address (the state table of the inventory plugins); wait until its SSH port answers; run preflight's
    probe (M(remote_gpu.trainer.preflight_probe), one SSH execution, without AnsiballZ) and, at the same time, read
    the box's own id (M(remote_gpu.trainer.box_identity))."
  - "A box that is FAIL, or whose probe did not answer, or that never ran, is destroyed at once through the API
    (the verb of M(remote_gpu.trainer.instance) O(remote_gpu.trainer.instance#module:state=absent)), after the same
    identity check: the box's own id (vast.ai C(CONTAINER_ID), RunPod C(RUNPOD_POD_ID)) must be the instance's id;
    where the box gives none (Lambda, or an id it could not read), the provider's record must point at the address
    that was probed. A box whose identity does not match is never destroyed: the task fails and names it."
  - "A box that the controller could not log in to is C(UNPROBED), not FAIL: ssh refused the controller's own login
    (C(ssh_auth_failed): C(Permission denied), C(Too many authentication failures), after a key file that is missing
    or unreadable too) or the controller's known_hosts settings refused the box's host key
    (C(ssh_host_key_failed): C(Host key verification failed)). Nothing is known of that box, so its machine is not
    judged; this controller cannot use it as configured and it bills, so it is given back like a FAIL one. The result's
    RV(stop_renting) then says what is wrong and what to check, and C(playbooks/rent.yml) rents no more boxes: each
    would fail the same way. A box whose SSH port does not answer within O(ssh_timeout), that resets or closes the
    connection, or whose probe runs past O(ssh_timeout), is the box's fault (C(probe_failed))."
  - "ssh's first-contact notice (C(Warning: Permanently added ... to the list of known hosts.)) is left out of the
    findings."
  - "The seconds billed run from the create call's answer (the instance's C(created_at)) to the destroy's
    acceptance (the provider's answer to the destroy request). Then the module waits, up to O(timeout), until the
    provider reports the instance terminated, and says whether it did (C(destroy_confirmed))."
  - "SSH goes to the address and port of the provider's record with the host's own settings, as push_code's rsync:
    C(ansible_user), C(ansible_ssh_private_key_file), C(ansible_ssh_common_args), C(ansible_ssh_extra_args) and the
    Python of C(ansible_python_interpreter) (else C(trainer_interpreter), else C(/usr/bin/python3)) from each host's
    variables (add it to the play with M(ansible.builtin.add_host) first), with C(-o BatchMode=yes)."
  - The API key is never shown, at any verbosity.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
attributes:
  check_mode:
    support: none
    details: It rents nothing itself, but it destroys boxes; C(playbooks/rent.yml) does not run it in check mode.
options:
  provider:
    description: The instances' provider.
    type: str
    required: true
    choices: [runpod, vastai, lambda]
  instances:
    description:
      - The new instances, as M(remote_gpu.trainer.instance) returns them in RV(remote_gpu.trainer.instance#module:instances)
        - each with C(id), C(name) (its inventory name), C(created_at), C(machine_id), C(offer) and C(price_per_hour).
    type: list
    elements: dict
    required: true
  probes:
    description:
      - "The arguments of M(remote_gpu.trainer.preflight_probe) for each instance, by its C(name): C(storage), C(gpu),
        C(env) (C(fail_on) is always V(never): the verdict is read here). An instance without an entry is FAIL
        (C(probe_failed))."
    type: dict
    required: true
  api_key:
    description:
      - The provider's API key; when unset, the provider's environment variable on the controller (E(RUNPOD_API_KEY),
        E(VAST_API_KEY), E(LAMBDA_API_KEY)).
    type: str
  api_url:
    description: Base URL of the provider's API, as for M(remote_gpu.trainer.instance).
    type: str
  timeout:
    description: Seconds, from its create, that an instance may take until it runs with an SSH address; also the most
      seconds waited for a destroy to be reported.
    type: int
    default: 900
  ssh_timeout:
    description: Seconds an instance that runs may take until its SSH port answers, and the most a probe may take.
    type: int
    default: 300
  poll_interval:
    description: Seconds between two reads of an instance's record while it is not yet running.
    type: float
    default: 5
  retry_budget:
    description: Seconds spent retrying one API request answered with 429, a 5xx or a network error.
    type: float
    default: 60
  known_hosts:
    description:
      - A known_hosts file of the rent's own. A new box has a host key nobody knows yet; with this set, the probe
        accepts the key the box shows on its first contact (C(StrictHostKeyChecking=accept-new), the box having just
        been created through the provider's API), and a kept box's key is written here, replacing any older key
        recorded for its address (another box that had the address before). The kept box's C(hostvars) then carry
        C(ansible_ssh_common_args) that check its key against this file (C(StrictHostKeyChecking=yes)), after the
        box's own SSH arguments, so that every later play verifies it.
      - SSH arguments of the box's own that name a C(UserKnownHostsFile) come first, and win.
      - Unset, the box's SSH settings decide how a new key is taken (with Ansible's default, it is refused, and the
        boxes are given back UNPROBED with C(ssh_host_key_failed), which RV(stop_renting) explains).
    type: path
"""

EXAMPLES = r"""
- name: Rent two boxes, and do not wait for them (rent_probe does)
  remote_gpu.trainer.instance:
    provider: vastai
    state: present
    name: sweep-a
    count: 2
    spec: {gpu: H100_SXM, image: "pytorch/pytorch:latest", max_price: 2.5}
    wait: false
  register: rented

- name: Add the new boxes to the play (their profile's variables)
  ansible.builtin.add_host:
    name: "{{ item.name }}"
    groups: [vastai]
  loop: "{{ rented.instances | selectattr('created') | list }}"

- name: Probe each new box as soon as it answers; give back a FAIL one at once
  remote_gpu.trainer.rent_probe:
    provider: vastai
    instances: "{{ rented.instances | selectattr('created') | list }}"
    probes: >-
      {%- set out = {} -%}
      {%- for box in rented.instances | selectattr('created') -%}
      {%- set _ = out.update({box.name: {'storage': {'paths': ['/workspace']}, 'gpu': {'expected_count': 1}}}) -%}
      {%- endfor -%}{{ out }}
    poll_interval: 2
    known_hosts: "{{ playbook_dir }}/inventories/rented/sweep-a.known_hosts"
  register: judged
"""

RETURN = r"""
boxes:
  description:
    - "One entry per instance, in the order given - C(name), C(id), C(verdict) (PASS, WARN, FAIL or UNPROBED),
      C(finding) (the first FAIL finding, its code and message), C(outcome) (V(kept), V(given back), or V(not given
      back) when its identity did not match or the destroy failed, with C(error)), C(hostvars) (as the inventory plugin would give
      it, with its SSH address), C(machine_id), C(price_per_hour), C(created_at), C(running_at) (when the record was
      first read running with an address), C(answered_at) (SSH answered), C(probe_started_at), C(probed_at),
      C(probe_seconds) (the probe's SSH execution, as the controller timed it), C(probe_seconds_box) (the probe's own
      C(seconds.total)), C(destroy_at) (the destroy's acceptance), C(seconds_billed) (from C(created_at) to
      C(destroy_at); for a kept box, to the end of its probe), C(polls) (reads of its record until it ran; none
      after), C(destroy_confirmed), C(identity) (what was compared), C(host_keys_recorded) (with O(known_hosts): how many
      of a kept box's host keys were written there), C(ssh_command) (for an UNPROBED box: the login the probe tried,
      as a command to try by hand)."
    - "C(verdict) is V(UNPROBED) for a box that the controller could not log in to (C(finding) V(ssh_auth_failed: ...)
      or V(ssh_host_key_failed: ...)): it says nothing of the box or its machine, and the box is given back."
  type: list
  elements: dict
  returned: always
  sample: [{"name": "sweep-a-9000002", "id": "9000002", "verdict": "FAIL", "outcome": "given back",
            "finding": "throttle_active: ...", "seconds_billed": 6.4, "polls": 7}]
stop_renting:
  description:
    - "Null, or why no more boxes should be rented: a box could not be probed because the controller's own SSH login
      (C(ssh_auth_failed)) or host-key settings (C(ssh_host_key_failed)) failed, so every next box would fail the
      same way. It says ssh's words, which boxes were given back unprobed, and what to check (the key that
      C(ansible_ssh_private_key_file) names, ssh-agent, the key registered with the provider, the user)."
  type: str
  returned: always
  sample: "ssh_auth_failed: the controller could not log in to 2 new box(es) over SSH (root@203.0.113.7: Permission
    denied (publickey)). The fault is this controller's SSH login ... Check, then rent again: ..."
"""
