"""The collection installed as a user installs it, run as the README's quick start runs it (issue 30).

The collection is built (``ansible-galaxy collection build``) and installed with ``ansible-galaxy collection install``
into the default collections path of an empty home directory, outside the checkout: once from the tarball, once from
the git repository (``git+file://``, the committed HEAD). There, with no ``ansible.cfg`` of the checkout (``ansible --version`` says
``config file = None``), no ``ANSIBLE_*`` variable, the README's inventory file (its group and host, connected to
a lab box) and, in the project directory, the quick start's ``ansible.cfg`` (the quiet output), the commands of the
README's "Quick start" run exactly as written (read from README.md by
tests/readme_quickstart.py): preflight, launch from the project directory (``launch_src=$PWD``, a small project
there, a queue of two configs), a second experiment (``-e launch_name=exp2``, as the quick start says), patrol and
teardown. It ends with both jobs' results verified in that directory's pulls/ and the meter stopped once. Every
helper file the playbooks need is found inside the installed collection: nothing in the checkout is on any path.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
import yaml

from labhelpers import REPO, needs_root, started_fleet
from test_launch_lab import wait_finished

from ansible_collections.remote_gpu.trainer.tests import readme_quickstart as quickstart

pytestmark = needs_root
VENV_BIN = os.path.dirname(sys.executable)
SHUTDOWN = ["shutdown", "-h", "now"]
# The project a renter launches: the quick start's `python train.py --config <config>` (the lab's AutoDL image has
# its miniconda python, as AutoDL's has), writing its best file where launch keeps it.
TRAIN_PY = """import argparse, os
parser = argparse.ArgumentParser()
parser.add_argument("--config")
args = parser.parse_args()
with open(args.config) as fh:
    lr = fh.read().strip()
for epoch in (1, 2):
    print("epoch %d/2 %s" % (epoch, lr), flush=True)
with open(os.path.join(os.environ["TRAINER_OUTPUT_DIR"], "best.txt"), "w") as fh:
    fh.write("trained with %s\\n" % lr)
