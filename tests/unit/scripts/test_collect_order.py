"""The test trees collect in any order: no test module imports a helper from a conftest.py (which would resolve to
whichever conftest.py pytest loaded last), so no lane of scripts/test.sh needs its files in a given order."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
TREES = ["tests/lab/tests", "tests/playbooks", "tests/lab/gpu/tests"]


@pytest.mark.parametrize("order", [TREES, TREES[::-1]], ids=["lab-first", "playbooks-first"])
def test_the_trees_collect_in_either_order(order):
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *order],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and " error" not in proc.stdout.splitlines()[-1], proc.stdout[-3000:] + proc.stderr


def test_no_test_module_imports_from_a_conftest():
    pattern = re.compile(r"^\s*(from conftest import|import conftest)\b", re.M)
    offenders = [str(path.relative_to(REPO)) for path in (REPO / "tests").rglob("*.py")
                 if pattern.search(path.read_text(encoding="utf-8"))]
    assert offenders == []
