"""PID 1 of one lab instance: build the instance's private root, then exec sshd.

Started by instance.spawn() as
    unshare --mount --pid --uts --fork --kill-child --propagation private python3 -I nsinit.py CONFIG.json
so it runs in fresh mount, PID and UTS namespaces, as root. It builds a new root on a private tmpfs:
  /etc /usr /var /opt   overlayfs over the host's (writes stay in the instance; masks are whiteouts)
  /dev                  a tmpfs with the basic nodes, a private devpts, /dev/shm and fake /dev/nvidia* nodes
  /proc                 a new procfs for the instance's PID namespace; /sys is bound from the host
  /tmp /run /home       private tmpfs
  /root (or /home/USER) the instance's home, bound from the state directory
  data disk             a tmpfs with a byte size and an inode cap (e.g. /root/autodl-tmp, /workspace)
  durable FS            the region's tmpfs, bound (e.g. /root/autodl-fs)
  the repository        bound from the host (its top-level directory, e.g. /work), with the fleet's state
                        directory hidden except this instance's own directory
then pivot_root()s into it, sets the host name and execs sshd in the foreground. When this process dies
(fleet down kills it), the kernel kills every process in the instance and the namespaces disappear.

Standard library only; everything is imported before pivot_root.
"""
import ctypes
import ctypes.util
import json
import os
import socket
import stat
import subprocess
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_BIND, MS_REC = 4096, 16384
MNT_DETACH = 2
LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
OVERLAID = ("etc", "usr", "var", "opt")
EMPTY = ("boot", "media", "mnt", "srv")


def mount(source, target, fstype=None, flags=0, data=None):
    def enc(s):
        return s.encode() if s is not None else None
    if LIBC.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target} ({fstype or 'bind'} {data or ''}): {os.strerror(err)}")


def tmpfs(target, opts, flags=MS_NOSUID | MS_NODEV):
    os.makedirs(target, exist_ok=True)
    mount("tmpfs", target, "tmpfs", flags, opts)


def bind(source, target, rec=False):
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    elif not os.path.lexists(target):
        open(target, "w").close()
    mount(source, target, None, MS_BIND | (MS_REC if rec else 0))


