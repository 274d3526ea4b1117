"""Each venv's pinned requirements and its lock (scripts/setup.sh's build_venv installs requirements-X.txt under
constraints-X.txt, pip freeze of a venv that passed make test): a pin changed without the lock refreshed would fail
make setup with pip's conflict; this says which file to refresh, and that nothing in the lock floats."""
from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)\s*$")


def pins(path):
    """{normalised name: version} of a file's name==version lines; the other lines, comments and blanks aside."""
    found, other = {}, []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = PIN.match(line)
        if match:
            found[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(2)
        else:
            other.append(line)
    return found, other


@pytest.mark.parametrize("requirements", sorted(p.name for p in ROOT.glob("requirements-*.txt")))
def test_every_pin_is_in_its_lock_and_the_lock_pins_everything(requirements):
    lock = ROOT / requirements.replace("requirements", "constraints", 1)
    assert lock.is_file(), "%s has no lock: run make setup, which writes %s, and commit it" % (requirements, lock.name)
    wanted, loose = pins(ROOT / requirements)
    locked, unpinned = pins(lock)
    assert not loose, "%s: every line pins name==version: %s" % (requirements, loose)
    assert not unpinned, "%s: every line pins name==version (pip freeze): %s" % (lock.name, unpinned)
    stale = ["%s==%s (the lock has %s)" % (name, version, locked.get(name, "nothing"))
             for name, version in sorted(wanted.items()) if locked.get(name) != version]
    assert not stale, "%s changed without its lock: %s; delete %s, run make setup and make test, commit the new " \
        "lock" % (requirements, ", ".join(stale), lock.name)
    assert "ansible-core" in locked and "cryptography" in locked
