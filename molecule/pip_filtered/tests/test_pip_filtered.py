"""pip_filtered on the lab fleet: the image's torch stays, the small package lands, nothing changes twice."""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "resources"))
import labenv  # noqa: E402

CONVERGE = labenv.converge(__file__)
testinfra_hosts = labenv.hosts("lab")
PY = "/root/image-env/bin/python"


def version(host, name):
    return host.check_output("%s -c 'from importlib import metadata; print(metadata.version(\"%s\"))'" % (PY, name))


def test_image_torch_untouched_and_six_installed(host):
    assert version(host, "torch") == "2.5.1"
    assert host.check_output("%s -c 'import torch; print(torch.__version__)'" % PY) == "2.5.1"
    assert version(host, "six") == "1.17.0"
    assert host.run("%s -c 'import torchvision'" % PY).rc != 0  # filtered, never installed


def test_rerun_reports_the_filter_and_changes_nothing():
    proc = labenv.run_playbook(CONVERGE)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert labenv.recap_changed(proc.stdout) == 0
    assert "filtered out of requirements.txt: torch==2.1.0, torchvision>=0.16 ; python_version >= " in proc.stdout
    assert "the image's build stays (torch 2.5.1)" in proc.stdout


def test_check_mode_changes_nothing():
    proc = labenv.run_playbook(CONVERGE, "--check")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert labenv.recap_changed(proc.stdout) == 0


def test_no_requirements_is_a_noop_with_reason():
    proc = labenv.run_playbook(CONVERGE, "-e", "pip_filtered_requirements=''")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "pip_filtered: nothing to do on lab-01: pip_filtered_requirements is empty" in proc.stdout


def test_nested_requirements_are_refused():
    proc = labenv.run_playbook(CONVERGE, "-e", "pip_filtered_lab_file=requirements-nested.txt")
    assert proc.returncode == 2
    assert "includes -r requirements.txt" in proc.stdout


def test_a_dependency_cannot_downgrade_torch(host):
    # pinned (default): pip refuses the conflict and names torch; the image's build stays
    proc = labenv.run_playbook(CONVERGE, "-e", "pip_filtered_lab_file=requirements-old-torch.txt")
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "torch" in proc.stdout and "conflict" in proc.stdout.lower()
    assert version(host, "torch") == "2.5.1"
    # without the pins pip downgrades it, and the check after the install fails naming the package
    proc = labenv.run_playbook(CONVERGE, "-e", "pip_filtered_lab_file=requirements-old-torch.txt",
                               "-e", '{"pip_filtered_constrain": false}')
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "pip_filtered: torch changed from 2.5.1 to 2.1.0 on lab-01" in proc.stdout
    # put the image's build back for the other tests
    host.check_output("%s -m pip uninstall -y -q lab-needs-old-torch" % PY)
    host.check_output("%s -m pip install -q --no-index --find-links /root/wheels torch==2.5.1" % PY)
    assert version(host, "torch") == "2.5.1"
