"""AutoDL's no-GPU mode (无卡模式) on the lab fleet: environment-only preflight and launch, and pip_filtered's lockfiles.

Both boxes are AutoDL boxes of the ``no-driver`` scenario: nvidia-smi answers as the real one does on a box without
the NVIDIA driver (the real capture ``errors/no-driver__nvidia-smi-has-failed__exit9.txt``, exit 9). lab-01 is
declared GPU-less (``trainer_gpu_expected: false``, in an inventory of its own next to the lab's); lab-02 is not,
so its missing GPU must still FAIL.

lab-01 gets what an image has: a Python environment (a venv of the system Python, ``/root/imgenv``) with a torch
2.5.1 distribution in it (a stand-in wheel: the package and its metadata, nothing of torch's code), and a directory
of wheels (``/root/wheels``) that pip installs from with ``--no-index``. The project's lockfiles pin torch 2.0.0,
which is nowhere to be found: pip succeeds only when the pin is filtered out, and the image's torch must stay.
"""
from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import zipfile

import pytest

from labhelpers import REPO, needs_root, started_fleet

pytestmark = needs_root
VENV_BIN = os.path.join(REPO, ".venv", "bin")
ENV_PYTHON = "/root/imgenv/bin/python"
# a CPU data-preparation step: it says where it ran and leaves its output (best.pt, what launch syncs)
TRAIN_SH = ("#!/usr/bin/env bash\necho \"$TRAINER_ITEM $*\" >> \"$HOME/no-gpu-runs.log\"\n"
            "printf prepared > \"$TRAINER_OUTPUT_DIR/best.pt\"\n")


def wheel(name, version):
    """A minimal pure-Python wheel -> (file name, bytes)."""
    dist = "%s-%s.dist-info" % (name, version)
    files = {"%s/__init__.py" % name: ("__version__ = %r\n" % version).encode(),
             dist + "/METADATA": ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version)).encode(),
             dist + "/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = ["%s,sha256=%s,%d" % (path, base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                                   .decode(), len(data)) for path, data in files.items()]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(dist + "/RECORD", "\n".join(record + [dist + "/RECORD,,"]) + "\n")
    return "%s-%s-py3-none-any.whl" % (name, version), buf.getvalue()


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "2", "--scenario", "lab-01=no-driver",
                       "--scenario", "lab-02=no-driver") as lab:
        yield lab


@pytest.fixture(scope="module")
def box(fleet, tmp_path_factory):
    """lab-01's image environment and wheels -> {name: sha256 of its wheel} and the controller's files."""
    root = os.path.join(fleet.state, "hosts", "lab-01", "root")  # /root inside lab-01
    os.makedirs(os.path.join(root, "wheels"))
    digests = {}
    for name, version in (("torch", "2.5.1"), ("tinypkg", "1.0"), ("lockpkg", "2.0")):
        filename, data = wheel(name, version)
        with open(os.path.join(root, "wheels", filename), "wb") as fh:
            fh.write(data)
        digests[name] = hashlib.sha256(data).hexdigest()
    fleet.ssh("lab-01", "/usr/bin/python3 -m venv /root/imgenv && %s -m pip install -q --no-index --find-links "
                        "/root/wheels torch==2.5.1" % ENV_PYTHON, timeout=180)
    files = tmp_path_factory.mktemp("controller")
    (files / "inventory.yml").write_text("all:\n  hosts:\n    lab-01:\n      trainer_gpu_expected: false\n")
    src = files / "src"
    src.mkdir()
    (src / "train.sh").write_text(TRAIN_SH)
    # pip-compile --generate-hashes / uv export style: each entry continued over backslashed lines, with comments
    (files / "requirements.txt").write_text(
        "# locked with hashes\n"
        "tinypkg==1.0 \\\n    --hash=sha256:%s\n    # via -r requirements.in\n"
        "torch==2.0.0 \\\n    --hash=sha256:%s\n    # via -r requirements.in\n" % (digests["tinypkg"], "0" * 64))
    (files / "pylock.toml").write_text(
        'lock-version = "1.0"\ncreated-by = "test_no_gpu_lab"\n\n'
        '[[packages]]\nname = "lockpkg"\nversion = "2.0"\n'
        'wheels = [{url = "https://files.invalid/lockpkg-2.0-py3-none-any.whl", hashes = {sha256 = "%s"}}]\n\n'
        '[[packages]]\nname = "torch"\nversion = "2.0.0"\n'
        'wheels = [{url = "https://files.invalid/torch-2.0.0-py3-none-any.whl", hashes = {sha256 = "%s"}}]\n'
        % (digests["lockpkg"], "0" * 64))
    return files


