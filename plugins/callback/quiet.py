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
version_added: 0.1.0
description:
  - The output of C(ansible.builtin.default), with all of its options, and two differences.
  - With O(display_ok_hosts=false), the default callback hides every ok result, also the messages that
    M(ansible.builtin.debug) (and M(ansible.builtin.assert) with a success message) print for people, such as
    launch's assignment table and its one line per host. This callback still prints those, and hides the
    C(included:) lines of role and task includes, which are ok results too.
  - It also holds back the banner of a play until something is shown under it, so that a play made only of tasks
    that print nothing of their own when they pass (M(ansible.builtin.set_fact), M(ansible.builtin.assert),
    M(ansible.builtin.fail), the collection's profile and variable checks), such as each playbook's profile
    validation, prints no empty C(PLAY [...]) header. Any other task shows its play's banner when it starts.
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

# Actions that print nothing of their own: only their result, which is hidden when ok (a failure, or -v, shows it).
# A play made of these alone (the playbooks' profile validation) prints no banner unless one of its tasks shows
# something. Any other action (debug, or one that prints a table itself) shows its play's banner when it starts.
SILENT_ACTIONS = frozenset("%s%s" % (prefix, name) for prefix in ("", "ansible.builtin.", "ansible.legacy.")
                           for name in ("set_fact", "assert", "fail", "meta", "include_vars")) | frozenset(
    ("remote_gpu.trainer.play_vars", "remote_gpu.trainer.profile_check"))


def silent(task):
    """Whether ``task`` prints nothing unless its result is shown (an include's tasks start on their own)."""
    if isinstance(task, TaskInclude):
        return True
    return bool({getattr(task, "action", None), getattr(task, "resolved_action", None)} & SILENT_ACTIONS)


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

    _pending_play = None

    def _quiet(self):
        return not (self.get_option("display_ok_hosts") or self._display.verbosity > 0)

    def _show_play(self):
        """Print the banner of the play that was held back, before the first thing printed under it."""
        play, self._pending_play = self._pending_play, None
        if play is not None:
            super().v2_playbook_on_play_start(play)

    def v2_playbook_on_play_start(self, play):
        if not self._quiet():
            return super().v2_playbook_on_play_start(play)
        self._play = play  # as the default does; the banner waits for the first thing shown under it
        self._pending_play = play
        return None

    def v2_playbook_on_task_start(self, task, is_conditional):
        if not silent(task):
            self._show_play()
        return super().v2_playbook_on_task_start(task, is_conditional)

    def v2_playbook_on_handler_task_start(self, task):
        self._show_play()
        return super().v2_playbook_on_handler_task_start(task)

    def v2_playbook_on_no_hosts_matched(self):
        self._show_play()
        return super().v2_playbook_on_no_hosts_matched()

    def v2_playbook_on_no_hosts_remaining(self):
        self._show_play()
        return super().v2_playbook_on_no_hosts_remaining()

    def _print_task_banner(self, task):
        self._show_play()
        return super()._print_task_banner(task)

    def v2_runner_retry(self, result):
        self._show_play()
        return super().v2_runner_retry(result)

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
