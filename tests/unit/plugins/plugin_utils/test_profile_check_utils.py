"""The platform profile's checks as pure functions: the role's schema (argument_specs.yml, the one source of truth),
the unknown keys, the checks that a schema cannot express, and one check per distinct profile."""

from __future__ import annotations

import copy
import pathlib

import pytest
import yaml

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import profile_check

REPO = pathlib.Path(__file__).resolve().parents[4]
SPEC = profile_check.spec_options(yaml.safe_load((REPO / profile_check.SPEC_FILE).read_text()))
# the profiles whose trainer_* values hold no template (the others need a host's variables to resolve)
PLAIN = ("autodl", "runpod", "vastai", "paperspace", "china")


def profile(name="autodl"):
    data = yaml.safe_load((REPO / "group_vars" / ("%s.yml" % name)).read_text())
    return profile_check.profile_values(data)


def problems(values, host="box1"):
    """The messages that fail ``host`` for ``values`` (empty: valid)."""
    return profile_check.fleet_problems(SPEC, {host: values})[0].get(host, [])


@pytest.mark.parametrize("name", PLAIN)
def test_every_plain_platform_profile_is_valid(name):
    assert problems(profile(name)) == []


def test_a_templated_profile_is_valid_once_resolved():
    values = profile("generic_ssh")
    home = "/home/ubuntu"
    for key, value in list(values.items()):
        if isinstance(value, str):
            values[key] = value.replace("{{ trainer_home_dir }}", home)
    values["trainer_home_dir"] = home
    values["trainer_storage_tiers"] = [dict(t, path=home + "/proj") for t in values["trainer_storage_tiers"]]
    assert problems(values) == []


def test_the_schema_is_the_roles_argument_specs():
    assert "trainer_data_dir" in SPEC and SPEC["trainer_detach"]["choices"][0] == "tmux"
    with pytest.raises(ValueError, match="argument_specs.main.options"):
        profile_check.spec_options({"argument_specs": {}})
    with pytest.raises(ValueError):
        profile_check.spec_options(None)


def without(key):
    values = profile()
    del values[key]
    return values


def changed(**kw):
    values = profile()
    values.update(kw)
    return values


def meter(**kw):
    values = profile()
    values["trainer_meter_stop"] = dict(values["trainer_meter_stop"], **kw)
    return values


@pytest.mark.parametrize("values,expected", [
    (without("trainer_data_dir"), "missing required arguments: trainer_data_dir"),
    (changed(trainer_tensorboard_port="six thousand"), "trainer_tensorboard_port"),
    (changed(trainer_detach="screen"), "trainer_detach"),
    (changed(trainer_billed="maybe"), "trainer_billed"),
    (changed(trainer_price_per_hour="cheap"), "trainer_price_per_hour"),
    (changed(trainer_inode_cap="lots"), "trainer_inode_cap must be a positive integer or 'unknown' (got \"lots\")"),
    (changed(trainer_inode_cap=0), "trainer_inode_cap"),
    (changed(trainer_inode_cap=True), "trainer_inode_cap"),
    (changed(trainer_data_dir="autodl-tmp"), "trainer_data_dir must be an absolute path"),
    (changed(trainer_durable_dir="fs"), "trainer_durable_dir"),
    (meter(verb="power_off", command=[], api={}), "trainer_meter_stop needs a command or an api"),
    (meter(verified="recently"), "every 'verified' value"),
    (changed(trainer_danger_clocks=[{"clock": "x", "verified": "2026-13"}]), "every 'verified' value"),
    (changed(trainer_env_prefix="miniconda3"), "trainer_env_prefix must be an absolute path"),
    (changed(trainer_env_prefix="", trainer_conda_activate=True), "trainer_conda_activate needs trainer_env_prefix"),
    (changed(trainer_onstart_hook="/root/onstart.sh"), "trainer_onstart_hook must be the absolute path"),
    (changed(trainer_detach="onstart", trainer_onstart_hook=""), "trainer_onstart_hook"),
    (changed(trainer_detach="onstart", trainer_onstart_hook="onstart.sh"), "trainer_onstart_hook"),
    (changed(trainer_tensorboard_logdir="", trainer_tensorboard_port=6006), "a pinned TensorBoard needs both"),
    (changed(trainer_tensorboard_logdir="/root/tf-logs", trainer_tensorboard_port=0), "trainer_tensorboard_port"),
    (changed(trainer_price_per_hour=-1.5), "trainer_price_per_hour must be a price per hour of 0 or more"),
    (changed(trainer_price_per_hour=2.5, trainer_price_currency=" "), "with its trainer_price_currency"),
    (changed(trainer_hf_endpiont="https://hf-mirror.com"), "sets unknown key(s) trainer_hf_endpiont"),
], ids=["deleted", "wrong-type-int", "bad-choice", "wrong-type-bool", "price-not-a-number", "cap-word", "cap-zero",
        "cap-bool", "relative-data", "relative-durable", "meter-without-command", "verified-word", "verified-month-13",
        "relative-prefix", "conda-without-prefix", "stray-onstart-hook", "onstart-without-hook",
        "relative-onstart-hook", "tensorboard-port-only", "tensorboard-logdir-only", "negative-price",
        "price-without-currency", "unknown-extra"])