def write_file(path, content, mode=0o644, uid=0, gid=0):
    """Create path afresh; never follow a symlink that is already there (it may point into the host)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(content)
    os.chmod(path, mode)
    os.chown(path, uid, gid)


def append(path, text):
    with open(path, "a") as fh:
        fh.write(text)


def build_dev(dev, gpus):
    tmpfs(dev, "mode=755,size=1m", MS_NOSUID)     # not nodev: the device nodes must work
    nodes = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9), "tty": (5, 0)}
    for name, (major, minor) in nodes.items():
        os.mknod(os.path.join(dev, name), 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(os.path.join(dev, name), 0o666)
    # Fake GPU nodes: clones of /dev/null (c 1 3), so a process can open them and a scan of
    # /proc/*/fd finds it holding /dev/nvidia*. Their major number is not NVIDIA's 195.
    for name in [f"nvidia{i}" for i in range(gpus)] + ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"]:
        os.mknod(os.path.join(dev, name), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        os.chmod(os.path.join(dev, name), 0o666)
    os.makedirs(os.path.join(dev, "pts"))
    mount("devpts", os.path.join(dev, "pts"), "devpts", MS_NOSUID | MS_NOEXEC,
          "newinstance,ptmxmode=0666,mode=0620,gid=5")
    os.symlink("pts/ptmx", os.path.join(dev, "ptmx"))
    tmpfs(os.path.join(dev, "shm"), "mode=1777,size=256m")
    os.symlink("/proc/self/fd", os.path.join(dev, "fd"))
    for i, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{i}", os.path.join(dev, name))


def build_root(cfg):
    scratch = cfg["scratch"]
    tmpfs(scratch, "mode=755,size=" + cfg.get("scratch_size", "4g"))
    root = os.path.join(scratch, "root")
    os.makedirs(root)
    mount(root, root, None, MS_BIND)          # pivot_root needs the new root to be a mount point

    def R(path):  # noqa: N802 - a path inside the new root
        return os.path.join(root, path.lstrip("/"))
    binds = set(cfg.get("binds", []))
    for entry in sorted(os.listdir("/")):
        src = "/" + entry
        dst = R(src)
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        elif not os.path.isdir(src):
            continue
        elif entry in OVERLAID:
            up, wk = os.path.join(scratch, "ov", entry, "up"), os.path.join(scratch, "ov", entry, "wk")
            os.makedirs(up)
            os.makedirs(wk)
            os.makedirs(dst)
            mount("overlay", dst, "overlay", 0, f"lowerdir={src},upperdir={up},workdir={wk}")
        elif entry == "proc":
            os.makedirs(dst)
            mount("proc", dst, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        elif entry == "sys":
            bind(src, dst, rec=True)
        elif entry == "dev":
            build_dev(dst, cfg["gpus"])
        elif entry == "tmp":
            tmpfs(dst, "mode=1777,size=" + cfg.get("tmp_size", "2g"))
        elif entry == "run":
            tmpfs(dst, "mode=755,size=64m")
            os.makedirs(os.path.join(dst, "sshd"), 0o755)
            os.makedirs(os.path.join(dst, "lock"))
            os.chmod(os.path.join(dst, "lock"), 0o1777)
        elif entry == "home":
            tmpfs(dst, "mode=755,size=16m")
        elif entry == "root":
            os.makedirs(dst, 0o700)
        elif entry in EMPTY:
            os.makedirs(dst)
        elif src in binds:
            bind(src, dst, rec=True)

    user = cfg["user"]
    bind(cfg["root_home"], R("/root"))
    if user["name"] != "root":
        bind(cfg["user_home"], R(user["home"]))
    for src in cfg.get("deep_binds", []):     # e.g. a checkout below /root or /home
        bind(src, R(src), rec=True)
    data = cfg["data"]
    os.makedirs(R(data["path"]), exist_ok=True)
    mount("tmpfs", R(data["path"]), "tmpfs", MS_NOSUID | MS_NODEV,
          f"size={data['size']},nr_inodes={data['inodes']},mode=755,uid={user['uid']},gid={user['gid']}")
    if cfg.get("durable"):
        bind(cfg["durable"]["source"], R(cfg["durable"]["path"]))
    for d in cfg.get("dirs", []):
        os.makedirs(R(d), exist_ok=True)
        os.chown(R(d), user["uid"], user["gid"])
    if cfg.get("miniconda"):
        os.makedirs(R("/root/miniconda3/bin"), exist_ok=True)
        if not os.path.lexists(R("/root/miniconda3/bin/python")):
            os.symlink(cfg["python"], R("/root/miniconda3/bin/python"))

    # Hide the fleet's state directory except this instance's own directory (meter log, GPU runtime, ...).
    state = R(cfg["state"])
    os.makedirs(state, exist_ok=True)
    tmpfs(state, "mode=755,size=1m")
    bind(cfg["host_dir"], R(cfg["host_dir"]))

    # /etc edits (all in the overlay's upper layer)
    append(R("/etc/hosts"), f"{cfg['addr']}\t{cfg['name']}\n")
    write_file(R("/etc/hostname"), cfg["name"] + "\n")
    shadow = R("/etc/shadow")
    with open(shadow) as fh:
        lines = fh.read().splitlines()
    fixed = []
    for line in lines:
        parts = line.split(":")
        if parts[0] == "root" and parts[1].startswith("!"):
            parts[1] = "*"            # key login only; "!" would count as a locked account for sshd
        fixed.append(":".join(parts))
    write_file(shadow, "\n".join(fixed) + "\n", 0o640, 0, 0)
    for path, text in cfg.get("etc_append", {}).items():
        append(R(path), text)
    for item in cfg.get("files", []):
        write_file(R(item["path"]), item["content"], item.get("mode", 0o644), item.get("uid", 0), item.get("gid", 0))
    for path in cfg.get("masks", []):
        if os.path.lexists(R(path)):
            os.unlink(R(path))        # in an overlay this leaves a whiteout: the path is gone in the instance
    return root


def pivot(root):
    old = os.path.join(root, ".oldroot")
    os.makedirs(old)
    subprocess.run(["pivot_root", root, old], check=True)
    os.chdir("/")
    if LIBC.umount2(b"/.oldroot", MNT_DETACH) != 0:
        raise OSError(ctypes.get_errno(), "umount /.oldroot")
    os.rmdir("/.oldroot")


def main():
    with open(sys.argv[1]) as fh:
        cfg = json.load(fh)
    root = build_root(cfg)
    pivot(root)
    socket.sethostname(cfg["name"])
    print(f"nsinit: {cfg['name']} ready, exec sshd", file=sys.stderr, flush=True)
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    os.execve(cfg["sshd"], [cfg["sshd"], "-D", "-e", "-f", cfg["sshd_config"]], env)


if __name__ == "__main__":
    main()
