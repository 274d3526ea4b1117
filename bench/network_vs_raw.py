#!/usr/bin/env python
"""Benchmark: patrol, preflight, launch and teardown over a lab fleet behind a network (round trip, jitter), each
against its raw floor over the same network, and Ansible's ping floor, in the same run.

The fleet's latency relay (tests/lab/fleet up --rtt-ms, tests/lab/fleetlib/relay.py) puts the round trip between the
controller and every host; the raw floors go through the same relay:
  patrol     the seed's health_patrol probe over plain parallel ssh (one `ssh HOST bash -s` per host)
  preflight  the seed's gpu_health.sh over plain parallel ssh; preflight.yml runs with preflight_sample_seconds=0
  launch     raw rsync of the same small project plus one ssh that starts it in tmux, per host, in parallel;
             launch.yml fresh (a new launch_name each round, so the code is new on the box), then the same launch
             again with nothing changed (the relaunch), against the patrol tick of the same round
  teardown   (once, at the end: it stops the meters) raw: an rsync pull of every host's job directories plus one
             ssh that calls the meter's stop, per host; teardown.yml with every host approved by name
  ping       Ansible's floor: a play of ansible.builtin.ping on every host
Every run connects cold (raw: ControlPath=none; Ansible: its ControlPersist masters are closed before each run).
The raw side runs every host at once, and Ansible runs with forks set to the fleet's size (ANSIBLE_FORKS), as the
README advises (the checkout's ansible.cfg has 32: at 128 hosts that would compare four waves with one).
Runs are interleaved round by round.

For each: the median wall time, the controller's CPU per host (user plus system time of the finished child processes:
ansible-playbook and its forks and ssh, or the raw side's ssh and rsync) and the boxes' CPU per host (a cpuacct
cgroup holds every process of the fleet, sshd and what it starts; their idle rate is subtracted), kept apart: in this
lab both share this machine's cores, on a real fleet the boxes' work runs on the boxes. The relay's own CPU (the
"network") is in neither; it is printed apart. Options: --no-direct adds patrol, preflight and a fresh launch with the
direct run switched off (plugin_utils/direct: the actions of DIRECT_ACTIONS are replaced, in a shadow copy of the
collection, by ones that always run the module through AnsiballZ); --forks 32,128 adds patrol and the ping floor at each of those forks.
--timeline runs ssh through a wrapper on both sides (one bash per execution, a little CPU on either side) and
prints under each run where its wall time went: when the first SSH execution started (Ansible's start-up), when the
last one started (the spread: Ansible starts a worker per host in turn), the median time one execution took, when
the last one ended, and when the run ended (what came after). --json PATH writes every figure. Needs root (the lab
fleet). LAB_NET=127.0.N moves the fleet off the default addresses.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import statistics
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from lab_common import (REPO, VENV_BIN, arguments, box_cpu, close_masters, cpu_timed_with_boxes,  # noqa: E402
                        fleet_hosts, idle_rate, lab_fleet, seed_script, ssh_timeline, timing_ssh,
                        without_control_path)
from patrol_vs_ssh import PING, QUEUE_LENGTH, seed_probe  # noqa: E402

TRAIN_SH = ("#!/usr/bin/env bash\n# a small project's entry point: a few epochs, a checkpoint\n"
            "for e in 1 2; do echo \"epoch $e/2 loss 0.5\"; sleep 0.2; done\n"
            "mkdir -p \"${TRAINER_OUTPUT_DIR:-out}\" && cp weights.safetensors \"${TRAINER_OUTPUT_DIR:-out}/best.safetensors\"\n")
# a real safetensors file (u64 LE header length, JSON header, data), so that teardown's verification can load it
_HEADER = json.dumps({"__metadata__": {"format": "pt"},
                      "w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
WEIGHTS = struct.pack("<Q", len(_HEADER)) + _HEADER + struct.pack("<4f", 0.5, 1.5, 2.5, 3.5)
# every host an AutoDL box (its meter stops with the lab's shutdown stand-in, no provider API needed), the region's
# durable FS large enough for every host's outputs
FLEET_OPTIONS = ("--platform", "all=autodl", "--durable-size", "1g", "--durable-inodes", "100000")
# the actions that run their module without AnsiballZ: those that subclass plugin_utils/direct.DirectAction
DIRECT_ACTIONS = tuple(sorted(path.stem for path in (REPO / "plugins" / "action").glob("*.py")
                              if "(DirectAction):" in path.read_text(encoding="utf-8")))
NO_DIRECT = '''"""Benchmark only: %s always runs through AnsiballZ (the direct run switched off)."""
from __future__ import annotations

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.direct import DirectAction


class ActionModule(DirectAction):
    MODULE = "%s"

    def _run(self, tmp=None, task_vars=None):
        return self.through_ansiballz(tmp, task_vars or {}, "switched off by bench/network_vs_raw.py")
'''


def relay_cpu(state):
    """The relay's CPU seconds so far (user + system, from /proc), or None without a relay."""
    record = json.loads((state / "fleet.json").read_text())
    pid = ((record.get("relay") or {}).get("proc") or {}).get("pid")
    if not pid:
        return None
    fields = pathlib.Path("/proc/%d/stat" % pid).read_text(encoding="utf-8").rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def shadow_collection(tmp):
    """A collections path whose remote_gpu.trainer is this checkout with the actions of DIRECT_ACTIONS replaced by
    ones that always run through AnsiballZ: links to every other file."""
    root = tmp / "no-direct" / "ansible_collections" / "remote_gpu" / "trainer"
    root.mkdir(parents=True)
    for entry in REPO.iterdir():
        if entry.name not in ("plugins", ".collections", ".git", ".venv", ".venv-2.20", ".venv-2.21"):
            (root / entry.name).symlink_to(entry)
    (root / "plugins").mkdir()
    for entry in (REPO / "plugins").iterdir():
        if entry.name != "action":
            (root / "plugins" / entry.name).symlink_to(entry)
    (root / "plugins" / "action").mkdir()
    for entry in (REPO / "plugins" / "action").iterdir():
        module = entry.name[:-3]
        if module in DIRECT_ACTIONS:
            (root / "plugins" / "action" / entry.name).write_text(NO_DIRECT % (module, module))
        else:
            (root / "plugins" / "action" / entry.name).symlink_to(entry)
    return tmp / "no-direct"


