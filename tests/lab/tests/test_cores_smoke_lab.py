"""The lab smoke test of an ansible-core lane (docs/CONTRIBUTING.md, "Every supported ansible-core"): preflight,
launch, patrol and teardown over a two-host lab, run with the ansible-core of the Python that runs this test (make
test runs it with .venv-2.20 and .venv-2.21, through nox) and ANSIBLE_COLLECTIONS_ON_ANSIBLE_VERSION_MISMATCH=error,
so that a requires_ansible that does not admit the core fails every playbook. The probes run without AnsiballZ as
the shipped ansible.cfg has it (pipelining on)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from labhelpers import REPO, needs_root, started_fleet
from lab_teardown_support import checkpoint
from test_launch_lab import wait_finished

VENV_BIN = os.path.dirname(sys.executable)
TRAIN_SH = r"""#!/usr/bin/env bash
for e in 1 2; do echo "epoch $e/2"; sleep 0.1; done
cp ckpt/best.safetensors "$TRAINER_OUTPUT_DIR/best.safetensors"
"""
HOST = "lab-01"


def core_env(**extra):
    return dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                ANSIBLE_COLLECTIONS_ON_ANSIBLE_VERSION_MISMATCH="error",
                PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")), **extra)


def core_version():
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible"), "--version"], capture_output=True, text=True,
                          env=core_env(), timeout=60, check=True)
    return proc.stdout.split("[core ", 1)[1].split("]", 1)[0]


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "2") as lab:
        yield lab


def playbook(fleet, cwd, name, *args):
    return subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", fleet.inventory_path,
                           os.path.join(REPO, "playbooks", name), *args], capture_output=True, text=True,
                          env=core_env(), cwd=str(cwd), stdin=subprocess.DEVNULL, timeout=600, check=False)


def shown(proc):
    return "ansible-core %s:\n%s\n%s" % (core_version(), proc.stdout[-6000:], proc.stderr[-3000:])


@needs_root
def test_preflight_launch_patrol_teardown_on_this_core(fleet, tmp_path):
    laptop, src = tmp_path / "laptop", tmp_path / "src"
    (src / "ckpt").mkdir(parents=True)
    laptop.mkdir()
    (src / "train.sh").write_text(TRAIN_SH)
    (src / "ckpt" / "best.safetensors").write_bytes(checkpoint("smoke"))

    proc = playbook(fleet, laptop, "preflight.yml")
    assert proc.returncode == 0, shown(proc)
    rows = {row["host"]: row for row in json.loads((laptop / "reports" / "preflight.json").read_text())["hosts"]}
    assert sorted(rows) == sorted(fleet.hosts) and "probe_failed" not in proc.stdout, shown(proc)

    proc = playbook(fleet, laptop, "launch.yml", "-l", HOST, "-e", "launch_src=%s" % src,
                    "-e", "launch_command='bash train.sh'", "-e", json.dumps({"launch_min_seconds": 0}))
    assert proc.returncode == 0, shown(proc)
    assert wait_finished(fleet, HOST, "train")["exit_code"] == 0

    proc = playbook(fleet, laptop, "patrol.yml", "-l", HOST)
    assert proc.returncode == 0, shown(proc)
    (row,) = json.loads((laptop / "reports" / "patrol.json").read_text())["hosts"]
    assert row["host"] == HOST and row["verdict"] == "PASS", row["line"]

    proc = playbook(fleet, laptop, "teardown.yml", "-l", HOST, "-e", "teardown_approve=%s" % HOST)
    assert proc.returncode == 0, shown(proc)
    receipt = json.loads((laptop / "pulls" / HOST / "TEARDOWN_RECEIPT.json").read_text())
    assert (receipt["host"], receipt["verb"], receipt["jobs"]) == (HOST, "power_off", ["train"])
    assert (laptop / "pulls" / HOST / "train" / "data" / "durable").is_dir()
    assert [line["argv"] for line in fleet.meter(HOST)] == [["shutdown", "-h", "now"]]


def test_a_collection_this_core_does_not_admit_is_refused(tmp_path):
    # the check above is live: with the same setting, a collection whose requires_ansible excludes this core fails
    meta = tmp_path / "ansible_collections" / "smoke" / "old" / "meta"
    meta.mkdir(parents=True)
    (meta / "runtime.yml").write_text('---\nrequires_ansible: "<2.19.0"\n')
    (meta.parent / "plugins" / "modules").mkdir(parents=True)
    (meta.parent / "plugins" / "modules" / "hello.py").write_text(
        "#!/usr/bin/python\nimport json\nprint(json.dumps({'changed': False}))\n")
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible"), "localhost", "-c", "local", "-m", "smoke.old.hello"],
                          capture_output=True, text=True, env=core_env(ANSIBLE_COLLECTIONS_PATH=str(tmp_path)),
                          timeout=120, check=False)
    assert proc.returncode != 0 and "Collection smoke.old does not support Ansible version" in proc.stdout + \
        proc.stderr, proc.stdout + proc.stderr
