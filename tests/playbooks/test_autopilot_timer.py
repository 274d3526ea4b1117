"""remote_gpu.trainer.autopilot_timer with cron on this machine, as a user runs it (playbooks/autopilot_timer.yml).

No cron daemon runs here, so the test plays cron: it takes the installed line from `crontab -l` and runs it through
/bin/sh with cron's bare environment. That proves the tick runs under flock, appends to its log, and that a second
tick while the first still runs is skipped (and says so). Check mode changes nothing; a second run changes nothing;
state absent removes the entry, the script, the lock and the log. The systemd units are rendered and their
ExecStart run the same way in tests/unit/roles/test_autopilot_timer_units.py.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import pytest

from pbhelpers import REPO, VENV_BIN, ansible_env, run_playbook

pytestmark = pytest.mark.skipif(not shutil.which("crontab"), reason="crontab is not installed (apt-get install cron)")

PLAYBOOK = REPO / "playbooks" / "autopilot_timer.yml"
INVENTORY = REPO / "inventories" / "local" / "hosts.yml"
CRON_ENV = {"PATH": "/usr/bin:/bin", "SHELL": "/bin/sh", "LANG": "C"}  # what cron gives a job

STAND_IN = r'''
import os, sys, time
marker, release = sys.argv[1], sys.argv[2]
with open(marker, "a") as handle:
    handle.write("ran %d\n" % os.getpid())
deadline = time.time() + 300
while not os.path.exists(release) and time.time() < deadline:
    time.sleep(0.1)
print("stand-in done")
'''


def crontab():
    got = subprocess.run(["crontab", "-l"], capture_output=True, text=True, check=False)
    return got.stdout if got.returncode == 0 else ""


def cron_job(name):
    """The command of the entry that ansible.builtin.cron wrote for ``name`` (the line after its marker)."""
    lines = crontab().splitlines()
    for index, line in enumerate(lines):
        if line == "#Ansible: remote_gpu.trainer autopilot tick (%s)" % name:
            fields = lines[index + 1].split(None, 5)
            return fields[:5], fields[5]
    return None, None


def wait_for(predicate, what, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    pytest.fail("timed out waiting for %s" % what)


@pytest.fixture
def timer(tmp_path):
    """Settings for a throw-away timer, and a clean crontab afterwards whatever happens."""
    name = "nt-test-%d" % os.getpid()
    settings = {"autopilot_timer_name": name, "autopilot_timer_dir": str(tmp_path / "state"),
                "autopilot_timer_backend": "cron", "autopilot_timer_interval_minutes": 5}
    yield name, settings
    lines, remaining = crontab().splitlines(keepends=True), []
    for index, line in enumerate(lines):
        if name not in line and not (index and name in lines[index - 1]):  # the marker and its job line
            remaining.append(line)
    subprocess.run(["crontab", "-"], input="".join(remaining), text=True, check=False)


def play(tmp_path, settings, *args):
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps(settings))
    # as a user types it: cd into the project, then ansible-playbook (the timer's directory is that $PWD)
    proc = run_playbook(PLAYBOOK, INVENTORY, "-e", "@%s" % extra, *args, cwd=REPO, PWD=str(REPO))
    return proc, proc.stdout + proc.stderr


def recap_changed(output):
    return int(output.split("changed=")[-1].split()[0])


def test_cron_tick_runs_under_flock_skips_an_overlap_and_uninstalls(tmp_path, timer):
    name, settings = timer
    marker, release = tmp_path / "marker", tmp_path / "release"
    (tmp_path / "stand_in.py").write_text(STAND_IN)
    settings["autopilot_timer_command"] = [sys.executable, str(tmp_path / "stand_in.py"), str(marker), str(release)]
    state = tmp_path / "state"

    proc, output = play(tmp_path, settings, "--check")
    assert proc.returncode == 0, output[-3000:]
    assert recap_changed(output) > 0 and cron_job(name) == (None, None) and not state.exists()

    proc, output = play(tmp_path, settings)
    assert proc.returncode == 0, output[-3000:]
    schedule, job = cron_job(name)
    assert schedule == ["*/5", "*", "*", "*", "*"]
    assert job.startswith("%s -n -E 75 %s/tick.lock %s/tick.sh >> %s/tick.log 2>&1" % (
        shutil.which("flock"), state, state, state))
    assert (state / "tick.sh").stat().st_mode & 0o777 == 0o700 and state.stat().st_mode & 0o777 == 0o700

    proc, output = play(tmp_path, settings)
    assert proc.returncode == 0 and recap_changed(output) == 0, output[-3000:]

    # cron's part: the line through /bin/sh with cron's environment; the first tick holds the lock...
    first = subprocess.Popen(["/bin/sh", "-c", job], env=CRON_ENV, cwd="/")
    try:
        wait_for(lambda: marker.exists() and marker.read_text().count("ran ") == 1, "the first tick to start")
        # ...so a second tick meanwhile is skipped, and says so in the log
        second = subprocess.run(["/bin/sh", "-c", job], env=CRON_ENV, cwd="/", timeout=120, check=False)
        assert second.returncode == 0
        assert marker.read_text().count("ran ") == 1
        assert "autopilot tick skipped at" in (state / "tick.log").read_text()
        release.touch()
        assert first.wait(timeout=120) == 0
    finally:
        release.touch()
        first.wait(timeout=120)
    log = (state / "tick.log").read_text()
    assert log.count("=== autopilot tick ") == 1 and "stand-in done" in log
    # the lock is free again: the next tick runs
    third = subprocess.run(["/bin/sh", "-c", job], env=CRON_ENV, cwd="/", timeout=120, check=False)
    assert third.returncode == 0 and marker.read_text().count("ran ") == 2

    settings["autopilot_timer_state"] = "absent"
    proc, output = play(tmp_path, settings)
    assert proc.returncode == 0 and recap_changed(output) > 0, output[-3000:]
    assert cron_job(name) == (None, None) and not state.exists()
    proc, output = play(tmp_path, settings)
    assert proc.returncode == 0 and recap_changed(output) == 0, output[-3000:]


def test_default_command_runs_the_playbook_with_the_install_inventory_under_cron(tmp_path, timer):
    name, settings = timer
    tick = tmp_path / "tick.yml"  # stands for playbooks/autopilot.yml: the command around it is what is tested
    tick.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.debug:\n"
                    "        msg: 'tick over {{ inventory_hostname }}'\n")
    settings.update(autopilot_timer_playbook=str(tick), autopilot_timer_interval_minutes=120)
    proc, output = play(tmp_path, settings)
    assert proc.returncode == 0, output[-3000:]
    schedule, job = cron_job(name)
    assert schedule == ["0", "*/2", "*", "*", "*"]
    script = (tmp_path / "state" / "tick.sh").read_text()
    assert "exec %s/ansible-playbook -i %s %s\n" % (os.path.dirname(sys.executable), INVENTORY, tick) in script
    assert "cd %s " % REPO in script  # the directory the timer was installed from (its ansible.cfg)
    subprocess.run(["/bin/sh", "-c", job], env=CRON_ENV, cwd="/", timeout=300, check=False)
    log = (tmp_path / "state" / "tick.log").read_text()
    assert "tick over localhost" in log and "failed=0" in log, log[-2000:]


def cron_daemon_runs():
    """Whether a process named as a cron daemon runs on this machine (what the role looks for)."""
    for comm in pathlib.Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() in ("cron", "crond", "fcron"):
                return True
        except OSError:
            continue
    return False


def test_without_pwd_the_role_asks_for_the_ticks_directory(tmp_path, timer):
    """Run from cron, env -i or CI, ansible-playbook has no PWD: the role stops and asks for autopilot_timer_chdir
    (the user's project, where ansible.cfg and reports/ are), and with it the tick runs there, never in the
    playbook's directory (run by its FQCN, the installed collection's, where it once ended up)."""
    _name, settings = timer
    project = tmp_path / "my project"
    project.mkdir()
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps(settings))
    env = ansible_env()
    env.pop("PWD", None)

    def install(*args):
        proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(INVENTORY), str(PLAYBOOK), "-e",
                               "@%s" % extra, "--check", "--diff", *args], capture_output=True, text=True,
                              cwd=str(project), env=env, timeout=600, check=False)
        return proc.returncode, " ".join((proc.stdout + proc.stderr).split())

    rc, output = install()
    assert rc != 0 and 'autopilot_timer_chdir, the directory the tick runs in, an absolute path (got "":' in output
    assert "-e autopilot_timer_chdir=DIR" in output and "cd %s" % PLAYBOOK.parent not in output
    rc, output = install("-e", json.dumps({"autopilot_timer_chdir": str(project)}))
    assert rc == 0, output[-3000:]
    assert "+cd '%s' || exit 1" % project in output, output[-3000:]


def test_warns_when_no_cron_daemon_will_run_the_entry(tmp_path, timer):
    """No cron daemon runs here (and no systemd user manager): the install says that nothing will run the tick.
    With a process named cron running (a copy of sleep, which is all the role can see of a daemon), it does not."""
    if cron_daemon_runs():
        pytest.skip("a cron daemon runs on this machine: the case of the warning cannot be made here")
    _name, settings = timer
    settings["autopilot_timer_command"] = ["true"]
    warning = "WARNING the cron entry is installed, but no cron daemon runs on this machine"
    proc, output = play(tmp_path, settings, "--check")
    assert proc.returncode == 0 and warning in " ".join(output.split()), output[-3000:]
    assert "start cron (sudo systemctl enable --now cron" in " ".join(output.split())
    stand_in = tmp_path / "cron"
    shutil.copy(shutil.which("sleep"), stand_in)
    daemon = subprocess.Popen([str(stand_in), "300"])
    try:
        proc, output = play(tmp_path, settings, "--check")
    finally:
        daemon.kill()
        daemon.wait()
    assert proc.returncode == 0 and "no cron daemon runs" not in output, output[-3000:]


def test_bad_settings_are_refused_with_a_reason(tmp_path, timer):
    _name, settings = timer
    for bad, words in (({"autopilot_timer_interval_minutes": 90}, "whole number of hours"),
                       ({"autopilot_timer_name": "a b"}, "letters, digits"),
                       ({"autopilot_timer_playbook": str(tmp_path / "nowhere.yml")}, "nowhere.yml does not exist")):
        proc, output = play(tmp_path, dict(settings, **bad), "--check")
        assert proc.returncode != 0 and words in output, output[-2000:]
        assert "Traceback" not in output


def test_systemd_units_are_valid_and_their_execstart_skips_an_overlap(tmp_path):
    """No systemd manager runs here: the role's unit templates are rendered with its own variables, checked with
    systemd-analyze verify, and the service's ExecStart is run through a shell, twice at once."""
    role = REPO / "roles" / "autopilot_timer"
    state, units = tmp_path / "state", tmp_path / "units"
    marker, release = tmp_path / "marker", tmp_path / "release"
    (tmp_path / "stand_in.py").write_text(STAND_IN)
    state.mkdir()
    playbook = tmp_path / "render.yml"
    playbook.write_text(json.dumps([{
        "name": "Render the units", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars_files": [str(role / "defaults" / "main.yml"), str(role / "vars" / "main.yml")],
        "tasks": [{"name": "Units", "ansible.builtin.file": {"path": str(units), "state": "directory", "mode": "0755"}},
                  {"name": "Render", "ansible.builtin.template": {"src": str(role / "templates" / "{{ item.src }}"),
                                                                  "dest": "{{ item.dest }}", "mode": "0644"},
                   "loop": "{{ _autopilot_timer_units }}"},
                  {"name": "Script", "ansible.builtin.template": {"src": str(role / "templates" / "tick.sh.j2"),
                                                                  "dest": str(state / "tick.sh"), "mode": "0700"}}],
    }]))
    extra = tmp_path / "extra.json"  # extra vars: above the role's vars files, as a user's -e is
    extra.write_text(json.dumps({
        "ansible_python_interpreter": sys.executable, "autopilot_timer_name": "nt-unit",
        "autopilot_timer_dir": str(state), "autopilot_timer_systemd_dir": str(units),
        "autopilot_timer_interval_minutes": 7, "_autopilot_timer_flock": shutil.which("flock"),
        "autopilot_timer_command": [sys.executable, str(tmp_path / "stand_in.py"), str(marker), str(release)]}))
    proc = run_playbook(playbook, INVENTORY, "-e", "@%s" % extra)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    service, timer_unit = units / "nt-unit.service", units / "nt-unit.timer"
    if shutil.which("systemd-analyze"):
        verify = subprocess.run(["systemd-analyze", "verify", str(service), str(timer_unit)], capture_output=True,
                                text=True, check=False)
        assert verify.returncode == 0 and verify.stderr == "", verify.stderr
    assert "OnUnitActiveSec=7min" in timer_unit.read_text() and "Unit=nt-unit.service" in timer_unit.read_text()
    settings = dict(line.split("=", 1) for line in service.read_text().splitlines() if "=" in line and
                    not line.startswith("#"))
    assert settings["SuccessExitStatus"] == "75" and settings["StandardOutput"] == "append:%s/tick.log" % state
    exec_start = settings["ExecStart"]
    assert exec_start == "%s -n -E 75 %s/tick.lock %s/tick.sh" % (shutil.which("flock"), state, state)
    # systemd's part: ExecStart with stdout appended to the log; a second start meanwhile exits 75 (a success)
    with open(state / "tick.log", "a") as log:
        first = subprocess.Popen(["/bin/sh", "-c", exec_start], stdout=log, stderr=subprocess.STDOUT, env=CRON_ENV)
        try:
            wait_for(lambda: marker.exists() and marker.read_text().count("ran ") == 1, "the first tick to start")
            second = subprocess.run(["/bin/sh", "-c", exec_start], stdout=log, env=CRON_ENV, timeout=120, check=False)
            assert second.returncode == 75 and marker.read_text().count("ran ") == 1
        finally:
            release.touch()
            assert first.wait(timeout=120) == 0
    assert "stand-in done" in (state / "tick.log").read_text()
