"""patrol.yml against real detached jobs on the lab fleet: alive with progress, killed mid-run, a crash, a metric
called val_error, a stale log, a full data disk, an unreachable and a hanging host, the Prometheus textfile, and
exactly one SSH execution per host per tick, its probe run without AnsiballZ."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time

import pytest

from labhelpers import REPO, SshCounter, needs_root, started_fleet

pytestmark = needs_root
VENV_BIN = os.path.join(REPO, ".venv", "bin")

ITEM = ('mkdir -p "$TRAINER_ITEMS_DIR/{0}" && printf \'{{"item": "{0}", "exit_code": 0, "started": "s", '
        '"finished": "f"}}\\n\' > "$TRAINER_ITEMS_DIR/{0}/status.json.tmp" && '
        'mv "$TRAINER_ITEMS_DIR/{0}/status.json.tmp" "$TRAINER_ITEMS_DIR/{0}/status.json"')


def items(count):
    return "; ".join(ITEM.format("%03d" % (i + 1)) for i in range(count))


JOBS = {
    # a healthy job: 3 of 7 items done, one epoch line a second
    "lab-01": items(3) + '; for i in $(seq 1 100000); do echo "epoch $i"; sleep 1; done',
    # killed mid-run by the test (SIGKILL to the command, as the OOM killer does): 2 of 7 items done
    "lab-02": items(2) + '; for i in $(seq 1 100000); do echo "epoch $i loss 0.5"; sleep 1; done',
    # a Python crash, then the process stays (a hung DataLoader after a worker traceback)
    "lab-03": ('echo "epoch 1"; echo "Traceback (most recent call last):"; echo \'  File "train.py", line 3\'; '
               'echo "RuntimeError: CUDA error: an illegal memory access was encountered"; sleep 100000'),
    # a metric named val_error is not a crash; it prints a few lines, then is silent (for the stale-log test)
    "lab-04": 'for i in 1 2 3; do echo "epoch $i val_error=0.31 train_error=0.2"; done; sleep 100000',
    # healthy; the test fills its data disk
    "lab-07": 'for i in $(seq 1 100000); do echo "step $i"; sleep 1; done',
}


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "7", "--variant", "lab-05=down",
                       "--variant", "lab-06=slow", "--slow-seconds", "40") as lab:
        for host, command in JOBS.items():
            rc, result = adhoc(lab, host, "remote_gpu.trainer.detached_job", {"name": "train", "command": command})
            assert rc == 0 and result["running"], result
        time.sleep(2)  # the first epochs and items are written
        yield lab


def ansible_env(**extra):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_DEPRECATION_WARNINGS="0", PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))
    env.update(extra)
    return env


def adhoc(fleet, host, module, args):
    """(rc, result dict) of one ad-hoc module call (one-line output)."""
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible"), "-i", fleet.inventory_path, host, "-o", "-m", module,
                           "-a", json.dumps(args)], capture_output=True, text=True, env=ansible_env(), timeout=120,
                          check=False)
    line = next((line for line in proc.stdout.splitlines() if line.startswith(host + " | ")), "")
    assert " => " in line, proc.stdout + proc.stderr
    return proc.returncode, json.loads(line.split(" => ", 1)[1])


def patrol(fleet, tmp_path, *args, env=None):
    report = tmp_path / "patrol.json"
    if report.exists():
        report.unlink()
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", fleet.inventory_path,
                           os.path.join(REPO, "playbooks", "patrol.yml"), "-e", "patrol_queue_length=7",
                           "-e", "patrol_report_path=%s" % report, *args],
                          capture_output=True, text=True, env=ansible_env(**(env or {})), timeout=300, check=False)
    rows = {row["host"]: row for row in json.loads(report.read_text())["hosts"]} if report.exists() else {}
    return proc, rows


def host_line(proc, host):
    out = proc.stdout[:proc.stdout.index("PLAY RECAP")]
    lines = [line for line in out.splitlines() if line.startswith(host + " ")]
    assert len(lines) == 2, proc.stdout  # the host's line and its table row
    return lines[0]


def recap_failed(proc):
    """{host: failed=N} of the play recap."""
    recap = proc.stdout[proc.stdout.index("PLAY RECAP"):]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\S+)\s+:.*\bfailed=(\d+)", recap, re.M)}


def codes(row):
    return {finding["code"] for finding in row["findings"]}


def test_healthy_job_is_alive_with_progress_and_exit_0(fleet, tmp_path):
    proc, rows = patrol(fleet, tmp_path, "-l", "lab-01")
    assert proc.returncode == 0, proc.stdout
    assert list(rows) == ["lab-01"] and rows["lab-01"]["verdict"] == "PASS"
    job = rows["lab-01"]["jobs"][0]
    assert job["alive"] and job["items_done"] == 3 and job["progress"]["unit"] == "epoch"
    line = host_line(proc, "lab-01")
    assert re.match(r"lab-01 PASS train ALIVE items 3/7 epoch \d+ log 0m \| data ", line), line
    assert "HOST " in proc.stdout and "patrol: 1 host(s): PASS 1" in proc.stdout


def test_job_killed_mid_run_is_gone_on_the_next_tick_with_its_last_lines(fleet, tmp_path):
    proc, rows = patrol(fleet, tmp_path, "-l", "lab-02")
    assert proc.returncode == 0 and rows["lab-02"]["jobs"][0]["alive"], proc.stdout
    # SIGKILL the job's command (the wrapper's child), as the OOM killer or a stray kill would
    fleet.ssh("lab-02", "pkill -KILL -P $(cat ~/.trainer/jobs/train/job.pid)")
    deadline = time.monotonic() + 20
    while fleet.ssh("lab-02", "test -e ~/.trainer/jobs/train/status.json", check=False).returncode != 0:
        assert time.monotonic() < deadline, "the wrapper wrote no status after the kill"
        time.sleep(0.2)
    # with lab-01 (healthy, and the first host of the play: the one that prints the table) in the same tick
    proc, rows = patrol(fleet, tmp_path, "-l", "lab-01,lab-02")
    assert proc.returncode != 0
    row = rows["lab-02"]
    assert row["verdict"] == "FAIL" and "job_gone_incomplete" in codes(row)
    assert rows["lab-01"]["verdict"] == "PASS", proc.stdout
    # the failure is lab-02's, on screen and in the recap; lab-01 did not fail
    assert recap_failed(proc) == {"lab-01": 0, "lab-02": 1}, proc.stdout
    assert "fatal: [lab-02]: FAILED!" in proc.stdout and "fatal: [lab-01" not in proc.stdout, proc.stdout
    # the shell's "<pid> Killed" message is a crash marker too (kind killed)
    assert any(reason.startswith("job_gone_incomplete: train is not running at 2/7 items (exit code 137")
               for reason in row["reasons"]), row["reasons"]
    line = host_line(proc, "lab-02")
    assert "train GONE items 2/7" in line and "exit 137 (killed)" in line, line
    # the last lines are the job's own (the shell's Killed message), not the wrapper's "==== trainer: ..." markers
    assert re.search(r"last lines: .*epoch \d+ loss 0\.5 \| [^|]*Killed", line), line
    assert "==== trainer:" not in line, line
    assert line.endswith("escalate: job_gone_incomplete, job_crashed")
    assert row["top_finding"].startswith("job_gone_incomplete: ")
    assert "escalated: job_gone_incomplete: train is not running" in proc.stdout


def test_traceback_escalates_as_a_crash(fleet, tmp_path):
    proc, rows = patrol(fleet, tmp_path, "-l", "lab-03")
    assert proc.returncode != 0
    assert rows["lab-03"]["verdict"] == "FAIL" and "job_crashed" in codes(rows["lab-03"])
    line = host_line(proc, "lab-03")
    assert "train ALIVE" in line and "crash traceback x2" in line and "CUDA error: an illegal memory" in line


def test_val_error_metric_does_not_escalate_but_a_stale_log_does(fleet, tmp_path):
    proc, rows = patrol(fleet, tmp_path, "-l", "lab-04")
    assert proc.returncode == 0, proc.stdout
    row = rows["lab-04"]
    assert row["verdict"] == "PASS" and row["jobs"][0]["crash_marker_count"] == 0
    assert "epoch 3" in host_line(proc, "lab-04")
    time.sleep(1.1)  # the log has been silent for more than 0 minutes
    proc, rows = patrol(fleet, tmp_path, "-l", "lab-04", "-e", "patrol_stale_minutes=0")
    assert proc.returncode != 0
    assert rows["lab-04"]["verdict"] == "FAIL" and rows["lab-04"]["reasons"][0].startswith("log_stale: ")
    assert "STALE" in host_line(proc, "lab-04")


def test_full_data_disk_escalates(fleet, tmp_path):
    data = fleet.hosts["lab-07"]["lab_data_dir"]
    fleet.ssh("lab-07", "head -c 62M /dev/zero > %s/filler.bin" % shlex.quote(data))
    try:
        proc, rows = patrol(fleet, tmp_path, "-l", "lab-07")
    finally:
        fleet.ssh("lab-07", "rm -f %s/filler.bin" % shlex.quote(data))
    assert proc.returncode != 0
    row = rows["lab-07"]
    assert "bytes_high" in codes(row) and row["data_bytes_pct"] >= 95
    assert any(reason.startswith("bytes_high: %s" % data) for reason in row["reasons"])
    assert rows["lab-07"]["jobs"][0]["alive"]


def test_whole_fleet_keeps_unreachable_and_hanging_hosts_in_the_table(fleet, tmp_path):
    prom = tmp_path / "textfile" / "trainer_patrol.prom"
    proc, rows = patrol(fleet, tmp_path, "-e", "patrol_host_timeout=5", "-e", "patrol_prom_path=%s" % prom)
    assert proc.returncode != 0
    assert sorted(rows) == ["lab-%02d" % i for i in range(1, 8)]
    assert rows["lab-01"]["verdict"] == "PASS" and rows["lab-04"]["verdict"] == "PASS"
    assert rows["lab-05"]["verdict"] == "UNREACHABLE"
    assert rows["lab-06"]["verdict"] == "FAIL" and codes(rows["lab-06"]) == {"probe_timeout"}
    for host in rows:
        host_line(proc, host)  # every host has its line and its table row
    assert "escalated: unreachable: " in proc.stdout
    # each escalation fails its own host, in the recap too
    failed = recap_failed(proc)
    assert failed["lab-05"] == failed["lab-06"] == 1 and failed["lab-01"] == failed["lab-04"] == 0, proc.stdout
    # the Prometheus textfile: written atomically (nothing else left in its directory), one series per host
    assert [p.name for p in prom.parent.iterdir()] == ["trainer_patrol.prom"]
    text = prom.read_text()
    assert 'trainer_job_alive{host="lab-01",job="train"} 1\n' in text
    assert 'trainer_job_items_done{host="lab-01",job="train"} 3\n' in text
    assert 'trainer_patrol_verdict{host="lab-05",verdict="UNREACHABLE"} 1\n' in text
    assert re.search(r'trainer_disk_inodes_pct\{host="lab-01",tier="data"\} \d+\n', text)
    assert "# TYPE trainer_job_progress gauge\n" in text


def test_patrol_changes_nothing_and_costs_one_ssh_execution_per_host(fleet, tmp_path):
    ssh = SshCounter(tmp_path)
    hosts = ["lab-01", "lab-03", "lab-04", "lab-05", "lab-07"]
    proc, rows = patrol(fleet, tmp_path, "-l", ",".join(hosts), "-vvv", env=ssh.env)
    assert sorted(rows) == hosts
    recap = proc.stdout[proc.stdout.index("PLAY RECAP"):]
    assert "changed=0" in recap and not re.search(r"changed=[1-9]", recap)
    assert ssh.per_host(fleet, hosts) == dict.fromkeys(hosts, 1)
    # the probe ran on every host without AnsiballZ (plugin_utils/direct), as the profiles' settings allow
    assert proc.stdout.count("job_status runs without AnsiballZ") == len(hosts), proc.stdout
    assert "job_status runs through AnsiballZ" not in proc.stdout


def test_look_alike_job_names_are_two_jobs_with_two_tmux_sessions(fleet):
    """tmux turns '.' into '_' in session names: a.b and a_b must still be two jobs (issue 14, item 1)."""
    host, module = "lab-04", "remote_gpu.trainer.detached_job"
    try:
        rc, dotted = adhoc(fleet, host, module, {"name": "a.b", "command": "sleep 600", "detach": "tmux"})
        assert rc == 0 and dotted["started"] and dotted["running"], dotted
        rc, under = adhoc(fleet, host, module, {"name": "a_b", "command": "sleep 600", "detach": "tmux"})
        assert rc == 0 and under["started"] and under["running"], under  # not "already running (pid None)"
        assert under["pid"] != dotted["pid"]
        listed = fleet.ssh(host, "tmux list-sessions -F '#{session_name}'").stdout.split()
        assert {"trainer-a+b", "trainer-a_b"} <= set(listed), listed
        rc, stopped = adhoc(fleet, host, module, {"name": "a_b", "state": "stopped"})
        assert rc == 0 and stopped["changed"], stopped
        rc, again = adhoc(fleet, host, module, {"name": "a.b", "command": "sleep 600", "detach": "tmux"})
        assert rc == 0 and again["started"] is False and again["pid"] == dotted["pid"], again  # a.b still runs
        listed = fleet.ssh(host, "tmux list-sessions -F '#{session_name}'").stdout.split()
        assert "trainer-a+b" in listed and "trainer-a_b" not in listed, listed
    finally:
        for name in ("a.b", "a_b"):
            adhoc(fleet, host, module, {"name": name, "state": "stopped"})


def test_danger_clocks_once_per_platform_and_idle_billing_of_a_finished_queue(fleet, tmp_path):
    """Issue 16, item 7: the profile's danger clocks above the table, once per platform, and a finished queue on a
    box that still bills as idle_billing (WARN) with the hours idle and, with a price, the money."""
    for host in ("lab-01", "lab-03"):  # autodl, runpod
        rc, result = adhoc(fleet, host, "remote_gpu.trainer.detached_job",
                           {"name": "finished", "command": items(1) + "; echo 'epoch 1'"})
        assert rc == 0 and result["started"], result
    deadline = time.monotonic() + 20
    for host in ("lab-01", "lab-03"):
        while fleet.ssh(host, "test -e ~/.trainer/jobs/finished/status.json", check=False).returncode != 0:
            assert time.monotonic() < deadline, "the job wrote no status"
            time.sleep(0.2)
    # lab-01's queue finished three hours ago (by its status), lab-03's just now
    three_hours_ago = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 3 * 3600))
    fleet.ssh("lab-01", "sed -i -E 's/\"finished\": *\"[^\"]*\"/\"finished\": \"%s\"/' "
                        "~/.trainer/jobs/finished/status.json" % three_hours_ago)
    prices = tmp_path / "prices.yml"
    prices.write_text(json.dumps({"all": {"hosts": {"lab-01": {"trainer_price_per_hour": 2.5}}}}))
    watch = ("-i", str(prices), "-l", "lab-01,lab-03", "-e", "patrol_job_name=finished", "-e", "patrol_queue_length=1")

    proc, rows = patrol(fleet, tmp_path, *watch)
    assert proc.returncode == 0, proc.stdout  # a WARN: shown, not escalated
    out = proc.stdout[:proc.stdout.index("PLAY RECAP")]
    autodl = [line for line in out.splitlines() if line.startswith("danger clocks, autodl")]
    assert autodl == ["danger clocks, autodl (1 host): a powered-off instance is released automatically after 15 "
                      "days, which deletes the data disk (verified 2026-06); a powered-off instance still bills its "
                      "data disk's storage at a small rate; only release ends it (verified 2026-06); arrears force a "
                      "stop (verified 2026-06)"]
    runpod = [line for line in out.splitlines() if line.startswith("danger clocks, runpod")]
    assert len(runpod) == 1 and "at zero balance pods and storage can be deleted" in runpod[0]
    assert out.index("danger clocks, autodl") < out.index("HOST ")  # above the table
    assert rows["lab-01"]["verdict"] == "WARN" and rows["lab-01"]["jobs"][0]["state"] == "DONE"
    assert codes(rows["lab-01"]) == {"idle_billing", "job_finished"}, rows["lab-01"]["findings"]
    idle = rows["lab-01"]["findings"][0]  # the WARN before job_finished (INFO)
    assert idle["code"] == "idle_billing" and idle["level"] == "WARN", rows["lab-01"]["findings"]
    assert 2.95 <= idle["hours_idle"] <= 3.05 and idle["currency"] == "CNY"
    assert abs(idle["cost"] - 2.5 * idle["hours_idle"]) < 0.01
    assert "the box still bills: about 7.5" in rows["lab-01"]["top_finding"]
    assert host_line(proc, "lab-01").startswith("lab-01 WARN finished DONE items 1/1"), proc.stdout
    # lab-03 finished seconds ago: within patrol_idle_minutes (30) it is simply done
    assert rows["lab-03"]["verdict"] == "PASS" and codes(rows["lab-03"]) == {"job_finished"}, rows["lab-03"]

    proc, rows = patrol(fleet, tmp_path, *watch, "-e", "patrol_idle_minutes=0")
    assert proc.returncode == 0, proc.stdout
    assert rows["lab-03"]["verdict"] == "WARN" and codes(rows["lab-03"]) == {"idle_billing", "job_finished"}
    idle = rows["lab-03"]["findings"][0]
    assert idle["hours_idle"] < 0.1 and "cost" not in idle and "trainer_price_per_hour" in idle["action"]
    # patrol_strict escalates it, as every WARN
    proc, rows = patrol(fleet, tmp_path, *watch, "-e", "patrol_strict=true")
    assert proc.returncode != 0 and rows["lab-01"]["verdict"] == "FAIL" and "idle_billing" in proc.stdout
