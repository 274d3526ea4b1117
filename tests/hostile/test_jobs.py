"""Hostile inputs for detached_job and job_status: names that tmux would alter or that read as options, paths that
are directories, FIFOs or devices, planted meta files and symlinks, unbounded logs and catastrophic regexes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile

import pytest

import hostile
from hostile import Case, start

from ansible_collections.remote_gpu.trainer.plugins.module_utils import job_layout, procfs
from ansible_collections.remote_gpu.trainer.plugins.modules import detached_job, job_status

TMUX = shutil.which("tmux")
needs_tmux = pytest.mark.skipif(not TMUX, reason="tmux is not installed")
STARTED = "==== trainer: started 2026-07-03T10:00:00Z pid 4194311 ====\n"


@pytest.fixture(autouse=True)
def private_tmux(monkeypatch):
    """A private tmux server (own socket directory), killed afterwards, and no TMUX of an outer session."""
    socket_dir = tempfile.mkdtemp(prefix="tmx")
    monkeypatch.setenv("TMUX_TMPDIR", socket_dir)
    monkeypatch.delenv("TMUX", raising=False)
    yield socket_dir
    if TMUX:
        subprocess.run([TMUX, "kill-server"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    shutil.rmtree(socket_dir, ignore_errors=True)


@pytest.fixture(autouse=True)
def kill_started_jobs(tmp_path):
    """Every job a case started under tmp_path is killed by its recorded PID afterwards."""
    yield
    for root, _dirs, files in os.walk(str(tmp_path)):
        if job_layout.PID_FILE in files:
            pid = job_layout.parse_int_file(job_layout.read_text(os.path.join(root, job_layout.PID_FILE)))
            if pid and procfs.pid_exists(pid):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


def planted_pid(mode_of):
    """A job directory whose PID files name a bystander process (its own group leader), with ``mode_of`` making
    them plantable by others: the arguments stop that job."""
    def build(tmp):
        proc = start(["sleep", "120"], start_new_session=True)
        path = job_dir(tmp)
        (path / "job.pid").write_text("%d\n" % proc.pid)
        (path / "job.starttime").write_text("%d\n" % procfs.read_stat(proc.pid)["starttime"])
        mode_of(path)
        return {"name": "j", "run_dir": str(tmp / "jobs"), "state": "stopped", "stop_timeout": 1}
    return build


def bystander_alive(result, _tmp):
    assert hostile.STARTED and hostile.STARTED[-1].poll() is None, "the planted PID was signalled"
    assert result.get("changed") is not True or result.get("failed")


def sessions():
    proc = subprocess.run([TMUX, "list-sessions", "-F", "#{session_name}"], capture_output=True, text=True,
                          check=False)
    return sorted(proc.stdout.split())


# --- builders: each makes the hostile files under the test's tmp_path and returns the task's arguments ----------

def start_args(**extra):
    def build(tmp):
        args = {"name": "j", "command": "true", "run_dir": str(tmp / "jobs"), "detach": "nohup"}
        args.update({key: (value(tmp) if callable(value) else value) for key, value in extra.items()})
        return args
    return build


def fifo(tmp, name="fifo"):
    path = tmp / name
    os.mkfifo(str(path))
    return str(path)


def directory(tmp, name="adir"):
    path = tmp / name
    path.mkdir(exist_ok=True)
    return str(path)


def a_file(tmp, name="afile", text="x\n"):
    path = tmp / name
    path.write_text(text)
    return str(path)


def job_dir(tmp, name="j", log=STARTED + "epoch 1\n", meta=None, final=None):
    """A job directory as detached_job leaves it, for a job that is no longer running."""
    path = tmp / "jobs" / name
    (path / "items").mkdir(parents=True)
    (path / "job.pid").write_text("%d\n" % (2 ** 22 + 7))  # above pid_max: never alive
    (path / "job.starttime").write_text("1\n")
    if log is not None:
        (path / "job.log").write_text(log)
    if meta is not None:
        (path / "job.meta.json").write_text(json.dumps(meta))
        os.chmod(str(path / "job.meta.json"), 0o600)
    if final is not None:
        (path / "status.json").write_text(json.dumps(final))
    return path


def status_args(name="j", **extra):
    def build(tmp):
        args = {"name": name, "run_dir": str(tmp / "jobs"), "fail_on": "never"}
        args.update(extra)
        return args
    return build


def status_of(build_job, **extra):
    """Arguments of job_status after ``build_job(tmp)`` made the job's files."""
    def build(tmp):
        build_job(tmp)
        args = {"name": "j", "run_dir": str(tmp / "jobs"), "fail_on": "never"}
        args.update({key: (value(tmp) if callable(value) else value) for key, value in extra.items()})
        return args
    return build


