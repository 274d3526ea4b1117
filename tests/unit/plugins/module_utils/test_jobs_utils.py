from __future__ import annotations

import json
import os

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import job_layout, job_log, job_wrapper
from ansible_collections.remote_gpu.trainer.plugins.module_utils import jobs

REGEX = job_log.compile_progress(None)


def scan(text, tail=20):
    return job_log.scan_log(text.splitlines(True), REGEX, tail)


@pytest.mark.parametrize("line,kind", [
    ("Traceback (most recent call last):", "traceback"),
    ("[rank1]: Traceback (most recent call last):", "traceback"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "cuda_oom"),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "cuda_error"),
    ("Killed", "killed"),
    ("run.sh: line 12: 48213 Killed                  python train.py", "killed"),
    ("node1:123:456 [0] NCCL WARN Call to connect returned Connection refused", "nccl"),
    ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1275", "nccl"),
    ("ncclInternalError: Internal check failed.", "nccl"),
    ("Segmentation fault (core dumped)", "segfault"),
])
def test_crash_markers(line, kind):
    assert job_log.crash_kind(line) == kind


def test_steps_and_global_step_are_not_progress_words():
    assert job_log.progress_of("warmup_steps 500", REGEX, 1) is None
    assert job_log.progress_of("global_step=10", REGEX, 1) is None


@pytest.mark.parametrize("line", [
    "epoch 3 val_error=0.3 train_loss=0.12",
    "error_rate: 0.05",
    "val_error_rate 0.02 step 300",
    "Killed 3 stale workers and restarted them",
    "no errors so far",
    "loading nccl_config.yaml",
])
def test_metrics_and_ordinary_words_are_not_crashes(line):
    assert job_log.crash_kind(line) is None


@pytest.mark.parametrize("line,unit,value,total", [
    ("epoch 3", "epoch", 3, None),
    ("Epoch 3/10 loss 0.2", "epoch", 3, 10),
    ("step 1200", "step", 1200, None),
    ("train: step=1200 loss=0.1", "step", 1200, None),
    ("Epoch: 7 / 20", "epoch", 7, 20),
    ("Epoch [3/10] loss=0.5", "epoch", 3, 10),
    ("Step (100/500)", "step", 100, 500),
])
def test_default_progress(line, unit, value, total):
    reading = job_log.progress_of(line, REGEX, 4)
    assert (reading["unit"], reading["value"], reading["total"], reading["line_no"]) == (unit, value, total, 4)


def test_custom_progress_regex():
    regex = job_log.compile_progress(r"it (?P<value>\d+) of (?P<total>\d+)")
    assert job_log.progress_of("it 5 of 9", regex, 1)["value"] == 5
    assert job_log.progress_of("nothing", regex, 1) is None
    with pytest.raises(Exception):
        job_log.compile_progress("(unclosed")


def test_scan_counts_only_after_the_latest_start():
    log = (
        "==== trainer: started 2026-07-03T10:00:00Z pid 100 ====\n"
        "epoch 1\n"
        "Traceback (most recent call last):\n"
        "RuntimeError: boom\n"
        "==== trainer: finished 2026-07-03T10:05:00Z exit 1 ====\n"
        "==== trainer: started 2026-07-03T11:00:00Z pid 200 ====\n"
        "epoch 1 val_error=0.3\n"
        "Epoch 2/5\n"
    )
    result = scan(log, tail=2)
    assert result["starts"] == 2 and result["last_start"] == "2026-07-03T11:00:00Z" and result["last_start_line"] == 6
    assert result["crash_markers"] == [] and result["crash_marker_count"] == 0
    assert result["progress"]["value"] == 2 and result["progress"]["total"] == 5 and result["progress"]["line_no"] == 8
    assert result["tail"] == ["epoch 1 val_error=0.3", "Epoch 2/5"]
    assert result["lines"] == 8


