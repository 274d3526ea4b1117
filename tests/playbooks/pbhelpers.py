"""Helpers to run the collection's playbooks for real with ansible-playbook, against localhost or the lab."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
VENV_BIN = pathlib.Path(sys.executable).parent
# this machine, with the local profile
LOCAL_INVENTORY = REPO / "inventories" / "local" / "hosts.yml"


def ansible_env(**extra):
    env = dict(os.environ)
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               PATH="%s:%s" % (VENV_BIN, env.get("PATH", "")), LC_ALL="C.UTF-8")
    env.update(extra)
    return env


def run_playbook(playbook, inventory, *args, cwd=None, **env):
    """ansible-playbook with the repo's ansible.cfg; returns CompletedProcess (text)."""
    cmd = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), str(playbook), *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd or REPO, env=ansible_env(**env),
                          timeout=600, check=False)
