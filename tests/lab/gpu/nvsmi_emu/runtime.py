"""Scenario directory + per-instance runtime state (registered apps, pid mode)."""
from __future__ import annotations

import os


class App:
    __slots__ = ("pid", "used_mib", "name", "host_pid", "gpu")

    def __init__(self, pid, used_mib, name, host_pid=None, gpu=0):
        self.pid, self.used_mib, self.name, self.host_pid, self.gpu = pid, used_mib, name, host_pid, gpu

    def shown_pid(self, mode):
        return self.host_pid if mode == "host" and self.host_pid else self.pid


def runtime_dir():
    return os.environ.get("FAKE_GPU_RUNTIME") or None


def pid_mode():
    d = runtime_dir()
    if not d:
        return "namespace"
    try:
        with open(os.path.join(d, "pid-mode"), encoding="utf-8") as fh:
            return "host" if fh.read().strip() == "host" else "namespace"
    except OSError:
        return "namespace"


def registered_apps():
    """Lines ``pid<TAB>used_mib<TAB>process_name[<TAB>host_pid[<TAB>gpu_index]]`` of $FAKE_GPU_RUNTIME/apps."""
    d = runtime_dir()
    if not d:
        return []
    try:
        with open(os.path.join(d, "apps"), encoding="utf-8") as fh:
            rows = fh.read().splitlines()
    except OSError:
        return []
    apps = []
    for row in rows:
        if not row.strip() or row.lstrip().startswith("#"):
            continue
        parts = row.split("\t")
        if len(parts) < 3:
            continue
        host_pid = parts[3].strip() if len(parts) > 3 and parts[3].strip() else None
        try:
            gpu = int(parts[4]) if len(parts) > 4 and parts[4].strip() else 0
        except ValueError:
            gpu = 0
        apps.append(App(parts[0].strip(), parts[1].strip(), parts[2], host_pid, gpu))
    return apps


def scenario_dir():
    return os.environ.get("FAKE_GPU_SCENARIO") or None


def marker(name):
    d = scenario_dir()
    return bool(d) and os.path.exists(os.path.join(d, name))
