#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: box_identity
short_description: Read the rented instance's own id on the box, for a check before any API verb
version_added: 0.1.0
author:
  - remote_gpu.trainer maintainers (@remote-gpu)
description:
  - Reads, on the box, the id that the platform gave this instance, so that the controller can refuse an API verb
    (stop, terminate) aimed at another instance - a stale id after a re-rent, an id typed by hand, a cached inventory.
    Hand the result to M(remote_gpu.trainer.instance) as its O(remote_gpu.trainer.instance#module:identity).
  - "RunPod: C(RUNPOD_POD_ID), which RunPod sets in the pod's container environment (RunPod docs, Pods, References,
    Environment variables). Sources, in this order: the SSH session's environment; C(/proc/1/environ), the
    environment of the container's first process, as the platform created the container (readable by root); and
    C(/etc/rp_environment), where RunPod's container template C(start.sh) exports every C(RUNPOD_*) variable for
    SSH sessions."
  - "vast.ai: C(CONTAINER_ID), the instance id among vast.ai's predefined container variables (vast.ai docs, Docker
    Execution Environment). Sources: the SSH session's environment, C(/proc/1/environ), and C(/etc/environment),
    where vast.ai advises an onstart script to copy the container's variables for SSH sessions."
  - Lambda Cloud and AutoDL 容器实例 Pro give the box no id of its own. The module then returns RV(has_own_id=false)
    and RV(id=null); M(remote_gpu.trainer.instance) matches the provider's record to the host's address and port
    instead.
  - Every source is read bounded, without following a symlink; one that cannot be read (no such file, no permission
    for a non-root user) is listed in RV(sources) with its error and does not fail the module. When the sources that
    set the variable disagree, or its value is not an id, the module fails (C(identity_conflict),
    C(identity_malformed)) - then no one knows which instance this is.
  - Read-only. It never changes anything on the host.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
attributes:
  check_mode:
    support: full
    details: Reads only; the same in check mode.
options:
  provider:
    description:
      - The instance's provider, as the inventory plugins set C(provider) (or the profile's C(trainer_meter_stop.api.provider)).
    type: str
    required: true
    choices: [runpod, vastai, lambda, autodl]
"""

EXAMPLES = r"""
- name: Read the box's own identity before the API verb
  remote_gpu.trainer.box_identity:
    provider: runpod
  register: box

- name: Stop the pod only if it is this box
  remote_gpu.trainer.instance:
    provider: runpod
    id: "{{ runpod_pod_id }}"
    state: stopped
    identity: "{{ box }}"
    expect_address: "{{ ansible_host | default(inventory_hostname) }}"
    expect_port: "{{ ansible_port | default(22) }}"
  delegate_to: localhost
"""

RETURN = r"""
provider:
  description: The provider.
  type: str
  returned: always
  sample: runpod
id:
  description: The instance's own id as the box knows it; null when the platform gives none or no source sets it.
  type: str
  returned: always
  sample: fakepod0001
variable:
  description: The variable that holds the id on this platform; null for Lambda and AutoDL.
  type: str
  returned: always
  sample: RUNPOD_POD_ID
has_own_id:
  description: Whether the platform gives the box an id of its own (RunPod, vast.ai).
  type: bool
  returned: always
  sample: true
source:
  description: The first source that gave RV(id).
  type: str
  returned: always
  sample: /proc/1/environ
conflict:
  description: Whether the sources disagree (then the module fails).
  type: bool
  returned: always
  sample: false
sources:
  description: Each source read, C(source) (session, container or file), C(where), C(value) (null when unset) and C(error).
  type: list
  elements: dict
  returned: always
  sample: [{"source": "container", "where": "/proc/1/environ", "value": "fakepod0001", "error": null}]
error:
  description: A stable code when the box's answer cannot be used (C(identity_conflict), C(identity_malformed)), else null.
  type: str
  returned: always
  sample: null
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.remote_gpu.trainer.plugins.module_utils.box_identity import PLATFORM_IDS, decide, gather

# what AnsibleModule is given: also read by the controller action rent_probe, which runs this module without
# AnsiballZ (plugin_utils/direct) on a new box, at once with preflight's probe
MODULE_OPTIONS = dict(
    argument_spec=dict(provider=dict(type="str", required=True, choices=sorted(PLATFORM_IDS))),
    supports_check_mode=True,
)


def main():
    module = AnsibleModule(**MODULE_OPTIONS)
    provider = module.params["provider"]
    rows = gather(provider, os.environ)
    result = decide(provider, rows)
    result.update(changed=False, provider=provider, sources=rows)
    if result["error"]:
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
