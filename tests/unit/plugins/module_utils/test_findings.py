from __future__ import annotations

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import (
    at_or_above, exit_by_fail_on, finding, rank, sort_findings, verdict, worst, worst_finding)


def test_worst_orders_levels_and_info_is_pass():
    assert worst([]) == "PASS"
    assert worst([finding("INFO", "mig_enabled", "m", "a")]) == "PASS"
    assert worst([finding("INFO", "x", "m", "a"), finding("WARN", "y", "m", "a")]) == "WARN"
    assert worst([finding("FAIL", "x", "m", "a"), finding("WARN", "y", "m", "a")]) == "FAIL"


def test_finding_rejects_unknown_level():
    with pytest.raises(ValueError):
        finding("PASS", "x", "m", "a")
    with pytest.raises(ValueError):
        finding("ERROR", "x", "m", "a")


@pytest.mark.parametrize("status,threshold,expected", [
    ("FAIL", "FAIL", True), ("WARN", "FAIL", False), ("WARN", "WARN", True),
    ("PASS", "WARN", False), ("FAIL", "never", False),
])
def test_at_or_above(status, threshold, expected):
    assert at_or_above(status, threshold) is expected


def test_rank_is_the_one_ranking():
    assert [rank(level) for level in ("PASS", "INFO", "WARN", "FAIL")] == [0, 0, 1, 2]
    assert rank(None) == 0 and rank("BOGUS") == 0
    assert verdict(["INFO", "FAIL", "WARN"]) == "FAIL" and verdict([]) == "PASS"


def test_worst_finding_first_on_ties_and_sort():
    items = [finding("WARN", "a", "m", "x"), finding("FAIL", "b", "m", "x"), finding("FAIL", "c", "m", "x"),
             finding("INFO", "d", "m", "x")]
    assert worst_finding(items)["code"] == "b"
    assert worst_finding([]) is None
    assert [f["code"] for f in sort_findings(items, lambda f: f["code"])] == ["b", "c", "a", "d"]


class _Ended(Exception):
    pass


class _Module(object):
    def __init__(self):
        self.ended = None

    def fail_json(self, **kwargs):
        self.ended = ("fail", kwargs)
        raise _Ended()

    def exit_json(self, **kwargs):
        self.ended = ("exit", kwargs)
        raise _Ended()


@pytest.mark.parametrize("status,fail_on,how", [
    ("FAIL", "FAIL", "fail"), ("WARN", "FAIL", "exit"), ("WARN", "WARN", "fail"), ("FAIL", "never", "exit"),
    ("PASS", "WARN", "exit"),
])
def test_exit_by_fail_on(status, fail_on, how):
    module = _Module()
    items = [finding(status, "the_code", "the message", "act")] if status != "PASS" else []
    with pytest.raises(_Ended):
        exit_by_fail_on(module, {"status": status, "findings": items}, fail_on)
    assert module.ended[0] == how
    assert module.ended[1]["changed"] is False and module.ended[1]["findings"] == items
    if how == "fail":
        assert module.ended[1]["msg"] == "the_code: the message"
