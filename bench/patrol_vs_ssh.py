#!/usr/bin/env python
"""Benchmark: one patrol.yml tick over 32 lab hosts against the seed's probe over plain parallel ssh, same run.

Every host runs a detached job (started with remote_gpu.trainer.detached_job). The baseline is the raw minimum a
patrol can cost: one plain `ssh HOST bash -s` per host, all in parallel, running the body of the seed's
health_patrol.sh.template probe (its REMOTE heredoc, with RUN_GLOB, RESULT_DIR, RUN_LOG and DATA_MOUNT filled in
for the job). Ours is one `ansible-playbook playbooks/patrol.yml` tick. Runs are interleaved. Both sides connect
cold (the baseline with ControlPath=none; Ansible's ControlPersist masters are closed after each tick), as a
tick from cron every few minutes does.

Prints the median wall ratio (target <= 1.5) and the SSH executions per host of each (target for patrol: exactly
1; the tick validates the profiles first, as it does by default), the same tick with -e patrol_profile_check=false,
the ratio of the tick to Ansible's floor (a ping play on every host, interleaved too; target <= 1.15),
then where patrol's time goes: Ansible's start-up, Ansible's own floor (a ping play on every host: what any playbook
costs before it does anything), the profile validation play, and the tick. On this one machine the controller
and all 32 "remote" hosts share its cores. Needs root (the lab fleet). LAB_NET=127.0.N moves the fleet off the
default addresses.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from lab_common import (REPO, VENV_BIN, arguments, close_masters, counting_ssh, executions_per_host,  # noqa: E402
                        fleet_addresses, fleet_hosts, lab_fleet, round_dirs, seed_script, timed,
                        without_control_path)

JOB = ('for i in 001 002 003; do mkdir -p "$TRAINER_ITEMS_DIR/$i" && printf \'{"item": "%s", "exit_code": 0}\\n\' '
       '"$i" > "$TRAINER_ITEMS_DIR/$i/status.json"; done; '
       'for i in $(seq 1 1000000); do echo "epoch $i loss 0.5"; sleep 1; done')
QUEUE_LENGTH = 7
PING = "- name: Ping\n  hosts: all\n  gather_facts: false\n  tasks:\n    - name: Ping\n      ansible.builtin.ping:\n"


def seed_probe():
    """The REMOTE heredoc of the seed's health_patrol.sh.template: the commands its one ssh round-trip runs."""
    script = seed_script("health_patrol.sh.template")
    return script.split("<<'REMOTE'\n", 1)[1].split("\nREMOTE\n", 1)[0] + "\n"


def ansible_env(wrapper=None, **extra):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_DEPRECATION_WARNINGS="0",
               PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))
    if wrapper:
        env["ANSIBLE_SSH_EXECUTABLE"] = str(wrapper)
    env.update(extra)
    return env


def start_jobs(inventory):
    argv = [str(VENV_BIN / "ansible"), "-i", str(inventory), "lab", "-m", "remote_gpu.trainer.detached_job",
            "-a", json.dumps({"name": "train", "command": JOB})]
    proc = subprocess.run(argv, env=ansible_env(), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit("could not start the jobs:\n%s%s" % (proc.stdout[-3000:], proc.stderr[-2000:]))


def run_seed(inventory, wrapper, probe):
    common, hosts = fleet_hosts(inventory)
    options = without_control_path(common["ansible_ssh_common_args"])

    def one(host):
        home = "/root" if host["ansible_user"] == "root" else "/home/%s" % host["ansible_user"]
        job_dir = "%s/.trainer/jobs/train" % home
        argv = [str(wrapper), "-i", common["ansible_ssh_private_key_file"], *options, "-o", "ControlPath=none",
                "-o", "BatchMode=yes", "-o", "ConnectTimeout=15", "%s@%s" % (host["ansible_user"], host["ansible_host"]),
                "bash", "-s", "seq.1.1000000", job_dir + "/items", job_dir + "/job.log", host["lab_data_dir"]]
        proc = subprocess.run(argv, input=probe, capture_output=True, text=True, check=False)
        return proc.returncode, proc.stdout

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(hosts)) as pool:
        return list(pool.map(one, hosts.values()))