def playbook(fleet, box, name, *args, variables=None):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))
    return subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", fleet.inventory_path,
                           "-i", str(box / "inventory.yml"), os.path.join(REPO, "playbooks", name),
                           "-e", json.dumps(variables or {}), *args],
                          capture_output=True, text=True, env=env, timeout=600, check=False)


def installed(fleet, *names):
    code = ("import json, sys, importlib.metadata as m\nout = {}\nfor n in sys.argv[1:]:\n    try:\n"
            "        out[n] = m.version(n)\n    except m.PackageNotFoundError:\n        out[n] = None\n"
            "print(json.dumps(out))")
    return json.loads(fleet.ssh("lab-01", "%s -c '%s' %s" % (ENV_PYTHON, code, " ".join(names))).stdout)


def test_preflight_passes_the_declared_gpu_less_box_and_fails_the_other(fleet, box, tmp_path):
    report = tmp_path / "preflight.json"
    proc = playbook(fleet, box, "preflight.yml", "-e", "preflight_sample_seconds=0",
                    variables={"preflight_report_path": str(report), "preflight_dashboard": False})
    rows = {row["host"]: row for row in json.loads(report.read_text())["hosts"]}
    assert proc.returncode != 0, proc.stdout[-4000:]  # lab-02 fails the run
    assert rows["lab-01"]["verdict"] == "PASS", rows["lab-01"]
    assert rows["lab-01"]["gpus"] == "no GPU: environment-only mode"
    absent = [f for f in rows["lab-01"]["findings"] if f["code"] == "no_gpu_environment_only"]
    assert absent and absent[0]["level"] == "INFO" and absent[0]["error"] == "no_driver"
    assert absent[0]["message"].startswith("no GPU: environment-only mode")
    # the same box, not declared GPU-less: a missing GPU is the FAIL it always was
    assert rows["lab-02"]["verdict"] == "FAIL" and rows["lab-02"]["top_finding"].startswith("driver_unavailable")
    assert "fatal: [lab-02]" in proc.stdout and "fatal: [lab-01]" not in proc.stdout
    assert "no GPU: environment-only mode" in proc.stdout[proc.stdout.index("HOST "):]


def test_launch_applies_the_environment_and_starts_the_queue_only_when_asked(fleet, box):
    common = {"launch_src": str(box / "src"), "launch_command": "bash train.sh", "launch_queue": ["a"],
              "pip_filtered_interpreter": ENV_PYTHON,
              "pip_filtered_extra_args": ["--no-index", "--find-links", "/root/wheels"]}
    # a hashed requirements file: torch's entry goes with its hash, tinypkg keeps its own (pip's hash mode)
    proc = playbook(fleet, box, "launch.yml", "-l", "lab-01",
                    variables=dict(common, pip_filtered_requirements=str(box / "requirements.txt")))
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    out = " ".join(proc.stdout.split())
    assert "filtered out of requirements.txt: torch==2.0.0; the image" in out and "stays (torch 2.5.1)" in out, out
    assert installed(fleet, "torch", "tinypkg") == {"torch": "2.5.1", "tinypkg": "1.0"}
    assert ("lab-01: no GPU: environment-only mode: the environment is applied, the queue is not started (items 000;"
            in out), out
    assert fleet.ssh("lab-01", "ls ~/.trainer/jobs/train/status.json ~/no-gpu-runs.log", check=False).returncode != 0
    assert fleet.ssh("lab-01", "test -f /root/autodl-tmp/code/train/train.sh").returncode == 0  # the code is there

    # a pylock.toml, and launch_no_gpu_ok: the queue runs on the CPU (data preparation); the other environment
    # roles did their part above
    proc = playbook(fleet, box, "launch.yml", "-l", "lab-01",
                    variables=dict(common, pip_filtered_requirements=str(box / "pylock.toml"), launch_no_gpu_ok=True,
                                   launch_roles=["pip_filtered"]))
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    out = " ".join(proc.stdout.split())
    assert "filtered out of pylock.toml: torch==2.0.0; the image" in out and "stays (torch 2.5.1)" in out, out
    assert installed(fleet, "torch", "lockpkg") == {"torch": "2.5.1", "lockpkg": "2.0"}
    assert "environment-only mode: the environment is applied" not in out
    status = None
    for _attempt in range(120):
        status = fleet.ssh("lab-01", "cat ~/.trainer/jobs/train/status.json 2>/dev/null || true").stdout
        if status.strip():
            break
        subprocess.run(["sleep", "0.5"], check=False)
    log = fleet.ssh("lab-01", "tail -40 ~/.trainer/jobs/train/job.log", check=False).stdout
    assert json.loads(status)["exit_code"] == 0, log
    assert fleet.ssh("lab-01", "cat ~/no-gpu-runs.log").stdout == "000 a\n"
