from __future__ import annotations

import sys
import time

from ansible_collections.remote_gpu.trainer.plugins.module_utils.command import run_with_timeout


def test_runs_under_the_c_locale_and_returns_output():
    rc, out, err = run_with_timeout([sys.executable, "-c", "import os; print(os.environ['LC_ALL'])"], 30)
    assert (rc, out.strip(), err) == (0, "C", "")


def test_nonzero_exit_and_stderr():
    rc, _out, err = run_with_timeout([sys.executable, "-c", "import sys; sys.exit('broken')"], 30)
    assert rc == 1 and "broken" in err


def test_missing_binary_is_127_not_a_traceback():
    rc, _out, err = run_with_timeout(["/nonexistent/nvidia-smi", "-L"], 5)
    assert rc == 127 and "/nonexistent/nvidia-smi" in err


def test_timeout_returns_none_and_kills_the_command():
    start = time.monotonic()
    rc, _out, err = run_with_timeout(["sleep", "30"], 0.5, grace=2)
    assert rc is None and "timed out" in err
    assert time.monotonic() - start < 5