def run_patrol(inventory, wrapper, report, playbook=None, *extra):
    argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), str(playbook or REPO / "playbooks" / "patrol.yml"),
            "-e", "patrol_queue_length=%d" % QUEUE_LENGTH, "-e", "patrol_report_path=%s" % report, *extra]
    proc = subprocess.run(argv, env=ansible_env(wrapper), capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout


def profile_parts(inventory, state, tmp, ping, repeat):
    """Median seconds of: ansible-playbook on an empty local play, the ping play ``ping``, the profile play alone,
    the whole tick."""
    empty = tmp / "empty.yml"
    empty.write_text("- name: Nothing\n  hosts: localhost\n  gather_facts: false\n  tasks: []\n")
    profile = tmp / "profile_only.yml"
    profile.write_text("- name: Profile only\n  hosts: all\n  gather_facts: false\n  tasks:\n"
                       "    - name: Validate\n      ansible.builtin.import_role:\n"
                       "        name: remote_gpu.trainer.profile\n        rolespec_validate: false\n")
    parts = {"ansible-playbook start-up (empty local play)": empty,
             "Ansible's floor: ansible.builtin.ping on every host": ping,
             "the profile validation play alone": profile,
             "the patrol tick": None}
    out = {}
    for label, playbook in parts.items():
        times = []
        for _round in range(repeat):
            close_masters(state)
            seconds, _result = timed(lambda: run_patrol(inventory, None, tmp / "p.json", playbook))
            times.append(seconds)
        out[label] = statistics.median(times)
    return out


def main():
    args = arguments(__doc__, hosts=32, repeat=5, no_profile=(False, "skip the breakdown of patrol's time"))
    probe = seed_probe()
    with lab_fleet(args.hosts) as (inventory, state, _env), tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        addresses = fleet_addresses(inventory)
        start_jobs(inventory)
        seed_times, ours_times, seed_counts, ours_counts, codes, rcs = [], [], [], [], set(), set()
        checked_times, ping_times = [], []
        ping_play = tmp / "ping.yml"
        ping_play.write_text(PING)
        for round_no in range(args.repeat):  # interleaved, so both see the same machine state
            seed_dir, ours_dir = round_dirs(tmp, round_no)
            wrapper, log = counting_ssh(seed_dir)
            seconds, results = timed(lambda: run_seed(inventory, wrapper, probe))
            seed_times.append(seconds)
            codes.update(code for code, _out in results)
            seed_counts.append(executions_per_host(log, addresses))
            close_masters(state)
            wrapper, log = counting_ssh(ours_dir)
            seconds, (rc, stdout) = timed(lambda: run_patrol(inventory, wrapper, tmp / "patrol.json"))
            ours_times.append(seconds)
            rcs.add(rc)
            ours_counts.append(executions_per_host(log, addresses))
            close_masters(state)
            seconds, _result = timed(lambda: run_patrol(inventory, None, tmp / "checked.json", None,
                                                        "-e", "patrol_profile_check=false"))
            checked_times.append(seconds)
            close_masters(state)
            seconds, _result = timed(lambda: run_patrol(inventory, None, tmp / "ping.json", ping_play))
            ping_times.append(seconds)
            close_masters(state)
        rows = json.loads((tmp / "patrol.json").read_text())["hosts"]
        seed_s, ours_s = statistics.median(seed_times), statistics.median(ours_times)
        seed_per_host = sorted({n for counts in seed_counts for n in [counts.get(a, 0) for a in addresses]})
        ours_per_host = sorted({n for counts in ours_counts for n in [counts.get(a, 0) for a in addresses]})
        print("patrol_vs_ssh: %d lab hosts, each with a detached job; median of %d interleaved runs, cold connections"
              % (len(addresses), args.repeat))
        print("  raw: seed probe over parallel ssh      %.2f s  (exit codes %s)" % (seed_s, sorted(codes)))
        print("  patrol.yml tick                        %.2f s  (exit %s; verdicts %s)" % (
            ours_s, sorted(rcs), sorted({row["verdict"] for row in rows})))
        print("  ratio patrol/raw                       %.2f  (target <= 1.5)" % (ours_s / seed_s))
        checked_s = statistics.median(checked_times)
        print("  patrol.yml -e patrol_profile_check=false %.2f s, ratio %.2f" % (checked_s, checked_s / seed_s))
        ping_s = statistics.median(ping_times)
        print("  Ansible's floor, a ping play           %.2f s; ratio patrol/ping floor %.2f (target <= 1.15)" % (
            ping_s, ours_s / ping_s))
        print("  ssh executions per host per tick: raw %s, patrol %s (target exactly 1)" % (
            seed_per_host, ours_per_host))
        print("  all runs: raw %s s, patrol %s s, without the profile check %s s, ping %s s" % (
            " ".join("%.2f" % t for t in seed_times), " ".join("%.2f" % t for t in ours_times),
            " ".join("%.2f" % t for t in checked_times), " ".join("%.2f" % t for t in ping_times)))
        print("  an example line: %s" % rows[0]["line"])
        if not args.no_profile:
            print("where patrol's time goes (median of %d, each measured alone):" % args.repeat)
            for label, seconds in profile_parts(inventory, state, tmp, ping_play, args.repeat).items():
                print("  %-52s %.2f s" % (label, seconds))
        return 0 if ours_per_host == [1] else 1


if __name__ == "__main__":
    sys.exit(main())
