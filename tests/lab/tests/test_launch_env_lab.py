"""launch.yml and the job's environment on the lab fleet: the image's interpreter on AutoDL, the onstart hook on vast.

lab-01 is an AutoDL box of the ``autodl-image`` variant: no ``python3`` on PATH, and a non-login SSH shell has no
``python`` at all. The test gives its ``/root/miniconda3`` what the real image has there: its own site-packages
with a torch (a stub that says where it was imported from, found because ``/root/miniconda3`` is the interpreter's
own prefix: a ``pyvenv.cfg`` next to ``bin/``) and a ``conda.sh`` whose ``conda activate base`` sets the CONDA_*
variables. README's ``launch_command="python -m src.train -c"`` must then run with that torch, and code.json and each
item's status.json must record the torch of that environment (the job's), not the profile interpreter's.

lab-02 is a vast.ai box: a restart kills tmux and every process, then reruns ``/root/onstart.sh``. The test
simulates it (SIGKILL to the job, ``tmux kill-server``) and runs the hook as the platform would.
"""
from __future__ import annotations

import os
import re
import time

import pytest

from labhelpers import SshCounter, needs_root, started_fleet
from test_launch_lab import launch, read_json, wait_finished

pytestmark = needs_root

TRAIN_PY = r"""
import os
import sys

import torch

print("torch %s from %s" % (torch.__version__, torch.__file__))
print("python %s" % sys.executable)
print("conda %s" % os.environ.get("CONDA_DEFAULT_ENV"))
print("mkl %s" % os.environ.get("MKL_NUM_THREADS"))
config = sys.argv[sys.argv.index("-c") + 1]
with open(config) as src, open(os.path.join(os.environ["TRAINER_OUTPUT_DIR"], "best.pt"), "w") as dst:
    dst.write(src.read())
"""
CONDA_SH = r"""# lab stand-in for the image's conda.sh: `conda activate base` as conda does it
conda() {
    if [ "$1" = activate ] && [ "${2:-base}" = base ]; then
        export CONDA_PREFIX=/root/miniconda3 CONDA_DEFAULT_ENV=base CONDA_SHLVL=$((${CONDA_SHLVL:-0} + 1))
        export PATH="/root/miniconda3/bin:/root/miniconda3/condabin:$PATH"
        return 0
    fi
    echo "lab conda: only 'conda activate base' is emulated" >&2
    return 1
}
"""
TRAIN_SH = r"""#!/usr/bin/env bash
# usage: train.sh NAME [--wait FILE]
name=$1; wait=""
[ "${2-}" = --wait ] && wait=$3
echo "$TRAINER_ITEM $name" >> "$HOME/env-runs.log"
printf 'best-%s' "$name" > "$TRAINER_OUTPUT_DIR/best.pt"
if [ -n "$wait" ]; then while [ ! -e "$wait" ]; do sleep 0.2; done; fi
exit 0
"""
USER_ONSTART = ("#!/bin/bash\n# the user's own onstart lines\n"
                "echo \"user onstart $(date +%s%N)\" >> /root/user-onstart.log\n")


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "2", "--platform", "lab-02=vastai",
                       "--variant", "lab-01=autodl-image") as lab:
        yield lab


def changed(proc, host):
    line = re.search(r"^%s\s+:.*\bchanged=(\d+)" % re.escape(host), proc.stdout, re.M)
    return int(line.group(1))


def give_image_environment(fleet, host):
    """What the AutoDL image has in /root/miniconda3 besides bin/python: its own site-packages with torch, and
    conda.sh. -> the torch file the job must import."""
    version = fleet.ssh(host, "/root/miniconda3/bin/python -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'"
                        ).stdout.strip()
    site = "/root/miniconda3/lib/python%s/site-packages" % version
    fleet.ssh(host, "mkdir -p %s/torch /root/miniconda3/etc/profile.d && "
                    "printf 'home = /usr/bin\\ninclude-system-site-packages = false\\n' > /root/miniconda3/pyvenv.cfg"
                    " && printf '__version__ = \"2.5.1+image\"\\n' > %s/torch/__init__.py" % (site, site))
    fleet.ssh(host, "cat > /root/miniconda3/etc/profile.d/conda.sh << 'EOF'\n%sEOF" % CONDA_SH)
    return "%s/torch/__init__.py" % site


