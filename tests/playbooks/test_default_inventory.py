"""The checkout's default inventory never reaches a stranger's host: `ansible-inventory --list` without -i lists
only hosts on this machine (the lab fleet's, when it is up; none otherwise)."""

from __future__ import annotations

import ipaddress
import json
import subprocess

from pbhelpers import REPO, VENV_BIN, ansible_env


def local_address(address):
    if address in ("localhost", None):
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def test_ansible_inventory_without_i_lists_no_remote_host():
    # whether the lab is up (its hosts are on loopback) or not (no host at all)
    proc = subprocess.run([str(VENV_BIN / "ansible-inventory"), "--list"], cwd=REPO, capture_output=True, text=True,
                          env=ansible_env(), timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    listing = json.loads(proc.stdout)
    hostvars = listing.get("_meta", {}).get("hostvars", {})
    remote = {host: values.get("ansible_host", host) for host, values in hostvars.items()
              if not local_address(values.get("ansible_host", host))}
    assert remote == {}, "the default inventory reaches hosts outside this machine: %s" % remote


def test_the_default_inventory_is_the_labs():
    config = (REPO / "ansible.cfg").read_text(encoding="utf-8")
    assert "inventory = ./tests/lab/state/inventory.yml" in config
