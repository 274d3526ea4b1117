"""Fixtures for the lab fleet tests; their helpers are in labhelpers.py."""
from __future__ import annotations

import os

import pytest

from labhelpers import NET, lab_busy, listening


@pytest.fixture(scope="session")
def lab_free():
    if os.geteuid() != 0:
        pytest.skip("the lab fleet needs root")
    busy = [a for a in (f"{NET}.{10 + i}" for i in range(1, 10)) if listening(a)]
    if busy:
        lab_busy(f"a lab fleet (or something else) already listens on {', '.join(busy)}:22; "
                 "run `tests/lab/fleet down` first")
