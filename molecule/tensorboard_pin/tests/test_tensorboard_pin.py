"""tensorboard_pin on the lab fleet, checked against a real TensorBoard serving the pinned log directory."""

from __future__ import annotations

import json
import pathlib
import shlex
import sys
import time
import urllib.request

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "resources"))
import labenv  # noqa: E402

CONVERGE = labenv.converge(__file__)
testinfra_hosts = labenv.hosts("autodl")
ENV = "/root/job-env/bin"
SRC = "/root/autodl-tmp/runs/exp42/tb"
WRITE = """
import sys, time
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter
writer = EventFileWriter(sys.argv[1])
for step in range(3):
    value = Summary.Value(tag="loss", simple_value=1.0 / (step + 1))
    writer.add_event(Event(wall_time=time.time(), step=step, summary=Summary(value=[value])))
writer.close()
"""


def get_json(url):
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 (a lab address)
        return json.loads(resp.read().decode())


def wait(what, check, seconds):
    deadline = time.monotonic() + seconds
    while True:
        try:
            got = check()
            if got:
                return got
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError("%s not within %s s" % (what, seconds))
        time.sleep(0.5)


@pytest.fixture(scope="module")
def tensorboard(host):
    """The platform's TensorBoard command, bound to the instance's own address (the lab shares one network)."""
    addr = labenv.hostvars(labenv.name(host))["ansible_host"]
    host.check_output(
        "setsid nohup %s/tensorboard --logdir /root/tf-logs --port 6007 --reload_interval 5 --host %s"
        " >/root/tensorboard.log 2>&1 </dev/null & echo $! >/root/tensorboard.pid" % (ENV, addr))
    base = "http://%s:6007" % addr
    wait("TensorBoard answering", lambda: get_json(base + "/data/runs") is not None, 60)
    yield base
    host.run("kill $(cat /root/tensorboard.pid)")


def test_link_points_at_the_run(host):
    link = host.file("/root/tf-logs/exp42")
    assert link.is_symlink and link.linked_to == SRC
    assert host.file(SRC).is_directory


def test_tensorboard_lists_the_run_and_serves_its_scalars(host, tensorboard):
    # the writer starts after TensorBoard: the run must appear within the reload window (5 s, plus loading)
    host.check_output("%s/python -c %s %s" % (ENV, shlex.quote(WRITE), SRC))
    runs = wait("run exp42 in /data/runs", lambda: "exp42" in get_json(tensorboard + "/data/runs"), 20)
    assert runs
    url = tensorboard + "/data/plugin/scalars/scalars?run=exp42&tag=loss"
    points = wait("scalars of exp42", lambda: get_json(url), 20)
    assert [p[1] for p in points] == [0, 1, 2]
    assert [round(p[2], 4) for p in points] == [1.0, 0.5, 0.3333]


def test_rerun_changes_nothing_and_check_mode_too():
    for args in ([], ["--check"]):
        proc = labenv.run_playbook(CONVERGE, *args)
        assert proc.returncode == 0 and labenv.recap_changed(proc.stdout) == 0, proc.stdout[-3000:]


def test_runpod_is_a_noop_with_reason():
    proc = labenv.run_playbook(CONVERGE, "--limit", "runpod")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "tensorboard_pin: nothing to do on lab-02: profile 'runpod' has no pinned TensorBoard" in proc.stdout


def test_a_different_link_is_refused_unless_forced(host):
    other = "/root/autodl-tmp/runs/other/tb"
    proc = labenv.run_playbook(CONVERGE, "--limit", "autodl", "-e", "tensorboard_pin_src=%s" % other)
    assert proc.returncode == 2
    assert "/root/tf-logs/exp42 on lab-01 is a link to %s, not to %s" % (SRC, other) in proc.stdout
    assert "tensorboard_pin_force: true" in proc.stdout
    assert host.file("/root/tf-logs/exp42").linked_to == SRC
    proc = labenv.run_playbook(CONVERGE, "--limit", "autodl", "-e", "tensorboard_pin_src=%s" % other,
                               "-e", '{"tensorboard_pin_force": true}')
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert host.file("/root/tf-logs/exp42").linked_to == other
    proc = labenv.run_playbook(CONVERGE, "--limit", "autodl", "-e", '{"tensorboard_pin_force": true}')
    assert proc.returncode == 0 and host.file("/root/tf-logs/exp42").linked_to == SRC


def test_a_real_directory_is_never_replaced(host):
    host.check_output("mkdir -p /root/tf-logs/manual")
    proc = labenv.run_playbook(CONVERGE, "--limit", "autodl", "-e", "tensorboard_pin_run=manual",
                               "-e", '{"tensorboard_pin_force": true}')
    assert proc.returncode == 2
    assert "/root/tf-logs/manual on lab-01 exists and is not a link; it is never replaced" in proc.stdout
    assert host.file("/root/tf-logs/manual").is_directory
