"""Support for the teardown and checked_sync lab tests: a private fleet, SSH with bytes, Ansible runs, real
checkpoints built by hand, and snapshots of a result root on a box.

Named uniquely (not ``conftest``) so that it never collides with another test tree's helpers.
"""
from __future__ import annotations

import collections
import contextlib
import errno
import hashlib
import io
import json
import os
import pickle
import socket
import struct
import subprocess
import sys
import zipfile

LAB = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLEET = os.path.join(LAB, "fleet")
REPO = os.path.dirname(os.path.dirname(LAB))
VENV_BIN = os.path.dirname(sys.executable)
DEFAULT_NET = "127.0.0"
if LAB not in sys.path:
    sys.path.insert(0, LAB)

from fleetlib.inventory import without_control_path  # noqa: E402  (the lab's own, beside the inventory it reads)


def fill_inodes(mount, limit):
    """Create empty files under ``mount``/filler-inodes until the FS has no free inode left (ENOSPC; ``limit`` is
    the FS's inode cap) -> that directory (None when not even it could be made); remove it to free them."""
    directory = os.path.join(mount, "filler-inodes")
    try:
        os.mkdir(directory)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
        return None
    for index in range(limit + 1):
        try:
            os.close(os.open(os.path.join(directory, "f%03d" % index), os.O_CREAT | os.O_WRONLY, 0o644))
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
            break
    assert os.statvfs(mount).f_ffree == 0
    return directory


def listening(addr, port=22):
    with socket.socket() as sock:
        sock.settimeout(0.3)
        return sock.connect_ex((addr, port)) == 0


