"""Plugin-only inventories against the fake APIs serving one instance in each odd state (issue 31): --graph puts only
the running ones in the provider's group (and, by default, in the inventory at all); each odd one lands in its
state's group only on demand, with its provider_state. The module instance, run as a user runs it (ansible
localhost -m), returns at once on a frozen vast.ai instance, with what frozen meant.

No root and no lab: the addresses are made up (nothing connects); tests/lab/tests/test_provider_states_lab.py runs
preflight over such an inventory on lab hosts."""

from __future__ import annotations

import json
import subprocess

import pytest

from pbhelpers import REPO, VENV_BIN, ansible_env, fake_api, unwrap

KEY = "STATESKEY-31-never-print-me"
ENV_VAR = {"runpod": "RUNPOD_API_KEY", "vastai": "VAST_API_KEY", "lambda": "LAMBDA_API_KEY"}
PLUGIN = {"runpod": "runpod", "vastai": "vastai", "lambda": "lambda_cloud"}
ALL_STATES = "[starting, stopping, stopped, preempted, unhealthy, terminated, unreachable_direct, unknown]"

# odd state (fake_api.ODD_STATES) -> the provider_state the collection reads from it
EXPECTED = {
    "runpod": {"starting": "starting", "error": "unhealthy", "crashed": "unhealthy", "preempted": "preempted",
               "no_public_port": "unreachable_direct", "stopped": "stopped"},
    "vastai": {"loading": "starting", "frozen": "unhealthy", "exited": "unhealthy", "unknown": "unhealthy",
               "offline": "unhealthy", "outbid": "preempted", "stopped": "stopped"},
    "lambda": {"booting": "starting", "unhealthy": "unhealthy", "preempted": "preempted", "terminating": "stopping"},
}


def fleet_records(provider):
    """One running instance (index 1), then one per odd state (index 10, 11, ...), each named after its state."""
    records = [fake_api.records_for(provider, [("198.51.100.1", 40001)])[0]]
    for index, name in enumerate(fake_api.ODD_STATES[provider], start=10):
        record = fake_api.odd(provider, name, index, "198.51.100.%d" % index, 40000 + index)
        record["label" if provider == "vastai" else "name"] = "odd-%s" % name.replace("_", "-")
        records.append(record)
    return records


def graph(tmp_path, fakes, extra=""):
    configs = []
    env = {}
    for provider, fake in fakes.items():
        config = tmp_path / ("%s.yml" % PLUGIN[provider])
        config.write_text("plugin: remote_gpu.trainer.%s\napi_url: %s\nretry_budget: 3\n%s"
                          % (PLUGIN[provider], fake.url, extra))
        configs += ["-i", str(config)]
        env[ENV_VAR[provider]] = KEY
    listing = subprocess.run([str(VENV_BIN / "ansible-inventory"), *configs, "--list", "--export"],
                             capture_output=True, text=True, cwd=REPO, env=ansible_env(**env), timeout=300,
                             check=False)
    drawn = subprocess.run([str(VENV_BIN / "ansible-inventory"), *configs, "--graph"], capture_output=True, text=True,
                           cwd=REPO, env=ansible_env(**env), timeout=300, check=False)
    assert listing.returncode == 0 and drawn.returncode == 0, listing.stderr + drawn.stderr
    return unwrap(json.loads(listing.stdout)), drawn.stdout, listing.stderr


def members(data, group):
    return sorted(data.get(group, {}).get("hosts", []))


@pytest.fixture
def fakes(fake_apis):
    return {provider: fake_apis(provider, KEY, fleet_records(provider)) for provider in EXPECTED}


def test_graph_default_lists_only_the_running_instances(tmp_path, fakes):
    data, drawn, warnings = graph(tmp_path, fakes)
    assert sorted(data["_meta"]["hostvars"]) == ["train-1", "train-1-lambda", "train-1-vastai"], drawn
    assert members(data, "running") == ["train-1", "train-1-lambda", "train-1-vastai"]
    for provider, expected in EXPECTED.items():
        for name, state in expected.items():
            if state != "stopped":  # a stopped one is expected to be absent; every other one is named, and why
                assert "odd-%s" % name.replace("_", "-") in warnings, (name, warnings)
    assert "vastai" in warnings and "GPU still bills" in warnings  # frozen's meaning, from provider_state
    assert "Expose 22/tcp" in warnings  # RunPod's pod without a public 22/tcp
    assert KEY not in drawn + warnings