def test_scan_in_small_blocks_keeps_line_numbers_and_the_latest_start(tmp_path):
    log = tmp_path / "job.log"
    lines = ["==== trainer: started 2026-07-03T10:00:00Z pid 1 ====", "Traceback (most recent call last):"]
    lines += ["epoch %d loss=0.1" % i for i in range(1, 200)]
    lines += ["==== trainer: started 2026-07-03T11:00:00Z pid 2 ====", "Epoch 7/9 step 40", "noise " * 50,
              "NCCL WARN Call to connect returned Connection refused", "tqdm 10%\rtqdm 20%"]
    log.write_bytes(("\n".join(lines)).encode())  # no newline at the end, a bare CR from a progress bar
    with open(str(log), errors="replace") as handle:
        result = job_log.scan_log(job_log.read_blocks(handle, size=64), REGEX, tail_lines=3)
    assert result["starts"] == 2 and result["last_start_line"] == 202
    assert [(m["line_no"], m["kind"]) for m in result["crash_markers"]] == [(205, "nccl")]
    assert result["progress"]["text"] == "Epoch 7/9" and result["progress"]["line_no"] == 203
    assert result["lines"] == 207  # the CR splits the last line in two (universal newlines)
    assert result["tail"] == ["NCCL WARN Call to connect returned Connection refused", "tqdm 10%", "tqdm 20%"]


def test_progress_is_found_far_back_and_never_before_the_start():
    lines = ["==== trainer: started 2026-07-03T11:00:00Z pid 2 ====", "epoch 4"] + ["x" * 100] * 5000
    assert scan("\n".join(lines) + "\n")["progress"]["line_no"] == 2
    before = ["epoch 9", "==== trainer: started 2026-07-03T11:00:00Z pid 2 ====", "warming up"]
    assert scan("\n".join(before) + "\n")["progress"] is None


def test_scan_reports_markers_with_line_numbers():
    result = scan("epoch 1\nTraceback (most recent call last):\n  File x\nValueError\n")
    assert result["crash_markers"] == [{"line_no": 2, "kind": "traceback", "text": "Traceback (most recent call last):"}]
    assert result["starts"] == 0


def test_scan_caps_markers_but_counts_all():
    result = scan("Killed\n" * 50)
    assert len(result["crash_markers"]) == job_log.MAX_MARKERS and result["crash_marker_count"] == 50


def test_vanished_reason_never_guesses_oom():
    assert jobs.vanished_reason(137, [], 1, None, None) == "oom_kill"
    assert jobs.vanished_reason(None, ["epoch 3", "Killed"], 2, None, None) == "oom_kill"
    assert jobs.vanished_reason(137, [], 0, None, None) == "killed"
    assert jobs.vanished_reason(None, ["Killed"], None, None, None) == "killed"
    assert jobs.vanished_reason(None, ["epoch 3"], 0, 1000.0, 2000.0) == "reboot"
    assert jobs.vanished_reason(None, ["epoch 3"], 0, 3000.0, 2000.0) == "unknown"
    assert jobs.vanished_reason(None, ["epoch 3"], None, None, None) == "unknown"
    assert jobs.vanished_reason(0, [], None, None, None) == "finished"
    assert jobs.vanished_reason(143, [], None, None, None) == "stopped"
    assert jobs.vanished_reason(1, [], 0, None, None) == "exited_nonzero"


def test_layout_and_wrapper_versioning():
    paths = job_layout.job_paths("/r", "abl-1")
    assert paths["pid_file"] == "/r/abl-1/job.pid" and paths["log_path"] == "/r/abl-1/job.log"
    assert paths["status_file"] == "/r/abl-1/status.json" and paths["items_dir"] == "/r/abl-1/items"
    assert job_layout.job_paths("/r", "x", "/logs/x.log")["log_path"] == "/logs/x.log"
    one = job_wrapper.wrapper_text("abl-1", paths, "python train.py", env={"A": "1"})
    again = job_wrapper.wrapper_text("abl-1", paths, "python train.py", env={"A": "1"})
    other = job_wrapper.wrapper_text("abl-1", paths, "python train.py", env={"A": "2"})
    assert job_wrapper.wrapper_name(one) == job_wrapper.wrapper_name(again) != job_wrapper.wrapper_name(other)
    assert job_wrapper.wrapper_name(one).startswith("wrapper-") and job_wrapper.wrapper_name(one).endswith(".sh")
    assert "export PYTHONUNBUFFERED=1" in one and "bash -c 'python train.py'" in one
    assert job_wrapper.command_line(["python", "a b.py", "--x=$HOME"]) == "python 'a b.py' '--x=$HOME'"
    assert job_layout.tmux_session("abl-1") == "trainer-abl-1"
    assert job_layout.valid_name("abl-1.v2_x") and not job_layout.valid_name("a/b") and not job_layout.valid_name("..")


