"""provider_state: every status value that the providers' vendored documents name has a row in the collection's
tables (tests/fixtures/openapi), unknown values are never running, and the refinements (RunPod observed status,
unreachable_direct; vast outbid, crash, frozen; Lambda preempted, unhealthy; AutoDL stopped) hold."""

from __future__ import annotations

import copy
import json
import pathlib

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import provider_state as ps

OPENAPI = pathlib.Path(__file__).resolve().parents[3] / "fixtures" / "openapi"


def load(name):
    return json.loads((OPENAPI / name).read_text(encoding="utf-8"))


# each reader answers the document's own lists (not copies), so that a test can make a document gain a value


def runpod_v1_desired(doc):
    return [doc["components"]["schemas"]["Pod"]["properties"]["desiredStatus"]["enum"]]


def runpod_v2_status(doc):
    return [doc["components"]["schemas"]["PodStatus"]["enum"]]


def lambda_status(doc):
    return [doc["components"]["schemas"]["instance"]["properties"]["status"]["enum"]]


def lambda_183_status(doc):
    return [doc["components"]["schemas"]["InstanceStatus"]["enum"]]


def vast_lists(doc):
    return [doc["vastai"]["actual_status"]["values"], doc["vastai"]["actual_status_cli"]["values"]]


def values_of(lists):
    return [value for values in lists for value in values]


# (document, how its status values are read, the table that must hold each of them)
SOURCES = [
    ("runpod-v1.json", runpod_v1_desired, ps.RUNPOD_DESIRED),
    ("runpod-v2.json", runpod_v2_status, ps.RUNPOD_OBSERVED),
    ("lambda.json", lambda_status, ps.LAMBDA_STATUS),
    ("lambda-1.8.3.json", lambda_183_status, ps.LAMBDA_STATUS),
    ("statuses.json", vast_lists, ps.VASTAI_ACTUAL),
]


def missing(values, table):
    """The documented values that ``table`` has no row for."""
    return [value for value in values if value not in table]


@pytest.mark.parametrize("name, read, table", SOURCES, ids=[s[0] for s in SOURCES])
def test_every_documented_status_has_a_row(name, read, table):
    values = values_of(read(load(name)))
    assert values, "%s names no status value: the reader no longer finds the enum" % name
    assert missing(values, table) == [], "%s documents status values the table lacks" % name
    assert all(table[value] in ps.STATES for value in values)


@pytest.mark.parametrize("name, read, table", SOURCES, ids=[s[0] for s in SOURCES])
def test_a_value_the_document_gains_fails_the_check(name, read, table):
    doc = copy.deepcopy(load(name))
    for values in read(doc):
        values.append("NEWLY_DOCUMENTED_STATE")
        assert missing(values_of(read(doc)), table) == ["NEWLY_DOCUMENTED_STATE"]
        values.pop()


def test_lambda_preempted_comes_from_lambdas_own_document_and_no_word_is_ours():
    """Lambda's 1.8.3 document names preempted itself: no override adds a status word, and the table holds exactly
    the words of Lambda's two documents."""
    newest = values_of(lambda_183_status(load("lambda-1.8.3.json")))
    assert "preempted" in newest and load("overrides.json")["lambda"] == []
    assert set(ps.LAMBDA_STATUS) == set(values_of(lambda_status(load("lambda.json")))) | set(newest)


def test_vast_intended_status_values_are_all_read():
    for intended in load("statuses.json")["vastai"]["intended_status"]["values"]:
        for actual in ps.VASTAI_ACTUAL:
            result = ps.provider_state("vastai", {"id": 1, "actual_status": actual, "intended_status": intended})
            assert result["state"] in ps.STATES


@pytest.mark.parametrize("provider, record", [
    ("runpod", {"id": "p1", "desiredStatus": "HIBERNATING"}),
    ("runpod", {"id": "p1", "desiredStatus": "RUNNING", "observed": {"status": "MIGRATING"}}),
    ("vastai", {"id": 1, "actual_status": "teleporting", "intended_status": "running"}),
    ("lambda", {"id": "l1", "status": "sleeping", "ip": "198.51.100.1"}),
    ("autodl", {"uuid": "a1", "status": "hibernating"}),
    ("runpod", {"id": "p1"}),
])
def test_unknown_values_are_unknown_with_a_warning_never_running(provider, record):
    result = ps.provider_state(provider, record)
    assert result["state"] == "unknown"
    assert "never as running" in result["warning"]


@pytest.mark.parametrize("observed, desired, interruptible, state", [
    ("RUNNING", "RUNNING", False, "running"),
    ("PROVISIONING", "RUNNING", False, "starting"),
    ("STARTING", "RUNNING", False, "starting"),
    ("EXITED", "EXITED", False, "stopped"),
    ("EXITED", "RUNNING", False, "unhealthy"),   # a crash: desired RUNNING, observed EXITED
    ("EXITED", "RUNNING", True, "preempted"),    # spot pod stopped by the market
    ("ERROR", "RUNNING", False, "unhealthy"),
    ("TERMINATED", "TERMINATED", False, "terminated"),
])
def test_runpod_prefers_the_observed_status(observed, desired, interruptible, state):
    pod = {"id": "p1", "desiredStatus": desired, "interruptible": interruptible, "publicIp": "198.51.100.7",
           "portMappings": {"22": 10341}, "ports": ["22/tcp"],
           "observed": {"status": observed, "ssh": {"direct": {"host": "198.51.100.7", "port": 10341}}}}
    result = ps.provider_state("runpod", pod)
    assert result["state"] == state
    assert result["raw"].startswith(observed)
    if state in ("unhealthy", "preempted"):
        assert "p1" in result["message"]


