# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller actions take their argument spec from their module's DOCUMENTATION: the options are written once.

    from ansible_collections.remote_gpu.trainer.plugins.modules.pull_verify import DOCUMENTATION
    from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.doc_args import DocumentedAction

    class ActionModule(DocumentedAction):
        DOCUMENTATION = DOCUMENTATION

        def act(self, result, args, task_vars):
            ...  # args: validated, with the documented defaults

An action that needs its own ``run()`` can still use ``SPEC = argument_spec(DOCUMENTATION)``,
``_VALID_ARGS = valid_args(SPEC)`` (the names and their aliases) and
``self.validate_argument_spec(argument_spec=SPEC)``.
"""

from __future__ import annotations

import yaml

# libyaml's safe loader when PyYAML has it (ten times faster: every run of an action parses its DOCUMENTATION)
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.remote_gpu.trainer.plugins.module_utils.redact import redact, redact_data
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.redact import run_secrets

# The keys of an option's documentation that are also keys of an argument spec.
_SPEC_KEYS = ("type", "required", "default", "choices", "elements", "aliases", "no_log")


def _option_spec(doc):
    spec = dict((key, doc[key]) for key in _SPEC_KEYS if key in doc)
    spec.setdefault("type", "str")
    if "suboptions" in doc:
        spec["options"] = dict((name, _option_spec(sub)) for name, sub in doc["suboptions"].items())
    return spec


def argument_spec(documentation):
    """The argument spec described by a module's DOCUMENTATION string (its ``options``)."""
    options = (yaml.load(documentation, Loader=SAFE_LOADER) or {}).get("options") or {}
    return dict((name, _option_spec(doc)) for name, doc in options.items())


def valid_args(spec):
    """Every name a task may use for the options of ``spec``: the names and their aliases."""
    names = set(spec)
    for option in spec.values():
        names.update(option.get("aliases") or ())
    return frozenset(names)


class DocumentedAction(ActionBase):
    """A controller action whose options are its module's DOCUMENTATION, checked once, before ``act()``.

    A subclass sets ``DOCUMENTATION``; ``SPEC`` and ``_VALID_ARGS`` follow from it. ``run()`` refuses unknown
    options and arguments that do not match the spec (AnsibleActionFail, as Ansible's own actions do), then calls
    ``act(result, args, task_vars)`` with the validated arguments and returns what it returns.
    """

    TRANSFERS_FILES = False
    DOCUMENTATION = ""
    SPEC = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.SPEC = argument_spec(cls.DOCUMENTATION)
        cls._VALID_ARGS = valid_args(cls.SPEC)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _spec, args = self.validate_argument_spec(argument_spec=self.SPEC)
        # every controller action's result and refusal leaves through the one redaction owner
        # the run's secrets, and any value given through one of this action's no_log options
        secrets = run_secrets(task_vars, extra=[str(args[name]) for name, option in self.SPEC.items()
                                                if option.get("no_log") and args.get(name) not in (None, "")])
        try:
            return redact_data(self.act(result, args, task_vars or {}), secrets)
        except AnsibleActionFail as exc:
            raise AnsibleActionFail(redact(exc.message, secrets),
                                    result=redact_data(exc.result, secrets)) from None  # every core has .result

    def act(self, result, args, task_vars):
        """The action itself: ``result`` from ActionBase.run, ``args`` validated against ``SPEC``."""
        raise NotImplementedError


def refused(exc):
    """The failed result of an AnsibleActionFail, on every supported ansible-core: its result with ``failed``,
    ``msg`` and ``changed: false`` (2.19 and 2.20 give them through ``result_contribution``, 2.21 only the
    exception's ``message``)."""
    return dict(exc.result, failed=True, msg=exc.message, changed=False)