def test_status_and_pid_files():
    status = job_layout.parse_status(json.dumps({"item": "007", "exit_code": 0, "started": "a", "finished": "b"}))
    assert status == {"item": "007", "exit_code": 0, "started": "a", "finished": "b"}
    assert job_layout.parse_status("{not json") is None
    assert job_layout.parse_status(None) is None
    assert job_layout.parse_status('{"exit_code": "0"}')["exit_code"] is None
    assert job_layout.parse_int_file("4242\n") == 4242
    assert job_layout.parse_int_file("") is None and job_layout.parse_int_file(None) is None


def test_item_statuses(tmp_path):
    for item, code in (("001", 0), ("002", 0), ("003", 1)):
        (tmp_path / item).mkdir()
        (tmp_path / item / "status.json").write_text(json.dumps({"exit_code": code}))
    (tmp_path / "004").mkdir()  # in progress: no status yet
    found = job_layout.item_statuses(str(tmp_path))
    assert [(s["item"], s["exit_code"]) for s in found] == [("001", 0), ("002", 0), ("003", 1)]
    assert job_layout.item_statuses(str(tmp_path / "absent")) == []


def base_job(**changes):
    job = {"name": "abl", "job_dir": "/r/abl", "exists": True, "alive": True, "crash_markers": [],
           "crash_marker_count": 0, "items_total": 0, "items_done": 0, "last_exit_code": None,
           "vanished_reason": None, "log_age_seconds": 10, "log_path": "/r/abl/job.log",
           "oom_kills_since_launch": 0}
    job.update(changes)
    return job


def codes(found):
    return [(f["code"], f["level"]) for f in found]


def test_job_findings():
    assert codes(jobs.job_findings(base_job(), 1800)) == []
    assert codes(jobs.job_findings(base_job(log_age_seconds=4000), 1800)) == [("log_stale", "WARN")]
    assert codes(jobs.job_findings(base_job(exists=False), 1800)) == [("job_missing", "FAIL")]
    crashed = base_job(crash_markers=[{"line_no": 3, "kind": "traceback", "text": "Traceback"}], crash_marker_count=1)
    assert codes(jobs.job_findings(crashed, 1800)) == [("job_crashed", "FAIL")]
    gone = base_job(alive=False, items_total=10, items_done=4, vanished_reason="unknown")
    found = jobs.job_findings(gone, 1800)
    assert codes(found) == [("job_gone_incomplete", "FAIL")] and "4/10" in found[0]["message"]
    done = base_job(alive=False, items_total=2, items_done=2, last_exit_code=0, log_age_seconds=99999)
    assert codes(jobs.job_findings(done, 1800)) == [("job_finished", "INFO")]
    assert codes(jobs.job_findings(base_job(alive=False, last_exit_code=0, items_total=3, items_done=2), 1800)) == [
        ("job_gone_incomplete", "FAIL")]
    assert codes(jobs.job_findings(base_job(oom_kills_since_launch=2), 1800)) == [("oom_killed", "WARN")]
    oom_gone = base_job(alive=False, last_exit_code=137, oom_kills_since_launch=1, vanished_reason="oom_kill")
    assert codes(jobs.job_findings(oom_gone, 1800)) == [("job_gone_incomplete", "FAIL"), ("oom_killed", "FAIL")]


