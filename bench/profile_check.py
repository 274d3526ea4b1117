#!/usr/bin/env python
"""Benchmark: the profile validation play (the first play of every playbook) over 8, 16 and 32 lab hosts, against
Ansible's ping floor over the same hosts, in the same run.

For each fleet size, interleaved rounds of three ansible-playbook runs over the same hosts:
  - start-up: an empty play on every host (loads the inventory and the profiles; no task, no connection);
  - Ansible's floor: ansible.builtin.ping on every host, cold connections (ControlPersist masters closed first);
  - the profile play: the first play of playbooks/preflight.yml, as it is in this checkout.
It prints the medians of wall time and of the controller's CPU seconds (the ansible-playbook process tree's rusage,
which the machine's noise moves less than wall time), the profile play's cost above start-up, and its ratios to
the ping floor. Run it from an older checkout (copy this file there) to measure the validation it had.

The profile play needs no connection, so sizes above the fleet (--sizes 64,128) reuse the fleet's hosts under
more names (the ping floor then connects to each address several times). Needs root (the lab fleet).
LAB_NET=127.0.N moves the fleet off the default addresses.
"""

from __future__ import annotations

import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from lab_common import REPO, VENV_BIN, arguments, lab_fleet  # noqa: E402
from patrol_vs_ssh import ansible_env, close_masters  # noqa: E402

FLEET_MAX = 32


def sized_inventory(inventory, size):
    """An inventory next to the fleet's (so its group_vars apply) with ``size`` hosts: the fleet's first ones, then
    the same hosts again under other names."""
    data = yaml.safe_load(inventory.read_text())
    hosts = data["all"]["children"]["lab"]["hosts"]
    names = sorted(hosts)
    chosen = {}
    for i in range(size):
        name = names[i % len(names)]
        chosen[name if i < len(names) else "%s-x%d" % (name, i // len(names))] = name
    data["all"]["children"]["lab"]["hosts"] = dict((new, hosts[old]) for new, old in chosen.items())
    for group, body in data["all"]["children"].items():
        if group != "lab" and isinstance(body, dict) and body.get("hosts"):
            body["hosts"] = dict((new, None) for new, old in chosen.items() if old in body["hosts"]) or None
    path = inventory.parent / ("inventory-%d.yml" % size)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def playbooks(tmp):
    """The three playbooks: start-up, the ping floor, the profile play (preflight's first play, hosts: all)."""
    first = yaml.safe_load((REPO / "playbooks" / "preflight.yml").read_text())[0]
    first["hosts"] = "all"
    plays = {
        "start-up": [{"name": "Nothing", "hosts": "all", "gather_facts": False, "tasks": []}],
        "ping floor": [{"name": "Ping", "hosts": "all", "gather_facts": False,
                        "tasks": [{"name": "Ping", "ansible.builtin.ping": None}]}],
        "profile play": [first],
    }
    out = {}
    for label, play in plays.items():
        path = tmp / (label.replace(" ", "_") + ".yml")
        path.write_text(yaml.safe_dump(play, sort_keys=False))
        out[label] = path
    return out


def run(inventory, playbook):
    """(wall seconds, CPU seconds of the ansible-playbook process tree, exit code)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), str(playbook)],
                          env=ansible_env(), capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit("%s failed:\n%s%s" % (playbook.name, proc.stdout[-3000:], proc.stderr[-2000:]))
    return wall, cpu


def main():
    args = arguments(__doc__, sizes=("8,16,32", "comma-separated host counts (default 8,16,32)"), repeat=5)
    sizes = [int(s) for s in args.sizes.split(",")]
    with lab_fleet(min(FLEET_MAX, max(sizes))) as (inventory, state, _env), tempfile.TemporaryDirectory() as tmp:
        books = playbooks(pathlib.Path(tmp))
        inventories = dict((size, sized_inventory(inventory, size)) for size in sizes)
        samples = dict(((size, label), []) for size in sizes for label in books)
        for _round in range(args.repeat):
            for size in sizes:  # interleaved, so every size and play sees the same machine state
                for label, book in books.items():
                    close_masters(state)
                    samples[(size, label)].append(run(inventories[size], book))
        close_masters(state)
        print("profile_check: the profile validation play against Ansible's ping floor; median of %d interleaved "
              "runs, %s, load average %.2f" % (args.repeat, os.environ.get("LAB_NET", "127.0.0"),
                                               os.getloadavg()[0]))
        for size in sizes:
            med = dict((label, (statistics.median(w for w, _c in samples[(size, label)]),
                                statistics.median(c for _w, c in samples[(size, label)]))) for label in books)
            (sw, sc), (pw, pc), (vw, vc) = med["start-up"], med["ping floor"], med["profile play"]
            print("  %3d hosts: start-up %.2f s (%.2f s CPU), ping floor %.2f s (%.2f s CPU), profile play %.2f s "
                  "(%.2f s CPU)" % (size, sw, sc, pw, pc, vw, vc))
            print("             profile play above start-up %.2f s (%.2f s CPU); profile play / ping floor: wall %.2f, "
                  "CPU %.2f" % (vw - sw, vc - sc, vw / pw, vc / pc))
        print("  all runs (wall s): " + "; ".join(
            "%d %s: %s" % (size, label, " ".join("%.2f" % w for w, _c in samples[(size, label)]))
            for size in sizes for label in books))
    return 0


if __name__ == "__main__":
    sys.exit(main())
