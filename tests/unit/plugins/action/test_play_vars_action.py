"""The play_vars action and the specs it reads: the roles patrol, preflight, autopilot and teardown type every
variable their playbooks, the tasks they include and docs/playbooks.md name, each default is the role's (or, for the
autopilot's opt-ins and limits, plugin_utils/autopilot.py's), and the action fails the play naming the variable."""

from __future__ import annotations

import pathlib
import re

import pytest
import yaml

from ansible.errors import AnsibleActionFail

from ansible_collections.remote_gpu.trainer.plugins.action import play_vars as action
from ansible_collections.remote_gpu.trainer.plugins.action.autopilot_decide import SETTINGS
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import autopilot

from controller_actions import UNDEFINED, FakeHostVars, make_action, templar

REPO = pathlib.Path(__file__).resolve().parents[4]
# each playbook and the roles that type its variables
PLAYBOOKS = {"patrol": ["patrol"], "preflight": ["preflight"], "autopilot": ["autopilot", "patrol"],
             "teardown": ["teardown"], "rent": ["rent"]}
PREFIXES = ("patrol", "preflight", "autopilot", "teardown", "rent")


def names_in(text):
    return set(re.findall(r"\b(?:%s)_[a-z0-9_]*[a-z0-9]" % "|".join(PREFIXES), text))


def plugin_and_file_names():
    """Modules, actions, bench scripts, task files and roles, which carry the prefixes in their names."""
    paths = list((REPO / "plugins").rglob("*.py")) + list((REPO / "bench").glob("*.py")) + list(
        (REPO / "playbooks" / "tasks").glob("*.yml"))
    return set(path.stem for path in paths) | set(path.name for path in (REPO / "roles").iterdir())


def load(path):
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def specs():
    found, other = action.role_specs(PREFIXES, root=str(REPO))
    return found, other


def test_the_collection_root_holds_the_roles():
    assert (pathlib.Path(action.COLLECTION) / "roles" / "patrol" / "meta" / "argument_specs.yml").is_file()


def test_other_roles_names_are_known_and_an_unknown_role_is_refused(specs):
    _found, other = specs
    assert {"autopilot_timer_state", "autopilot_timer_interval_minutes", "launch_queue", "trainer_data_dir"} <= other
    with pytest.raises(AnsibleActionFail, match="no_such_role is no role of this collection"):
        action.role_specs(["no_such_role"], root=str(REPO))


@pytest.mark.parametrize("role", PREFIXES)
def test_each_default_is_the_roles_and_the_spec_documents_it(specs, role):
    found, _other = specs
    options = found[role]["main"]
    defaults = load(REPO / "roles" / role / "defaults" / "main.yml")
    assert set(defaults) <= set(options), "defaults/main.yml sets names its spec does not type"
    for name, option in options.items():
        assert name.startswith(role + "_")
        if name in defaults:
            assert option.get("default") == defaults[name], name
        elif "default" in option:
            # the autopilot's opt-ins and limits are read per host by autopilot_decide: its defaults are the code's
            assert role == "autopilot" and option["default"] == autopilot.DEFAULTS[name[len("autopilot_"):]], name
    assert not set(found[role]["internal"]) & set(options)


def test_the_autopilot_spec_types_every_setting_the_decide_action_reads(specs):
    found, _other = specs
    assert set("autopilot_" + key for key in SETTINGS) | {"autopilot_job"} <= set(found["autopilot"]["main"])


@pytest.mark.parametrize("playbook, roles", sorted(PLAYBOOKS.items()))
def test_every_name_a_playbook_uses_is_in_its_roles_specs(specs, playbook, roles):
    found, _other = specs
    text = (REPO / "playbooks" / ("%s.yml" % playbook)).read_text()
    for included in re.findall(r"tasks/([a-z_]+\.yml)", text):
        text += (REPO / "playbooks" / "tasks" / included).read_text()
    known = set()
    for role in roles:
        known |= set(found[role]["main"]) | set(found[role]["internal"])
    used = set(name for name in names_in(text) if name.startswith(tuple(role + "_" for role in roles)))
    used -= {"autopilot_acting", "autopilot_replacements"} | plugin_and_file_names()  # groups of the inventory, no variables
    assert used - known == set()
    # and every registered result, play or task variable with the prefix is listed as internal
    playbook_data = load(REPO / "playbooks" / ("%s.yml" % playbook))
    set_by_play = set()

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("register"), str):
                set_by_play.add(node["register"])
            set_by_play.update(key for key in (node.get("vars") or {}) if isinstance(node.get("vars"), dict))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(playbook_data)
    for included in re.findall(r"tasks/([a-z_]+\.yml)", (REPO / "playbooks" / ("%s.yml" % playbook)).read_text()):
        walk(load(REPO / "playbooks" / "tasks" / included))
    internal = set()
    for role in roles:
        internal |= set(found[role]["internal"])
    mine = set(name for name in set_by_play if name.startswith(tuple(role + "_" for role in roles)))
    assert mine - internal == set()


