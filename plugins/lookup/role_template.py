# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: role_template
author:
  - remote_gpu.trainer contributors (@remote-gpu)
version_added: "0.1.0"
short_description: Render a role's template file with the task's variables, without copying them
description:
  - Renders each template file as P(ansible.builtin.template#lookup) does (the same search in the role's
    C(templates/) folder, the same Jinja settings, backslashes as written), for the collection's own small
    templates (the job environment's loader and fragments, the download helper).
  - ansible.builtin.template's lookup deep-copies every variable of the task before each file (ansible-core's own
    comment there asks for a chain map instead), and the variables that grow with the fleet (the play's hosts, the
    groups, launch's assignment of the queue) make that copy cost more on every host the larger the fleet. This
    lookup gives the template a shallow copy of the variables, with O(template_vars) on top.
  - It does not add the variables that ansible.builtin.template's lookup adds (C(ansible_managed), C(template_path)
    and the others), which the collection's templates do not use.
options:
  _terms:
    description: The template files, found as ansible.builtin.template's lookup finds them.
    type: list
    elements: path
    required: true
  template_vars:
    description: Variables given to the templates only, over the task's variables.
    type: dict
    default: {}
seealso:
  - plugin: ansible.builtin.template
    plugin_type: lookup
"""

EXAMPLES = r"""
- name: The job environment's loader, for one more directory
  ansible.builtin.set_fact:
    loader: "{{ lookup('remote_gpu.trainer.role_template', 'jobenv.sh.j2', template_vars={'_job_env_dir': '/data/env.d'}) }}"
"""

RETURN = r"""
_raw:
  description: The rendered text of each file, in the order of the terms.
  type: list
  elements: str
"""

import os

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase
from ansible.template import trust_as_template


class LookupModule(LookupBase):

    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        variables = variables or {}
        template_vars = self.get_option("template_vars")
        rendered = []
        for term in terms:
            path = self.find_file_in_search_path(variables, "templates", term)
            if not path:
                raise AnsibleError("role_template: the template file %s could not be found" % term)
            text = trust_as_template(self._loader.get_text_file_contents(path))
            # Jinja includes: the file's own folder, then each search path's templates/ folder and the path itself,
            # as ansible.builtin.template's lookup gives them
            searchpath = [os.path.dirname(path)]
            for entry in variables.get("ansible_search_path", []):
                searchpath.extend((os.path.join(entry, "templates"), entry))
            # a shallow copy: the template reads the variables, and each template call wraps them anew
            available = dict(variables)
            available.update(template_vars)
            templar = self._templar.copy_with_new_env(available_variables=available, searchpath=searchpath)
            rendered.append(templar.template(text, escape_backslashes=False))
        return rendered
