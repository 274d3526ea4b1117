"""launch.yml against the lab fleet: a queue of 7 items over 3 instances, resume after a kill, relaunch while running.

Three autodl instances (lab-03 in region B, without tmux). The "training" command is a small bash script that
prints epoch lines, writes best.pt and latest.pt into $TRAINER_OUTPUT_DIR, appends one line per run to
~/launch-runs.log on the box, and fails or waits for a flag file when its argument says so.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time

import pytest
import yaml

from ansible_collections.remote_gpu.trainer.plugins.module_utils.launch import tree_checksum
from labhelpers import REPO, SshCounter, needs_root, started_fleet

from fleetlib.inventory import without_control_path  # labhelpers puts tests/lab on the import path
from fleetlib.state import close_masters, host_dir

pytestmark = needs_root
VENV_BIN = os.path.join(REPO, ".venv", "bin")

TRAIN_SH = r"""#!/usr/bin/env bash
# usage: train.sh NAME [--epochs N] [--fail] [--wait FILE]
name=$1; shift; epochs=2; fail=0; wait=""
while [ $# -gt 0 ]; do
  case $1 in --epochs) epochs=$2; shift;; --fail) fail=1;; --wait) wait=$2; shift;; esac
  shift
done
echo "$TRAINER_ITEM $name $(hostname)" >> "$HOME/launch-runs.log"
for e in $(seq 1 "$epochs"); do echo "epoch $e/$epochs"; sleep 0.1; done
echo scratch > "$TRAINER_OUTPUT_DIR/latest.pt"
printf 'best-%s' "$name" > "$TRAINER_OUTPUT_DIR/best.pt"
if [ -n "$wait" ]; then while [ ! -e "$wait" ]; do sleep 0.2; done; fi
if [ "$fail" = 1 ]; then echo "Traceback (most recent call last):"; echo "RuntimeError: boom"; exit 3; fi
exit 0
"""
QUEUE = ["a0", "a1 --epochs 3", "a2", "a3 --fail", "a4", "a5", "a6 --epochs 1"]
HOSTS = ["lab-01", "lab-02", "lab-03"]


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "3", "--platform", "lab-03=autodl",
                       "--region", "lab-03=B", "--variant", "lab-03=no-tmux") as lab:
        yield lab


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    root = tmp_path_factory.mktemp("src")
    (root / "train.sh").write_text(TRAIN_SH)
    (root / "conf").mkdir()
    (root / "conf" / "base.yaml").write_text("lr: 0.1\n")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "x"], check=True)
    return root


def launch(fleet, src, *args, extra=None, env=None, inventory=None):
    variables = {"launch_src": str(src), "launch_command": "bash train.sh"}
    variables.update(extra or {})
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")), **(env or {}))
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", inventory or fleet.inventory_path,
                           os.path.join(REPO, "playbooks", "launch.yml"), "-e", json.dumps(variables), *args],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    return proc


def recap(proc):
    return {m.group(1): {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
            for m in re.finditer(r"^(\S+)\s+:\s+(ok=.*)$", proc.stdout[proc.stdout.index("PLAY RECAP"):], re.M)}


def tasks_run(proc):
    """Tasks per host, from the recap: every result counts (ok, which includes changed, failed and skipped: a skipped
    task still forks a worker per host)."""
    return {host: counts["ok"] + counts["failed"] + counts["skipped"] for host, counts in recap(proc).items()}


def read_json(fleet, host, path):
    out = fleet.ssh(host, "cat %s 2>/dev/null || true" % path).stdout
    return json.loads(out) if out.strip() else None


def wait_finished(fleet, host, name, timeout=90):
    """Wait for the job's final status.json (written by detached_job's wrapper) -> it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = read_json(fleet, host, "~/.trainer/jobs/%s/status.json" % name)
        if status is not None:
            return status
        time.sleep(0.5)
    raise AssertionError("%s: job %s did not finish within %d s:\n%s" % (
        host, name, timeout, fleet.ssh(host, "tail -30 ~/.trainer/jobs/%s/job.log" % name, check=False).stdout))


def runs(fleet, host):
    return fleet.ssh(host, "cat ~/launch-runs.log 2>/dev/null || true").stdout.split("\n")