def test_readme_launch_command_runs_with_the_images_python_and_torch(fleet, tmp_path):
    torch_file = give_image_environment(fleet, "lab-01")
    # The situation of the issue: the image's python imports its torch, but the SSH shell finds no python at all.
    assert fleet.ssh("lab-01", "/root/miniconda3/bin/python -c 'import torch; print(torch.__file__)'"
                     ).stdout.strip() == torch_file
    assert fleet.ssh("lab-01", "command -v python || command -v python3", check=False).returncode != 0

    src = tmp_path / "src"
    (src / "src").mkdir(parents=True)
    (src / "src" / "__init__.py").write_text("")
    (src / "src" / "train.py").write_text(TRAIN_PY)
    (src / "cfg").mkdir()
    (src / "cfg" / "a.yaml").write_text("lr: 0.1\n")
    (src / "cfg" / "b.yaml").write_text("lr: 0.2\n")
    # README's Launch example, on one AutoDL host; launch_env sets MKL_NUM_THREADS, which the quota never overrides.
    launch(fleet, src, "-l", "lab-01", extra={"launch_command": "python -m src.train -c",
                                              "launch_queue": ["cfg/a.yaml", "cfg/b.yaml"],
                                              "launch_env": {"MKL_NUM_THREADS": "5"}})
    final = wait_finished(fleet, "lab-01", "train")
    log = fleet.ssh("lab-01", "cat ~/.trainer/jobs/train/job.log").stdout
    assert final["exit_code"] == 0, log
    assert "command not found" not in log and "No module named" not in log, log
    for item, config in (("000", "lr: 0.1\n"), ("001", "lr: 0.2\n")):
        status = read_json(fleet, "lab-01", "~/.trainer/jobs/train/items/%s/status.json" % item)
        assert status["exit_code"] == 0 and status["synced"][0]["path"] == "best.pt", log
        assert fleet.ssh("lab-01", "cat /root/autodl-fs/runs/train/%s/best.pt" % item).stdout == config
    assert log.count("torch 2.5.1+image from %s" % torch_file) == 2, log
    assert log.count("python /root/miniconda3/bin/python") == 2, log
    assert log.count("conda base") == 2 and log.count("mkl 5") == 2, log
    assert "trainer: no conda" not in log and "does not exist" not in log
    torch = read_json(fleet, "lab-01", "~/.trainer/jobs/train/code.json")["torch"]
    assert torch["location"] == os.path.dirname(torch_file) and torch["python"] == "/root/miniconda3/bin/python"
    for item in ("000", "001"):
        assert read_json(fleet, "lab-01", "~/.trainer/jobs/train/items/%s/status.json" % item)["torch"] == torch


def report(proc):
    """The role's last task's output (the report line of each host), with its line breaks undone."""
    return " ".join(proc.stdout[proc.stdout.rindex("Report this host"):].split())


def test_code_json_and_item_status_record_the_torch_of_the_jobs_environment(fleet, tmp_path):
    """The profile's interpreter is the system python here, which has no torch; the job runs in the image's
    environment (launch_env_prefix), whose torch is recorded. Without launch_env_prefix the job runs with the
    profile's interpreter, and the record says torch is not installed there."""
    torch_file = give_image_environment(fleet, "lab-01")
    system_python = fleet.ssh("lab-01", "readlink -f /root/miniconda3/bin/python").stdout.strip()
    assert system_python.startswith("/usr/") and system_python != "/root/miniconda3/bin/python"
    assert fleet.ssh("lab-01", "%s -c 'import torch'" % system_python, check=False).returncode != 0
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.sh").write_text(TRAIN_SH)
    for name, env_prefix, python in (("torchrec", "/root/miniconda3", "/root/miniconda3/bin/python"),
                                     ("notorch", "", system_python)):
        extra = {"launch_name": name, "launch_queue": ["t0"], "trainer_interpreter": system_python,
                 "launch_env_prefix": env_prefix, "launch_conda_activate": bool(env_prefix)}
        proc = launch(fleet, src, "-l", "lab-01", extra=extra)
        assert wait_finished(fleet, "lab-01", name)["exit_code"] == 0
        torch = read_json(fleet, "lab-01", "~/.trainer/jobs/%s/code.json" % name)["torch"]
        status = read_json(fleet, "lab-01", "~/.trainer/jobs/%s/items/000/status.json" % name)
        assert status["exit_code"] == 0 and status["torch"] == torch and status["code"]["torch"] == torch
        assert torch["python"] == python, torch
        if env_prefix:
            # The lab's stand-in for the image's torch is a bare package (no version.py, no dist-info): found where
            # the job imports it from, its version and build not known, and the record says why.
            assert torch["installed"] is True and torch["location"] == os.path.dirname(torch_file), torch
            assert torch["version"] is None and torch["build"] is None and "no readable version.py" in torch["reason"]
            assert "; pending items 000 (code " in report(proc)
            assert ", commit none, torch ? build unknown)" in report(proc), report(proc)
        else:
            assert torch == {"python": system_python, "installed": False, "location": None, "version": None,
                             "cuda": None, "hip": None, "build": None,
                             "reason": "torch is not installed for %s" % system_python}
            assert ", commit none, no torch)" in report(proc), report(proc)


