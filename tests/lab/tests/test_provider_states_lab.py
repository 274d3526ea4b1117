"""Issue 31's lab acceptance: plugin-only inventories (runpod.yml, vastai.yml, lambda_cloud.yml) against the fake
APIs, each with one running instance on a lab host and one instance in each odd state the provider documents
(fake_api.ODD_STATES). --graph puts only the running ones in the default group, and preflight over the default
group touches only them: its report has exactly the three lab hosts, each PASS, and no odd instance is contacted
(their addresses are in TEST-NET, where an SSH attempt would fail the play)."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from labhelpers import REPO, fake_api, needs_root, started_fleet

pytestmark = needs_root
VENV_BIN = os.path.join(REPO, ".venv", "bin")
KEY = "LABKEY-31-states-never-in-any-output"
PLUGIN = {"runpod": "runpod", "vastai": "vastai", "lambda": "lambda_cloud"}
ENV_VAR = {"runpod": "RUNPOD_API_KEY", "vastai": "VAST_API_KEY", "lambda": "LAMBDA_API_KEY"}
HOST = {"runpod": "lab-01", "vastai": "lab-02", "lambda": "lab-03"}


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "3", "--platform", "lab-01=runpod",
                       "--platform", "lab-02=vastai", "--platform", "lab-03=lambda") as lab:
        yield lab


def instances(fleet, provider):
    """The running instance on the provider's lab host, then one per odd state at a TEST-NET address."""
    host = HOST[provider]
    addr, port = fleet.hosts[host]["ansible_host"], int(fleet.hosts[host]["ansible_port"])
    if provider == "runpod":
        records = [fake_api.runpod_pod(1, addr, port, name=host)]
    elif provider == "vastai":
        records = [fake_api.vastai_instance(1, addr, port, label=host)]
    else:
        records = [fake_api.lambda_instance(1, addr, name=host, filesystem="lab")]
    for index, name in enumerate(fake_api.ODD_STATES[provider], start=10):
        record = fake_api.odd(provider, name, index, "192.0.2.%d" % index, 22)
        record["label" if provider == "vastai" else "name"] = "%s-%s" % (provider, name.replace("_", "-"))
        records.append(record)
    return records


@pytest.fixture
def fakes(fleet):
    started = {provider: fake_api.FakeAPI(provider, KEY, instances(fleet, provider)).start() for provider in PLUGIN}
    yield started
    for fake in started.values():
        fake.stop()  # fails the test when an answer broke the provider's document


def configs(fleet, tmp_path, fakes, extra=""):
    allvars = fleet.inventory["all"]["vars"]
    (tmp_path / "group_vars").mkdir(exist_ok=True)
    (tmp_path / "group_vars" / "all.yml").write_text(json.dumps({
        "ansible_user": "root", "ansible_ssh_private_key_file": allvars["ansible_ssh_private_key_file"],
        "ansible_ssh_common_args": " ".join(fleet.common), "preflight_check_torch": False}))
    args = []
    for provider, fake in fakes.items():
        path = tmp_path / ("%s.yml" % PLUGIN[provider])
        path.write_text("plugin: remote_gpu.trainer.%s\napi_url: %s\nretry_budget: 3\n%s"
                        % (PLUGIN[provider], fake.url, extra))
        args += ["-i", str(path)]
    return args


def env():
    base = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))
    base.update({var: KEY for var in ENV_VAR.values()})
    return base


def draw(fleet, tmp_path, fakes, extra=""):
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible-inventory"), *configs(fleet, tmp_path, fakes, extra),
                           "--graph"], capture_output=True, text=True, env=env(), timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    groups = {}
    current = None
    for line in proc.stdout.splitlines():
        name = line.strip(" |-")
        if name.startswith("@"):
            current = name[1:].rstrip(":")
            groups[current] = []
        elif current:
            groups[current].append(name)
    return proc, groups


def test_graph_puts_only_the_running_instances_in_the_default_group(fleet, tmp_path, fakes):
    proc, groups = draw(fleet, tmp_path, fakes)
    for provider, host in HOST.items():
        assert groups[provider] == [host], proc.stdout  # the default group: the running instance only
    listed = {host for members in groups.values() for host in members}
    assert listed == set(HOST.values()), proc.stdout  # nothing else is in the inventory
    everything = "include_states: [starting, stopping, stopped, preempted, unhealthy, unreachable_direct, unknown]\n"
    proc, groups = draw(fleet, tmp_path, fakes, everything)
    assert sorted(groups["running"]) == sorted(HOST.values()), proc.stdout  # listed on demand: never running
    odd = [h for g in ("starting", "stopping", "stopped", "preempted", "unhealthy", "unreachable_direct")
           for h in groups.get(g, [])]
    assert len(odd) == sum(len(states) for name, states in fake_api.ODD_STATES.items() if name in PLUGIN)
    assert "vastai-frozen" in groups["unhealthy"] and "vastai-outbid" in groups["preempted"]
    assert "runpod-no-public-port" in groups["unreachable_direct"] and "lambda-preempted" in groups["preempted"]
    assert KEY not in proc.stdout + proc.stderr


def test_preflight_over_the_default_group_touches_only_the_running_instances(fleet, tmp_path, fakes):
    report = tmp_path / "preflight.json"
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), *configs(fleet, tmp_path, fakes),
                           os.path.join(REPO, "playbooks", "preflight.yml"), "-e", "preflight_sample_seconds=1",
                           "-e", "preflight_report_path=%s" % report, "-vvv"],
                          capture_output=True, text=True, env=env(), timeout=600, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    rows = {row["host"]: row for row in json.loads(report.read_text())["hosts"]}
    assert sorted(rows) == sorted(HOST.values()), rows
    assert all(row["verdict"] == "PASS" for row in rows.values()), rows
    recap = [line.split()[0] for line in proc.stdout[proc.stdout.rindex("PLAY RECAP"):].splitlines() if ": ok=" in line]
    assert sorted(recap) == sorted(HOST.values()), recap  # no odd instance is a host of the play
    assert "<192.0.2." not in out and "ESTABLISH SSH CONNECTION" in out  # -vvv names every SSH target: none odd
    assert "vastai-frozen" in proc.stderr and "GPU still bills" in proc.stderr  # named, with what it means
    assert (out + report.read_text()).count(KEY) == 0
