"""The platform profiles: one file per platform, a schema that names the broken key."""

from __future__ import annotations

import json
import os
import re

import pytest
import yaml

from pbhelpers import REPO, run_playbook

PLATFORMS = ("autodl", "runpod", "vastai", "lambda", "paperspace", "china", "generic_ssh", "local")
VARIANTS = ("slurm", "kubernetes")
SPEC = yaml.safe_load((REPO / "roles/profile/meta/argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
# set for every host in group_vars/all.yml (the one owner of the run directory and the default job name), beside
# one connection setting (pipelining, which the collection's direct run needs)
FOR_ALL = {k: v for k, v in yaml.safe_load((REPO / "group_vars" / "all.yml").read_text()).items()
           if k.startswith("trainer_")}


def test_every_host_gets_pipelining_and_the_profiles_defaults_from_group_vars_all():
    every = yaml.safe_load((REPO / "group_vars" / "all.yml").read_text())
    assert {k: v for k, v in every.items() if k not in FOR_ALL} == {"ansible_pipelining": True}


@pytest.mark.parametrize("platform", PLATFORMS)
def test_every_platform_profile_sets_exactly_the_schema(platform):
    profile = yaml.safe_load((REPO / "group_vars" / ("%s.yml" % platform)).read_text())
    keys = {k for k in profile if k.startswith("trainer_")} | set(FOR_ALL)
    assert keys == set(SPEC), "missing %s, unknown %s" % (set(SPEC) - keys, keys - set(SPEC))
    assert re.fullmatch(r"20\d\d-\d\d", profile["trainer_meter_stop"]["verified"])
    assert all(re.fullmatch(r"20\d\d-\d\d", c["verified"]) for c in profile["trainer_danger_clocks"])


@pytest.mark.parametrize("variant", VARIANTS)
def test_variants_override_only_known_keys(variant):
    profile = yaml.safe_load((REPO / "group_vars" / ("%s.yml" % variant)).read_text())
    assert set(profile) <= set(SPEC)


def test_playbooks_see_each_profile_through_a_symlink():
    """The profiles are defined once, in group_vars/; playbooks/group_vars/ only links to them."""
    profiles = sorted(p.name for p in (REPO / "group_vars").glob("*.yml"))  # all.yml included
    linked = sorted(p.name for p in (REPO / "playbooks" / "group_vars").iterdir())
    assert linked == profiles
    for name in linked:
        link = REPO / "playbooks" / "group_vars" / name
        assert link.is_symlink() and link.resolve() == (REPO / "group_vars" / name).resolve()


GPU_BIN = REPO / "tests/lab/gpu/bin"
SCENARIOS = REPO / "tests/lab/gpu/scenarios"


def preflight_localhost(local_inventory, tmp_path, scenario, *args):
    report = tmp_path / "preflight.json"
    proc = run_playbook(REPO / "playbooks/preflight.yml", local_inventory, "-e", "preflight_report_path=%s" % report,
                        "-e", "preflight_sample_seconds=0", "-e", "preflight_check_torch=false", *args,
                        PATH="%s:%s" % (GPU_BIN, os.environ["PATH"]), FAKE_GPU_SCENARIO=str(SCENARIOS / scenario))
    return proc, json.loads(report.read_text())


def test_preflight_on_localhost_with_the_local_profile(local_inventory, tmp_path):
    proc, data = preflight_localhost(local_inventory, tmp_path, "h100-idle")
    host = data["hosts"][0]
    assert (host["host"], host["platform"], host["gpus"]) == ("localhost", "local", "1x NVIDIA H100 80GB HBM3")
    assert host["verdict"] in ("PASS", "WARN"), host["findings"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "VERDICT" in proc.stdout and "localhost  local" in proc.stdout


def test_preflight_fails_a_throttled_box_and_names_the_evidence(local_inventory, tmp_path):
    proc, data = preflight_localhost(local_inventory, tmp_path, "8xh100-hwslowdown")
    host = data["hosts"][0]
    assert proc.returncode != 0
    assert host["verdict"] == "FAIL"
    assert host["top_finding"].startswith("throttle_active")
    fatal = proc.stdout[proc.stdout.index("fatal: [localhost]"):]
    assert "throttle_active: GPU" in fatal.split("\n\n")[0]


def break_profile(root, edit):
    path = root / "group_vars" / "local.yml"
    text = path.read_text()
    path.write_text(edit(text))


@pytest.mark.parametrize("edit,expected", [
    # a deleted key
    (lambda t: re.sub(r"^trainer_data_dir:.*\n", "", t, flags=re.M), "trainer_data_dir"),
    # a misspelled key: the right one is reported missing
    (lambda t: t.replace("trainer_tensorboard_port:", "trainer_tensorbord_port:"), "trainer_tensorboard_port"),
    # a misspelled extra key beside the right one: reported as unknown
    (lambda t: t + "trainer_hf_endpiont: https://hf-mirror.com\n", "trainer_hf_endpiont"),
    # a wrongly typed key
    (lambda t: t.replace("trainer_tensorboard_port: 0", "trainer_tensorboard_port: six thousand"),
     "trainer_tensorboard_port"),
    (lambda t: t.replace("trainer_inode_cap: unknown", "trainer_inode_cap: lots"), "trainer_inode_cap"),
    (lambda t: t.replace('verified: "2026-06"', "verified: recently"), "verified"),
    # a pinned TensorBoard port without its log directory
    (lambda t: t.replace("trainer_tensorboard_port: 0", "trainer_tensorboard_port: 6006"), "trainer_tensorboard_port"),
    # conda activation without the environment that holds conda, a relative environment, a stray onstart hook
    (lambda t: t.replace("trainer_conda_activate: false", "trainer_conda_activate: true"), "trainer_conda_activate"),
    (lambda t: t.replace('trainer_env_prefix: ""', "trainer_env_prefix: miniconda3"), "trainer_env_prefix"),
    (lambda t: t.replace('trainer_onstart_hook: ""', "trainer_onstart_hook: /root/onstart.sh"),
     "trainer_onstart_hook"),
    # a negative price, a price without its currency, a price that is not a number
    (lambda t: t.replace("trainer_price_per_hour: 0", "trainer_price_per_hour: -1.5"), "trainer_price_per_hour"),
    (lambda t: t.replace("trainer_price_per_hour: 0", "trainer_price_per_hour: 2.5"), "trainer_price_currency"),
    (lambda t: t.replace("trainer_price_per_hour: 0", "trainer_price_per_hour: cheap"), "trainer_price_per_hour"),
], ids=["deleted", "misspelled", "unknown-extra", "wrong-type-int", "wrong-type-cap", "verified-month",
        "tensorboard-pair", "conda-without-prefix", "relative-prefix", "onstart-hook-without-onstart",
        "negative-price", "price-without-currency", "price-not-a-number"])
def test_broken_profile_fails_the_first_play_naming_the_key(playbook_copy, local_inventory, edit, expected):
    break_profile(playbook_copy, edit)
    proc = run_playbook(playbook_copy / "playbooks/preflight.yml", local_inventory, cwd=playbook_copy)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    first_play = out.split("PLAY [Probe every box")[0]
    assert "fatal: [localhost]" in first_play
    assert expected in first_play


def fleet_of_local_hosts(root, names, host_vars):
    """An inventory of local-connection hosts in the group local (the local profile), with host_vars per host."""
    (root / "inventory").mkdir()
    (root / "inventory" / "group_vars").symlink_to(REPO / "group_vars")
    (root / "inventory" / "host_vars").mkdir()
    for name, values in host_vars.items():
        (root / "inventory" / "host_vars" / ("%s.yml" % name)).write_text(yaml.safe_dump(values))
    inventory = root / "inventory" / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"local": {"hosts": dict((n, {"ansible_connection": "local"}) for n in names)}}))
    return inventory


