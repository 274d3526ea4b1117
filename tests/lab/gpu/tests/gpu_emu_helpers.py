"""Helpers for the GPU emulator tests (tests/lab/gpu/README.md), imported by name, never as a conftest.py.

pytest puts this folder on sys.path for the test modules, and this module adds tests/lab/gpu for nvsmi_emu."""
from __future__ import annotations

import json
import os
import subprocess
import sys

GPU_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(GPU_DIR, "bin")
SCENARIOS = os.path.join(GPU_DIR, "scenarios")
FIX = os.path.join(os.path.dirname(os.path.dirname(GPU_DIR)), "fixtures", "nvidia")

if GPU_DIR not in sys.path:
    sys.path.insert(0, GPU_DIR)


def manifest():
    with open(os.path.join(FIX, "manifest.json"), encoding="utf-8") as fh:
        return json.load(fh)


def fixture_text(rel):
    with open(os.path.join(FIX, rel), encoding="utf-8", newline="") as fh:
        return fh.read()


def run_tool(tool, args=(), scenario=None, runtime=None, timeout=30, env_extra=None):
    """Run a fake tool through its sh wrapper, like the lab does. Returns CompletedProcess (text)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_GPU_")}
    env["FAKE_GPU_PYTHON"] = sys.executable
    if scenario is not None:
        env["FAKE_GPU_SCENARIO"] = scenario if os.path.isabs(scenario) else os.path.join(SCENARIOS, scenario)
    if runtime is not None:
        env["FAKE_GPU_RUNTIME"] = str(runtime)
    env.update(env_extra or {})
    return subprocess.run([os.path.join(BIN, tool)] + list(args), env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def smi_runner():
    def _run(args, scenario=None, **kw):
        return run_tool("nvidia-smi", args, scenario=scenario, **kw)
    return _run