class Lab:
    """One fleet behind the relay and the ways to run each side over it."""

    def __init__(self, inventory, state, tmp, hosts, timeline=False):
        self.inventory, self.state, self.tmp, self.size = inventory, state, tmp, hosts
        # with --timeline both sides run ssh through timing_ssh's wrapper, which logs to timeline_log
        wrapper, self.timeline_log = timing_ssh(tmp) if timeline else ("ssh", None)
        self.ssh = str(wrapper)
        self.common, self.hosts = fleet_hosts(inventory)
        self.options = without_control_path(self.common["ansible_ssh_common_args"])
        self.ping = tmp / "ping.yml"
        self.ping.write_text(PING)
        self.src = tmp / "project"
        self.src.mkdir()
        (self.src / "train.sh").write_text(TRAIN_SH)
        (self.src / "conf").mkdir()
        for i in range(5):
            (self.src / "conf" / ("exp%d.yaml" % i)).write_text("lr: 0.%d\nepochs: 2\n" % (i + 1))
        (self.src / "README.md").write_text("a small project\n" * 20)
        (self.src / "weights.safetensors").write_bytes(WEIGHTS)
        git = ["git", "-C", str(self.src), "-c", "user.name=b", "-c", "user.email=b@example.org"]
        for argv in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "x"]):
            subprocess.run(git + argv, check=True, capture_output=True)
        self.no_direct = None
        self.rcs = {}

    # --- raw -----------------------------------------------------------------------------------------------
    def ssh_argv(self, host, *command):
        return ([self.ssh, "-p", str(host["ansible_port"]), "-i", self.common["ansible_ssh_private_key_file"],
                 *self.options, "-o", "ControlPath=none", "-o", "BatchMode=yes", "-o", "ConnectTimeout=30",
                 "%s@%s" % (host["ansible_user"], host["ansible_host"]), *command])

    def rsh(self, host):
        return " ".join(self.ssh_argv(host)[:-1])

    def parallel(self, one):
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(self.hosts)) as pool:
            return sorted(set(pool.map(one, self.hosts.values())))

    def raw_patrol(self):
        probe = seed_probe()

        def one(host):
            home = "/root" if host["ansible_user"] == "root" else "/home/%s" % host["ansible_user"]
            job = "%s/.trainer/jobs/bench0" % home   # launch's job of round 0
            argv = self.ssh_argv(host, "bash", "-s", "train.sh", job + "/items", job + "/job.log",
                                 host["lab_data_dir"])
            return subprocess.run(argv, input=probe, capture_output=True, text=True, check=False).returncode
        return self.parallel(one)

    def raw_preflight(self):
        script = seed_script("gpu_health.sh")
        return self.parallel(lambda host: subprocess.run(self.ssh_argv(host, "bash", "-s"), input=script,
                                                         capture_output=True, text=True, check=False).returncode)

    def raw_launch(self, name):
        def one(host):
            dest = "%s/code/%s" % (host["lab_data_dir"], name)
            sync = subprocess.run(["rsync", "-az", "--exclude", ".git", "--mkpath", "-e", self.rsh(host),
                                   "%s/" % self.src, "%s@%s:%s/" % (host["ansible_user"], host["ansible_host"], dest)],
                                  capture_output=True, text=True, check=False)
            if sync.returncode:
                return sync.returncode
            start = "tmux new-session -d -s %s 'cd %s && bash train.sh conf/exp0.yaml > run.log 2>&1'" % (name, dest)
            return subprocess.run(self.ssh_argv(host, start), capture_output=True, check=False).returncode
        return self.parallel(one)

    def raw_teardown(self, pulls):
        def one(host):
            home = "/root" if host["ansible_user"] == "root" else "/home/%s" % host["ansible_user"]
            local = pulls / host["ansible_host"]
            local.mkdir(parents=True, exist_ok=True)
            pull = subprocess.run(["rsync", "-a", "-e", self.rsh(host), "%s@%s:%s/.trainer/jobs/" % (
                host["ansible_user"], host["ansible_host"], home), "%s/" % local], capture_output=True, check=False)
            if pull.returncode:
                return pull.returncode
            return subprocess.run(self.ssh_argv(host, "shutdown", "-h", "now"), capture_output=True,
                                  check=False).returncode
        return self.parallel(one)

    # --- Ansible -------------------------------------------------------------------------------------------
    def playbook(self, playbook, *extra, env=None):
        environ = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_DEPRECATION_WARNINGS="0",
                       ANSIBLE_FORKS=str(self.size), PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))
        if self.timeline_log:
            environ["ANSIBLE_SSH_EXECUTABLE"] = self.ssh
        environ.update(env or {})
        proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(self.inventory), str(playbook), *extra],
                              env=environ, capture_output=True, text=True, check=False)
        if proc.returncode:
            (self.tmp / ("failed-%s.log" % pathlib.Path(playbook).stem)).write_text(proc.stdout + proc.stderr)
        return proc.returncode

    def direct_off(self):
        if self.no_direct is None:
            self.no_direct = shadow_collection(self.tmp)
        return {"ANSIBLE_COLLECTIONS_PATH": str(self.no_direct)}

    def patrol(self, env=None):
        return self.playbook(REPO / "playbooks" / "patrol.yml", "-e", "patrol_queue_length=%d" % QUEUE_LENGTH,
                             "-e", "patrol_report_path=%s" % (self.tmp / "patrol.json"), env=env)

    def preflight(self, env=None):
        return self.playbook(REPO / "playbooks" / "preflight.yml", "-e", "preflight_sample_seconds=0",
                             "-e", "preflight_report_path=%s" % (self.tmp / "preflight.json"), env=env)

    def launch(self, name, env=None):
        variables = {"launch_src": str(self.src), "launch_command": "bash train.sh", "launch_name": name,
                     "launch_queue": ["conf/exp%d.yaml" % (i % 5) for i in range(len(self.hosts))],
                     "launch_min_seconds": 0}
        return self.playbook(REPO / "playbooks" / "launch.yml", "-e", json.dumps(variables), env=env)

    def teardown(self, pulls):
        return self.playbook(REPO / "playbooks" / "teardown.yml", "-e", json.dumps({
            "teardown_approve": ",".join(sorted(self.hosts)), "teardown_pull_root": str(pulls)}))