@pytest.mark.parametrize("playbook", ["preflight", "launch", "patrol", "teardown"])
def test_one_controller_pass_fails_only_the_broken_hosts(tmp_path, playbook):
    """The first play of each playbook: one run_once check for the whole play (no per-host role argument
    validation), only the broken host fails, naming the key, and the others go on to the next play."""
    first = yaml.safe_load((REPO / "playbooks" / ("%s.yml" % playbook)).read_text())[0]
    assert first["name"] == "Validate the platform profile of every host"
    first["hosts"] = "all"
    test_playbook = tmp_path / "first_play.yml"
    test_playbook.write_text(yaml.safe_dump([first, {
        "name": "Next play", "hosts": "all", "gather_facts": False,
        "tasks": [{"name": "Reached", "ansible.builtin.debug": {"msg": "next play reached"}}]}], sort_keys=False))
    names = ["box%d" % i for i in range(1, 7)]
    inventory = fleet_of_local_hosts(tmp_path, names, {"box4": {"trainer_tensorboard_port": "six thousand"},
                                                       "box5": {"trainer_hf_endpiont": "x"}})
    # launch's first play also checks launch_* variables, and launch_src and launch_command are required
    required = ["-e", "launch_src=%s launch_command=true" % tmp_path] if playbook == "launch" else []
    proc = run_playbook(test_playbook, inventory, "-v", *required)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    first_play, next_play = out.split("PLAY [Next play]")
    assert "Validating arguments against arg spec" not in out  # Ansible's own per-host validation does not run
    assert first_play.count("Check the platform profile of every host once, on the controller") == 1
    # the four valid hosts share one profile, checked once; each broken host has its own
    assert "hosts_checked: 6" in first_play and "profiles_checked: 3" in first_play
    fatal = re.findall(r"fatal: \[(\w+)\]", first_play)
    assert sorted(fatal) == ["box4", "box5"]
    assert "argument 'trainer_tensorboard_port' is of type" in first_play
    assert "sets unknown key(s) trainer_hf_endpiont" in first_play
    reached = re.findall(r"ok: \[(\w+)\] =>", next_play)
    assert sorted(reached) == ["box1", "box2", "box3", "box6"]
    # the sound hosts end the role (meta end_role, in ansible-playbook itself) before the fail task: no worker is
    # started there to skip it
    skipped = dict(re.findall(r"^(box\d)\s+:.*\bskipped=(\d+)", out, re.M))
    assert skipped == dict.fromkeys(names, "0"), skipped


