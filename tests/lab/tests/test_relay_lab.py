"""The lab's network (tests/lab/fleetlib/relay.py): the latency relay delays each direction by half the round trip,
keeps the order of bytes within a connection, and a fleet started with --rtt-ms puts it between the inventory and
every sshd, where patrol works through it.

The delays are checked as lower bounds (a round trip through the relay can never be shorter than the configured
one), never as speeds: a loaded machine only makes them longer."""
from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import threading
import time

import pytest

from labhelpers import LAB, NET, REPO, assert_nothing_left, lab_busy, listening, needs_root, started_fleet

RELAY = os.path.join(LAB, "fleetlib", "relay.py")
VENV_BIN = os.path.join(REPO, ".venv", "bin")
RTT_MS = 150


def _echo_server(addr):
    """A TCP echo server on ``addr`` (a free port), in a thread; returns (port, the listening socket)."""
    server = socket.create_server((addr, 0))

    def serve():
        while True:
            try:
                conn, _peer = server.accept()
            except OSError:
                return
            threading.Thread(target=_echo, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1], server


def _echo(conn):
    with conn:
        while True:
            data = conn.recv(65536)
            if not data:
                return
            conn.sendall(data)


def _recv_exactly(sock, size):
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "the relay closed the connection after %d of %d bytes" % (len(data), size)
        data += chunk
    return data


@pytest.fixture
def relay_to_echo(tmp_path):
    """A relay (rtt RTT_MS, jitter given by the test) on LAB_NET.9 in front of an echo server on LAB_NET.8."""
    if os.geteuid() != 0:
        pytest.skip("the lab tests need root")
    echo_addr, relay_addr = f"{NET}.8", f"{NET}.9"
    started = []

    def start(jitter_ms):
        port, server = _echo_server(echo_addr)
        with socket.socket() as probe:
            probe.bind((relay_addr, 0))
            relay_port = probe.getsockname()[1]
        if listening(relay_addr, relay_port):
            lab_busy(f"{relay_addr}:{relay_port} is taken")
        ready = tmp_path / ("ready%d" % len(started))
        conf = tmp_path / ("relay%d.json" % len(started))
        conf.write_text(json.dumps({"rtt_ms": RTT_MS, "jitter_ms": jitter_ms, "ready": str(ready),
                                    "routes": [[relay_addr, relay_port, echo_addr, port]]}))
        proc = subprocess.Popen([sys.executable, "-I", RELAY, str(conf)])
        started.append((proc, server))
        deadline = time.monotonic() + 10
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the relay did not start"
            time.sleep(0.02)
        return relay_addr, relay_port

    yield start
    for proc, server in started:
        proc.terminate()
        proc.wait(timeout=10)
        server.close()


@pytest.mark.root
@pytest.mark.lab
@needs_root
def test_relay_delays_every_round_trip_and_the_handshake(relay_to_echo):
    addr, port = relay_to_echo(0)
    rtt = RTT_MS / 1000.0
    start = time.monotonic()
    with socket.create_connection((addr, port), timeout=30) as sock:
        sock.sendall(b"hello")
        assert _recv_exactly(sock, 5) == b"hello"
        # TCP's handshake (three half trips) and one round trip: the first answer comes two round trips after connect
        assert time.monotonic() - start >= 2 * rtt
        for _round in range(3):
            sent = time.monotonic()
            sock.sendall(b"ping")
            assert _recv_exactly(sock, 4) == b"ping"
            assert time.monotonic() - sent >= rtt


@pytest.mark.root
@pytest.mark.lab
@needs_root
def test_relay_with_jitter_keeps_the_order_within_a_connection(relay_to_echo):
    jitter_ms = 100
    addr, port = relay_to_echo(jitter_ms)
    rng = random.Random(33)
    chunks = [bytes(rng.randrange(256) for _byte in range(rng.randrange(1, 3000))) for _chunk in range(60)]
    with socket.create_connection((addr, port), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for chunk in chunks:           # many small writes, each its own chunk with its own jittered delay
            sock.sendall(chunk)
            time.sleep(0.002)
        expected = b"".join(chunks)
        assert _recv_exactly(sock, len(expected)) == expected
        sent = time.monotonic()
        sock.sendall(b"x")
        assert _recv_exactly(sock, 1) == b"x"
        assert time.monotonic() - sent >= (RTT_MS - jitter_ms) / 1000.0


@pytest.mark.root
@pytest.mark.lab
@needs_root
def test_fleet_with_rtt_runs_patrol_through_the_relay(lab_free, tmp_path):
    rtt_ms, jitter_ms = 100, 10
    with started_fleet(tmp_path / "lab", "--size", "3", "--rtt-ms", str(rtt_ms), "--jitter-ms",
                       str(jitter_ms)) as fleet:
        record = fleet.record
        relay = record["relay"]
        assert relay["rtt_ms"] == rtt_ms and relay["jitter_ms"] == jitter_ms
        assert {h["ansible_port"] for h in fleet.hosts.values()} == {relay["port"]} != {22}
        # the inventory's address and port lead through the delay: sshd's banner comes two round trips after connect
        host = fleet.hosts["lab-02"]
        start = time.monotonic()
        with socket.create_connection((host["ansible_host"], host["ansible_port"]), timeout=30) as sock:
            assert sock.recv(64).startswith(b"SSH-2.0-")
            assert time.monotonic() - start >= 2 * (rtt_ms - jitter_ms) / 1000.0
        report = tmp_path / "patrol.json"
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_DEPRECATION_WARNINGS="0", PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))
        proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", fleet.inventory_path,
                               os.path.join(REPO, "playbooks", "patrol.yml"), "-e", "patrol_report_path=%s" % report],
                              capture_output=True, text=True, env=env, timeout=300, check=False)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        rows = {row["host"]: row["verdict"] for row in json.loads(report.read_text())["hosts"]}
        assert rows == {"lab-01": "PASS", "lab-02": "PASS", "lab-03": "PASS"}, proc.stdout
    assert_nothing_left(str(tmp_path / "lab"), record)
