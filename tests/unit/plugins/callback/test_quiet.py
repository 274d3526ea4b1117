"""remote_gpu.trainer.quiet, through a real ansible-playbook run on localhost: ok and skipped results and include
lines hidden, the messages of debug and changed/failed results kept, everything back with -v."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[4]
BIN = pathlib.Path(sys.executable).parent

PLAYBOOK = """
- name: Quiet callback
  hosts: all
  gather_facts: false
  tasks:
    - name: A silent ok task
      ansible.builtin.set_fact:
        quiet_fact: 1
    - name: A skipped task
      ansible.builtin.debug:
        msg: never shown
      when: false
    - name: An include
      ansible.builtin.include_tasks: included.yml
    - name: A report for people
      ansible.builtin.debug:
        msg: "the report of {{ inventory_hostname }}"
    - name: A report in a loop
      ansible.builtin.debug:
        msg: "item {{ item }}"
      loop: [a, b]
    - name: A change
      ansible.builtin.set_fact:
        quiet_changed: 1
      changed_when: true
    - name: A failure
      ansible.builtin.fail:
        msg: the failure of this host
"""


@pytest.fixture(scope="module")
def playbook(tmp_path_factory):
    root = tmp_path_factory.mktemp("quiet")
    (root / "play.yml").write_text(PLAYBOOK)
    (root / "included.yml").write_text("- name: Inside the include\n  ansible.builtin.set_fact:\n    inner: 1\n")
    return root / "play.yml"


def run(playbook, *args, **settings):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="remote_gpu.trainer.quiet", **settings)
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook), *args],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr  # the failure
    return proc.stdout


def test_hides_ok_skipped_and_includes_but_keeps_reports_changes_and_failures(playbook):
    out = run(playbook, ANSIBLE_DISPLAY_SKIPPED_HOSTS="false", ANSIBLE_DISPLAY_OK_HOSTS="false")
    for hidden in ("A silent ok task", "A skipped task", "skipping:", "An include", "included:", "Inside the include"):
        assert hidden not in out, out
    assert "TASK [A report for people]" in out and "msg: the report of localhost" in out, out
    assert "msg: item a" in out and "msg: item b" in out, out
    assert "TASK [A change]" in out and "changed: [localhost]" in out, out
    assert "fatal: [localhost]: FAILED!" in out and "the failure of this host" in out, out
    assert "PLAY RECAP" in out


def test_shows_every_ok_result_with_display_ok_hosts_or_verbose(playbook):
    for args, settings in (((), {"ANSIBLE_DISPLAY_OK_HOSTS": "true"}), (("-v",), {"ANSIBLE_DISPLAY_OK_HOSTS": "false"})):
        out = run(playbook, *args, ANSIBLE_DISPLAY_SKIPPED_HOSTS="false", **settings)
        assert "TASK [A silent ok task]" in out and "ok: [localhost]" in out, out
        assert "included: " in out and "TASK [Inside the include]" in out, out
        assert "msg: the report of localhost" in out and "A skipped task" not in out, out


VALIDATION = """
- name: A validation that shows nothing
  hosts: all
  gather_facts: false
  tasks:
    - name: Set a fact
      ansible.builtin.set_fact:
        checked: true
    - name: Check it
      ansible.builtin.assert:
        that: checked
        quiet: true
    - name: Fail when it breaks
      ansible.builtin.fail:
        msg: "broken: {{ broken }}"
      when: broken | bool

- name: The work
  hosts: all
  gather_facts: false
  tasks:
    - name: Set another fact first
      ansible.builtin.set_fact:
        other: 1
    - name: Report
      ansible.builtin.debug:
        msg: the work of {{ inventory_hostname }}
"""


def test_a_play_that_shows_nothing_prints_no_empty_banner(tmp_path):
    """The playbooks' profile validation (set_fact, assert, fail, the collection's checks) shows nothing when it
    passes: no "PLAY [...]" header with nothing under it. A play that shows something keeps its banner above it, and
    the validation's banner comes back when it fails, or with -v."""
    (tmp_path / "play.yml").write_text(VALIDATION)

    def play(*args, broken="false"):
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
        return subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                               str(tmp_path / "play.yml"), "-e", "broken=%s" % broken, *args],
                              capture_output=True, text=True, env=env, timeout=120, check=False)

    proc = play()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "A validation that shows nothing" not in proc.stdout, proc.stdout
    banners = [line.split("]")[0] + "]" for line in proc.stdout.splitlines() if line.startswith(("PLAY [", "TASK ["))]
    assert banners == ["PLAY [The work]", "TASK [Report]"], proc.stdout
    assert "msg: the work of localhost" in proc.stdout
    failed = play(broken="true")
    assert failed.returncode == 2, failed.stdout + failed.stderr
    assert failed.stdout.index("PLAY [A validation that shows nothing]") < failed.stdout.index(
        "TASK [Fail when it breaks]") < failed.stdout.index("fatal: [localhost]: FAILED!"), failed.stdout
    assert "PLAY [A validation that shows nothing]" in play("-v").stdout