def test_queue_of_7_over_3_hosts_runs_each_item_once_on_its_host(fleet, src, tmp_path):
    ssh = SshCounter(tmp_path)
    proc = launch(fleet, src, extra={"launch_queue": QUEUE, "launch_sampler": True, "launch_sampler_interval": 1},
                  env=ssh.env)
    # A fresh launch: 6 SSH executions per host, the push's rsync included (60 when the directories, the job
    # environment, the scripts and queue.json were written with ansible.builtin.file, template and copy; 16 when the
    # environment roles still wrote their own files: launch gathers their fragments, trainer-download, HF_HOME and the
    # TensorBoard link into its one write_files run; 10 while an ansible.builtin.find listed the fragments that
    # detached_job now finds in its env_dir itself, and ansible.builtin.stat looked at the proxy hook and the
    # TensorBoard link's place, one execution each, which preflight_probe's run now does; and while a command asked
    # the box which items were not done, which the probe at the start answers now: job_status's queue_pending). The
    # code record (code.json) is one of the 6: push_code runs it right after the rsync, in its own task. The count
    # does not depend on the machine's noise.
    # At most 23 tasks per host, the profile play's and the run-once ones included, the launch record on the
    # controller one of them, run once for the fleet (72 before the environment roles'
    # work was gathered into launch's one write_files run and tasks with nothing to do stopped being included; 29
    # while Ansible validated the role's spec on every host instead of play_vars once, and while prepare.yml was
    # included on each host instead of imported after a meta end_role, which runs in Ansible's main process and is
    # no task of the recap; 28 while the profile role's fail task, skipped where every profile is sound, still ran
    # on every host instead of ending after a meta end_role; 27 with the find of the fragments, the stat of the
    # environment roles' paths and the command that listed the items not done; 24 while the code record was a
    # command task of its own; 23 while the queue runner's start was behind an include of its own). The first host
    # carries the run-once tasks: one worker each for the whole fleet, so the other hosts run 4 fewer.
    fresh = tasks_run(proc)
    assert fresh["lab-01"] <= 23 and all(fresh[host] <= 18 for host in HOSTS[1:]), fresh
    assert ssh.per_host(fleet, HOSTS) == dict.fromkeys(HOSTS, 6)
    # What a person reads, under the shipped ansible.cfg (remote_gpu.trainer.quiet, skipped and ok results hidden but
    # the messages of the reports): the assignment table, what changed, one line per host and the recap; not each
    # role task (433 lines for 3 hosts before), no empty headers.
    lines = (proc.stdout + proc.stderr).splitlines()
    assert len(lines) <= 120, "%d lines:\n%s" % (len(lines), proc.stdout + proc.stderr)
    assert "skipping:" not in proc.stdout and "Done for each host" not in proc.stdout, proc.stdout
    for host in HOSTS:
        assert re.search(r"^\s+msg: '%s: started train under (tmux|nohup)" % host, proc.stdout, re.M), proc.stdout
    table = proc.stdout[proc.stdout.index("ITEM  HOST"):]
    expected = {"%03d" % i: HOSTS[i % 3] for i in range(7)}
    for item, host in expected.items():
        assert re.search(r"^\s*%s\s+%s\s+%s\s*$" % (item, host, re.escape(QUEUE[int(item)])), table, re.M), table
    for host in HOSTS:
        assert wait_finished(fleet, host, "train")["exit_code"] == (1 if host == "lab-01" else 0), fleet.ssh(
            host, "tail -40 ~/.trainer/jobs/train/job.log; cat ~/.trainer/jobs/train/items/*/status.json",
            check=False).stdout

    commit = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    sent = tmp_path / "sent"
    shutil.copytree(str(src), str(sent), ignore=shutil.ignore_patterns(".git"))  # the push excludes .git
    tree = tree_checksum(str(sent))
    for host in HOSTS:
        mine = sorted(i for i, h in expected.items() if h == host)
        lines = sorted(line for line in runs(fleet, host) if line)
        assert lines == sorted("%s a%d %s" % (i, int(i), host) for i in mine), lines
        code = read_json(fleet, host, "~/.trainer/jobs/train/code.json")
        assert code["commit"] == commit and code["dirty"] is False
        assert code["files"] == 2 and code["tree_sha256"] == tree["tree_sha256"]
        meta = read_json(fleet, host, "~/.trainer/jobs/train/job.meta.json")
        assert meta["detach"] == ("nohup" if host == "lab-03" else "tmux")
        for item in mine:
            status = read_json(fleet, host, "~/.trainer/jobs/train/items/%s/status.json" % item)
            assert status["item"] == item and status["host"] == host and status["arg"] == QUEUE[int(item)]
            assert status["started"] and status["finished"] and status["code"] == code
            if item == "003":
                assert status["exit_code"] == 3 and status["synced"] == []
                continue
            assert status["exit_code"] == 0 and status["sync_error"] is None and status["state"] == "done", (
                status, fleet.ssh(host, "tail -60 ~/.trainer/jobs/train/job.log", check=False).stdout)
            best = b"best-a%d" % int(item)
            # the best files, and the item's part of the job log beside them
            assert [entry["path"] for entry in status["synced"]] == ["best.pt", "trainer-item.log"]
            assert status["synced"][0] == {"path": "best.pt", "bytes": len(best),
                                           "sha256": hashlib.sha256(best).hexdigest()}
            durable = "/root/autodl-fs/runs/train/%s/best.pt" % item
            assert fleet.ssh(host, "sha256sum %s" % durable).stdout.split()[0] == hashlib.sha256(best).hexdigest()
            item_log = fleet.ssh(host, "cat /root/autodl-fs/runs/train/%s/trainer-item.log" % item).stdout
            assert item_log.startswith("==== trainer: item %s started " % item) and "epoch 1/" in item_log
            assert "==== trainer: item" not in item_log.split("\n", 1)[1]  # no other item's lines
            assert status["pruned"] == ["latest.pt"]
        log = fleet.ssh(host, "cat ~/.trainer/jobs/train/job.log").stdout
        for item in mine:
            if item != "003":
                assert "==== trainer: item %s done, synced 2 files to /root/autodl-fs/runs/train/%s ====" % (
                    item, item) in log
        samples = fleet.ssh(host, "cat ~/.trainer/jobs/train/samples.tsv").stdout.splitlines()
        assert samples[0].split("\t") == ["time", "item", "cgroup_memory_bytes", "main_pid", "main_rss_kib",
                                          "gpu_util_pct", "gpu_mem_used_mib"]
        assert len(samples) >= 2 and all(len(row.split("\t")) == 7 for row in samples)

    # Relaunch after the end: lab-02 and lab-03 are done (nothing changes); lab-01 reruns only the failed item.
    proc = launch(fleet, src, extra={"launch_queue": QUEUE, "launch_sampler": True, "launch_sampler_interval": 1})
    counts = recap(proc)
    assert counts["lab-02"]["changed"] == 0 and counts["lab-03"]["changed"] == 0, proc.stdout[-3000:]
    # fewer tasks where nothing is left to start (lab-01 starts its failed item again)
    again = tasks_run(proc)
    assert again["lab-02"] < fresh["lab-02"] and again["lab-03"] < fresh["lab-03"], (fresh, again)
    assert again["lab-01"] <= fresh["lab-01"], (fresh, again)
    assert counts["lab-01"]["changed"] == 1
    wait_finished(fleet, "lab-01", "train")
    lines = [line for line in runs(fleet, "lab-01") if line]
    assert sorted(lines) == ["000 a0 lab-01", "003 a3 lab-01", "003 a3 lab-01", "006 a6 lab-01"]


