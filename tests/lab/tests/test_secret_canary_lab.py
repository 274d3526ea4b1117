"""The secret canary on the lab fleet (issue 29, item 2): what tests/playbooks/test_secret_canary.py cannot reach
without boxes. Unique canaries are planted where a user puts them:

- ``HF_TOKEN`` and ``WANDB_API_KEY`` in the job environment, the way the README says (``credentials_secrets`` in a
  vars file given to launch with ``-e @secrets.yml``; the credentials role writes them to the box);
- the RunPod API key (``RUNPOD_API_KEY``, which teardown uses to stop the pod through the provider's API: the
  loopback fake of tests/lab/providers/fake_api.py), and the keys of the other providers in the controller's
  environment (``VAST_API_KEY``, a 64-hex key, ``LAMBDA_API_KEY``, ``AUTODL_TOKEN``; unused here, never shown);
- ``HF_TOKEN`` and ``WANDB_API_KEY`` in the RunPod pod's own environment, which the fake returns with the pod.

Then the README's own commands run at ``-vvv`` on one AutoDL box and one RunPod box, as a user runs them from a
laptop directory: launch (two jobs on each box: train, and exp2 whose item fails on the RunPod box and waits on the
AutoDL box), patrol (a FAIL with the failed item's log tail), teardown while exp2 runs (refused), teardown whose
provider API answers 401 with a body echoing the key (the stop fails), and teardown with approval that pulls and
stops. Every byte left behind is grepped: each run's stdout and stderr, everything under the laptop directory
(reports/, the history, fleet.html, pulls/ and its receipts), and every file under the box's home, data and durable
directories (the job directories: meta, status, queue, wrapper, runner and job logs, items; the library; the job
environment; the synced outputs and item logs; Ansible's remote temporary files). The one file where a job secret
must be on the box is the credentials file that carries it to the job: excluded from the grep by name, its mode
asserted 0600, and it must hold the canaries (so the job really had them). Zero hits.

The lab uses a static inventory: no inventory plugin runs, so there is no inventory cache here (the plugins' cache
is grepped by tests/playbooks/test_secret_canary.py).

Apart from that, a job that prints keys into its own log (``debug: WANDB_API_KEY=...``, a CUDA error with an
``Authorization: Bearer`` header) is patrolled at ``-vvv`` over SSH, with the controller not knowing those values:
ansible-core's ssh connection prints what the box answered before any action plugin redacts it, so only the box's
own redaction (job_log.py, by redact.py's patterns) keeps them out of that output. tests/playbooks/test_secret_canary.py
patrols such a job on localhost, over the local connection, which prints no raw answer.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time

import pytest

from labhelpers import REPO, fake_api, needs_root, started_fleet
from lab_teardown_support import checkpoint
from test_launch_lab import read_json, wait_finished

pytestmark = needs_root
VENV_BIN = os.path.join(REPO, ".venv", "bin")
HOSTS = ("lab-01", "lab-02")  # autodl, runpod

# Each canary is unique and shaped like the real secret (W&B keys are 40 hex digits, vast.ai keys 64).
CANARY = {
    "hf_job": "hf_CANARYlabJobHFtoken2f9a7c3e1b5d",
    "wandb_job": "9c2e4a6f8b1d3c5e7a9f0b2d4c6e8a1f3b5d7c9e",
    "runpod": "rpa_CANARYlabRunpodKey8e1f3a5c7b9d0e2f",
    "vastai": "3b5d7f9a1c3e5b7d9f1a3c5e7b9d1f3a5c7e9b1d3f5a7c9e1b3d5f7a9c1e3b5d",
    "lambda": "secret_CANARYlabLambda_6d2f8a4c",
    "autodl": "eyJhbGciOiJIUzI1NiJ9.CANARYlabAutodl7c5a.c2lnbmF0dXJlTEFC",
    "hf_instance": "hf_CANARYlabInstanceHF4a6c8e0b2d",
    "wandb_instance": "5e7c9a1b3d5f7e9c1a3b5d7f9e1c3a5b7d9f1e3c",
}
CREDENTIALS_FILE = "credentials.env"  # the one place a job secret belongs on the box (trainer_credentials_file)

# The "training": proves it has both secrets (the first 12 hex digits of their sha256, never the values), prints
# epoch lines, writes a real safetensors checkpoint; --fail ends with a traceback and exit 3, --wait waits for
# ~/go-<job> on the box.
TRAIN_SH = r"""#!/usr/bin/env bash
arg=$1
if [ -z "$HF_TOKEN" ] || [ -z "$WANDB_API_KEY" ]; then echo "the job environment has no HF_TOKEN or WANDB_API_KEY"; exit 9; fi
echo "secrets: hf $(printf %s "$HF_TOKEN" | sha256sum | cut -c1-12) wandb $(printf %s "$WANDB_API_KEY" | sha256sum | cut -c1-12)"
for e in 1 2 3; do echo "epoch $e/3"; sleep 0.1; done
cp "ckpt/$arg.safetensors" "$TRAINER_OUTPUT_DIR/best.safetensors"
if [ "$2" = --fail ]; then echo "Traceback (most recent call last):"; echo "RuntimeError: boom"; exit 3; fi
if [ "$2" = --wait ]; then
  echo "epoch 11/60"
  while [ ! -e "$HOME/go-$TRAINER_JOB_NAME" ]; do sleep 0.2; done
