# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The default callback's screen output, where hiding the ok results still prints what a task says to people."""

from __future__ import annotations

DOCUMENTATION = r"""
name: quiet
type: stdout
short_description: the default output, with ok results hidden but the reports that tasks print kept
version_added: 1.0.0
description:
  - The output of C(ansible.builtin.default), with all of its options, and one difference.
  - With O(display_ok_hosts=false), the default callback hides every ok result, also the messages that
    M(ansible.builtin.debug) (and M(ansible.builtin.assert) with a success message) print for people, such as
    launch's assignment table and its one line per host. This callback still prints those, and hides the
    C(included:) lines of role and task includes, which are ok results too.
  - With C(-v) or more, it prints every ok result, as the default callback does with O(display_ok_hosts=true).
  - Changed, failed and unreachable results, warnings, the recap and, with O(display_ok_hosts=true), everything else
    print exactly as the default callback prints them.
  - The collection's C(ansible.cfg) selects it with O(display_skipped_hosts=false) and O(display_ok_hosts=false).
    Outside the checkout, set the same in your own C(ansible.cfg) (C([defaults]) C(stdout_callback),
    C(display_skipped_hosts), C(display_ok_hosts)) or the environment (E(ANSIBLE_STDOUT_CALLBACK),
    E(ANSIBLE_DISPLAY_SKIPPED_HOSTS), E(ANSIBLE_DISPLAY_OK_HOSTS)).
extends_documentation_fragment:
  - ansible.builtin.default_callback
  - ansible.builtin.result_format_callback
requirements:
  - set as stdout callback in configuration
"""

from ansible.playbook.task_include import TaskInclude
from ansible.plugins.callback.default import CallbackModule as DefaultCallback


def says_something(result):
    """Whether an ok result carries a message for people: debug's (and assert's success message) are always shown
    by the default callback when ok results are shown at all."""
    data = getattr(result, "result", None)
    if data is None:
        data = getattr(result, "_result", {})  # ansible-core before 2.19
    task = getattr(result, "task", None) or getattr(result, "_task", None)
    return (isinstance(data, dict) and data.get("_ansible_verbose_always") is True and not data.get("changed")
            and not isinstance(task, TaskInclude))


class CallbackModule(DefaultCallback):
    """The default callback; with display_ok_hosts=false, an ok result that says something is still printed."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "remote_gpu.trainer.quiet"

    def _shown(self, method, result):
        if self.get_option("display_ok_hosts") or not (says_something(result) or self._display.verbosity > 0):
            return method(result)
        self.set_option("display_ok_hosts", True)
        try:
            return method(result)
        finally:
            self.set_option("display_ok_hosts", False)

    def v2_runner_on_ok(self, result):
        task = getattr(result, "task", None) or getattr(result, "_task", None)
        if isinstance(task, TaskInclude) and not (self.get_option("display_ok_hosts") or self._display.verbosity > 0):
            return None  # the default prints the include's banner, with nothing under it
        return self._shown(super().v2_runner_on_ok, result)

    def v2_runner_item_on_ok(self, result):
        return self._shown(super().v2_runner_item_on_ok, result)

    def v2_playbook_on_include(self, included_file):
        if self.get_option("display_ok_hosts") or self._display.verbosity > 0:
            super().v2_playbook_on_include(included_file)