def test_runpod_desired_only_running_without_address_is_starting_never_ready():
    assert ps.provider_state("runpod", {"id": "p1", "desiredStatus": "RUNNING", "ports": ["22/tcp"],
                                        "publicIp": None, "portMappings": None})["state"] == "starting"
    assert ps.provider_state("runpod", {"id": "p1", "desiredStatus": "RUNNING", "ports": ["22/tcp"],
                                        "publicIp": "198.51.100.7", "portMappings": {"22": 1}})["state"] == "running"


@pytest.mark.parametrize("pod, why", [
    ({"ports": ["8888/http"], "publicIp": "198.51.100.7", "portMappings": {"8888": 1}}, "do not expose 22/tcp"),
    ({"ports": ["22/tcp"], "machine": {"supportPublicIp": False}, "publicIp": None}, "no public IP"),
    ({"ports": ["22/tcp"], "observed": {"status": "RUNNING", "ssh": {"proxy": {}, "direct": None}}},
     "ssh.direct is null"),
])
def test_runpod_running_without_direct_ssh_is_unreachable_direct_and_says_how_to_expose_22(pod, why):
    pod = dict(pod, id="p9", desiredStatus="RUNNING")
    result = ps.provider_state("runpod", pod)
    assert result["state"] == "unreachable_direct"
    assert why in result["message"] and "Expose 22/tcp" in result["message"]


@pytest.mark.parametrize("actual, intended, bid, cur, state", [
    ("running", "running", False, "running", "running"),
    (None, "running", False, "running", "starting"),
    ("loading", "running", False, "running", "starting"),
    ("created", "running", False, "running", "starting"),
    ("running", "stopped", False, "running", "stopping"),
    ("stopped", "stopped", False, "stopped", "stopped"),
    ("exited", "stopped", False, "stopped", "stopped"),
    ("exited", "running", False, "running", "unhealthy"),   # a crash, not a stop
    ("frozen", "frozen", False, "running", "unhealthy"),
    ("unknown", "running", False, "running", "unhealthy"),
    ("offline", "running", False, "running", "unhealthy"),
    ("stopped", "running", True, "stopped", "preempted"),   # outbid
    ("loading", "running", True, "stopped", "preempted"),
    ("running", "running", True, "running", "running"),
])
def test_vastai_states(actual, intended, bid, cur, state):
    result = ps.provider_state("vastai", {"id": 9000001, "actual_status": actual, "intended_status": intended,
                                          "is_bid": bid, "cur_state": cur})
    assert result["state"] == state
    if state in ("unhealthy", "preempted"):
        assert "9000001" in result["message"] and "state=absent" in result["message"]


def test_vastai_frozen_message_says_the_gpu_still_bills():
    result = ps.provider_state("vastai", {"id": 7, "actual_status": "frozen", "intended_status": "frozen"})
    assert "GPU still bills" in result["message"]


@pytest.mark.parametrize("status, ip, state", [
    ("active", "198.51.100.1", "running"), ("active", None, "starting"), ("booting", None, "starting"),
    ("unhealthy", "198.51.100.1", "unhealthy"), ("terminating", "198.51.100.1", "stopping"),
    ("terminated", None, "terminated"), ("preempted", None, "preempted"),
])
def test_lambda_states_unhealthy_is_never_running(status, ip, state):
    assert ps.provider_state("lambda", {"id": "l1", "status": status, "ip": ip})["state"] == state


@pytest.mark.parametrize("status, state", [("running", "running"), ("shutdown", "stopped"), ("stopped", "stopped"),
                                           ("released", "terminated"), ("creating", "starting")])
def test_autodl_stopped_is_off_for_record_and_bare_status(status, state):
    assert ps.provider_state("autodl", {"uuid": "a1", "status": status})["state"] == state
    assert ps.provider_state("autodl", status)["state"] == state


def test_record_none_is_terminated_and_a_non_object_is_refused():
    assert ps.provider_state("vastai", None)["state"] == "terminated"
    with pytest.raises(ValueError, match="not an object"):
        ps.provider_state("lambda", ["x"])


@pytest.mark.parametrize("instance, path", [
    ({"file_system_names": ["fs1"]}, "/lambda/nfs/fs1"),
    ({"file_system_names": ["fs1"], "file_system_mounts": [{"mount_point": "/data/fs1", "file_system_id": "x"}]},
     "/data/fs1"),
    ({"file_system_names": ["fs1"], "file_system_mounts": [{"mount_point": "../etc", "file_system_id": "x"}]},
     "/lambda/nfs/fs1"),
    ({"file_system_names": []}, None),
])
def test_lambda_durable_dir_comes_from_the_real_mount(instance, path):
    assert ps.lambda_durable_dir(instance) == path
