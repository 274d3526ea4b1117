"""The lab fleet, end to end: one fleet of 9 instances (every platform of the default layout and every variant)
is started once for this module; the last test stops it and checks that nothing is left."""
from __future__ import annotations

import json
import os
import subprocess
import time
import uuid

import pytest

from labhelpers import FLEET, NET, REPO, Fleet, assert_nothing_left, namespaces_of, needs_root, processes_in, run_fleet

pytestmark = [needs_root, pytest.mark.root, pytest.mark.lab]

SLOW = 1.0
VARIANTS = {"lab-06": ["no-tmux", "autodl-image"], "lab-07": ["non-root"], "lab-08": ["slow"], "lab-09": ["down"]}
MULTI_GPU = "8xh100"


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    state = tmp_path_factory.mktemp("lab-state")
    args = ["up", "--size", "9", "--slow-seconds", str(SLOW)]
    for host, names in VARIANTS.items():
        args += ["--variant", f"{host}={','.join(names)}"]
    if os.path.isdir(os.path.join(REPO, "tests/lab/gpu/scenarios", MULTI_GPU)):
        args += ["--scenario", f"lab-02={MULTI_GPU}"]
    up = run_fleet(args, state)
    yield Fleet(state, up)
    run_fleet(["down"], state)


def test_up_prints_inventory_last(fleet):
    assert fleet.inventory_path == os.path.join(fleet.state, "inventory.yml")
    assert os.path.isfile(fleet.inventory_path)


def test_inventory_groups_and_vars(fleet):
    g = fleet.groups
    assert g["autodl"] == ["lab-01", "lab-02", "lab-04", "lab-06", "lab-09"]
    assert g["runpod"] == ["lab-03", "lab-07"]
    assert g["generic_ssh"] == ["lab-05", "lab-08"]
    h = fleet.hosts
    assert h["lab-01"]["lab_region"] == h["lab-02"]["lab_region"] == h["lab-06"]["lab_region"]
    assert h["lab-04"]["lab_region"] != h["lab-01"]["lab_region"]
    assert h["lab-07"]["ansible_user"] == "ubuntu"
    assert [h[x]["ansible_host"] for x in ("lab-01", "lab-09")] == [NET + ".11", NET + ".19"]
    assert h["lab-06"]["lab_variant"] == ["no-tmux", "autodl-image"]
    assert all("lab_scenario" in v for v in h.values())
    common = fleet.inventory["all"]["vars"]["ansible_ssh_common_args"]
    assert f"UserKnownHostsFile={fleet.state}/known_hosts" in common
    assert "StrictHostKeyChecking=no" not in common
    with open(os.path.join(fleet.state, "known_hosts")) as fh:
        assert len(fh.read().splitlines()) == 9


def test_status_lists_instances(fleet):
    out = run_fleet(["status"], fleet.state).stdout
    for host in fleet.hosts:
        assert host in out
    rows = json.loads(run_fleet(["status", "--json"], fleet.state).stdout)["instances"]
    assert {r["name"]: r["state"] for r in rows}["lab-09"] == "down (variant)"
    assert all(r["state"] == "running" for r in rows if r["name"] != "lab-09")


def _emulator(scenario: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, FAKE_GPU_SCENARIO=os.path.join(REPO, "tests/lab/gpu/scenarios", scenario),
               FAKE_GPU_PYTHON="/usr/bin/python3")
    return subprocess.run([os.path.join(REPO, "tests/lab/gpu/bin/nvidia-smi")] + list(args), env=env,
                          capture_output=True, text=True, check=False)


def test_nvidia_smi_answers_from_each_scenario(fleet):
    for host in fleet.running():
        p = fleet.ssh(host, "ls /dev/nvidia[0-9]* | wc -l; ls /dev/nvidiactl /dev/nvidia-uvm >/dev/null && "
                            "echo ---; nvidia-smi -L", check=False)
        count, _sep, listing = p.stdout.partition("---\n")
        want = _emulator(fleet.hosts[host]["lab_scenario"], "-L")
        assert (p.returncode, listing) == (want.returncode, want.stdout), host
        assert int(count) == fleet.hosts[host]["lab_gpu_count"]
    if "8xh100" in fleet.hosts["lab-02"]["lab_scenario"]:
        assert fleet.hosts["lab-02"]["lab_gpu_count"] == 8


def test_fakes_first_on_path_login_and_non_login(fleet):
    for cmd in ("command -v nvidia-smi", "bash -lc 'command -v nvidia-smi'", "sh -c 'command -v nvidia-smi'"):
        assert fleet.ssh("lab-01", cmd).stdout.strip() == "/usr/local/bin/nvidia-smi"
    env = fleet.ssh("lab-01", "bash -lc env").stdout
    assert "FAKE_GPU_RUNTIME=" + fleet.hosts["lab-01"]["lab_gpu_runtime"] in env
    assert "FAKE_GPU_SCENARIO=" in env and "FAKE_GPU_PYTHON=" in env