def test_the_wrapper_writes_its_status_with_job_layout(tmp_path):
    """The wrapper has no status writer of its own: it runs job_layout's, from the library in the job directory."""
    import subprocess
    import sys

    paths = job_layout.job_paths(str(tmp_path), "abl-1")
    lib = str(tmp_path / "abl-1" / "lib")
    assert job_wrapper.install_lib(lib) is True
    assert job_wrapper.install_lib(lib) is False  # unchanged: nothing written
    package = os.path.join(lib, *job_wrapper.PACKAGE.split("/"))
    assert sorted(os.listdir(package)) == ["atomic.py", "job_layout.py", "procfs.py", "safe_read.py"]
    text = job_wrapper.wrapper_text("abl-1", paths, "exit 3", python=sys.executable, lib_dir=lib)
    assert "printf '{" not in text and "-m %s status" % job_layout.CLI_MODULE in text
    wrapper = tmp_path / "abl-1" / job_wrapper.wrapper_name(text)
    wrapper.write_text(text)
    env = {"PATH": os.environ["PATH"]}  # no PYTHONPATH: the copied library alone must do
    assert subprocess.run(["bash", str(wrapper)], env=env, timeout=60, check=False).returncode == 3
    status = json.loads((tmp_path / "abl-1" / "status.json").read_text())
    assert status["exit_code"] == 3 and status["item"] is None and status["started"] and status["finished"]
    assert "==== trainer: finished " in (tmp_path / "abl-1" / "job.log").read_text()


def test_the_job_library_holds_everything_job_layout_imports():
    """detached_job ships JOB_LIB to the job directory; a module_util that job_layout (or one of the list) imports and
    that is not in it would make the wrapper's status call fail on the box with an ImportError."""
    import re

    shipped = {module.__name__.rsplit(".", 1)[-1] for module in job_wrapper.JOB_LIB}
    for module in job_wrapper.JOB_LIB:
        source = job_wrapper.module_source(module)
        imports = re.findall(r"plugins\.module_utils(?:\.(\w+)| import ([\w, ]+))", source)
        for name in {m.split()[0] for a, b in imports for m in (a or b).split(",")}:
            assert name in shipped, "%s imports %s, which JOB_LIB does not ship" % (module.__name__, name)


def test_open_log_refuses_what_is_not_a_regular_file_without_blocking(tmp_path):
    os.mkfifo(str(tmp_path / "fifo"))
    for path, kind in ((str(tmp_path / "fifo"), "a FIFO"), ("/dev/zero", "a character device"),
                       (str(tmp_path), "a directory")):
        with pytest.raises(job_log.LogRefused, match=kind):
            job_log.open_log(path)
    assert job_log.open_log(str(tmp_path / "absent")) == (None, None)
    os.symlink("/etc/hostname", str(tmp_path / "out.log"))
    with pytest.raises(job_log.LogRefused, match="outside"):
        job_log.open_log(str(tmp_path / "out.log"), inside=str(tmp_path))
    (tmp_path / "real.log").write_text("x\n")
    os.symlink("real.log", str(tmp_path / "in.log"))
    fd, _st = job_log.open_log(str(tmp_path / "in.log"), inside=str(tmp_path))
    os.close(fd)


def test_fd_blocks_reads_a_bounded_window_from_a_whole_line(tmp_path, monkeypatch):
    path = tmp_path / "log"
    path.write_bytes(b"one\ntwo\nthree\n" + b"y" * 50 + b"\nfour\nfive")
    fd = os.open(str(path), os.O_RDONLY)
    try:
        skipped, blocks = job_log.fd_blocks(fd, os.fstat(fd).st_size)
        assert skipped == 0 and "".join(blocks).endswith("four\nfive")
        skipped, blocks = job_log.fd_blocks(fd, os.fstat(fd).st_size, limit=64, block=8)
        text = "".join(blocks)
        assert text.startswith("y") and text.endswith("four\nfive") and skipped == len(b"one\ntwo\nthree\n")
        monkeypatch.setattr(job_log, "MAX_LINE_CHARS", 10)  # an overlong line is cut, the next ones are kept
        _skipped, blocks = job_log.fd_blocks(fd, os.fstat(fd).st_size, block=8)
        assert "".join(blocks).splitlines() == ["one", "two", "three", "y" * 10, "four", "five"]
    finally:
        os.close(fd)


