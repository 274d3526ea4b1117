"""`tests/lab/fleet reboot`, `vanish` and `revive` (issue 11, item 6): a platform restart kills every process of
the instance (tmux and the jobs) but keeps its data disk and the region's durable FS; on vast.ai it reruns
/root/onstart.sh. A vanished box stops answering SSH until it is revived, and its jobs keep running."""
from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from labhelpers import needs_root, run_fleet, started_fleet

from fleetlib import power


@needs_root
def test_reboot_vanish_revive(lab_free, tmp_path):
    with started_fleet(tmp_path / "lab", "--size", "2", "--platform", "lab-02=vastai") as lab:
        lab.ssh("lab-01", "tmux new-session -d -s job 'sleep 1000'; setsid -f nohup sleep 999 > /dev/null 2>&1; "
                          "echo kept > /root/autodl-tmp/data.txt; echo kept > /root/autodl-fs/durable.txt")
        assert "sleep 999" in lab.ssh("lab-01", "ps -eo args").stdout
        lab.ssh("lab-02", "printf '#!/bin/bash\\necho \"onstart $CONTAINER_ID\" >> /root/onstart.log\\n"
                          "setsid -f sleep 777 > /dev/null 2>&1\\n' > /root/onstart.sh; chmod +x /root/onstart.sh")

        out = run_fleet(["reboot", "lab-01"], lab.state).stdout
        assert "lab-01: rebooted" in out
        ps = lab.ssh("lab-01", "ps -eo args").stdout
        assert "sleep" not in ps and "tmux" not in ps
        assert lab.ssh("lab-01", "tmux ls", check=False).returncode != 0
        assert lab.ssh("lab-01", "cat /root/autodl-tmp/data.txt /root/autodl-fs/durable.txt").stdout == "kept\nkept\n"

        out = run_fleet(["reboot", "lab-02"], lab.state).stdout
        assert "/root/onstart.sh ran (exit 0)" in out
        assert lab.ssh("lab-02", "cat /root/onstart.log").stdout.startswith("onstart ")
        assert "sleep 777" in lab.ssh("lab-02", "ps -eo args").stdout

        lab.ssh("lab-01", "setsid -f nohup sleep 555 > /dev/null 2>&1")
        assert "vanished" in run_fleet(["vanish", "lab-01"], lab.state).stdout
        argv = lab.ssh_argv("lab-01", "true")
        argv[argv.index("ConnectTimeout=10")] = "ConnectTimeout=3"
        gone = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert gone.returncode == 255 and "timed out" in gone.stderr
        assert lab.ssh("lab-02", "true").returncode == 0  # the neighbour still answers
        assert "revived" in run_fleet(["revive", "lab-01"], lab.state).stdout
        assert "sleep 555" in lab.ssh("lab-01", "ps -eo args").stdout  # the job ran on meanwhile

        bad = run_fleet(["reboot", "lab-09"], lab.state, check=False)
        assert bad.returncode == 1 and "no instance lab-09" in bad.stderr


@pytest.mark.skipif(not shutil.which("tmux"), reason="needs tmux")
def test_a_reset_wakes_no_pane_to_record_its_own_kill(tmp_path, monkeypatch):
    # A job wrapper in a tmux pane that records a hangup. Killing tmux's server hangs up the pane's terminal, and the
    # kernel sends its session SIGHUP and SIGCONT, which wakes a frozen wrapper; each SIGKILL is followed by a pause
    # here, as a loaded machine pauses the reset between two kills, so a wrapper still unkilled then would record.
    record = tmp_path / "recorded"
    socket = str(tmp_path / "tmux.sock")   # the test's own server, its socket under tmp_path
    wrapper = "trap 'echo 129 > %s; exit 129' HUP; sleep 1000 & wait" % record
    subprocess.run(["tmux", "-S", socket, "new-session", "-d", "bash", "-c", wrapper], check=True)
    try:
        server = int(subprocess.run(["tmux", "-S", socket, "display", "-p", "#{pid}"], capture_output=True,
                                    text=True, check=True).stdout)
        deadline = time.monotonic() + 10
        while len(tree := power.st.tree(server)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(tree) == 3, tree   # the server, the wrapper, its sleep
        signal_each = power._signal   # pylint: disable=protected-access

        def slowly(pids, sig):
            for pid in pids:
                signal_each([pid], sig)
                if sig == power.signal.SIGKILL:
                    time.sleep(0.3)
        monkeypatch.setattr(power, "_signal", slowly)
        power._kill_all(  # pylint: disable=protected-access
            lambda: [pid for pid in tree if power.st.start_time(pid) is not None])
        assert not record.exists(), "the wrapper ran again after the reset began and recorded its kill"
    finally:
        subprocess.run(["tmux", "-S", socket, "kill-server"], capture_output=True, check=False)
