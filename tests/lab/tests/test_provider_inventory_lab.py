"""The acceptance of issue 12 (first part): a four-line runpod.yml / vastai.yml and preflight.yml -l <profile>,
with the provider's API played by the loopback fake and its instances pointing at lab hosts. The API key appears
zero times in the -vvv output and in the JSON report."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess

import pytest

from conftest import LAB, REPO, needs_root, started_fleet

pytestmark = needs_root
VENV_BIN = os.path.join(REPO, ".venv", "bin")
KEY = "LABKEY-7c1d0e-never-in-any-output"

_spec = importlib.util.spec_from_file_location("fake_api", os.path.join(LAB, "providers", "fake_api.py"))
fake_api = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_api)


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "4", "--platform", "lab-01=runpod",
                       "--platform", "lab-02=runpod", "--platform", "lab-03=vastai",
                       "--platform", "lab-04=vastai") as lab:
        yield lab


def user_inventory(fleet, tmp_path, provider, url):
    """What a user writes: the plugin file, and the SSH settings in the inventory's group_vars/all.yml."""
    allvars = fleet.inventory["all"]["vars"]
    common = " ".join(fleet.common)  # the fleet's -o pairs, without its ControlPath
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text(json.dumps({
        "ansible_user": "root", "ansible_ssh_private_key_file": allvars["ansible_ssh_private_key_file"],
        "ansible_ssh_common_args": common, "preflight_check_torch": False}))
    config = tmp_path / ("%s.yml" % provider)
    config.write_text("plugin: remote_gpu.trainer.%s\napi_url: %s\n" % (provider, url))
    return config


def preflight(config, tmp_path, env_var, *args):
    report = tmp_path / "preflight.json"
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))
    env[env_var] = KEY
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", str(config),
                           os.path.join(REPO, "playbooks", "preflight.yml"), "-e", "preflight_sample_seconds=1",
                           "-e", "preflight_report_path=%s" % report, *args],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    text = report.read_text() if report.exists() else ""
    rows = {row["host"]: row for row in json.loads(text)["hosts"]} if text else {}
    return proc, rows, text


def address(fleet, host):
    hv = fleet.hosts[host]
    return hv["ansible_host"], int(hv["ansible_port"])


def test_runpod_yml_preflight_limit_runpod(fleet, tmp_path):
    pods = [fake_api.runpod_pod(i, *address(fleet, host), name=host) for i, host in ((1, "lab-01"), (2, "lab-02"))]
    pods.append(fake_api.runpod_pod(3, None, None, name="new-pod", ready=False))
    fake = fake_api.FakeAPI("runpod", KEY, pods).start()
    try:
        config = user_inventory(fleet, tmp_path, "runpod", fake.url)
        proc, rows, report = preflight(config, tmp_path, "RUNPOD_API_KEY", "-l", "runpod", "-vvv")
    finally:
        fake.stop()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert sorted(rows) == ["lab-01", "lab-02"]
    assert all(row["verdict"] == "PASS" and row["platform"] == "runpod" for row in rows.values()), rows
    assert "fakepod0003" in proc.stderr and "'starting'" in proc.stderr
    assert (proc.stdout + proc.stderr + report).count(KEY) == 0
    assert len(fake.api_requests()) == 1


def test_vastai_yml_preflight_limit_vastai_direct_and_proxy(fleet, tmp_path):
    direct = fake_api.vastai_instance(3, *address(fleet, "lab-03"), label="lab-03")
    proxy = fake_api.vastai_instance(4, *address(fleet, "lab-04"), direct=False, label="lab-04")
    fake = fake_api.FakeAPI("vastai", KEY, [direct, proxy]).start()
    try:
        config = user_inventory(fleet, tmp_path, "vastai", fake.url)
        proc, rows, report = preflight(config, tmp_path, "VAST_API_KEY", "-l", "vastai", "-vvv")
    finally:
        fake.stop()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert sorted(rows) == ["lab-03", "lab-04"]
    assert all(row["verdict"] == "PASS" and row["platform"] == "vastai" for row in rows.values()), rows
    assert (proc.stdout + proc.stderr + report).count(KEY) == 0
