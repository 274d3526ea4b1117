#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: profile_check
short_description: Check the platform profile of every host of the play at once, on the controller
version_added: 0.1.0
author:
  - remote_gpu.trainer maintainers (@remote-gpu)
description:
  - Runs on the controller (an action plugin) and needs no connection. Meant to run once per play (C(run_once)),
    followed by a task that fails each host listed in RV(problems) with its messages, as the role
    C(remote_gpu.trainer.profile) does.
  - Reads the C(trainer_*) variables of every host in O(hosts) from C(hostvars) and resolves their templates.
  - Checks them against the schema of the role C(remote_gpu.trainer.profile) (its C(meta/argument_specs.yml), the
    single source of truth, with Ansible's own argument spec validator), rejects C(trainer_*) keys that the schema
    does not know (usually a misspelling), and runs the checks that a schema cannot express (absolute paths, the
    pinned TensorBoard pair, the onstart hook, the price and its currency, a C(verified) month on every billing or
    teardown fact).
  - Hosts whose C(trainer_*) values are equal share one check. The validation runs once per distinct profile, and
    only reading each host's variables grows with the fleet.
  - Fails itself only when the schema cannot be read; a broken profile is reported in RV(problems), never raised.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
  - remote_gpu.trainer.attributes.read_only
options:
  hosts:
    description:
      - The hosts whose profiles to check.
      - Default the hosts of the play's current batch (C(ansible_play_batch)).
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Check every host's profile once, on the controller
  remote_gpu.trainer.profile_check:
  run_once: true
  register: profile_check

- name: Fail each host whose profile is broken, naming the key
  ansible.builtin.fail:
    msg: "{{ profile_check.problems[inventory_hostname] | join('\n') }}"
  when: inventory_hostname in profile_check.problems
"""

RETURN = r"""
problems:
  description: The messages of each host whose profile has a problem, each naming the key; hosts without a problem
    are absent.
  type: dict
  returned: always
  sample: {"lab-05": ["Profile 'generic_ssh' for lab-05: the schema (roles/profile/meta/argument_specs.yml) rejects
    it: missing required arguments: trainer_data_dir."]}
hosts_checked:
  description: How many hosts were checked.
  type: int
  returned: always
  sample: 32
profiles_checked:
  description: How many distinct profiles (sets of C(trainer_*) values) were checked.
  type: int
  returned: always
  sample: 4
"""
