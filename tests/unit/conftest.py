"""Shared helpers for unit tests: run a module's main() with arguments and read its JSON result."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import subprocess
import sys

import pytest

from ansible.module_utils.testing import patch_module_args

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "nvidia"


def run_module(module, args, capsys):
    """Call ``module.main()`` with ``args``; return (failed, result dict). Never lets SystemExit escape."""
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module.main()
    out = capsys.readouterr().out
    result = json.loads(out)
    return bool(result.get("failed")), result


@pytest.fixture
def module_runner(capsys):
    return lambda module, args: run_module(module, args, capsys)


def is_root():
    return os.geteuid() == 0


@pytest.fixture
def fixtures_dir():
    return FIXTURES


@pytest.fixture
def smi_script(tmp_path):
    """``smi_script(body)`` -> the path of an executable nvidia-smi in tmp_path: a Python script that runs ``body``
    with ``sys`` and ``time`` imported and ``args``, its argv tail. Each call rewrites the same file."""
    def make(body):
        path = tmp_path / "nvidia-smi"
        path.write_text("#!%s\nimport sys, time\nargs = sys.argv[1:]\n%s\n" % (sys.executable, body))
        path.chmod(0o755)
        return str(path)
    return make


@contextlib.contextmanager
def mount_tmpfs(path, options):
    """Mount a real tmpfs at ``path`` (for example ``size=1m,nr_inodes=20``); always unmount it afterwards."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


@pytest.fixture
def tmpfs():
    """``with tmpfs(path, options) as fs:`` mounts a real, capped tmpfs; skips the test when not root."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs with size= and nr_inodes= caps needs root")
    return mount_tmpfs


def pytest_runtest_setup(item):
    """A test marked ``root`` (chown to another user, mounts) is skipped with a reason when not run as root."""
    if item.get_closest_marker("root") and not is_root():
        pytest.skip("needs root (marked root): it changes file owners or mounts filesystems")


@pytest.fixture
def out(tmp_path):
    """A queue item's output directory (``out/000``) as training leaves it: ``best.pt`` (kept and synced),
    ``latest.pt`` (scratch) and a directory ``tmpdir`` holding one file."""
    root = tmp_path / "out" / "000"
    root.mkdir(parents=True)
    (root / "best.pt").write_bytes(b"B" * 100)
    (root / "latest.pt").write_bytes(b"L" * 50)
    (root / "tmpdir").mkdir()
    (root / "tmpdir" / "x").write_bytes(b"x")
    return root


@pytest.fixture
def cgroup_root(tmp_path):
    """A cgroup v2 root with a 1 GiB memory limit, one OOM kill and a one-CPU quota (env_audit, preflight_probe)."""
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "memory.max").write_text("1073741824\n")
    (root / "memory.current").write_text("104857600\n")
    (root / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 1\noom_kill 1\n")
    (root / "cpu.max").write_text("100000 100000\n")
    return root
