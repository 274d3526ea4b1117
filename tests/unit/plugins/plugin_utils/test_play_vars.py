"""plugin_utils/play_vars.py: a playbook's variables against its roles' specs, as pure functions (the close match of
a misspelling, one value's type, the unknown names and the wrong types of a whole fleet, each reported once)."""

from __future__ import annotations

import pytest

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import play_vars

PATROL = {
    "main": {
        "patrol_disk_warn_pct": {"type": "int", "default": 85, "description": "x"},
        "patrol_disk_fail_pct": {"type": "int", "default": 95},
        "patrol_stale_minutes": {"type": "int", "default": 30},
        "patrol_strict": {"type": "bool", "default": False},
        "patrol_jobs": {"type": "list", "elements": "dict"},
        "patrol_hosts": {"type": "list", "elements": "str", "default": ["all"]},
    },
    "internal": {"patrol_probe": {"type": "dict"}},
}
AUTOPILOT = {"main": {"autopilot_heal": {"type": "bool", "default": False}}, "internal": {}}
TIMER = {"autopilot_timer_name", "autopilot_timer_state"}


@pytest.mark.parametrize("name, known, expected", [
    ("patrol_disk_warn_pc", ["patrol_disk_warn_pct", "patrol_disk_fail_pct"], "patrol_disk_warn_pct"),
    ("patrol_stale_minuts", ["patrol_stale_minutes", "patrol_strict"], "patrol_stale_minutes"),
    ("patrol_disk_fail", ["patrol_disk_warn_pct", "patrol_disk_fail_pct"], "patrol_disk_fail_pct"),
    ("patrol_zzz", ["patrol_disk_warn_pct", "patrol_strict"], None),
    ("patrol_x", [], None),
])
def test_the_close_match_of_a_misspelling(name, known, expected):
    assert play_vars.close_match(name, known) == expected


def test_the_close_match_is_the_closest_and_does_not_depend_on_order():
    known = ["patrol_disk_fail_pct", "patrol_disk_warn_pct"]
    assert play_vars.close_match("patrol_disk_warn_pc", known) == "patrol_disk_warn_pct"
    assert play_vars.close_match("patrol_disk_warn_pc", list(reversed(known))) == "patrol_disk_warn_pct"


@pytest.mark.parametrize("option, value", [
    ({"type": "int"}, 30), ({"type": "int"}, "30"), ({"type": "int"}, None),
    ({"type": "bool"}, "yes"), ({"type": "bool"}, False),
    ({"type": "float"}, "1.5"), ({"type": "list", "elements": "str"}, "a,b"),
    ({"type": "list", "elements": "dict"}, [{"name": "train"}]), ({"type": "raw"}, {"any": ["thing"]}),
    ({"type": "str", "choices": ["a", "b"]}, "a"),
])
def test_valid_values_have_no_type_error(option, value):
    assert play_vars.type_error(option, "x", value) is None


@pytest.mark.parametrize("option, value, words", [
    ({"type": "int"}, "abc", "unable to convert to int"),
    ({"type": "int"}, [1], "unable to convert to int"),
    ({"type": "bool"}, "maybe", "unable to convert to bool"),
    ({"type": "list", "elements": "dict"}, ["train"], "dict"),
    ({"type": "str", "choices": ["a", "b"]}, "c", "one of"),
])
def test_a_wrong_value_is_named_with_the_validators_words(option, value, words):
    message = play_vars.type_error(option, "patrol_x", value)
    assert "patrol_x" in message and words in message


def test_entry_options_reads_main_and_an_absent_entry_is_empty():
    specs = {"argument_specs": {"main": {"options": {"a": {}}}, "internal": {"options": {"b": {}}}}}
    assert play_vars.entry_options(specs) == {"a": {}}
    assert play_vars.entry_options(specs, "internal") == {"b": {}}
    assert play_vars.entry_options({"argument_specs": {"main": {"options": {"a": {}}}}}, "internal") == {}
    with pytest.raises(ValueError, match="argument_specs.main.options"):
        play_vars.entry_options({"argument_specs": {"main": {}}})
    with pytest.raises(ValueError, match="no argument_specs"):
        play_vars.entry_options([])


def test_a_misspelled_name_stops_with_the_hosts_and_the_close_match():
    check = play_vars.PlayCheck({"patrol": PATROL})
    problems = check.problems({"lab-01": {"patrol_disk_warn_pc": 90}, "lab-02": {"patrol_disk_warn_pc": 90},
                               "lab-03": {"patrol_strict": True}})
    assert problems == [
        "patrol_disk_warn_pc is not a variable of this playbook (set for lab-01, lab-02): did you mean "
        "patrol_disk_warn_pct? Its patrol_* variables are documented and typed in "
        "roles/patrol/meta/argument_specs.yml (ansible-doc -t role remote_gpu.trainer.patrol)."]


