"""Every relative link of the README and of docs/*.md leads somewhere: the file exists, and an anchor names a heading
of that file (GitHub's anchors: lower case, punctuation dropped, spaces as hyphens). The reference moved from the
README to docs/ (issue 30); a link left pointing at the old place fails here."""
from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(path):
    found, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def links(path):
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            for target in LINK.findall(line):
                if not re.match(r"^[a-z]+:", target):
                    yield number, target


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for number, target in links(page):
        name, _sep, anchor = target.partition("#")
        dest = (page.parent / name).resolve() if name else page
        if not dest.exists():
            broken.append("%d: %s (no such file)" % (number, target))
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append("%d: %s (no such heading)" % (number, target))
    assert not broken, "%s:\n%s" % (page.relative_to(ROOT), "\n".join(broken))


def test_anchor_rule_matches_githubs():
    assert anchors(ROOT / "README.md") >= {"quick-start", "large-fleets-awx-automation-platform-ansible-runner"}