def test_data_disk_has_small_inode_cap(fleet):
    for host in ("lab-01", "lab-03", "lab-05", "lab-07"):
        data = fleet.hosts[host]["lab_data_dir"]
        out = fleet.ssh(host, f"df --output=itotal,target {data} | tail -1").stdout.split()
        assert out == ["2000", data], host


def test_data_disk_enospc_from_inodes_and_bytes(fleet):
    data = fleet.hosts["lab-05"]["lab_data_dir"]
    script = (f"mkdir {data}/many && cd {data}/many && i=0; "
              "while : > f$i; do i=$((i+1)); done 2>/tmp/err; echo $i; cat /tmp/err; "
              f"cd / && rm -rf {data}/many")
    out = fleet.ssh("lab-05", script).stdout
    created = int(out.split()[0])
    assert 1990 <= created < 2000
    assert "No space left on device" in out
    p = fleet.ssh("lab-05", f"head -c 100M /dev/zero > {data}/big; echo rc=$?; rm -f {data}/big", check=False)
    assert "No space left on device" in p.stderr and "rc=1" in p.stdout


def test_durable_fs_shared_within_region_only(fleet):
    token = uuid.uuid4().hex
    fleet.ssh("lab-01", f"echo {token} > /root/autodl-fs/marker")
    for host in ("lab-02", "lab-06"):                      # same region
        assert fleet.ssh(host, "cat /root/autodl-fs/marker").stdout.strip() == token
    assert fleet.ssh("lab-04", "ls -A /root/autodl-fs").stdout.strip() == ""   # other region
    for host in ("lab-03", "lab-05"):                      # other platforms: no such FS, and no way round
        p = fleet.ssh(host, f"grep -rs {token} /root /workspace /work/main/tests/lab /tmp; "
                            f"test -e /root/autodl-fs", check=False)
        assert p.returncode != 0 and token not in p.stdout
    out = fleet.ssh("lab-01", "df --output=itotal /root/autodl-fs | tail -1").stdout
    assert int(out) == 5000
    assert fleet.ssh("lab-01", "test -d /root/tf-logs && test -d /root/autodl-tmp").returncode == 0


def test_instances_are_private(fleet):
    fleet.ssh("lab-01", "echo secret > /tmp/t1 && echo x > /root/.r1 && echo y > /etc/lab-e1")
    assert fleet.ssh("lab-02", "test -e /tmp/t1 || test -e /root/.r1 || test -e /etc/lab-e1",
                     check=False).returncode != 0
    assert not os.path.exists("/etc/lab-e1")
    assert fleet.ssh("lab-01", "hostname").stdout.strip() == "lab-01"
    assert fleet.ssh("lab-01", "ps -e -o pid= | wc -l").stdout.strip().isdigit()
    assert fleet.ssh("lab-01", "cat /proc/1/comm").stdout.strip() == "sshd"   # own PID namespace
    assert fleet.ssh("lab-01", f"test -f {REPO}/galaxy.yml").returncode == 0    # the repo stays visible
    assert fleet.ssh("lab-01", f"ls {fleet.state}/hosts").stdout.split() == ["lab-01"]


def test_meter_stop_stand_ins_only_record(fleet):
    fleet.ssh("lab-01", "shutdown -h now")
    fleet.ssh("lab-01", "/sbin/shutdown -P +1")
    fleet.ssh("lab-03", "runpodctl remove pod $RUNPOD_POD_ID")
    fleet.ssh("lab-07", "shutdown -h now")                  # non-root user, PATH without sbin
    fleet.ssh("lab-05", "vastai destroy instance 42")
    assert [r["argv"] for r in fleet.meter("lab-01")][-2:] == [["shutdown", "-h", "now"], ["shutdown", "-P", "+1"]]
    assert fleet.meter("lab-03")[-1]["argv"] == ["runpodctl", "remove", "pod", "fakepod0003"]
    assert fleet.meter("lab-07")[-1]["uid"] != 0
    assert fleet.meter("lab-05")[-1]["argv"] == ["vastai", "destroy", "instance", "42"]
    assert all("ts" in r for r in fleet.meter("lab-01"))
    assert fleet.ssh("lab-01", "true").returncode == 0      # the instance is still up


def test_network_turbo_goes_through_tinyproxy(fleet):
    token = uuid.uuid4().hex
    p = fleet.ssh("lab-01", f". /etc/network_turbo && echo $http_proxy && "
                            f"curl -s -m 10 -o /dev/null http://probe-{token}.invalid/ ; true")
    assert p.stdout.startswith("http://127.0.0.1:")
    log = fleet.record["proxy"]["log"]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and token not in open(log).read():
        time.sleep(0.05)
    assert f"probe-{token}.invalid" in open(log).read()
    assert fleet.ssh("lab-03", "test -e /etc/network_turbo", check=False).returncode != 0


