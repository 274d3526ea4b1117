"""The profile_check action's run(): it reads every host of the play from hostvars, resolves templates per host,
checks each distinct profile once against the role's argument_specs.yml and reports the broken hosts."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from ansible.errors import AnsibleActionFail

from ansible_collections.remote_gpu.trainer.plugins.action import profile_check as action
from ansible_collections.remote_gpu.trainer.plugins.action.profile_check import ActionModule

from controller_actions import UNDEFINED, FakeHostVars, make_action, templar

REPO = pathlib.Path(__file__).resolve().parents[4]


def profile(name="autodl", **kw):
    data = yaml.safe_load((REPO / "group_vars" / ("%s.yml" % name)).read_text())
    data.update(kw)
    return data


def run(hosts, args=None, batch=None):
    act = make_action(ActionModule, args or {}, name="remote_gpu.trainer.profile_check")
    act._templar = templar()  # pylint: disable=protected-access
    hostvars = FakeHostVars(hosts)
    result = act.run(task_vars={"inventory_hostname": "lab-01", "hostvars": hostvars,
                                "ansible_play_batch": list(batch if batch is not None else hosts)})
    return result, hostvars


def test_the_schema_path_is_the_roles_argument_specs():
    assert pathlib.Path(action.SPEC_PATH).resolve() == (REPO / "roles/profile/meta/argument_specs.yml").resolve()


def test_every_host_of_the_batch_is_checked_and_each_profile_once():
    hosts = dict(("lab-%02d" % i, profile(("autodl", "runpod", "vastai")[i % 3])) for i in range(1, 33))
    result, hostvars = run(hosts)
    assert not result.get("failed") and result["changed"] is False
    assert result["problems"] == {} and result["hosts_checked"] == 32 and result["profiles_checked"] == 3
    assert sorted(hostvars.asked) == sorted(hosts)
    assert result["msg"] == "32 host(s), 3 distinct profile(s): all valid"


def test_only_the_broken_hosts_are_reported_each_naming_the_key():
    hosts = {"lab-01": profile(), "lab-02": profile(trainer_inode_cap="lots"), "lab-03": profile(),
             "lab-04": profile(trainer_data_dir=UNDEFINED), "lab-05": profile(trainer_hf_endpiont="x")}
    result, _hostvars = run(hosts)
    assert sorted(result["problems"]) == ["lab-02", "lab-04", "lab-05"]
    assert "trainer_inode_cap must be a positive integer" in result["problems"]["lab-02"][0]
    assert result["problems"]["lab-04"] == [
        "Profile 'autodl' for lab-04: trainer_data_dir cannot be resolved: 'nosuchvar' is undefined"]
    assert "unknown key(s) trainer_hf_endpiont" in result["problems"]["lab-05"][0]
    assert not result.get("failed")  # the hosts fail in the role's next task, not here (run_once would fail all)


def test_the_hosts_option_and_an_unknown_host():
    result, hostvars = run({"lab-01": profile()}, args={"hosts": ["lab-01", "ghost"]}, batch=[])
    assert hostvars.asked == ["lab-01", "ghost"]
    assert result["problems"] == {"ghost": ["Profile '?' for ghost: inventory_hostname cannot be resolved: not a host "
                                            "of the inventory"]}


def test_an_unreadable_schema_fails_the_action_with_a_message(tmp_path):
    with pytest.raises(AnsibleActionFail, match="cannot read the profile schema"):
        action.load_spec(str(tmp_path / "missing.yml"))
    bad = tmp_path / "bad.yml"
    bad.write_text("argument_specs: {main: {}}\n")
    with pytest.raises(AnsibleActionFail, match="no argument_specs.main.options"):
        action.load_spec(str(bad))


def test_unknown_options_are_refused():
    with pytest.raises(AnsibleActionFail):
        run({"lab-01": profile()}, args={"host": ["lab-01"]})
