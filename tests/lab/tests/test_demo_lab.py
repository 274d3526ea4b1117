"""`make demo` on the lab (scripts/demo.sh, issue 30): it says before the preflight that one box is meant to FAIL,
and ends by printing the exact commands to try next, which work as printed.

- by default the lab stays up; the printed commands, run in a shell as a person pastes them (after
  `. .venv/bin/activate`), preflight and patrol the lab's boxes by FQCN; `make test` then stops that fleet first
  (scripts/test.sh's demo_down stage), so that its lab tests find their addresses free;
- with DEMO_KEEP_LAB=0 the lab is stopped at the end and the commands start with the `tests/lab/fleet up` that
  brings the same fleet back.
"""
from __future__ import annotations

import os
import subprocess

from labhelpers import REPO, needs_root, run_fleet

pytestmark = needs_root


def demo(state, keep=None):
    """scripts/demo.sh with the lab's state in STATE; KEEP None leaves DEMO_KEEP_LAB unset (the default)."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("ANSIBLE_") and key != "DEMO_KEEP_LAB"}
    env.update(LAB_STATE_DIR=str(state))
    if keep is not None:
        env.update(DEMO_KEEP_LAB="1" if keep else "0")
    return subprocess.run(["bash", os.path.join(REPO, "scripts", "demo.sh")], capture_output=True, text=True,
                          env=env, cwd=REPO, stdin=subprocess.DEVNULL, timeout=600, check=False)


def next_steps(out):
    """The printed commands after 'demo: try the playbooks yourself', continuation lines joined."""
    lines = out.splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("demo: try the playbooks yourself"))
    commands, joined = [], ""
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            continue
        joined += line.strip()
        if joined.endswith("\\"):
            joined = joined[:-1] + " "
            continue
        commands.append(joined)
        joined = ""
    return commands


def announced_before_preflight(out):
    lines = out.splitlines()
    warn = [i for i, line in enumerate(lines) if "meant to FAIL" in line]
    play = [i for i, line in enumerate(lines) if line.startswith("PLAY [")]
    return warn and play and warn[0] < play[0]


def test_demo_stops_the_lab_and_prints_how_to_bring_it_back(lab_free, tmp_path):
    proc = demo(tmp_path / "state", keep=False)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert announced_before_preflight(proc.stdout), proc.stdout[:3000]
    assert any("lab-04" in line and "meant to FAIL" in line for line in proc.stdout.splitlines())
    commands = next_steps(proc.stdout)
    assert commands[0] == ". .venv/bin/activate"
    assert commands[1].startswith("tests/lab/fleet up --size 4 --variant lab-02=autodl-image "
                                  "--scenario lab-04=8xh100-hwslowdown"), commands
    assert commands[-1] == "tests/lab/fleet down"
    names = [c.split()[3] for c in commands if c.startswith("ansible-playbook")]
    assert names == ["remote_gpu.trainer.preflight", "remote_gpu.trainer.launch", "remote_gpu.trainer.patrol",
                     "remote_gpu.trainer.teardown"]
    status = run_fleet(["status"], tmp_path / "state", check=False)
    assert "running" not in status.stdout, status.stdout


def test_demo_keeps_the_lab_up_its_commands_run_as_printed_and_make_test_stops_it(lab_free, tmp_path):
    state = tmp_path / "state"
    try:
        proc = demo(state)
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
        commands = next_steps(proc.stdout)
        assert not any(c.startswith("tests/lab/fleet up") for c in commands)
        inventory = str(state / "inventory.yml")
        pick = [c for c in commands if c.startswith("ansible-playbook")]
        assert all(" -i %s " % inventory in c for c in pick), pick
        preflight = [c for c in pick if "remote_gpu.trainer.preflight" in c]
        patrol = [c.split("#")[0] for c in pick if "remote_gpu.trainer.patrol" in c]
        script = "\n".join(["set -e", commands[0], preflight[0], patrol[0]])
        env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
        shell = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, cwd=REPO,
                               stdin=subprocess.DEVNULL, timeout=300, check=False)
        assert shell.returncode == 0, shell.stdout[-4000:] + shell.stderr[-2000:]
        assert "preflight: 1 host(s): PASS 1" in shell.stdout and "patrol: 1 host(s): PASS 1" in shell.stdout
        # make test's first stage stops the fleet the demo left up (by its record), so its lab lane finds the
        # addresses free
        env = {key: value for key, value in os.environ.items() if key != "LAB_STATE_DIR"}
        env.update(DEMO_LAB_STATE=str(state))
        down = subprocess.run(["bash", os.path.join(REPO, "scripts", "test.sh"), "demo_down"], capture_output=True,
                              text=True, env=env, cwd=REPO, stdin=subprocess.DEVNULL, timeout=120, check=False)
        assert down.returncode == 0, down.stdout + down.stderr
        assert "stopping the lab fleet that make demo left up" in down.stdout, down.stdout
        status = run_fleet(["status"], state, check=False)
        assert "running" not in status.stdout, status.stdout
    finally:
        run_fleet(["down"], state, check=False)
