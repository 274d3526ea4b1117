"""The six playbooks (launch, patrol, preflight, autopilot, teardown, rent) on localhost: a misspelled variable of the
playbook's prefix, or a value of a wrong type, from the command line or from the inventory, stops the playbook
before it probes, pulls or stops anything, naming the variable (and the close match of a misspelling). A value of
the right type that breaks one of launch's rules stops the host before launch writes anything."""

from __future__ import annotations

import re

import pytest

from pbhelpers import REPO, run_playbook

CHECK_TASK = "Check every host's"
# (playbook, a misspelled variable, what the message suggests, a wrongly typed value, the words of its message)
CASES = [
    ("launch", "launch_qeue=a", "did you mean launch_queue?",
     "launch_min_seconds=soon", "launch_min_seconds has a wrong type (for localhost)"),
    ("patrol", "patrol_disk_warn_pc=90", "did you mean patrol_disk_warn_pct?",
     "patrol_stale_minutes=half", "patrol_stale_minutes has a wrong type (for localhost)"),
    ("preflight", "preflight_expected_gpu=8", "did you mean preflight_expected_gpus?",
     "preflight_sample_seconds=soon", "preflight_sample_seconds has a wrong type (for localhost)"),
    ("autopilot", "autopilot_heall=true", "did you mean autopilot_heal?",
     "autopilot_max_restarts=many", "autopilot_max_restarts has a wrong type (for localhost)"),
    ("teardown", "teardown_aprove=localhost", "did you mean teardown_approve?",
     "teardown_allow_extra=perhaps", "teardown_allow_extra has a wrong type (for localhost)"),
    ("rent", "rent_max_spnd=5", "did you mean rent_max_spend?",
     "rent_count=several", "rent_count has a wrong type (for localhost)"),
]


def stopped(proc, *words):
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert CHECK_TASK in out, out
    for word in words:
        assert word in out, out
    # the check is the first task that runs: nothing else ran on the host
    assert "ok=0" in out and "changed=0" in out, out
    return out


@pytest.mark.parametrize("playbook, typo, suggestion, _wrong, _words", CASES)
def test_a_misspelled_variable_stops_the_playbook_naming_it(local_inventory, tmp_path, playbook, typo, suggestion,
                                                            _wrong, _words):
    proc = run_playbook(REPO / "playbooks" / ("%s.yml" % playbook), local_inventory, "-e", typo, cwd=tmp_path)
    name = typo.split("=")[0]
    stopped(proc, "%s is not a variable of this playbook (set for localhost): %s" % (name, suggestion),
            "roles/%s/meta/argument_specs.yml" % playbook)


@pytest.mark.parametrize("playbook, _typo, _suggestion, wrong, words", CASES)
def test_a_wrongly_typed_value_stops_the_playbook_naming_it(local_inventory, tmp_path, playbook, _typo, _suggestion,
                                                            wrong, words):
    proc = run_playbook(REPO / "playbooks" / ("%s.yml" % playbook), local_inventory, "-e", wrong, cwd=tmp_path)
    stopped(proc, words)


def test_launch_without_its_required_variables_stops_naming_them(local_inventory, tmp_path):
    proc = run_playbook(REPO / "playbooks" / "launch.yml", local_inventory, "-e", "launch_src=%s" % tmp_path,
                        cwd=tmp_path)
    out = stopped(proc, "launch_command is required and not set (for localhost): set it, for example with "
                        "-e launch_command=...")
    assert "launch_src is required" not in out