def planted_meta_writable(tmp):
    path = job_dir(tmp, meta={"log_path": "/etc/passwd", "detach": "tmux"})
    os.chmod(str(path / "job.meta.json"), 0o666)  # anyone could have written it


def planted_meta_in_open_dir(tmp):
    path = job_dir(tmp, meta={"log_path": "/etc/passwd"})
    os.chmod(str(path), 0o777)  # a run directory writable by others


def planted_meta_symlink(tmp):
    path = job_dir(tmp)
    elsewhere = tmp / "evil.json"
    elsewhere.write_text(json.dumps({"log_path": "/etc/passwd"}))
    os.symlink(str(elsewhere), str(path / "job.meta.json"))


def default_log_symlink_out(tmp):
    path = job_dir(tmp, log=None)
    os.symlink("/etc/passwd", str(path / "job.log"))


def default_log_symlink_inside(tmp):
    path = job_dir(tmp, log=None)
    (path / "real.log").write_text(STARTED + "epoch 4\n")
    os.symlink("real.log", str(path / "job.log"))


def status_fifo(tmp):
    path = job_dir(tmp)
    os.mkfifo(str(path / "status.json"))


def pid_fifo(tmp):
    path = job_dir(tmp)
    os.unlink(str(path / "job.pid"))
    os.mkfifo(str(path / "job.pid"))


def item_fifo(tmp):
    path = job_dir(tmp)
    (path / "items" / "001").mkdir()
    os.mkfifo(str(path / "items" / "001" / "status.json"))


def sparse_log(tmp):
    path = job_dir(tmp, log=None)
    with open(str(path / "job.log"), "wb") as handle:
        handle.write(STARTED.encode())
        handle.truncate(1 << 40)  # 1 TiB of zeros without a newline, almost nothing on disk
        handle.seek(0, os.SEEK_END)
        handle.write(b"\nepoch 9/10\n")


def binary_log(tmp):
    job_dir(tmp, log=STARTED + "epoch 2\n\xff\xfe garbage \x00\x01\n")
    path = tmp / "jobs" / "j" / "job.log"
    path.write_bytes(STARTED.encode() + b"epoch 2\n\xff\xfe garbage \x00\x01\n")


def catastrophic_log(tmp):
    job_dir(tmp, log=STARTED + "a" * 40 + "b\n")


def tmux_session_of(name):
    """Start a session exactly as detached_job names it for job ``name`` (a running job, as far as tmux knows)."""
    subprocess.run([TMUX, "new-session", "-d", "-s", job_layout.tmux_session(name), "sleep 120"], check=True)


def a_dot_b_running(extra):
    def build(tmp):
        tmux_session_of("a.b")
        args = {"name": "a_b", "run_dir": str(tmp / "jobs"), "detach": "tmux"}
        args.update(extra)
        return args
    return build


# --- checks ------------------------------------------------------------------------------------------------------

def no_passwd_lines(result, _tmp):
    job = result["jobs"][0]
    assert job["log_path"] != "/etc/passwd"
    assert not any(line.startswith("root:") for line in job["tail"]), job["tail"]


def untrusted_meta(result, tmp):
    no_passwd_lines(result, tmp)
    assert "job_meta_untrusted" in [f["code"] for f in result["findings"]]


def refused_log(result, tmp):
    no_passwd_lines(result, tmp)
    assert "log_refused" in [f["code"] for f in result["findings"]]


def nothing_started(result, tmp):
    assert result["started"] is False and result["pid"] is None
    job = tmp / "jobs" / "j"
    assert not any(name.startswith("wrapper-") or name == "job.pid" for name in os.listdir(str(job)))


def both_jobs(result, _tmp):
    assert result["started"] is True, result["msg"]
    assert job_layout.tmux_session("a.b") in sessions()  # a.b's session is untouched


def a_dot_b_kept(result, _tmp):
    assert result["changed"] is False and "not running" in result["msg"]
    assert sessions() == [job_layout.tmux_session("a.b")]


def status_not_exit_0(result, _tmp):
    job = result["jobs"][0]
    assert job["last_exit_code"] is None and job["alive"] is False


def window_of_huge_log(result, _tmp):
    job = result["jobs"][0]
    assert job["log_skipped_bytes"] > 0 and job["progress"]["value"] == 9
    assert all(len(line) < 8192 for line in job["tail"])


def replaced_bytes(result, _tmp):
    job = result["jobs"][0]
    assert job["progress"]["value"] == 2 and any("\ufffd" in line for line in job["tail"])


def inside_symlink_followed(result, _tmp):
    assert result["jobs"][0]["progress"]["value"] == 4


def launched_epoch_ignored(result, _tmp):
    assert result["jobs"][0]["vanished_reason"] == "unknown"


