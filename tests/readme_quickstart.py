"""The README's "Quick start", read as data: its shell commands and its inventory file.

Imported by the test that checks the section's shape (tests/unit/scripts/test_readme_quickstart.py) and by the lab
test that runs its commands against an installed collection (tests/lab/tests/test_installed_collection_lab.py), so
the quick start a renter copies is the one the lab runs.
"""
from __future__ import annotations

import pathlib
import re
import shlex

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
TITLE = "Quick start"


def section(text, title=TITLE):
    """(first line number, lines) of the section titled ``title``, up to the next heading of its level or higher;
    (None, None) when there is none. Headings inside fenced blocks do not count."""
    lines = text.splitlines()
    fenced = False
    start = level = None
    for number, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else re.match(r"^(#+)\s+(.*?)\s*$", line)
        if not match:
            continue
        if start is None and match.group(2) == title:
            start, level = number, len(match.group(1))
        elif start is not None and len(match.group(1)) <= level:
            return start, lines[start:number]
    return (start, lines[start:]) if start is not None else (None, None)


def blocks(lines):
    """[(language, first line number within ``lines``, [lines])] of the fenced blocks in ``lines``."""
    found, current = [], None
    for number, line in enumerate(lines):
        if line.startswith("```"):
            if current is None:
                current = (line[3:].strip(), number + 1, [])
            else:
                found.append(current)
                current = None
        elif current is not None:
            current[2].append(line)
    return found


def commands(text):
    """[(line number in the README, argv)] of every command in the quick start's ``bash`` blocks, in order:
    continuation lines joined, comments dropped, ``A && B`` split; words as the shell splits them, unexpanded."""
    start, lines = section(text)
    assert lines is not None, "README.md has no section %r" % TITLE
    found = []
    for language, first, body in blocks(lines):
        if language != "bash":
            continue
        joined, at = "", None
        for offset, line in enumerate(body):
            if at is None:
                at = start + first + offset + 1
            if line.rstrip().endswith("\\"):
                joined += line.rstrip()[:-1] + " "
                continue
            words = shlex.split(joined + line, comments=True)
            joined = ""
            while words:
                cut = words.index("&&") if "&&" in words else len(words)
                found.append((at, words[:cut]))
                words = words[cut + 1:]
            at = None
    return found


def argvs(text):
    """The argv of each command of the quick start, in order (``commands`` without the line numbers)."""
    return [entry[1] for entry in commands(text)]


def playbook_runs(text):
    """[(playbook FQCN, argv)] of the quick start's ``ansible-playbook`` commands, in order."""
    runs = []
    for argv in argvs(text):
        if argv and argv[0] == "ansible-playbook":
            names = [word for word in argv[1:] if word.startswith("remote_gpu.trainer.")]
            assert len(names) == 1, "one collection playbook per command: %r" % argv
            runs.append((names[0], argv))
    return runs


def option(argv, flag):
    """The values of ``flag`` (``-i``, ``-e``, ``-l``) in ``argv``, in order."""
    return [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == flag]


def inventory(text):
    """(path as written, parsed YAML) of the quick start's inventory block (a ``yaml`` block whose first line is a
    ``# <path>`` comment)."""
    import yaml
    lines = section(text)[1]
    assert lines is not None, "README.md has no section %r" % TITLE
    for language, _first, body in blocks(lines):
        if language == "yaml" and body and body[0].startswith("# "):
            return body[0][2:].strip(), yaml.safe_load("\n".join(body))
    raise AssertionError("the quick start has no inventory block (```yaml starting with '# <path>')")


def ansible_cfg(text):
    """The body of the quick start's ``ini`` block: the ``ansible.cfg`` it says to put where the commands run."""
    lines = section(text)[1]
    assert lines is not None, "README.md has no section %r" % TITLE
    found = [body for language, _first, body in blocks(lines) if language == "ini"]
    assert len(found) == 1, "the quick start has %d ```ini blocks (one ansible.cfg expected)" % len(found)
    return "\n".join(found[0]) + "\n"


def outputs(text):
    """[[lines]] of the quick start's output samples: the fenced blocks with no language."""
    lines = section(text)[1]
    assert lines is not None, "README.md has no section %r" % TITLE
    return [body for language, _first, body in blocks(lines) if not language]


def masked(line):
    """``line`` with every digit as ``#`` and no trailing blanks: a sample matches a run whose numbers differ."""
    return re.sub(r"[0-9]", "#", line).rstrip()


def read():
    return README.read_text(encoding="utf-8")