def test_hf_transfer_is_on_only_where_the_jobs_python_has_it_asked_in_the_probes_run(fleet, tmp_path):
    """hf_mirror_transfer (RunPod's profile sets it) exports HF_HUB_ENABLE_HF_TRANSFER=1 to the jobs only where
    their Python (hf_mirror_interpreter) finds hf_transfer. Launch asks that Python in its probe's run
    (preflight_probe's python_modules): no SSH execution of its own, 6 per host either way."""
    site = os.path.dirname(os.path.dirname(give_image_environment(fleet, "lab-01")))
    python = "/root/miniconda3/bin/python"
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.sh").write_text(TRAIN_SH)
    try:
        for name, installed in (("hfnone", False), ("hfyes", True)):
            if installed:
                fleet.ssh("lab-01", "mkdir -p %s/hf_transfer && touch %s/hf_transfer/__init__.py" % (site, site))
            (tmp_path / name).mkdir()
            ssh = SshCounter(tmp_path / name)
            proc = launch(fleet, src, "-l", "lab-01", env=ssh.env,
                          extra={"launch_name": name, "launch_queue": ["h0"], "hf_mirror_transfer": True,
                                 "hf_mirror_interpreter": python})
            assert ssh.per_host(fleet, ["lab-01"]) == {"lab-01": 6}
            fragment = fleet.ssh("lab-01", "cat /root/.trainer/env.d/20-hf_mirror.sh").stdout
            assert ("export HF_HUB_ENABLE_HF_TRANSFER=" in fragment) is installed, fragment
            said = "HF_HUB_ENABLE_HF_TRANSFER not set: hf_transfer is not installed for %s" % python
            assert (said in report(proc)) is not installed, report(proc)
            assert ("HF_HUB_ENABLE_HF_TRANSFER=1" in report(proc)) is installed, report(proc)
            assert wait_finished(fleet, "lab-01", name)["exit_code"] == 0
    finally:
        fleet.ssh("lab-01", "rm -rf %s/hf_transfer" % site)


