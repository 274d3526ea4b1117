# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Options shared by the providers' inventory plugins (runpod, vastai, lambda_cloud, autodl).

Ansible merges an option named both here and in a plugin one level deep, the plugin's keys winning: this fragment
owns what is the same for every plugin (O(plugin)'s description, O(api_url)'s type), a plugin adds only its own
(O(plugin)'s choices, O(api_url)'s description naming its endpoint and its default). C(PAGED) is for the plugins
whose list is paged (C(remote_gpu.trainer.provider_inventory.paged)).
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
author:
  - remote_gpu.trainer maintainers (@remote-gpu)
options:
  plugin:
    description: The name of this plugin; the file is used only when it says this.
    required: true
    type: str
  api_url:
    type: str
  api_key:
    description:
      - The provider's API key.
      - When unset, the plugin reads the provider's conventional environment variable (named in the plugin's
        description). Prefer the variable, or a vaulted value, to a key written in the file.
      - The key is sent only in the C(Authorization) header and is scrubbed from every message, at any verbosity.
    type: str
  timeout:
    description: Seconds to wait for one HTTP response.
    type: float
    default: 30
  retry_budget:
    description:
      - Total seconds spent retrying a request answered with 429, a 5xx, a timeout or a refused connection
        (exponential backoff from 1 s, doubling, at most 16 s a wait; C(Retry-After) honoured). Then the source fails,
        at the latest about O(retry_budget) + O(timeout) seconds after the first request.
    type: float
    default: 60
  max_response_bytes:
    description: A response larger than this is refused (the source fails).
    type: int
    default: 33554432
  include_stopped:
    description:
      - Also list stopped instances, in the group C(stopped), with no address (the same as C(stopped) in
        O(include_states)).
      - By default they are left out, since nothing can connect to them.
    type: bool
    default: false
  include_states:
    description:
      - Also list the instances in these states, with no address, in the provider's group (so that its profile's
        C(group_vars) apply) and the group named like their state, never in the group C(running). By default only
        C(running) instances are listed, so that a play over C(all) or the provider's group touches only boxes it
        can reach; with this option, target C(running) to skip the others. The autopilot reports a box listed with
        C(preempted) as preempted, not as unreachable.
      - Every instance, listed or not, has its state read from the provider's own status words (see
        C(docs/providers.md)); one left out in C(starting), C(stopping), C(preempted), C(unhealthy),
        C(unreachable_direct) or C(unknown) is named in a warning that says what its state means and what to do.
    type: list
    elements: str
    choices: [starting, stopping, stopped, preempted, unhealthy, terminated, unreachable_direct, unknown]
    default: []
  filters:
    description:
      - Jinja2 conditionals over each host's variables (those this plugin sets, before O(compose)); a host is kept
        only when all of them are true. Example C(gpu_type is search('H100')).
    type: list
    elements: str
    default: []
notes:
  - The configuration file's name must end in the plugin's name and C(.yml) or C(.yaml) (C(runpod.yml),
    C(vastai.yml), C(lambda_cloud.yml), C(autodl.yml)).
  - The plugin's running hosts join the group named like the platform profile, so C(group_vars/<profile>.yml) applies
    and C(-l <profile>) works, and the group C(running). An instance in any other state (still starting, stopped,
    preempted by the market, unhealthy, a RunPod pod without direct SSH, an unknown status word) is left out, with a
    warning, unless O(include_states) names its state.
  - On an API error (bad key, rate limit or 5xx past the retry budget, a malformed or truncated answer, a failed
    page) the whole source fails; no partial list is used, and the inventory cache is not overwritten. Set
    C(unparsed_is_failed = True) in the C([inventory]) section of C(ansible.cfg) to stop a playbook run on it.
  - Hostvars, the same for every provider, are C(provider), C(provider_id), C(provider_status), C(gpu_type),
    C(gpu_count), C(region), C(price_per_hour), C(interruptible), C(provider_state) (the state read from
    C(provider_status)), C(provider_state_message) (what a state that needs a person means),
    C(trainer_price_per_hour) (for the idle billing check), the id under the name that the profile's teardown verb
    reads (C(runpod_pod_id), C(vastai_instance_id), C(lambda_instance_id), C(autodl_instance_uuid)),
    C(provider_api_url) (the O(api_url) the host came from, which teardown's M(remote_gpu.trainer.instance) uses too),
    plus a curated copy of the provider's record under the provider's name (environment variables, passwords and
    tokens are left out).
"""

    PAGED = r"""
options:
  max_pages:
    description: A guard against a server that never stops paging; past it the source fails.
    type: int
    default: 1000
"""
