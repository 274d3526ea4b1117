"""launch_scripts: the environment an item's command runs in (the image's interpreter environment first on PATH,
conda's base activated, CPU threads from the cgroup quota) and the onstart hook's resume block, run under bash."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import launch_scripts

from test_launch_scripts import LIB, make, status

# The "training" command prints what it sees, one KEY=value per line.
SHOW = ("echo PYTHON=$(python); echo CONDA=${CONDA_DEFAULT_ENV-none}; echo OMP=${OMP_NUM_THREADS-unset}; "
        "echo MKL=${MKL_NUM_THREADS-unset}")
# A conda.sh like the image's: `conda activate base` exports the CONDA_* variables and puts base's bin first.
# It reads an unset variable, as conda's own functions do, so a `set -u` caller would die in it.
CONDA_SH = r"""
conda() {
    [ "$1" = activate ] && [ "$2" = base ] || return 1
    [ -z "$_CONDA_UNSET_PROBE" ] || return 2
    export CONDA_PREFIX=%(prefix)s CONDA_DEFAULT_ENV=base CONDA_SHLVL=1
    export PATH="%(prefix)s/bin:%(prefix)s/condabin:$PATH"
}
"""


def image(tmp_path, conda=True, name="image"):
    """A fake image environment: <prefix>/bin/python prints which python it is; optionally conda.sh."""
    prefix = tmp_path / name
    (prefix / "bin").mkdir(parents=True)
    python = prefix / "bin" / "python"
    python.write_text("#!/bin/sh\necho %s-python\n" % name)
    python.chmod(0o755)
    if conda:
        (prefix / "etc" / "profile.d").mkdir(parents=True)
        (prefix / "etc" / "profile.d" / "conda.sh").write_text(CONDA_SH % {"prefix": prefix})
    return str(prefix)


def shell_path(tmp_path):
    """A PATH whose `python` is not the image's (like the SSH shell's), with the usual tools after it."""
    other = tmp_path / "shellbin"
    other.mkdir(exist_ok=True)
    (other / "python").write_text("#!/bin/sh\necho shell-python\n")
    (other / "python").chmod(0o755)
    return "%s:/usr/local/bin:/usr/bin:/bin" % other


def run_item(tmp_path, env=None, **settings):
    scripts, job_dir = make(tmp_path, [{"item": "000", "arg": ""}], command=SHOW, durable=False, **settings)
    unset = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CONDA_DEFAULT_ENV", "CONDA_PREFIX")
    environ = {k: v for k, v in os.environ.items() if k not in unset}
    environ.update(HOME_LOG=str(tmp_path / "runs.log"), PATH=shell_path(tmp_path))
    environ.update(env or {})
    proc = subprocess.run(["bash", scripts[0]["path"], "000", ""], env=environ, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert status(job_dir, "000")["exit_code"] == 0
    seen = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line and " " not in line)
    return seen, proc.stdout


def test_without_a_prefix_the_command_keeps_the_shells_path(tmp_path):
    seen, out = run_item(tmp_path)
    assert seen == {"PYTHON": "shell-python", "CONDA": "none", "OMP": "unset", "MKL": "unset"}
    assert "trainer:" not in out.replace("==== trainer:", "")


def test_the_image_environment_comes_first_on_path(tmp_path):
    seen, out = run_item(tmp_path, env_prefix=image(tmp_path, conda=False))
    assert seen["PYTHON"] == "image-python" and seen["CONDA"] == "none"
    assert "trainer:" not in out.replace("==== trainer:", "")


def test_conda_base_is_activated_under_set_u_and_its_bin_is_first(tmp_path):
    seen, out = run_item(tmp_path, env_prefix=image(tmp_path), conda_activate=True)
    assert seen["PYTHON"] == "image-python" and seen["CONDA"] == "base"
    assert "trainer:" not in out.replace("==== trainer:", "")


def test_missing_conda_or_environment_is_said_and_the_command_still_runs(tmp_path):
    seen, out = run_item(tmp_path, env_prefix=image(tmp_path, conda=False), conda_activate=True)
    assert seen["PYTHON"] == "image-python" and seen["CONDA"] == "none"
    assert "trainer: no conda in %s" % (tmp_path / "image") in out

    seen, out = run_item(tmp_path, env_prefix=str(tmp_path / "nowhere"), conda_activate=True)
    assert seen["PYTHON"] == "shell-python"
    assert "trainer: the interpreter environment %s/bin does not exist" % (tmp_path / "nowhere") in out
    assert "set trainer_env_prefix (or launch_env_prefix)" in out


def test_threads_come_from_the_quota_unless_the_job_environment_sets_them(tmp_path):
    seen, _out = run_item(tmp_path, threads=3)
    assert (seen["OMP"], seen["MKL"]) == ("3", "3")
    seen, _out = run_item(tmp_path, env={"OMP_NUM_THREADS": "7"}, threads=3)
    assert (seen["OMP"], seen["MKL"]) == ("7", "3")
    seen, _out = run_item(tmp_path, env={"MKL_NUM_THREADS": ""}, threads=3)
    assert (seen["OMP"], seen["MKL"]) == ("3", "")  # set, even empty, is the user's choice


@pytest.mark.parametrize("cpu, threads", [
    ({"cpu_quota": 12.0, "affinity_cpus": 64, "host_cpus": 64, "recommended_threads": 12}, 12),
    ({"cpu_quota": None, "affinity_cpus": 8, "host_cpus": 64, "recommended_threads": 8}, 8),
    ({"cpu_quota": None, "affinity_cpus": 64, "host_cpus": 64, "recommended_threads": 64}, None),  # no limit
    ({"cpu_quota": 0.5, "affinity_cpus": 64, "host_cpus": 64, "recommended_threads": 1}, 1),
    ({"recommended_threads": None, "host_cpus": 64}, None),
    ({"recommended_threads": True, "host_cpus": 64}, None),
    ({}, None),
    (None, None),
])
def test_thread_count_from_env_audit(cpu, threads):
    assert launch_scripts.thread_count(cpu) == threads


def test_the_environment_is_part_of_the_run_wrappers_name(tmp_path):
    plain = make(tmp_path, [{"item": "000", "arg": ""}])[0][0]
    with_env = make(tmp_path, [{"item": "000", "arg": ""}], env_prefix="/opt/conda", conda_activate=True,
                    threads=4)[0][0]
    assert plain["path"] != with_env["path"]
    assert "local prefix=/opt/conda" in with_env["text"] and "OMP_NUM_THREADS=4" in with_env["text"]
    assert "conda.sh" not in plain["text"] and "OMP_NUM_THREADS" not in plain["text"]


@pytest.mark.parametrize("settings, message", [
    ({"conda_activate": True}, "conda_activate needs env_prefix"),
    ({"env_prefix": "miniconda3"}, "must be an absolute path"),
])
def test_bad_environment_settings_are_refused(tmp_path, settings, message):
    with pytest.raises(ValueError, match=message):
        make(tmp_path, [{"item": "000", "arg": ""}], **settings)


# --- the onstart hook's resume block ------------------------------------------------------------------------------

def hook(tmp_path, job_dir, detach="nohup", ids=("000", "001")):
    """An onstart.sh with the user's own lines around launch's block, as blockinfile writes it."""
    wrapper = job_dir / "wrapper-abc.sh"
    wrapper.write_text('echo "$$" > "%s/started.$$"\nsleep 0.2\n' % job_dir)
    block = launch_scripts.onstart_block("train.v2", str(job_dir), str(wrapper), detach, sys.executable, LIB,
                                         list(ids))
    path = tmp_path / "onstart.sh"
    path.write_text("#!/bin/bash\nset -eu\n# BEGIN remote_gpu.trainer launch job train.v2\n%s\n"
                    "# END remote_gpu.trainer launch job train.v2\necho user-line\n" % block)
    return path


def run_hook(path):
    proc = subprocess.run(["bash", str(path)], capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("user-line"), proc.stdout + proc.stderr
    return proc


def started(job_dir, wait=3.0):
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        found = sorted(p.name for p in job_dir.iterdir() if p.name.startswith("started."))
        if found:
            return found
        time.sleep(0.05)
    return []


def done(job_dir, item):
    (job_dir / "items" / item).mkdir(parents=True, exist_ok=True)
    (job_dir / "items" / item / "status.json").write_text(
        '{"item": "%s", "exit_code": 0, "started": "2026-01-01T00:00:00Z", "finished": "2026-01-01T00:01:00Z"}'
        % item)


def test_the_onstart_block_restarts_the_wrapper_when_items_are_pending(tmp_path):
    job_dir = tmp_path / "jobs" / "train.v2"
    job_dir.mkdir(parents=True)
    done(job_dir, "000")
    run_hook(hook(tmp_path, job_dir))
    assert len(started(job_dir)) == 1


def test_the_onstart_block_does_nothing_when_every_item_is_done(tmp_path):
    job_dir = tmp_path / "jobs" / "train.v2"
    job_dir.mkdir(parents=True)
    done(job_dir, "000")
    done(job_dir, "001")
    run_hook(hook(tmp_path, job_dir))
    assert started(job_dir, wait=1.0) == []


def test_the_onstart_block_leaves_a_running_job_alone(tmp_path):
    job_dir = tmp_path / "jobs" / "train.v2"
    job_dir.mkdir(parents=True)
    live = subprocess.Popen(["sleep", "30"])
    try:
        with open("/proc/%d/stat" % live.pid) as handle:
            starttime = handle.read().rsplit(")", 1)[1].split()[19]
        (job_dir / "job.pid").write_text("%d\n" % live.pid)
        (job_dir / "job.starttime").write_text(starttime + "\n")
        run_hook(hook(tmp_path, job_dir))
        assert started(job_dir, wait=1.0) == []
        # the same PID with another start time is a reused PID: the job is gone, so it is started again
        (job_dir / "job.starttime").write_text("1\n")
        run_hook(hook(tmp_path, job_dir))
        assert len(started(job_dir)) == 1
    finally:
        live.kill()
        live.wait()


def test_the_onstart_block_is_refused_for_an_unknown_detach():
    with pytest.raises(ValueError, match="detach must be tmux or nohup"):
        launch_scripts.onstart_block("train", "/j", "/j/wrapper-x.sh", None, "/py", "/lib", ["000"])


def test_the_onstart_block_names_the_launch_playbook_by_its_fqcn():
    """What the box prints when a resume fails names a command that works where the collection is installed."""
    block = launch_scripts.onstart_block("train", "/j", "/j/wrapper-x.sh", "nohup", "/py", "/lib", ["000"])
    assert "not resumed: run the playbook remote_gpu.trainer.launch again" in block and "launch.yml" not in block
