"""What is compared before an API verb: the box's id first, else the provider's record against the host's address."""

from __future__ import annotations

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import provider_identity as pi
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_http import ProviderAPIError

BOX = {"changed": False, "id": "fakepod0001", "variable": "RUNPOD_POD_ID", "source": "/proc/1/environ",
       "has_own_id": True, "error": None}


def kind(call, *args, **kw):
    with pytest.raises(ProviderAPIError) as err:
        call(*args, **kw)
    return err.value.kind, str(err.value)


def test_the_box_id_wins_and_a_different_verb_id_is_refused():
    expected = pi.expectation(BOX, None, "127.0.0.1", 22)
    assert (expected["by"], expected["id"], expected["source"]) == ("id", "fakepod0001", "/proc/1/environ")
    pi.check_id("runpod", "fakepod0001", expected)
    code, msg = kind(pi.check_id, "runpod", "fakepod0002", expected, "lab-01")
    assert code == "identity_mismatch" and "fakepod0001" in msg and "runpod_pod_id" in msg and "lab-01" in msg


def test_expect_id_by_hand_must_agree_with_the_box():
    assert kind(pi.expectation, BOX, "fakepod0009", None, None)[0] == "identity_mismatch"
    assert pi.expectation(None, "fakepod0009", None, None)["id"] == "fakepod0009"


@pytest.mark.parametrize("identity", [
    {"failed": True, "msg": "the box's sources disagree"}, {"unreachable": True, "msg": "ssh: timeout"},
    {"skipped": True}, {"id": None, "error": "identity_conflict", "msg": "disagree"}])
def test_an_identity_that_could_not_be_read_is_refused(identity):
    assert kind(pi.expectation, identity, None, "1.2.3.4", 22)[0] == "identity_unreadable"


def test_no_id_on_the_box_falls_back_to_the_address():
    lambda_box = {"id": None, "has_own_id": False, "error": None, "msg": "lambda gives the box no id"}
    expected = pi.expectation(lambda_box, None, "198.51.100.9", "2222")
    assert (expected["by"], expected["address"], expected["port"]) == ("address", "198.51.100.9", 2222)
    assert kind(pi.expectation, lambda_box, None, None, None)[0] == "nothing_to_verify"
    assert pi.expectation(None, None, None, None)["by"] is None  # a module user who asks for no check


def test_the_record_must_point_at_the_host():
    expected = pi.expectation(None, None, "198.51.100.9", 22)
    pi.check_address("lambda", "i-1", expected, ("198.51.100.9", 22))
    assert kind(pi.check_address, "lambda", "i-1", expected, ("198.51.100.10", 22))[0] == "address_mismatch"
    assert kind(pi.check_address, "lambda", "i-1", expected, ("198.51.100.9", 2222))[0] == "address_mismatch"
    code, msg = kind(pi.check_address, "autodl", "pro-1", expected, (None, None), "lab-06")
    assert code == "address_mismatch" and "no SSH address" in msg and "autodl_instance_uuid" in msg


def test_a_name_and_an_address_match_when_the_name_resolves_to_it():
    def resolve(host, _port):
        table = {"box.example": [(2, 1, 6, "", ("198.51.100.9", 0))]}
        if host not in table:
            raise OSError("unknown host")
        return table[host]
    assert pi.same_address("BOX.example.", "box.example", resolve)
    assert pi.same_address("box.example", "198.51.100.9", resolve)
    assert not pi.same_address("box.example", "198.51.100.10", resolve)
    assert not pi.same_address("", "198.51.100.10", resolve)


def test_not_found_and_terminated_are_never_stopped_when_a_check_is_asked():
    code, msg = kind(pi.check_found, "runpod", "fakepod0099", False, "absent", "lab-01")
    assert code == "instance_not_found" and "console" in msg and "runpod_pod_id" in msg and "billing" in msg
    assert kind(pi.check_found, "lambda", "i-1", True, "absent")[0] == "instance_gone"
    pi.check_found("runpod", "fakepod0001", True, "running")


def test_record_addresses_as_the_inventory_plugins_make_them():
    assert pi.record_address("runpod", {"publicIp": "1.2.3.4", "portMappings": {"22": 10341}}) == ("1.2.3.4", 10341)
    assert pi.record_address("vastai", {"public_ipaddr": "5.6.7.8",
                                        "ports": {"22/tcp": [{"HostPort": "41022"}]}}) == ("5.6.7.8", 41022)
    assert pi.record_address("lambda", {"ip": "9.9.9.9"}) == ("9.9.9.9", 22)
    assert pi.record_address("autodl", None, {"proxy_host": "region-1.autodl.com", "ssh_port": 31000}) == (
        "region-1.autodl.com", 31000)
    assert pi.record_address("runpod", {"publicIp": None}) == (None, None)
