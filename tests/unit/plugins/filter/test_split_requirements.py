"""The split_requirements filter, driven by the cases in data/split_requirements.yml."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.remote_gpu.trainer.plugins.filter.split_requirements import FilterModule

CASES = yaml.safe_load((pathlib.Path(__file__).parent / "data" / "split_requirements.yml").read_text())
split_requirements = FilterModule().filters()["split_requirements"]


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_split(case):
    source = case["text"] if "text" in case else case["lines"]
    got = split_requirements(source, case["frameworks"])
    assert got == {"keep": case["keep"], "drop": case["drop"], "nested": case["nested"]}


def test_every_case_is_checked_once():
    ids = [case["id"] for case in CASES]
    assert len(ids) == len(set(ids))
    assert all(set(case) >= {"frameworks", "keep", "drop", "nested"} for case in CASES)


@pytest.mark.parametrize("lines,frameworks", [
    (42, ["torch"]),
    (["torch", 3], ["torch"]),
    ("torch", "torch"),
    ("torch", [None]),
], ids=["input-number", "input-list-with-number", "frameworks-string", "frameworks-none"])
def test_bad_arguments_are_a_filter_error_naming_the_argument(lines, frameworks):
    with pytest.raises(AnsibleFilterError, match="split_requirements: (the input|frameworks) must be"):
        split_requirements(lines, frameworks)
