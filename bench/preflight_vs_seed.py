#!/usr/bin/env python
"""Benchmark: preflight.yml over 16 lab hosts against the seed's gpu_health.sh over plain parallel ssh, same run.

Prints the wall-time ratio (preflight / seed) and the SSH executions per host of each (target for preflight: <= 3).
Both sides sample nothing over time (the seed's `dmon -s pucvmet` selection has no real capture, so the emulator
refuses it and the seed skips its sampling; preflight runs with preflight_sample_seconds=0), so the comparison is
about the probes themselves. Needs root (the lab fleet).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from lab_common import (REPO, VENV_BIN, counting_ssh, executions_per_host, fleet_addresses, fleet_hosts,  # noqa: E402
                        lab_fleet, round_dirs, seed_script, timed)


def run_seed(inventory, wrapper, script):
    common, hosts = fleet_hosts(inventory)

    def one(host):
        argv = [str(wrapper), "-i", common["ansible_ssh_private_key_file"], *common["ansible_ssh_common_args"].split(),
                "-o", "BatchMode=yes", "%s@%s" % (host["ansible_user"], host["ansible_host"]), "bash", "-s"]
        return subprocess.run(argv, input=script, capture_output=True, text=True, check=False).returncode

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(hosts)) as pool:
        return list(pool.map(one, hosts.values()))


def run_preflight(inventory, wrapper, report):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_SSH_EXECUTABLE=str(wrapper),
               PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))
    argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), str(REPO / "playbooks" / "preflight.yml"),
            "-e", "preflight_sample_seconds=0", "-e", "preflight_report_path=%s" % report]
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=False).returncode


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    script = seed_script("gpu_health.sh")
    with lab_fleet(args.hosts) as (inventory, _state, _env), tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        addresses = fleet_addresses(inventory)
        seed_times, ours_times = [], []
        for round_no in range(args.repeat):  # interleaved, so both see the same machine state
            seed_dir, ours_dir = round_dirs(tmp, round_no)
            wrapper, log = counting_ssh(seed_dir)
            seconds, codes = timed(lambda: run_seed(inventory, wrapper, script))
            seed_times.append(seconds)
            seed_counts = executions_per_host(log, addresses)
            wrapper, log = counting_ssh(ours_dir)
            seconds, rc = timed(lambda: run_preflight(inventory, wrapper, tmp / "preflight.json"))
            ours_times.append(seconds)
            ours_counts = executions_per_host(log, addresses)
        seed_s, ours_s = statistics.median(seed_times), statistics.median(ours_times)
        per_host = sorted(set(ours_counts.values()))
        print("preflight_vs_seed: %d lab hosts, median of %d interleaved runs" % (len(addresses), args.repeat))
        print("  seed gpu_health.sh over parallel ssh   %.2f s  (exit codes %s)" % (seed_s, sorted(set(codes))))
        print("  preflight.yml                          %.2f s  (exit %d)" % (ours_s, rc))
        print("  ratio preflight/seed                   %.2f" % (ours_s / seed_s))
        print("  ssh executions per host: seed %s, preflight %s (target <= 3)" % (
            sorted(set(seed_counts.values())), per_host))
        print("  preflight also checks every GPU, storage tiers and inodes, the environment, and writes a report;")
        print("  the seed checks GPU 0 only.")
        return 0 if per_host and max(per_host) <= 3 else 1


if __name__ == "__main__":
    sys.exit(main())
