"""The path_within filter, driven by the cases in data/path_within.yml."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.remote_gpu.trainer.plugins.filter.path_within import FilterModule

CASES = yaml.safe_load((pathlib.Path(__file__).parent / "data" / "path_within.yml").read_text())
path_within = FilterModule().filters()["path_within"]


def ids(rows):
    return ["%s in %s" % (path, root) for path, root in rows]


@pytest.mark.parametrize("path,root", CASES["within"], ids=ids(CASES["within"]))
def test_within(path, root):
    assert path_within(path, root) is True


@pytest.mark.parametrize("path,root", CASES["not_within"], ids=ids(CASES["not_within"]))
def test_not_within(path, root):
    assert path_within(path, root) is False


@pytest.mark.parametrize("path,root", CASES["errors"], ids=ids(CASES["errors"]))
def test_empty_or_not_a_string_is_a_filter_error(path, root):
    with pytest.raises(AnsibleFilterError, match="path_within: the (path|root) must be a non-empty path"):
        path_within(path, root)
