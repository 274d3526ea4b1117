"""The README opens with its "Quick start", whose commands are those of an installed collection, complete from install
to teardown within the first 150 lines (issue 30).

tests/lab/tests/test_installed_collection_lab.py runs these very commands (it reads them with the same
tests/readme_quickstart.py) against an installed collection and the lab, and checks the sample outputs against what
they print; this test checks, without the lab, that the section holds what a renter needs, in order.
"""
from __future__ import annotations

import pathlib
import re

import yaml

from ansible_collections.remote_gpu.trainer.tests import readme_quickstart as quickstart

ROOT = pathlib.Path(__file__).resolve().parents[3]
ORDER = ["remote_gpu.trainer.preflight", "remote_gpu.trainer.launch", "remote_gpu.trainer.patrol",
         "remote_gpu.trainer.teardown"]


def test_readme_opens_with_the_quick_start_within_150_lines():
    text = quickstart.read()
    headings = [line for line in text.splitlines() if re.match(r"^## ", line)]
    assert headings and headings[0] == "## " + quickstart.TITLE, headings[:3]
    start, lines = quickstart.section(text)
    assert start + len(lines) <= 150, "the quick start ends at line %d" % (start + len(lines))
    last = max(entry[0] for entry in quickstart.commands(text))
    assert last <= 150


def test_quick_start_installs_with_ansible_galaxy_from_the_collections_repository():
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    installs = [argv for argv in quickstart.argvs(quickstart.read()) if argv[:1] == ["ansible-galaxy"]]
    assert installs == [["ansible-galaxy", "collection", "install", "git+%s.git" % galaxy["repository"]]]


def test_quick_start_runs_the_four_playbooks_by_fqcn_on_its_one_inventory():
    text = quickstart.read()
    path, fleet = quickstart.inventory(text)
    groups = [group for group in fleet if group != "all"]
    assert len(groups) == 1, "one profile group: %r" % groups
    assert (ROOT / "group_vars" / ("%s.yml" % groups[0])).is_file(), "%s is not a profile" % groups[0]
    hosts = list(fleet[groups[0]]["hosts"])
    runs = quickstart.playbook_runs(text)
    assert [run[0] for run in runs] == ORDER
    for name, argv in runs:
        assert quickstart.option(argv, "-i") == [path], argv
        assert not any(word.startswith("playbooks/") or word.endswith(".yml") and word != path for word in argv)
    launch = dict(runs)["remote_gpu.trainer.launch"]
    assert "launch_src=$PWD" in quickstart.option(launch, "-e")
    assert any(word.startswith("launch_command=") for word in quickstart.option(launch, "-e"))
    teardown = dict(runs)["remote_gpu.trainer.teardown"]
    assert quickstart.option(teardown, "-e") == ["teardown_approve=%s" % ",".join(hosts)]


def test_launch_runs_from_the_project_directory_where_the_others_run_too():
    """The one ``cd`` comes before the first playbook: reports/, pulls/ and rent's inventories/rented/ land in the
    project directory, and launch's default push leaves them home (roles/launch/defaults: launch_rsync_exclude)."""
    commands = quickstart.argvs(quickstart.read())
    cds = [i for i, argv in enumerate(commands) if argv[0] == "cd"]
    first = min(i for i, argv in enumerate(commands) if argv[0] == "ansible-playbook")
    assert len(cds) == 1 and cds[0] < first
    defaults = yaml.safe_load((ROOT / "roles" / "launch" / "defaults" / "main.yml").read_text())
    assert {"/pulls/", "/reports/", "/inventories/rented/"} <= set(defaults["launch_rsync_exclude"])


def test_quick_start_shows_sample_outputs_the_lab_test_compares():
    samples = quickstart.outputs(quickstart.read())
    assert any("VERDICT" in line for sample in samples for line in sample)  # preflight's table
    assert any(" DONE items " in line for sample in samples for line in sample)  # patrol's line


def test_commands_are_parsed_as_the_shell_splits_them():
    text = "\n".join(["# t", "## Quick start", "```bash", "cd ~/p && ansible-playbook -i f.yml x \\",
                      "  -e 'a=\"b c\"'  # note", "```", "## Next", "```bash", "not this", "```"])
    expected = [(4, ["cd", "~/p"]), (4, ["ansible-playbook", "-i", "f.yml", "x", "-e", 'a="b c"'])]
    assert quickstart.commands(text) == expected


def test_the_quick_starts_ansible_cfg_prints_and_fans_out_as_the_shipped_one():
    """The output settings of the quick start's ``ansible.cfg`` are the shipped ``ansible.cfg``'s, so what the lab
    tests count under the shipped one (launch over 3 hosts in at most 120 lines: test_launch_lab.py) is what a renter
    sees; its forks are the shipped ones, so that the figures of bench/ (measured with those) hold for a renter's
    fleet, not Ansible's default of 5 hosts at once; and its [inventory] fails a run without a parsed source as the
    shipped one does."""
    import configparser

    def settings(text):
        parser = configparser.ConfigParser(inline_comment_prefixes=None)
        parser.read_string(text)
        return {section: dict(parser[section]) for section in parser.sections()}

    mine = settings(quickstart.ansible_cfg(quickstart.read()))
    shipped = settings((ROOT / "ansible.cfg").read_text(encoding="utf-8"))
    output = ("forks", "stdout_callback", "display_skipped_hosts", "display_ok_hosts", "callback_result_format")
    assert {key: mine["defaults"].get(key) for key in output} == {key: shipped["defaults"][key] for key in output}
    assert mine["inventory"] == {key: shipped["inventory"][key] for key in ("unparsed_is_failed", "ignore_patterns")}
