"""Host-side setup of one lab instance: its directory, keys, sshd config, the files its root gets, and its start.

The in-namespace half is nsinit.py. Per instance, under <state>/hosts/<name>/:
  root/  home/       the home directories bound on /root (and /home/ubuntu for the non-root variant)
  ns/                mount point of the instance's private scratch tmpfs (overlay layers, its new root)
  gpu/               FAKE_GPU_RUNTIME of the GPU emulator (tests write `apps` and `pid-mode` here)
  meter.log          one JSON line per call of a meter-stop stand-in (shutdown, runpodctl, vastai, ...)
  sshd_config, ssh_host_ed25519_key, nsinit.json, init.log (nsinit's and sshd's stderr)
"""
from __future__ import annotations

import json
import os
import pwd
import grp
import re
import shutil
import subprocess
import time

from . import state as st
from .inventory import platform_info

GPU_DIR = os.path.join(st.LAB_DIR, "gpu")
NSINIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nsinit.py")
# The key exchanges the instances' sshd offers (LAB_SSH_KEX; empty: OpenSSH's default, as on a rented box). For the
# tests, the classic curve25519 only: OpenSSH 9's default post-quantum hybrid (sntrup761x25519) costs each side about
# seven times the CPU (0.11 s against 0.016 s per connection for the client here), on every cold connection of every
# test. The benchmarks keep OpenSSH's default, so that their floors cost what a user's fleet costs.
SSH_KEX = os.environ.get("LAB_SSH_KEX", "curve25519-sha256,curve25519-sha256@libssh.org")
SYSTEM_PYTHON = os.path.realpath("/usr/bin/python3") if os.path.exists("/usr/bin/python3") else None
PATH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin")
METER_COMMANDS = ("shutdown", "poweroff", "halt", "reboot", "runpodctl", "vastai")
NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.")


def scenario_dir(name: str) -> str:
    return name if os.path.isabs(name) else os.path.join(GPU_DIR, "scenarios", name)


