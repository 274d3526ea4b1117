from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.remote_gpu.trainer.plugins.filter.queue_assign import FilterModule


def test_filter_is_registered_and_assigns():
    queue_assign = FilterModule().filters()["queue_assign"]
    rows = queue_assign(["a", "b", "c"], ["y", "x"])
    assert [(r["item"], r["host"]) for r in rows] == [("000", "x"), ("001", "y"), ("002", "x")]


def test_filter_error_is_an_ansible_filter_error():
    with pytest.raises(AnsibleFilterError, match="no hosts"):
        FilterModule().filters()["queue_assign"](["a"], [])


def test_queue_reassign_is_registered_and_its_errors_are_filter_errors():
    reassign = FilterModule().filters()["queue_reassign"]
    rows = reassign({"new": [{"index": 1, "item": "001", "arg": "b"}]})
    assert rows == [{"index": 1, "item": "001", "host": "new", "arg": "b"}]
    with pytest.raises(AnsibleFilterError, match="queue_reassign: expects a mapping"):
        reassign([{"index": 1, "item": "001", "arg": "b"}])
    with pytest.raises(AnsibleFilterError, match="queue_reassign: item 001 is recorded for a and for b"):
        reassign({"a": [{"index": 1, "item": "001", "arg": "b"}], "b": [{"index": 1, "item": "001", "arg": "b"}]})