def measure(lab, meter, figures, label, func, cold=True):
    if cold:
        close_masters(lab.state)
    relay_before = relay_cpu(lab.state)
    if lab.timeline_log:
        lab.timeline_log.write_text("")
    start = time.time()   # the clock of the ssh wrapper's log
    wall, cpu, box, result = cpu_timed_with_boxes(func, meter)
    end = time.time()
    relay_after = relay_cpu(lab.state)
    entry = figures.setdefault(label, {"wall": [], "cpu": [], "box": [], "relay": [], "rc": [], "timeline": []})
    entry["wall"].append(wall)
    entry["cpu"].append(cpu)
    entry["box"].append(box)
    entry["relay"].append(None if relay_before is None else relay_after - relay_before)
    entry["rc"].append(result)
    print("    %-34s %7.2f s  controller %6.2f CPU s  boxes %s  rc %s" % (
        label, wall, cpu, "-" if box is None else "%.2f CPU s" % box, result), flush=True)
    if lab.timeline_log:
        line = ssh_timeline(lab.timeline_log.read_text(), start, end)
        entry["timeline"].append(line)
        if line:
            print("      %(executions)d ssh: first at %(first_start).2f s, last started at %(last_start).2f s, median "
                  "one %(median_ssh).2f s, last ended at %(last_end).2f s, run ended at %(end).2f s" % line, flush=True)