def gpu_count(scenario: str) -> int:
    """Number of GPUs in the scenario's capture; 1 when there is none.

    nvidia-smi-q.xml: the <gpu ...> elements; nvidia-smi-q.txt: "Attached GPUs : N", else the "GPU <bus id>"
    lines."""
    d = scenario_dir(scenario)
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return 1
    for fname in names:
        if not fname.startswith("nvidia-smi-q"):
            continue
        try:
            with open(os.path.join(d, fname), encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError:
            continue
        if fname.endswith(".xml"):
            n = len(re.findall(r"<gpu\s", text))
        else:
            m = re.search(r"^Attached GPUs\s*:\s*(\d+)", text, re.M)
            n = int(m.group(1)) if m else len(re.findall(r"^GPU [0-9A-Fa-f]+:", text, re.M))
        if n:
            return n
    return 1


def keygen(path: str, comment: str) -> subprocess.Popen:
    for p in (path, path + ".pub"):
        if os.path.exists(p):
            os.unlink(p)
    return subprocess.Popen(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def client_key(state: str) -> str:
    d = os.path.join(state, "keys")
    os.makedirs(d, mode=0o700, exist_ok=True)
    key = os.path.join(d, "id_ed25519")
    if not (os.path.exists(key) and os.path.exists(key + ".pub")):
        p = keygen(key, "lab-fleet-client")
        if p.wait() != 0:
            raise RuntimeError(f"ssh-keygen failed: {p.stderr.read().decode()}")
    return key


def lab_user(name: str) -> dict:
    """The non-root SSH user. It exists only inside the instance (added to the instance's own /etc/passwd,
    which lives in its /etc overlay), so nothing is added to, or removed from, the host."""
    try:
        pw = pwd.getpwnam(name)
        return {"name": name, "uid": pw.pw_uid, "gid": pw.pw_gid, "home": f"/home/{name}", "create": False}
    except KeyError:
        pass
    uids = {p.pw_uid for p in pwd.getpwall()}
    gids = {g.gr_gid for g in grp.getgrall()}
    uid = next(u for u in range(1000, 60000) if u not in uids and u not in gids)
    return {"name": name, "uid": uid, "gid": uid, "home": f"/home/{name}", "create": True}


def _stand_in(meter_log: str, host: str) -> str:
    return f"""#!{SYSTEM_PYTHON} -I
# Lab stand-in for a meter-stop command: it ONLY appends one JSON line (argv, time) to the recorder
# {meter_log}
# and never touches the machine.
import json, os, sys, time
rec = {{"ts": time.time(), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": {host!r},
       "argv": [os.path.basename(sys.argv[0])] + sys.argv[1:], "path": sys.argv[0], "uid": os.getuid()}}
with open({meter_log!r}, "a") as fh:
    fh.write(json.dumps(rec) + "\\n")
"""


SLOW_WRAPPER = """#!/bin/bash
# Lab variant "slow" (sshd ForceCommand): every command waits LAB_SLOW_SECONDS (default 2), then runs as asked.
sleep "${LAB_SLOW_SECONDS:-2}"
if [ -n "$SSH_ORIGINAL_COMMAND" ]; then exec "${SHELL:-/bin/sh}" -c "$SSH_ORIGINAL_COMMAND"; fi
exec -l "${SHELL:-/bin/bash}"
"""


def _emulator_link(tool: str) -> dict:
    target = os.path.join(GPU_DIR, "bin", tool)
    if tool == "nvidia-smi":
        fallback = f'printf "%s\\n" "{NO_DRIVER}"\nexit 9\n'
    else:
        fallback = f'exec /usr/bin/{tool} "$@"\n'
    return {"content": (f"#!/bin/sh\n# Lab: the GPU emulator's {tool} (tests/lab/gpu); until it exists, the real\n"
                        f"# behaviour of a box without the NVIDIA driver.\n"
                        f'[ -x "{target}" ] && exec "{target}" "$@"\n' + fallback), "mode": 0o755}


def prepare(state: str, inst: dict, opts: dict, proxy_port: int | None, client_pub: str) -> dict:
    """Write the instance's directory and config; return the nsinit config (also written as nsinit.json)."""
    name = inst["name"]
    hd = st.host_dir(state, name)
    for sub in ("root", "ns", "gpu"):
        os.makedirs(os.path.join(hd, sub), exist_ok=True)
    os.chmod(hd, 0o755)
    os.chmod(os.path.join(hd, "root"), 0o700)
    info = platform_info(inst["platform"])
    user = {"name": "root", "uid": 0, "gid": 0, "home": "/root", "create": False}
    if inst["user"] != "root":
        user = lab_user(inst["user"])
    home_src = os.path.join(hd, "root" if user["name"] == "root" else "home")
    os.makedirs(home_src, exist_ok=True)
    for skel in (".bashrc", ".profile"):
        if os.path.exists(os.path.join("/etc/skel", skel)):
            shutil.copy(os.path.join("/etc/skel", skel), os.path.join(home_src, skel))
    ssh_dir = os.path.join(home_src, ".ssh")
    os.makedirs(ssh_dir, mode=0o700, exist_ok=True)
    with open(os.path.join(ssh_dir, "authorized_keys"), "w") as fh:
        fh.write(client_pub)
    os.chmod(os.path.join(ssh_dir, "authorized_keys"), 0o600)
    if user["name"] != "root":
        os.chmod(home_src, 0o750)
        for dirpath, _dirs, filenames in os.walk(home_src):
            for p in [dirpath] + [os.path.join(dirpath, f) for f in filenames]:
                os.chown(p, user["uid"], user["gid"])

    meter_log = os.path.join(hd, "meter.log")
    open(meter_log, "a").close()
    os.chmod(meter_log, 0o666)
    open(os.path.join(hd, "gpu", "apps"), "a").close()
    inst.update(meter_log=meter_log, gpu_runtime=os.path.join(hd, "gpu"), gpus=gpu_count(inst["scenario"]))

    env = {
        "FAKE_GPU_SCENARIO": scenario_dir(inst["scenario"]),
        "FAKE_GPU_RUNTIME": inst["gpu_runtime"],
        "FAKE_GPU_PYTHON": SYSTEM_PYTHON,
        "LAB_INSTANCE": name, "LAB_PLATFORM": inst["platform"], "LAB_REGION": inst["region"],
    }
    platform_env = {k: v.format(name=name, index=inst["index"], vast_id=9000000 + inst["index"])
                    for k, v in info.get("env", {}).items()}
    env.update(platform_env)
    if "slow" in inst["variants"]:
        env["LAB_SLOW_SECONDS"] = str(opts.get("slow_seconds", 2))

    files = []
    for tool in ("nvidia-smi", "dmesg", "journalctl"):
        files.append(dict(path=f"/usr/local/bin/{tool}", **_emulator_link(tool)))
    stand_in = _stand_in(meter_log, name)
    for cmd in METER_COMMANDS:
        for d in ("/usr/local/sbin", "/usr/local/bin"):
            files.append({"path": f"{d}/{cmd}", "content": stand_in, "mode": 0o755})
        for d in ("/usr/sbin", "/usr/bin"):
            if os.path.lexists(f"{d}/{cmd}"):          # e.g. /usr/sbin/shutdown -> /bin/systemctl
                files.append({"path": f"{d}/{cmd}", "content": stand_in, "mode": 0o755})
    if "slow" in inst["variants"]:
        files.append({"path": "/usr/local/libexec/lab-slow", "content": SLOW_WRAPPER, "mode": 0o755})
    if info.get("env_file"):  # RunPod's start.sh: printenv | grep '^RUNPOD_' as export lines, for SSH sessions
        files.append({"path": info["env_file"], "mode": 0o644, "content": "".join(
            'export %s="%s"\n' % (k, v) for k, v in platform_env.items())})
    etc_append = {}
    if info.get("turbo"):
        from .proxy import network_turbo
        files.append({"path": "/etc/network_turbo", "content": network_turbo(proxy_port), "mode": 0o644})
    if user["create"]:
        passwd = f"{user['name']}:x:{user['uid']}:{user['gid']}:Lab user:{user['home']}:/bin/bash\n"
        etc_append = {"/etc/passwd": passwd,
                      "/etc/group": f"{user['name']}:x:{user['gid']}:\n",
                      "/etc/shadow": f"{user['name']}:*:19000:0:99999:7:::\n"}
    if user["name"] != "root" and os.path.exists("/usr/bin/sudo"):
        files.append({"path": f"/etc/sudoers.d/90-lab-{user['name']}",
                      "content": f"{user['name']} ALL=(ALL) NOPASSWD:ALL\n", "mode": 0o440})
    masks = []
    if "no-tmux" in inst["variants"]:
        masks += [f"{d}/tmux" for d in PATH_DIRS if os.path.lexists(f"{d}/tmux")]
    if "autodl-image" in inst["variants"]:
        masks += [f"{d}/python3" for d in PATH_DIRS if os.path.lexists(f"{d}/python3")]

    repo_top = "/" + st.REPO_ROOT.strip("/").split("/")[0]
    special = {"/root", "/home", "/tmp", "/run", "/dev", "/proc", "/sys", "/etc", "/usr", "/var", "/opt"}
    binds, deep = ([], [st.REPO_ROOT]) if repo_top in special else ([repo_top], [])
    durable = None
    if inst["durable_dir"]:
        durable = {"source": region_path(state, inst), "path": inst["durable_dir"]}
    cfg = {
        "name": name, "addr": inst["addr"], "state": state, "host_dir": hd, "scratch": os.path.join(hd, "ns"),
        "gpus": inst["gpus"], "user": user, "root_home": os.path.join(hd, "root"),
        "user_home": os.path.join(hd, "home"), "binds": binds, "deep_binds": deep,
        "data": {"path": inst["data_dir"], "size": opts["data_size"], "inodes": opts["data_inodes"]},
        "durable": durable, "dirs": info.get("dirs", []), "miniconda": bool(info.get("miniconda")),
        "python": SYSTEM_PYTHON, "files": files, "masks": masks, "etc_append": etc_append,
        "sshd": shutil.which("sshd") or "/usr/sbin/sshd",
        "sshd_config": os.path.join(hd, "sshd_config"),
    }
    setenv = " ".join(f"{k}={v}" for k, v in env.items())
    lines = [
        f"# lab instance {name} ({inst['platform']}, variants: {', '.join(inst['variants']) or 'none'})",
        f"ListenAddress {inst['addr']}:22", f"HostKey {hd}/ssh_host_ed25519_key", "PidFile /run/sshd.pid",
        "AuthorizedKeysFile .ssh/authorized_keys", "PubkeyAuthentication yes", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password",
        # No PAM: pam_loginuid and friends fail in namespaces. Session environment comes from SetEnv.
        "UsePAM no", "X11Forwarding no", "PrintMotd no", "PrintLastLog no", "AcceptEnv LANG LC_*",
        "MaxStartups 100:30:200", "MaxSessions 100", "LogLevel INFO",
        "Subsystem sftp /usr/lib/openssh/sftp-server", f"SetEnv {setenv}",
    ]
    if SSH_KEX:
        lines.append(f"KexAlgorithms {SSH_KEX}")
    if "slow" in inst["variants"]:
        lines.append("ForceCommand /usr/local/libexec/lab-slow")
    with open(cfg["sshd_config"], "w") as fh:
        fh.write("\n".join(lines) + "\n")
    with open(os.path.join(hd, "nsinit.json"), "w") as fh:
        json.dump(cfg, fh, indent=1)
    return cfg


def region_path(state: str, inst: dict) -> str:
    return os.path.join(state, "regions", f"{inst['platform']}-{inst['region']}")


def spawn(state: str, inst: dict) -> subprocess.Popen:
    hd = st.host_dir(state, inst["name"])
    log = open(os.path.join(hd, "init.log"), "ab")
    cmd = ["unshare", "--mount", "--pid", "--uts", "--fork", "--kill-child", "--propagation", "private",
           SYSTEM_PYTHON, "-I", NSINIT, os.path.join(hd, "nsinit.json")]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                            close_fds=True)
    log.close()
    return proc


def wait_ready(pending: dict, timeout: float) -> None:
    """pending: name -> (addr, Popen). Wait until each sshd says it listens on addr:22 (in its init.log)."""
    deadline = time.monotonic() + timeout
    pending = dict(pending)
    while pending:
        for name, (addr, proc) in list(pending.items()):
            log = os.path.join(os.path.dirname(proc.args[-1]), "init.log")
            if proc.poll() is not None:
                raise RuntimeError(f"{name}: instance exited with {proc.returncode} during start; see {log}")
            with open(log, "rb") as fh:
                if f"Server listening on {addr} port 22.".encode() in fh.read():
                    del pending[name]
        if pending and time.monotonic() > deadline:
            raise RuntimeError(f"sshd not listening after {timeout:.0f} s on: {', '.join(sorted(pending))}")
        if pending:
            time.sleep(0.02)


def init_pid(unshare_pid: int, timeout: float = 5.0) -> int | None:
    """The host PID of the namespace's PID 1 (the unshare process's only child)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kids = st.children(unshare_pid)
        if kids:
            return kids[0]
        time.sleep(0.005)
    return None
