"""The harness itself tells a clear error, a success, a traceback and a hang apart (it could not catch them
otherwise)."""

from __future__ import annotations

import time

import pytest

from hostile import Case, execute

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.remote_gpu.trainer.plugins.action.teardown_gate import ActionModule as TeardownGate
from ansible_collections.remote_gpu.trainer.plugins.modules import inode_check


class _Module(object):
    """A stand-in module whose main() does what its one argument says."""

    @staticmethod
    def main():
        module = AnsibleModule(argument_spec={"do": {"type": "str"}})
        if module.params["do"] == "raise":
            raise KeyError("boom")
        if module.params["do"] == "hang":
            time.sleep(30)
        if module.params["do"] == "fail":
            module.fail_json(msg="clear: what is wrong")
        module.exit_json(changed=False)


@pytest.mark.parametrize("do,outcome", [("raise", "traceback"), ("hang", "hang"), ("fail", "failed"), ("ok", "ok")])
def test_outcomes_are_told_apart(do, outcome, capsys, tmp_path):
    assert execute(Case(do, _Module, {"do": do}, "ok", timeout=1), capsys, tmp_path)[0] == outcome


def test_a_case_names_its_fragment():
    with pytest.raises(ValueError):
        Case("x", _Module, {}, "error")
    with pytest.raises(ValueError):
        Case("x", _Module, {}, "maybe")


def test_real_module_and_action(hostile, tmp_path):
    hostile(Case("inode_check of a missing path reports it", inode_check,
                 lambda tmp: {"paths": [str(tmp / "absent")], "fail_on": "never"}, "ok",
                 check=lambda result, tmp: [f["code"] for f in result["findings"]] == ["path_missing"]))
    hostile(Case("teardown_gate without a verified pull refuses", TeardownGate,
                 lambda tmp: {"run_id": "r1", "pull_root": str(tmp), "approve": "box1"}, "refused",
                 check=lambda result, tmp: result["open"] is False))


def test_an_action_failure_is_a_clear_error_not_a_traceback(hostile):
    # ActionBase refuses an unknown option with AnsibleActionFail, which Ansible reports as a failed task
    hostile(Case("teardown_gate with an unknown option", TeardownGate, {"run_id": "r1", "bogus": 1}, "error",
                 fragment="bogus"))
