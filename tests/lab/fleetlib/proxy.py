"""The loopback HTTP proxy behind the autodl instances' /etc/network_turbo (Debian's tinyproxy)."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

from . import state as st

DEFAULT_PORT = 18888
# AutoDL's turbo proxy exempts local and some domestic hosts (see platforms.md: modelscope.com is exempt,
# modelscope.cn is not).
NO_PROXY = "localhost,127.0.0.1,::1,modelscope.com,aliyuncs.com,tencentyun.com,wisemodel.cn"


def free_port(preferred: int) -> int:
    for port in (preferred, 0):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
                return s.getsockname()[1]
            except OSError:
                continue
    raise RuntimeError("no free port for the proxy")


def network_turbo(port: int) -> str:
    url = f"http://127.0.0.1:{port}"
    return ("# Lab stand-in for AutoDL's academic-acceleration hook: `source /etc/network_turbo`.\n"
            f"# The proxy is tinyproxy on the lab host; its log proves what went through it.\n"
            f"export http_proxy={url}\nexport https_proxy={url}\nexport no_proxy={NO_PROXY}\n")


def start(state: str, record: dict) -> dict:
    """Start tinyproxy in the foreground (-d) as our child; record its PID before waiting for it."""
    exe = shutil.which("tinyproxy") or "/usr/bin/tinyproxy"
    d = os.path.join(state, "proxy")
    os.makedirs(d, exist_ok=True)
    port = free_port(int(os.environ.get("LAB_PROXY_PORT", DEFAULT_PORT)))
    conf = os.path.join(d, "tinyproxy.conf")
    log = os.path.join(d, "tinyproxy.log")
    with open(conf, "w") as fh:
        fh.write(f'Port {port}\nListen 127.0.0.1\nTimeout 60\nLogFile "{log}"\nLogLevel Info\n'
                 f'PidFile "{os.path.join(d, "tinyproxy.pid")}"\nMaxClients 200\nAllow 127.0.0.0/8\n'
                 'DisableViaHeader Yes\n')
    out = open(os.path.join(d, "stderr.log"), "ab")
    proc = subprocess.Popen([exe, "-d", "-c", conf], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                            start_new_session=True, close_fds=True)
    out.close()
    record["proxy"] = {"proc": st.proc_entry(proc.pid), "port": port, "log": log, "conf": conf}
    st.save(state, record)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"tinyproxy exited with {proc.returncode}; see {d}/stderr.log")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return record["proxy"]
        time.sleep(0.02)
    raise RuntimeError(f"tinyproxy did not listen on 127.0.0.1:{port} within 5 s")
