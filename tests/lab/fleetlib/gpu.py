"""Register processes of an instance with the GPU emulator (its FAKE_GPU_RUNTIME `apps` file).

Line format (tests/lab/gpu contract): pid<TAB>used_mib<TAB>process_name<TAB>host_pid
`pid` is the PID inside the instance; host_pid is found from /proc/*/status NSpid.
A `pid-mode` file containing `host` makes the emulator print host PIDs.
"""
from __future__ import annotations

import os

from . import state as st


def host_pid(host: str, ns_pid: int, state: str | None = None) -> int:
    """The host PID of process ns_pid of the instance (matched by PID namespace and NSpid)."""
    state = state or st.state_dir()
    inst = st.instance(state, host)
    init = (inst.get("init") or {}).get("pid")
    if not init or not st.alive(inst["init"]):
        raise RuntimeError(f"{host} is not running")
    ns = os.readlink(f"/proc/{init}/ns/pid")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/pid") != ns:
                continue
            with open(f"/proc/{entry}/status", encoding="utf-8") as fh:
                for line in fh:
                    if line.startswith("NSpid:"):
                        if int(line.split()[-1]) == ns_pid:
                            return int(entry)
                        break
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    raise LookupError(f"no process {ns_pid} in {host}")


def register(host: str, ns_pid: int, mib: int, name: str, state: str | None = None) -> str:
    """Append the process to the instance's apps file; return the line written."""
    state = state or st.state_dir()
    hpid = host_pid(host, ns_pid, state)
    line = f"{ns_pid}\t{int(mib)}\t{name}\t{hpid}\n"
    with open(os.path.join(st.host_dir(state, host), "gpu", "apps"), "a", encoding="utf-8") as fh:
        fh.write(line)
    return line


def clear(host: str, state: str | None = None) -> None:
    state = state or st.state_dir()
    st.instance(state, host)
    open(os.path.join(st.host_dir(state, host), "gpu", "apps"), "w").close()


def set_pid_mode(host: str, mode: str, state: str | None = None) -> None:
    """mode 'host': the emulator prints host PIDs (as nvidia-smi does inside a container); '' removes it."""
    state = state or st.state_dir()
    path = os.path.join(st.host_dir(state, host), "gpu", "pid-mode")
    if mode:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(mode + "\n")
    elif os.path.exists(path):
        os.unlink(path)
