"""tests/lab/fleet: start, list and stop the lab fleet."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

from . import gpu, instance, power, proxy, relay
from . import state as st
from .inventory import MAX_SIZE, VARIANTS, host_name, inventory, layout, write_inventory

USAGE_ROOT = ("fleet {cmd}: needs root (it mounts filesystems and creates namespaces); "
              "run it as root, e.g. `sudo tests/lab/fleet {cmd}`")


def is_root() -> bool:
    # LAB_FLEET_AS_NONROOT=1 makes the fleet behave as if it were not root (for testing the refusal).
    return os.geteuid() == 0 and os.environ.get("LAB_FLEET_AS_NONROOT") != "1"


def _pairs(values: list, opt: str, multi: bool = False) -> dict:
    out: dict = {}
    for v in values or []:
        host, sep, val = v.partition("=")
        if not sep or not host or not val:
            raise ValueError(f"{opt} expects HOST=NAME (HOST may be 'all'), got {v!r}")
        if multi:
            out.setdefault(host, []).extend(x.strip() for x in val.split(",") if x.strip())
        else:
            out[host] = val
    return out


def _say(msg: str) -> None:
    print(msg, flush=True)


def _mount_region(state, record, inst, size, inodes):
    """The durable tmpfs of ``inst``'s (platform, region), once per fleet, in the host mount namespace (its instances
    bind it); recorded before it is mounted."""
    path = instance.region_path(state, inst)
    if path not in record["mounts"]:
        os.makedirs(path, exist_ok=True)
        record["mounts"].append(path)
        st.save(state, record)
        st.mount("tmpfs", path, "tmpfs", 2 | 4,   # nosuid, nodev
                 f"size={size},nr_inodes={inodes},mode=1777")


def cmd_up(args) -> int:
    if not is_root():
        print(USAGE_ROOT.format(cmd="up"), file=sys.stderr)
        return 2
    t0 = time.monotonic()
    try:
        insts = layout(args.size, _pairs(args.platform, "--platform"), _pairs(args.region, "--region"),
                       _pairs(args.scenario, "--scenario"), _pairs(args.variant, "--variant", multi=True))
    except ValueError as exc:
        print(f"fleet up: {exc}", file=sys.stderr)
        return 2
    for opt, value in (("--rtt-ms", args.rtt_ms), ("--jitter-ms", args.jitter_ms)):
        if not 0 <= value <= 10000:
            print(f"fleet up: {opt} must be between 0 and 10000 (milliseconds), got {value:g}", file=sys.stderr)
            return 2
    if not 1 <= args.relay_port <= 65535 or args.relay_port == 22:
        print(f"fleet up: --relay-port must be a TCP port other than 22, got {args.relay_port}", file=sys.stderr)
        return 2
    if not instance.SYSTEM_PYTHON:
        print("fleet up: /usr/bin/python3 is missing", file=sys.stderr)
        return 2
    state = st.state_dir()
    os.makedirs(state, exist_ok=True)
    old = st.load(state)
    if old and old.get("status") in ("up", "starting"):
        live = [i["name"] for i in old.get("instances", []) if st.alive(i.get("init"))]
        if live and not args.replace:
            print(f"fleet up: a fleet is already up in {state} ({', '.join(live)}); "
                  "run `tests/lab/fleet down` first, or `fleet up --replace`", file=sys.stderr)
            return 1
    if old or st.mounts_under(state):
        if st.teardown(state, log=_say):
            print("fleet up: could not clean the previous fleet; see above", file=sys.stderr)
            return 1
    if st.mounts_under(state):
        print(f"fleet up: mounts remain under {state}: {st.mounts_under(state)}", file=sys.stderr)
        return 1
    for sub in ("hosts", "regions", "cp"):
        shutil.rmtree(os.path.join(state, sub), ignore_errors=True)
    record = {"status": "starting", "started_at": time.time(), "argv": sys.argv[1:], "instances": [],
              "mounts": [], "addresses": [], "state_dir": state}
    st.save(state, record)
    try:
        inv_path = _up(state, record, insts, args)
    except BaseException as exc:  # noqa: BLE001 - any failure (or Ctrl-C): undo what was started, then report
        print(f"fleet up: FAILED: {exc!r}" if isinstance(exc, KeyboardInterrupt) else f"fleet up: FAILED: {exc}",
              file=sys.stderr)
        if os.environ.get("LAB_KEEP_FAILED") != "1":
            st.teardown(state, log=_say)
            print("fleet up: cleaned up the partial fleet (LAB_KEEP_FAILED=1 keeps it for debugging)",
                  file=sys.stderr)
        return 1
    n_up = sum(1 for i in insts if "down" not in i["variants"])
    net = ""
    if record.get("relay"):
        net = (f"; through the latency relay on port {args.relay_port} (round trip {args.rtt_ms:g} ms, "
               f"jitter {args.jitter_ms:g} ms)")
    _say(f"fleet up: {len(insts)} instances ({n_up} running) in {time.monotonic() - t0:.1f} s{net}; "
         f"ssh -F {state}/ssh_config lab-01")
    _say(inv_path)
    return 0


def _up(state: str, record: dict, insts: list, args) -> str:
    opts = {"data_size": args.data_size, "data_inodes": args.data_inodes, "slow_seconds": args.slow_seconds}
    key = instance.client_key(state)
    with open(key + ".pub") as fh:
        client_pub = fh.read()
    os.makedirs(os.path.join(state, "cp"), mode=0o700, exist_ok=True)

    # Loopback addresses: all of 127.0.0.0/8 is normally local already; add (and record) one only if not.
    for inst in insts:
        if not st.address_is_local(inst["addr"]):
            record["addresses"].append(inst["addr"])
            st.save(state, record)
            subprocess.run(["ip", "addr", "add", f"{inst['addr']}/32", "dev", "lo"], check=True)

    port = None
    if any(i["platform"] == "autodl" for i in insts):
        port = proxy.start(state, record)["port"]

    # One durable tmpfs per (platform, region), in the host mount namespace, bound into its instances.
    for inst in insts:
        if inst["durable_dir"]:
            _mount_region(state, record, inst, args.durable_size, args.durable_inodes)

    # Host keys, in parallel.
    jobs = []
    for inst in insts:
        hd = st.host_dir(state, inst["name"])
        os.makedirs(hd, exist_ok=True)
        jobs.append((inst, instance.keygen(os.path.join(hd, "ssh_host_ed25519_key"), inst["name"])))
    use_relay = args.relay or args.rtt_ms > 0 or args.jitter_ms > 0
    ssh_port = args.relay_port if use_relay else 22
    known = []
    for inst, job in jobs:
        if job.wait() != 0:
            raise RuntimeError(f"ssh-keygen for {inst['name']}: {job.stderr.read().decode()}")
        with open(os.path.join(st.host_dir(state, inst["name"]), "ssh_host_ed25519_key.pub")) as fh:
            pub = " ".join(fh.read().split()[:2])
        names = f"{inst['addr']},{inst['name']}"
        if use_relay:   # ssh looks a host up as [address]:port when the port is not 22
            names += f",[{inst['addr']}]:{ssh_port},[{inst['name']}]:{ssh_port}"
        known.append(f"{names} {pub}")
    known_hosts = os.path.join(state, "known_hosts")
    with open(known_hosts, "w") as fh:
        fh.write("\n".join(known) + "\n")

    procs = {}
    for inst in insts:
        instance.prepare(state, inst, opts, port, client_pub)
        entry = dict(inst)
        record["instances"].append(entry)
        if "down" in inst["variants"]:
            continue
        proc = instance.spawn(state, inst)
        entry["unshare"] = st.proc_entry(proc.pid)
        st.save(state, record)
        procs[inst["name"]] = (inst["addr"], proc)
    for entry in record["instances"]:
        if entry.get("unshare"):
            pid = instance.init_pid(entry["unshare"]["pid"])
            if pid:
                entry["init"] = st.proc_entry(pid)
    st.save(state, record)
    instance.wait_ready(procs, float(os.environ.get("LAB_UP_TIMEOUT", "30")))
    if use_relay:
        relay.start(state, record, insts, args.rtt_ms, args.jitter_ms, ssh_port)

    _write_ssh_config(state, insts, key, known_hosts, ssh_port)
    inv_path = os.path.join(state, "inventory.yml")
    header = (f"Lab fleet inventory, written by `tests/lab/fleet up {' '.join(sys.argv[2:])}`.\n"
              "Platform groups load the collection's profiles through group_vars/ next to this file\n"
              "(a link to the repository's group_vars/).")
    write_inventory(inv_path, inventory(state, insts, key, known_hosts, ssh_port), header)
    gv = os.path.join(state, "group_vars")
    if not os.path.lexists(gv) and os.path.isdir(os.path.join(st.REPO_ROOT, "group_vars")):
        os.symlink(os.path.relpath(os.path.join(st.REPO_ROOT, "group_vars"), state), gv)
    record["status"] = "up"
    record["inventory"] = inv_path
    record["up_seconds"] = round(time.time() - record["started_at"], 2)
    st.save(state, record)
    return inv_path


def _write_inventory(state: str, record: dict, key: str, known_hosts: str) -> str:
    live = [i for i in record["instances"] if not i.get("removed")]
    _write_ssh_config(state, live, key, known_hosts)
    inv_path = os.path.join(state, "inventory.yml")
    write_inventory(inv_path, inventory(state, live, key, known_hosts),
                    "Lab fleet inventory, written by `tests/lab/fleet up`, then add/remove.")
    return inv_path


def cmd_add(args) -> int:
    """Start one more instance in a fleet that is up (a provider's create verb, played by the fake API)."""
    if not is_root():
        print(USAGE_ROOT.format(cmd="add"), file=sys.stderr)
        return 2
    state = st.state_dir()
    record = st.load(state)
    if not record or record.get("status") != "up":
        print(f"fleet add: no fleet is up in {state}; run `tests/lab/fleet up` first", file=sys.stderr)
        return 1
    if record.get("relay"):
        print("fleet add: this fleet runs behind the latency relay (up --rtt-ms), which serves the hosts it was "
              "started with; start the fleet without --rtt-ms to add hosts", file=sys.stderr)
        return 2
    taken = {i["index"] for i in record["instances"]}
    index = args.index or max(taken | {0}) + 1
    if index in taken:
        print(f"fleet add: index {index} is taken ({host_name(index)})", file=sys.stderr)
        return 1
    name = host_name(index)
    try:
        inst = layout(index, {name: args.platform}, {}, {name: args.scenario} if args.scenario else {}, {})[-1]
    except ValueError as exc:
        print(f"fleet add: {exc}", file=sys.stderr)
        return 2
    if not os.path.isdir(instance.scenario_dir(inst["scenario"])):
        print(f"fleet add: no GPU scenario {inst['scenario']!r} under tests/lab/gpu/scenarios", file=sys.stderr)
        return 2
    if inst["platform"] == "autodl":
        print("fleet add: autodl instances share the fleet's proxy and region A's durable FS from `fleet up`; add "
              "supports runpod, vastai, lambda and generic_ssh", file=sys.stderr)
        return 2
    if inst["durable_dir"]:  # Lambda: the region's filesystem, as `fleet up` mounts it (shared by its instances)
        _mount_region(state, record, inst, os.environ.get("LAB_DURABLE_SIZE", "256m"),
                      os.environ.get("LAB_DURABLE_INODES", "5000"))
    key = instance.client_key(state)
    with open(key + ".pub") as fh:
        client_pub = fh.read()
    if not st.address_is_local(inst["addr"]):
        record["addresses"].append(inst["addr"])
        st.save(state, record)
        subprocess.run(["ip", "addr", "add", f"{inst['addr']}/32", "dev", "lo"], check=True)
    hd = st.host_dir(state, name)
    shutil.rmtree(hd, ignore_errors=True)
    os.makedirs(hd, exist_ok=True)
    job = instance.keygen(os.path.join(hd, "ssh_host_ed25519_key"), name)
    if job.wait() != 0:
        print(f"fleet add: ssh-keygen for {name}: {job.stderr.read().decode()}", file=sys.stderr)
        return 1
    with open(os.path.join(hd, "ssh_host_ed25519_key.pub")) as fh:
        pub = " ".join(fh.read().split()[:2])
    known_hosts = os.path.join(state, "known_hosts")
    with open(known_hosts, "a") as fh:
        fh.write(f"{inst['addr']},{name} {pub}\n")
    opts = {"data_size": os.environ.get("LAB_DATA_SIZE", "64m"),
            "data_inodes": int(os.environ.get("LAB_DATA_INODES", "2000")),
            "slow_seconds": float(os.environ.get("LAB_SLOW_SECONDS", "2"))}
    instance.prepare(state, inst, opts, (record.get("proxy") or {}).get("port"), client_pub)
    entry = dict(inst)
    record["instances"].append(entry)
    proc = instance.spawn(state, inst)
    entry["unshare"] = st.proc_entry(proc.pid)
    st.save(state, record)
    pid = instance.init_pid(proc.pid)
    if pid:
        entry["init"] = st.proc_entry(pid)
    st.save(state, record)
    try:
        instance.wait_ready({name: (inst["addr"], proc)}, float(os.environ.get("LAB_UP_TIMEOUT", "30")))
    except RuntimeError as exc:
        print(f"fleet add: {exc}", file=sys.stderr)
        return 1
    _write_inventory(state, record, key, known_hosts)
    print(json.dumps({"name": name, "index": index, "addr": inst["addr"], "port": 22, "platform": inst["platform"],
                      "scenario": inst["scenario"]}), flush=True)
    return 0


def cmd_remove(args) -> int:
    """Stop one instance (a provider's destroy verb): its processes end, its address stops answering."""
    if not is_root():
        print(USAGE_ROOT.format(cmd="remove"), file=sys.stderr)
        return 2
    state = st.state_dir()
    record = st.load(state) or {}
    for entry in record.get("instances", []):
        if entry["name"] == args.host and not entry.get("removed"):
            break
    else:
        print(f"fleet remove: no instance {args.host} in {state}/fleet.json", file=sys.stderr)
        return 1
    procs = [entry[k] for k in ("init", "unshare") if entry.get(k)]
    for proc in procs:
        st.kill(proc)
    left = st.wait_gone(procs, 10.0)
    if left:
        print(f"fleet remove: processes {[p['pid'] for p in left]} did not exit", file=sys.stderr)
        return 1
    entry["removed"] = True
    entry["removed_at"] = time.time()
    st.save(state, record)
    _write_inventory(state, record, instance.client_key(state), os.path.join(state, "known_hosts"))
    _say(f"{args.host}: removed")
    return 0


def _write_ssh_config(state: str, insts: list, key: str, known_hosts: str, port: int = 22) -> None:
    lines = ["# ssh -F this-file lab-01 ...   (written by tests/lab/fleet up)"]
    for inst in insts:
        lines += [f"Host {inst['name']}", f"  HostName {inst['addr']}", f"  User {inst['user']}"]
        if port != 22:
            lines.append(f"  Port {port}")
    lines += ["Host lab-*", f"  IdentityFile {key}", "  IdentitiesOnly yes", f"  UserKnownHostsFile {known_hosts}",
              "  StrictHostKeyChecking yes", "  BatchMode yes", "  ConnectTimeout 10"]
    with open(os.path.join(state, "ssh_config"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


def cmd_down(args) -> int:
    if not is_root():
        print(USAGE_ROOT.format(cmd="down"), file=sys.stderr)
        return 2
    state = st.state_dir()
    if not os.path.isdir(state):
        _say("fleet down: nothing to stop")
        return 0
    problems = st.teardown(state, log=_say)
    if problems:
        return 1
    _say("fleet down: stopped")
    return 0


def cmd_status(args) -> int:
    state = st.state_dir()
    record = st.load(state)
    if not record:
        _say(f"no fleet in {state}")
        return 0
    rows = []
    for inst in record.get("instances", []):
        if "down" in inst["variants"]:
            run = "down (variant)"
        elif record.get("status") == "down":
            run = "stopped"
        else:
            run = "running" if st.alive(inst.get("init")) else "dead"
        rows.append({"name": inst["name"], "addr": inst["addr"], "platform": inst["platform"],
                     "region": inst["region"], "scenario": inst["scenario"], "user": inst["user"],
                     "variants": ",".join(inst["variants"]) or "-", "state": run,
                     "pid": (inst.get("init") or {}).get("pid")})
    if args.json:
        print(json.dumps({"status": record.get("status"), "inventory": record.get("inventory"),
                          "proxy": record.get("proxy"), "relay": record.get("relay"), "instances": rows}, indent=2))
        return 0
    _say(f"fleet {record.get('status')} in {state}  inventory: {record.get('inventory', '-')}")
    if record.get("relay"):
        r = record["relay"]
        _say(f"latency relay on port {r['port']}: round trip {r['rtt_ms']:g} ms, jitter {r['jitter_ms']:g} ms "
             f"({'running' if st.alive(r.get('proc')) else 'stopped'})")
    cols = ("name", "addr", "platform", "region", "scenario", "user", "variants", "state", "pid")
    widths = {c: max([len(c)] + [len(str(r[c])) for r in rows]) for c in cols}
    _say("  ".join(c.upper().ljust(widths[c]) for c in cols))
    for r in rows:
        _say("  ".join(str(r[c]).ljust(widths[c]) for c in cols))
    return 0


def cmd_gpu_app(args) -> int:
    try:
        if args.clear or args.pid_mode is not None:
            if args.clear:
                gpu.clear(args.host)
            if args.pid_mode is not None:
                gpu.set_pid_mode(args.host, args.pid_mode)
            return 0
        if args.pid is None or args.mib is None or not args.name:
            print("fleet gpu-app: expects HOST PID MIB NAME (or HOST --clear)", file=sys.stderr)
            return 2
        _say(gpu.register(args.host, args.pid, args.mib, args.name).rstrip("\n"))
    except (KeyError, LookupError, RuntimeError) as exc:
        print(f"fleet gpu-app: {exc}", file=sys.stderr)
        return 1
    return 0


def cmd_power(args) -> int:
    """reboot, vanish, revive (fleetlib/power.py)."""
    if not is_root():
        print(USAGE_ROOT.format(cmd=args.cmd), file=sys.stderr)
        return 2
    try:
        _say(getattr(power, args.cmd)(st.state_dir(), args.host))
    except (KeyError, LookupError, RuntimeError, OSError) as exc:
        print(f"fleet {args.cmd}: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="tests/lab/fleet", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start the fleet; the last line printed is the inventory path")
    up.add_argument("--size", type=int, default=3, help=f"number of instances, 1..{MAX_SIZE} (default 3)")
    up.add_argument("--scenario", action="append", metavar="HOST=NAME", help="GPU scenario (tests/lab/gpu/scenarios)")
    up.add_argument("--variant", action="append", metavar="HOST=NAME[,NAME]", help=f"one of {', '.join(VARIANTS)}")
    up.add_argument("--platform", action="append", metavar="HOST=NAME", help="platform group (autodl, runpod, ...)")
    up.add_argument("--region", action="append", metavar="HOST=NAME", help="region (durable FS sharing)")
    up.add_argument("--data-size", default=os.environ.get("LAB_DATA_SIZE", "64m"))
    up.add_argument("--data-inodes", type=int, default=int(os.environ.get("LAB_DATA_INODES", "2000")))
    up.add_argument("--durable-size", default=os.environ.get("LAB_DURABLE_SIZE", "256m"))
    up.add_argument("--durable-inodes", type=int, default=int(os.environ.get("LAB_DURABLE_INODES", "5000")))
    up.add_argument("--slow-seconds", type=float, default=float(os.environ.get("LAB_SLOW_SECONDS", "2")))
    up.add_argument("--replace", action="store_true", help="stop a running fleet first instead of failing")
    up.add_argument("--rtt-ms", type=float, default=float(os.environ.get("LAB_RTT_MS", "0")),
                    help="round trip between the controller and each instance, through the latency relay (default 0: "
                         "no relay)")
    up.add_argument("--jitter-ms", type=float, default=float(os.environ.get("LAB_JITTER_MS", "0")),
                    help="the round trip varies within +- this (uniformly per chunk and direction, order kept)")
    up.add_argument("--relay", action="store_true", help="put the relay in front of sshd even at 0 ms")
    up.add_argument("--relay-port", type=int, default=int(os.environ.get("LAB_RELAY_PORT", relay.DEFAULT_PORT)),
                    help=f"the relay's port on each instance address (default {relay.DEFAULT_PORT}; sshd stays on 22)")
    up.set_defaults(func=cmd_up)
    down = sub.add_parser("down", help="stop everything; safe after a failed up and safe to repeat")
    down.set_defaults(func=cmd_down)
    status = sub.add_parser("status", help="list the instances")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cmd_status)
    ga = sub.add_parser("gpu-app", help="register an in-instance process with the GPU emulator")
    ga.add_argument("host")
    ga.add_argument("pid", type=int, nargs="?")
    ga.add_argument("mib", type=int, nargs="?")
    ga.add_argument("name", nargs="?")
    ga.add_argument("--clear", action="store_true", help="empty the instance's apps file")
    ga.add_argument("--pid-mode", choices=["host", ""], help="'host': the emulator prints host PIDs; '': default")
    ga.set_defaults(func=cmd_gpu_app)
    add = sub.add_parser("add", help="start one more instance in a running fleet (prints its name and address as "
                                     "JSON)")
    add.add_argument("--platform", default="generic_ssh", help="platform group (runpod, vastai, lambda, generic_ssh)")
    add.add_argument("--scenario", help="GPU scenario (tests/lab/gpu/scenarios)")
    add.add_argument("--index", type=int, help="the instance's index (lab-NN, its address); default: the next free")
    add.set_defaults(func=cmd_add)
    rm = sub.add_parser("remove", help="stop one instance (its address stops answering)")
    rm.add_argument("host")
    rm.set_defaults(func=cmd_remove)
    for verb, text in (("reboot", "kill every process of the instance but sshd, as a platform restart (keeps the "
                                  "disks; runs /root/onstart.sh on vastai)"),
                       ("vanish", "make the instance stop answering SSH (its jobs keep running)"),
                       ("revive", "make a vanished instance answer again")):
        cmd = sub.add_parser(verb, help=text)
        cmd.add_argument("host")
        cmd.set_defaults(func=cmd_power)
    args = ap.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:          # e.g. `fleet status | head`
        return 0