fi
exit 0
"""
TRAIN = ["t0", "t1"]  # job train: item 000 on lab-01, 001 on lab-02, both succeed
EXP2 = ["e0 --wait", "e1 --fail"]  # job exp2: 000 waits on lab-01, 001 fails on lab-02

# Walks the box's directories (no link followed) and names each file holding a canary; the canaries come on stdin,
# and only their names are printed. The credentials file is left out by name and its mode and canaries reported.
BOX_GREP = r"""
import json, os, stat, sys
canaries = json.load(sys.stdin)
roots = [r for r in sys.argv[1:] if os.path.isdir(r)]
hits, credentials, seen = {}, {}, set()
for root in roots:
    for top, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(top, d))]
        for name in names:
            path = os.path.join(top, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in seen or st.st_size > (256 << 20):
                continue
            seen.add((st.st_dev, st.st_ino))
            with open(path, "rb") as handle:
                data = handle.read().decode("utf-8", "replace")
            found = sorted(k for k, v in canaries.items() if v in data)
            if name == "CREDENTIALS_FILE":
                credentials[path] = {"mode": "%04o" % stat.S_IMODE(st.st_mode), "holds": found}
            elif found:
                hits[path] = found
print(json.dumps({"hits": hits, "credentials": credentials, "roots": roots}))
""".replace("CREDENTIALS_FILE", CREDENTIALS_FILE)
BOX_ROOTS = {"lab-01": ["/root", "/root/autodl-tmp", "/root/autodl-fs"], "lab-02": ["/root", "/workspace"]}


def hits(text):
    """The names of the canaries in ``text`` (never the values: the failure message would carry them)."""
    return sorted(name for name, value in CANARY.items() if value in text)


def controller_env(**extra):
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")), RUNPOD_API_KEY=CANARY["runpod"],
                   VAST_API_KEY=CANARY["vastai"], LAMBDA_API_KEY=CANARY["lambda"])
    environ.pop("AUTODL_TOKEN", None)  # set below only where the AutoDL box is not torn down by its API
    environ.update(extra)
    return environ


class Runs:
    """Every ansible-playbook run of the test, at -vvv, from the laptop directory; their output is kept for the
    grep (in memory: a file of it would be one more place to leave the canaries)."""

    def __init__(self, fleet, laptop):
        self.fleet, self.laptop, self.outputs = fleet, laptop, []

    def __call__(self, name, *args, env=None):
        proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-vvv", "-i", self.fleet.inventory_path,
                               os.path.join(REPO, "playbooks", name), *args], capture_output=True, text=True,
                              env=controller_env(**(env or {})), cwd=str(self.laptop), stdin=subprocess.DEVNULL,
                              timeout=900, check=False)
        self.outputs.append(("%s %s" % (name, " ".join(args)), proc.stdout + proc.stderr))
        return proc


def approve(hosts):
    """teardown.yml's -l and its approval of the same hosts, as the README writes them."""
    return ["-l", ",".join(hosts), "-e", "teardown_approve=%s" % ",".join(hosts)]


def shown(proc):
    """The end of a run's output for a failure message, with the canaries masked (a failure must not leak them)."""
    return masked(proc.stdout[-5000:] + proc.stderr[-3000:])


def masked(text):
    """``text`` with every canary (those of the -vvv log test too) written as its name."""
    for name, value in list(CANARY.items()) + list(LOG_CANARY.items()):
        text = text.replace(value, "<%s>" % name)
    return text


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "2", "--platform", "lab-02=runpod") as lab:
        assert [lab.hosts[h]["lab_platform"] for h in HOSTS] == ["autodl", "runpod"]
        yield lab


