"""detached_job against real processes: real tmux, real setsid/nohup, real signals, in temporary directories."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import detached_job as detached_job_utils
from ansible_collections.remote_gpu.trainer.plugins.module_utils import procfs
from ansible_collections.remote_gpu.trainer.plugins.modules import detached_job, job_status

LONG = "for i in $(seq 1 600); do echo \"epoch $i\"; sleep 1; done"


def wait_for(predicate, seconds=15):
    """Poll until predicate() is true (a wait, not a timed assertion)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def job_pid(run_dir, name):
    try:
        with open(os.path.join(str(run_dir), name, "job.pid")) as handle:
            return int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def kill_group(pid):
    """SIGKILL a job's process group, by its recorded PID, if it is still ours and alive."""
    if pid and procfs.pid_exists(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


@pytest.fixture
def tmux_env(monkeypatch):
    """A private tmux server (own socket directory) that is killed afterwards; no nesting."""
    socket_dir = tempfile.mkdtemp(prefix="tmx")
    monkeypatch.setenv("TMUX_TMPDIR", socket_dir)
    monkeypatch.delenv("TMUX", raising=False)
    yield socket_dir
    tmux = shutil.which("tmux")
    if tmux:
        subprocess.run([tmux, "kill-server"], env=dict(os.environ, TMUX_TMPDIR=socket_dir),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    shutil.rmtree(socket_dir, ignore_errors=True)


@pytest.fixture
def run_dir(tmp_path, tmux_env):
    """The run directory; every job started in it is killed by PID afterwards."""
    path = tmp_path / "jobs"
    yield path
    if path.is_dir():
        for name in os.listdir(str(path)):
            kill_group(job_pid(path, name))


def start(runner, run_dir, name, command, **extra):
    args = {"name": name, "command": command, "run_dir": str(run_dir)}
    args.update(extra)
    return runner(detached_job, args)


def status(runner, run_dir, name, **extra):
    args = {"name": name, "run_dir": str(run_dir), "fail_on": "never"}
    args.update(extra)
    failed, result = runner(job_status, args)
    assert not failed, result
    return result


def finished(run_dir, name):
    """The wrapper wrote its final status and has exited."""
    pid = job_pid(run_dir, name)
    return os.path.exists(os.path.join(str(run_dir), name, "status.json")) and not (pid and procfs.pid_exists(pid))


def run_to_end(runner, run_dir, name, command, **extra):
    """Start a nohup job, wait until it has ended, and return job_status's report of it."""
    failed, result = start(runner, run_dir, name, command, detach="nohup", **extra)
    assert not failed, result
    assert wait_for(lambda: finished(run_dir, name))
    return status(runner, run_dir, name)


def codes(result):
    return sorted(f["code"] for f in result["findings"])


def test_nohup_start_is_idempotent_then_stop(module_runner, run_dir):
    failed, first = start(module_runner, run_dir, "abl", LONG, detach="nohup")
    assert not failed, first
    assert first["changed"] and first["started"] and first["running"] and first["detach"] == "nohup"
    pid = first["pid"]
    assert pid == job_pid(run_dir, "abl")
    stat = procfs.read_stat(pid)
    assert stat["pgrp"] == pid and stat["session"] == pid  # session leader: survives the SSH connection
    assert os.path.basename(first["wrapper"]).startswith("wrapper-")

    failed, again = start(module_runner, run_dir, "abl", LONG, detach="nohup")
    assert not failed and again["changed"] is False and again["started"] is False
    assert again["running"] and again["pid"] == pid

    assert wait_for(lambda: "epoch 2" in (run_dir / "abl" / "job.log").read_text())
    report = status(module_runner, run_dir, "abl")
    job = report["jobs"][0]
    assert job["alive"] and job["pid"] == pid and job["progress"]["unit"] == "epoch"
    assert job["crash_markers"] == [] and "job_gone_incomplete" not in codes(report)

    failed, stopped = module_runner(detached_job, {"name": "abl", "run_dir": str(run_dir), "state": "stopped",
                                                   "stop_timeout": 10})
    assert not failed and stopped["changed"] and stopped["running"] is False
    assert not procfs.pid_exists(pid)
    final = json.loads((run_dir / "abl" / "status.json").read_text())
    assert final["exit_code"] == 143 and final["item"] is None and final["started"] and final["finished"]

    failed, again = module_runner(detached_job, {"name": "abl", "run_dir": str(run_dir), "state": "stopped"})
    assert not failed and again["changed"] is False


def test_tmux_session_by_default(module_runner, run_dir, tmux_env):
    failed, result = start(module_runner, run_dir, "tm", LONG)
    assert not failed and result["detach"] == "tmux" and result["running"]
    tmux = shutil.which("tmux")
    assert subprocess.run([tmux, "has-session", "-t", "=trainer-tm"], check=False).returncode == 0
    assert wait_for(lambda: "epoch 2" in (run_dir / "tm" / "job.log").read_text())  # the pane stays open
    failed, result = module_runner(detached_job, {"name": "tm", "run_dir": str(run_dir), "state": "stopped"})
    assert not failed and result["changed"]
    assert wait_for(lambda: subprocess.run([tmux, "has-session", "-t", "=trainer-tm"], stderr=subprocess.DEVNULL,
                                           check=False).returncode != 0)


def test_tmux_with_a_space_in_the_run_dir(module_runner, tmp_path, tmux_env):
    spaced = tmp_path / "my jobs"
    try:
        failed, result = start(module_runner, spaced, "sp", LONG, detach="tmux")
        assert not failed and result["running"], result
        report = status(module_runner, spaced, "sp")
        assert report["jobs"][0]["alive"] and report["jobs"][0]["detach"] == "tmux"
    finally:
        kill_group(job_pid(spaced, "sp"))


def test_without_tmux_auto_falls_back_to_nohup(module_runner, run_dir, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "setsid", "nohup", "date", "mv", "rm", "mkdir", "dirname", "seq", "sleep"):
        os.symlink(shutil.which(tool), str(bin_dir / tool))
    monkeypatch.setenv("PATH", str(bin_dir))
    failed, result = start(module_runner, run_dir, "nt", LONG)
    assert not failed, result
    assert result["detach"] == "nohup" and result["running"]
    failed, result = start(module_runner, run_dir, "nt2", LONG, detach="tmux")
    assert failed and "tmux is not installed" in result["msg"]


def test_killed_job_is_gone_with_its_last_lines_and_no_oom_guess(module_runner, run_dir):
    failed, result = start(module_runner, run_dir, "k", LONG, detach="nohup")
    assert not failed
    assert wait_for(lambda: "epoch 3" in (run_dir / "k" / "job.log").read_text())
    os.killpg(result["pid"], signal.SIGKILL)  # the whole group dies: no status.json, like an external kill -9
    assert wait_for(lambda: not procfs.pid_exists(result["pid"]))
    report = status(module_runner, run_dir, "k", queue_length=5, tail_lines=3)
    job = report["jobs"][0]
    assert job["alive"] is False and job["pid"] is None and job["last_exit_code"] is None
    assert job["vanished_reason"] == "unknown"  # no oom_kill rise, no reboot: never guessed as OOM
    assert len(job["tail"]) == 3 and job["tail"][-1].startswith("epoch ")
    assert codes(report) == ["job_gone_incomplete"]
    assert report["status"] == "FAIL"


def test_child_killed_reports_killed_exit_137(module_runner, run_dir):
    failed, result = start(module_runner, run_dir, "c", ["bash", "-c", LONG], detach="nohup")
    assert not failed
    assert wait_for(lambda: "epoch 2" in (run_dir / "c" / "job.log").read_text())
    stats = procfs.all_stats()
    child = [pid for pid, st in stats.items() if st["ppid"] == result["pid"] and st["state"] != "Z"][0]
    os.kill(child, signal.SIGKILL)  # what the OOM killer does to the biggest process
    assert wait_for(lambda: finished(run_dir, "c"))
    job = status(module_runner, run_dir, "c")["jobs"][0]
    assert job["last_exit_code"] == 137
    assert any(m["kind"] == "killed" for m in job["crash_markers"])  # bash's "<pid> Killed" line
    assert job["vanished_reason"] in ("killed", "oom_kill")


def test_traceback_is_a_crash(module_runner, run_dir):
    report = run_to_end(module_runner, run_dir, "tb", "echo 'epoch 1'; python3 -c 'raise ValueError(42)'")
    job = report["jobs"][0]
    assert codes(report) == ["job_crashed", "job_gone_incomplete"]
    assert job["crash_markers"][0]["kind"] == "traceback" and job["crash_markers"][0]["line_no"] == 3
    assert job["last_exit_code"] == 1 and job["vanished_reason"] == "exited_nonzero"
    failed, result = module_runner(job_status, {"name": "tb", "run_dir": str(run_dir)})
    assert failed and result["msg"].startswith("job_")


def test_metric_named_val_error_is_not_a_crash(module_runner, run_dir):
    report = run_to_end(module_runner, run_dir, "ve", "echo 'Epoch 3/10 val_error=0.3 error_rate=0.1'")
    job = report["jobs"][0]
    assert job["crash_markers"] == [] and job["last_exit_code"] == 0
    assert job["progress"]["value"] == 3 and job["progress"]["total"] == 10
    assert codes(report) == ["job_finished"] and report["status"] == "PASS"


def test_restart_marker_hides_the_previous_crash_and_wrappers_are_versioned(module_runner, run_dir):
    failed, first = start(module_runner, run_dir, "rs", "python3 -c 'raise SystemExit(\"x\")'; "
                          "python3 -c 'import sys; sys.exit(\"Traceback (most recent call last):\")'",
                          detach="nohup")
    assert not failed
    assert wait_for(lambda: finished(run_dir, "rs"))
    assert codes(status(module_runner, run_dir, "rs")) == ["job_crashed", "job_gone_incomplete"]
    failed, second = start(module_runner, run_dir, "rs", "echo step=5", detach="nohup", state="restarted")
    assert not failed and second["started"]
    assert second["wrapper"] != first["wrapper"] and os.path.exists(first["wrapper"])  # never rewritten
    assert wait_for(lambda: finished(run_dir, "rs"))
    report = status(module_runner, run_dir, "rs")
    assert codes(report) == ["job_finished"]
    assert report["jobs"][0]["progress"]["value"] == 5
    assert (run_dir / "rs" / "job.log").read_text().count("==== trainer: started ") == 2


def test_a_finished_job_is_not_run_again_by_started(module_runner, run_dir):
    failed, _result = start(module_runner, run_dir, "once", "echo ran >> once.txt", detach="nohup")
    assert not failed
    assert wait_for(lambda: finished(run_dir, "once"))
    failed, again = start(module_runner, run_dir, "once", "echo ran >> once.txt", detach="nohup")
    assert not failed and again["changed"] is False and again["started"] is False
    assert "state=restarted" in again["msg"]
    failed, rerun = start(module_runner, run_dir, "once", "echo ran >> once.txt", detach="nohup", state="restarted")
    assert not failed and rerun["changed"] and rerun["started"]
    assert wait_for(lambda: finished(run_dir, "once") and (run_dir / "once" / "once.txt").read_text() == "ran\nran\n")


def test_a_job_that_ignores_sigterm_gets_sigkill(module_runner, run_dir):
    failed, result = start(module_runner, run_dir, "stubborn", "trap '' TERM; echo ready; sleep 600 & wait; sleep 600",
                           detach="nohup")
    assert not failed
    assert wait_for(lambda: "ready" in (run_dir / "stubborn" / "job.log").read_text())
    # wrapper, bash -c, sleep: the sleep is forked after "ready" is written, so wait for it too (a loaded machine)
    assert wait_for(lambda: len(procfs.group_members(result["pid"], procfs.all_stats())) >= 3)
    failed, stopped = module_runner(detached_job, {"name": "stubborn", "run_dir": str(run_dir), "state": "stopped",
                                                   "stop_timeout": 1})
    assert not failed and stopped["changed"] and stopped["running"] is False
    assert procfs.group_members(result["pid"], procfs.all_stats()) == []


QUEUE = r"""for item in 001 002 003; do
  d="$TRAINER_ITEMS_DIR/$item"; mkdir -p "$d"; echo "step $item"
  printf '{"item": "%s", "exit_code": 0, "started": "a", "finished": "b"}\n' "$item" > "$d/status.json.tmp"
  mv "$d/status.json.tmp" "$d/status.json"
done"""


def test_queue_items_written_through_trainer_items_dir(module_runner, run_dir):
    run_to_end(module_runner, run_dir, "queue", QUEUE)
    report = status(module_runner, run_dir, "queue", queue_length=3)
    assert report["jobs"][0]["items_done"] == 3 and codes(report) == ["job_finished"]
    report = status(module_runner, run_dir, "queue", queue_length=4)
    assert codes(report) == ["job_gone_incomplete"] and "3/4" in report["findings"][0]["message"]


def test_env_files_env_chdir_and_argv_list(module_runner, run_dir, tmp_path):
    env_file = tmp_path / "hook.sh"
    env_file.write_text("export FROM_HOOK=hooked\n")
    work = tmp_path / "work dir"
    work.mkdir()
    failed, _result = start(module_runner, run_dir, "env",
                            ["bash", "-c", 'echo "$FROM_HOOK $EXTRA $PYTHONUNBUFFERED"; pwd; echo "$TRAINER_ITEMS_DIR"'],
                            detach="nohup", env_files=[str(env_file)], env={"EXTRA": "it's x"}, chdir=str(work),
                            log_path=str(tmp_path / "logs" / "env.log"))
    assert not failed
    assert wait_for(lambda: finished(run_dir, "env"))
    log = (tmp_path / "logs" / "env.log").read_text()
    assert "hooked it's x 1" in log and str(work) in log and str(run_dir / "env" / "items") in log
    report = status(module_runner, run_dir, "env")
    # recorded at launch, outside the job directory: never read on the record's word alone (issue 29)
    assert report["jobs"][0]["log_path"] == str(run_dir / "env" / "job.log")
    assert any(f["code"] == "job_meta_untrusted" for f in report["findings"])
    report = status(module_runner, run_dir, "env", log_path=str(tmp_path / "logs" / "env.log"))  # the task's word
    assert report["jobs"][0]["log_path"] == str(tmp_path / "logs" / "env.log")


def test_env_dir_sources_its_fragments_in_name_order_and_follows_no_link(module_runner, run_dir, tmp_path):
    env_dir = tmp_path / "env.d"
    env_dir.mkdir()
    (env_dir / "20-second.sh").write_text('export ORDER="${ORDER}b"\n')
    (env_dir / "10-first.sh").write_text('export ORDER="${ORDER}a"\n')
    (env_dir / "README.sh").write_text("export ORDER=not-a-fragment\n")  # no NN- prefix
    (env_dir / "30-off.sh.bak").write_text("export ORDER=backup\n")
    (env_dir / "40-sub.sh").mkdir()
    outside = tmp_path / "outside.sh"
    outside.write_text("export ORDER=followed-a-link\n")
    (env_dir / "50-link.sh").symlink_to(outside)
    hook = tmp_path / "hook.sh"
    hook.write_text('export ORDER="${ORDER}0"\n')
    failed, result = start(module_runner, run_dir, "frag", ["bash", "-c", 'echo "order=$ORDER"'], detach="nohup",
                           env_files=[str(hook)], env_dir=str(env_dir))
    assert not failed, result
    assert result["env_files"] == [str(hook), str(env_dir / "10-first.sh"), str(env_dir / "20-second.sh")]
    assert wait_for(lambda: finished(run_dir, "frag"))
    assert "order=0ab" in (run_dir / "frag" / "job.log").read_text()


def test_env_dir_missing_holds_none_and_a_file_or_too_many_fail_naming_it(module_runner, run_dir, tmp_path):
    failed, result = start(module_runner, run_dir, "none", "true", env_dir=str(tmp_path / "absent"),
                           _ansible_check_mode=True)
    assert not failed and result["env_files"] == [] and result["started"], result
    not_dir = tmp_path / "env.d"
    not_dir.write_text("")
    failed, result = start(module_runner, run_dir, "file", "true", env_dir=str(not_dir))
    assert failed and "env_dir %s is not a directory" % not_dir in result["msg"], result
    assert not (run_dir / "file").exists()  # refused before anything was written
    crowded = tmp_path / "crowded"
    crowded.mkdir()
    for index in range(detached_job_utils.MAX_FRAGMENTS + 1):
        (crowded / ("%02d-%d.sh" % (index % 100, index))).write_text("")
    failed, result = start(module_runner, run_dir, "many", "true", env_dir=str(crowded))
    assert failed and "more than %d fragments" % detached_job_utils.MAX_FRAGMENTS in result["msg"], result
    assert not (run_dir / "many").exists()


def test_missing_env_file_and_bad_input_fail_cleanly(module_runner, run_dir, tmp_path):
    failed, result = start(module_runner, run_dir, "x", "true", env_files=[str(tmp_path / "nope.sh")])
    assert failed and str(tmp_path / "nope.sh") in result["msg"]
    assert set(result) >= {"pid", "running", "detach", "log_path", "run_dir", "started", "wrapper"}
    failed, result = start(module_runner, run_dir, "a/b", "true")
    assert failed and "name" in result["msg"]
    failed, result = module_runner(detached_job, {"name": "x", "run_dir": str(run_dir)})
    assert failed and "command is required" in result["msg"]
    failed, result = start(module_runner, run_dir, "x", "true", chdir=str(tmp_path / "absent"))
    assert failed and "chdir" in result["msg"]


def test_check_mode_predicts_and_does_nothing(module_runner, run_dir):
    failed, result = start(module_runner, run_dir, "cm", LONG, _ansible_check_mode=True)
    assert not failed and result["changed"] and result["started"] and result["running"] is False
    assert not (run_dir / "cm").exists()
    failed, real = start(module_runner, run_dir, "cm", LONG, detach="nohup")
    assert not failed and real["running"]
    failed, result = module_runner(detached_job, {"name": "cm", "run_dir": str(run_dir), "state": "stopped",
                                                  "_ansible_check_mode": True})
    assert not failed and result["changed"] and procfs.pid_exists(real["pid"])


def test_a_reused_pid_or_a_name_match_is_not_the_job(module_runner, run_dir):
    job_dir = run_dir / "ghost"
    job_dir.mkdir(parents=True)
    me = procfs.read_stat(os.getpid())
    (job_dir / "job.pid").write_text("%d\n" % os.getpid())  # a live PID, but another process's start time
    (job_dir / "job.starttime").write_text("%d\n" % (me["starttime"] + 7))
    impostor = subprocess.Popen(["bash", "-c", "exec -a trainer-ghost sleep 60"])  # the name in a command line
    try:
        report = status(module_runner, run_dir, "ghost")
        assert report["jobs"][0]["alive"] is False
        assert "job_gone_incomplete" in codes(report)
        failed, result = start(module_runner, run_dir, "ghost", "true", detach="nohup", _ansible_check_mode=True)
        assert not failed and result["changed"]  # would start: the ghost is not running
    finally:
        impostor.kill()
        impostor.wait()


def fill(directory, files, chunk=b"x" * 65536):
    """Write files until ENOSPC (bytes) or create empty ones until ENOSPC (inodes)."""
    for i in range(files):
        try:
            with open(os.path.join(str(directory), "f%06d" % i), "wb") as handle:
                if chunk:
                    while True:
                        handle.write(chunk)
                        handle.flush()
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                if chunk:
                    return
                continue
            raise


@pytest.mark.root
def test_refuses_to_start_on_a_full_disk(module_runner, tmp_path, tmux_env, tmpfs):
    with tmpfs(tmp_path / "full", "size=1m") as fs:
        fill(fs, 1)
        failed, result = start(module_runner, fs / "jobs", "f", "true", detach="nohup")
        assert failed and "refusing to start" in result["msg"] and "bytes_high" in result["msg"]
        assert "free of" in result["msg"]
        assert not (fs / "jobs").exists()


@pytest.mark.root
def test_refuses_to_start_on_an_inode_exhausted_log_disk(module_runner, tmp_path, tmux_env, tmpfs):
    with tmpfs(tmp_path / "inodes", "size=8m,nr_inodes=64") as fs:
        fill(fs, 100, chunk=b"")
        failed, result = start(module_runner, tmp_path / "jobs", "i", "true", detach="nohup",
                               log_path=str(fs / "logs" / "i.log"))
        assert failed and "inodes_exhausted" in result["msg"]


def test_look_alike_names_are_two_jobs_with_two_tmux_sessions(module_runner, run_dir, tmux_env):
    """Issue 14, item 1: tmux turns '.' into '_', so a.b and a_b once shared the session trainer-a_b."""
    tmux = shutil.which("tmux")
    failed, dotted = start(module_runner, run_dir, "a.b", LONG, detach="tmux")
    assert not failed and dotted["running"], dotted
    failed, under = start(module_runner, run_dir, "a_b", LONG, detach="tmux")
    assert not failed and under["started"] and under["running"], under  # not "already running (pid None)"
    assert under["pid"] != dotted["pid"]
    listed = subprocess.run([tmux, "list-sessions", "-F", "#{session_name}"], capture_output=True, text=True,
                            check=True).stdout.split()
    assert sorted(listed) == ["trainer-a+b", "trainer-a_b"]
    failed, stopped = module_runner(detached_job, {"name": "a_b", "run_dir": str(run_dir), "state": "stopped"})
    assert not failed and stopped["changed"]
    assert not procfs.pid_exists(under["pid"]) and procfs.pid_exists(dotted["pid"])  # a.b is untouched
    report = status(module_runner, run_dir, "a.b")
    assert report["jobs"][0]["alive"] and report["jobs"][0]["pid"] == dotted["pid"]


def test_a_log_that_is_a_directory_fails_before_anything_starts(module_runner, run_dir, tmp_path):
    """Issue 14, item 6: this used to report "started" while every line of output was lost, then exit 0."""
    log_dir = tmp_path / "logdir"
    log_dir.mkdir()
    failed, result = start(module_runner, run_dir, "ld", "echo ran", detach="nohup", log_path=str(log_dir))
    assert failed and str(log_dir) in result["msg"] and "is a directory" in result["msg"]
    assert result["started"] is False and not (run_dir / "ld" / "job.pid").exists()
    failed, result = start(module_runner, run_dir, "ld", "echo ran", detach="nohup", log_path=str(log_dir),
                           _ansible_check_mode=True)
    assert failed and "is a directory" in result["msg"]


@pytest.mark.root
def test_a_log_on_a_read_only_filesystem_fails_with_its_path(module_runner, run_dir, tmp_path, tmpfs):
    with tmpfs(tmp_path / "ro", "size=1m,ro") as fs:
        log = fs / "logs" / "ro.log"
        failed, result = start(module_runner, run_dir, "ro", "echo ran", detach="nohup", log_path=str(log))
        assert failed and "cannot be written" in result["msg"] and str(fs / "logs") in result["msg"]
        assert result["started"] is False and not (run_dir / "ro" / "job.pid").exists()
        failed, result = start(module_runner, run_dir, "ro", "echo ran", detach="nohup", log_path=str(log),
                               _ansible_check_mode=True)
        assert failed and "cannot be written" in result["msg"]


def test_check_mode_refuses_a_log_under_a_regular_file(module_runner, run_dir, tmp_path):
    (tmp_path / "plain").write_text("x")
    failed, result = start(module_runner, run_dir, "cf", "true", log_path=str(tmp_path / "plain" / "j.log"),
                           _ansible_check_mode=True)
    assert failed and "Not a directory" in result["msg"] and str(tmp_path / "plain") in result["msg"]


def test_resumed_starts_the_recorded_wrapper_again(module_runner, run_dir):
    """state=resumed (autopilot's heal, issue 11): the wrapper job.meta.json names is run again, as it was
    detached, with no command given; a running or finished job is left alone, and a job never started is refused."""
    failed, result = module_runner(detached_job, {"name": "rs", "run_dir": str(run_dir), "state": "resumed"})
    assert failed and "names no wrapper" in result["msg"]
    marker = run_dir.parent / "runs.txt"
    failed, first = start(module_runner, run_dir, "rs", "echo run >> %s; exit 3" % marker, detach="nohup")
    assert not failed, first
    assert wait_for(lambda: finished(run_dir, "rs"))
    failed, again = module_runner(detached_job, {"name": "rs", "run_dir": str(run_dir), "state": "resumed"})
    assert not failed and again["started"] and again["wrapper"] == first["wrapper"], again
    assert again["detach"] == "nohup" and again["msg"].startswith("resumed rs under nohup")
    assert wait_for(lambda: finished(run_dir, "rs") and marker.read_text().count("run") == 2)
    json.dump({"item": None, "exit_code": 0, "started": "a", "finished": "b"},
              open(os.path.join(str(run_dir), "rs", "status.json"), "w"))
    failed, done = module_runner(detached_job, {"name": "rs", "run_dir": str(run_dir), "state": "resumed"})
    assert not failed and not done["changed"] and "already finished" in done["msg"]
    os.unlink(os.path.join(str(run_dir), "rs", "status.json"))
    os.chmod(os.path.join(str(run_dir), "rs", "job.meta.json"), 0o666)
    failed, untrusted = module_runner(detached_job, {"name": "rs", "run_dir": str(run_dir), "state": "resumed"})
    assert failed and "writable by group or others" in untrusted["msg"]
