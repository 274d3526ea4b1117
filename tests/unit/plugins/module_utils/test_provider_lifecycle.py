"""The providers' lifecycle verbs and state mapping (pure functions)."""

from __future__ import annotations

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_http import ProviderAPIError
from ansible_collections.remote_gpu.trainer.plugins.module_utils import provider_lifecycle as pl


@pytest.mark.parametrize("provider,state,expected", [
    ("runpod", "stopped", ("stop", "POST", "/pods/p1/stop", None)),
    ("runpod", "running", ("start", "POST", "/pods/p1/start", None)),
    ("runpod", "absent", ("terminate", "DELETE", "/pods/p1", None)),
    ("vastai", "stopped", ("stop", "PUT", "/api/v0/instances/p1/", {"state": "stopped"})),
    ("vastai", "running", ("start", "PUT", "/api/v0/instances/p1/", {"state": "running"})),
    ("vastai", "absent", ("destroy", "DELETE", "/api/v0/instances/p1/", None)),
    ("lambda", "absent", ("terminate", "POST", "/api/v1/instance-operations/terminate", {"instance_ids": ["p1"]})),
    ("autodl", "stopped", ("power_off", "POST", "/api/v1/dev/instance/pro/power_off", {"instance_uuid": "p1"})),
    ("autodl", "running", ("power_on", "POST", "/api/v1/dev/instance/pro/power_on",
                           {"instance_uuid": "p1", "payload": "gpu"})),
    ("autodl", "absent", ("release", "POST", "/api/v1/dev/instance/pro/release", {"instance_uuid": "p1"})),
])
def test_verb_table(provider, state, expected):
    req = pl.verb_request(provider, state, "p1")
    assert (req["name"], req["method"], req["path"], req["body"]) == expected


def test_id_is_quoted_in_the_path():
    assert pl.verb_request("runpod", "stopped", "a/../b")["path"] == "/pods/a%2F..%2Fb/stop"


@pytest.mark.parametrize("state,current,words", [("stopped", "running", "Lambda Cloud has no stop"),
                                                 ("running", "transition", "Lambda Cloud has no start")])
def test_lambda_has_no_stop_or_start(state, current, words):
    with pytest.raises(ProviderAPIError) as err:
        pl.plan("lambda", state, current, "i1")
    assert words in str(err.value) and err.value.kind == "unsupported"


@pytest.mark.parametrize("current", ["running", "transition"])
def test_autodl_release_only_after_power_off(current):
    with pytest.raises(ProviderAPIError) as err:
        pl.plan("autodl", "absent", current, "pro-1")
    assert "releases only a powered-off instance" in str(err.value) and "state=stopped" in str(err.value)
    assert pl.plan("autodl", "absent", "stopped", "pro-1")["name"] == "release"


@pytest.mark.parametrize("provider", sorted(pl.PROVIDERS))
def test_same_state_is_nothing_to_do(provider):
    assert pl.plan(provider, "absent", "absent", "x") is None
    assert pl.plan(provider, "running", "running", "x") is None


def test_absent_instance_cannot_be_stopped():
    with pytest.raises(ProviderAPIError, match="does not exist"):
        pl.plan("runpod", "stopped", "absent", "x")


@pytest.mark.parametrize("provider,record,state", [
    ("runpod", {"desiredStatus": "RUNNING"}, "running"), ("runpod", {"desiredStatus": "EXITED"}, "stopped"),
    ("runpod", {"desiredStatus": "TERMINATED"}, "absent"), ("runpod", {"desiredStatus": "CREATED"}, "transition"),
    ("vastai", {"actual_status": "running", "intended_status": "running"}, "running"),
    ("vastai", {"actual_status": "running", "intended_status": "stopped"}, "transition"),
    ("vastai", {"actual_status": "exited", "intended_status": "stopped"}, "stopped"),
    ("vastai", {"actual_status": "loading", "intended_status": "running"}, "transition"),
    ("lambda", {"status": "active"}, "running"), ("lambda", {"status": "booting"}, "transition"),
    ("lambda", {"status": "terminating"}, "transition"), ("lambda", {"status": "terminated"}, "absent"),
    ("autodl", "running", "running"), ("autodl", "shutdown", "stopped"), ("autodl", "starting", "transition"),
    ("autodl", "released", "absent"), ("runpod", None, "absent"),
])
def test_observed_state(provider, record, state):
    assert pl.observed_state(provider, record)[0] == state


def test_observed_state_of_a_garbled_record_is_a_clear_error():
    with pytest.raises(ProviderAPIError, match="not an object"):
        pl.observed_state("runpod", [1, 2])