def test_a_wrong_type_is_named_once_per_value_with_its_hosts():
    check = play_vars.PlayCheck({"patrol": PATROL})
    problems = check.problems({"a": {"patrol_stale_minutes": "abc"}, "b": {"patrol_stale_minutes": "abc"},
                               "c": {"patrol_stale_minutes": "45"}, "d": {"patrol_stale_minutes": [1]}})
    assert len(problems) == 2
    assert sorted(problem.split(":")[0] for problem in problems) == [
        "patrol_stale_minutes has a wrong type (for a, b)", "patrol_stale_minutes has a wrong type (for d)"]
    assert all("roles/patrol/meta/argument_specs.yml" in problem for problem in problems)


def test_each_distinct_value_is_validated_once(monkeypatch):
    calls = []
    real = play_vars.type_error
    monkeypatch.setattr(play_vars, "type_error", lambda *a: calls.append(a) or real(*a))
    check = play_vars.PlayCheck({"patrol": PATROL})
    hosts = dict(("lab-%02d" % i, {"patrol_stale_minutes": 45, "patrol_strict": "yes"}) for i in range(32))
    assert check.problems(hosts) == []
    assert len(calls) == 2


def test_valid_known_internal_and_other_roles_names_and_other_prefixes_pass():
    check = play_vars.PlayCheck({"autopilot": AUTOPILOT, "patrol": PATROL}, other_known=TIMER)
    hosts = {"lab-01": {"patrol_probe": {"jobs": []}, "autopilot_timer_name": "x", "autopilot_heal": "true",
                        "launch_queue": ["a"], "trainer_data_dir": "/data", "patrol_hosts": "lab-01",
                        "patrol_jobs": [{"name": "train"}], "patrol_disk_warn_pct": None}}
    assert check.problems(hosts, names=["autopilot_heal", "patrol_probe"]) == []


def test_a_name_of_the_play_alone_is_reported_without_hosts():
    check = play_vars.PlayCheck({"patrol": PATROL})
    assert check.problems({}, names=["patrol_strikt"]) == [
        "patrol_strikt is not a variable of this playbook: did you mean patrol_strict? Its patrol_* variables "
        "are documented and typed in roles/patrol/meta/argument_specs.yml (ansible-doc -t role "
        "remote_gpu.trainer.patrol)."]


def test_an_unknown_name_far_from_any_is_reported_without_a_guess():
    check = play_vars.PlayCheck({"autopilot": AUTOPILOT, "patrol": PATROL}, other_known=TIMER)
    problem, = check.problems({"h": {"autopilot_frobnicate": 1}})
    assert problem.startswith("autopilot_frobnicate is not a variable of this playbook (set for h). Its "
                              "autopilot_* variables are documented and typed in roles/autopilot/")
    assert "did you mean" not in problem


def test_a_misspelled_other_roles_name_suggests_that_roles_name():
    check = play_vars.PlayCheck({"autopilot": AUTOPILOT}, other_known=TIMER)
    problem, = check.problems({"h": {"autopilot_timer_stat": "absent"}})
    assert "did you mean autopilot_timer_state?" in problem


def test_many_hosts_are_listed_up_to_a_few():
    check = play_vars.PlayCheck({"patrol": PATROL})
    problem, = check.problems(dict(("lab-%02d" % i, {"patrol_strikt": True}) for i in range(9)))
    assert "(set for lab-00, lab-01, lab-02, lab-03, lab-04 and 4 more)" in problem


def test_a_required_variable_a_host_lacks_is_named_with_those_hosts():
    launch = {"main": {"launch_src": {"type": "str", "required": True},
                       "launch_command": {"type": "str", "required": True},
                       "launch_queue": {"type": "list", "elements": "str", "default": [""]}}}
    check = play_vars.PlayCheck({"launch": launch})
    present = {"lab-01": {"launch_src", "launch_command"}, "lab-02": {"launch_command"}, "lab-03": set()}
    assert check.missing(present) == [
        "launch_command is required and not set (for lab-03): set it, for example with -e launch_command=... See "
        "roles/launch/meta/argument_specs.yml (ansible-doc -t role remote_gpu.trainer.launch).",
        "launch_src is required and not set (for lab-02, lab-03): set it, for example with -e launch_src=... See "
        "roles/launch/meta/argument_specs.yml (ansible-doc -t role remote_gpu.trainer.launch)."]
    # the play's own variables reach every host
    assert check.missing(present, play_names={"launch_src", "launch_command"}) == []
    assert play_vars.PlayCheck({"patrol": PATROL}).missing({"lab-01": set()}) == []
