#!/usr/bin/env python
"""Benchmark: one autopilot.yml tick over 32 lab hosts where nothing needs action, as a ratio to one patrol.yml
tick in the same run (target <= 1.1).

Every host runs a detached job (remote_gpu.trainer.detached_job, the job of bench/patrol_vs_ssh.py), so every
decision is `none`: the tick is the probe, the decisions on the controller (with each host's history read and one
record appended), and nothing else. Every opt-in is on (autopilot_heal, autopilot_autostop, autopilot_notify), so
the decision rules all run. Runs are interleaved, and both sides connect cold (Ansible's ControlPersist masters are
closed after each tick), as a tick from a timer every few minutes does. Prints the median wall times, the ratio,
and the SSH executions per host of each (target: exactly 1 for both). Needs root (the lab fleet). LAB_NET=127.0.N
moves the fleet off the default addresses.
"""

from __future__ import annotations

import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from lab_common import (REPO, VENV_BIN, arguments, close_masters, counting_ssh, executions_per_host,  # noqa: E402
                        fleet_addresses, lab_fleet, round_dirs, timed)
from patrol_vs_ssh import ansible_env, start_jobs  # noqa: E402

OPT_INS = "autopilot_heal=true autopilot_autostop=true autopilot_notify=true"


def run(inventory, wrapper, cwd, playbook, *extra):
    argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), str(REPO / "playbooks" / playbook), *extra]
    proc = subprocess.run(argv, env=ansible_env(wrapper), capture_output=True, text=True, check=False, cwd=str(cwd))
    return proc.returncode, proc.stdout + proc.stderr


def main():
    args = arguments(__doc__, hosts=32, repeat=5)
    with lab_fleet(args.hosts) as (inventory, state, _env), tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        addresses = fleet_addresses(inventory)
        start_jobs(inventory)
        times = {"patrol": [], "autopilot": []}
        counts = {"patrol": set(), "autopilot": set()}
        rcs = {"patrol": set(), "autopilot": set()}
        for round_no in range(args.repeat):  # interleaved, so both see the same machine state
            for side, directory in zip(("patrol", "autopilot"), round_dirs(tmp, round_no)):
                wrapper, log = counting_ssh(directory)
                if side == "patrol":
                    call = (inventory, wrapper, tmp, "patrol.yml", "-e", "patrol_fail_run=false")
                else:
                    call = (inventory, wrapper, tmp, "autopilot.yml", "-e", OPT_INS)
                seconds, (rc, output) = timed(lambda: run(*call))
                if rc != 0:
                    raise SystemExit("%s failed:\n%s" % (side, output[-4000:]))
                times[side].append(seconds)
                rcs[side].add(rc)
                per_host = executions_per_host(log, addresses)
                counts[side].update(per_host.get(address, 0) for address in addresses)
                close_masters(state)
        report = json.loads((tmp / "reports" / "autopilot.json").read_text())
        actions = sorted({row["action"] for row in report["hosts"]})
        patrol_s, ours_s = statistics.median(times["patrol"]), statistics.median(times["autopilot"])
        print("autopilot_tick: %d lab hosts, each with a running job (nothing needs action); median of %d "
              "interleaved runs, cold connections" % (len(addresses), args.repeat))
        print("  patrol.yml tick       %.2f s" % patrol_s)
        print("  autopilot.yml tick    %.2f s  (decisions: %s; events: %d)" % (ours_s, actions, len(report["events"])))
        print("  ratio autopilot/patrol %.2f  (target <= 1.1)" % (ours_s / patrol_s))
        print("  ssh executions per host per tick: patrol %s, autopilot %s (target exactly 1)" % (
            sorted(counts["patrol"]), sorted(counts["autopilot"])))
        print("  all runs: patrol %s s, autopilot %s s" % (
            " ".join("%.2f" % t for t in times["patrol"]), " ".join("%.2f" % t for t in times["autopilot"])))
        return 0 if counts["autopilot"] == {1} and actions == ["none"] else 1


if __name__ == "__main__":
    sys.exit(main())