DJ, JS = detached_job, job_status
CASES = [
    # detached_job: names
    Case("dj: name with a slash", DJ, start_args(name="a/b"), "error", "job name"),
    Case("dj: name '..' (the run directory's parent)", DJ, start_args(name=".."), "error", "job name"),
    Case("dj: name with a trailing newline", DJ, start_args(name="abc\n"), "error", "job name"),
    Case("dj: name that reads as an option", DJ, start_args(name="-rf"), "error", "must not start with '-'"),
    Case("dj: name with a colon (a tmux target separator)", DJ, start_args(name="a:b"), "error", "job name"),
    Case("dj: name with shell syntax", DJ, start_args(name="x;rm -rf ~"), "error", "job name"),
    Case("dj: empty name", DJ, start_args(name=""), "error", "job name"),
    # detached_job: run_dir, command
    Case("dj: empty run_dir", DJ, start_args(run_dir=""), "error", "run_dir is empty"),
    Case("dj: relative run_dir", DJ, start_args(run_dir="jobs"), "error", "is relative"),
    Case("dj: blank command", DJ, start_args(command="   "), "error", "command is required"),
    Case("dj: empty command list", DJ, start_args(command=[]), "error", "non-empty string or a list"),
    Case("dj: command list with an empty program", DJ, start_args(command=["", "x"]), "error", "program) is empty"),
    Case("dj: command list holding a mapping", DJ, start_args(command=["ls", {"a": 1}]), "error",
         "list of strings"),
    Case("dj: command with a NUL byte", DJ, start_args(command="echo a\x00b"), "error", "NUL byte"),
    # detached_job: env
    Case("dj: env key starting with a digit", DJ, start_args(env={"1BAD": "x"}), "error",
         "not a valid shell variable name"),
    Case("dj: env key injecting a command", DJ, start_args(env={"X=1; rm -rf ~; Y": "x"}), "error",
         "not a valid shell variable name"),
    Case("dj: env key with a non-ASCII letter", DJ, start_args(env={"\u00e9t\u00e9": "x"}), "error",
         "not a valid shell variable name"),
    Case("dj: env value null", DJ, start_args(env={"A": None}), "error", "must be a string or a number, got null"),
    Case("dj: env value a mapping", DJ, start_args(env={"A": {"b": 1}}), "error", "must be a string or a number"),
    # detached_job: env_files, chdir
    Case("dj: env file missing", DJ, start_args(env_files=lambda tmp: [str(tmp / "nope.sh")]), "error",
         "does not exist"),
    Case("dj: env file is a directory", DJ, start_args(env_files=lambda tmp: [directory(tmp)]), "error",
         "is a directory"),
    Case("dj: env file is a FIFO", DJ, start_args(env_files=lambda tmp: [fifo(tmp)]), "error",
         "not a regular file"),
    Case("dj: env file relative", DJ, start_args(env_files=["hook.sh"]), "error", "must be an absolute path"),
    Case("dj: chdir relative", DJ, start_args(chdir="work"), "error", "must be an absolute path"),
    Case("dj: chdir is a file", DJ, start_args(chdir=a_file), "error", "is not a directory"),
    # detached_job: the log (issue 14, item 6: these reported "started" and exit 0 before)
    Case("dj: log_path is a directory", DJ, start_args(log_path=directory), "error", "is a directory",
         check=nothing_started),
    Case("dj: log_path under a regular file", DJ, start_args(log_path=lambda tmp: a_file(tmp) + "/job.log"),
         "error", "Not a directory"),
    Case("dj: log_path is a FIFO", DJ, start_args(log_path=fifo), "error", "not a regular file"),
    Case("dj: log_path is /dev/full", DJ, start_args(log_path="/dev/full"), "error", "not a regular file"),
    Case("dj: log_path is the job's own status.json", DJ,
         start_args(log_path=lambda tmp: str(tmp / "jobs" / "j" / "status.json")), "error", "job's own files"),
    Case("dj: log_path relative", DJ, start_args(log_path="logs/j.log"), "error", "must be an absolute path"),
    # detached_job: numbers and choices
    Case("dj: negative stop_timeout", DJ, start_args(stop_timeout=-1), "error", "stop_timeout"),
    Case("dj: stop_timeout of 31 years", DJ, start_args(stop_timeout=10 ** 9), "error", "0 to 86400"),
    Case("dj: unknown detach", DJ, start_args(detach="screen"), "error", "detach"),
    # detached_job: planted PID files never get a process signalled
    Case("dj: stop with a job.pid writable by others", DJ,
         planted_pid(lambda path: os.chmod(str(path / "job.pid"), 0o666)), "refused", check=bystander_alive),
    Case("dj: stop in a job directory writable by others", DJ,
         planted_pid(lambda path: os.chmod(str(path), 0o777)), "refused", check=bystander_alive),
    Case("dj: stop with job.pid a symlink to another job's", DJ,
         planted_pid(lambda path: (os.rename(str(path / "job.pid"), str(path / "other.pid")),
                                   os.symlink("other.pid", str(path / "job.pid")))), "refused",
         check=bystander_alive),
    # job_status: inputs
    Case("js: empty run_dir", JS, status_args(run_dir=""), "error", "run_dir is empty"),
    Case("js: name with a slash", JS, status_args(name="a/b"), "error", "job name"),
    Case("js: name with a newline", JS, status_args(name="j\n"), "error", "job name"),
    Case("js: negative tail_lines", JS, status_args(tail_lines=-1), "error", "tail_lines must be 0 or more"),
    Case("js: a billion tail_lines", JS, status_args(tail_lines=10 ** 9), "error", "tail_lines must be at most"),
    Case("js: negative stale_minutes", JS, status_args(stale_minutes=-5), "error", "stale_minutes"),
    Case("js: scan_timeout 0", JS, status_args(scan_timeout=0), "error", "scan_timeout"),
    Case("js: invalid progress_regex", JS, status_args(progress_regex="(unclosed"), "error",
         "not a valid regular expression"),
    Case("js: empty jobs list", JS, lambda tmp: {"jobs": [], "run_dir": str(tmp)}, "error", "jobs is empty"),
    Case("js: log_path given with jobs", JS,
         lambda tmp: {"jobs": [{"name": "j"}], "log_path": "/tmp/x.log", "run_dir": str(tmp)}, "error",
         "apply to name only"),
    Case("js: relative log_path", JS, status_args(log_path="j.log"), "error", "must be an absolute path"),
    Case("js: empty paths entry", JS, status_args(paths=[""]), "error", "paths[0] is empty"),
    # job_status: the log (tracebacks and hangs before)
    Case("js: log_path /dev/zero", JS, status_of(job_dir, log_path="/dev/zero"), "error", "not a regular file"),
    Case("js: log_path a FIFO", JS, status_of(job_dir, log_path=fifo), "error", "not a regular file (a FIFO)"),
    Case("js: log_path a directory", JS, status_of(job_dir, log_path=directory), "error", "(a directory)"),
    Case("js: catastrophic progress_regex", JS,
         status_of(catastrophic_log, progress_regex="(a+)+$", scan_timeout=2), "error", "catastrophic"),
    Case("js: a 1 TiB sparse log", JS, status_of(sparse_log), "ok", check=window_of_huge_log, timeout=60),
    Case("js: a log with invalid UTF-8 and NULs", JS, status_of(binary_log), "ok", check=replaced_bytes),
    # job_status: planted files (issue 14, item 7: /etc/shadow lines were shown)
    Case("js: meta writable by others names /etc/passwd", JS, status_of(planted_meta_writable), "ok",
         check=untrusted_meta),
    Case("js: meta in a job directory writable by others", JS, status_of(planted_meta_in_open_dir), "ok",
         check=untrusted_meta),
    Case("js: meta is a symlink to a planted file", JS, status_of(planted_meta_symlink), "ok",
         check=untrusted_meta),
    Case("js: default log is a symlink out of the job directory", JS, status_of(default_log_symlink_out), "ok",
         check=refused_log),
    Case("js: default log is a symlink inside the job directory", JS, status_of(default_log_symlink_inside), "ok",
         check=inside_symlink_followed),
    Case("js: status.json is a FIFO", JS, status_of(status_fifo), "ok", check=status_not_exit_0),
    Case("js: job.pid is a FIFO", JS, status_of(pid_fifo), "ok", check=status_not_exit_0),
    Case("js: an item's status.json is a FIFO", JS, status_of(item_fifo, queue_length=1), "ok",
         check=lambda result, tmp: result["jobs"][0]["items_done"] == 0),
    Case("js: meta with a launched_epoch that is text", JS,
         status_of(lambda tmp: job_dir(tmp, meta={"launched_epoch": "yesterday"})), "ok",
         check=launched_epoch_ignored),
    Case("js: meta with an oom_events_path that is a list", JS,
         status_of(lambda tmp: job_dir(tmp, meta={"oom_kill_at_launch": 1, "oom_events_path": ["/x"]})), "ok",
         check=lambda result, tmp: result["jobs"][0]["oom_kills_since_launch"] is None),
]

TMUX_CASES = [
    # issue 14, item 1: a.b and a_b were one tmux session
    Case("dj: start a_b while a.b runs", DJ, a_dot_b_running({"command": "sleep 30"}), "ok", check=both_jobs),
    Case("dj: stop a_b while a.b runs", DJ, a_dot_b_running({"state": "stopped"}), "ok", check=a_dot_b_kept),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_jobs(case, hostile):
    hostile(case)


@needs_tmux
@pytest.mark.parametrize("case", TMUX_CASES, ids=str)
def test_jobs_tmux(case, hostile):
    hostile(case)
