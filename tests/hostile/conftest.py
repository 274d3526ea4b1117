"""The hostile-input sweep: every module and controller action, fed absurd and malicious inputs.

Each case states what must happen, and the harness tells the three outcomes apart without trusting the code under
test:

- ``error``: the task fails with a message that contains the given fragment (what is wrong, what to do);
- ``refused``: the task fails (a safe refusal) and the case's own check proves nothing unsafe happened;
- ``ok``: the task succeeds and the case's own check looks at the files.

A traceback (an exception escaping ``main()`` or ``run()``, which Ansible shows as "Module failed: <exception>"
with none of the module's return keys) and a hang past the case's timeout fail the case, whatever it expected.

    from hostile import Case, run_case          # tests/hostile/hostile.py
    CASES = [Case("env_audit: torch_timeout 0", env_audit, {"torch_timeout": 0}, "error", "torch_timeout"), ...]

    @pytest.mark.parametrize("case", CASES, ids=str)
    def test_env_audit(case, hostile):
        hostile(case)
"""

from __future__ import annotations

import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
# the harness, and the controller-action harness shared with the unit tests of the actions
sys.path[:0] = [str(HERE), str(HERE.parent / "unit" / "plugins" / "action")]

from hostile import end_started, run_case  # noqa: E402  pylint: disable=wrong-import-position


@pytest.fixture
def hostile(capsys, tmp_path):
    """``hostile(case)`` runs one case (``case.args`` may be a function of ``tmp_path``) and asserts its outcome."""
    return lambda case: run_case(case, capsys, tmp_path)


@pytest.fixture(autouse=True)
def end_started_processes():
    """Every process a case started with ``hostile.start`` is ended after its test, by PID."""
    yield
    end_started()
