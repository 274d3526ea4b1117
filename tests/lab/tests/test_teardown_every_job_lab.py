"""Teardown judges the whole box, not one job (issue 28, item 1): one AutoDL box and one RunPod box, each with two
experiments launched with the README's own command (`launch_name` train, and exp2 with a `launch_run_id` of its
own), one finished and one still running.

- teardown.yml with approval refuses on both boxes and names the live job (exp2) with its progress line; nothing is
  pulled, both meter logs stay empty and the RunPod fake API receives no stop or terminate; the same with
  `-e teardown_job=train` (it narrows what is pulled, never what is checked for liveness);
- after exp2 finishes, one teardown pulls the results of both jobs of each box into pulls/<host>/<run id>/ (each
  file's sha256 equal to the one recorded at sync time) and stops the meter exactly once per box: AutoDL's
  `shutdown` stand-in, RunPod's API (the fake, whose meter_log_hook writes the lab instance's meter log). The receipt
  pulls/<host>/TEARDOWN_RECEIPT.json lists both jobs and runs.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess

import pytest

from labhelpers import REPO, SshCounter, fake_api, needs_root, started_fleet
from lab_teardown_support import checkpoint
from test_launch_lab import read_json, wait_finished

pytestmark = needs_root
VENV_BIN = os.path.join(REPO, ".venv", "bin")
KEY = "LABKEY-teardown-every-job-never-shown"
SHUTDOWN = ["shutdown", "-h", "now"]
HOSTS = ("lab-01", "lab-02")  # autodl, runpod
# The "training": a real safetensors checkpoint per argument (teardown checks that every checkpoint loads), epoch
# lines, and with --wait a run that stays at epoch 11/60 until ~/go-<job> exists on the box.
TRAIN_SH = r"""#!/usr/bin/env bash
arg=$1
for e in 1 2 3; do echo "epoch $e/60"; sleep 0.1; done
cp "ckpt/$arg.safetensors" "$TRAINER_OUTPUT_DIR/best.safetensors"
if [ "$2" = --wait ]; then
  echo "epoch 11/60"
  while [ ! -e "$HOME/go-$TRAINER_JOB_NAME" ]; do sleep 0.2; done
fi
"""
TRAIN = ["t0", "t1"]  # launch_name train (launch's default), run id train: item 000 on lab-01, 001 on lab-02
EXP2 = ["e0 --wait", "e1 --wait"]  # launch_name exp2, launch_run_id exp2-lr3e4
EXP2_RUN = "exp2-lr3e4"
ITEM = {"lab-01": "000", "lab-02": "001"}


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "2", "--platform", "lab-02=runpod") as lab:
        assert [lab.hosts[h]["lab_platform"] for h in HOSTS] == ["autodl", "runpod"]
        yield lab


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    root = tmp_path_factory.mktemp("src")
    (root / "train.sh").write_text(TRAIN_SH)
    (root / "ckpt").mkdir()
    for arg in TRAIN + [entry.split()[0] for entry in EXP2]:
        (root / "ckpt" / ("%s.safetensors" % arg)).write_bytes(checkpoint(arg))
    return root


def playbook(fleet, cwd, name, *args, env=None):
    """``ansible-playbook -i INVENTORY playbooks/NAME ARGS`` as the README writes it, from ``cwd`` (where the pulls
    land); stdin is /dev/null, so a prompt could never wait."""
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))
    environ.pop("AUTODL_TOKEN", None)  # AutoDL stops with its command here, not through an API
    environ.update(env or {})
    return subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", fleet.inventory_path,
                           os.path.join(REPO, "playbooks", name), *args], capture_output=True, text=True,
                          env=environ, cwd=str(cwd), stdin=subprocess.DEVNULL, timeout=600, check=False)


def shown(proc):
    return proc.stdout[-6000:] + proc.stderr[-3000:]


def refusal_of(proc, host):
    """The gate's message for ``host`` (the YAML callback wraps long lines: whitespace is folded)."""
    flat = " ".join((proc.stdout + proc.stderr).split())
    found = re.findall(r"teardown refused for %s: .*?(?= open: | fatal: |$)" % host, flat)
    assert found, shown(proc)
    return found[0]


def stops(fake):
    return [(r["method"], r["path"]) for r in fake.api_requests() if r["method"] != "GET"]


