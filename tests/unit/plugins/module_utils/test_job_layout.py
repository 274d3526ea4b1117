"""job_layout: the one owner of the job directory, its meta and status files, and liveness."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from ansible_collections.remote_gpu.trainer.plugins.module_utils import job_layout


def test_write_status_is_atomic_json_and_creates_parents(tmp_path):
    path = tmp_path / "job" / "items" / "007" / "status.json"
    job_layout.write_status(str(path), job_layout.status_record(3, "t0", item="007", arg="a"))
    data = json.loads(path.read_text())
    assert data["item"] == "007" and data["exit_code"] == 3 and data["started"] == "t0" and data["arg"] == "a"
    assert data["finished"].endswith("Z")
    assert os.listdir(str(path.parent)) == ["status.json"]  # no temporary file left
    job_layout.write_status(str(path), job_layout.status_record(0, "t1", item="007", finished="t2"))
    assert job_layout.parse_status(path.read_text()) == {"item": "007", "exit_code": 0, "started": "t1",
                                                         "finished": "t2"}


def test_status_record_has_the_four_keys_and_the_extra_ones():
    record = job_layout.status_record(1, "s", item="i", finished="f", sync_error="x")
    assert record == {"item": "i", "exit_code": 1, "started": "s", "finished": "f", "sync_error": "x"}
    assert job_layout.status_record(0, None)["item"] is None


def test_is_done_needs_an_int_zero():
    assert job_layout.is_done({"exit_code": 0})
    assert not job_layout.is_done({"exit_code": False}) and not job_layout.is_done({"exit_code": "0"})
    assert not job_layout.is_done(None) and not job_layout.is_done({})


def test_read_record_and_meta(tmp_path):
    paths = job_layout.job_paths(str(tmp_path), "j")
    assert job_layout.read_meta(paths) == {}
    os.makedirs(paths["job_dir"])
    job_layout.write_meta(paths, {"detach": "tmux"})
    assert job_layout.read_meta(paths) == {"detach": "tmux"}
    assert oct(os.stat(paths["meta_file"]).st_mode & 0o777) == "0o600"
    (tmp_path / "list.json").write_text("[1]")
    assert job_layout.read_record(str(tmp_path / "list.json")) is None
    assert job_layout.read_record(str(tmp_path / "absent.json")) is None
    assert job_layout.item_status_path("/j/items", "003") == "/j/items/003/status.json"


def test_liveness_pid_with_starttime_else_tmux(tmp_path):
    paths = job_layout.job_paths(str(tmp_path), "j")
    os.makedirs(paths["job_dir"])
    asked = []
    assert job_layout.liveness(paths, lambda: asked.append(1) or True) == (None, True)
    assert asked == [1]  # no PID file yet: the tmux session decides
    with open("/proc/self/stat") as handle:
        starttime = int(handle.read().rsplit(")", 1)[1].split()[19])
    (tmp_path / "j" / "job.pid").write_text("%d\n" % os.getpid())
    (tmp_path / "j" / "job.starttime").write_text("%d\n" % starttime)
    assert job_layout.liveness(paths, lambda: False) == (os.getpid(), True)
    (tmp_path / "j" / "job.starttime").write_text("%d\n" % (starttime + 1))  # a reused PID is not the job
    assert job_layout.liveness(paths, lambda: True) == (None, False)


def test_tmux_has_session_asks_for_the_exact_session():
    calls = []
    assert job_layout.tmux_has_session(lambda argv: calls.append(argv) or (0, "", ""), "/bin/tmux", "abl")
    assert calls == [["/bin/tmux", "has-session", "-t", "=trainer-abl"]]
    assert not job_layout.tmux_has_session(lambda argv: (1, "", ""), "/bin/tmux", "abl")
    assert not job_layout.tmux_has_session(None, None, "abl")


def test_cli_writes_the_job_status(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    path = tmp_path / "status.json"
    proc = subprocess.run([sys.executable, "-m", job_layout.CLI_MODULE, "status", str(path), "--exit-code", "143",
                           "--started", "t0"], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(path.read_text())
    assert data["item"] is None and data["exit_code"] == 143 and data["started"] == "t0" and data["finished"]


def _start_group(tmp_path, script):
    proc = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    paths = job_layout.job_paths(str(tmp_path), "j")
    os.makedirs(paths["job_dir"], exist_ok=True)
    with open("/proc/%d/stat" % proc.pid) as handle:
        starttime = handle.read().rsplit(")", 1)[1].split()[19]
    (tmp_path / "j" / "job.starttime").write_text(starttime + "\n")
    return proc, paths


def test_stop_job_terms_the_group_then_kills_what_ignores_it(tmp_path):
    proc, paths = _start_group(tmp_path, "sleep 60 & wait")
    assert job_layout.stop_job(paths, proc.pid, timeout=5) is True
    assert proc.wait(timeout=5) == -15
    stubborn, paths = _start_group(tmp_path, "trap '' TERM; sleep 60 & wait; sleep 60")
    time.sleep(0.2)  # let bash install its trap
    assert job_layout.stop_job(paths, stubborn.pid, timeout=0.5, kill_wait=5) is True
    assert stubborn.wait(timeout=5) == -9


def test_look_alike_names_get_distinct_tmux_sessions():
    # tmux turns "." into "_": "a.b" and "a_b" must not map to one session (issue 14, item 1)
    assert job_layout.tmux_session("a.b") != job_layout.tmux_session("a_b")
    assert job_layout.tmux_session("a_b") == "trainer-a_b" and job_layout.tmux_session("a.b") == "trainer-a+b"
    for name in ("a.b", "a_b", "a-b", "v1.2.3", ".hidden", "x"):
        session = job_layout.tmux_session(name)
        assert "." not in session and ":" not in session
        assert job_layout.job_of_session(session) == name
    assert job_layout.job_of_session("other-a_b") is None and job_layout.job_of_session("trainer-a/b") is None


def test_names_that_would_be_altered_or_read_as_options_are_invalid():
    for bad in ("abc\n", "-rf", "a:b", "a b", "", ".", "..", None, "a/b", "\u00e9"):
        assert not job_layout.valid_name(bad), bad
        assert "job name" in job_layout.name_problem(bad)
    assert job_layout.name_problem("abl-1.v2_x") is None


def test_resolve_run_dir_refuses_empty_and_relative(tmp_path):
    assert job_layout.resolve_run_dir(str(tmp_path) + "/x/../jobs") == str(tmp_path / "jobs")
    assert job_layout.resolve_run_dir("~/j") == os.path.expanduser("~/j")
    for bad, words in (("", "empty"), ("  ", "empty"), ("jobs", "relative"), ("/a\nb", "newline")):
        try:
            job_layout.resolve_run_dir(bad)
        except ValueError as exc:
            assert words in str(exc)
        else:
            raise AssertionError("accepted %r" % bad)


def test_trusted_meta_only_from_the_users_own_private_file(tmp_path):
    paths = job_layout.job_paths(str(tmp_path), "j")
    os.makedirs(paths["job_dir"], mode=0o700)
    assert job_layout.trusted_meta(paths) == ({}, None)  # absent
    job_layout.write_meta(paths, {"log_path": "/x/job.log"})
    assert job_layout.trusted_meta(paths) == ({"log_path": "/x/job.log"}, None)
    assert "owned by uid" in job_layout.trusted_meta(paths, uid=os.geteuid() + 1)[1]
    os.chmod(paths["meta_file"], 0o622)
    meta, why = job_layout.trusted_meta(paths)
    assert meta == {} and "writable by group or others" in why
    os.chmod(paths["meta_file"], 0o600)
    os.chmod(paths["job_dir"], 0o777)
    assert "writable by others" in job_layout.trusted_meta(paths)[1]
    os.chmod(paths["job_dir"], 0o700)
    os.rename(paths["meta_file"], paths["meta_file"] + ".real")
    os.symlink(paths["meta_file"] + ".real", paths["meta_file"])
    assert "symbolic link" in job_layout.trusted_meta(paths)[1]
    os.unlink(paths["meta_file"])
    os.mkfifo(paths["meta_file"], 0o600)
    assert "not a regular file" in job_layout.trusted_meta(paths)[1]  # and it did not block


def test_read_text_never_opens_a_fifo_or_device_and_is_bounded(tmp_path):
    fifo = tmp_path / "job.pid"
    os.mkfifo(str(fifo))
    assert job_layout.read_text(str(fifo)) is None  # no reader would ever come: it must not block
    assert job_layout.read_text("/dev/zero") is None
    big = tmp_path / "big"
    big.write_text("7" * 100)
    assert job_layout.read_text(str(big), 10) == "7" * 10
    assert job_layout.read_text(str(tmp_path / "absent")) is None


def test_signal_trust_problem_refuses_plantable_pid_files(tmp_path):
    paths = job_layout.job_paths(str(tmp_path), "j")
    os.makedirs(paths["job_dir"], mode=0o700)
    for key in ("pid_file", "starttime_file"):
        with open(paths[key], "w") as handle:
            handle.write("1\n")
        os.chmod(paths[key], 0o644)
    assert job_layout.signal_trust_problem(paths) is None
    assert "owned by uid" in job_layout.signal_trust_problem(paths, uid=os.geteuid() + 1)
    os.chmod(paths["pid_file"], 0o666)
    assert "writable by others" in job_layout.signal_trust_problem(paths)
    os.chmod(paths["pid_file"], 0o644)
    os.chmod(paths["job_dir"], 0o777)
    assert "job directory" in job_layout.signal_trust_problem(paths)
    os.chmod(paths["job_dir"], 0o1777)  # sticky: others cannot replace the user's files
    assert job_layout.signal_trust_problem(paths) is None
    os.chmod(paths["job_dir"], 0o700)
    os.unlink(paths["starttime_file"])
    os.symlink(paths["pid_file"], paths["starttime_file"])
    assert "not a regular file" in job_layout.signal_trust_problem(paths)


def test_the_wrapper_writes_private_pid_files_whatever_the_umask(tmp_path):
    from ansible_collections.remote_gpu.trainer.plugins.module_utils import job_wrapper

    paths = job_layout.job_paths(str(tmp_path), "j")
    lib = str(tmp_path / "j" / "lib")
    job_wrapper.install_lib(lib)
    text = job_wrapper.wrapper_text("j", paths, "true", python=sys.executable, lib_dir=lib)
    wrapper = tmp_path / "j" / job_wrapper.wrapper_name(text)
    wrapper.write_text(text)
    subprocess.run(["bash", "-c", 'umask 000; exec bash "$0"', str(wrapper)], env={"PATH": os.environ["PATH"]},
                   timeout=60, check=True)
    for key in ("pid_file", "starttime_file"):
        assert os.stat(paths[key]).st_mode & 0o022 == 0
    assert job_layout.signal_trust_problem(paths) is None


def test_discover_jobs_lists_real_job_directories_by_name(tmp_path):
    run_dir = tmp_path / "jobs"
    for name, marker in (("train", "job.meta.json"), ("exp2", "job.pid"), ("done", "status.json"),
                         ("queued", "queue.json"), ("logged", "job.log")):
        (run_dir / name).mkdir(parents=True)
        (run_dir / name / marker).write_text("{}")
    (run_dir / "empty").mkdir()                                      # no file of the protocol: not a job
    (run_dir / "stray.txt").write_text("x")                          # a file, not a directory
    (run_dir / "-rf").mkdir()                                        # an invalid name
    (run_dir / "-rf" / "job.pid").write_text("1")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "job.pid").write_text("1")
    (run_dir / "linked").symlink_to(outside)                         # never followed out of the run directory
    assert job_layout.discover_jobs(str(run_dir)) == (["done", "exp2", "logged", "queued", "train"], None)


def test_discover_jobs_is_bounded_and_says_so(tmp_path):
    for index in range(5):
        (tmp_path / ("j%d" % index)).mkdir()
        (tmp_path / ("j%d" % index) / "job.log").write_text("")
    names, problem = job_layout.discover_jobs(str(tmp_path), limit=3)
    assert names == ["j0", "j1", "j2"] and "more than 3 jobs" in problem


def test_discover_jobs_of_a_missing_run_dir_is_empty(tmp_path):
    assert job_layout.discover_jobs(str(tmp_path / "nothing")) == ([], None)


def test_the_job_defaults_have_one_owner():
    """The modules' defaults (job_layout) and the playbooks' and roles' (group_vars/all.yml) are the same, and no
    module, playbook or role writes either literal again."""
    import pathlib
    import re
    import yaml
    repo = pathlib.Path(__file__).resolve().parents[4]
    group_all = yaml.safe_load((repo / "group_vars" / "all.yml").read_text(encoding="utf-8"))
    assert group_all["trainer_job_name"] == job_layout.DEFAULT_JOB_NAME
    assert group_all["trainer_run_dir"] == "{{ trainer_home_dir }}/%s" % job_layout.DEFAULT_RUN_DIR[2:]
    assert (repo / "playbooks" / "group_vars" / "all.yml").resolve() == (repo / "group_vars" / "all.yml").resolve()
    literal = re.compile(r"""default\(['"]train['"]\)|\.trainer/jobs['"]\)|default=["']~/\.trainer/jobs["']""")
    offenders = [str(path.relative_to(repo)) for folder in ("plugins", "playbooks", "roles")
                 for path in sorted((repo / folder).rglob("*")) if path.suffix in (".py", ".yml")
                 and path.is_file() and literal.search(path.read_text(encoding="utf-8"))]
    assert offenders == [], "take the job's name and run directory from their one owner"
