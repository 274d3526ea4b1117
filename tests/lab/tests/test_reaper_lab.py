"""vram_reaper on the lab fleet: it kills a real orphan that holds the fake GPU device, and cannot kill a live job
when the emulator answers with host PIDs, as nvidia-smi does inside a container. A job's whole process tree (its
forked workers, which nvidia-smi never lists) survives force on bare metal and in container-PID mode, while the
orphaned workers of a dead parent are reaped; the idle gate holds back a candidate on a busy GPU."""
from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from labhelpers import REPO, needs_root, run_fleet, started_fleet

pytestmark = needs_root
VENV_BIN = os.path.join(REPO, ".venv", "bin")

# An orphan holding /dev/nvidia0, as a crashed distributed worker leaves behind: setsid -f detaches it, so its
# parent is the instance's PID 1; it writes its own PID inside the instance.
ORPHAN = ("setsid -f bash -c 'exec 3</dev/nvidia0; echo $$ > /tmp/orphan.pid; exec sleep 100000' "
          "</dev/null >/dev/null 2>&1; for i in $(seq 50); do test -s /tmp/orphan.pid && break; sleep 0.1; done; "
          "cat /tmp/orphan.pid")


# A training job as PyTorch runs one, without PyTorch: the main process opens the GPU nodes, then forks workers
# (DataLoader / torch.multiprocessing with the fork start method) that hold them through inherited descriptors.
# "main" keeps running; "crash" dies right after forking, so its workers are re-parented and keep the device: the
# classic zombie. Each writes its PID and its workers' PIDs under OUT, atomically.
TREE_PY = r"""
import os, sys, time
role, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
fds = [os.open(path, os.O_RDONLY) for path in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm")]
workers = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        while True:
            time.sleep(3600)
    workers.append(pid)
for name, text in ((role + ".workers", " ".join(map(str, workers))), (role + ".pid", str(os.getpid()))):
    with open(os.path.join(out, name + ".tmp"), "w") as handle:
        handle.write(text)
    os.rename(os.path.join(out, name + ".tmp"), os.path.join(out, name))
if role == "crash":
    os._exit(1)
while True:
    time.sleep(3600)
"""
TREE_JOB = "python3 /tmp/tree.py main /tmp/tree & python3 /tmp/tree.py crash /tmp/tree; wait"


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    # idle: no captured processes; lab-03 replays a GPU under load (100 % utilisation)
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "3", "--scenario", "all=h100-idle",
                       "--scenario", "lab-03=h100-load") as lab:
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
        # no protect_pid_files on purpose: the worst case, a user who forgot to protect the job, and a run_dir that
        # is not the job's (so that only the unverified view stands between force and the job)
        rc, result = ansible(fleet, "lab-02", "remote_gpu.trainer.vram_reaper",
                             {"min_age": 0, "force": True, "kill_grace": 2, "run_dir": "/nonexistent"})
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


def stat_of(fleet, host, pid):
    """(ppid, comm) of a process of the instance."""
    text = fleet.ssh(host, "cat /proc/%d/stat" % pid).stdout
    head, rest = text.rsplit(")", 1)
    return int(rest.split()[1]), head.split("(", 1)[1]


def start_tree_job(fleet, host):
    """The job of TREE_JOB under detached_job -> (job result, main PID, its workers, the orphans)."""
    fleet.ssh(host, "rm -rf /tmp/tree && cat > /tmp/tree.py <<'EOF'\n%sEOF" % TREE_PY.lstrip("\n"))
    rc, job = ansible(fleet, host, "remote_gpu.trainer.detached_job", {"name": "tree", "command": TREE_JOB})
    assert rc == 0 and job["running"], job
    deadline = time.monotonic() + 15
    while fleet.ssh(host, "cat /tmp/tree/main.workers /tmp/tree/crash.workers", check=False).returncode != 0:
        assert time.monotonic() < deadline, "the job did not start its workers"
        time.sleep(0.2)

    def read(name):
        return [int(word) for word in fleet.ssh(host, "cat /tmp/tree/" + name).stdout.split()]

    main, workers, orphans = read("main.pid")[0], read("main.workers"), read("crash.workers")
    for pid in [main] + workers + orphans:
        assert "/dev/nvidia0" in fleet.ssh(host, "ls -l /proc/%d/fd" % pid).stdout
    assert all(stat_of(fleet, host, pid)[0] == main for pid in workers)
    deadline = time.monotonic() + 10
    while any(stat_of(fleet, host, pid)[0] != 1 for pid in orphans):  # re-parented to the instance's PID 1
        assert time.monotonic() < deadline, "the crashed parent's workers were not re-parented"
        time.sleep(0.2)
    return job, main, sorted(workers), sorted(orphans)


def reasons(result):
    return {row["pid"]: row["reason"] for row in result["passed_over"]}