"""
CONFIGS = {"configs/a.yaml": "lr: 0.001", "configs/b.yaml": "lr: 0.0003"}


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "1") as lab:
        assert lab.hosts["lab-01"]["lab_platform"] == "autodl"
        yield lab


@pytest.fixture(scope="module")
def tarball(tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(out),
                           REPO], capture_output=True, text=True, check=False, env=user_env(out), cwd=str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (built,) = out.glob("remote_gpu-trainer-*.tar.gz")
    return str(built)


def user_env(home):
    """A renter's shell: the venv's bin on PATH, HOME, and no ANSIBLE_* setting (no ANSIBLE_CONFIG: no checkout)."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("ANSIBLE_") and key not in ("AUTODL_TOKEN", "PYTHONPATH")}
    env.update(HOME=str(home), PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")), ANSIBLE_NOCOLOR="1")
    return env


def expand(word, home, cwd):
    """The shell's expansions the quick start relies on: ``~/`` at a word's start, ``$PWD`` anywhere."""
    if word.startswith("~/"):
        word = os.path.join(str(home), word[2:])
    return word.replace("$PWD", str(cwd))


def outside_checkout(path):
    real = os.path.realpath(str(path))
    assert not (real + "/").startswith(os.path.realpath(REPO) + "/"), real
    return path


class Renter:
    """An empty home directory outside the checkout, where the quick start's commands run."""

    def __init__(self, home, fleet):
        self.home = outside_checkout(home)
        self.cwd = home
        self.env = user_env(home)
        self.fleet = fleet

    def run(self, argv, **kw):
        argv = [expand(word, self.home, self.cwd) for word in argv]
        if argv[0] == "cd":
            self.cwd = pathlib.Path(argv[1])
            return None
        argv[0] = os.path.join(VENV_BIN, argv[0])
        return subprocess.run(argv, capture_output=True, text=True, env=self.env, cwd=str(self.cwd),
                              stdin=subprocess.DEVNULL, timeout=600, check=False, **kw)

    def describe_fleet(self, text):
        """The README's inventory file, its one host connected to the lab box lab-01 (address, port, user, key and
        known_hosts of the lab; the group, the host's name and the layout are the README's)."""
        path, data = quickstart.inventory(text)
        hosts = [(group, host) for group, body in data.items() for host in (body or {}).get("hosts") or {}]
        assert len(hosts) == 1, hosts
        group, host = hosts[0]
        lab = self.fleet.hosts["lab-01"]
        data[group]["hosts"][host] = {key: lab[key] for key in ("ansible_host", "ansible_port", "ansible_user")}
        data.setdefault("all", {}).setdefault("vars", {}).update(self.fleet.inventory["all"]["vars"])
        target = expand(path, self.home, self.cwd)
        with open(target, "w", encoding="utf-8") as fh:
            yaml.safe_dump(data, fh)
        return group, host

    def make_project(self, directory):
        os.makedirs(os.path.join(directory, "configs"), exist_ok=True)
        with open(os.path.join(directory, "train.py"), "w", encoding="utf-8") as fh:
            fh.write(TRAIN_PY)
        for name, body in CONFIGS.items():
            with open(os.path.join(directory, name), "w", encoding="utf-8") as fh:
                fh.write(body + "\n")

    def install(self, source):
        """The quick start's ``ansible-galaxy collection install`` with ``source`` for the README's repository."""
        (argv,) = [argv for argv in quickstart.argvs(quickstart.read()) if argv[:3] == [
            "ansible-galaxy", "collection", "install"]]
        assert argv[3].startswith("git+https://") and len(argv) == 4, argv
        proc = self.run(argv[:3] + [source])
        assert proc.returncode == 0, proc.stdout + proc.stderr
        installed = os.path.join(str(self.home), ".ansible", "collections", "ansible_collections", "remote_gpu",
                                 "trainer")
        assert os.path.isfile(os.path.join(installed, "MANIFEST.json")) and not os.path.islink(installed)
        version = self.run(["ansible", "--version"])
        assert "config file = None" in version.stdout, version.stdout  # no ansible.cfg of the checkout, nor any
        return installed


def shown(proc):
    return "exit %s\n%s\n%s" % (proc.returncode, proc.stdout[-8000:], proc.stderr[-3000:])


def test_quick_start_with_the_installed_tarball_runs_preflight_launch_patrol_teardown(fleet, tarball, tmp_path):
    text = quickstart.read()
    renter = Renter(tmp_path / "home", fleet)
    renter.home.mkdir()
    installed = renter.install(tarball)
    group, host = renter.describe_fleet(text)
    assert os.path.isfile(os.path.join(installed, "playbooks", "group_vars", group + ".yml"))
    open(fleet.hosts["lab-01"]["lab_meter_log"], "w", encoding="utf-8").close()

    runs = {}
    for argv in quickstart.argvs(text):
        if argv[0] == "cd":
            renter.run(argv)
            os.makedirs(renter.cwd, exist_ok=True)
            renter.make_project(renter.cwd)
            # the ansible.cfg the quick start says to put where the commands run (quiet output)
            (renter.cwd / "ansible.cfg").write_text(quickstart.ansible_cfg(text), encoding="utf-8")
            continue
        if argv[0] != "ansible-playbook":
            continue  # the venv and the install: done above
        playbook = argv[argv.index("-i") + 2]
        if playbook == "remote_gpu.trainer.patrol":
            # both experiments finish first: the quick start's queue, and exp2 as the quick start says to start it
            proc = renter.run(runs["remote_gpu.trainer.launch"][0] + ["-e", "launch_name=exp2"])
            assert proc.returncode == 0, shown(proc)
            for job in ("train", "exp2"):
                assert wait_finished(fleet, "lab-01", job)["exit_code"] == 0
        # the lab's items take a second, not the 30 s below which an item is reported too fast
        extra = ["-e", "launch_min_seconds=0"] if playbook == "remote_gpu.trainer.launch" else []
        proc = renter.run(argv + extra)
        runs[playbook] = (argv + extra, proc)
        assert proc.returncode == 0, "%s\n%s" % (" ".join(argv), shown(proc))
        if playbook == "remote_gpu.trainer.preflight":
            # the quick start's ansible.cfg says nothing of pipelining, which Ansible leaves off: the collection's
            # group_vars turn it on, so its probe runs without AnsiballZ in one SSH execution (with pipelining off,
            # through AnsiballZ: a file put on the box, made executable, run and removed)
            verbose = renter.run(argv + ["-vvv"])
            assert verbose.returncode == 0, shown(verbose)
            assert "preflight_probe runs without AnsiballZ" in verbose.stdout, shown(verbose)
            assert "runs through AnsiballZ" not in verbose.stdout and " PUT " not in verbose.stdout, shown(verbose)
    assert list(runs) == ["remote_gpu.trainer.preflight", "remote_gpu.trainer.launch", "remote_gpu.trainer.patrol",
                          "remote_gpu.trainer.teardown"]
    project = renter.cwd
    assert outside_checkout(project) != renter.home

    # what the quick start shows is what the renter sees (digits aside: disk percentages, minutes)
    seen = {quickstart.masked(line) for run in runs.values() for line in run[1].stdout.splitlines()}
    for sample in quickstart.outputs(text):
        assert [line for line in sample if quickstart.masked(line) not in seen] == [], sample

    preflight = runs["remote_gpu.trainer.preflight"][1]
    assert "preflight: 1 host(s): PASS 1" in preflight.stdout, shown(preflight)
    assert json.loads((project / "reports" / "preflight.json").read_text())["hosts"][0]["host"] == host
    launch = runs["remote_gpu.trainer.launch"][1]
    assert "%s: started train under tmux" % host in launch.stdout, shown(launch)
    # the assignment table is read as a table: each item on a line of its own, not a JSON string with \n in it
    for item, config in enumerate(CONFIGS):
        row = r"^\s*%03d\s+%s\s+%s\s*$" % (item, re.escape(host), re.escape(config))
        assert re.search(row, launch.stdout, re.M), shown(launch)
    # the quick start's ansible.cfg took effect: the collection's quiet output, no skipped task or include lines
    for argv, proc in runs.values():
        noise = [row for row in proc.stdout.splitlines() if row.startswith(("skipping:", "included:"))]
        assert noise == [], "%s\n%s" % (" ".join(argv), shown(proc))
    # the code landed on the box without the renter's reports/ (preflight wrote it in the project directory)
    code = fleet.ssh("lab-01", "cd /root/autodl-tmp/code && ls train exp2").stdout.split()
    assert "train.py" in code and "configs" in code and "reports" not in code, code
    patrol = runs["remote_gpu.trainer.patrol"][1]
    assert "patrol: 1 host(s): PASS 1" in patrol.stdout, shown(patrol)
    line = [row for row in patrol.stdout.splitlines() if row.startswith(host + " PASS ")]
    assert line and "exp2 DONE items 2/2" in line[0] and "train DONE items 2/2" in line[0], shown(patrol)

    # the results of both jobs, verified, in the project directory's pulls/; the meter stopped once
    for run_id in ("train", "exp2"):
        pulled = project / "pulls" / host / run_id
        verified = json.loads((pulled / "PULL_VERIFIED.json").read_text())
        assert (verified["host"], verified["run_id"]) == (host, run_id)
        for item, config in enumerate(CONFIGS.values()):
            best = pulled / "data" / "durable" / ("%03d" % item) / "best.txt"
            assert best.read_text() == "trained with %s\n" % config
    receipt = json.loads((project / "pulls" / host / "TEARDOWN_RECEIPT.json").read_text())
    assert receipt["acted"] is True and sorted(receipt["jobs"]) == ["exp2", "train"]
    assert [entry["argv"] for entry in fleet.meter("lab-01")] == [SHUTDOWN]


def test_installed_from_the_git_repository_runs_preflight_by_fqcn(fleet, tmp_path):
    head = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    if head.returncode != 0:
        pytest.skip("the checkout is not a git repository: %s" % head.stderr.strip())
    renter = Renter(tmp_path / "home", fleet)
    renter.home.mkdir()
    renter.install("git+file://%s,%s" % (REPO, head.stdout.strip()))
    text = quickstart.read()
    host = renter.describe_fleet(text)[1]
    (preflight,) = [argv for name, argv in quickstart.playbook_runs(text) if name == "remote_gpu.trainer.preflight"]
    proc = renter.run(preflight)
    assert proc.returncode == 0, shown(proc)
    assert "preflight: 1 host(s): PASS 1" in proc.stdout and (renter.home / "reports" / "preflight.json").is_file()
    assert host in proc.stdout
