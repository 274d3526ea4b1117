# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The platform profile's checks, as pure functions: the schema (roles/profile/meta/argument_specs.yml, validated
with Ansible's own ArgumentSpecValidator) and the checks that a schema cannot express.

The action ``remote_gpu.trainer.profile_check`` runs them once per play on the controller, for every distinct
profile among the play's hosts (hosts whose ``trainer_*`` values are equal share one check).

    spec = spec_options(yaml.safe_load(text))
    problems, checked = fleet_problems(spec, {"box1": {"trainer_profile": "autodl", ...}, ...})
    # {"box1": ["Profile 'autodl' for box1 sets unknown key(s) ..."]}: only the hosts with a problem;
    # checked: how many distinct profiles were checked
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

PREFIX = "trainer_"
SPEC_FILE = "roles/profile/meta/argument_specs.yml"
MONTH = re.compile(r"20[0-9]{2}-(0[1-9]|1[0-2])$")


def spec_options(argument_specs):
    """The options of the role's ``main`` entry point, from the loaded argument_specs.yml; ValueError if absent."""
    try:
        options = argument_specs["argument_specs"]["main"]["options"]
    except (KeyError, TypeError):
        options = None
    if not isinstance(options, dict) or not options:
        raise ValueError("%s has no argument_specs.main.options" % SPEC_FILE)
    return options


def profile_values(variables):
    """The ``trainer_*`` variables of one host, from all its variables."""
    return dict((name, value) for name, value in variables.items() if name.startswith(PREFIX))


def has_template(value):
    """Whether ``value`` (a string, or a list or dict of them, nested) holds Jinja syntax that templating changes."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value or "{#" in value
    if isinstance(value, Mapping):
        return any(has_template(key) or has_template(item) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return any(has_template(item) for item in value)
    return False


def profile_key(values):
    """A hashable key of a host's ``trainer_*`` values: hosts with equal keys have the same profile."""
    return json.dumps(values, sort_keys=True, default=repr)


def _json(value):
    """A value as Jinja's ``to_json`` shows it in the messages."""
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return json.dumps(repr(value))


