#!/usr/bin/env python
"""Benchmark: the controller's CPU seconds per host for a patrol tick, for preflight and for Ansible's ping floor,
at 8, 16 and 32 lab hosts, and the bytes each probe module sends per host.

The CPU is the user plus system time of the whole `ansible-playbook` process tree (its forks and their ssh
processes), taken from the kernel's rusage of the finished children, not from wall time; the lab's sshd and the
on-box probes are not in it. Their CPU is measured apart, as box CPU (lab_common.box_cpu: a cpuacct cgroup holds
the fleet): in this lab it shares the controller's cores, which a real fleet's does not. Every run connects cold
(the ControlPersist masters are closed before it), as a tick from cron does. Each host runs a detached job (as in
bench/patrol_vs_ssh.py). Runs are interleaved.

Prints, per fleet size: the median wall and CPU of each play and the CPU per host; the ratio of patrol's CPU per
host to the ping floor's (issue 15's target: at most 1.2); a projection from a straight-line fit of CPU against
hosts (fixed start-up cost plus a cost per host) of how many hosts one controller core can patrol within a
five-minute cadence; the AnsiballZ payload of each probe module, with the collection's own files in it, and what
the probes send instead when they run without AnsiballZ (plugin_utils/direct), as patrol and preflight run them.
Needs root (the lab fleet). LAB_NET=127.0.N moves the fleet off the default addresses.
"""

from __future__ import annotations

import pathlib
import statistics
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from lab_common import (REPO, ansiballz_payload, arguments, box_cpu, box_work, close_masters,  # noqa: E402
                        cpu_timed_with_boxes, direct_payload, idle_rate, lab_fleet, NO_BOX_METER)
from patrol_vs_ssh import PING, QUEUE_LENGTH, run_patrol, start_jobs  # noqa: E402

CADENCE = 300.0
PROBES = ("remote_gpu.trainer.job_status", "remote_gpu.trainer.preflight_probe", "ansible.builtin.ping")


def plays(inventory, tmp):
    """{label: a function that runs that play once over the fleet and returns its exit code}."""
    ping = tmp / "ping.yml"
    ping.write_text(PING)
    report = tmp / "report.json"
    return {
        "ping floor": lambda: run_patrol(inventory, None, report, ping)[0],
        "patrol tick": lambda: run_patrol(inventory, None, report)[0],
        "preflight": lambda: run_patrol(inventory, None, report, REPO / "playbooks" / "preflight.yml",
                                        "-e", "preflight_sample_seconds=0", "-e", "preflight_report_path=%s" % report)[0],
    }


def measure(size, repeat):
    """{label: (median wall, median controller CPU, median box CPU or None, exit codes)} for one fleet size."""
    with lab_fleet(size) as (inventory, state, _env), tempfile.TemporaryDirectory() as tmp:
        with box_cpu(state) as meter:
            start_jobs(inventory)
            runs = plays(inventory, pathlib.Path(tmp))
            walls, cpus, boxes, codes = ({label: [] for label in runs} for _table in range(4))
            for _round in range(repeat):
                for label, run in runs.items():
                    close_masters(state)
                    wall, cpu, box, code = cpu_timed_with_boxes(run, meter)
                    walls[label].append(wall)
                    cpus[label].append(cpu)
                    boxes[label].append(box)
                    codes[label].append(code)
            close_masters(state)
            idle = idle_rate(meter) if meter else 0.0
    return {label: (statistics.median(walls[label]), statistics.median(cpus[label]),
                    box_work(boxes[label], walls[label], idle) if meter else None, sorted(set(codes[label])))
            for label in runs}


def fit(points):
    """(intercept, slope) of the least-squares line through [(hosts, seconds)]."""
    xs, ys = [x for x, _y in points], [y for _x, y in points]
    mean_x, mean_y = statistics.mean(xs), statistics.mean(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x in xs)
    return mean_y - slope * mean_x, slope


def main():
    args = arguments(__doc__, sizes=("8,16,32", "comma-separated fleet sizes (default 8,16,32)"), repeat=3)
    sizes = [int(size) for size in args.sizes.split(",")]
    results = {size: measure(size, args.repeat) for size in sizes}
    print("controller_cost: CPU of the ansible-playbook process tree (rusage), median of %d interleaved cold runs;"
          " patrol with -e patrol_queue_length=%d, preflight with sample_seconds=0" % (args.repeat, QUEUE_LENGTH))
    line = "  %5s  %-12s %8s %8s %12s %14s %s"
    print(line % ("hosts", "play", "wall s", "CPU s", "CPU s/host", "box CPU s/host", "exit"))
    for size, rows in results.items():
        for label, (wall, cpu, box, codes) in rows.items():
            print(line % (size, label, "%.2f" % wall, "%.2f" % cpu, "%.3f" % (cpu / size),
                          "-" if box is None else "%.3f" % (box / size), codes))
    if any(box is None for rows in results.values() for _wall, _cpu, box, _codes in rows.values()):
        print("  box CPU: " + NO_BOX_METER)
    else:
        print("  box CPU: the lab boxes' own CPU above their idle (sshd, the module run, the GPU emulator); here it"
              " runs on the controller's cores, on a real fleet on each box's")
    for size, rows in results.items():
        ping = rows["ping floor"][1]
        print("  %d hosts: CPU per host, patrol/ping %.2f (target <= 1.2), preflight/ping %.2f" % (
            size, rows["patrol tick"][1] / ping, rows["preflight"][1] / ping))
    if len(sizes) > 1:
        for label in ("ping floor", "patrol tick", "preflight"):
            fixed, per_host = fit([(size, rows[label][1]) for size, rows in results.items()])
            hosts = int((CADENCE - fixed) / per_host) if per_host > 0 else 0
            print("  %-12s CPU = %.2f s + %.3f s per host -> one core runs it over %d hosts within %d s" % (
                label, fixed, per_host, hosts, CADENCE))
    print("AnsiballZ payload per host and run (bytes; the collection's own files in it, uncompressed):")
    for module in PROBES:
        payload = ansiballz_payload(module)
        print("  %-38s %7d  ours %6d in %d files%s" % (
            module, payload["bytes"], sum(payload["ours"].values()), len(payload["ours"]),
            (": " + ", ".join("%s %d" % item for item in sorted(payload["ours"].items(), key=lambda i: -i[1])[:5]))
            if payload["ours"] else ""))
    print("What the probes send instead, without AnsiballZ (plugin_utils/direct: the runner, the sources above"
          " compressed, the arguments):")
    for module, probe_args in (("remote_gpu.trainer.job_status", {"name": "train", "paths": ["/tmp"], "gpu": True}),
                               ("remote_gpu.trainer.preflight_probe", {"storage": {"paths": ["/tmp"]}})):
        sent = direct_payload(module, probe_args)
        print("  %-38s %s" % (module, "%7d" % sent if sent else "through AnsiballZ (the direct run did not apply)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
