"""Controller actions take their argument spec from their module's DOCUMENTATION (plugin_utils/doc_args.py)."""

from __future__ import annotations

from unittest.mock import MagicMock

import pytest

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.doc_args import (
    DocumentedAction,
    argument_spec,
    valid_args,
)

DOC = r"""
---
module: example
short_description: An example
options:
  name:
    description: A name.
    required: true
  mode:
    description: How.
    type: str
    choices: [fast, slow]
    default: fast
    aliases: [how]
  token:
    description: A secret.
    type: str
    no_log: true
  hosts:
    description: Hosts.
    type: list
    elements: str
    default: []
  limits:
    description: Limits.
    type: dict
    suboptions:
      bytes:
        description: Bytes.
        type: int
        default: 0
      label:
        description: Label.
"""


def test_the_spec_keeps_only_argument_spec_keys_and_defaults_the_type_to_str():
    assert argument_spec(DOC) == {
        "name": {"type": "str", "required": True},
        "mode": {"type": "str", "choices": ["fast", "slow"], "default": "fast", "aliases": ["how"]},
        "token": {"type": "str", "no_log": True},
        "hosts": {"type": "list", "elements": "str", "default": []},
        "limits": {"type": "dict", "options": {"bytes": {"type": "int", "default": 0}, "label": {"type": "str"}}},
    }


def test_the_spec_validates_like_a_module_would():
    spec = argument_spec(DOC)
    good = ArgumentSpecValidator(spec).validate({"name": "x", "how": "slow", "limits": {"bytes": "5"}})
    assert good.error_messages == []
    assert good.validated_parameters["mode"] == "slow" and good.validated_parameters["limits"] == {
        "bytes": 5, "label": None}
    bad = ArgumentSpecValidator(spec).validate({"mode": "medium"})
    messages = " ".join(bad.error_messages)
    assert "missing required arguments: name" in messages and "medium" in messages


def test_a_documentation_without_options_gives_an_empty_spec():
    assert argument_spec("---\nmodule: bare\nshort_description: nothing to set\n") == {}
    assert argument_spec("") == {}


class Echo(DocumentedAction):
    """An action that returns the arguments it was given."""

    DOCUMENTATION = DOC

    def act(self, result, args, task_vars):
        return dict(result, args=args, host=task_vars["inventory_hostname"])


def make(args):
    task = MagicMock()
    task.args, task.async_val, task.check_mode, task.action = dict(args), 0, False, "example"
    connection = MagicMock()
    connection._shell.tmpdir = None  # pylint: disable=protected-access
    return Echo(task=task, connection=connection, play_context=MagicMock(), loader=MagicMock(), templar=MagicMock(),
                shared_loader_obj=None)


def test_a_documented_action_gets_its_spec_and_valid_args_from_the_documentation():
    assert Echo.SPEC == argument_spec(DOC)
    # an alias is a valid name too
    valid = Echo._VALID_ARGS  # pylint: disable=protected-access
    assert valid == frozenset(["name", "mode", "how", "token", "hosts", "limits"])
    assert DocumentedAction.SPEC == {}
    assert valid_args({"a": {"type": "str"}, "b": {"aliases": ["c", "d"]}}) == frozenset("abcd")


def test_a_documented_action_acts_on_validated_arguments_with_the_defaults():
    result = make({"name": "x", "how": "slow"}).run(task_vars={"inventory_hostname": "box1"})
    assert result["host"] == "box1"
    assert result["args"]["mode"] == "slow" and result["args"]["hosts"] == [] and result["args"]["token"] is None


def test_a_documented_action_refuses_bad_arguments_before_acting():
    with pytest.raises(AnsibleActionFail, match="Invalid options for example: nmae"):
        make({"nmae": "x"}).run(task_vars={"inventory_hostname": "box1"})
    with pytest.raises(AnsibleActionFail, match="value of mode must be one of: fast, slow, got: medium"):
        make({"name": "x", "mode": "medium"}).run(task_vars={"inventory_hostname": "box1"})
