"""vram_reaper on the lab fleet: it kills a real orphan that holds the fake GPU device, and cannot kill a live job
when the emulator answers with host PIDs, as nvidia-smi does inside a container."""
from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from conftest import REPO, needs_root, run_fleet, started_fleet

pytestmark = needs_root
VENV_BIN = os.path.join(REPO, ".venv", "bin")

# An orphan holding /dev/nvidia0, as a crashed distributed worker leaves behind: setsid -f detaches it, so its
# parent is the instance's PID 1; it writes its own PID inside the instance.
ORPHAN = ("setsid -f bash -c 'exec 3</dev/nvidia0; echo $$ > /tmp/orphan.pid; exec sleep 100000' "
          "</dev/null >/dev/null 2>&1; for i in $(seq 50); do test -s /tmp/orphan.pid && break; sleep 0.1; done; "
          "cat /tmp/orphan.pid")


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    # idle: no captured processes
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "2", "--scenario", "all=h100-idle") as lab:
        yield lab


def ansible(fleet, host, module, args, *extra):
    """(rc, result) of one ad-hoc module call."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_DEPRECATION_WARNINGS="0", PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))
    env["ANSIBLE_CALLBACK_RESULT_FORMAT"] = "json"
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible"), "-i", fleet.inventory_path, host, "-m", module,
                           "-a", json.dumps(args), *extra], capture_output=True, text=True, env=env, timeout=120,
                          check=False)
    # ad-hoc output: "HOST | STATUS => {...}" (the result as JSON)
    assert (host + " | ") in proc.stdout and " => " in proc.stdout, proc.stdout + proc.stderr
    return proc.returncode, json.loads(proc.stdout.split(" => ", 1)[1])


def alive(fleet, host, pid):
    return fleet.ssh(host, "kill -0 %d" % pid, check=False).returncode == 0


def holders(result):
    return {row["pid"] for row in result["candidates"]}


def test_reaper_kills_a_real_orphan_only_with_force_outside_check_mode(fleet):
    orphan = int(fleet.ssh("lab-01", ORPHAN).stdout.split()[-1])
    try:
        assert "/dev/nvidia0" in fleet.ssh("lab-01", "ls -l /proc/%d/fd" % orphan).stdout
        rc, dry = ansible(fleet, "lab-01", "remote_gpu.trainer.vram_reaper", {"min_age": 0})
        assert rc == 0 and not dry["unverified"] and dry["visible_pids"] == []
        assert orphan in holders(dry) and dry["killed"] == [] and not dry["changed"]
        rc, check = ansible(fleet, "lab-01", "remote_gpu.trainer.vram_reaper", {"min_age": 0, "force": True},
                            "--check")
        assert rc == 0 and check["killed"] == [] and alive(fleet, "lab-01", orphan)
        rc, _young = ansible(fleet, "lab-01", "remote_gpu.trainer.vram_reaper", {"min_age": 100000, "force": True})
        assert rc == 0 and alive(fleet, "lab-01", orphan)  # too young to be a candidate
        rc, reaped = ansible(fleet, "lab-01", "remote_gpu.trainer.vram_reaper",
                             {"min_age": 0, "force": True, "kill_grace": 2})
        assert rc == 0 and reaped["killed"] == [orphan] and reaped["changed"]
        assert not alive(fleet, "lab-01", orphan)
    finally:
        fleet.ssh("lab-01", "kill -9 %d" % orphan, check=False)


def test_reaper_cannot_kill_the_live_job_when_nvidia_smi_shows_host_pids(fleet):
    # a "training" job that holds the device, started like launch does, and registered with the emulator
    command = "exec 3</dev/nvidia0; exec sleep 100000"
    rc, job = ansible(fleet, "lab-02", "remote_gpu.trainer.detached_job", {"name": "train", "command": command})
    assert rc == 0 and job["running"], job
    deadline = time.monotonic() + 10
    while True:
        out = fleet.ssh("lab-02", "cat /proc/%d/task/*/children" % job["pid"], check=False).stdout.split()
        if out and "/dev/nvidia0" in fleet.ssh("lab-02", "ls -l /proc/%s/fd" % out[0], check=False).stdout:
            trainer = int(out[0])
            break
        assert time.monotonic() < deadline, "the job did not open the device"
        time.sleep(0.2)
    run_fleet(["gpu-app", "lab-02", str(trainer), "30000", "python"], fleet.state)
    run_fleet(["gpu-app", "lab-02", "--pid-mode", "host"], fleet.state)
    listed = fleet.ssh("lab-02", "nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader").stdout
    pids = [line.split(",")[0].strip() for line in listed.splitlines() if line.strip()]
    assert pids and str(trainer) not in pids  # the emulator now prints the host PID, as in a container
    try:
        # no protect_pid_files on purpose: the worst case, a user who forgot to protect the job
        rc, result = ansible(fleet, "lab-02", "remote_gpu.trainer.vram_reaper",
                             {"min_age": 0, "force": True, "kill_grace": 2})
        assert rc == 0, result
        assert result["unverified"] and "host PIDs" in result["unverified_reason"]
        assert trainer in holders(result)  # it looks like a candidate, and yet
        assert result["killed"] == [] and not result["changed"]
        assert alive(fleet, "lab-02", trainer) and alive(fleet, "lab-02", job["pid"])
        rc, status = ansible(fleet, "lab-02", "remote_gpu.trainer.job_status", {"name": "train"})
        assert rc == 0 and status["jobs"][0]["alive"]
    finally:
        run_fleet(["gpu-app", "lab-02", "--pid-mode", ""], fleet.state, check=False)
        ansible(fleet, "lab-02", "remote_gpu.trainer.detached_job", {"name": "train", "state": "stopped",
                                                                     "stop_timeout": 2})
