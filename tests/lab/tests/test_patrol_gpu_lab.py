"""patrol.yml and GPU health while the job runs (issue 16, item 6), over the lab's GPU emulator: a GPU throttled
under load, a fatal Xid written after the job started (and the same line when the job started after it), an empty
GPU sample, an unreadable kernel log, and still exactly one SSH execution per host per tick."""
from __future__ import annotations

import shlex

import pytest

from labhelpers import SshCounter, needs_root, started_fleet
from test_patrol_lab import adhoc, codes, host_line, patrol

pytestmark = needs_root

SCENARIOS = {
    "lab-01": "h100-load-hwslowdown-edited",  # HW Slowdown + HW Power Brake active at 100 % utilisation
    "lab-02": "xid48-dbe",                    # kern.log: a real Xid 48 line stamped 240314.528856 s after boot
    "lab-03": "no-devices",                   # nvidia-smi runs and answers 'No devices were found'
    "lab-04": "8xh100-hwslowdown",            # the real capture: HW Slowdown + Power Brake on 8 GPUs at 0 %
    "lab-05": "kernel-log-unreadable",        # dmesg and journalctl refused, as in an unprivileged container
}
XID48_SECONDS = 240314.528856
JOB = 'for i in $(seq 1 100000); do echo "epoch $i"; sleep 1; done'
GPU_CODES = {"throttle_active", "xid_fatal", "xid_app_fault", "xid_info", "gpu_sample_empty", "gpu_query_failed",
             "kernel_log_unreadable"}


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    args = ["--size", "5"]
    for host, scenario in SCENARIOS.items():
        args += ["--scenario", "%s=%s" % (host, scenario)]
    with started_fleet(tmp_path_factory.mktemp("lab"), *args) as lab:
        for host in SCENARIOS:
            rc, result = adhoc(lab, host, "remote_gpu.trainer.detached_job", {"name": "train", "command": JOB})
            assert rc == 0 and result["running"], result
        yield lab


def launch_at(fleet, host, seconds_after_boot):
    """Put the job's recorded start (job.meta.json launched_epoch) at ``seconds_after_boot`` of the box's clock,
    so that a real kernel-log line, stamped in seconds since boot by the box it was captured on, lies after or
    before it. The file stays the job's own (mode 0600), so job_status still trusts it."""
    script = ("import json, os, time\n"
              "path = os.path.expanduser('~/.trainer/jobs/train/job.meta.json')\n"
              "meta = json.load(open(path))\n"
              "boot = time.time() - float(open('/proc/uptime').read().split()[0])\n"
              "meta['launched_epoch'] = boot + %r\n"
              "fd = os.open(path + '.tmp', os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)\n"
              "os.write(fd, json.dumps(meta).encode())\n"
              "os.close(fd)\n"
              "os.replace(path + '.tmp', path)\n"
              "print(meta['launched_epoch'])\n" % seconds_after_boot)
    return float(fleet.ssh(host, "python3 -c %s" % shlex.quote(script)).stdout.strip())


def findings_of(row, code):
    return [f for f in row["findings"] if f["code"] == code]


def test_a_gpu_throttled_under_load_is_throttle_active(fleet, tmp_path):
    proc, rows = patrol(fleet, tmp_path, "-l", "lab-01,lab-04")
    row = rows["lab-01"]
    assert proc.returncode != 0 and row["verdict"] == "FAIL", proc.stdout
    throttled = findings_of(row, "throttle_active")
    assert len(throttled) == 1 and throttled[0]["gpu"] == 0 and throttled[0]["level"] == "FAIL"
    assert throttled[0]["reasons"] == ["hw_slowdown", "hw_power_brake_slowdown"]
    assert "under load (utilisation 100 %" in throttled[0]["message"]
    assert row["top_finding"].startswith("throttle_active: GPU 0 ")
    assert row["gpus"][0]["throttle_reasons"] == ["hw_power_brake_slowdown", "hw_slowdown"]
    assert "escalate: throttle_active" in host_line(proc, "lab-01")
    # the real capture of the same reasons on 8 idle GPUs (0 %, 86 MHz): an idle GPU at low clocks is not a finding
    idle = rows["lab-04"]
    assert idle["verdict"] == "PASS" and not codes(idle) & GPU_CODES, idle["findings"]
    assert len(idle["gpus"]) == 8 and all(g["utilization_pct"] == 0 and "hw_slowdown" in g["throttle_reasons"]
                                          for g in idle["gpus"])


def test_a_fatal_xid_after_the_job_started_is_xid_fatal_and_one_before_it_is_not(fleet, tmp_path):
    launch_at(fleet, "lab-02", XID48_SECONDS - 3600)  # the Xid 48 line came an hour after the start
    proc, rows = patrol(fleet, tmp_path, "-l", "lab-02")
    row = rows["lab-02"]
    assert proc.returncode != 0 and row["verdict"] == "FAIL", proc.stdout
    fatal = findings_of(row, "xid_fatal")
    assert len(fatal) == 1 and fatal[0]["level"] == "FAIL" and "Xid 48" in fatal[0]["message"], row["findings"]
    assert "this box is dying: pull what you have" in fatal[0]["action"]
    assert row["top_finding"].startswith("xid_fatal: ") and "xid_fatal: " in proc.stdout
    assert row["jobs"][0]["alive"]

    launch_at(fleet, "lab-02", XID48_SECONDS + 3600)  # now the job started an hour after that line
    proc, rows = patrol(fleet, tmp_path, "-l", "lab-02")
    row = rows["lab-02"]
    assert proc.returncode == 0 and row["verdict"] == "PASS", proc.stdout
    assert not codes(row) & GPU_CODES, row["findings"]


def test_an_empty_sample_is_a_warn_and_an_unreadable_kernel_log_is_info(fleet, tmp_path):
    proc, rows = patrol(fleet, tmp_path, "-l", "lab-03,lab-05")
    assert proc.returncode == 0, proc.stdout  # a WARN is shown, not escalated
    empty = rows["lab-03"]
    assert empty["verdict"] == "WARN" and empty["gpus"] == [], empty
    warn = findings_of(empty, "gpu_sample_empty")
    assert len(warn) == 1 and warn[0]["level"] == "WARN" and "No devices were found" in warn[0]["message"]
    assert empty["top_finding"].startswith("gpu_sample_empty: ")
    quiet = rows["lab-05"]
    assert quiet["verdict"] == "PASS" and [(f["code"], f["level"]) for f in quiet["findings"]
                                           if f["code"] in GPU_CODES] == [("kernel_log_unreadable", "INFO")]
    assert "Operation not permitted" in findings_of(quiet, "kernel_log_unreadable")[0]["message"]
    assert quiet["gpus"][0]["utilization_pct"] is not None


def test_still_one_ssh_execution_per_host(fleet, tmp_path):
    launch_at(fleet, "lab-02", XID48_SECONDS - 3600)
    ssh = SshCounter(tmp_path)
    hosts = sorted(SCENARIOS)
    proc, rows = patrol(fleet, tmp_path, env=ssh.env)
    assert sorted(rows) == hosts
    assert {host: sorted(codes(rows[host]) & GPU_CODES) for host in hosts} == {
        "lab-01": ["throttle_active"], "lab-02": ["xid_fatal"], "lab-03": ["gpu_sample_empty"], "lab-04": [],
        "lab-05": ["kernel_log_unreadable"]}
    assert ssh.per_host(fleet, hosts) == dict.fromkeys(hosts, 1)