def test_graph_with_every_state_puts_each_odd_one_in_its_state_group_never_in_running(tmp_path, fakes):
    data, drawn, _warnings = graph(tmp_path, fakes, "include_states: %s\n" % ALL_STATES)
    hostvars = data["_meta"]["hostvars"]
    assert members(data, "running") == ["train-1", "train-1-lambda", "train-1-vastai"], drawn
    for provider, expected in EXPECTED.items():
        # the provider's group holds them all (its profile applies), one of them running
        running = [h for h in members(data, provider) if hostvars[h]["provider_state"] == "running"]
        assert len(running) == 1 and len(members(data, provider)) == 1 + len(expected), drawn
        for name, state in expected.items():
            host = "odd-%s" % name.replace("_", "-")
            if host not in hostvars:  # the same name from two providers: the second is <name>-<provider>
                host = "%s-%s" % (host, provider)
            assert hostvars[host]["provider_state"] == state, (provider, name, hostvars[host])
            assert host in members(data, state) and "ansible_host" not in hostvars[host], drawn
            assert host not in members(data, "running")
    assert "@unhealthy:" in drawn and "@preempted:" in drawn and "@unreachable_direct:" in drawn


def test_a_status_word_no_table_knows_is_unknown_with_a_warning_never_running(tmp_path, fake_apis):
    """vast.ai's actual_status is a free string in its document: a word the table lacks is served as it comes, and
    the plugin names it in a warning and never lists the instance as running (on demand: the group unknown)."""
    record = fake_api.vastai_instance(1, "198.51.100.1", 40001, status="hibernating", label="odd-word")
    fakes = {"vastai": fake_apis("vastai", KEY, [record])}
    data, drawn, warnings = graph(tmp_path, fakes)
    assert data["_meta"]["hostvars"] == {} and "odd-word" not in drawn, drawn
    assert "'hibernating'" in warnings and "never as running" in warnings, warnings
    data, drawn, _warnings = graph(tmp_path, fakes, "include_states: [unknown]\n")
    assert members(data, "unknown") == ["odd-word"] and members(data, "running") == [], drawn
    hostvars = data["_meta"]["hostvars"]["odd-word"]
    assert hostvars["provider_state"] == "unknown" and hostvars["provider_status"] == "hibernating"
    assert "ansible_host" not in hostvars


def stop_vast_instance(fake, instance_id):
    """``ansible localhost -m remote_gpu.trainer.instance`` with state=stopped and a 600 s timeout on a vast.ai
    instance of the fake; the caller counts its requests (a state that does not change by itself is never waited on:
    no poll)."""
    proc = subprocess.run([str(VENV_BIN / "ansible"), "localhost", "-m", "remote_gpu.trainer.instance", "-a",
                           json.dumps({"provider": "vastai", "id": instance_id, "state": "stopped",
                                       "api_url": fake.url, "timeout": 600}), "-o"],
                          capture_output=True, text=True, cwd=REPO, env=ansible_env(VAST_API_KEY=KEY), timeout=300,
                          check=False)
    return proc


def test_instance_stopped_on_a_frozen_vast_instance_returns_at_once_with_a_clear_message(fake_apis):
    fake = fake_apis("vastai", KEY, [fake_api.odd("vastai", "frozen", 1, "198.51.100.1", 40001)])
    proc = stop_vast_instance(fake, "9000001")
    assert proc.returncode == 0 and "CHANGED" in proc.stdout, proc.stdout + proc.stderr
    assert "frozen" in proc.stdout and "GPU still bills" in proc.stdout and '"current": "stopped"' in proc.stdout
    assert fake.find("9000001")["actual_status"] == "stopped"
    # read, stop, one read that finds it stopped: no poll while it was frozen
    assert [r["method"] for r in fake.api_requests()] == ["GET", "PUT", "GET"]


def test_instance_on_an_unknown_vast_host_fails_at_once_and_calls_nothing(fake_apis):
    fake = fake_apis("vastai", KEY, [fake_api.odd("vastai", "unknown", 1, "198.51.100.1", 40001)])
    proc = stop_vast_instance(fake, "9000001")
    assert proc.returncode != 0 and "instance_unhealthy" in proc.stdout, proc.stdout + proc.stderr
    assert "no recent heartbeat" in proc.stdout and "does not change by itself" in proc.stdout
    assert [r["method"] for r in fake.api_requests()] == ["GET"]
