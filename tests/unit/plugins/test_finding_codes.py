"""Every finding code the collection emits is in the one table of docs/finding-codes.md ("Finding codes"), linked from
the README, with the levels it is emitted at, and every code in that table is emitted somewhere.

The codes are read from the source with ``ast`` (never a grep): every call to ``findings.finding()`` and to the
functions that pass their own parameter on as its code (``gpu_findings.make_finding``, found by the same walk), by
position or keyword, and every dict literal or ``dict()`` call with both a ``level`` and a ``code`` key. A code may be a string literal, a conditional
expression, a module-level constant (also one imported from another plugin module, such as
``billing.IDLE_BILLING``), a local variable, or a row of a module-level literal table that a loop or an unpacking
reads (``for code, text in MEMORY_FLAGS``, ``finding_code, level = XID_CODES.get(...)``). A code the walk cannot
resolve fails the test with its place, so that a new construct is taught here instead of being silently missed.
"""

from __future__ import annotations

import ast
import pathlib
import re
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
PLUGINS = ROOT / "plugins"
README = ROOT / "docs" / "finding-codes.md"
# Where no other table may list finding codes: the README and every page of docs/.
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SECTION = "Finding codes"
LEVELS = ("INFO", "WARN", "FAIL")
# The one builder every finding goes through: its name and where its (level, code) arguments are: (position, keyword).
ROOT_BUILDERS = {"finding": ((0, "level"), (1, "code"))}
PACKAGE = "ansible_collections.remote_gpu.trainer."


class Unresolved(Exception):
    """An expression the walk cannot turn into the strings it may hold."""


class Param(Exception):
    """The expression is a parameter of the enclosing function (a wrapper passes it on)."""

    def __init__(self, function, index, name):
        super().__init__(function.name)
        self.function, self.index, self.name = function, index, name