def summary(figures, size, idle):
    out = {}
    for label, entry in figures.items():
        boxes = [max(0.0, box - idle * wall) for box, wall in zip(entry["box"], entry["wall"]) if box is not None]
        relay = [r for r in entry["relay"] if r is not None]
        out[label] = {"wall": statistics.median(entry["wall"]), "cpu_per_host": statistics.median(entry["cpu"]) / size,
                      "box_per_host": statistics.median(boxes) / size if boxes else None,
                      "relay_cpu": statistics.median(relay) if relay else None,
                      "runs": len(entry["wall"]), "walls": entry["wall"], "rc": entry["rc"],
                      "timelines": entry["timeline"]}
    return out


RATIOS = (("patrol", "raw patrol (seed probe, parallel ssh)", 1.5),
          ("patrol", "ping floor", None),
          ("preflight", "ping floor", 1.3),
          ("preflight", "raw preflight (gpu_health.sh, parallel ssh)", None),
          ("launch (fresh)", "raw launch (rsync + ssh)", 2.5),
          ("relaunch (nothing changed)", "patrol", 1.2),
          ("teardown", "raw teardown (rsync pull + ssh)", None),
          ("patrol, direct run off", "patrol", None),
          ("preflight, direct run off", "preflight", None))


def main():
    args = arguments(__doc__, hosts=32, rtt_ms=200.0, jitter_ms=0.0, repeat=2,
                     ops=("patrol,preflight,launch,teardown", "which of patrol, preflight, launch, teardown"),
                     no_direct=(False, "add patrol, preflight and a fresh launch with the direct run off"),
                     forks=("", "comma-separated forks to run patrol and the ping floor at, e.g. 32,128"),
                     timeline=(False, "time every ssh execution on both sides and print where each run's time went"),
                     json=("", "write the figures to this file"))
    ops = set(args.ops.split(","))
    up = ["--rtt-ms", "%g" % args.rtt_ms, "--jitter-ms", "%g" % args.jitter_ms, *FLEET_OPTIONS]
    if not args.rtt_ms and not args.jitter_ms:
        up.append("--relay")      # the same path at 0 ms: the relay's own cost stays in every figure
    started = time.monotonic()
    with lab_fleet(args.hosts, *up) as (inventory, state, _env), tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        lab = Lab(inventory, state, tmp, args.hosts, args.timeline)
        figures = {}
        print("network_vs_raw: %d lab hosts, round trip %g ms, jitter %g ms, %d round(s); fleet up in %.1f s" % (
            args.hosts, args.rtt_ms, args.jitter_ms, args.repeat, time.monotonic() - started), flush=True)
        with box_cpu(state) as meter:
            for round_no in range(args.repeat):
                print("  round %d" % round_no, flush=True)
                if "launch" in ops:   # first, so that patrol has a job on every host to read
                    name = "bench%d" % round_no
                    measure(lab, meter, figures, "raw launch (rsync + ssh)", lambda name=name: lab.raw_launch("raw" + name))
                    measure(lab, meter, figures, "launch (fresh)", lambda name=name: lab.launch(name))
                    measure(lab, meter, figures, "relaunch (nothing changed)", lambda name=name: lab.launch(name))
                measure(lab, meter, figures, "ping floor", lambda: lab.playbook(lab.ping))
                if "patrol" in ops or "launch" in ops:
                    measure(lab, meter, figures, "raw patrol (seed probe, parallel ssh)", lab.raw_patrol)
                    measure(lab, meter, figures, "patrol", lab.patrol)
                    if args.no_direct:
                        measure(lab, meter, figures, "patrol, direct run off", lambda: lab.patrol(lab.direct_off()))
                if "preflight" in ops:
                    measure(lab, meter, figures, "raw preflight (gpu_health.sh, parallel ssh)", lab.raw_preflight)
                    measure(lab, meter, figures, "preflight", lab.preflight)
                    if args.no_direct:
                        measure(lab, meter, figures, "preflight, direct run off",
                                lambda: lab.preflight(lab.direct_off()))
                if "launch" in ops and args.no_direct:   # last: its job is a second one on each host
                    measure(lab, meter, figures, "launch (fresh), direct run off",
                            lambda name="bench%dnd" % round_no: lab.launch(name, lab.direct_off()))
            for forks in filter(None, args.forks.split(",")):
                env = {"ANSIBLE_FORKS": forks}
                measure(lab, meter, figures, "ping floor, forks %s" % forks, lambda env=env: lab.playbook(lab.ping, env=env))
                measure(lab, meter, figures, "patrol, forks %s" % forks, lambda env=env: lab.patrol(env=env))
            if "teardown" in ops and "launch" in ops:
                time.sleep(3)   # the launched items (a second each) are done
                measure(lab, meter, figures, "raw teardown (rsync pull + ssh)", lambda: lab.raw_teardown(tmp / "raw"))
                measure(lab, meter, figures, "teardown", lambda: lab.teardown(tmp / "pulls"))
            close_masters(state)
            idle = idle_rate(meter) if meter else 0.0
        table = summary(figures, args.hosts, idle)
        print("network_vs_raw: %d hosts, round trip %g ms, jitter %g ms; medians of %d round(s), cold connections" % (
            args.hosts, args.rtt_ms, args.jitter_ms, args.repeat))
        print("  %-44s %8s %16s %14s %10s" % ("", "wall s", "controller CPU/host", "box CPU/host", "relay CPU"))
        for label, row in table.items():
            print("  %-44s %8.2f %16.3f %14s %10s  rc %s" % (
                label, row["wall"], row["cpu_per_host"], "-" if row["box_per_host"] is None else
                "%.3f" % row["box_per_host"], "-" if row["relay_cpu"] is None else "%.2f" % row["relay_cpu"],
                sorted({str(rc) for rc in row["rc"]})))
        ratios = []
        for ours, base, target in RATIOS:
            if ours in table and base in table:
                wall = table[ours]["wall"] / table[base]["wall"]
                cpu = table[ours]["cpu_per_host"] / table[base]["cpu_per_host"]
                ratios.append({"ours": ours, "base": base, "wall": wall, "cpu": cpu, "target": target})
                print("  %-28s / %-44s wall %.2f  controller CPU %.2f%s" % (
                    ours, base, wall, cpu, "" if target is None else "  (target <= %.1f)" % target))
        failed = sorted(p.name for p in tmp.glob("failed-*.log"))
        if failed:
            print("  failed runs' logs (kept only during the run): %s" % ", ".join(failed))
            for name in failed:
                print("---- %s\n%s" % (name, (tmp / name).read_text()[-3000:]))
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps({
                "hosts": args.hosts, "rtt_ms": args.rtt_ms, "jitter_ms": args.jitter_ms, "repeat": args.repeat,
                "cores": os.cpu_count(), "idle_box_rate": idle, "figures": table, "ratios": ratios}, indent=1),
                encoding="utf-8")
        return 0


if __name__ == "__main__":
    sys.exit(main())
