"""bench/lab_common's SSH timeline (network_vs_raw.py --timeline): the wrapper that times each execution, and where a
run's wall time went, read from its log."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "bench"))

from lab_common import fleet_up_failed, ssh_timeline, timing_ssh  # noqa: E402


def test_the_wrapper_runs_the_real_ssh_and_logs_each_execution(tmp_path):
    wrapper, log = timing_ssh(tmp_path)
    start = time.time()
    runs = [subprocess.run([str(wrapper), "-V"], capture_output=True, text=True, check=False) for _run in range(2)]
    missing = subprocess.run([str(wrapper), "-F", str(tmp_path / "absent"), "localhost", "true"],
                             capture_output=True, text=True, check=False)
    end = time.time()
    # ssh's own answers, exit codes included: the wrapper is transparent
    assert [run.returncode for run in runs] == [0, 0] and all("OpenSSH" in run.stderr for run in runs)
    assert missing.returncode == 255 and "absent" in missing.stderr
    lines = [line.split() for line in log.read_text().splitlines()]
    assert [words[0] for words in lines] == ["S", "E"] * 3
    assert all(start <= float(words[2]) <= end for words in lines), lines
    timeline = ssh_timeline(log.read_text(), start, end)
    assert timeline["executions"] == 3
    assert 0 <= timeline["first_start"] <= timeline["last_start"] <= timeline["last_end"] <= timeline["end"]


def test_where_the_time_went():
    log = "\n".join([
        "S 10 100.5", "S 11 100.9",
        "E 10 102.5",               # 2.0 s
        "S 10 103.0",               # the same pid again (reused): a third execution
        "E 11 102.9", "E 10 103.5",  # 2.0 s and 0.5 s
        "garbage", "E 99 104.0",    # neither counts
    ])
    assert ssh_timeline(log, 100.0, 104.0) == {"executions": 3, "first_start": 0.5, "last_start": 3.0,
                                               "median_ssh": 2.0, "last_end": 3.5, "end": 4.0}


def test_an_execution_still_running_counts_to_the_end_of_the_run():
    timeline = ssh_timeline("S 1 10.0\nS 2 10.0\nE 1 11.0\n", 9.0, 15.0)
    assert timeline["executions"] == 2 and timeline["last_end"] == 6.0
    assert timeline["median_ssh"] == pytest.approx(3.0)   # the median of 1.0 and 5.0


def test_no_execution_is_no_timeline():
    assert ssh_timeline("", 0.0, 1.0) is None
    assert ssh_timeline("E 1 0.5\n", 0.0, 1.0) is None


def test_a_fleet_that_does_not_come_up_is_told_with_its_own_words_and_the_fix():
    up = subprocess.CompletedProcess(["fleet", "up"], 1, stdout="", stderr=(
        "fleet up: FAILED: [Errno 2] No such file or directory: '/usr/bin/tinyproxy'\n"
        "fleet up: cleaned up the partial fleet (LAB_KEEP_FAILED=1 keeps it for debugging)\n"))
    message = fleet_up_failed(up)
    assert message.startswith("bench: tests/lab/fleet up failed (exit 1)")
    assert "No such file or directory: '/usr/bin/tinyproxy'" in message and "make setup" in message
    assert "Traceback" not in message
