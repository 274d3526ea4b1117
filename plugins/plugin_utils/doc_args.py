# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller actions take their argument spec from their module's DOCUMENTATION: the options are written once.

    from ansible_collections.remote_gpu.trainer.plugins.modules.pull_verify import DOCUMENTATION
    SPEC = argument_spec(DOCUMENTATION)

    class ActionModule(ActionBase):
        _VALID_ARGS = frozenset(SPEC)
        ...
        _spec, args = self.validate_argument_spec(argument_spec=SPEC)
"""

from __future__ import annotations

import yaml

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
    options = (yaml.safe_load(documentation) or {}).get("options") or {}
    return dict((name, _option_spec(doc)) for name, doc in options.items())