def test_every_name_the_docs_and_plugins_use_is_known(specs):
    found, other = specs
    known = set(other)
    for role in PREFIXES:
        known |= set(found[role]["main"]) | set(found[role]["internal"])
    text = (REPO / "docs" / "playbooks.md").read_text() + (REPO / "docs" / "roles.md").read_text()
    for path in sorted((REPO / "plugins").rglob("*.py")) + sorted((REPO / "roles").rglob("*.yml")):
        text += path.read_text()
    unknown = names_in(text) - known - plugin_and_file_names()
    # no variables of the playbooks: the functions that build a row, an example's variable (notify), the three
    # modules' registered results in fleet_report's example, play_vars' example of a misspelling
    unknown -= {"patrol_row", "preflight_row", "autopilot_events", "preflight_storage", "preflight_gpu",
                "preflight_env", "patrol_disk_warn_pc", "rent_records"}
    assert unknown == set()


def run(hosts, roles=("patrol",), play_vars=None):
    act = make_action(action.ActionModule, {"roles": list(roles)}, name="remote_gpu.trainer.play_vars")
    act._templar = templar()  # pylint: disable=protected-access
    task_vars = {"inventory_hostname": "lab-01", "hostvars": FakeHostVars(hosts), "ansible_play_batch": list(hosts)}
    task_vars.update(play_vars or {})
    return act.run(task_vars=task_vars)


def test_a_misspelled_name_fails_the_task_naming_it_and_the_close_match():
    result = run({"lab-01": {"patrol_disk_warn_pc": 90, "trainer_data_dir": "/data"}, "lab-02": {}})
    assert result["failed"] is True and result["hosts_checked"] == 2
    assert "patrol_disk_warn_pc is not a variable of this playbook (set for lab-01): did you mean " \
           "patrol_disk_warn_pct?" in result["msg"]


def test_a_wrong_type_fails_the_task_naming_it():
    result = run({"lab-01": {"patrol_stale_minutes": "half an hour"}})
    assert result["failed"] is True
    assert result["problems"] == [p for p in result["problems"] if p.startswith("patrol_stale_minutes has a wrong")]
    assert "unable to convert to int" in result["msg"]


def test_valid_variables_registered_results_and_the_timers_pass():
    result = run({"lab-01": {"patrol_stale_minutes": "45", "patrol_probe": {"jobs": []}, "autopilot_heal": "yes",
                             "autopilot_timer_state": "absent", "autopilot_notify_sinks": [{"type": "slack"}],
                             "patrol_strict": True}},
                 roles=("autopilot", "patrol"))
    assert not result.get("failed") and result["problems"] == [], result
    assert result["msg"] == "1 host(s): every autopilot_*, patrol_* variable is known and well typed"


def test_a_value_that_cannot_render_here_is_left_to_the_play():
    result = run({"lab-01": {"patrol_stale_minutes": UNDEFINED}})
    assert not result.get("failed"), result


def test_a_play_variable_is_checked_by_name_and_its_value_as_this_host_sees_it():
    result = run({"lab-01": {}, "lab-02": {}}, play_vars={"patrol_stale_minute": 3, "patrol_stale_minutes": 30})
    assert result["failed"] is True
    assert result["problems"] == [
        "patrol_stale_minute is not a variable of this playbook: did you mean patrol_stale_minutes? Its patrol_* "
        "variables are documented and typed in roles/patrol/meta/argument_specs.yml (ansible-doc -t role "
        "remote_gpu.trainer.patrol)."]
    result = run({"lab-01": {}}, play_vars={"patrol_strict": "sometimes", "patrol_run_dir": UNDEFINED})
    assert len(result["problems"]) == 1 and result["problems"][0].startswith(
        "patrol_strict has a wrong type (for lab-01)")
