"""Launch and patrol under ansible-runner, the engine of AWX and Automation Platform (issue 30, item 4).

ansible-runner's Python API (``ansible_runner.run``) with its private data directory laid out as AWX lays it out:
``project/`` holds the job templates' playbooks (each one ``import_playbook`` of the collection's playbook by FQCN),
``inventory/hosts.yml`` the fleet, ``env/envvars`` and ``env/extravars`` the settings, ``artifacts/<ident>/`` what
runner records. The collection is installed as the execution environment's build installs it (ansible-builder's
galaxy stage): the built tarball where ``execution-environment.yml`` expects it (``build/``, in a build directory
that stands for the image's ``/build``), the ``dependencies.galaxy`` of that file as ``requirements.yml``, and
``ansible-galaxy collection install -r requirements.yml --collections-path`` run there, into the private data
directory's ``collections/`` (the image's ``/usr/share/ansible/collections``), which ``ANSIBLE_COLLECTIONS_PATH``
in ``env/envvars`` names; no ``ansible.cfg``, nothing from the checkout. The events (``playbook_on_start``, a
``runner_on_ok`` per task and host, ``playbook_on_stats``) and the artifacts (``rc``, ``status``, ``stdout``,
``command``, ``job_events/``) are checked, and patrol's report, written where the job template says.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from labhelpers import REPO, needs_root, started_fleet
from test_launch_lab import wait_finished

ansible_runner = pytest.importorskip(
    "ansible_runner", reason="ansible-runner is not installed in this venv: `make setup` installs requirements-dev.txt")

pytestmark = needs_root
VENV_BIN = os.path.dirname(sys.executable)
TRAIN_SH = ("#!/usr/bin/env bash\nfor e in 1 2 3; do echo \"epoch $e/3 $1\"; done\n"
            "echo \"$1\" > \"$TRAINER_OUTPUT_DIR/best.txt\"\n")


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "1") as lab:
        yield lab


@pytest.fixture
def private_data_dir(fleet, tmp_path, monkeypatch):
    """AWX's layout, with the collection installed into ``collections/`` as the EE's build does; the test process's
    environment (which runner passes on to ansible-playbook) holds no ANSIBLE_* setting and a home of its own."""
    for key in [key for key in os.environ if key.startswith("ANSIBLE_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", "%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))
    monkeypatch.delenv("AUTODL_TOKEN", raising=False)
    (tmp_path / "home").mkdir()
    pdd = tmp_path / "pdd"
    for sub in ("project", "inventory", "env", "collections"):
        (pdd / sub).mkdir(parents=True)
    # ansible-builder's galaxy stage: COPY _build /build; WORKDIR /build; ansible-galaxy collection install -r
    # requirements.yml --collections-path /usr/share/ansible/collections
    stage = tmp_path / "ee-build"
    (stage / "build").mkdir(parents=True)
    build = subprocess.run([os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "build", "--output-path",
                            str(stage / "build"), REPO], capture_output=True, text=True, check=False, cwd=str(tmp_path))
    assert build.returncode == 0, build.stdout + build.stderr
    with open(os.path.join(REPO, "execution-environment.yml"), encoding="utf-8") as fh:
        galaxy = yaml.safe_load(fh)["dependencies"]["galaxy"]
    (stage / "requirements.yml").write_text(yaml.safe_dump(galaxy))
    install = subprocess.run([os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "install", "-r",
                              "requirements.yml", "--collections-path", str(pdd / "collections")],
                             capture_output=True, text=True, check=False, cwd=str(stage))
    assert install.returncode == 0, install.stdout + install.stderr
    for name in ("launch", "patrol"):
        (pdd / "project" / ("%s.yml" % name)).write_text(
            "---\n- name: The collection's %s\n  ansible.builtin.import_playbook: remote_gpu.trainer.%s\n" % (name, name))
    (pdd / "project" / "code").mkdir()
    (pdd / "project" / "code" / "train.sh").write_text(TRAIN_SH)
    with open(fleet.inventory_path, encoding="utf-8") as fh:
        (pdd / "inventory" / "hosts.yml").write_text(fh.read())
    (pdd / "env" / "envvars").write_text(yaml.safe_dump({
        "ANSIBLE_COLLECTIONS_PATH": str(pdd / "collections"), "ANSIBLE_NOCOLOR": "1"}))
    return pdd


def runner_run(pdd, ident, playbook, extravars):
    (pdd / "env" / "extravars").write_text(yaml.safe_dump(extravars))
    return ansible_runner.run(private_data_dir=str(pdd), playbook=playbook, ident=ident, quiet=True)


def ok_results(events, host):
    """{task action: its result} of the tasks that ran ok on ``host``, from runner's events."""
    return {event["event_data"].get("task_action"): event["event_data"].get("res") for event in events
            if event["event"] == "runner_on_ok" and event["event_data"].get("host") == host}