def test_a_broken_profile_fails_the_host_naming_the_key(values, expected):
    messages = problems(values)
    assert messages, "no problem found"
    assert all(m.startswith("Profile 'autodl' for box1") for m in messages), messages
    assert any(expected in m for m in messages), messages


def test_a_misspelled_key_is_missing_under_its_right_name_and_unknown_under_its_wrong_one():
    values = profile()
    values["trainer_tensorbord_port"] = values.pop("trainer_tensorboard_port")
    messages = problems(values)
    assert "missing required arguments: trainer_tensorboard_port" in messages[0]
    assert "sets unknown key(s) trainer_tensorbord_port. Check the spelling against " \
           "roles/profile/meta/argument_specs.yml (valid keys: trainer_billed, " in messages[1]


def test_the_extra_checks_run_only_on_values_that_passed_the_schema():
    values = changed(trainer_tensorboard_port="six thousand", trainer_inode_cap="lots")
    messages = problems(values)
    assert len(messages) == 1 and "rejects it" in messages[0]


def test_a_correct_price_with_its_currency_and_an_integer_cap_pass():
    assert problems(changed(trainer_price_per_hour=2.58, trainer_price_currency="CNY", trainer_inode_cap=200000)) == []
    # the schema converts a price given as an int or a numeric string, as Ansible's role validation did
    assert problems(changed(trainer_price_per_hour=3, trainer_price_currency="USD")) == []


def test_a_host_without_any_profile_misses_every_key():
    messages = problems({})
    assert messages[0].startswith("Profile '?' for box1: the schema")
    assert "trainer_data_dir" in messages[0] and "trainer_profile" in messages[0]


def test_a_value_that_cannot_be_resolved_fails_its_host_naming_the_key():
    out, checked = profile_check.fleet_problems(SPEC, {"a": profile(), "b": profile()},
                                                {"b": {"trainer_data_dir": "'nosuchvar' is undefined"}})
    assert list(out) == ["b"] and checked == 1
    assert out["b"] == ["Profile 'autodl' for b: trainer_data_dir cannot be resolved: 'nosuchvar' is undefined"]


def test_hosts_that_share_a_profile_are_checked_once(monkeypatch):
    calls = []
    real = profile_check.profile_problems
    monkeypatch.setattr(profile_check, "profile_problems", lambda spec, values: calls.append(1) or real(spec, values))
    hosts = {}
    for i in range(96):
        hosts["lab-%02d" % i] = profile(PLAIN[i % 3])
    broken = copy.deepcopy(hosts["lab-07"])
    broken["trainer_inode_cap"] = "lots"
    hosts["lab-07"] = broken
    out, checked = profile_check.fleet_problems(SPEC, hosts)
    assert checked == 4 and len(calls) == 4
    assert list(out) == ["lab-07"]
    assert out["lab-07"][0].startswith("Profile 'runpod' for lab-07 has a wrongly typed value: trainer_inode_cap")


def test_the_profile_key_sees_nested_values_and_types():
    base = profile()
    assert profile_check.profile_key(base) == profile_check.profile_key(copy.deepcopy(base))
    assert profile_check.profile_key(base) != profile_check.profile_key(meter(verified="2026-07"))
    assert profile_check.profile_key({"trainer_x": 1}) != profile_check.profile_key({"trainer_x": "1"})
    assert profile_check.profile_key({"trainer_x": object()})  # never raises on an odd value


def test_profile_values_keeps_only_the_trainer_keys():
    assert profile_check.profile_values({"trainer_a": 1, "ansible_user": "root", "lab_x": 2}) == {"trainer_a": 1}
    assert profile_check.unknown_keys(SPEC, {"trainer_a": 1, "trainer_data_dir": "/x", "other": 2}) == ["trainer_a"]


@pytest.mark.parametrize("value, expected", [
    ("/root/autodl-tmp", False), (42, False), (None, False), ([], False), ({"verb": "shutdown"}, False),
    ("{{ runpod_pod_id | default('$RUNPOD_POD_ID') }}", True), ("{% if x %}a{% endif %}", True),
    ("{# note #}", True), (["shutdown", ["-h", "{{ when }}"]], True), ({"api": {"instance_id": "{{ i }}"}}, True),
    ({"{{ key }}": 1}, True), ("a { b } c", False),
])
def test_only_values_with_jinja_syntax_are_templated(value, expected):
    assert profile_check.has_template(value) is expected
