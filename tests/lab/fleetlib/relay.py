"""The lab's network: a latency relay in front of every instance's sshd (`fleet up --rtt-ms N --jitter-ms J`).

This machine's kernel has no netem (nor prio) queueing discipline, so the delay is made in user space, the way
toxiproxy's latency toxic makes it: every chunk of bytes read from one side is written to the other side half a round
trip later (``rtt/2``), plus a jitter drawn uniformly from ``[-jitter/2, +jitter/2]`` for each chunk and direction (so
a round trip varies within ``rtt +- jitter``). A chunk is never written before the one read before it (the order
within a connection is TCP's), so a jittered chunk may wait for its predecessor. The relay's own accept is local and
instant, so it pays TCP's three-way handshake apart: it connects to sshd three half trips after the client connected
(SYN, SYN-ACK, ACK), and the client's first bytes reach sshd then, as they would on a network; sshd's banner reaches
the client two round trips after its connect, as on a network.

One process serves the whole fleet (asyncio): it listens on ``<instance address>:<relay port>`` for every running
instance and forwards to ``<instance address>:22``. The inventory and ssh_config point at the relay's port; sshd
still listens on port 22 (the tests' own checks can go around the relay). A vanished instance (SIGSTOPped sshd) still
accepts in the kernel and never answers, through the relay as without it; a ``down`` instance has no relay listener
either, so its address refuses connections.

Run as ``python3 -I relay.py CONFIG`` (JSON: ``rtt_ms``, ``jitter_ms``, ``routes``: ``[[listen_addr, listen_port,
upstream_addr, upstream_port], ...]``, ``ready``: a file it writes once it listens on every route). Standard library
only.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import sys

CHUNK = 65536
QUEUE = 256          # chunks in flight per direction before the relay stops reading (back-pressure, as a window)
DEFAULT_PORT = 2222


class Delay:
    """Half a round trip with its jitter, in seconds."""

    def __init__(self, rtt_ms: float, jitter_ms: float):
        self.half = rtt_ms / 2000.0
        self.jitter = jitter_ms / 2000.0

    def sample(self) -> float:
        if not self.jitter:
            return self.half
        return max(0.0, self.half + random.uniform(-self.jitter, self.jitter))


async def _pump(reader: asyncio.StreamReader, writer_ready: asyncio.Future, delay: Delay, not_before: float = 0.0):
    """Copy ``reader`` to the writer that ``writer_ready`` gives, each chunk ``delay`` later, in order."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue(QUEUE)

    async def read_side():
        last = not_before
        while True:
            try:
                data = await reader.read(CHUNK)
            except (ConnectionError, OSError):
                data = b""
            last = max(loop.time() + delay.sample(), last)
            await queue.put((last, data))
            if not data:
                return

    reading = asyncio.ensure_future(read_side())
    try:
        writer = await writer_ready
        if writer is None:
            return
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                if writer.can_write_eof() and not writer.is_closing():
                    try:
                        writer.write_eof()
                    except OSError:
                        pass
                return
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        return
    finally:
        reading.cancel()


def _close(writer):
    if writer is not None and not writer.is_closing():
        writer.close()


async def _serve(client_reader, client_writer, upstream: tuple, delay: Delay):
    loop = asyncio.get_running_loop()
    opened = loop.time()
    to_server: asyncio.Future = loop.create_future()
    to_client: asyncio.Future = loop.create_future()
    to_client.set_result(client_writer)
    server_writer = None
    # the handshake's three half trips; the client's bytes reach sshd after it, never before
    handshake = delay.sample() + delay.sample() + delay.sample()
    up = asyncio.ensure_future(_pump(client_reader, to_server, delay, not_before=opened + handshake))
    down = None
    try:
        await asyncio.sleep(max(0.0, opened + handshake - loop.time()))
        try:
            server_reader, server_writer = await asyncio.open_connection(*upstream)
        except OSError:
            to_server.set_result(None)
            return
        to_server.set_result(server_writer)
        down = asyncio.ensure_future(_pump(server_reader, to_client, delay))
        await asyncio.wait([up, down], return_when=asyncio.ALL_COMPLETED)
    finally:
        for task in (up, down):
            if task is not None and not task.done():
                task.cancel()
        _close(server_writer)
        _close(client_writer)


async def main_async(config: dict) -> None:
    delay = Delay(float(config.get("rtt_ms", 0)), float(config.get("jitter_ms", 0)))
    servers = []
    for listen_addr, listen_port, up_addr, up_port in config["routes"]:
        def handler(r, w, _up=(up_addr, int(up_port))):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return _serve(r, w, _up, delay)
        servers.append(await asyncio.start_server(handler, listen_addr, int(listen_port), reuse_address=True,
                                                  backlog=512))
    if config.get("ready"):
        tmp = config["ready"] + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write("%d\n" % os.getpid())
        os.replace(tmp, config["ready"])
    await asyncio.gather(*(s.serve_forever() for s in servers))


def start(state: str, record: dict, insts: list, rtt_ms: float, jitter_ms: float, port: int) -> dict:
    """Start the fleet's relay (our child, in its own session) for every running instance of ``insts``; record its
    PID before waiting for it to listen. Returns the record's ``relay`` entry."""
    import subprocess
    import time
    from . import state as st
    d = os.path.join(state, "relay")
    os.makedirs(d, exist_ok=True)
    ready = os.path.join(d, "ready")
    if os.path.exists(ready):
        os.unlink(ready)
    routes = [[i["addr"], port, i["addr"], 22] for i in insts if "down" not in i["variants"]]
    conf = os.path.join(d, "relay.json")
    with open(conf, "w", encoding="utf-8") as fh:
        json.dump({"rtt_ms": rtt_ms, "jitter_ms": jitter_ms, "routes": routes, "ready": ready}, fh, indent=1)
    log = open(os.path.join(d, "relay.log"), "ab")
    proc = subprocess.Popen([sys.executable, "-I", os.path.abspath(__file__), conf], stdin=subprocess.DEVNULL,
                            stdout=log, stderr=log, start_new_session=True, close_fds=True)
    log.close()
    record["relay"] = {"proc": st.proc_entry(proc.pid), "port": port, "rtt_ms": rtt_ms, "jitter_ms": jitter_ms,
                       "conf": conf}
    st.save(state, record)
    deadline = time.monotonic() + 10
    while not os.path.exists(ready):
        if proc.poll() is not None:
            raise RuntimeError(f"the latency relay exited with {proc.returncode}; see {d}/relay.log")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the latency relay did not listen within 10 s; see {d}/relay.log")
        time.sleep(0.02)
    return record["relay"]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: relay.py CONFIG.json", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as fh:
        config = json.load(fh)
    try:
        asyncio.run(main_async(config))
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
