"""Controller actions take their argument spec from their module's DOCUMENTATION (plugin_utils/doc_args.py)."""

from __future__ import annotations

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.doc_args import argument_spec

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