# What the job of the -vvv test prints into its log: the controller is not told these values (not in
# CANARY: the box keeps them in that job's own log, which the test removes).
LOG_CANARY = {"wandb_log": "canary-wandb-fedcba9876543210", "bearer_log": "canaryLabBearer7d3f9a1c5e"}
LEAK_RUN_DIR = "~/canary-vvv-jobs"


def test_keys_a_job_printed_never_show_in_patrol_at_vvv(fleet, tmp_path):
    """patrol at -vvv over SSH, on a job that printed keys into its log and crashed: the raw answer of job_status
    that the ssh connection prints holds the tail and the crash marker, redacted on the box."""
    command = ('echo "epoch 1/3"; echo "debug: WANDB_API_KEY=%s"; '
               'echo "RuntimeError: CUDA error: the upload failed with Authorization: Bearer %s"; exit 3'
               % (LOG_CANARY["wandb_log"], LOG_CANARY["bearer_log"]))
    try:
        for host in HOSTS:
            proc = subprocess.run(
                [os.path.join(VENV_BIN, "ansible"), "-i", fleet.inventory_path, host, "-o", "-m",
                 "remote_gpu.trainer.detached_job", "-a", json.dumps({"name": "leak", "run_dir": LEAK_RUN_DIR,
                                                                      "command": command})],
                capture_output=True, text=True, env=controller_env(), stdin=subprocess.DEVNULL, timeout=300,
                check=False)
            assert proc.returncode == 0, shown(proc)
        for host in HOSTS:
            for _wait in range(300):
                if fleet.ssh(host, "test -e %s/leak/status.json" % LEAK_RUN_DIR, check=False).returncode == 0:
                    break
                time.sleep(0.2)
            log = fleet.ssh(host, "cat %s/leak/job.log" % LEAK_RUN_DIR).stdout
            assert all(value in log for value in LOG_CANARY.values())  # the job printed them: its own log
        laptop = tmp_path / "laptop"
        laptop.mkdir()
        run = Runs(fleet, laptop)
        proc = run("patrol.yml", "-l", ",".join(HOSTS), "-e", "patrol_run_dir=%s" % LEAK_RUN_DIR)
        output = proc.stdout + proc.stderr
        assert proc.returncode != 0, shown(proc)  # the crash is a FAIL
        rows = {row["host"]: row for row in json.loads((laptop / "reports" / "patrol.json").read_text())["hosts"]}
        assert [rows[host]["verdict"] for host in HOSTS] == ["FAIL", "FAIL"], masked(json.dumps(rows))
        leaked = sorted(name for name, value in LOG_CANARY.items() if value in output)
        leaked += ["%s: %s" % (path.relative_to(laptop), name) for path in sorted(laptop.rglob("*")) if path.is_file()
                   for name, value in LOG_CANARY.items() if value in path.read_text(errors="replace")]
        assert leaked == [], "printed by patrol -vvv or left in its reports: %s" % leaked
        # the ssh connection does not print job_status's raw answer at -vvv (the direct run censors it: the answer
        # shows, redacted, as the task's result); the AnsiballZ way, below, prints it: redacted on the box
        hosts = [fleet.hosts[host]["ansible_host"] for host in HOSTS]
        assert not [line for line in output.splitlines() if '"tail": [' in line and line.startswith("<")]
        assert all("<%s> rc=0, stdout and stderr censored due to no log" % addr in output for addr in hosts), \
            masked(output[-5000:])
        assert "debug: WANDB_API_KEY=<redacted>" in output and "Authorization: Bearer <redacted>" in output
        proc = run("patrol.yml", "-l", ",".join(HOSTS), "-e", "patrol_run_dir=%s" % LEAK_RUN_DIR,
                   "-e", "ansible_pipelining=false")
        output = proc.stdout + proc.stderr
        assert "job_status runs through AnsiballZ: pipelining is off" in output, masked(output[-5000:])
        assert sorted(name for name, value in LOG_CANARY.items() if value in output) == []
        raw = [line for line in output.splitlines() for addr in hosts
               if line.startswith("<%s> (" % addr) and '"tail": [' in line]
        assert len(raw) >= len(HOSTS), masked(output[-5000:])
        for line in raw:
            assert "debug: WANDB_API_KEY=<redacted>" in line and "Authorization: Bearer <redacted>" in line, \
                masked(line)
    finally:
        for host in HOSTS:
            fleet.ssh(host, "rm -rf %s" % LEAK_RUN_DIR, check=False)