class LabFleet:
    """A fleet started with ``tests/lab/fleet up`` in its own state directory, on ``LAB_NET`` when set.

    ``LAB_NET`` and ``LAB_STATE_DIR`` are taken from the environment when set (``LAB_STATE_DIR`` then is a parent:
    each test module gets ``<LAB_STATE_DIR>/<name>``), otherwise the default net and ``fallback_state``.
    """

    def __init__(self, name, fallback_state, size, *args):
        parent = os.environ.get("LAB_STATE_DIR")
        self.state = os.path.join(os.path.abspath(parent), name) if parent else str(fallback_state)
        self.net = os.environ.get("LAB_NET") or DEFAULT_NET
        self.env = dict(os.environ, LAB_STATE_DIR=self.state, LAB_NET=self.net)
        self.size = size
        self.args = list(args)
        self.inventory_path = None
        self.hosts = {}
        self.up_output = ""

    def addresses(self):
        return ["%s.%d" % (self.net, 10 + i) for i in range(1, self.size + 1)]

    def busy(self):
        return [addr for addr in self.addresses() if listening(addr)]

    def fleet(self, *args, check=True):
        proc = subprocess.run([FLEET, *args], env=self.env, capture_output=True, text=True, timeout=120, check=False)
        if check and proc.returncode != 0:
            raise AssertionError("fleet %s -> %d\n%s\n%s" % (" ".join(args), proc.returncode, proc.stdout, proc.stderr))
        return proc

    def up(self):
        import yaml  # pylint: disable=import-outside-toplevel
        os.makedirs(self.state, exist_ok=True)
        proc = self.fleet("up", "--size", str(self.size), *self.args)
        self.up_output = proc.stdout
        self.inventory_path = proc.stdout.strip().splitlines()[-1]
        with open(self.inventory_path, encoding="utf-8") as handle:
            inventory = yaml.safe_load(handle)
        allvars = inventory["all"]["vars"]
        self.key = allvars["ansible_ssh_private_key_file"]
        self.common = without_control_path(allvars["ansible_ssh_common_args"])
        self.hosts = inventory["all"]["children"]["lab"]["hosts"]
        return self

    def down(self):
        return self.fleet("down", check=False)

    @property
    def record(self):
        with open(os.path.join(self.state, "fleet.json"), encoding="utf-8") as handle:
            return json.load(handle)

    def region_mount(self, host):
        """The host-namespace mount of the durable FS that ``host`` sees at its durable dir."""
        hv = self.hosts[host]
        return os.path.join(self.state, "regions", "%s-%s" % (hv["lab_platform"], hv["lab_region"]))

    def init_pid(self, host):
        return [inst for inst in self.record["instances"] if inst["name"] == host][0]["init"]["pid"]

    # ----------------------------------------------------------------------------------------------- ssh

    def ssh(self, host, cmd, data=None, check=True, timeout=120):
        hv = self.hosts[host]
        argv = (["ssh", "-i", self.key, "-p", str(hv["ansible_port"]), "-o", "BatchMode=yes", "-o",
                 "ControlPath=none", "-o", "ConnectTimeout=10"] + self.common +
                ["%s@%s" % (hv["ansible_user"], hv["ansible_host"]), cmd])
        proc = subprocess.run(argv, input=data, capture_output=True, timeout=timeout, check=False,
                              stdin=None if data is not None else subprocess.DEVNULL)
        if check and proc.returncode != 0:
            raise AssertionError("ssh %s %r -> %d\n%s\n%s" % (
                host, cmd, proc.returncode, proc.stdout.decode(), proc.stderr.decode()))
        return proc

    def put(self, host, path, data):
        """Write ``data`` (bytes) to ``path`` on the box through SSH (parents created)."""
        self.ssh(host, "mkdir -p \"$(dirname '%s')\" && cat > '%s'" % (path, path), data=data)

    def snapshot(self, host, root):
        """{relative path: (sha256, size, mtime_ns)} of every file under ``root`` on the box, read over SSH."""
        script = ("import hashlib,json,os,sys\nroot=sys.argv[1]\nout={}\n"
                  "for d,_s,names in os.walk(root):\n"
                  "  for n in names:\n"
                  "    p=os.path.join(d,n); st=os.lstat(p)\n"
                  "    out[os.path.relpath(p,root)]=[hashlib.sha256(open(p,'rb').read()).hexdigest(),"
                  "st.st_size,st.st_mtime_ns]\n"
                  "print(json.dumps(out))\n")
        proc = self.ssh(host, "python3 - '%s'" % root, data=script.encode())
        return {k: tuple(v) for k, v in json.loads(proc.stdout).items()}

    # ----------------------------------------------------------------------------------------- meter log

    def meter(self, host):
        try:
            with open(self.hosts[host]["lab_meter_log"], encoding="utf-8") as handle:
                return [json.loads(line) for line in handle if line.strip()]
        except FileNotFoundError:
            return []

    def clear_meters(self):
        for host in self.hosts:
            with open(self.hosts[host]["lab_meter_log"], "w", encoding="utf-8"):
                pass

    # ------------------------------------------------------------------------------------------- ansible

    def ansible_env(self, **extra):
        env = dict(os.environ)
        env.update(ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
                   PATH="%s:%s" % (VENV_BIN, env.get("PATH", "")), LC_ALL="C.UTF-8")
        env.update(extra)
        return env

    def playbook(self, playbook, *args):
        """ansible-playbook over this fleet's inventory; stdin is /dev/null, so a prompt never waits."""
        argv = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", self.inventory_path, playbook, *args]
        return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=self.ansible_env(), timeout=600,
                              stdin=subprocess.DEVNULL, check=False)

    def module_popen(self, host, module, args):
        """``ansible HOST -m MODULE -a JSON`` (JSON result format), started in the background."""
        argv = [os.path.join(VENV_BIN, "ansible"), "-i", self.inventory_path, host, "-m", module,
                "-a", json.dumps(args)]
        env = self.ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="json")
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                                env=env, stdin=subprocess.DEVNULL)


