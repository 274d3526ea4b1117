from __future__ import annotations

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import at_or_above, finding, worst


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
