"""The two halves of the collection: ``plugins/module_utils/`` holds only code that runs on the box, and the box's
code never imports the controller's.

Box code is what a module imports, directly or not (AnsiballZ ships a module with the ``module_utils`` it imports
and nothing else), and what the collection ships to the box by other means:

- the files launch copies to ``~/.trainer/lib`` (``_launch_lib_files`` of ``roles/launch/vars/main.yml``): the
  queue runner's and the run wrapper's ``launch.py``, the sampler sidecar, the item gate;
- a ``plugins/module_utils/<name>.py`` that a role reads and writes to the box (``hf_download.py``, installed by
  ``hf_mirror`` as ``trainer-download``);
- the probes' runner of the direct run (``module_utils/direct_run.py``, sent by ``plugin_utils/direct.py``).

Controller code (actions, filters, inventory and callback plugins and what only they import) lives in
``plugins/plugin_utils/``. The imports are read with ``ast`` (inside functions too), never by importing.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[3]
PACKAGE = "ansible_collections.remote_gpu.trainer.plugins"
BOX_PACKAGES = ("modules", "module_utils")
# Shipped to the box by a controller plugin, not by AnsiballZ: {module_utils name: (the file that sends it, the
# text there that names it)}. The test fails when that text is gone, so that the entry cannot outlive the reason.
SENT_BY_PLUGINS = {"direct_run": ("plugins/plugin_utils/direct.py", '".direct_run"')}
LAUNCH_VARS = "roles/launch/vars/main.yml"
ROLE_READS = re.compile(r"(?<!tests/unit/)plugins/module_utils/(\w+)\.py")  # not a test named in a comment


def collection_imports(path):
    """The collection's own imports of one file: [(line, package, name)], ``package`` one of ``plugins/``'s folders
    (``module_utils``, ``plugin_utils``, ``modules``...), ``name`` the file imported there (None when a package is
    imported whole). ``ansible`` imports come back as (line, "ansible", dotted name)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError("%s:%d: a relative import; spell it %s.<folder>.<name>, as Ansible needs"
                                 % (path, node.lineno, PACKAGE))
        if isinstance(node, ast.ImportFrom) and node.module:
            dotted = [node.module] if node.module != PACKAGE else ["%s.%s" % (PACKAGE, a.name) for a in node.names]
            for module in dotted:
                parts = module[len(PACKAGE) + 1:].split(".") if module.startswith(PACKAGE + ".") else None
                if parts is None:
                    if module == "ansible" or module.startswith("ansible."):
                        found.extend((node.lineno, "ansible", "%s.%s" % (module, a.name)) for a in node.names)
                elif len(parts) > 1:
                    found.append((node.lineno, parts[0], parts[1]))
                else:
                    found.extend((node.lineno, parts[0], a.name) for a in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    parts = alias.name[len(PACKAGE) + 1:].split(".")
                    found.append((node.lineno, parts[0], parts[1] if len(parts) > 1 else None))
                elif alias.name == "ansible" or alias.name.startswith("ansible."):
                    found.append((node.lineno, "ansible", alias.name))
    return sorted(found)


class Tree:
    """The plugins of a collection checkout at ``root``: each file's imports, and which module_utils are box code."""

    def __init__(self, root):
        self.root = pathlib.Path(root)
        self.files = {}  # (package, name) -> path
        for path in sorted((self.root / "plugins").glob("*/*.py")):
            if path.name != "__init__.py":
                self.files[(path.parent.name, path.stem)] = path
        self.imports = dict((key, collection_imports(path)) for key, path in self.files.items())

    def rel(self, key):
        return self.files[key].relative_to(self.root).as_posix()

    def roots(self):
        """{module_utils name: why it is box code without a module importing it}."""
        roots = {}
        launch = self.root / LAUNCH_VARS
        if launch.is_file():
            shipped = (yaml.safe_load(launch.read_text(encoding="utf-8")) or {}).get("_launch_lib_files")
            assert shipped, ("%s no longer lists _launch_lib_files, the module_utils launch copies to the box: "
                             "teach this test where the list is now" % LAUNCH_VARS)
            for name in shipped:
                roots.setdefault(name[:-3], "launch copies it to ~/.trainer/lib (%s)" % LAUNCH_VARS)
        for path in sorted((self.root / "roles").glob("*/*/*.yml")):
            for name in ROLE_READS.findall(path.read_text(encoding="utf-8")):
                roots.setdefault(name, "the role writes it to the box (%s)" % path.relative_to(self.root))
        for name, (sender, text) in SENT_BY_PLUGINS.items():
            path = self.root / sender
            if path.is_file() and text in path.read_text(encoding="utf-8"):
                roots.setdefault(name, "%s sends it to the box" % sender)
        return roots

    def box(self):
        """{module_utils name: the first box file found importing it (or the reason it is shipped)}."""
        box = {}
        todo = list(self.roots().items())
        todo += [(name, "imported by " + self.rel(key)) for key in self.files if key[0] == "modules"
                 for _line, package, name in self.imports[key] if package == "module_utils" and name]
        while todo:
            name, why = todo.pop(0)
            if name in box:
                continue
            box[name] = why
            key = ("module_utils", name)
            if key in self.files:
                todo += [(other, "imported by " + self.rel(key))
                         for _line, package, other in self.imports[key] if package == "module_utils" and other]
        return box

    def unshipped(self):
        """The module_utils files that never reach the box -> a message each."""
        box = self.box()
        problems = []
        for key in sorted(self.files):
            if key[0] == "module_utils" and key[1] not in box:
                users = sorted(self.rel(other) for other, found in self.imports.items()
                               if any(p == "module_utils" and n == key[1] for _l, p, n in found))
                problems.append(
                    "%s is imported by no module and not shipped to the box otherwise, so it is controller code: "
                    "git mv it to plugins/plugin_utils/ and import it from there (imported by: %s)"
                    % (self.rel(key), ", ".join(users) or "nothing"))
        return problems

    def box_reaching_controller(self):
        """Box files (modules and the box's module_utils) that import controller code -> a message each."""
        box = self.box()
        problems = []
        for key in sorted(self.files):
            if key[0] not in BOX_PACKAGES or (key[0] == "module_utils" and key[1] not in box):
                continue
            for line, package, name in self.imports[key]:
                if package == "ansible":
                    if name != "ansible.module_utils" and not name.startswith("ansible.module_utils."):
                        problems.append("%s:%d imports %s, which is ansible-core's controller code: the box has "
                                        "only ansible.module_utils" % (self.rel(key), line, name))
                elif package != "module_utils":
                    problems.append(
                        "%s:%d imports plugins/%s/%s, which is controller code: AnsiballZ ships only "
                        "module_utils to the box. Move what the box needs into plugins/module_utils/, or keep "
                        "the work on the controller" % (self.rel(key), line, package, name or ""))
        return problems

    def dangling(self):
        """Imports of a collection file that does not exist (a stale path after a move) -> a message each."""
        problems = []
        for key in sorted(self.files):
            for line, package, name in self.imports[key]:
                if package != "ansible" and name and (package, name) not in self.files \
                        and not (self.root / "plugins" / package / name).is_dir():
                    problems.append("%s:%d imports plugins/%s/%s, which does not exist" % (
                        self.rel(key), line, package, name))
        return problems


@pytest.fixture(scope="module")
def tree():
    return Tree(ROOT)


def test_every_module_util_runs_on_the_box(tree):
    assert not tree.unshipped(), "\n".join(tree.unshipped())


def test_box_code_imports_no_controller_code(tree):
    assert not tree.box_reaching_controller(), "\n".join(tree.box_reaching_controller())


def test_every_import_of_the_collection_names_a_file_that_exists(tree):
    assert not tree.dangling(), "\n".join(tree.dangling())


def test_the_shipped_roots_are_found_and_are_box_code(tree):
    """The three other ways to the box are still read from their sources (a rename there must not hide them)."""
    roots = tree.roots()
    assert {"launch", "sampler", "item_gate", "hf_download", "direct_run"} <= set(roots), roots
    box = tree.box()
    assert set(roots) <= set(box)
    assert all(("module_utils", name) in tree.files for name in roots), sorted(
        name for name in roots if ("module_utils", name) not in tree.files)


def write(root, rel, text=""):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_the_walk_names_a_controller_file_in_module_utils_and_box_code_importing_the_controller(tmp_path):
    """A small tree of each mistake: the walk finds it, says where and what to do."""
    imp = "from %s.%%s import %%s\n" % PACKAGE
    write(tmp_path, "plugins/modules/probe.py", imp % ("module_utils", "disk") + "import ansible.module_utils.basic\n")
    write(tmp_path, "plugins/module_utils/disk.py",
          "def f():\n    " + imp % ("plugin_utils", "table") + "from ansible.errors import AnsibleError\n")
    write(tmp_path, "plugins/module_utils/table.py")
    write(tmp_path, "plugins/module_utils/history.py", imp % ("module_utils", "table"))
    write(tmp_path, "plugins/plugin_utils/table.py")
    write(tmp_path, "plugins/action/report.py", imp % ("module_utils", "history") + imp % ("module_utils", "gone"))
    tree = Tree(tmp_path)
    assert tree.unshipped() == [
        "plugins/module_utils/history.py is imported by no module and not shipped to the box otherwise, so it is "
        "controller code: git mv it to plugins/plugin_utils/ and import it from there (imported by: "
        "plugins/action/report.py)",
        "plugins/module_utils/table.py is imported by no module and not shipped to the box otherwise, so it is "
        "controller code: git mv it to plugins/plugin_utils/ and import it from there (imported by: "
        "plugins/module_utils/history.py)"]
    problems = tree.box_reaching_controller()
    assert len(problems) == 2, problems
    assert problems[0].startswith("plugins/module_utils/disk.py:2 imports plugins/plugin_utils/table, which is "
                                  "controller code: AnsiballZ ships only module_utils to the box")
    assert problems[1] == ("plugins/module_utils/disk.py:3 imports ansible.errors.AnsibleError, which is "
                           "ansible-core's controller code: the box has only ansible.module_utils")
    assert tree.dangling() == ["plugins/action/report.py:2 imports plugins/module_utils/gone, which does not exist"]
    # history.py is box code once a role ships it; then table.py, which it imports, is box code too
    write(tmp_path, "roles/dash/tasks/main.yml", "src: plugins/module_utils/history.py\n")
    assert Tree(tmp_path).unshipped() == []