def test_patrol_validates_the_profile_by_default(playbook_copy, local_inventory):
    """A patrol tick validates the profile first unless -e patrol_profile_check=false."""
    break_profile(playbook_copy, lambda t: t.replace("trainer_inode_cap: unknown", "trainer_inode_cap: lots"))
    report = playbook_copy / "patrol.json"
    for extra, fails in (((), True), (("-e", "patrol_profile_check=false"), False)):
        proc = run_playbook(playbook_copy / "playbooks/patrol.yml", local_inventory, "-e", "patrol_report_path=%s" % report,
                            "-e", "patrol_fail_run=false", *extra, cwd=playbook_copy)
        first_play = (proc.stdout + proc.stderr).split("PLAY [Patrol tick")[0]
        assert ("fatal: [localhost]" in first_play and "trainer_inode_cap" in first_play) is fails, first_play
        if not fails:
            # skipped, not judged: the host leaves the first play in ansible-playbook itself (meta end_host), where
            # a condition on the role would have started a worker to skip each of its tasks (skipped=3). The one
            # skip is the tick's provider read (tasks/provider_now.yml), a run-once task whose loop is empty when
            # every box answered: one worker for the tick, none per host.
            assert re.search(r"^localhost\s+:.*\bskipped=1\b", proc.stdout, re.M), proc.stdout
