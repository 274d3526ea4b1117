#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: play_vars
short_description: Check a playbook's variables, their names and types, once for the whole play, on the controller
version_added: 0.1.0
author:
  - remote_gpu.trainer maintainers (@remote-gpu)
description:
  - Runs on the controller (an action plugin) and needs no connection. Meant to run once per play (C(run_once)); it
    fails when any host has a problem, so that the play stops before it does anything, with every problem named.
  - The variables of a playbook are typed and documented by thin roles of this collection (O(roles)), one per
    playbook (C(launch), C(patrol), C(preflight), C(autopilot), C(teardown)). Entry point C(main) of the role's
    C(meta/argument_specs.yml) holds the settings, each with its type and default (the role's C(defaults/main.yml));
    entry point C(internal) the names the playbook sets itself (registered results, play variables).
  - A variable that carries a role's prefix (its name and C(_), such as C(patrol_)) but that no spec knows, from any
    source (inventory, C(group_vars), C(host_vars), extra variables, the play's variables), stops the play, named,
    with the closest known name suggested (C(patrol_disk_warn_pc), did you mean C(patrol_disk_warn_pct)?). Names
    that another role of the collection documents (the role C(autopilot_timer)'s C(autopilot_timer_*)) are not
    reported.
  - A value of a wrong type (with Ansible's own argument spec validator) stops the play, naming the variable and the
    hosts. A value that is a template is checked as it renders for the host; one that cannot render here (it needs
    a variable of the play) is left to the play.
  - A variable that a spec marks C(required) (launch's C(launch_src) and C(launch_command)) and that a host lacks
    stops the play, named with the hosts that lack it.
  - Each distinct value is checked once, and only reading each host's variables grows with the fleet.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
  - remote_gpu.trainer.attributes.read_only
options:
  roles:
    description:
      - The roles of this collection whose specs type the play's variables, such as C([autopilot, patrol]).
    type: list
    elements: str
    required: true
  hosts:
    description:
      - The hosts whose variables to check.
      - Default the hosts of the play's current batch (C(ansible_play_batch)).
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Check the playbook's variables (names and types) once, on the controller
  remote_gpu.trainer.play_vars:
    roles: [patrol]
  run_once: true
"""

RETURN = r"""
problems:
  description: One message per problem, each naming the variable and the hosts; empty when every variable is valid.
  type: list
  elements: str
  returned: always
  sample: ["patrol_disk_warn_pc is not a variable of this playbook (set for lab-01): did you mean
    patrol_disk_warn_pct? Its patrol_* variables are documented and typed in roles/patrol/meta/argument_specs.yml
    (ansible-doc -t role remote_gpu.trainer.patrol)."]
hosts_checked:
  description: How many hosts' variables were checked.
  type: int
  returned: always
  sample: 32
"""
