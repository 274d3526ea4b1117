"""module_utils/gpu_health.py and kernel_log.py: the parameter checks, the sampling loop and the bounded, non-blocking
kernel log read."""

from __future__ import annotations

import math
import os

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import gpu_health as gh
from ansible_collections.remote_gpu.trainer.plugins.module_utils import kernel_log
from ansible_collections.remote_gpu.trainer.plugins.module_utils.gpu_query import SmiError
from ansible_collections.remote_gpu.trainer.plugins.module_utils.nvidia_smi import SAMPLE_FIELDS

PARAMS = dict(expected_name=None, sample_seconds=5.0, temp_hot_c=83, sm_clock_floor_pct=70, expected_count=None,
              min_memory_mib=None, timeout=20)
OPTIONS = dict(expected_count=None, expected_name=None, min_memory_mib=None, temp_hot_c=83, sm_clock_floor_pct=70,
               platform_stop_hint="stop it")


def test_log_file_reads_only_the_tail_and_refuses_what_is_not_a_file(tmp_path, monkeypatch):
    monkeypatch.setattr(kernel_log, "MAX_KERNEL_LOG_BYTES", 64)
    log = tmp_path / "kern.log"
    log.write_text("old line that is cut away\n" * 10 + "the newest line\n")
    text, reason = kernel_log.read_log_file(str(log))
    assert reason is None and len(text) == 64 and text.endswith("the newest line\n")
    assert kernel_log.read_log_file(str(tmp_path / "absent"))[0] is None
    fifo = tmp_path / "fifo"
    os.mkfifo(str(fifo))
    for path, kind in ((str(fifo), "a FIFO"), ("/dev/zero", "a character device"), (str(tmp_path), "a directory")):
        with pytest.raises(kernel_log.KernelLogError, match="is %s, not a regular file" % kind):
            kernel_log.read_log_file(path)


@pytest.mark.parametrize("change, message", [
    (dict(expected_name="H100("), "expected_name is not a valid regular expression"),
    (dict(sample_seconds=math.inf), "sample_seconds must be a number from 0 to 600"),
    (dict(sample_seconds=math.nan), "sample_seconds must be a number from 0 to 600"),
    (dict(sample_seconds=600.5), "sample_seconds must be a number from 0 to 600"),
    (dict(sample_seconds=-1.0), "sample_seconds must be a number from 0 to 600"),
    (dict(min_memory_mib=-1), "min_memory_mib must not be negative"),
    (dict(timeout=0), "timeout must be a positive number of seconds"),
])
def test_validate_refuses_what_cannot_be_used(change, message):
    gh.validate(dict(PARAMS))  # the defaults pass
    gh.validate(dict(PARAMS, sample_seconds=0.0, expected_name="H100|H800", expected_count=8))
    with pytest.raises(gh.GpuHealthError, match=message):
        gh.validate(dict(PARAMS, **change))


def fake_run_smi(answers, calls):
    """run_smi that records each argv and replays ``answers`` (an (rc, out, err) or an exception) in turn."""
    def run(smi, args, timeout, check=True):
        calls.append(list(args))
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer
    return run


def row(table):
    return ", ".join("0" if field == "index" else "[N/A]" for field, _key, _convert in table)


def test_take_samples_spreads_five_samples_over_the_seconds(monkeypatch):
    sleeps, calls = [], []
    monkeypatch.setattr(gh.time, "sleep", sleeps.append)
    monkeypatch.setattr(gh, "run_smi", fake_run_smi([(0, row(SAMPLE_FIELDS) + "\n", "")] * 5, calls))
    samples, runs, findings = gh.take_samples("/x/nvidia-smi", 3, 8.0, OPTIONS)
    assert runs == gh.SAMPLE_COUNT == 5 and len(samples) == 5 and findings == []
    assert sleeps == [2.0] * 4 and len(calls) == 5


def test_take_samples_zero_seconds_is_one_sample_without_sleeping(monkeypatch):
    sleeps, calls = [], []
    monkeypatch.setattr(gh.time, "sleep", sleeps.append)
    monkeypatch.setattr(gh, "run_smi", fake_run_smi([(0, row(SAMPLE_FIELDS) + "\n", "")], calls))
    samples, runs, findings = gh.take_samples("/x/nvidia-smi", 3, 0, OPTIONS)
    assert (len(samples), runs, findings, sleeps, len(calls)) == (1, 1, [], [], 1)


def test_take_samples_drops_a_rejected_field_and_stops_on_a_timeout(monkeypatch):
    calls = []
    rejected = SAMPLE_FIELDS[-1][0]
    table = [entry for entry in SAMPLE_FIELDS if entry[0] != rejected]
    answers = [(2, 'Field "%s" is not a valid field to query.\n' % rejected, ""), (0, row(table) + "\n", ""),
               SmiError("timeout", "nvidia-smi timed out after 3 s")]
    monkeypatch.setattr(gh.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(gh, "run_smi", fake_run_smi(answers, calls))
    samples, runs, findings = gh.take_samples("/x/nvidia-smi", 3, 4.0, OPTIONS)
    assert rejected in calls[0][0] and rejected not in calls[1][0] and rejected not in calls[2][0]
    assert len(samples) == 1 and runs == 1
    assert [f["code"] for f in findings] == ["nvidia_smi_timeout"]


def test_take_samples_stops_quietly_when_nvidia_smi_fails(monkeypatch):
    monkeypatch.setattr(gh.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(gh, "run_smi", fake_run_smi([(0, row(SAMPLE_FIELDS) + "\n", ""), (9, "", "boom")], []))
    samples, runs, findings = gh.take_samples("/x/nvidia-smi", 3, 4.0, OPTIONS)
    assert (len(samples), runs, findings) == (1, 1, [])


def test_kernel_log_auto_reports_why_each_source_failed(monkeypatch):
    class Module:
        @staticmethod
        def get_bin_path(name):
            return None if name == "journalctl" else "/bin/" + name
    calls = []

    def run(argv, timeout, grace):
        calls.append((argv, timeout, grace))
        return None, "", ""
    monkeypatch.setattr(kernel_log, "run_with_timeout", run)
    assert kernel_log.read_kernel_log(Module, "auto", 7) == (None, "journalctl not installed; dmesg timed out")
    assert calls == [(["/bin/dmesg"], 7, kernel_log.KILL_GRACE_SECONDS)]
