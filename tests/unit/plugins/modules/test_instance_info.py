"""The instance_info module against the loopback fakes of the providers' APIs: what the provider says an instance is
now, as the inventory plugins would set it in hostvars; an unknown id that is not a failure; a read in check mode
too; a key that never shows."""

from __future__ import annotations

import json

import pytest

from ansible_collections.remote_gpu.trainer.plugins.modules import instance_info

from provider_fakes import FIRST_ID, fake_api, serve_fixture

KEY = "INFO-KEY-7a6b5c-never-shown"
serve = serve_fixture(KEY)
ID_VAR = {"runpod": "runpod_pod_id", "vastai": "vastai_instance_id", "lambda": "lambda_instance_id",
          "autodl": "autodl_instance_uuid"}


def args(fake, pid=None, **kw):
    base = {"provider": fake.provider, "id": pid or FIRST_ID[fake.provider], "api_key": KEY, "api_url": fake.url,
            "timeout": 5, "retry_budget": 2}
    base.update(kw)
    return base


def methods(fake):
    return [r["method"] for r in fake.api_requests()]


def test_vastai_running_instance_is_running_with_its_address(module_runner, serve):
    fake = serve("vastai")
    failed, result = module_runner(instance_info, args(fake))
    assert not failed and result["changed"] is False and result["found"] is True, result
    assert (result["provider"], result["id"], result["state"]) == ("vastai", "9000001", "running")
    assert (result["address"], result["port"], result["message"]) == ("198.51.100.1", 40001, None)
    facts = result["facts"]
    assert facts["provider_state"] == "running" and facts["provider_status"] == "running"
    assert (facts["provider"], facts["provider_id"], facts["vastai_instance_id"]) == ("vastai", "9000001", "9000001")
    assert (facts["ansible_host"], facts["ansible_port"]) == ("198.51.100.1", 40001)
    assert facts["provider_api_url"] == fake.url and facts["vastai"]["label"] == "train-1"
    assert facts["gpu_type"] == "RTX_4090" and facts["price_per_hour"] == 0.4
    # the record's environment, onstart script and jupyter token never reach the facts, nor the key
    dumped = json.dumps(result)
    assert "fake-env-secret" not in dumped and "fake-jupyter-token" not in dumped and KEY not in dumped
    assert methods(fake) == ["GET"]  # read-only: no verb


def test_vastai_preempted_bid_instance_is_preempted_without_an_address(module_runner, serve):
    outbid = fake_api.vastai_instance(1, "198.51.100.1", 40001, status="stopped", bid=True, intended="running")
    fake = serve("vastai", records=[outbid])
    failed, result = module_runner(instance_info, args(fake))
    assert not failed and result["found"] is True and result["state"] == "preempted", result
    assert result["address"] is None and result["port"] is None
    assert result["message"] and "9000001" in result["message"]
    facts = result["facts"]
    assert facts["provider_state"] == "preempted" and facts["provider_state_message"] == result["message"]
    assert facts["provider_status"] == "stopped" and facts["interruptible"] is True
    assert "ansible_host" not in facts and "ansible_port" not in facts


def test_running_without_an_address_is_starting_in_facts_too(module_runner, serve):
    # vast.ai says running, but neither a direct 22/tcp mapping nor a proxy endpoint is known yet
    fake = serve("vastai", records=[fake_api.vastai_instance(1, "", 40001, direct=False)])
    failed, result = module_runner(instance_info, args(fake))
    assert not failed and result["state"] == "starting", result
    assert result["facts"]["provider_state"] == "starting" and result["facts"]["provider_status"] == "running"
    assert result["address"] is None and "ansible_host" not in result["facts"]


def test_runpod_pod_running_reads_the_observed_v2_status(module_runner, serve):
    fake = serve("runpod")
    failed, result = module_runner(instance_info, args(fake))
    assert not failed and result["state"] == "running", result
    assert (result["address"], result["port"]) == ("198.51.100.1", 40001)
    facts = result["facts"]
    assert facts["runpod_pod_id"] == "fakepod0001" and facts["provider_state"] == "running"
    assert facts["runpod"]["observed"]["status"] == "RUNNING"
    assert [r["path"] for r in fake.api_requests()] == ["/v1/pods/fakepod0001", "/v2/pods/fakepod0001"]
    assert "fake-env-secret" not in json.dumps(result)


def test_runpod_crashed_pod_is_unhealthy_from_the_observed_status(module_runner, serve):
    fake = serve("runpod", records=[fake_api.odd("runpod", "crashed", 1, "198.51.100.1", 40001)])
    failed, result = module_runner(instance_info, args(fake))
    assert not failed and result["state"] == "unhealthy" and result["address"] is None, result
    assert result["facts"]["provider_status"] == "EXITED" and result["message"]