def test_scan_log_file_stops_a_catastrophic_regex_at_its_deadline(tmp_path):
    import time

    log = tmp_path / "job.log"
    log.write_text("a" * 40 + "b\n")
    began = time.monotonic()
    with pytest.raises(job_log.ScanTimeout):
        job_log.scan_log_file(str(log), job_log.compile_progress("(a+)+$"), seconds=1)
    assert time.monotonic() - began < 10
    found = job_log.scan_log_file(str(log), REGEX, tail_lines=1, seconds=5)
    assert found["scan"]["tail"] == ["a" * 40 + "b"] and found["skipped_bytes"] == 0 and found["mtime"]
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        job_log.call_with_deadline(lambda: 1 // 0, 5)


def test_shown_line_keeps_both_ends():
    assert job_log.shown_line("abc") == "abc"
    line = "s" * 3000 + "m" * 5000 + "e" * 3000
    cut = job_log.shown_line(line)
    assert cut.startswith("s" * 1024) and cut.endswith("e" * 3000) and "characters cut" in cut and len(cut) < 4200


def test_the_wrapper_ends_with_exit_74_when_its_log_cannot_be_written(tmp_path):
    """Issue 14, item 6: a log that is a directory used to leave the job running with its output lost and exit 0."""
    import subprocess
    import sys

    log_dir = tmp_path / "log-is-a-dir"
    log_dir.mkdir()
    paths = job_layout.job_paths(str(tmp_path), "j", str(log_dir))
    lib = str(tmp_path / "j" / "lib")
    job_wrapper.install_lib(lib)
    text = job_wrapper.wrapper_text("j", paths, "echo ran > %s/ran" % tmp_path, python=sys.executable, lib_dir=lib)
    wrapper = tmp_path / "j" / job_wrapper.wrapper_name(text)
    wrapper.write_text(text)
    proc = subprocess.run(["bash", str(wrapper)], env={"PATH": os.environ["PATH"]}, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 74 and "cannot write the log" in proc.stdout
    assert json.loads((tmp_path / "j" / "status.json").read_text())["exit_code"] == 74
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("started, finished, seconds", [
    ("2026-07-03T10:00:00Z", "2026-07-03T10:00:02Z", 2),
    ("2026-07-03T23:59:59Z", "2026-07-04T00:00:29Z", 30),
    ("2026-07-03T10:00:05Z", "2026-07-03T10:00:00Z", None),   # finished before it started: unknown
    ("s", "f", None), (None, "2026-07-03T10:00:00Z", None), (3, 5, None)])
def test_item_seconds(started, finished, seconds):
    assert jobs.item_seconds({"started": started, "finished": finished}) == seconds


@pytest.mark.parametrize("queue, expected", [
    (None, (None, None)), ({}, (None, None)), ({"min_seconds": 0}, (None, None)), ({"min_seconds": True}, (None, None)),
    ({"min_seconds": "30"}, (None, None)), ({"min_seconds": 30}, (30, "WARN")),
    ({"min_seconds": 30, "min_seconds_fail": True}, (30, "FAIL")),
    ({"min_seconds": 30, "min_seconds_fail": "yes"}, (30, "WARN"))])
def test_min_seconds_of_the_queue_record(queue, expected):
    assert jobs.min_seconds_of(queue) == expected


def test_too_fast_items_and_their_one_finding():
    items = [{"item": "000", "exit_code": 0, "started": "2026-07-03T10:00:00Z", "finished": "2026-07-03T10:00:02Z"},
             {"item": "001", "exit_code": 0, "started": "2026-07-03T10:00:00Z", "finished": "2026-07-03T10:00:30Z"},
             {"item": "002", "exit_code": 1, "started": "2026-07-03T10:00:00Z", "finished": "2026-07-03T10:00:01Z"}]
    marked = jobs.mark_too_fast(items, 30)
    assert [(i["seconds"], i["too_fast"]) for i in marked] == [(2, True), (30, False), (1, False)]
    assert "seconds" not in items[0]  # new dicts
    found = jobs.too_fast_finding("train", marked, 30, "WARN")
    assert (found["code"], found["level"], found["items"], found["job"]) == ("item_too_fast", "WARN", ["000"], "train")
    assert "000 (2 s)" in found["message"]
    unchecked = jobs.mark_too_fast(items, None)
    assert not any(i["too_fast"] for i in unchecked) and jobs.too_fast_finding("train", unchecked, None, None) is None
