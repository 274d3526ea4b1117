"""The make targets match the stages (issue 30): ``make unit`` runs the unit and hostile-input tests and nothing
else; ``make lab`` runs every playbook and lab test (what ``make help`` says), and no unit test. The commands are
those ``make -n`` prints, run with a stand-in pytest (scripts/test.sh puts ``$TRAINER_VENV/bin`` first on PATH) that
records its arguments; the test files they reach are counted as pytest would collect them."""
from __future__ import annotations

import os
import pathlib
import shlex
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[3]
# The lab smoke of the newer cores: run by their nox lanes (make test), with .venv-2.20 and .venv-2.21.
NOX_ONLY = {"tests/lab/tests/test_cores_smoke_lab.py"}


def files_under(*trees):
    return {str(path.relative_to(ROOT)) for tree in trees for path in (ROOT / tree).rglob("test_*.py")
            if "state" not in path.relative_to(ROOT).parts}


def reached(target, tmp_path):
    """The test files that ``make <target>`` runs pytest on."""
    plan = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    commands = [shlex.split(line) for line in plan.stdout.splitlines() if "scripts/test.sh" in line]
    assert commands, plan.stdout
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    record = tmp_path / "pytest-args"
    stub = venv / "bin" / "pytest"
    stub.write_text('#!/bin/sh\nprintf "%%s\\n" "$@" >> %s\necho --- >> %s\n' % (record, record))
    stub.chmod(0o755)
    env = dict(os.environ, TRAINER_VENV=os.path.relpath(venv, ROOT))
    for argv in commands:
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env, timeout=120, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    files = set()
    for run in record.read_text().split("---\n"):
        words = run.split()
        ignored = {words[i + 1] for i, word in enumerate(words[:-1]) if word == "--ignore"}
        paths = [word for i, word in enumerate(words) if not word.startswith("-")
                 and (i == 0 or words[i - 1] != "--ignore")]
        for path in paths:
            found = {path} if path.endswith(".py") else files_under(path)
            files |= {name for name in found if name not in ignored}
    return files


def test_make_unit_runs_the_unit_and_hostile_tests_only(tmp_path):
    assert reached("unit", tmp_path) == files_under("tests/unit", "tests/hostile")


def test_make_lab_runs_every_playbook_and_lab_test_and_no_unit_test(tmp_path):
    files = reached("lab", tmp_path)
    expected = files_under("tests/playbooks", "tests/lab/tests", "tests/lab/gpu/tests") - NOX_ONLY
    assert sorted(expected - files) == [], "make lab leaves these out"
    assert sorted(files - expected) == [], "make lab runs what is not a playbook or lab test"