@pytest.mark.parametrize("host,pid_mode", [("lab-01", ""), ("lab-02", "host")], ids=["bare-metal", "container-pid"])
def test_a_jobs_forked_workers_survive_force_and_the_orphans_of_a_dead_parent_do_not(fleet, host, pid_mode):
    """Issue 16 acceptance: the main process is listed by the emulator, its forked workers hold /dev/nvidia* and are
    not listed; force with min_age 0 kills none of the job, and kills the orphaned workers of the dead parent. No
    protect_pids or protect_pid_files anywhere: the protection is the default."""
    run_fleet(["gpu-app", host, "--clear"], fleet.state)
    run_fleet(["gpu-app", host, "--pid-mode", ""], fleet.state)
    job, main, workers, orphans = start_tree_job(fleet, host)
    live = [job["pid"], main] + workers
    try:
        run_fleet(["gpu-app", host, str(main), "30000", "python"], fleet.state)
        force = {"min_age": 0, "force": True, "kill_grace": 2}
        if pid_mode:
            run_fleet(["gpu-app", host, "--pid-mode", pid_mode], fleet.state)
            # nvidia-smi shows the host PID: "not listed" proves nothing, nothing is killed, the orphans neither
            rc, result = ansible(fleet, host, "remote_gpu.trainer.vram_reaper", force)
            assert rc == 0 and result["unverified"] and main not in result["visible_pids"], result
            assert result["killed"] == [] and not result["changed"]
            assert all(alive(fleet, host, pid) for pid in live + orphans)
            # with allow_unverified the job is still safe: it is a job of the run directory
            force["allow_unverified"] = True
        else:
            # the listed process's tree alone protects the workers (no run directory here)
            rc, dry = ansible(fleet, host, "remote_gpu.trainer.vram_reaper", {"min_age": 0, "run_dir": "/nonexistent"})
            assert rc == 0 and not dry["unverified"] and dry["visible_pids"] == [main], dry
            assert sorted(holders(dry)) == orphans and reasons(dry)[main] == "visible"
            assert [reasons(dry)[pid] for pid in workers] == ["visible_tree"] * len(workers)
        rc, check = ansible(fleet, host, "remote_gpu.trainer.vram_reaper", force, "--check")
        assert rc == 0 and check["changed"] and check["killed"] == [] and sorted(holders(check)) == orphans, check
        assert all(alive(fleet, host, pid) for pid in live + orphans)
        rc, result = ansible(fleet, host, "remote_gpu.trainer.vram_reaper", force)
        assert rc == 0 and sorted(result["killed"]) == orphans and result["changed"], result
        assert result["job_pids"] == [job["pid"]]
        assert all(reasons(result)[pid] in ("job_tree", "visible_tree") for pid in [main] + workers)
        assert all(alive(fleet, host, pid) for pid in live), "a part of the live job was killed"
        assert not any(alive(fleet, host, pid) for pid in orphans)
        rc, status = ansible(fleet, host, "remote_gpu.trainer.job_status", {"name": "tree"})
        assert rc == 0 and status["jobs"][0]["alive"]
    finally:
        run_fleet(["gpu-app", host, "--pid-mode", ""], fleet.state, check=False)
        run_fleet(["gpu-app", host, "--clear"], fleet.state, check=False)
        ansible(fleet, host, "remote_gpu.trainer.detached_job", {"name": "tree", "state": "stopped", "stop_timeout": 2})
        fleet.ssh(host, "kill -9 %s" % " ".join(str(pid) for pid in orphans), check=False)


def test_the_idle_gate_spares_a_candidate_on_a_busy_gpu(fleet):
    """The h100-load capture: 100 % utilisation, and its own processes, whose PIDs are not this instance's (so the
    view is unverified; allow_unverified lets the gate alone decide)."""
    orphan = int(fleet.ssh("lab-03", ORPHAN).stdout.split()[-1])
    try:
        rc, held = ansible(fleet, "lab-03", "remote_gpu.trainer.vram_reaper",
                           {"min_age": 0, "force": True, "allow_unverified": True})
        assert rc == 0 and held["unverified"] and held["killed"] == [] and not held["changed"], held
        assert holders(held) == set() and "idle gate" in held["msg"]
        row = [row for row in held["passed_over"] if row["pid"] == orphan][0]
        assert row["reason"] == "gpu_busy" and row["gpu_peak_pct"] == 100
        assert [gpu["peak_pct"] for gpu in held["gpu_utilization"]] == [100] and alive(fleet, "lab-03", orphan)
        rc, reaped = ansible(fleet, "lab-03", "remote_gpu.trainer.vram_reaper",
                             {"min_age": 0, "force": True, "allow_unverified": True, "idle_util_max": 100,
                              "kill_grace": 2})
        assert rc == 0 and reaped["killed"] == [orphan] and not alive(fleet, "lab-03", orphan)
    finally:
        fleet.ssh("lab-03", "kill -9 %d" % orphan, check=False)
