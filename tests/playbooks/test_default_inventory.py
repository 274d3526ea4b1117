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
    # the lab's, then an inventory with no host, so that one always parses (unparsed_is_failed, below)
    assert "inventory = ./tests/lab/state/inventory.yml,./inventories/empty/hosts.yml\n" in config


def test_a_provider_inventory_without_its_key_stops_the_run_under_the_shipped_config(tmp_path):
    """ansible.cfg's [inventory] unparsed_is_failed: a provider source whose key is not set fails the command (not a
    warning and a run over no host), with the plugin's message naming the variable to set; no request is made."""
    config = tmp_path / "runpod.yml"
    config.write_text("plugin: remote_gpu.trainer.runpod\napi_url: http://127.0.0.1:9/v1\n")
    env = ansible_env()
    for name in ("RUNPOD_API_KEY", "ANSIBLE_INVENTORY_UNPARSED_FAILED", "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED"):
        env.pop(name, None)
    for command in (["ansible-inventory", "-i", str(config), "--list"],
                    ["ansible-playbook", "-i", str(config), str(REPO / "playbooks" / "patrol.yml")]):
        proc = subprocess.run([str(VENV_BIN / command[0])] + command[1:], cwd=tmp_path, capture_output=True,
                              text=True, env=env, timeout=120, check=False)
        assert proc.returncode != 0, proc.stdout + proc.stderr
        words = " ".join(proc.stderr.split())
        assert "runpod: no API key. Set the environment variable RUNPOD_API_KEY" in words, proc.stderr
        assert "No inventory was parsed" in words and "Traceback" not in proc.stderr, proc.stderr
