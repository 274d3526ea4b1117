"""docs/seed-audit.md stays true: every test it cites exists, every covered row cites one, the counts add up.

The audit's tables have six columns (id, seed, behaviour, what the collection does, status, tests). A test is cited
as `path::test` or `path::Class::test` (a parametrized case may add `[id]`), the path relative to the repository
root. The names are collected by parsing the cited files with ast, never by importing them, so this stays fast.
"""

import ast
import collections
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "seed-audit.md"
HEADER = "| id | seed | behaviour | what the collection does | status | tests |"
STATUS = re.compile(r"^(covered|(partial|missing|wrong): \S.*|in progress: issue 34 \S.*)$")
CITATION = re.compile(r"^(?P<path>(tests|molecule)/[\w./-]+\.py)"
                      r"::(?P<name>[A-Za-z_]\w*(::[A-Za-z_]\w*)?)(\[[^\]]*\])?$")
COUNTS = re.compile(r"^Counts: (\d+) covered, (\d+) partial, (\d+) missing, (\d+) wrong, "
                    r"(\d+) in progress \((\d+) rows\)\.$")
KINDS = ("covered", "partial", "missing", "wrong", "in progress")

Row = collections.namedtuple("Row", "line id status tests")


def rows_of(text):
    """The rows of every audit table in ``text``, and the problems of the rows that cannot be read."""
    rows, problems, in_table = [], [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip() == HEADER:
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
            continue
        if not in_table or set(line) <= set("|- "):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if len(cells) != 6:
            problems.append("line %d: %d cells, not 6 (a '|' inside a cell?)" % (number, len(cells)))
            continue
        tests = [t.strip() for t in cells[5].split(",") if t.strip()]
        rows.append(Row(number, cells[0], cells[4], tests))
    return rows, problems


def names_in(path):
    """The test functions of one file: module-level ``test*`` and ``Class::test*`` methods."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                    names.add("%s::%s" % (node.name, item.name))
    return names


def kind_of(status):
    return "in progress" if status.startswith("in progress") else status.split(":")[0]


def problems_of(text, root=ROOT):
    """Every way ``text`` (an audit) is untrue of the tests under ``root``; empty when it holds."""
    rows, problems = rows_of(text)
    cache = {}
    seen = set()
    for row in rows:
        where = "line %d (%s)" % (row.line, row.id)
        if row.id in seen:
            problems.append("%s: the id is used twice" % where)
        seen.add(row.id)
        if not STATUS.match(row.status):
            problems.append("%s: status %r is none of covered, partial: <why>, missing: <why>, wrong: <why>, "
                            "in progress: issue 34 <item>" % (where, row.status))
        if row.status == "covered" and not row.tests:
            problems.append("%s: covered, but cites no test" % where)
        for cited in row.tests:
            match = CITATION.match(cited.strip("`")) if cited.startswith("`") and cited.endswith("`") else None
            if not match:
                problems.append("%s: %s is not a `tests/...py::test` citation" % (where, cited))
                continue
            path = match.group("path")
            if path not in cache:
                file = root / path
                cache[path] = names_in(file) if file.is_file() else None
            if cache[path] is None:
                problems.append("%s: %s does not exist" % (where, path))
            elif match.group("name") not in cache[path]:
                problems.append("%s: %s has no test %s" % (where, path, match.group("name")))
    counts = collections.Counter(kind_of(row.status) for row in rows)
    lines = [m for m in (COUNTS.match(line) for line in text.splitlines()) if m]
    if len(lines) != 1:
        problems.append("%d 'Counts: ...' lines, not 1" % len(lines))
    else:
        said = [int(n) for n in lines[0].groups()]
        real = [counts[kind] for kind in KINDS] + [len(rows)]
        if said != real:
            problems.append("the counts line says %s; the tables hold %s (covered, partial, missing, wrong, "
                            "in progress, rows)" % (said, real))
    return problems


def test_the_audit_cites_only_tests_that_exist_and_its_counts_add_up():
    text = DOC.read_text(encoding="utf-8")
    rows = rows_of(text)[0]
    assert len(rows) >= 80, "the audit's tables were not found (%d rows): is the header still %r?" % (len(rows), HEADER)
    assert problems_of(text) == []


def _doc(*rows, counts=None):
    body = "\n".join(rows)
    if counts is None:
        kinds = collections.Counter(kind_of(r.split(" | ")[4].strip()) for r in rows)
        counts = "Counts: %d covered, %d partial, %d missing, %d wrong, %d in progress (%d rows)." % (
            tuple(kinds[k] for k in KINDS) + (len(rows),))
    return "%s\n\n%s\n|---|---|---|---|---|---|\n%s\n" % (counts, HEADER, body)


@pytest.fixture(name="tree")
def fixture_tree(tmp_path):
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    (tmp_path / "tests" / "unit" / "test_a.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.parametrize('x', [1, 2])\n"
        "def test_param(x):\n    pass\n\n"
        "class TestGroup:\n    def test_method(self):\n        pass\n\n"
        "async def test_async():\n    pass\n\n"
        "def helper():\n    pass\n", encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("tests, problem", [
    ("`tests/unit/test_gone.py::test_param`", "tests/unit/test_gone.py does not exist"),
    ("`tests/unit/test_a.py::test_gone`", "has no test test_gone"),
    ("`tests/unit/test_a.py::helper`", "has no test helper"),
    ("`tests/unit/test_a.py::test_method`", "has no test test_method"),
    ("tests/unit/test_a.py::test_param", "is not a `tests/...py::test` citation"),
    ("", "covered, but cites no test"),
])
def test_a_covered_row_that_cites_a_missing_file_or_test_or_none_is_named(tree, tests, problem):
    text = _doc("| X1 | S1 | b | d | covered | %s |" % tests)
    found = problems_of(text, tree)
    assert len(found) == 1 and problem in found[0] and "(X1)" in found[0], found


def test_parametrized_functions_class_methods_and_async_tests_are_found(tree):
    cited = ("`tests/unit/test_a.py::test_param`, `tests/unit/test_a.py::test_param[1]`, "
             "`tests/unit/test_a.py::TestGroup::test_method`, `tests/unit/test_a.py::test_async`")
    assert problems_of(_doc("| X1 | S1 | b | d | covered | %s |" % cited), tree) == []


def test_a_status_needs_its_reason_and_the_counts_must_match(tree):
    assert problems_of(_doc("| X1 | S1 | b | d | partial: half of it | |",
                            "| X2 | S1 | b | d | in progress: issue 34 item N (x) | |"), tree) == []
    assert "status 'missing'" in problems_of(_doc("| X1 | S1 | b | d | missing | |"), tree)[0]
    assert "status 'done'" in problems_of(_doc("| X1 | S1 | b | d | done | |"), tree)[0]
    wrong = _doc("| X1 | S1 | b | d | partial: why | |",
                 counts="Counts: 1 covered, 0 partial, 0 missing, 0 wrong, 0 in progress (1 rows).")
    assert "the counts line says [1, 0, 0, 0, 0, 1]" in problems_of(wrong, tree)[0]
    twice = _doc("| X1 | S1 | b | d | partial: a | |", "| X1 | S1 | b | d | partial: b | |")
    assert any("used twice" in p for p in problems_of(twice, tree))
