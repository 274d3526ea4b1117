"""Every ``ansible-playbook`` command that the README and docs/*.md give to copy names its inventory with ``-i``
(issue 30): copied literally, none falls back to a default inventory (in a checkout the lab's; elsewhere none,
which the quick start's ``ansible.cfg`` with ``unparsed_is_failed`` turns into "No inventory was parsed")."""
from __future__ import annotations

import pathlib
import re
import shlex

import pytest

from ansible_collections.remote_gpu.trainer.tests import readme_quickstart as quickstart

ROOT = pathlib.Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND = re.compile(r"^(?:[A-Z_]+=\S*\s+)*ansible-playbook\s")


def playbook_commands(text):
    """[(line number, argv)] of the ``ansible-playbook`` commands in the fenced blocks of ``text``, continuation
    lines joined, comments dropped."""
    found = []
    for _language, first, body in quickstart.blocks(text.splitlines()):
        joined, at = "", None
        for offset, line in enumerate(body):
            if at is None:
                at = first + offset + 1
            if line.rstrip().endswith("\\"):
                joined += line.rstrip()[:-1] + " "
                continue
            command = (joined + line).strip()
            joined = ""
            if COMMAND.match(command):
                found.append((at, shlex.split(command, comments=True)))
            at = None
    return found


def test_the_pages_give_playbook_commands_to_check():
    assert len([c for page in PAGES for c in playbook_commands(page.read_text(encoding="utf-8"))]) >= 20


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_playbook_command_names_its_inventory(page):
    missing = ["%s:%d: %s" % (page.name, number, " ".join(argv))
               for number, argv in playbook_commands(page.read_text(encoding="utf-8"))
               if not any(word == "-i" or word.startswith(("-i", "--inventory")) for word in argv)]
    assert missing == []


def test_a_command_without_i_is_found():
    text = "\n".join(["```bash", "X=1 ansible-playbook p.yml \\", "  -e a=b   # note", "ansible-playbook -i f p",
                      "```"])
    assert playbook_commands(text) == [(2, ["X=1", "ansible-playbook", "p.yml", "-e", "a=b"]),
                                       (4, ["ansible-playbook", "-i", "f", "p"])]
