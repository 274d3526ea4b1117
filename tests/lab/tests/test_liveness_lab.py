"""Liveness from artifacts, memory pressure and a full disk's largest consumers (issue 34), with patrol.yml on one
lab fleet of two boxes and two ticks:

* lab-01 runs a job that went silent: its log is 20 minutes old (``touch -d``) while it still writes a checkpoint
  (tick 1: ``log_quiet``, INFO, the box passes); then its checkpoint is 30 minutes old too and the GPU (the
  emulator's idle H100) is idle (tick 2: ``job_hung``, FAIL, escalated), with patrol_stale_minutes=5 and
  patrol_hung_minutes=10;
* lab-02 runs a job in a real memory cgroup of its own (the kernel's, created on the box) whose limit the test sets
  to its use / 0.95 (tick 1: ``memory_pressure``, WARN, with the numbers); then its data disk (a tmpfs with a real
  cap) is filled by a Hugging Face cache (tick 2: ``bytes_high`` names the HF cache and the command that clears it).
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import time

import pytest

from labhelpers import REPO, needs_root, started_fleet

pytestmark = needs_root
VENV_BIN = os.path.join(REPO, ".venv", "bin")
STALE = ("-e", "patrol_stale_minutes=5", "-e", "patrol_hung_minutes=10")
# the job of lab-02: waits until the test has moved it into its cgroup, then holds 40 MiB and is silent
HOLDER = ("while [ ! -e {go} ]; do sleep 0.1; done; exec python3 -c \"import time; b = bytearray(40 << 20); "
          "b[::4096] = b'x' * len(b[::4096]); print('allocated', flush=True); time.sleep(100000)\"")


def ansible_env():
    return dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                ANSIBLE_DEPRECATION_WARNINGS="0", PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))


def start_job(fleet, host, args):
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible"), "-i", fleet.inventory_path, host, "-o", "-m",
                           "remote_gpu.trainer.detached_job", "-a", json.dumps(args)], capture_output=True, text=True,
                          env=ansible_env(), timeout=120, check=False)
    assert proc.returncode == 0 and '"running": true' in proc.stdout, proc.stdout + proc.stderr


def patrol(fleet, report, *args):
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", fleet.inventory_path,
                           os.path.join(REPO, "playbooks", "patrol.yml"), "-e", "patrol_report_path=%s" % report,
                           "-e", "patrol_dashboard=false", *STALE, *args],
                          capture_output=True, text=True, env=ansible_env(), timeout=300, check=False)
    assert os.path.exists(report), proc.stdout + proc.stderr
    with open(report, encoding="utf-8") as fh:
        return proc, {row["host"]: row for row in json.load(fh)["hosts"]}


def own_cgroup(fleet, host):
    """A new memory cgroup below the box's own (cgroup v1 memory controller, or v2 with memory delegated), or
    None when the kernel gives none here."""
    script = r"""
set -e
name=lab-live-$$
if [ -e /sys/fs/cgroup/cgroup.controllers ]; then
  rel=$(sed -n 's/^0:://p' /proc/self/cgroup); parent=/sys/fs/cgroup${rel%/}
  grep -qw memory "$parent/cgroup.subtree_control" 2>/dev/null || exit 3
  limit=memory.max
else
  rel=$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup); parent=/sys/fs/cgroup/memory${rel%/}
  limit=memory.limit_in_bytes
