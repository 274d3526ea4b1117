"""The conditions of the roles' meta end_role tasks name only cheap variables. Ansible judges them in its main
process, one host after another, and ansible-core renders every variable that a template names before it evaluates
the template, whatever branch is taken: a plan or a dozen templated rules named there cost their whole rendering on
every host (3 to 4 s of a relaunch over 128 hosts, docs/architecture.md). What only one branch needs goes through the
vars lookup, which runs only in the branch taken."""

from __future__ import annotations

import pathlib

import jinja2
import yaml
from jinja2 import meta

ROLES = pathlib.Path(__file__).resolve().parents[3] / "roles"


def names(template):
    """The variables (and globals such as lookup) that a Jinja template names."""
    return meta.find_undeclared_variables(jinja2.Environment().parse(template))


def end_role_conditions(role):
    """The conditions of a role's meta end_role tasks, as the templates Ansible makes of them."""
    tasks = yaml.safe_load((ROLES / role / "tasks" / "main.yml").read_text())
    return ["{{ %s }}" % task["when"] for task in tasks if task.get("ansible.builtin.meta") == "end_role"]


def test_the_launch_role_judges_a_host_left_alone_by_its_probe():
    assert end_role_conditions("launch") == ["{{ _launch_left_alone }}"]
    variables = yaml.safe_load((ROLES / "launch" / "vars" / "main.yml").read_text())
    template = variables["_launch_left_alone"]
    assert names(template) == {"_launch_probe", "lookup"}, template
    # the plan and the rules, read through the lookup where the probe was skipped
    assert "lookup('ansible.builtin.vars', '_launch_my_items')" in template
    assert "lookup('ansible.builtin.vars', '_launch_rules_hold')" in template


def test_the_profile_role_ends_on_a_sound_host_by_the_check_s_result():
    assert [names(condition) for condition in end_role_conditions("profile")] == [
        {"inventory_hostname", "profile_check_result"}]
