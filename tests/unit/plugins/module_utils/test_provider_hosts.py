"""Providers' instance records -> inventory hosts (pure functions)."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import provider_hosts as ph

_FAKE = pathlib.Path(__file__).resolve().parents[3] / "lab" / "providers" / "fake_api.py"
_spec = importlib.util.spec_from_file_location("fake_api", _FAKE)
fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake)


# --- RunPod -------------------------------------------------------------------------------------------------------

def test_runpod_ready_pod_is_addressed_at_public_ip_and_port_mapped_to_22():
    pod = fake.runpod_pod(1, "198.51.100.7", 10341)
    pod["portMappings"] = {"8888": 10340, "22": 10341}
    host = ph.runpod_host(pod)
    assert (host["state"], host["address"], host["port"], host["name"], host["id"]) == \
        ("running", "198.51.100.7", 10341, "train-1", "fakepod0001")
    hv = host["hostvars"]
    assert {k: hv[k] for k in ("provider", "provider_id", "provider_status", "gpu_type", "gpu_count", "region",
                               "price_per_hour", "interruptible", "trainer_price_per_hour")} == {
        "provider": "runpod", "provider_id": "fakepod0001", "provider_status": "RUNNING",
        "gpu_type": "H100 80GB HBM3", "gpu_count": 1, "region": "EU-RO-1", "price_per_hour": 2.69,
        "interruptible": False, "trainer_price_per_hour": 2.69}


def test_runpod_port_as_string_is_accepted():
    pod = fake.runpod_pod(1, "198.51.100.7", 10341)
    pod["portMappings"] = {"22": "10341"}
    assert ph.runpod_ssh(pod) == ("198.51.100.7", 10341)


@pytest.mark.parametrize("change", [
    {"publicIp": None}, {"publicIp": ""}, {"portMappings": None}, {"portMappings": {}},
    {"portMappings": {"8888": 10340}}, {"portMappings": {"22": 0}}, {"portMappings": {"22": "x"}},
    {"portMappings": {"22": 70000}}, {"portMappings": [22]},
])
def test_runpod_running_pod_without_ip_or_22_mapping_is_starting(change):
    pod = fake.runpod_pod(2, "198.51.100.8", 10342)
    pod.update(change)
    host = ph.runpod_host(pod)
    assert (host["state"], host["address"], host["port"]) == ("starting", None, None)


@pytest.mark.parametrize("status,state", [("EXITED", "stopped"), ("TERMINATED", "terminated"), ("CREATED", "unknown"),
                                          (None, "unknown")])
def test_runpod_status_to_state(status, state):
    pod = fake.runpod_pod(3, "198.51.100.9", 10343, status=status)
    host = ph.runpod_host(pod)
    assert host["state"] == state
    assert host["address"] is None


def test_runpod_hostvars_leave_env_out():
    host = ph.runpod_host(fake.runpod_pod(1, "198.51.100.7", 10341))
    assert "env" not in host["hostvars"]["runpod"]
    assert "fake-env-secret" not in repr(host)


def test_runpod_gpu_count_and_price_fallbacks():
    pod = fake.runpod_pod(1, "198.51.100.7", 10341, count=4)
    del pod["gpu"], pod["adjustedCostPerHr"]
    hv = ph.runpod_host(pod)["hostvars"]
    assert (hv["gpu_count"], hv["gpu_type"], hv["price_per_hour"]) == (4, "H100 80GB HBM3", 2.69)


def test_runpod_interruptible_pod():
    assert ph.runpod_host(fake.runpod_pod(1, "h", 1, interruptible=True))["hostvars"]["interruptible"] is True


@pytest.mark.parametrize("record", [None, [], "pod", {"name": "no id"}, {"id": ""}])
def test_bad_record_is_a_value_error(record):
    for fn in (ph.runpod_host, ph.vastai_host):
        with pytest.raises(ValueError):
            fn(record)


# --- vast.ai ------------------------------------------------------------------------------------------------------

def test_vastai_direct_22_mapping_wins():
    inst = fake.vastai_instance(1, "198.51.100.20", 40022)
    assert ph.vastai_ssh(inst) == ("198.51.100.20", 40022)
    host = ph.vastai_host(inst)
    assert (host["state"], host["address"], host["port"], host["name"], host["id"]) == \
        ("running", "198.51.100.20", 40022, "train-1", "9000001")


def test_vastai_proxy_when_no_direct_mapping():
    inst = fake.vastai_instance(2, "ssh5.vast.ai", 31002, direct=False)
    assert ph.vastai_ssh(inst) == ("ssh5.vast.ai", 31002)


def test_vastai_proxy_port_plus_one_for_jupyter_runtype():
    inst = fake.vastai_instance(2, "ssh5.vast.ai", 31002, direct=False, runtype="jupyter_direc ssh_direc ssh_proxy")
    assert ph.vastai_ssh(inst) == ("ssh5.vast.ai", 31003)


def test_vastai_direct_mapping_present_but_empty_is_not_an_address():
    # vast's CLI takes the direct branch whenever the key exists (and then finds no port).
    inst = fake.vastai_instance(3, "198.51.100.21", 40023)
    inst["ports"]["22/tcp"] = []
    assert ph.vastai_ssh(inst) == (None, None)
    assert ph.vastai_host(inst)["state"] == "starting"


def test_vastai_loading_and_stopped():
    assert ph.vastai_host(fake.vastai_instance(4, "h", 1, status="loading"))["state"] == "starting"
    # a stop that the container shows as exited is a stop; exited while it should run is a crash (unhealthy)
    assert ph.vastai_host(fake.vastai_instance(5, "h", 1, status="exited", intended="stopped"))["state"] == "stopped"
    assert ph.vastai_host(fake.vastai_instance(5, "h", 1, status="exited"))["state"] == "unhealthy"
    inst = fake.vastai_instance(6, "h", 1)
    inst["intended_status"] = "stopped"  # asked to stop, still running: on its way down
    assert ph.vastai_host(inst)["state"] == "stopping"


def test_vastai_hostvars_and_secrets_left_out():
    host = ph.vastai_host(fake.vastai_instance(7, "198.51.100.22", 40027, bid=True, count=2, price=0.81))
    hv = host["hostvars"]
    assert {k: hv[k] for k in ("provider", "provider_id", "provider_status", "gpu_type", "gpu_count", "region",
                               "price_per_hour", "interruptible", "trainer_price_per_hour")} == {
        "provider": "vastai", "provider_id": "9000007", "provider_status": "running", "gpu_type": "RTX_4090",
        "gpu_count": 2, "region": "Norway, NO", "price_per_hour": 0.81, "interruptible": True,
        "trainer_price_per_hour": 0.81}
    for secret in ("extra_env", "onstart", "jupyter_token"):
        assert secret not in hv["vastai"]
    assert "fake-env-secret" not in repr(host) and "fake-jupyter-token" not in repr(host)


def test_vastai_no_label_names_by_id():
    assert ph.vastai_host(fake.vastai_instance(8, "h", 1, label=""))["name"] == "vastai-9000008"


def test_unique_names_suffix_ids_of_shared_names():
    hosts = [ph.runpod_host(fake.runpod_pod(i, "h", 1, name="same")) for i in (1, 2)]
    hosts.append(ph.runpod_host(fake.runpod_pod(3, "h", 1, name="other thing")))
    assert [h["name"] for h in ph.unique_names(hosts)] == ["same-fakepod0001", "same-fakepod0002", "other-thing"]


# --- Lambda Cloud -------------------------------------------------------------------------------------------------

def test_lambda_active_instance_is_addressed_at_ip_port_22():
    inst = fake.lambda_instance(1, "198.51.100.31", gpus=8, cents=2392, gpu="H100 (80 GB SXM5)")
    host = ph.lambda_host(inst)
    assert (host["state"], host["address"], host["port"], host["name"]) == ("running", "198.51.100.31", 22, "train-1")
    hv = host["hostvars"]
    assert (hv["gpu_type"], hv["gpu_count"], hv["region"], hv["price_per_hour"], hv["interruptible"],
            hv["lambda_instance_id"]) == ("H100 (80 GB SXM5)", 8, "us-east-1", 23.92, False, inst["id"])
    assert "jupyter_token" not in hv["lambda"] and "jupyter_url" not in hv["lambda"]


@pytest.mark.parametrize("status,ip,state", [("booting", None, "starting"), ("active", None, "starting"),
                                             ("active", "", "starting"), ("unhealthy", "198.51.100.1", "unhealthy"),
                                             ("terminating", "198.51.100.1", "stopping"),
                                             ("terminated", "198.51.100.1", "terminated"), (None, None, "unknown"),
                                             ("preempted", "198.51.100.1", "preempted")])
def test_lambda_status_to_state(status, ip, state):
    host = ph.lambda_host(fake.lambda_instance(2, ip, status=status))
    assert host["state"] == state and (host["address"] is None) == (state != "running")
    assert host["hostvars"]["provider_state"] == state


def test_lambda_missing_type_and_region_are_none():
    host = ph.lambda_host({"id": "abc", "status": "active", "ip": "198.51.100.1", "instance_type": "x", "region": 3})
    hv = host["hostvars"]
    assert (hv["gpu_type"], hv["gpu_count"], hv["region"], hv["price_per_hour"]) == (None, None, None, None)


# --- AutoDL Pro ---------------------------------------------------------------------------------------------------

def autodl_record(*args, **kw):
    record = fake.autodl_instance(*args, **kw)
    record["snapshot"] = record.pop("_snapshot")
    return record


def test_autodl_running_instance_is_addressed_at_the_snapshot_proxy():
    host = ph.autodl_host(autodl_record(1, "connect.westb.seetacloud.com", 41001, payg_milli=1880))
    assert (host["state"], host["address"], host["port"], host["id"]) == \
        ("running", "connect.westb.seetacloud.com", 41001, "pro-fake0000001")
    hv = host["hostvars"]
    assert (hv["gpu_type"], hv["gpu_count"], hv["region"], hv["price_per_hour"], hv["interruptible"],
            hv["autodl_instance_uuid"]) == ("RTX 4090D", 1, "西北B区", 1.88, False, "pro-fake0000001")
    assert "root_password" not in hv["autodl"]["snapshot"] and "ssh_command" not in hv["autodl"]["snapshot"]


@pytest.mark.parametrize("status,state", [("shutdown", "stopped"), ("stopped", "stopped"), ("released", "terminated"),
                                          ("starting", "starting"), ("creating", "starting"), (None, "unknown")])
def test_autodl_status_to_state(status, state):
    assert ph.autodl_host(autodl_record(2, "h", 41002, status=status))["state"] == state


def test_autodl_running_without_a_snapshot_address_is_starting():
    record = autodl_record(3, "h", 41003)
    record["snapshot"] = {}
    assert ph.autodl_host(record)["state"] == "starting"
    del record["snapshot"]
    assert ph.autodl_host(record)["state"] == "starting"


@pytest.mark.parametrize("record", [None, "x", [], {"status": "running"}, {"uuid": ""}])
def test_autodl_bad_record_is_a_value_error(record):
    with pytest.raises(ValueError):
        ph.autodl_host(record)


def _every_record(provider):
    """The fake's records of ``provider``: a running one, and one in each odd state it serves."""
    make = {"runpod": ph.runpod_host, "vastai": ph.vastai_host, "lambda": ph.lambda_host, "autodl": ph.autodl_host}
    records = fake.records_for(provider, [("198.51.100.1", 40001)])
    records += [fake.odd(provider, name, i, "198.51.100.%d" % i, 40000 + i)
                for i, name in enumerate(fake.ODD_STATES.get(provider, {}), start=10)]
    if provider == "runpod":  # with the v2 record the plugin attaches
        records = [dict(r, observed=fake.runpod_v2(r)) for r in records]
    if provider == "autodl":  # with the snapshot the plugin attaches
        records = [dict(r, snapshot=r.pop("_snapshot")) for r in records]
    return make[provider], [{k: v for k, v in r.items() if not k.startswith("_")} for r in records]


@pytest.mark.parametrize("provider", ["runpod", "vastai", "lambda", "autodl"])
def test_cache_record_keeps_only_what_hostvars_hold_and_gives_the_same_host(provider):
    to_host, records = _every_record(provider)
    for record in records:
        kept = ph.cache_record(provider, record)
        assert to_host(kept) == to_host(record)
        assert set(kept) <= set(to_host(record)["hostvars"][provider]) | set(ph.NAME_FIELDS[provider]), sorted(kept)
    assert ph.cache_record(provider, "garbled") == "garbled"  # a malformed record stays one (skipped, named)
