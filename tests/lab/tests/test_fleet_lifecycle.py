"""Fleet lifecycle: the root check, the default 3-instance layout, and `down` after a failed `up`."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from labhelpers import FLEET, Fleet, assert_nothing_left, lab_state, needs_root, run_fleet


def test_up_refuses_without_root(tmp_path):
    """Runs as root (dropping to nobody) and as any other user."""
    state = tmp_path / "state"
    if os.geteuid() != 0:
        p = run_fleet(["up"], state, check=False)
        assert p.returncode == 2 and "needs root" in p.stderr
        assert not state.exists()
        return
    setpriv = shutil.which("setpriv")
    if setpriv:
        p = subprocess.run([setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", FLEET,
                            "up"], capture_output=True, text=True, env=dict(os.environ, LAB_STATE_DIR=str(state)),
                           cwd="/", timeout=30, check=False)
        assert p.returncode == 2, p.stderr
        assert "needs root" in p.stderr
    p = run_fleet(["up"], state, check=False, env={"LAB_FLEET_AS_NONROOT": "1"})
    assert p.returncode == 2 and "needs root" in p.stderr
    assert not state.exists()


@pytest.mark.root
@pytest.mark.lab
@needs_root
def test_default_layout_and_ssh_to_every_host(lab_free, tmp_path):
    state = tmp_path / "state"
    try:
        fleet = Fleet(state, run_fleet(["up"], state))
        assert sorted(fleet.hosts) == ["lab-01", "lab-02", "lab-03"]
        assert fleet.groups["autodl"] == ["lab-01", "lab-02"] and fleet.groups["runpod"] == ["lab-03"]
        assert fleet.hosts["lab-01"]["lab_region"] == fleet.hosts["lab-02"]["lab_region"]
        for host in fleet.hosts:
            p = fleet.ssh(host, "hostname; nvidia-smi -L", check=False)
            assert p.stdout.splitlines()[0] == host
            assert "GPU 0:" in p.stdout or "NVIDIA-SMI has failed" in p.stdout
        assert "in " in fleet.up_output.splitlines()[-2]     # "... N instances ... in X.Y s"
    finally:
        run_fleet(["down"], state)


@pytest.mark.root
@pytest.mark.lab
@needs_root
def test_down_after_failed_up(lab_free, tmp_path):
    state = tmp_path / "state"
    # An impossible data-disk size makes the instances fail inside their namespaces, after the proxy and the
    # region mounts were started; LAB_KEEP_FAILED=1 leaves that partial fleet for `down` to clean.
    p = run_fleet(["up", "--size", "4", "--data-size", "bogus"], state, check=False, env={"LAB_KEEP_FAILED": "1"})
    assert p.returncode == 1 and "FAILED" in p.stderr
    record = lab_state.load(str(state))
    assert record["status"] == "starting"
    assert lab_state.alive(record["proxy"]["proc"])
    assert lab_state.mounts_under(str(state))
    run_fleet(["down"], state)
    assert_nothing_left(str(state), record)
    run_fleet(["down"], state)
    # and without LAB_KEEP_FAILED, up cleans after itself
    p = run_fleet(["up", "--size", "2", "--data-size", "bogus"], state, check=False)
    assert p.returncode == 1
    assert_nothing_left(str(state), lab_state.load(str(state)))
