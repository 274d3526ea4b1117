"""roles/pip_filtered/files/framework_versions.py: what pip_filtered runs on the box, as it runs it (python -c)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "roles" / "pip_filtered" / "files" / "framework_versions.py"


def run(*names):
    proc = subprocess.run([sys.executable, "-c", SCRIPT.read_text(), *names], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_installed_and_missing_packages():
    from importlib import metadata
    got = run("PyYAML", "no-such-package-h5")
    assert got == {"PyYAML": metadata.version("PyYAML"), "no-such-package-h5": None}


def test_no_names_is_an_empty_object():
    assert run() == {}