def test_variant_no_tmux_and_autodl_image(fleet):
    assert fleet.ssh("lab-06", "command -v tmux", check=False).returncode != 0
    assert fleet.ssh("lab-06", "command -v python3", check=False).returncode != 0
    assert fleet.ssh("lab-06", "bash -lc 'command -v python3'", check=False).returncode != 0
    out = fleet.ssh("lab-06", "/root/miniconda3/bin/python -c 'import json, ssl; print(42)'").stdout
    assert out.strip() == "42"
    assert fleet.ssh("lab-01", "command -v tmux && command -v python3").returncode == 0
    assert fleet.ssh("lab-01", "/root/miniconda3/bin/python -V").returncode == 0


def test_variant_non_root(fleet):
    out = fleet.ssh("lab-07", "id -un; echo $HOME; touch /workspace/x && echo ok").stdout.split()
    assert out == ["ubuntu", "/home/ubuntu", "ok"]
    assert fleet.ssh("lab-07", "touch /root/x", check=False).returncode != 0


def test_variant_slow_delays_commands_and_file_transfer_works(fleet, tmp_path):
    t0 = time.monotonic()
    fleet.ssh("lab-08", "true")
    assert time.monotonic() - t0 >= SLOW
    src = tmp_path / "payload.txt"
    src.write_text("payload\n")
    hv = fleet.hosts["lab-08"]
    base = ["-i", fleet.key, "-o", "BatchMode=yes", "-o", "ControlPath=none"] + fleet.common
    dest = f"{hv['ansible_user']}@{hv['ansible_host']}"
    subprocess.run(["scp", "-q"] + base + [str(src), f"{dest}:/root/proj/a.txt"], check=True, timeout=60)
    subprocess.run(["sftp", "-q", "-b", "-"] + base + [dest], input=f"put {src} /root/proj/b.txt\n",
                   text=True, check=True, timeout=60, capture_output=True)
    assert fleet.ssh("lab-08", "cat /root/proj/a.txt /root/proj/b.txt").stdout == "payload\npayload\n"


def test_variant_down_is_unreachable(fleet):
    p = fleet.ssh("lab-09", "true", check=False)
    assert p.returncode == 255 and "refused" in p.stderr


def test_gpu_app_registration_and_device_holders(fleet):
    pid = int(fleet.ssh("lab-01", "nohup sh -c 'exec 3</dev/nvidia0; exec sleep 300' >/dev/null 2>&1 & echo $!")
              .stdout)
    reg = subprocess.run([FLEET, "gpu-app", "lab-01", str(pid), "1024", "python"], capture_output=True, text=True,
                         env=dict(os.environ, LAB_STATE_DIR=fleet.state), check=True).stdout
    ns_pid, mib, name, host_pid = reg.strip().split("\t")
    assert (int(ns_pid), mib, name) == (pid, "1024", "python")
    host_pid = int(host_pid)
    assert host_pid != pid
    with open(f"/proc/{host_pid}/status") as fh:
        assert [line.split()[-1] for line in fh if line.startswith("NSpid:")] == [str(pid)]
    # the backgrounded shell opens the device right after it starts: on a loaded machine that can be after `echo $!`
    deadline = time.monotonic() + 30
    while True:
        held = {os.readlink(f"/proc/{host_pid}/fd/{fd}") for fd in os.listdir(f"/proc/{host_pid}/fd")}
        if "/dev/nvidia0" in held or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert "/dev/nvidia0" in held
    with open(os.path.join(fleet.hosts["lab-01"]["lab_gpu_runtime"], "apps")) as fh:
        assert reg in fh.read()
    q = fleet.ssh("lab-01", "nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader", check=False)
    if q.returncode == 0:
        assert str(pid) in q.stdout
    fleet.ssh("lab-01", f"kill {pid}")
    subprocess.run([FLEET, "gpu-app", "lab-01", "--clear"], env=dict(os.environ, LAB_STATE_DIR=fleet.state),
                   check=True)


def test_ansible_ping_over_inventory(fleet):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    p = subprocess.run([os.path.join(REPO, ".venv/bin/ansible"), "-i", fleet.inventory_path,
                        "lab:!lab_variant_down", "-m", "ansible.builtin.ping", "-o"],
                       capture_output=True, text=True, env=env, timeout=120, cwd=REPO, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    ok = {line.split()[0] for line in p.stdout.splitlines() if "SUCCESS" in line}
    assert ok == set(fleet.running())


def test_up_again_fails_clearly(fleet):
    p = run_fleet(["up"], fleet.state, check=False)
    assert p.returncode == 1 and "already up" in p.stderr
    assert fleet.ssh("lab-01", "true").returncode == 0


def test_down_leaves_nothing_behind(fleet):
    record = fleet.record
    namespaces = namespaces_of(record)
    assert len(namespaces) == 2 * len(fleet.running())
    run_fleet(["down"], fleet.state)
    assert_nothing_left(fleet.state, record)
    assert processes_in(namespaces) == []
    run_fleet(["down"], fleet.state)                      # safe to call twice