def _is_integer(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _absolute(value):
    return isinstance(value, str) and value.startswith("/")


def schema_errors(spec, values):
    """(error messages, validated values) of ``values`` against the schema ``spec`` (only its own keys).

    The messages are ArgumentSpecValidator's, as Ansible's role argument validation prints them: a missing key
    (``missing required arguments: trainer_data_dir``), a wrongly typed value (``argument 'trainer_tensorboard_port'
    is of type ...``), a value outside its choices.
    """
    known = dict((name, value) for name, value in values.items() if name in spec)
    result = ArgumentSpecValidator(spec).validate(known)
    return list(result.error_messages), result.validated_parameters


def unknown_keys(spec, values):
    """The ``trainer_*`` keys that the schema does not know (usually a misspelling), sorted."""
    return sorted(name for name in values if name.startswith(PREFIX) and name not in spec)


def extra_problems(params):
    """The checks that the schema cannot express, on values that passed the schema (with its types).

    Each problem is the tail of a message that starts with ``Profile '<profile>' for <host>``. The wording is the
    one the role's asserts used before these checks moved to the controller.
    """
    problems = []
    cap, meter = params["trainer_inode_cap"], params["trainer_meter_stop"]
    # only the values that are wrong are named (a message that blames valid values sends the user hunting)
    wrong = []
    if not (cap == "unknown" or (_is_integer(cap) and cap > 0)):
        wrong.append("trainer_inode_cap must be a positive integer or 'unknown' (got %s)" % _json(cap))
    for key in ("trainer_data_dir", "trainer_durable_dir"):
        if not _absolute(params[key]):
            wrong.append("%s must be an absolute path (got %s)" % (key, _json(params[key])))
    if not (meter["verb"] == "manual" or meter["command"] or (meter["api"] or {}).get("provider")):
        wrong.append("trainer_meter_stop needs a command or an api unless its verb is 'manual'")
    if wrong:
        problems.append(" has a wrongly typed value: %s." % "; ".join(wrong))
    prefix, conda = params["trainer_env_prefix"], params["trainer_conda_activate"]
    detach, hook = params["trainer_detach"], params["trainer_onstart_hook"]
    wrong = []
    if not (prefix == "" or _absolute(prefix)):
        wrong.append("trainer_env_prefix must be an absolute path or \"\" (got %s)" % _json(prefix))
    elif prefix == "" and conda:
        wrong.append("trainer_conda_activate needs trainer_env_prefix (got %s with trainer_env_prefix \"\")" % conda)
    if (detach == "onstart") != (len(hook) > 0) or not (hook == "" or _absolute(hook)):
        wrong.append("trainer_onstart_hook must be the absolute path of the platform's onstart script exactly when "
                     "trainer_detach is 'onstart' (got %s with trainer_detach %s)" % (_json(hook), _json(detach)))
    if wrong:
        problems.append(": %s." % "; ".join(wrong))
    logdir, port = params["trainer_tensorboard_logdir"], params["trainer_tensorboard_port"]
    if (len(logdir) > 0) != (port > 0):
        problems.append(
            ": a pinned TensorBoard needs both trainer_tensorboard_logdir and trainer_tensorboard_port (got %s and "
            "%s); a platform without one sets \"\" and 0." % (_json(logdir), port))
    price, currency = params["trainer_price_per_hour"], params["trainer_price_currency"]
    if not price >= 0 or (price != 0 and not currency.strip()):
        problems.append(
            ": trainer_price_per_hour must be a price per hour of 0 or more (0: unknown; got %s), with its "
            "trainer_price_currency (got %s)." % (_json(price), _json(currency)))
    months = [meter["verified"]] + [clock["verified"] for clock in params["trainer_danger_clocks"]]
    if any(not MONTH.match(month) for month in months):
        problems.append(
            ": every 'verified' value in trainer_meter_stop and trainer_danger_clocks must be a month like 2026-06; "
            "got %s." % _json(months))
    return problems


def profile_problems(spec, values):
    """Every problem of one host's ``trainer_*`` values: message tails, as ``extra_problems`` returns them.

    The schema's errors and the unknown keys come first; the other checks run only on values that passed the
    schema (as the role's asserts ran only after Ansible's argument validation passed).
    """
    problems = []
    errors, params = schema_errors(spec, values)
    if errors:
        problems.append(": the schema (%s) rejects it: %s." % (SPEC_FILE, "; ".join(errors)))
    unknown = unknown_keys(spec, values)
    if unknown:
        problems.append(
            " sets unknown key(s) %s. Check the spelling against %s (valid keys: %s)." % (
                ", ".join(unknown), SPEC_FILE, ", ".join(sorted(spec))))
    if not errors:
        problems.extend(extra_problems(params))
    return problems


def message(profile, host, tail):
    """One problem of ``host`` as the message that fails it."""
    return "Profile %s for %s%s" % ("'%s'" % profile if isinstance(profile, str) else _json(profile), host, tail)


def fleet_problems(spec, hosts, errors=None):
    """({host: [messages]} for the hosts whose profile has a problem, the number of distinct profiles checked).

    Each distinct profile is checked once.

    ``hosts``: {host: its ``trainer_*`` values}. ``errors``: {host: {key: why}} for values that could not be
    resolved (an undefined variable in a template, for example); such a host fails naming those keys.
    """
    checked = {}
    out = {}
    for host, values in hosts.items():
        failed = (errors or {}).get(host)
        if failed:
            out[host] = [message(values.get("trainer_profile", "?"), host, ": %s cannot be resolved: %s" % (key, why))
                         for key, why in sorted(failed.items())]
            continue
        key = profile_key(values)
        if key not in checked:
            checked[key] = profile_problems(spec, values)
        if checked[key]:
            out[host] = [message(values.get("trainer_profile", "?"), host, tail) for tail in checked[key]]
    return out, len(checked)
