"""Helpers to run the collection's playbooks for real with ansible-playbook, against localhost or the lab."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import struct
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
VENV_BIN = pathlib.Path(sys.executable).parent
# this machine, with the local profile
LOCAL_INVENTORY = REPO / "inventories" / "local" / "hosts.yml"


def _load_fake_api():
    """tests/lab/providers/fake_api.py, the loopback fakes of the providers' APIs (a file, not a package)."""
    spec = importlib.util.spec_from_file_location("fake_api", REPO / "tests" / "lab" / "providers" / "fake_api.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fake_api = _load_fake_api()


def unwrap(value):
    """ansible-inventory --list marks plugin strings unsafe ({"__ansible_unsafe": s}); the plain value."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {k: unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    return value


def safetensors_bytes(values=(1.0, 2.0, 3.0, 4.0)):
    """A small, loadable safetensors file: one F32 tensor of ``values``."""
    data = struct.pack("<%df" % len(values), *values)
    header = json.dumps({"w": {"dtype": "F32", "shape": [len(values)], "data_offsets": [0, len(data)]}}).encode()
    return struct.pack("<Q", len(header)) + header + data


def ansible_env(**extra):
    env = dict(os.environ)
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               PATH="%s:%s" % (VENV_BIN, env.get("PATH", "")), LC_ALL="C.UTF-8",
               # a core that meta/runtime.yml's requires_ansible does not admit fails, instead of a warning
               ANSIBLE_COLLECTIONS_ON_ANSIBLE_VERSION_MISMATCH="error")
    env.update(extra)
    return env


def run_playbook(playbook, inventory, *args, cwd=None, **env):
    """ansible-playbook with the repo's ansible.cfg; returns CompletedProcess (text)."""
    cmd = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), str(playbook), *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd or REPO, env=ansible_env(**env),
                          timeout=600, check=False)