def test_teardown_refuses_while_any_job_runs_then_pulls_every_job_and_stops_each_meter_once(fleet, src, tmp_path):
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    for host in HOSTS:
        open(fleet.hosts[host]["lab_meter_log"], "w", encoding="utf-8").close()

    # 1. Two experiments on each box, launched as the README says: train (finishes), exp2 (stays at epoch 11/60)
    launch = ["-l", ",".join(HOSTS), "-e", "launch_src=%s" % src, "-e", "launch_command='bash train.sh'"]
    proc = playbook(fleet, laptop, "launch.yml", *launch, "-e", json.dumps({"launch_queue": TRAIN}))
    assert proc.returncode == 0, shown(proc)
    for host in HOSTS:
        assert wait_finished(fleet, host, "train")["exit_code"] == 0
    proc = playbook(fleet, laptop, "launch.yml", *launch, "-e", "launch_name=exp2", "-e",
                    "launch_run_id=%s" % EXP2_RUN, "-e", json.dumps({"launch_queue": EXP2}))
    assert proc.returncode == 0, shown(proc)
    for host in HOSTS:
        assert read_json(fleet, host, "~/.trainer/jobs/exp2/status.json") is None  # still running

    # The RunPod box is stopped through the provider's API: its pod's id is the one the box itself reports.
    pod_id = fleet.ssh("lab-02", "printf %s \"$RUNPOD_POD_ID\"").stdout.strip()
    assert pod_id
    pod = dict(fake_api.runpod_pod(2, fleet.hosts["lab-02"]["ansible_host"], int(fleet.hosts["lab-02"]["ansible_port"]),
                                   name="lab-02"), id=pod_id)
    fake = fake_api.FakeAPI("runpod", KEY, [pod]).start()
    fake.on_lifecycle = fake_api.meter_log_hook({pod_id: ("lab-02", fleet.hosts["lab-02"]["lab_meter_log"])})
    teardown = ["-l", ",".join(HOSTS), "-e", "teardown_approve=%s" % ",".join(HOSTS),
                "-e", json.dumps({"runpod_pod_id": pod_id, "provider_api_url": fake.url})]
    try:
        # 2. teardown while exp2 runs: refused on both boxes, naming exp2 and its progress; nothing pulled or stopped
        ssh = SshCounter(tmp_path)
        refused = playbook(fleet, laptop, "teardown.yml", *teardown, env=dict(ssh.env, RUNPOD_API_KEY=KEY))
        assert refused.returncode != 0, shown(refused)
        for host in HOSTS:
            message = refusal_of(refused, host)
            assert "job_alive: job exp2 under /root/.trainer/jobs is running" in message, message
            assert "progress 'epoch 11/60'" in message and "item %s running" % ITEM[host] in message, message
            assert "job train" not in message, message  # the finished job is not what refuses
        assert {host: fleet.meter(host) for host in HOSTS} == {host: [] for host in HOSTS}
        assert stops(fake) == []
        assert not (laptop / "pulls").exists()  # nothing is pulled while a job runs
        # the whole judgement is one module run on each box (job_status, every job at once)
        assert ssh.per_host(fleet, HOSTS) == dict.fromkeys(HOSTS, 1)
        # teardown_job narrows what is pulled, never what is checked for liveness
        narrowed = playbook(fleet, laptop, "teardown.yml", *teardown, "-e", "teardown_job=train",
                            env=dict(RUNPOD_API_KEY=KEY))
        assert narrowed.returncode != 0, shown(narrowed)
        assert all("job_alive: job exp2 " in refusal_of(narrowed, host) for host in HOSTS), shown(narrowed)
        assert {host: fleet.meter(host) for host in HOSTS} == {host: [] for host in HOSTS} and stops(fake) == []
        assert not (laptop / "pulls").exists()

        # 3. exp2 finishes; one teardown pulls both jobs' results and stops each meter exactly once
        for host in HOSTS:
            fleet.ssh(host, "touch ~/go-exp2")
            assert wait_finished(fleet, host, "exp2")["exit_code"] == 0
        done = playbook(fleet, laptop, "teardown.yml", *teardown, env=dict(RUNPOD_API_KEY=KEY))
    finally:
        fake.stop()
    assert done.returncode == 0, shown(done)
    assert (done.stdout + done.stderr).count(KEY) == 0
    # what stopping the meter means names the provider's API too, which stops RunPod's pod here (not runpodctl)
    flat = " ".join(done.stdout.split())
    assert ("host lab-02 (runpod): verb terminate: runpodctl remove pod $RUNPOD_POD_ID; or, where RUNPOD_API_KEY is "
            "set and the instance id is known, through the runpod API (the gate below says which)") in flat, flat[-4000:]
    for host in HOSTS:
        runs = {}
        for job, run_id, arg in (("train", "train", TRAIN[int(ITEM[host])]),
                                 ("exp2", EXP2_RUN, EXP2[int(ITEM[host])].split()[0])):
            pulled = laptop / "pulls" / host / run_id
            verified = json.loads((pulled / "PULL_VERIFIED.json").read_text())
            assert (verified["host"], verified["run_id"]) == (host, run_id)
            best = (pulled / "data" / "durable" / ITEM[host] / "best.safetensors").read_bytes()
            assert best == checkpoint(arg)
            status = read_json(fleet, host, "~/.trainer/jobs/%s/items/%s/status.json" % (job, ITEM[host]))
            recorded = {entry["path"]: entry["sha256"] for entry in status["synced"]}
            assert hashlib.sha256(best).hexdigest() == recorded["best.safetensors"]
            listed = {f["path"]: f["sha256"] for f in verified["files"]}
            assert listed["durable/%s/best.safetensors" % ITEM[host]] == recorded["best.safetensors"]
            runs[job] = (run_id, verified["manifest_sha256"])
        receipt = json.loads((laptop / "pulls" / host / "TEARDOWN_RECEIPT.json").read_text())
        assert receipt["host"] == host and receipt["acted"] is True
        assert sorted(receipt["jobs"]) == ["exp2", "train"] and sorted(receipt["jobs_on_host"]) == ["exp2", "train"]
        assert {run["job"]: (run["run_id"], run["manifest_sha256"]) for run in receipt["runs"]} == runs
    assert [line["argv"] for line in fleet.meter("lab-01")] == [SHUTDOWN]
    assert [line["argv"] for line in fleet.meter("lab-02")] == [["provider-api", "runpod", "terminate", pod_id]]
    assert stops(fake) == [("DELETE", "/v1/pods/%s" % pod_id)]