def module_result(proc, host, timeout=300):
    """(rc, the module's result dict for ``host``, raw stdout+stderr) of a finished ``module_popen``."""
    out, err = proc.communicate(timeout=timeout)
    try:  # the minimal callback: "HOST | STATUS => {json}"
        start = out.index("%s | " % host)
        status = out[start + len(host) + 3:out.index(" => ", start)]
        result = json.JSONDecoder().raw_decode(out[out.index("{", start):])[0]
        result.setdefault("failed", status.startswith(("FAILED", "UNREACHABLE")))  # the callback drops the key
    except ValueError as exc:
        raise AssertionError("no json result (%s)\n%s\n%s" % (exc, out, err)) from exc
    return proc.returncode, result, out + err


@contextlib.contextmanager
def started(fleet):
    """Bring the fleet up; it always comes down, also when a test or ``up`` itself fails."""
    try:
        yield fleet.up()
    finally:
        fleet.down()


# --------------------------------------------------------------------------------------- checkpoints


def safetensors_bytes(tensors=None):
    """A real safetensors file by hand: u64 LE header length, JSON header, data area (tensors tile it)."""
    tensors = tensors or collections.OrderedDict([
        ("embed.weight", ("F32", [16, 8], struct.pack("<128f", *[i / 7.0 for i in range(128)]))),
        ("head.bias", ("F16", [4], b"\x00\x3c\x00\x40\x00\x42\x00\x44")),
    ])
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    raw_header = json.dumps(header).encode("utf-8")
    return struct.pack("<Q", len(raw_header)) + raw_header + data


class _Storage:
    def __init__(self, key, numel):
        self.key = key
        self.numel = numel


class _Tensor:
    def __init__(self, storage, size, rebuild):
        self.storage = storage
        self.size = size
        self.rebuild = rebuild

    def __reduce_ex__(self, protocol):
        return self.rebuild, (self.storage, 0, self.size, (self.size[1], 1), False, collections.OrderedDict())


def torch_zip_bytes(epoch=7):
    """The PyTorch zip layout (torch.save since 1.6) without torch: archive/data.pkl with storages as persistent
    ids ``('storage', torch.FloatStorage, key, 'cpu', numel)``, archive/data/<key>, version, byteorder."""
    import types  # pylint: disable=import-outside-toplevel
    torch, utils = types.ModuleType("torch"), types.ModuleType("torch._utils")
    float_storage = type("FloatStorage", (), {"__module__": "torch"})
    torch.FloatStorage = float_storage

    def _rebuild_tensor_v2(*args):
        return args

    _rebuild_tensor_v2.__module__ = "torch._utils"
    _rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2  # pylint: disable=protected-access
    torch._utils = utils  # pylint: disable=protected-access
    saved = {name: sys.modules.get(name) for name in ("torch", "torch._utils")}
    if saved["torch"] is not None:
        raise RuntimeError("real torch is imported; build this checkpoint with torch.save instead")
    sys.modules["torch"], sys.modules["torch._utils"] = torch, utils
    try:
        weight, bias = _Storage("0", 6), _Storage("1", 2)
        state = collections.OrderedDict([("fc.weight", _Tensor(weight, (2, 3), _rebuild_tensor_v2)),
                                         ("fc.bias", _Tensor(bias, (1, 2), _rebuild_tensor_v2))])
        buf = io.BytesIO()
        pickler = pickle.Pickler(buf, protocol=2)

        def persistent_id(obj):
            return ("storage", float_storage, obj.key, "cpu", obj.numel) if isinstance(obj, _Storage) else None

        pickler.persistent_id = persistent_id
        pickler.dump({"model": state, "epoch": epoch, "best": 0.25})
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", buf.getvalue())
        archive.writestr("archive/byteorder", "little")
        archive.writestr("archive/data/0", struct.pack("<6f", *range(6)))
        archive.writestr("archive/data/1", struct.pack("<2f", 1.0, 2.0))
        archive.writestr("archive/version", "3\n")
    return out.getvalue()


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def checkpoint(arg):
    """A distinct real safetensors file per queue argument."""
    seed = sum(arg.encode())
    return safetensors_bytes(collections.OrderedDict([
        ("head.weight", ("F32", [4], struct.pack("<4f", *[seed + i / 3.0 for i in range(4)])))]))
