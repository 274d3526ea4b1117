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
    got = split_requirements(source, case["frameworks"], **({"path": case["path"]} if "path" in case else {}))
    assert got == {"keep": case["keep"], "drop": case["drop"], "nested": case["nested"],
                   "hashed": case.get("hashed", False), "unhashed": case.get("unhashed", [])}


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


@pytest.mark.parametrize("text, message", [
    ("lock-version = \"1.0\"\n[[packages]\n", "is not valid TOML"),
    ("lock-version = \"2.0\"\n", "only the PEP 751 version 1.x is read"),
    ("lock-version = \"1.0\"\npackages = 3\n", "'packages' must be an array of tables"),
    ("lock-version = \"1.0\"\n[[packages]]\nversion = \"1\"\n", "package 1 has no valid name"),
    ("lock-version = \"1.0\"\n[[packages]]\nname = \"six\"\n", "package six has no version"),
    ("lock-version = \"1.0\"\n[[packages]]\nname = \"proj\"\ndirectory = {path = \".\"}\n",
     "package proj is a local path on the machine that locked it"),
    ("lock-version = \"1.0\"\n[[packages]]\nname = \"w\"\nversion = \"1\"\n"
     "wheels = [{path = \"dist/w-1-py3-none-any.whl\", hashes = {sha256 = \"ab\"}}]\n",
     "package w is a local path"),
    ("lock-version = \"1.0\"\n[[packages]]\nname = \"v\"\nvcs = {type = \"hg\", url = \"u\"}\n",
     "only a git vcs entry with url and commit-id"),
], ids=["not-toml", "lock-version-2", "packages-not-array", "no-name", "no-version", "directory", "wheel-path",
        "vcs-not-git"])
def test_a_pylock_that_cannot_be_installed_is_a_filter_error_saying_why(text, message):
    with pytest.raises(AnsibleFilterError, match=message):
        split_requirements(text, ["torch"], path="/proj/pylock.toml")


def test_pylock_file_names():
    from ansible_collections.remote_gpu.trainer.plugins.filter.split_requirements import is_pylock
    assert is_pylock("pylock.toml") and is_pylock("/a/b/pylock.dev.toml") and is_pylock("pylock.cpu-only.toml")
    assert not is_pylock("requirements.txt") and not is_pylock("my-pylock.toml") and not is_pylock("pylock.a.b.toml")
    assert not is_pylock("") and not is_pylock("uv.lock")
