"""preflight.yml against the lab fleet: the table, the exit code, unreachable hosts, host limits, the durable tier of
a RunPod box, the profile's HF_HOME, and exactly one SSH execution per host."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from labhelpers import REPO, SshCounter, needs_root, started_fleet

pytestmark = needs_root
VENV_BIN = os.path.join(REPO, ".venv", "bin")


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "5", "--scenario", "lab-02=8xh100-hwslowdown",
                       "--variant", "lab-03=down", "--scenario", "lab-04=xid13-gr-exception",
                       "--platform", "lab-05=runpod") as lab:
        yield lab


def preflight(fleet, tmp_path, *args, **extra_env):
    report = tmp_path / "preflight.json"
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")), **extra_env)
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", fleet.inventory_path,
                           os.path.join(REPO, "playbooks", "preflight.yml"), "-e", "preflight_sample_seconds=1",
                           "-e", "preflight_report_path=%s" % report, *args],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    rows = {row["host"]: row for row in json.loads(report.read_text())["hosts"]} if report.exists() else {}
    return proc, rows


def test_whole_fleet_names_the_throttled_and_the_unreachable_host(fleet, tmp_path):
    proc, rows = preflight(fleet, tmp_path)
    assert proc.returncode != 0
    assert sorted(rows) == ["lab-01", "lab-02", "lab-03", "lab-04", "lab-05"]
    assert rows["lab-01"]["verdict"] == "PASS" and rows["lab-05"]["verdict"] == "PASS"
    assert rows["lab-02"]["verdict"] == "FAIL" and rows["lab-02"]["top_finding"].startswith("throttle_active: GPU")
    assert "HW slowdown" in rows["lab-02"]["top_finding"]
    assert rows["lab-03"]["verdict"] == "UNREACHABLE"
    assert rows["lab-04"]["verdict"] == "WARN" and rows["lab-04"]["top_finding"].startswith("xid_app_fault")
    table = proc.stdout[proc.stdout.index("HOST "):]
    for host in rows:
        assert "\n%s " % host in table
    # each unfit host fails in the recap with its own top finding; the healthy ones do not
    assert "fatal: [lab-02]: FAILED! =>" in proc.stdout and "fatal: [lab-03]: FAILED! =>" in proc.stdout
    assert "fatal: [lab-01]" not in proc.stdout
    recap = proc.stdout[proc.stdout.index("PLAY RECAP"):]
    assert [line.split()[0] for line in recap.splitlines() if "failed=1" in line] == ["lab-02", "lab-03"]


def test_limit_to_a_platform_group_still_prints_the_table(fleet, tmp_path):
    proc, rows = preflight(fleet, tmp_path, "-l", "autodl")
    assert sorted(rows) == sorted(fleet.groups["autodl"])
    assert "VERDICT" in proc.stdout
    assert proc.returncode != 0  # lab-02 is throttled


def test_healthy_host_alone_passes_and_warn_fails_only_when_strict(fleet, tmp_path):
    proc, rows = preflight(fleet, tmp_path, "-l", "lab-01")
    assert proc.returncode == 0, proc.stdout
    assert list(rows) == ["lab-01"]
    proc, rows = preflight(fleet, tmp_path, "-l", "lab-04")
    assert proc.returncode == 0 and rows["lab-04"]["verdict"] == "WARN"
    proc, rows = preflight(fleet, tmp_path, "-l", "lab-04", "-e", "preflight_strict=true")
    assert proc.returncode != 0


def test_preflight_changes_nothing_on_the_boxes(fleet, tmp_path):
    proc, _rows = preflight(fleet, tmp_path, "-l", "lab-01,lab-02")
    recap = proc.stdout[proc.stdout.index("PLAY RECAP"):]
    assert "changed=0" in recap and "changed=1" not in recap


def test_missing_interpreter_is_a_finding_not_a_crash(fleet, tmp_path):
    proc, rows = preflight(fleet, tmp_path, "-l", "lab-01", "-e", "trainer_interpreter=/root/miniconda3/bin/nope")
    assert proc.returncode != 0
    assert rows["lab-01"]["verdict"] == "FAIL"
    assert rows["lab-01"]["top_finding"].startswith("interpreter_missing: the profile interpreter /root/miniconda3/bin/nope")


def codes(row):
    return [f["code"] for f in row["findings"]]


def test_runpod_durable_tier_on_the_container_disk_is_said(fleet, tmp_path):
    """lab-05 is a RunPod box: /workspace is a filesystem of its own (a volume, as a Network Volume would be), so
    nothing is said; pointed at /mnt, a directory of the container's root filesystem, it is durable_not_separate."""
    proc, rows = preflight(fleet, tmp_path, "-l", "lab-05")
    assert proc.returncode == 0, proc.stdout
    assert "durable_not_separate" not in codes(rows["lab-05"])
    proc, rows = preflight(fleet, tmp_path, "-l", "lab-05", "-e", "trainer_durable_dir=/mnt")
    assert proc.returncode == 0, proc.stdout  # a WARN: the box can train, but the durable copies die with it
    row = rows["lab-05"]
    assert row["verdict"] == "WARN" and row["top_finding"].startswith(
        "durable_not_separate: the durable tier /mnt is on the same filesystem as the system tier / (container disk)")
    finding = [f for f in row["findings"] if f["code"] == "durable_not_separate"][0]
    assert "lost on stop, terminate" in finding["message"] and "Network Volume" in finding["action"]