def test_no_canary_anywhere_after_launch_patrol_and_teardown(fleet, tmp_path):
    laptop, src = tmp_path / "laptop", tmp_path / "src"
    laptop.mkdir()
    (src / "ckpt").mkdir(parents=True)
    (src / "train.sh").write_text(TRAIN_SH)
    for arg in TRAIN + [entry.split()[0] for entry in EXP2]:
        (src / "ckpt" / ("%s.safetensors" % arg)).write_bytes(checkpoint(arg))
    # the user's vars file (as a vault file would be): the test's own input, the one controller file not grepped
    secrets = tmp_path / "secrets.yml"
    secrets.write_text(json.dumps({"credentials_secrets": {"HF_TOKEN": CANARY["hf_job"],
                                                           "WANDB_API_KEY": CANARY["wandb_job"]}}))
    os.chmod(str(secrets), 0o600)
    for host in HOSTS:
        open(fleet.hosts[host]["lab_meter_log"], "w", encoding="utf-8").close()
    run = Runs(fleet, laptop)

    # 1. launch, twice, as the README says: train (both items succeed), exp2 (lab-01 waits, lab-02 fails)
    launch = ["-l", ",".join(HOSTS), "-e", "launch_src=%s" % src, "-e", "launch_command='bash train.sh'",
              "-e", "@%s" % secrets]
    proc = run("launch.yml", *launch, "-e", json.dumps({"launch_queue": TRAIN}), env={"AUTODL_TOKEN": CANARY["autodl"]})
    assert proc.returncode == 0, shown(proc)
    for host in HOSTS:
        assert wait_finished(fleet, host, "train")["exit_code"] == 0
    proc = run("launch.yml", *launch, "-e", "launch_name=exp2", "-e", json.dumps({"launch_queue": EXP2}))
    assert proc.returncode == 0, shown(proc)
    assert wait_finished(fleet, "lab-02", "exp2")["exit_code"] != 0
    assert read_json(fleet, "lab-02", "~/.trainer/jobs/exp2/items/001/status.json")["exit_code"] == 3
    # the job had the exact secrets (their digests, which it printed), from the credentials file
    digests = "secrets: hf %s wandb %s" % tuple(hashlib.sha256(CANARY[name].encode()).hexdigest()[:12]
                                                for name in ("hf_job", "wandb_job"))
    for host in HOSTS:
        assert digests in fleet.ssh(host, "cat ~/.trainer/jobs/train/job.log").stdout

    # 2. patrol: lab-02's exp2 item failed (FAIL, its log tail shown), lab-01's exp2 runs
    proc = run("patrol.yml", "-l", ",".join(HOSTS))
    assert proc.returncode != 0, shown(proc)  # a FAIL escalates (patrol_fail_run)
    rows = {row["host"]: row for row in json.loads((laptop / "reports" / "patrol.json").read_text())["hosts"]}
    assert rows["lab-02"]["verdict"] == "FAIL" and "boom" in json.dumps(rows["lab-02"]), rows["lab-02"]
    assert (laptop / "reports" / "fleet.html").exists()

    # 3. teardown: the RunPod pod (its environment holds canaries too) stopped through the fake API
    pod_id = fleet.ssh("lab-02", "printf %s \"$RUNPOD_POD_ID\"").stdout.strip()
    assert pod_id
    pod = dict(fake_api.runpod_pod(2, fleet.hosts["lab-02"]["ansible_host"],
                                   int(fleet.hosts["lab-02"]["ansible_port"]), name="lab-02"), id=pod_id)
    pod["env"] = {"HF_TOKEN": CANARY["hf_instance"], "WANDB_API_KEY": CANARY["wandb_instance"]}
    fake = fake_api.FakeAPI("runpod", CANARY["runpod"], [pod]).start()
    fake.on_lifecycle = fake_api.meter_log_hook({pod_id: ("lab-02", fleet.hosts["lab-02"]["lab_meter_log"])})
    teardown = ["-e", json.dumps({"runpod_pod_id": pod_id, "provider_api_url": fake.url})]
    try:
        # 3a. while exp2 runs on lab-01: refused there
        proc = run("teardown.yml", *approve(["lab-01"]), *teardown)
        assert proc.returncode != 0 and "job_alive" in proc.stdout + proc.stderr, shown(proc)
        assert fleet.meter("lab-01") == []
        fleet.ssh("lab-01", "touch ~/go-exp2")
        assert wait_finished(fleet, "lab-01", "exp2")["exit_code"] == 0
        # 3b. the provider answers with 401 and a body that echoes the key: lab-02's teardown fails (a permanent
        # error: never retried, so the one fault is all it takes)
        fake.inject({"status": 401, "raw": '{"error": "invalid api key %s"}' % CANARY["runpod"]})
        proc = run("teardown.yml", *approve(["lab-02"]), *teardown)
        assert proc.returncode != 0 and "HTTP 401" in proc.stdout + proc.stderr, shown(proc)
        assert fleet.meter("lab-02") == []
        # 3c. approved, the API answering: both boxes pulled and stopped
        proc = run("teardown.yml", *approve(HOSTS), *teardown)
        assert proc.returncode == 0, shown(proc)
    finally:
        fake.stop()
    assert [line["argv"] for line in fleet.meter("lab-01")] == [["shutdown", "-h", "now"]]
    assert [line["argv"] for line in fleet.meter("lab-02")] == [["provider-api", "runpod", "terminate", pod_id]]
    for host in HOSTS:
        assert (laptop / "pulls" / host / "TEARDOWN_RECEIPT.json").exists()

    # 4. the grep: every run's output, every file under the laptop directory, every file on the boxes
    found = {}
    for what, output in run.outputs:
        if hits(output):
            found["output of ansible-playbook %s" % what] = hits(output)
    for path in sorted(laptop.rglob("*")):
        if path.is_file() and not path.is_symlink() and hits(path.read_bytes().decode("utf-8", "replace")):
            found[str(path.relative_to(laptop))] = hits(path.read_bytes().decode("utf-8", "replace"))
    for host in HOSTS:
        box = box_grep(fleet, host)
        for path, names in box["hits"].items():
            found["%s:%s" % (host, path)] = names
        # the credentials file: private, and it did carry the job's secrets
        assert list(box["credentials"]) == ["/root/.trainer/%s" % CREDENTIALS_FILE], box["credentials"]
        credentials = box["credentials"]["/root/.trainer/%s" % CREDENTIALS_FILE]
        assert credentials["mode"] == "0600", credentials
        assert credentials["holds"] == ["hf_job", "wandb_job"], credentials
        assert "/root" in box["roots"]
    assert found == {}, "canaries left behind: %s" % json.dumps(found, indent=1)


def box_grep(fleet, host):
    """BOX_GREP run on ``host`` over its home, data and durable directories (the script copied to the box's /tmp,
    outside them; the canaries on stdin) -> {"hits", "credentials", "roots"}."""
    def ssh(command, data):
        proc = subprocess.run(fleet.ssh_argv(host, command), input=data, capture_output=True, timeout=300,
                              check=False)
        assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
        return proc.stdout
    ssh("cat > /tmp/canary-grep.py", BOX_GREP.encode())
    return json.loads(ssh("python3 /tmp/canary-grep.py %s" % " ".join(BOX_ROOTS[host]), json.dumps(CANARY).encode()))