def accepted(fleet, host):
    """How many SSH connections the host's sshd has accepted so far (its log: sshd -e, in the host's init.log)."""
    with open(os.path.join(host_dir(fleet.state, host), "init.log"), encoding="utf-8", errors="replace") as fh:
        return fh.read().count("Accepted publickey for ")


def test_a_fresh_launch_opens_one_ssh_connection_per_host(fleet, src, tmp_path):
    # The lab's inventory names a ControlPath in ansible_ssh_common_args; a user's rarely does, and Ansible then keeps
    # its master connection's socket in control_path_dir. push_code's rsync runs (the code, the helpers) go over that
    # connection too (plugin_utils/rsync.shared_connection), instead of opening one each: 8 to 10 round trips apiece.
    with open(fleet.inventory_path, encoding="utf-8") as fh:
        inventory = yaml.safe_load(fh)
    common = inventory["all"]["vars"]["ansible_ssh_common_args"]
    inventory["all"]["vars"]["ansible_ssh_common_args"] = " ".join(without_control_path(common))
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    before = {host: accepted(fleet, host) for host in HOSTS}
    try:
        launch(fleet, src, inventory=str(tmp_path / "inventory.yml"),
               env={"ANSIBLE_CONTROL_PATH_DIR": str(tmp_path / "cp")},
               extra={"launch_name": "oneconn", "launch_queue": ["c0", "c1", "c2"]})
        assert {host: accepted(fleet, host) - before[host] for host in HOSTS} == dict.fromkeys(HOSTS, 1)
    finally:
        close_masters(tmp_path)   # the sockets in its ANSIBLE_CONTROL_PATH_DIR
    for host in HOSTS:
        assert wait_finished(fleet, host, "oneconn")["exit_code"] == 0