fi
mkdir "$parent/$name" 2>/dev/null || exit 3
echo "$parent/$name $limit"
"""
    done = fleet.ssh(host, script, check=False)
    if done.returncode != 0:
        return None, None
    path, limit = done.stdout.split()
    return path, limit


@pytest.fixture(scope="module")
def ticks(lab_free, tmp_path_factory):
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "2") as fleet:
        data1, data2 = (fleet.hosts[h]["lab_data_dir"] for h in ("lab-01", "lab-02"))
        ckpt = "%s/ckpt" % data1
        fleet.ssh("lab-01", "mkdir -p %s" % shlex.quote(ckpt))
        start_job(fleet, "lab-01", {"name": "quiet", "chdir": ckpt, "command": 'echo "epoch 1"; sleep 100000'})
        go = "%s/go" % data2
        start_job(fleet, "lab-02", {"name": "holder", "command": HOLDER.format(go=shlex.quote(go))})
        cgroup, limit = own_cgroup(fleet, "lab-02")
        try:
            if cgroup:
                # the wrapper (job.pid) and its shell into the cgroup; the python started after "go" is born there
                fleet.ssh("lab-02", "pid=$(cat ~/.trainer/jobs/holder/job.pid); for p in $pid $(pgrep -P $pid); do "
                          "echo $p > %s/cgroup.procs; done; touch %s" % (shlex.quote(cgroup), shlex.quote(go)))
                deadline = time.monotonic() + 60
                while "allocated" not in fleet.ssh("lab-02", "cat ~/.trainer/jobs/holder/job.log").stdout:
                    assert time.monotonic() < deadline, "the holder did not allocate its memory"
                    time.sleep(0.2)
                usage = "memory.current" if limit == "memory.max" else "memory.usage_in_bytes"
                fleet.ssh("lab-02", "cd %s && echo $(( $(cat %s) * 100 / 95 )) > %s" % (
                    shlex.quote(cgroup), usage, limit))
            # lab-01: the log went silent 20 minutes ago; the checkpoint is written now
            fleet.ssh("lab-01", "touch -d '20 minutes ago' ~/.trainer/jobs/quiet/job.log && "
                      "echo weights > %s/last.pt" % shlex.quote(ckpt))
            report = str(tmp_path_factory.mktemp("reports") / "patrol.json")
            first = patrol(fleet, report)
            # lab-01: the checkpoint is 30 minutes old too; lab-02: a Hugging Face cache fills its data disk
            fleet.ssh("lab-01", "touch -d '30 minutes ago' %s/last.pt %s" % (shlex.quote(ckpt), shlex.quote(ckpt)))
            fleet.ssh("lab-02", "mkdir -p {d}/hf/hub/models--org--big/blobs && head -c 50M /dev/zero > "
                      "{d}/hf/hub/models--org--big/blobs/0a1b && head -c 11M /dev/zero > {d}/filler.bin".format(
                          d=shlex.quote(data2)))
            second = patrol(fleet, report)
            yield {"first": first, "second": second, "cgroup": cgroup, "data2": data2, "ckpt": ckpt}
        finally:
            if cgroup:  # the job's processes back into the box's own cgroup (they die with the fleet), then it goes
                fleet.ssh("lab-02", "cd %s && for p in $(cat cgroup.procs); do echo $p > ../cgroup.procs; done; "
                          "cd / && rmdir %s" % (shlex.quote(cgroup), shlex.quote(cgroup)), check=False)


def finding(row, code):
    found = [f for f in row["findings"] if f["code"] == code]
    assert found, (code, [(f["code"], f["message"]) for f in row["findings"]])
    return found[0]


def test_a_quiet_log_with_a_fresh_checkpoint_is_log_quiet_and_passes(ticks):
    proc, rows = ticks["first"]
    row = rows["lab-01"]
    quiet = finding(row, "log_quiet")
    assert quiet["level"] == "INFO" and "log_stale" not in {f["code"] for f in row["findings"]}
    assert "%s/last.pt was written 0 min ago" % ticks["ckpt"] in quiet["message"]
    assert row["verdict"] == "PASS" and row["jobs"][0]["alive"], proc.stdout


def test_log_and_checkpoint_silent_with_an_idle_gpu_is_job_hung_and_escalates(ticks):
    proc, rows = ticks["second"]
    row = rows["lab-01"]
    hung = finding(row, "job_hung")
    assert hung["level"] == "FAIL" and row["verdict"] == "FAIL" and proc.returncode != 0
    assert hung["log_age_seconds"] >= 20 * 60 and hung["artifact_age_seconds"] >= 30 * 60
    assert hung["gpu_readings"] >= 1 and hung["gpu_busy_readings"] == 0
    assert any(reason.startswith("job_hung: quiet is alive but hung") for reason in row["reasons"]), row["reasons"]


def test_a_job_at_95_percent_of_its_cgroups_memory_limit_is_memory_pressure(ticks):
    if not ticks["cgroup"]:
        pytest.skip("the kernel gives the lab box no memory cgroup of its own (cgroup v2 without memory delegated)")
    _proc, rows = ticks["first"]
    pressure = finding(rows["lab-02"], "memory_pressure")
    assert pressure["level"] == "WARN" and pressure["cgroup"] == ticks["cgroup"]
    assert 90 * pressure["memory_max"] < 100 * pressure["memory_current"] <= 100 * pressure["memory_max"]
    assert "memory.max %d" % pressure["memory_max"] in pressure["message"]
    assert rows["lab-02"]["jobs"][0]["memory"]["max"] == pressure["memory_max"]


def test_a_full_data_disk_names_the_hugging_face_cache_and_the_command_to_clear_it(ticks):
    proc, rows = ticks["second"]
    full = finding(rows["lab-02"], "bytes_high")
    hub = "%s/hf" % ticks["data2"]
    assert full["level"] == "FAIL" and proc.returncode != 0
    assert full["consumers"][0]["path"] == hub and full["consumers"][0]["kind"] == "hf_cache"
    assert "largest: Hugging Face cache %s (50.0 MiB" % hub in full["message"]
    assert "huggingface-cli delete-cache --dir '%s/hub'" % hub in full["action"]
