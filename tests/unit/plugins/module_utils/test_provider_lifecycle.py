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
    ("runpod", {"desiredStatus": "RUNNING", "publicIp": "198.51.100.7", "portMappings": {"22": 1}}, "running"),
    ("runpod", {"desiredStatus": "RUNNING"}, "transition"),  # the intent only, no address yet
    ("runpod", {"desiredStatus": "RUNNING", "observed": {"status": "RUNNING", "ssh": {"direct": {}}}}, "running"),
    ("runpod", {"desiredStatus": "RUNNING", "observed": {"status": "ERROR"}}, "unhealthy"),
    ("runpod", {"desiredStatus": "RUNNING", "interruptible": True, "observed": {"status": "EXITED"}}, "preempted"),
    ("runpod", {"desiredStatus": "EXITED"}, "stopped"),
    ("runpod", {"desiredStatus": "TERMINATED"}, "absent"), ("runpod", {"desiredStatus": "CREATED"}, "unknown"),
    ("vastai", {"actual_status": "frozen", "intended_status": "frozen"}, "unhealthy"),
    ("vastai", {"actual_status": "stopped", "intended_status": "running", "is_bid": True}, "preempted"),
    ("vastai", {"actual_status": "running", "intended_status": "running"}, "running"),
    ("vastai", {"actual_status": "running", "intended_status": "stopped"}, "transition"),
    ("vastai", {"actual_status": "exited", "intended_status": "stopped"}, "stopped"),
    ("vastai", {"actual_status": "loading", "intended_status": "running"}, "transition"),
    ("lambda", {"status": "active", "ip": "198.51.100.1"}, "running"), ("lambda", {"status": "booting"}, "transition"),
    ("lambda", {"status": "unhealthy", "ip": "198.51.100.1"}, "unhealthy"), ("lambda", {"status": "preempted"}, "preempted"),
    ("autodl", "stopped", "stopped"),
    ("lambda", {"status": "terminating"}, "transition"), ("lambda", {"status": "terminated"}, "absent"),
    ("autodl", "running", "running"), ("autodl", "shutdown", "stopped"), ("autodl", "starting", "transition"),
    ("autodl", "released", "absent"), ("runpod", None, "absent"),
])
def test_observed_state(provider, record, state):
    assert pl.observed_state(provider, record)[0] == state


def test_observed_state_of_a_garbled_record_is_a_clear_error():
    with pytest.raises(ProviderAPIError, match="not an object"):
        pl.observed_state("runpod", [1, 2])


@pytest.mark.parametrize("provider, raw, current, state, verb", [
    ("vastai", "frozen (intended frozen)", "unhealthy", "stopped", "stop"),
    ("vastai", "exited (intended running)", "unhealthy", "restarted", "reboot"),
    ("vastai", "stopped (intended running)", "preempted", "stopped", "stop"),
    ("runpod", "ERROR (desired RUNNING)", "unhealthy", "stopped", "stop"),
    ("lambda", "unhealthy", "unhealthy", "restarted", "restart"),
    ("lambda", "preempted", "preempted", "absent", "terminate"),
])
def test_a_state_that_does_not_change_by_itself_acts_at_once_where_the_provider_can(
        provider, raw, current, state, verb):
    assert pl.plan(provider, state, current, "i1", {"raw": raw, "message": "m"})["name"] == verb


@pytest.mark.parametrize("provider, raw, current, state", [
    ("vastai", "unknown (intended running)", "unhealthy", "stopped"),   # the host is not talking to vast
    ("vastai", "offline (intended running)", "unhealthy", "running"),
    ("vastai", "stopped (intended running)", "preempted", "running"),   # outbid: only a winning bid resumes it
    ("lambda", "unhealthy", "unhealthy", "stopped"),
    ("lambda", "preempted", "preempted", "running"),
    ("runpod", "ERROR (desired RUNNING)", "unhealthy", "running"),
    ("autodl", "hibernating", "unknown", "stopped"),
])
def test_a_state_that_does_not_change_by_itself_fails_at_once_with_what_it_means(provider, raw, current, state):
    with pytest.raises(ProviderAPIError, match="WHAT IT MEANS. It does not change by itself") as err:
        pl.plan(provider, state, current, "i1", {"raw": raw, "message": "WHAT IT MEANS."})
    assert err.value.kind == "instance_%s" % current


def test_restarted_always_acts_and_autodl_has_no_restart():
    assert pl.plan("vastai", "restarted", "running", "1")["name"] == "reboot"
    assert pl.plan("runpod", "restarted", "running", "p1")["api"] == "v2"
    with pytest.raises(ProviderAPIError, match="no restart"):
        pl.plan("autodl", "restarted", "running", "pro-1")


def test_a_verb_the_provider_does_not_list_as_valid_now_is_not_called():
    read = {"raw": "EXITED", "message": None, "actions": {"start", "terminate"}}
    with pytest.raises(ProviderAPIError, match="lists start, terminate as its valid actions now; restart is not") as err:
        pl.plan("runpod", "restarted", "stopped", "p1", read)
    assert err.value.kind == "action_not_available"
    assert pl.plan("runpod", "running", "stopped", "p1", read)["name"] == "start"
    lam = {"status": "active", "ip": "198.51.100.1",
           "actions": {"restart": {"available": False}, "terminate": {"available": True}}}
    state, _raw, answer = pl.observed("lambda", lam)
    with pytest.raises(ProviderAPIError, match="restart is not among them"):
        pl.plan("lambda", "restarted", state, "l1", answer)
    assert pl.plan("lambda", "absent", state, "l1", answer)["name"] == "terminate"


class _Clock:
    """A clock that sleeping advances: no test really sleeps."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def _scripted(states):
    """A Lifecycle whose reads answer ``states`` in turn (then the last one forever), counting them."""
    clock = _Clock()
    life = pl.Lifecycle("vastai", None, sleep=clock.sleep, clock=clock)
    reads = []

    def read(_pid):
        reads.append(1)
        return (states.pop(0) if len(states) > 1 else states[0]), "raw"
    life.read = read
    return life, reads


def test_a_wait_stops_when_the_instance_falls_back_into_the_stuck_state_it_had_left():
    """A restarted (or started) crashed instance that crashes again: unhealthy, then starting, then unhealthy. It
    will not change by itself, so the wait ends there, never at the timeout."""
    life, reads = _scripted(["unhealthy", "transition", "unhealthy"])
    assert life.wait_for("9000001", "running", 600, 5, before="unhealthy") == (False, "unhealthy", "raw")
    assert len(reads) == 3


def test_a_wait_still_allows_the_provider_time_to_apply_the_verb():
    """The state it was in when the verb was called, never left: the provider may not have applied the verb yet."""
    life, reads = _scripted(["unhealthy", "unhealthy", "running"])
    assert life.wait_for("9000001", "running", 600, 5, before="unhealthy") == (True, "running", "raw")
    assert len(reads) == 3


def test_a_wait_that_times_out_is_not_taken_for_a_stuck_state():
    life, _reads = _scripted(["unhealthy"])
    assert life.wait_for("9000001", "running", 20, 5, before="unhealthy")[0] is False
    assert life.stuck is False  # the timeout ended it: the module says "after N s", not "stopped waiting"
    life, _reads = _scripted(["transition", "unhealthy"])
    life.wait_for("9000001", "running", 20, 5, before="running")
    assert life.stuck is True