class Source:
    """One plugin file: its tree, each node's parent, its module-level assignments and its imports."""

    def __init__(self, path, text=None, name=None):
        """``name`` is the dotted name below the collection (``plugins.plugin_utils.billing``), as imports spell
        it; by default from ``path`` below the repository root."""
        self.path = path
        self.name = name or path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
        self.tree = ast.parse(text if text is not None else path.read_text(encoding="utf-8"), filename=str(path))
        self.parent = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node
        self.constants = {}
        self.imported = {}  # local name -> (the module it is imported from, its name there)
        for node in self.tree.body:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.constants[target.id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                self.constants[node.target.id] = node.value
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PACKAGE):
                base = node.module[len(PACKAGE):]
                for alias in node.names:
                    self.imported[alias.asname or alias.name] = (base, alias.name)

    def where(self, node):
        path = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return "%s:%d" % (path, node.lineno)

    def functions(self, node):
        """The functions that enclose ``node``, innermost first."""
        found = []
        while node in self.parent:
            node = self.parent[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                found.append(node)
        return found


class Collector:
    """The finding codes of a set of sources: {code: {level or None: [places]}}."""

    def __init__(self, sources):
        self.sources = dict((source.name, source) for source in sources)
        self.builders = dict(ROOT_BUILDERS)
        self.codes = {}
        self.unresolved = []

    # -- values of expressions ------------------------------------------------------------------------------------
    # A value is a list of choices (text, tags); tags is a tuple of (key, branch): the row of a table a binding
    # read (key: the binding node), or the branch of a conditional expression (key: its test). A code and a level
    # with the same key on different branches never go together: ``"FAIL" if x else "WARN", "a" if x else "b"``
    # gives (FAIL, a) and (WARN, b), and a code and a level read from one row of a table stay paired.

    def values(self, source, expr, at=None):
        at = at or expr
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return [(expr.value, ())]
        if isinstance(expr, ast.IfExp):
            key = ("if", ast.dump(expr.test))
            return [(text, tags + ((key, branch),))
                    for branch, part in enumerate((expr.body, expr.orelse))
                    for text, tags in self.values(source, part, at)]
        if isinstance(expr, ast.Name):
            return self.name_values(source, expr.id, at)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            module = source.imported.get(expr.value.id)
            other = self.sources.get(self.module_name(module))
            if other is not None and expr.attr in other.constants:
                return self.values(other, other.constants[expr.attr])
        raise Unresolved(ast.unparse(expr))

    @staticmethod
    def module_name(imported):
        """The dotted name of a module imported by name (``from ...plugin_utils import billing``), or None."""
        return "%s.%s" % imported if imported else None

    def name_values(self, source, name, at):
        for function in source.functions(at):
            args = function.args
            params = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
            if name in params:
                if isinstance(function, ast.Lambda):
                    raise Unresolved("%s, a parameter of a lambda" % name)
                index = params.index(name)
                raise Param(function, index if index < len(args.posonlyargs + args.args) else None, name)
            bindings = list(self.local_bindings(function, name))
            if bindings:
                choices = []
                for binding in bindings:
                    choices.extend(self.binding_values(source, binding))
                return choices
        if name in source.constants:
            return self.values(source, source.constants[name])
        if name in source.imported:
            base, attr = source.imported[name]
            other = self.sources.get(base)
            if other is not None and attr in other.constants:
                return self.values(other, other.constants[attr])
        raise Unresolved(name)

    @staticmethod
    def local_bindings(function, name):
        """(node, value expression, position in a tuple target or None, loops over value?) for each binding of
        ``name`` in ``function`` (not in functions nested in it)."""
        body = function.body if isinstance(function.body, list) else [function.body]
        stack = list(body)
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            targets = []
            if isinstance(node, ast.Assign):
                targets = [(target, node.value, False) for target in node.targets]
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value is not None:
                targets = [(node.target, node.value, False)]
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                targets = [(node.target, node.iter, True)]
            for target, value, loops in targets:
                if isinstance(target, ast.Name) and target.id == name:
                    yield node, value, None, loops
                elif isinstance(target, (ast.Tuple, ast.List)):
                    for index, element in enumerate(target.elts):
                        if isinstance(element, ast.Name) and element.id == name:
                            yield node, value, index, loops
            stack.extend(ast.iter_child_nodes(node))

    def binding_values(self, source, binding):
        node, value, index, loops = binding
        if index is None and not loops:
            return self.values(source, value, node)
        rows = self.rows(source, value) if loops else self.one_row_of(source, value)
        choices = []
        for number, row in enumerate(rows):
            item = row if index is None else row[index]
            if not isinstance(item, str):
                raise Unresolved(ast.unparse(value))
            choices.append((item, ((("row", id(node)), number),)))
        return choices

    def literal(self, source, expr):
        """The Python value of a literal expression, or of a module-level name bound to one."""
        if isinstance(expr, ast.Name):
            if expr.id in source.constants:
                return self.literal(source, source.constants[expr.id])
            raise Unresolved(expr.id)
        try:
            return ast.literal_eval(expr)
        except ValueError:
            raise Unresolved(ast.unparse(expr)) from None

    def rows(self, source, expr):
        """The elements a ``for`` loop over ``expr`` yields (a literal table or its ``.items()``/``.values()``)."""
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and not expr.args:
            table = self.literal(source, expr.func.value)
            if isinstance(table, dict) and expr.func.attr in ("items", "values", "keys"):
                return list(getattr(table, expr.func.attr)())
        table = self.literal(source, expr)
        return list(table)

    def one_row_of(self, source, expr):
        """The rows an unpacking ``a, b = TABLE[key]`` or ``TABLE.get(key, ...)`` may take: every value of TABLE."""
        if isinstance(expr, ast.Subscript):
            table = self.literal(source, expr.value)
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "get":
            table = self.literal(source, expr.func.value)
        else:
            return [self.literal(source, expr)]
        return list(table.values()) if isinstance(table, dict) else list(table)

    # -- the walk ---------------------------------------------------------------------------------------------------

    @staticmethod
    def called(node):
        func = node.func
        return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None

    @staticmethod
    def argument(node, spec):
        """The argument of the call ``node`` at ``spec`` (position, keyword), or None."""
        if spec is None:
            return None
        position, keyword = spec
        if position is not None and position < len(node.args) and not isinstance(node.args[position], ast.Starred):
            return node.args[position]
        return next((item.value for item in node.keywords if keyword and item.arg == keyword), None)

    def builder_calls(self, source):
        for node in ast.walk(source.tree):
            if isinstance(node, ast.Call) and self.called(node) in self.builders:
                level_at, code_at = self.builders[self.called(node)]
                yield node, self.argument(node, level_at), self.argument(node, code_at)

    def find_builders(self):
        """Functions that pass their own parameter on as a builder's code are builders too (to a fixed point)."""
        while True:
            before = dict(self.builders)
            for source in self.sources.values():
                for _node, level, code in self.builder_calls(source):
                    if code is None:
                        continue
                    try:
                        self.values(source, code)
                    except Param as param:
                        if param.function.name not in ROOT_BUILDERS:
                            self.builders[param.function.name] = (self.level_spec(source, level, param.function),
                                                                  (param.index, param.name))
                    except Unresolved:
                        pass
            if self.builders == before:
                return

    def level_spec(self, source, level, function):
        """(position, keyword) of the wrapper's parameter that it passes on as the level, or None."""
        if level is None:
            return None
        try:
            self.values(source, level)
        except Param as param:
            return (param.index, param.name) if param.function is function else None
        except Unresolved:
            pass
        return None

    def add(self, source, node, level, code):
        try:
            codes = self.values(source, code)
        except Param:
            return  # a builder passing its parameter on: its callers are walked
        except Unresolved as exc:
            self.unresolved.append("%s: code %s" % (source.where(node), exc))
            return
        try:
            levels = self.values(source, level) if level is not None else [(None, ())]
        except (Param, Unresolved):
            levels = [(None, ())]
        for text, code_tags in codes:
            for level_text, level_tags in levels:
                branches = dict(code_tags)
                if any(branches.get(key, branch) != branch for key, branch in level_tags):
                    continue  # another row of the same table, or the other branch of the same condition
                self.codes.setdefault(text, {}).setdefault(level_text, []).append(source.where(node))

    def collect(self):
        self.find_builders()
        for source in self.sources.values():
            for node, level, code in self.builder_calls(source):
                if code is None:
                    self.unresolved.append("%s: a finding without a code argument" % source.where(node))
                    continue
                self.add(source, node, level, code)
            for node in ast.walk(source.tree):
                keys = {}
                if isinstance(node, ast.Dict):
                    keys = dict((key.value, value) for key, value in zip(node.keys, node.values)
                                if isinstance(key, ast.Constant))
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
                    keys = dict((item.arg, item.value) for item in node.keywords if item.arg)
                if "level" in keys and "code" in keys:
                    self.add(source, node, keys["level"], keys["code"])
        return self


def collect(paths=None):
    return Collector([Source(path) for path in paths or sorted(PLUGINS.rglob("*.py"))]).collect()


# -- the README's table -----------------------------------------------------------------------------------------------

ROW = re.compile(r"^\|\s*`([a-z0-9_]+)`\s*\|")


def section(text, title):
    """The lines of the section titled ``title`` (any heading level), up to the next heading of its level or
    higher."""
    lines = text.splitlines()
    for number, line in enumerate(lines):
        match = re.match(r"^(#+)\s+(.*?)\s*$", line)
        if match and match.group(2) == title:
            depth = len(match.group(1))
            end = next((n for n in range(number + 1, len(lines))
                        if re.match(r"^#{1,%d}\s" % depth, lines[n])), len(lines))
            return lines[number + 1:end]
    return None


def cells(line):
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def readme_table(text):
    """{code: (level cell, from cell)} of the table in the section "Finding codes"; duplicates raise."""
    lines = section(text, SECTION)
    assert lines is not None, "docs/finding-codes.md has no section %r" % SECTION
    rows = [line for line in lines if line.startswith("|")]
    assert rows and cells(rows[0])[:3] == ["code", "level", "from"], \
        "the table in %r must have the columns code, level, from, ...: %r" % (SECTION, rows[:1])
    table = {}
    for line in rows[2:]:
        match = ROW.match(line)
        assert match, "a row of the finding table without a `code` in its first column: %r" % line
        assert match.group(1) not in table, "%s has two rows in the finding table" % match.group(1)
        row = cells(line)
        table[match.group(1)] = (row[1], row[2])
    return table


@pytest.fixture(scope="module")
def emitted():
    collector = collect()
    assert not collector.unresolved, (
        "finding codes the walk cannot resolve (teach tests/unit/plugins/test_finding_codes.py the construct):\n"
        + "\n".join(collector.unresolved))
    return collector.codes


@pytest.fixture(scope="module")
def readme():
    return README.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def table(readme):
    return readme_table(readme)


def test_every_emitted_code_is_in_the_readme_table(emitted, table):
    missing = []
    for code, levels in sorted(emitted.items()):
        if code not in table:
            places = sorted(set(place for found in levels.values() for place in found))
            missing.append("%s (%s, at %s)" % (code, "/".join(sorted(str(level) for level in levels)),
                                               ", ".join(places)))
    assert not missing, ("finding codes emitted by plugins/ but not in the README's table (section %r): add a row "
                         "(code, level, from, what it means and what to do):\n%s" % (SECTION, "\n".join(missing)))


def test_every_code_in_the_readme_table_is_emitted(emitted, table):
    stale = sorted(set(table) - set(emitted))
    assert not stale, "rows of the README's finding table that no plugin emits: %s" % ", ".join(stale)


def test_the_table_names_the_levels_each_code_is_emitted_at(emitted, table):
    wrong = []
    for code, levels in sorted(emitted.items()):
        if code not in table or None in levels:
            continue
        documented = set(re.findall(r"\b(%s)\b" % "|".join(LEVELS), table[code][0]))
        if documented != set(levels):
            wrong.append("%s: emitted %s, the table says %r" % (code, "/".join(sorted(levels)), table[code][0]))
    assert not wrong, "levels in the README's finding table that differ from the code:\n" + "\n".join(wrong)


def test_every_row_names_where_the_code_comes_from(table):
    assert all(origin and origin != "-" for _level, origin in table.values()), table


def test_no_other_readme_table_lists_finding_codes(emitted, readme):
    inside = set(section(readme, SECTION))
    elsewhere = ["%s: %s" % (page.relative_to(ROOT), line) for page in PAGES
                 for line in page.read_text(encoding="utf-8").splitlines()
                 if not (page == README and line in inside) and ROW.match(line) and ROW.match(line).group(1) in emitted]
    assert not elsewhere, "finding codes in a README table outside %r (one table only):\n%s" % (
        SECTION, "\n".join(elsewhere))


# -- the walk itself ---------------------------------------------------------------------------------------------------

SAMPLE = '''
from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import finding
from ansible_collections.remote_gpu.trainer.plugins.module_utils import other

CONSTANT = "from_a_constant"
FLAGS = (("from_a_loop_one", "x"), ("from_a_loop_two", "y"))
TABLE = {"a": ("paired_fail", "FAIL"), "b": ("paired_info", "INFO")}


def wrap(level, code, gpu, message):
    return finding(level, code, message, "act", gpu=gpu)


def probe(x):
    found = [finding(
        "WARN",
        "multi_line",
        "message", "action")]
    found.append(finding("FAIL" if x else "WARN", "either_level", "m", "a"))
    found.append(finding("FAIL" if x > 1 else "WARN", "paired_if" if x > 1 else "other_branch", "m", "a"))
    found.append(finding("INFO", CONSTANT, "m", "a"))
    found.append(finding(code="by_keyword", level="WARN", message="m", action="a"))
    found.append(finding("WARN", other.IMPORTED, "m", "a"))
    for code, text in FLAGS:
        found.append(wrap("FAIL", code, 0, text))
    name, level = TABLE.get(x, TABLE["a"])
    found.append(wrap(level, name, None, "m"))
    found.append({"level": "WARN", "code": "from_a_dict", "message": "m", "action": "a"})
    found.append(dict(level="INFO", code="from_dict_call", message="m", action="a"))
    return found
'''


def test_the_walk_finds_every_construct(tmp_path):
    sources = [Source(tmp_path / "sample.py", textwrap.dedent(SAMPLE), "plugins.module_utils.sample"),
               Source(tmp_path / "other.py", 'IMPORTED = "from_another_module"\n', "plugins.module_utils.other")]
    collector = Collector(sources).collect()
    assert collector.builders["wrap"] == ((0, "level"), (1, "code"))
    assert not collector.unresolved
    assert dict((code, sorted(levels)) for code, levels in collector.codes.items()) == {
        "multi_line": ["WARN"], "either_level": ["FAIL", "WARN"], "from_a_constant": ["INFO"],
        "from_another_module": ["WARN"], "from_a_loop_one": ["FAIL"], "from_a_loop_two": ["FAIL"],
        "paired_fail": ["FAIL"], "paired_info": ["INFO"], "from_a_dict": ["WARN"],
        "paired_if": ["FAIL"], "other_branch": ["WARN"], "by_keyword": ["WARN"], "from_dict_call": ["INFO"]}


def test_a_code_the_walk_cannot_resolve_is_reported(tmp_path):
    text = 'from x import finding\n\ndef f(obj):\n    return finding("WARN", obj.code_of(), "m", "a")\n'
    collector = Collector([Source(tmp_path / "bad.py", text, "plugins.module_utils.bad")]).collect()
    assert collector.unresolved == ["%s:4: code obj.code_of()" % (tmp_path / "bad.py")]


def test_the_walk_sees_the_codes_a_grep_misses(emitted):
    # a constant from another module, a loop over a table, a table row unpacked, a conditional, multi-line calls
    for code, levels in (("idle_billing", {"WARN"}), ("remapped_rows_failure", {"FAIL"}), ("xid_fatal", {"FAIL"}),
                         ("xid_info", {"INFO"}), ("inodes_exhausted", {"FAIL"}), ("inodes_high", {"WARN"}),
                         ("bytes_high", {"WARN", "FAIL"}), ("clock_crushed", {"WARN", "FAIL"}),
                         ("oom_killed", {"WARN", "FAIL"}), ("torch_cuda_minor_newer", {"WARN"})):
        assert set(emitted.get(code, {})) == levels, code