def relaunch_changes_nothing(fleet, src, extra, says):
    """Relaunch the job "resume" on lab-03 and check that nothing was pushed, written or started: 0 changed, the
    report line ``says``, job_status alone on the box and no task of the push and start (5 tasks on lab-03 alone, 4
    of them run once for the play; every other host of a larger play runs 1, as in a patrol tick: the probe; meta
    end_role ends the profile role, where every profile is sound, and the launch role there, in Ansible's main
    process), the job and code directories as they were."""
    listing = "ls -l --time-style=+%s.%N ~/.trainer/jobs/resume ~/autodl-tmp/code/resume"
    before = fleet.ssh("lab-03", listing).stdout
    proc = launch(fleet, src, "-l", "lab-03", extra=extra)
    assert recap(proc)["lab-03"]["changed"] == 0
    assert says in " ".join(proc.stdout.split()), proc.stdout[-3000:]
    assert tasks_run(proc)["lab-03"] <= 5, tasks_run(proc)
    assert fleet.ssh("lab-03", listing).stdout == before


def test_kill_then_relaunch_resumes_and_relaunch_while_running_changes_nothing(fleet, src):
    flag = "/root/go-resume"
    extra = {"launch_name": "resume", "launch_queue": ["r0", "r1 --wait %s" % flag, "r2"]}
    proc = launch(fleet, src, "-l", "lab-03", "-vvv", extra=extra)
    # every module of a fresh launch on the box ran without AnsiballZ (plugin_utils/direct): both probes, both
    # writes, the start; the launch record's write_files on the controller (delegated) runs the usual way
    ran = re.findall(r"^<[^>]+> (\w+) runs (without|through) AnsiballZ(: a delegated task)?", proc.stdout, re.M)
    assert sorted(ran) == sorted([("job_status", "without", ""), ("preflight_probe", "without", ""),
                                  ("write_files", "without", ""), ("write_files", "without", ""),
                                  ("detached_job", "without", ""),
                                  ("write_files", "through", ": a delegated task")]), ran
    deadline = time.monotonic() + 60
    while "001 r1 lab-03" not in runs(fleet, "lab-03") and time.monotonic() < deadline:
        time.sleep(0.3)
    assert "001 r1 lab-03" in runs(fleet, "lab-03")
    assert read_json(fleet, "lab-03", "~/.trainer/jobs/resume/items/000/status.json")["exit_code"] == 0

    # Relaunch while the job runs: nothing is pushed, written or started.
    relaunch_changes_nothing(fleet, src, extra, "resume is running")

    # Kill the whole job (as a preemption would), then relaunch: 000 is skipped, 001 runs again, then 002.
    pid = fleet.ssh("lab-03", "cat ~/.trainer/jobs/resume/job.pid").stdout.strip()
    fleet.ssh("lab-03", "kill -KILL -- -%s" % pid)
    fleet.ssh("lab-03", "touch %s" % flag)
    assert read_json(fleet, "lab-03", "~/.trainer/jobs/resume/items/001/status.json") is None
    launch(fleet, src, "-l", "lab-03", extra=extra)
    assert wait_finished(fleet, "lab-03", "resume")["exit_code"] == 0
    lines = [line for line in runs(fleet, "lab-03") if " r" in line]
    assert lines == ["000 r0 lab-03", "001 r1 lab-03", "001 r1 lab-03", "002 r2 lab-03"]
    for item in ("000", "001", "002"):
        status = read_json(fleet, "lab-03", "~/.trainer/jobs/resume/items/%s/status.json" % item)
        assert status["exit_code"] == 0 and status["synced"][0]["path"] == "best.pt"
    log = fleet.ssh("lab-03", "cat ~/.trainer/jobs/resume/job.log").stdout
    assert log.count("==== trainer: started ") == 2
    assert "==== trainer: item 000 already done, skipped ====" in log

    # Relaunch once every item is done: nothing is pushed, written or started either (the one probe), and the report
    # says why and how to run the queue again.
    relaunch_changes_nothing(fleet, src, extra, "lab-03: all 3 item(s) of run resume were done: nothing pushed or "
                                                "changed (items 000 001 002; a new launch_name runs the queue again)")
    assert fleet.ssh("lab-03", "cat ~/.trainer/jobs/resume/job.log").stdout.count("==== trainer: started ") == 2