def test_lambda_instance_running(module_runner, serve):
    fake = serve("lambda")
    failed, result = module_runner(instance_info, args(fake))
    assert not failed and result["state"] == "running", result
    assert (result["address"], result["port"]) == ("198.51.100.1", 22)
    facts = result["facts"]
    assert facts["lambda_instance_id"] == FIRST_ID["lambda"] and facts["provider_status"] == "active"
    assert facts["region"] == "us-east-1" and facts["price_per_hour"] == 2.49
    assert (facts["ansible_host"], facts["ansible_port"]) == ("198.51.100.1", 22)
    assert "fake-jupyter-token" not in json.dumps(result)


def test_autodl_running_instance_reads_its_snapshot_without_the_password(module_runner, serve):
    fake = serve("autodl")
    failed, result = module_runner(instance_info, args(fake))
    assert not failed and result["state"] == "running", result
    assert (result["address"], result["port"]) == ("198.51.100.1", 40001)
    facts = result["facts"]
    assert facts["autodl_instance_uuid"] == FIRST_ID["autodl"] and facts["price_per_hour"] == 1.88
    assert facts["region"] == "西北B区"
    assert "fake-root-password" not in json.dumps(result)


def test_autodl_powered_off_instance_is_stopped_and_its_snapshot_not_read(module_runner, serve):
    fake = serve("autodl")
    fake.records[0]["status"] = "shutdown"
    failed, result = module_runner(instance_info, args(fake))
    assert not failed and result["state"] == "stopped" and result["address"] is None, result
    assert [r["path"] for r in fake.api_requests()] == ["/api/v1/dev/instance/pro/status"]


@pytest.mark.parametrize("provider", sorted(FIRST_ID))
def test_unknown_id_is_terminated_and_not_a_failure(module_runner, serve, provider):
    fake = serve(provider)
    failed, result = module_runner(instance_info, args(fake, pid="stale0042"))
    assert not failed and result["changed"] is False and result["found"] is False, result
    assert result["state"] == "terminated" and result["message"] is None
    assert result["address"] is None and result["port"] is None
    assert result["facts"] == {"provider": provider, "provider_id": "stale0042", "provider_state": "terminated",
                               "provider_status": None}
    failed, known = module_runner(instance_info, args(fake))
    assert not failed and known["found"] is True and known["facts"][ID_VAR[provider]] == FIRST_ID[provider]


def test_check_mode_reads_too_and_changes_nothing(module_runner, serve):
    fake = serve("vastai")
    failed, result = module_runner(instance_info, dict(args(fake), _ansible_check_mode=True))
    assert not failed and result["changed"] is False and result["state"] == "running", result
    assert result["facts"]["ansible_host"] == "198.51.100.1"
    assert methods(fake) == ["GET"]


def test_a_missing_key_names_the_env_var_and_requests_nothing(module_runner, serve, monkeypatch):
    fake = serve("vastai")
    monkeypatch.delenv("VAST_API_KEY", raising=False)
    failed, result = module_runner(instance_info, dict(args(fake), api_key=None))
    assert failed and "Set the environment variable VAST_API_KEY" in result["msg"], result
    assert result["error_kind"] == "no_key" and fake.api_requests() == []


def test_the_key_from_the_env_var_and_a_wrong_key_never_shown(module_runner, serve, monkeypatch):
    fake = serve("runpod")
    monkeypatch.setenv("RUNPOD_API_KEY", KEY)
    failed, result = module_runner(instance_info, dict(args(fake), api_key=None))
    assert not failed and result["state"] == "running", result
    wrong = "WRONG-KEY-123456-never-shown"
    failed, result = module_runner(instance_info, dict(args(fake), api_key=wrong))
    assert failed and result["error_kind"] == "auth" and "HTTP 401" in result["msg"], result
    assert "RUNPOD_API_KEY" in result["msg"]
    assert wrong not in json.dumps(result) and KEY not in json.dumps(result)


@pytest.mark.parametrize("bad, words", [
    ({"id": ""}, "id is empty"),
    ({"id": "   "}, "id is empty"),
    ({"provider": "aws"}, "provider"),
    ({"timeout": "soon"}, "timeout"),
    ({"timeout": 0}, "timeout must be more than 0"),
])
def test_bad_input_is_a_message_not_a_traceback(module_runner, serve, bad, words):
    fake = serve("runpod")
    failed, result = module_runner(instance_info, dict(args(fake), **bad))
    assert failed and words in result["msg"] and "Traceback" not in result["msg"], result
    assert fake.api_requests() == []