def test_the_profiles_hf_home_is_audited(fleet, tmp_path):
    """A big HF_HOME on the home filesystem (an 11 GiB sparse model file) is hf_cache_large."""
    fleet.ssh("lab-01", "mkdir -p /root/hf-home/hub/models--org--big && "
                        "truncate -s 11G /root/hf-home/hub/models--org--big/model.safetensors")
    try:
        proc, rows = preflight(fleet, tmp_path, "-l", "lab-01", "-e", "trainer_hf_home=/root/hf-home")
    finally:
        fleet.ssh("lab-01", "rm -rf /root/hf-home")
    assert proc.returncode == 0, proc.stdout
    large = [f for f in rows["lab-01"]["findings"] if f["code"] == "hf_cache_large"]
    assert len(large) == 1 and large[0]["message"].startswith("HF_HOME /root/hf-home holds 11.0 GiB on the home")
    # the profile's own HF_HOME is on the data disk: nothing to say
    proc, rows = preflight(fleet, tmp_path, "-l", "lab-01")
    assert "hf_cache_large" not in codes(rows["lab-01"])


def test_danger_clocks_are_shown_once_per_platform_and_are_no_finding(fleet, tmp_path):
    """Issue 16, item 7: the profile's danger clocks above the fleet table, once per platform (two autodl hosts,
    one line), never a per-host FAIL."""
    proc, rows = preflight(fleet, tmp_path, "-l", "lab-01,lab-04,lab-05")
    assert proc.returncode == 0, proc.stdout
    assert rows["lab-01"]["verdict"] == rows["lab-05"]["verdict"] == "PASS"
    out = proc.stdout[:proc.stdout.index("PLAY RECAP")]
    lines = [line for line in out.splitlines() if line.startswith("danger clocks, ")]
    assert [line.split(":")[0] for line in lines] == ["danger clocks, autodl (2 hosts)",
                                                      "danger clocks, runpod (1 host)"], out
    assert "released automatically after 15 days" in lines[0] and "still bills its data disk" in lines[0]
    assert "at zero balance pods and storage can be deleted" in lines[1]
    assert out.index("danger clocks, autodl") < out.index("HOST ")
    report = json.loads((tmp_path / "preflight.json").read_text())
    assert [entry["platform"] for entry in report["danger_clocks"]] == ["autodl", "runpod"]


def test_one_ssh_execution_per_host_with_the_same_verdicts(fleet, tmp_path):
    """Issue 15: the storage, GPU and environment checks of a host run in one SSH execution (preflight_probe), the
    unreachable host's one attempt included, and the verdicts and top findings are those of the three probes."""
    ssh = SshCounter(tmp_path)
    proc, rows = preflight(fleet, tmp_path, **ssh.env)
    hosts = ["lab-01", "lab-02", "lab-03", "lab-04", "lab-05"]
    assert sorted(rows) == hosts, proc.stdout
    assert {host: rows[host]["verdict"] for host in hosts} == {
        "lab-01": "PASS", "lab-02": "FAIL", "lab-03": "UNREACHABLE", "lab-04": "WARN", "lab-05": "PASS"}
    assert rows["lab-02"]["top_finding"].startswith("throttle_active: GPU")
    assert rows["lab-04"]["top_finding"].startswith("xid_app_fault")
    assert ssh.per_host(fleet, hosts) == dict.fromkeys(hosts, 1)