def test_launch_and_patrol_through_ansible_runner(fleet, private_data_dir):
    pdd = private_data_dir
    launch = runner_run(pdd, "launch-1", "launch.yml", {
        "launch_src": str(pdd / "project" / "code"), "launch_command": "bash train.sh",
        "launch_queue": ["a", "b"], "launch_min_seconds": 0})
    shown = (pdd / "artifacts" / "launch-1" / "stdout").read_text()[-6000:]
    assert (launch.status, launch.rc) == ("successful", 0), shown
    assert wait_finished(fleet, "lab-01", "train")["exit_code"] == 0

    report = pdd / "artifacts" / "patrol-report.json"
    patrol = runner_run(pdd, "patrol-1", "patrol.yml", {"patrol_report_path": str(report)})
    artifacts = pdd / "artifacts" / "patrol-1"
    stdout = (artifacts / "stdout").read_text()
    assert (patrol.status, patrol.rc) == ("successful", 0), stdout[-6000:]

    # the artifacts runner leaves for AWX: rc, status, the command, the output, one file per event
    assert (artifacts / "rc").read_text().strip() == "0"
    assert (artifacts / "status").read_text().strip() == "successful"
    command = json.loads((artifacts / "command").read_text())
    assert command["command"][0].endswith("ansible-playbook") and "patrol.yml" in command["command"]
    assert command["cwd"] == str(pdd / "project")
    assert "lab-01 PASS train DONE items 2/2 epoch 3/3 exit 0" in stdout
    assert "patrol: 1 host(s): PASS 1" in stdout
    assert len(list((artifacts / "job_events").glob("*.json"))) == len(list(patrol.events))

    # the events: the play starts, the probe and the report run for lab-01, the stats count no failure
    events = list(patrol.events)
    kinds = [event["event"] for event in events]
    assert kinds[0] == "playbook_on_start" and "playbook_on_stats" in kinds
    results = ok_results(events, "lab-01")
    probe = results.get("remote_gpu.trainer.job_status")
    assert probe is not None and "remote_gpu.trainer.fleet_report" in results, sorted(results)
    assert [job["name"] for job in probe["jobs"]] == ["train"], probe.get("jobs")
    assert not [event for event in events if event["event"] in ("runner_on_failed", "runner_on_unreachable")]
    (stats,) = [event["event_data"] for event in events if event["event"] == "playbook_on_stats"]
    assert stats["failures"] == {} and stats["dark"] == {} and "lab-01" in stats["ok"]
    assert patrol.stats["ok"]["lab-01"] >= 1

    # what patrol reports, written where the job template said, from the collection under collections/
    data = json.loads(report.read_text())
    (row,) = data["hosts"]
    assert row["host"] == "lab-01" and row["verdict"] == "PASS"
    (start,) = [event["event_data"] for event in events if event["event"] == "playbook_on_start"]
    assert start.get("playbook") == "patrol.yml"

    # the same job from runner's command line, as the README shows it
    cli = subprocess.run([os.path.join(VENV_BIN, "ansible-runner"), "run", str(pdd), "-p", "patrol.yml", "--ident",
                          "patrol-cli"], capture_output=True, text=True, check=False, timeout=300)
    assert cli.returncode == 0, cli.stdout[-4000:] + cli.stderr[-2000:]
    assert (pdd / "artifacts" / "patrol-cli" / "status").read_text().strip() == "successful"
    assert "patrol: 1 host(s): PASS 1" in (pdd / "artifacts" / "patrol-cli" / "stdout").read_text()
