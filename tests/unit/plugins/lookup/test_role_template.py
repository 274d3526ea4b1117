"""The role_template lookup renders a role's template as ansible.builtin.template's lookup does, without copying
every variable: both render the same files in one play (on the ansible-core of the lane that runs this)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[4]
BIN = pathlib.Path(sys.executable).parent

# what the collection's templates use (variables that are templates themselves, a loop, filters, quoting, shell
# backslashes, a trailing newline), and what a template may use besides (an include, a set, a comment)
MAIN = r"""# Managed by Ansible ({{ role_name }}); {{ chain }}
export A={{ nested.k | quote }} B={{ plain }}
{% for item in items %}{{ item }}{{ ',' if not loop.last }}{% endfor %}
printf '%s\n' "a\tb" '{{ shadow }}' "{{ path | dirname }}/jobenv.sh"
{# a comment #}{% set local = base ~ '!' %}{{ local }} len={{ 'a\tb' | length }}
{% include 'part.j2' %}
"""
PART = "part: {{ shadow }} {{ items | length }}\n"

TASKS = """---
- name: Render by both lookups
  ansible.builtin.copy:
    content: "{{ lookup(item.lookup, item.term, template_vars={'shadow': 'given'}) }}"
    dest: "{{ out }}/{{ item.name }}.txt"
    mode: "0644"
  loop:
    - {name: builtin, lookup: ansible.builtin.template, term: main.j2}
    - {name: ours, lookup: remote_gpu.trainer.role_template, term: main.j2}
    - {name: builtin_path, lookup: ansible.builtin.template, term: "{{ role_path }}/templates/main.j2"}
    - {name: ours_path, lookup: remote_gpu.trainer.role_template, term: "{{ role_path }}/templates/main.j2"}

- name: The template's own variables stay in the template
  ansible.builtin.copy:
    content: "{{ shadow }} {{ local | default('unset') }}"
    dest: "{{ out }}/after.txt"
    mode: "0644"
"""

PLAY = """---
- name: Render a role's template both ways
  hosts: localhost
  gather_facts: false
  vars:
    base: "b"
    chain: "{{ base }}-{{ plain }}"
    plain: "p q"
    nested: {k: "{{ base }} and 'quotes'"}
    items: [1, 2, 3]
    shadow: outer
    path: /root/.trainer/env.d
  roles:
    - role: r
"""


def env():
    return dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", LC_ALL="C.UTF-8",
                PATH="%s:%s" % (BIN, os.environ.get("PATH", "")))


def project(tmp_path, main=MAIN):
    templates = tmp_path / "roles" / "r" / "templates"
    templates.mkdir(parents=True)
    (templates / "main.j2").write_text(main)
    (templates / "part.j2").write_text(PART)
    (tmp_path / "roles" / "r" / "tasks").mkdir()
    (tmp_path / "roles" / "r" / "tasks" / "main.yml").write_text(TASKS)
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "out").mkdir()
    return tmp_path


def play(tmp_path):
    argv = [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", "play.yml", "-e",
            "out=%s" % (tmp_path / "out"), "-e", "ansible_python_interpreter=%s" % sys.executable]
    return subprocess.run(argv, cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=300, check=False)


def test_it_renders_what_the_builtin_template_lookup_renders(tmp_path):
    proc = play(project(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = tmp_path / "out"
    builtin = (out / "builtin.txt").read_bytes()
    assert builtin == (out / "ours.txt").read_bytes() == (out / "ours_path.txt").read_bytes()
    assert builtin == (out / "builtin_path.txt").read_bytes()
    text = builtin.decode()
    # the variables were rendered (a chain, a nested one, the loop, the include) and template_vars came first
    assert "b-p q" in text and "'b and '\"'\"'quotes'\"'\"''" in text and "1,2,3" in text, text
    assert "'given'" in text and "part: given 3" in text and "b!" in text and "/root/.trainer/jobenv.sh" in text, text
    # backslashes as written: in the text, and in a string of an expression (a tab, as the builtin lookup has it)
    assert "printf '%s\\n' \"a\\tb\"" in text and "len=3" in text, text
    assert (out / "after.txt").read_text() == "outer unset"


@pytest.mark.parametrize("main, words", [
    ("{{ no_such_variable }}\n", "no_such_variable"),
])
def test_an_undefined_variable_fails_the_task_and_names_it(tmp_path, main, words):
    proc = play(project(tmp_path, main))
    assert proc.returncode != 0
    assert words in proc.stdout + proc.stderr


def test_a_missing_template_names_it(tmp_path):
    root = project(tmp_path)
    (root / "roles" / "r" / "tasks" / "main.yml").write_text(
        "---\n- name: A template that is not there\n  ansible.builtin.debug:\n"
        "    msg: \"{{ lookup('remote_gpu.trainer.role_template', 'nowhere.j2') }}\"\n")
    proc = play(root)
    assert proc.returncode != 0
    assert "role_template: the template file nowhere.j2 could not be found" in proc.stdout + proc.stderr