def test_a_misspelling_in_the_inventory_stops_the_autopilot_and_names_the_host(tmp_path):
    """From group_vars of the inventory, for the patrol_* settings the autopilot probes with; the autopilot_timer
    role's own variables are no misspelling."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text((REPO / "inventories" / "local" / "hosts.yml").read_text())
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "local.yml").write_text(
        "---\npatrol_stale_minuts: 45\nautopilot_timer_interval_minutes: 10\n")
    proc = run_playbook(REPO / "playbooks" / "autopilot.yml", inventory, cwd=tmp_path)
    out = stopped(proc, "patrol_stale_minuts is not a variable of this playbook (set for localhost): did you mean "
                        "patrol_stale_minutes?")
    assert "autopilot_timer_interval_minutes" not in out
    assert "1 problem(s)" in out


def test_a_wrongly_typed_variable_of_an_importing_playbook_stops_preflight(tmp_path):
    """As molecule's converge imports preflight with vars: the play's own variables are checked too."""
    site = tmp_path / "site.yml"
    site.write_text("---\n- name: Preflight with the site's settings\n  ansible.builtin.import_playbook: "
                    "remote_gpu.trainer.preflight\n  vars:\n    preflight_fail_run: sometimes\n"
                    "    preflight_sample_secs: 1\n")
    proc = run_playbook(site, REPO / "inventories" / "local" / "hosts.yml", cwd=tmp_path)
    stopped(proc, "preflight_fail_run has a wrong type (for localhost)",
            "preflight_sample_secs is not a variable of this playbook: did you mean preflight_sample_seconds?")


# What launch's spec cannot express (roles/launch/tasks/main.yml, its first task): a value of the right type that
# breaks a rule stops that host before anything is pushed, with the rules and the values it got.
LAUNCH_RULES = "Check what the argument specs cannot express"


@pytest.mark.parametrize("setting, words", [
    ('{"launch_name": "my run"}', "launch_name and launch_run_id may hold letters, digits, '_', '.', '-' only"),
    ("launch_env_prefix=envs/torch", 'must be absolute paths or empty, and launch_conda_activate needs '
                                     'launch_env_prefix (got "envs/torch", "")'),
    ("launch_sampler_interval=0", "launch_sampler_interval must be more than 0"),
])
def test_a_value_that_breaks_a_launch_rule_stops_the_host_before_the_push(local_inventory, tmp_path, setting, words):
    data = tmp_path / "data"
    proc = run_playbook(REPO / "playbooks" / "launch.yml", local_inventory, "-e", "launch_src=%s" % tmp_path,
                        "-e", "launch_command=true", "-e", "trainer_data_dir=%s" % data, "-e", setting, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "TASK [remote_gpu.trainer.launch : %s]" % LAUNCH_RULES in out, out
    assert words in out, out
    assert "changed=0" in out and "failed=1" in out, out
    assert not data.exists(), "launch wrote to the box before it refused: %s" % sorted(data.rglob("*"))


def test_the_launch_role_ends_itself_not_the_play_on_a_host_it_leaves_alone(tmp_path):
    """A site playbook that imports the role and does more after it: the host with no item is left alone (the role
    ends there by meta end_role, judged on the controller) and goes on with the site's next task; the host that
    breaks a rule stops at the rules before anything is written, and runs nothing after."""
    (tmp_path / "group_vars").symlink_to(REPO / "group_vars")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("local:\n  hosts:\n    box-a:\n      ansible_connection: local\n      launch_sampler_interval: 0\n"
                         "    box-b:\n      ansible_connection: local\n")
    site = tmp_path / "site.yml"
    site.write_text("---\n- name: Launch, then the site's own task\n  hosts: local\n  gather_facts: false\n  tasks:\n"
                    "    - name: Launch\n      ansible.builtin.import_role:\n        name: remote_gpu.trainer.launch\n"
                    "    - name: After launch\n      ansible.builtin.debug:\n"
                    "        msg: \"after launch on {{ inventory_hostname }}\"\n")
    data = tmp_path / "data"
    proc = run_playbook(site, inventory, "-e", "launch_src=%s" % tmp_path, "-e", "launch_command=true",
                        "-e", "trainer_data_dir=%s" % data, "-e", '{"launch_queue": ["only"]}', cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "box-b: no items" in out, out  # item 000 is box-a's (sorted hosts)
    assert "after launch on box-b" in out and "after launch on box-a" not in out, out
    assert "TASK [remote_gpu.trainer.launch : %s]" % LAUNCH_RULES in out, out
    assert "launch_sampler_interval must be more than 0" in out, out
    assert re.search(r"box-a\s+: ok=\d+\s+changed=0 .* failed=1", out), out
    assert re.search(r"box-b\s+: ok=\d+\s+changed=0 .* failed=0", out), out
    assert not data.exists(), "launch wrote to the box before it refused: %s" % sorted(data.rglob("*"))