def test_a_vast_box_without_an_onstart_hook_gets_one_in_the_scripts_write(fleet, tmp_path):
    """Where vast.ai's /root/onstart.sh is missing, launch creates it (bash, mode 0755) in the same write_files run
    as the scripts, then writes its block: 7 SSH executions on that host (the AutoDL box's 6 and the block; 8 when a
    copy task of its own created the hook), and a relaunch of the finished queue changes nothing."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.sh").write_text(TRAIN_SH)
    fleet.ssh("lab-02", "rm -f /root/onstart.sh")
    ssh = SshCounter(tmp_path)
    extra = {"launch_name": "nohook", "launch_queue": ["n0", "n1"]}
    try:
        no_hook_launch(fleet, src, ssh, extra)
    finally:  # the test below reads lab-02's env-runs.log from its first line
        for host in ("lab-01", "lab-02"):
            fleet.ssh(host, "rm -f ~/env-runs.log")


def no_hook_launch(fleet, src, ssh, extra):
    proc = launch(fleet, src, env=ssh.env, extra=extra)
    assert ssh.per_host(fleet, ["lab-01", "lab-02"]) == {"lab-01": 6, "lab-02": 7}
    hook = fleet.ssh("lab-02", "cat /root/onstart.sh").stdout
    assert hook.startswith("#!/bin/bash\n# BEGIN remote_gpu.trainer launch job nohook\n"), hook
    assert hook.rstrip("\n").endswith("# END remote_gpu.trainer launch job nohook"), hook
    assert fleet.ssh("lab-02", "stat -c %a /root/onstart.sh").stdout.strip() == "755"
    # the AutoDL box has no hook: nothing is written there
    assert fleet.ssh("lab-01", "test -e /root/onstart.sh", check=False).returncode != 0
    assert "lab-02" in report(proc)
    for host in ("lab-01", "lab-02"):
        assert wait_finished(fleet, host, "nohook")["exit_code"] == 0
    again = launch(fleet, src, extra=extra)
    assert changed(again, "lab-01") == 0 and changed(again, "lab-02") == 0, again.stdout[-3000:]
    assert fleet.ssh("lab-02", "cat /root/onstart.sh").stdout == hook


def test_vast_restart_resumes_the_queue_from_the_onstart_hook(fleet, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.sh").write_text(TRAIN_SH)
    fleet.ssh("lab-02", "cat > /root/onstart.sh << 'EOF'\n%sEOF\nchmod 755 /root/onstart.sh" % USER_ONSTART)
    flag = "/root/go-on"
    extra = {"launch_name": "resume", "launch_command": "bash train.sh",
             "launch_queue": ["r0", "r1 --wait %s" % flag, "r2"]}
    # Check mode says what it would do and writes nothing, the hook included.
    proc = launch(fleet, src, "-l", "lab-02", "--check", extra=extra)
    assert changed(proc, "lab-02") > 0
    assert fleet.ssh("lab-02", "cat /root/onstart.sh").stdout == USER_ONSTART
    assert fleet.ssh("lab-02", "test -e ~/.trainer/jobs/resume/job.pid", check=False).returncode != 0
    launch(fleet, src, "-l", "lab-02", extra=extra)
    deadline = time.monotonic() + 60
    while "001 r1" not in fleet.ssh("lab-02", "cat ~/env-runs.log 2>/dev/null || true").stdout:
        assert time.monotonic() < deadline, "item 001 never started"
        time.sleep(0.3)

    hook = fleet.ssh("lab-02", "cat /root/onstart.sh").stdout
    user_lines = USER_ONSTART.splitlines()
    assert hook.startswith(user_lines[0] + "\n# BEGIN remote_gpu.trainer launch job resume\n"), hook
    assert hook.count("# BEGIN remote_gpu.trainer launch job resume") == 1
    assert hook.count("# END remote_gpu.trainer launch job resume") == 1
    assert hook.rstrip("\n").endswith(user_lines[-1]), hook  # the user's lines are kept
    meta = read_json(fleet, "lab-02", "~/.trainer/jobs/resume/job.meta.json")
    assert meta["detach"] == "tmux" and meta["wrapper"] in hook

    # The restart: every process of the container dies at once (tmux too), then the platform reruns onstart.sh.
    pgid = fleet.ssh("lab-02", "cat ~/.trainer/jobs/resume/job.pid").stdout.strip()
    fleet.ssh("lab-02", "kill -KILL -- -%s; tmux kill-server; sleep 0.5; ! kill -0 -- -%s 2>/dev/null" % (pgid, pgid))
    assert read_json(fleet, "lab-02", "~/.trainer/jobs/resume/items/001/status.json") is None
    fleet.ssh("lab-02", "touch %s" % flag)
    fleet.ssh("lab-02", "bash /root/onstart.sh", timeout=30)
    assert wait_finished(fleet, "lab-02", "resume")["exit_code"] == 0
    runs = [line for line in fleet.ssh("lab-02", "cat ~/env-runs.log").stdout.split("\n") if line]
    assert runs == ["000 r0", "001 r1", "001 r1", "002 r2"]
    for item in ("000", "001", "002"):
        assert read_json(fleet, "lab-02", "~/.trainer/jobs/resume/items/%s/status.json" % item)["exit_code"] == 0
    log = fleet.ssh("lab-02", "cat ~/.trainer/jobs/resume/job.log").stdout
    assert log.count("==== trainer: started ") == 2
    assert "==== trainer: item 000 already done, skipped ====" in log
    assert len(fleet.ssh("lab-02", "cat /root/user-onstart.log").stdout.splitlines()) == 1

    # Another start of a finished queue starts nothing; the user's lines still run.
    fleet.ssh("lab-02", "bash /root/onstart.sh", timeout=30)
    time.sleep(1.5)
    assert fleet.ssh("lab-02", "cat ~/.trainer/jobs/resume/job.log").stdout.count("==== trainer: started ") == 2
    assert len(fleet.ssh("lab-02", "cat /root/user-onstart.log").stdout.splitlines()) == 2
    # A relaunch of the finished queue changes nothing, the hook included.
    proc = launch(fleet, src, "-l", "lab-02", extra=extra)
    assert changed(proc, "lab-02") == 0, proc.stdout[-3000:]
    assert fleet.ssh("lab-02", "cat /root/onstart.sh").stdout == hook
