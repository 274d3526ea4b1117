#!/usr/bin/env python
"""Benchmark: preflight.yml over 16 lab hosts against the seed's gpu_health.sh over plain parallel ssh and against
Ansible's own floor (a ping play on every host), same run.

Prints the wall-time ratios preflight / seed and preflight / ping floor (issue 15's target: at most 1.3x the floor
with preflight_sample_seconds=0), and the SSH executions per host of each (target for preflight: exactly 1). Both
preflight and the seed sample nothing over time (the seed's `dmon -s pucvmet` selection has no real capture, so the
emulator refuses it and the seed skips its sampling; preflight runs with preflight_sample_seconds=0), so the
comparison is about the probes themselves. Also the boxes' own CPU per host (lab_common.box_cpu): in this lab the
boxes run on the controller's cores, so their work is in every wall time here, as it is not on a real fleet. Runs
are interleaved, and every run connects cold (the seed with ControlPath=none; Ansible's ControlPersist masters are
closed before each playbook run). Then where preflight's time goes: its first play (the profile validation) alone,
and the rest (the probe play: the one SSH execution per host, the fleet table, the report) alone. Needs root (the
lab fleet). LAB_NET=127.0.N moves the fleet off the default addresses.
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

import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from lab_common import (REPO, VENV_BIN, arguments, box_cpu, box_work, close_masters, counting_ssh,  # noqa: E402
                        cpu_timed_with_boxes, executions_per_host, fleet_addresses, fleet_hosts, idle_rate, lab_fleet,
                        NO_BOX_METER, seed_script, timed, without_control_path)

PING = "- name: Ping\n  hosts: all\n  gather_facts: false\n  tasks:\n    - name: Ping\n      ansible.builtin.ping:\n"


def run_seed(inventory, wrapper, script):
    common, hosts = fleet_hosts(inventory)
    options = without_control_path(common["ansible_ssh_common_args"])

    def one(host):
        argv = [str(wrapper), "-i", common["ansible_ssh_private_key_file"], *options, "-o", "ControlPath=none",
                "-o", "BatchMode=yes", "%s@%s" % (host["ansible_user"], host["ansible_host"]), "bash", "-s"]
        return subprocess.run(argv, input=script, capture_output=True, text=True, check=False).returncode

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(hosts)) as pool:
        return list(pool.map(one, hosts.values()))


def run_playbook(inventory, wrapper, playbook, *extra):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_SSH_EXECUTABLE=str(wrapper),
               ANSIBLE_DEPRECATION_WARNINGS="0", PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))
    argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), str(playbook), *extra]
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=False).returncode


def split_preflight(directory):
    """Two playbooks in ``directory``: preflight.yml's first play alone, and its other plays; with the playbook's
    group_vars (the profiles) beside them -> {label: path}."""
    plays = yaml.safe_load((REPO / "playbooks" / "preflight.yml").read_text())
    (directory / "group_vars").symlink_to(REPO / "playbooks" / "group_vars")
    parts = {}
    for label, name, chosen in (("its first play alone: %s" % plays[0]["name"], "first.yml", plays[:1]),
                                ("the rest alone: %s" % "; ".join(play["name"] for play in plays[1:]), "rest.yml",
                                 plays[1:])):
        path = directory / name
        path.write_text(yaml.safe_dump(chosen, sort_keys=False))
        parts[label] = path
    return parts


def per_host(counts, addresses):
    """The distinct numbers of SSH executions per host over all runs (every address counts, 0 included)."""
    return sorted({n for run in counts for n in [run.get(address, 0) for address in addresses]})


def main():
    args = arguments(__doc__, hosts=16, repeat=3, no_breakdown=(False, "skip where preflight's time goes"))
    script = seed_script("gpu_health.sh")
    with lab_fleet(args.hosts) as (inventory, state, _env), tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        ping = tmp / "ping.yml"
        ping.write_text(PING)
        report = tmp / "preflight.json"
        addresses = fleet_addresses(inventory)
        sides = {
            "seed": lambda wrapper: run_seed(inventory, wrapper, script),
            "preflight": lambda wrapper: run_playbook(inventory, wrapper, REPO / "playbooks" / "preflight.yml",
                                                      "-e", "preflight_sample_seconds=0",
                                                      "-e", "preflight_report_path=%s" % report),
            "ping": lambda wrapper: run_playbook(inventory, wrapper, ping),
        }
        times = dict((side, []) for side in sides)
        counts = dict((side, []) for side in sides)
        boxes = dict((side, []) for side in sides)
        results = {}
        with box_cpu(state) as meter:
            for round_no in range(args.repeat):  # interleaved, so all sides see the same machine state
                for side, run in sides.items():
                    directory = tmp / ("%s%d" % (side, round_no))
                    directory.mkdir()
                    wrapper, log = counting_ssh(directory)
                    close_masters(state)
                    seconds, _cpu, box, results[side] = cpu_timed_with_boxes(
                        lambda run=run, wrapper=wrapper: run(wrapper), meter)
                    times[side].append(seconds)
                    boxes[side].append(box)
                    counts[side].append(executions_per_host(log, addresses))
            close_masters(state)
            idle = idle_rate(meter) if meter else 0.0
        median = dict((side, statistics.median(values)) for side, values in times.items())
        executions = dict((side, per_host(counts[side], addresses)) for side in sides)
        verdicts = sorted({row["verdict"] for row in json.loads(report.read_text())["hosts"]})
        print("preflight_vs_seed: %d lab hosts, median of %d interleaved runs, cold connections"
              % (len(addresses), args.repeat))
        print("  seed gpu_health.sh over parallel ssh   %.2f s  (exit codes %s)" % (
            median["seed"], sorted(set(results["seed"]))))
        print("  Ansible's floor: ping on every host    %.2f s  (exit %d)" % (median["ping"], results["ping"]))
        print("  preflight.yml, sample_seconds=0        %.2f s  (exit %d; verdicts %s)" % (
            median["preflight"], results["preflight"], verdicts))
        print("  ratio preflight/ping floor             %.2f  (target <= 1.3)" % (median["preflight"] / median["ping"]))
        print("  ratio preflight/seed                   %.2f  (the ping floor alone: %.2f)" % (
            median["preflight"] / median["seed"], median["ping"] / median["seed"]))
        print("  ssh executions per host: seed %s, ping %s, preflight %s (target exactly 1)" % (
            executions["seed"], executions["ping"], executions["preflight"]))
        print("  all runs: seed %s s, ping %s s, preflight %s s" % tuple(
            " ".join("%.2f" % t for t in times[side]) for side in ("seed", "ping", "preflight")))
        if None not in boxes["ping"]:
            box = dict((side, box_work(boxes[side], times[side], idle) / len(addresses)) for side in sides)
            extra = (box["preflight"] - box["ping"]) * len(addresses)
            print("  the boxes' own CPU per host: seed %.3f s, ping %.3f s, preflight %.3f s; preflight's boxes used"
                  " %.1f CPU s %s than ping's, on this machine's %d cores (on a real fleet, on the boxes')" % (
                      box["seed"], box["ping"], box["preflight"], abs(extra), "more" if extra > 0 else "less",
                      os.cpu_count() or 1))
        else:
            print("  the boxes' own CPU: " + NO_BOX_METER)
        print("  preflight also checks every GPU, storage tiers and inodes, the environment, and writes a report;")
        print("  the seed checks GPU 0 only.")
        if not args.no_breakdown:
            print("where preflight's time goes (median of %d, each measured alone, cold):" % args.repeat)
            for label, playbook in split_preflight(tmp).items():
                part = []
                for _round in range(args.repeat):
                    close_masters(state)
                    seconds, _rc = timed(lambda playbook=playbook: run_playbook(
                        inventory, "ssh", playbook, "-e", "preflight_sample_seconds=0",
                        "-e", "preflight_report_path=%s" % report))
                    part.append(seconds)
                print("  %-70s %.2f s  (%.2f x the ping floor)" % (
                    label, statistics.median(part), statistics.median(part) / median["ping"]))
            close_masters(state)
        return 0 if executions["preflight"] == [1] else 1


if __name__ == "__main__":
    sys.exit(main())
