# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A playbook's variables checked against its roles' specs, as pure functions: the names that carry the playbook's
prefix but that no spec knows (usually a misspelling, with the close match suggested), and the values of a wrong
type (Ansible's own ArgumentSpecValidator, with the spec's types).

The action ``remote_gpu.trainer.play_vars`` runs them once per play on the controller. The specs are the roles'
``meta/argument_specs.yml``: entry point ``main`` holds the settings (documented, typed, with their defaults), entry
point ``internal`` the names that the playbook sets itself (registered results, play variables), which are no
settings but may be found among a host's variables (a playbook imported after another, for example).

    specs = {"patrol": {"main": {...options...}, "internal": {...}}}
    check = PlayCheck(specs, other_known={"autopilot_timer_name", ...})
    problems = check.problems({"lab-01": {"patrol_disk_warn_pc": 90}, "lab-02": {...}})
    # ["patrol_disk_warn_pc is not a variable of this playbook (set for lab-01): did you mean patrol_disk_warn_pct?
    #   ..."]
"""

from __future__ import annotations

import difflib
import json

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

SPEC_FILE = "roles/%s/meta/argument_specs.yml"
# How many host names a message lists before it says "and N more".
HOSTS_SHOWN = 5


def entry_options(argument_specs, entry="main", path="argument_specs.yml"):
    """The options of one entry point of a loaded argument_specs.yml ({} when the entry point has none);
    ValueError when the file holds no ``argument_specs`` mapping or ``main`` has no options."""
    specs = argument_specs.get("argument_specs") if isinstance(argument_specs, dict) else None
    if not isinstance(specs, dict):
        raise ValueError("%s has no argument_specs" % path)
    options = (specs.get(entry) or {}).get("options") if isinstance(specs.get(entry) or {}, dict) else None
    if entry == "main" and (not isinstance(options, dict) or not options):
        raise ValueError("%s has no argument_specs.main.options" % path)
    return dict(options or {})


def close_match(name, known):
    """The known name closest to ``name`` (a misspelling's likely meaning), or None when none is close."""
    found = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
    return found[0] if found else None


def _key(value):
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)


def _hosts(hosts):
    hosts = sorted(hosts)
    shown = ", ".join(hosts[:HOSTS_SHOWN])
    return shown + (" and %d more" % (len(hosts) - HOSTS_SHOWN) if len(hosts) > HOSTS_SHOWN else "")


def type_error(option, name, value):
    """ArgumentSpecValidator's message for one value of one option (type, elements, choices), or None when the
    value is valid. A None value is an unset one (YAML's empty value), as Ansible's own argument checks take it."""
    spec = dict((key, option[key]) for key in ("type", "elements", "choices", "options", "no_log") if key in option)
    spec.setdefault("type", "str")
    result = ArgumentSpecValidator({name: spec}).validate({name: value})
    return "; ".join(result.error_messages) or None


class PlayCheck:
    """The checks of one play: ``specs`` {role: {"main": options, "internal": options}}, each role's prefix its
    name and ``_``; ``other_known``: names that other roles' specs know (such as the autopilot_timer role's
    ``autopilot_timer_*``), never reported."""

    def __init__(self, specs, other_known=()):
        self.roles = sorted(specs)
        self.prefixes = tuple(role + "_" for role in self.roles)
        self.options = {}
        for role in self.roles:
            self.options.update(specs[role].get("main") or {})
        self.internal = set()
        for role in self.roles:
            self.internal.update(specs[role].get("internal") or {})
        self.other_known = set(other_known) - set(self.options)
        self._errors = {}

    def owner(self, name):
        """The role whose prefix ``name`` carries (the longest prefix), or None."""
        found = [role for role in self.roles if name.startswith(role + "_")]
        return max(found, key=len) if found else None

    def unknown(self, name):
        """Whether ``name`` carries one of the prefixes but no spec knows it."""
        return (name.startswith(self.prefixes) and name not in self.options and name not in self.internal
                and name not in self.other_known)

    def error(self, name, value):
        """The type error of ``name``'s value (each distinct value checked once), or None."""
        key = (name, _key(value))
        if key not in self._errors:
            self._errors[key] = type_error(self.options[name], name, value)
        return self._errors[key]

    def docs(self, name):
        role = self.owner(name)
        return "%s (ansible-doc -t role remote_gpu.trainer.%s)" % (SPEC_FILE % role, role)

    def missing(self, present, play_names=()):
        """The messages of the required variables (``required: true`` in a spec) that a host lacks, sorted, each
        once with its hosts: ``present`` {host: names the host's own variables hold (inventory, extra variables)};
        ``play_names``: the names the play itself sets (its ``vars:``), which every host has."""
        problems = []
        for name in sorted(option for option, spec in self.options.items() if spec.get("required")):
            where = [host for host, names in present.items() if name not in names and name not in play_names]
            if where:
                problems.append("%s is required and not set (for %s): set it, for example with -e %s=... See %s." % (
                    name, _hosts(where), name, self.docs(name)))
        return problems

    def problems(self, hosts, names=()):
        """The messages of every problem, sorted: ``hosts`` {host: {name: value}} (each host's variables, values
        templated); ``names``: more names seen (the play's own variables), checked by name only.

        A name that no spec knows is reported once, with the hosts that set it and the close match; a value of a
        wrong type once per distinct value, with the hosts that have it.
        """
        unknown, wrong = {}, {}
        for host, variables in hosts.items():
            for name, value in variables.items():
                if not name.startswith(self.prefixes):
                    continue
                if self.unknown(name):
                    unknown.setdefault(name, set()).add(host)
                elif name in self.options:
                    message = self.error(name, value)
                    if message:
                        wrong.setdefault((name, message), set()).add(host)
        for name in names:
            if self.unknown(name):
                unknown.setdefault(name, set())
        problems = []
        for name, where in sorted(unknown.items()):
            match = close_match(name, set(self.options) | self.other_known)
            problems.append("%s is not a variable of this playbook%s%s Its %s_* variables are documented and "
                            "typed in %s." % (
                                name, " (set for %s)" % _hosts(where) if where else "",
                                ": did you mean %s?" % match if match else ".", self.owner(name), self.docs(name)))
        for (name, message), where in sorted(wrong.items()):
            problems.append("%s has a wrong type (for %s): %s. See %s." % (
                name, _hosts(where), message.rstrip("."), self.docs(name)))
        return problems
