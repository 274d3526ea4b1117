"""provider_rent: the spec, vast.ai's offer filter (what each constraint excluded) and the create requests, each body
held to the request schema of the provider's vendored OpenAPI document (tests/fixtures/openapi)."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest
from jsonschema import Draft202012Validator

from ansible_collections.remote_gpu.trainer.plugins.module_utils import provider_rent as pr

HERE = pathlib.Path(__file__).resolve()
CHECK = HERE.parents[3] / "lab" / "providers" / "openapi_check.py"


def _openapi_check():
    spec = importlib.util.spec_from_file_location("openapi_check_rent", str(CHECK))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


OC = _openapi_check()


def request_problems(provider, method, path, body):
    """The problems of ``body`` against the request schema of ``method path`` in the vendored document."""
    check = OC.OpenAPICheck(provider)
    index, doc_path, op = check.operation(method, path)
    request = op["requestBody"]
    if "$ref" in request:
        request = check.docs[index]["components"]["requestBodies"][request["$ref"].rsplit("/", 1)[1]]
    schema = request["content"]["application/json"]["schema"]
    validator = Draft202012Validator(dict(schema, **{"$id": "urn:req"}) if "$ref" not in schema else
                                     {"$ref": "urn:doc%d#/components/schemas/%s" % (index, schema["$ref"].rsplit("/", 1)[1])},
                                     registry=check.registry)
    return [err.message for err in validator.iter_errors(body)], schema, check.docs[index]


def offer(index, price, machine=None, gpu="H100_SXM", count=1, reliability=0.99, ports=10, vram=81559, geo="Norway, NO"):
    return {"id": 7100000 + index, "machine_id": machine or 20000 + index, "gpu_name": gpu, "num_gpus": count,
            "dph_total": price, "reliability2": reliability, "direct_port_count": ports, "gpu_ram": vram,
            "geolocation": geo, "rentable": True}


VAST = pr.check_spec("vastai", {"gpu": "H100 SXM", "gpu_count": 1, "max_price": 2.5, "min_reliability": 0.98,
                                "min_vram_gb": 80, "image": "pytorch/pytorch:latest", "disk_gb": 64,
                                "onstart": "echo up", "env": {"WANDB_MODE": "offline"}})


def test_the_offer_search_body_fits_the_documented_filters():
    query = pr.vast_query(VAST)
    problems, schema, _doc = request_problems("vastai", "POST", "/api/v0/bundles", query)
    assert problems == []
    assert set(query) <= set(schema["properties"])  # every filter is one the document names
    assert query["gpu_name"] == {"eq": "H100_SXM"} and query["num_gpus"] == {"eq": 1}
    assert query["type"] == "ondemand" and query["rentable"] == {"eq": True}
    assert pr.vast_query(dict(VAST, gpu=["RTX 4090", "RTX_3090"], interruptible=True))["gpu_name"] == {
        "in": ["RTX_4090", "RTX_3090"]}


def test_offers_are_kept_cheapest_first_and_each_exclusion_names_its_constraint():
    offers = [offer(1, 2.3), offer(2, 2.1), offer(3, 2.9), offer(4, 2.0, reliability=0.9), offer(5, 1.0, machine=555),
              offer(6, 1.5, gpu="RTX_4090"), offer(7, 1.6, count=2), offer(8, 1.7, vram=24000),
              offer(9, 1.8, ports=0)]
    kept, excluded = pr.filter_offers(offers, VAST, bad_machines=["555"])
    assert [o["id"] for o in kept] == [7100002, 7100001]
    assert {name: [o["id"] for o in found] for name, found in excluded.items()} == {
        "max_price": [7100003], "min_reliability": [7100004], "bad_machine": [7100005], "gpu": [7100006],
        "gpu_count": [7100007], "min_vram_gb": [7100008], "min_direct_ports": [7100009]}
    text = pr.explain(VAST, excluded, len(offers))
    assert "max_price 2.5 $/h excluded 1 offer(s): 7100003 (machine 20003, 2.9 $/h)" in text
    assert "a machine recorded as bad" in text and "7100005" in text


def test_a_price_cap_below_every_offer_keeps_none_and_says_so():
    kept, excluded = pr.filter_offers([offer(1, 2.1), offer(2, 2.2)], dict(VAST, max_price=0.5))
    assert kept == [] and list(excluded) == ["max_price"]
    assert pr.explain(dict(VAST, max_price=0.5), excluded, 2).startswith("2 offer(s) seen; max_price 0.5 $/h excluded 2")
    assert "widen spec.gpu" in pr.explain(VAST, {}, 0)


def test_regions_match_the_country_code_or_the_place():
    spec = dict(VAST, regions=["NO"], max_price=None)
    kept, excluded = pr.filter_offers([offer(1, 2.0), offer(2, 2.0, geo="Texas, US")], spec)
    assert [o["id"] for o in kept] == [7100001] and [o["id"] for o in excluded["regions"]] == [7100002]


def test_the_ask_body_fits_vasts_create_instance():
    body = pr.vast_ask_body(VAST, "sweep-a", offer(1, 2.1))
    problems, _schema, _doc = request_problems("vastai", "PUT", "/api/v0/asks/7100001", body)
    assert problems == []
    assert request_problems("vastai", "PUT", "/api/v0/asks/1", {"label": "x", "runtype": "rdp"})[0]  # the check bites
    assert body == {"image": "pytorch/pytorch:latest", "label": "sweep-a", "runtype": "ssh", "target_state": "running",
                    "disk": 64.0, "onstart": "echo up", "env": "-e WANDB_MODE=offline"}
    bid = pr.vast_ask_body(dict(VAST, interruptible=True), "sweep-a", offer(1, 2.1))
    assert bid["price"] == 2.5 and request_problems("vastai", "PUT", "/api/v0/asks/1", bid)[0] == []


def test_the_runpod_create_body_fits_pod_create_input():
    spec = pr.check_spec("runpod", {"gpu": ["NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"], "gpu_count": 2,
                                    "image": "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04",
                                    "disk_gb": 50, "volume_gb": 100, "interruptible": True, "cloud_type": "community",
                                    "regions": "EU-RO-1", "public_key": "ssh-ed25519 AAAA user@laptop"})
    body = pr.runpod_create_body(spec, "sweep-a")
    _problems, _schema, doc = request_problems("runpod", "POST", "/v1/pods", body)
    schema = doc["components"]["schemas"]["PodCreateInput"]
    assert set(body) <= set(schema["properties"])
    assert Draft202012Validator(OC._nullable(dict(schema))).is_valid(body)
    assert body["ports"] == ["22/tcp"] and body["gpuTypeIds"][0] == "NVIDIA H100 80GB HBM3"
    assert body["gpuTypePriority"] == "custom" and body["cloudType"] == "COMMUNITY"
    assert body["interruptible"] is True and body["env"] == {"PUBLIC_KEY": "ssh-ed25519 AAAA user@laptop"}
    assert body["containerDiskInGb"] == 50 and body["volumeInGb"] == 100 and body["dataCenterIds"] == ["EU-RO-1"]


def test_the_lambda_launch_body_fits_launch_instance_request():
    spec = pr.check_spec("lambda", {"instance_type": "gpu_1x_h100_pcie", "regions": "us-east-1",
                                    "ssh_key_names": ["laptop"], "file_system_names": "lab-nfs"})
    body = pr.lambda_launch_body(spec, "x" * 80)
    problems, _schema, doc = request_problems("lambda", "POST", "/api/v1/instance-operations/launch", body)
    assert problems == []
    assert request_problems("lambda", "POST", "/api/v1/instance-operations/launch", dict(body, gpus=1))[0]
    assert body == {"region_name": "us-east-1", "instance_type_name": "gpu_1x_h100_pcie", "ssh_key_names": ["laptop"],
                    "quantity": 1, "name": "x" * 64, "file_system_names": ["lab-nfs"]}
    assert doc["components"]["schemas"]["launchInstance_request"]["additionalProperties"] is False


@pytest.mark.parametrize("provider, spec, words", [
    ("vastai", {"gpu": "H100"}, "spec.image is required"),
    ("vastai", {"image": "x", "colour": "red"}, "unknown key(s) colour"),
    ("vastai", {"image": "x", "max_price": "cheap"}, "spec.max_price must be a number"),
    ("vastai", {"image": "x", "min_reliability": 99}, "between 0 and 1"),
    ("runpod", {"image": "x"}, "spec.gpu is required"),
    ("runpod", {"image": "x", "gpu": "A", "cloud_type": "moon"}, "SECURE or COMMUNITY"),
    ("lambda", {"instance_type": "gpu_1x_a10", "regions": ["a", "b"], "ssh_key_names": "k"}, "exactly one region"),
    ("lambda", {"instance_type": "gpu_1x_a10", "regions": "a"}, "exactly one SSH key"),
    ("autodl", {}, "not supported"),
])
def test_a_spec_that_cannot_be_rented_says_what_to_fix(provider, spec, words):
    with pytest.raises(pr.SpecError) as err:
        pr.check_spec(provider, spec)
    assert words in str(err.value)


def test_direct_ssh_is_required_on_vast_by_default():
    assert pr.check_spec("vastai", {"image": "x"})["min_direct_ports"] == 1
    assert pr.check_spec("vastai", {"image": "x", "min_direct_ports": 0})["min_direct_ports"] == 0


def test_the_rents_instances_are_found_by_label_and_the_gone_ones_left_out():
    records = [{"id": 3, "label": "a", "actual_status": "running"}, {"id": 1, "label": "a", "actual_status": None},
               {"id": 2, "label": "b", "actual_status": "running"}]
    assert [r["id"] for r in pr.labelled("vastai", records, "a")] == [1, 3]
    pods = [{"id": "p1", "name": "a", "desiredStatus": "TERMINATED"}, {"id": "p2", "name": "a", "desiredStatus": "RUNNING"}]
    assert [r["id"] for r in pr.labelled("runpod", pods, "a")] == ["p2"]
    assert pr.machine_id("vastai", {"machine_id": 20001}) == "20001"
    assert pr.machine_id("runpod", {"machineId": "m1"}) == "m1" and pr.machine_id("lambda", {"id": "x"}) is None


@pytest.mark.parametrize("provider, spec", [
    ("runpod", {"image": "x", "gpu": "NVIDIA H100 80GB HBM3", "max_price": 2.5}),
    ("runpod", {"image": "x", "gpu": "NVIDIA H100 80GB HBM3", "max_price": 0.4, "interruptible": True}),
    ("lambda", {"instance_type": "gpu_1x_h100_pcie", "regions": "us-east-1", "ssh_key_names": "k", "max_price": 3}),
])
def test_a_price_cap_that_the_providers_create_cannot_enforce_is_refused_not_ignored(provider, spec):
    """RunPod's PodCreateInput and Lambda's launchInstance_request have no price field (the vendored documents): a
    max_price there would be silently ignored, so it is refused before anything is rented, saying what to do."""
    with pytest.raises(pr.SpecError) as err:
        pr.check_spec(provider, spec)
    text = str(err.value)
    assert text.startswith("%s: spec.max_price (rent_max_price) " % provider) and "cannot be enforced" in text
    assert "Drop max_price (rent_max_price)" in text
    assert ("rent on vast.ai" in text) if provider == "runpod" else ("cheaper spec.instance_type" in text)
    # the documents' create bodies indeed carry no price, which is why
    _problems, _schema, doc = request_problems("runpod", "POST", "/v1/pods", {})
    fields = set(doc["components"]["schemas"]["PodCreateInput"]["properties"])
    assert not {f for f in fields if "price" in f.lower() or "bid" in f.lower() or "cost" in f.lower()}, fields
    _problems, _schema, doc = request_problems("lambda", "POST", "/api/v1/instance-operations/launch", {})
    assert not [f for f in doc["components"]["schemas"]["launchInstance_request"]["properties"] if "price" in f]
    # without the cap both rent; vast.ai filters its offers by it
    assert pr.check_spec(provider, dict(spec, max_price=None))["max_price"] is None
    assert pr.check_spec("vastai", {"image": "x", "max_price": 2.5})["max_price"] == 2.5


# ssh's stderr (exit status 255) as OpenSSH 9.2p1 (Debian 12) printed it, captured against a throwaway sshd on
# 127.0.0.1:22999 (PubkeyAuthentication only, MaxAuthTries 2) with -o BatchMode=yes -o IdentitiesOnly=yes; the
# banner_timeout one against an unroutable address; the key paths are the capture's own
SSH_CAPTURES = {
    "wrong_key": "Warning: Permanently added '[127.0.0.1]:22999' (ED25519) to the list of known hosts.\n"
                 "root@127.0.0.1: Permission denied (publickey).\n",
    "missing_key": "Warning: Identity file /tmp/sshcap/nokey not accessible: No such file or directory.\n"
                   "root@127.0.0.1: Permission denied (publickey).\n",
    "key_bad_permissions": "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
                           "@         WARNING: UNPROTECTED PRIVATE KEY FILE!          @\n"
                           "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
                           "Permissions 0644 for 'badperm' are too open.\n"
                           "It is required that your private key files are NOT accessible by others.\n"
                           "This private key will be ignored.\n"
                           "Load key \"badperm\": bad permissions\n"
                           "root@127.0.0.1: Permission denied (publickey).\n",
    "key_bad_format": "Load key \"badformat\": error in libcrypto\nroot@127.0.0.1: Permission denied (publickey).\n",
    "key_with_passphrase": "root@127.0.0.1: Permission denied (publickey).\n",
    "wrong_user": "nosuchuser@127.0.0.1: Permission denied (publickey).\n",
    "too_many_keys": "Received disconnect from 127.0.0.1 port 22999:2: Too many authentication failures\n"
                     "Disconnected from 127.0.0.1 port 22999\n",
    "strict_unknown_host_key": "No ED25519 host key is known for [127.0.0.1]:22999 and you have requested strict "
                               "checking.\nHost key verification failed.\n",
    "changed_host_key": "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
                        "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n"
                        "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
                        "IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!\n"
                        "Someone could be eavesdropping on you right now (man-in-the-middle attack)!\n"
                        "It is also possible that a host key has just been changed.\n"
                        "The fingerprint for the ED25519 key sent by the remote host is\n"
                        "SHA256:vc6OLiz17BYYZiNmzDygmSUIEZ4HiOCmkYeXO2lDZNg.\n"
                        "Please contact your system administrator.\n"
                        "Add correct host key in /tmp/sshcap/kh3 to get rid of this message.\n"
                        "Offending ED25519 key in /tmp/sshcap/kh3:1\n"
                        "  remove with:\n"
                        "  ssh-keygen -f \"/tmp/sshcap/kh3\" -R \"[127.0.0.1]:22999\"\n"
                        "Host key for [127.0.0.1]:22999 has changed and you have requested strict checking.\n"
                        "Host key verification failed.\n",
    "refused": "ssh: connect to host 127.0.0.1 port 22998: Connection refused\n",
    "reset_before_banner": "kex_exchange_identification: read: Connection reset by peer\n"
                           "Connection reset by 127.0.0.1 port 22997\n",
    "reset_after_banner": "Connection reset by 127.0.0.1 port 22997\n",
    "banner_timeout": "Connection timed out during banner exchange\nConnection to 10.255.255.1 port 22 timed out\n",
}


@pytest.mark.parametrize("name, code", [
    ("wrong_key", "ssh_auth_failed"), ("missing_key", "ssh_auth_failed"), ("key_bad_permissions", "ssh_auth_failed"),
    ("key_bad_format", "ssh_auth_failed"), ("key_with_passphrase", "ssh_auth_failed"),
    ("wrong_user", "ssh_auth_failed"), ("too_many_keys", "ssh_auth_failed"),
    ("strict_unknown_host_key", "ssh_host_key_failed"), ("changed_host_key", "ssh_host_key_failed"),
    # the box's (or its provider's): its sshd refuses, resets or never greets
    ("refused", None), ("reset_before_banner", None), ("reset_after_banner", None), ("banner_timeout", None),
])
def test_an_ssh_failure_is_the_controllers_only_when_ssh_says_its_login_or_host_key_was_refused(name, code):
    assert pr.ssh_fault(SSH_CAPTURES[name]) == code


def test_a_probe_timeout_or_a_remote_permission_error_is_no_login_failure():
    assert pr.ssh_fault("timed out after 300s") is None  # rent_probe's own timeout of the probe's SSH execution
    assert pr.ssh_fault("/bin/sh: 1: /usr/bin/python3: Permission denied") is None  # the box's own file
    assert pr.ssh_fault("") is None and pr.ssh_fault(None) is None


def test_ssh_noise_is_left_out_of_the_text_and_the_decisive_line_kept():
    assert pr.ssh_text(SSH_CAPTURES["wrong_key"]) == "root@127.0.0.1: Permission denied (publickey)."
    bad = pr.ssh_text(SSH_CAPTURES["key_bad_permissions"])
    assert bad.startswith("WARNING: UNPROTECTED PRIVATE KEY FILE! Permissions 0644 for 'badperm' are too open.")
    assert "@" not in bad.split(" root@", maxsplit=1)[0]
    assert bad.endswith("Load key \"badperm\": bad permissions root@127.0.0.1: Permission denied (publickey).")
    assert pr.ssh_text(SSH_CAPTURES["changed_host_key"]).endswith("Host key verification failed.")
    assert len(pr.ssh_text("x" * 1000)) == 300


def unreachable(stderr):
    """rent_probe's result of a probe whose ssh exited 255 (module_result)."""
    return {"failed": True, "unreachable": True, "msg": "SSH failed: %s" % pr.ssh_text(stderr),
            "ssh_fault": pr.ssh_fault(stderr)}


def test_a_box_the_controller_could_not_log_in_to_is_unprobed_not_fail():
    verdict, finding = pr.judge(unreachable(SSH_CAPTURES["wrong_key"]))
    assert (verdict, finding) == ("UNPROBED", "ssh_auth_failed: root@127.0.0.1: Permission denied (publickey).")
    verdict, finding = pr.judge(unreachable(SSH_CAPTURES["strict_unknown_host_key"]))
    assert verdict == "UNPROBED" and finding.startswith("ssh_host_key_failed: No ED25519 host key is known")
    # the box's fault stays FAIL probe_failed, and so does a probe that ran past its timeout
    assert pr.judge(unreachable(SSH_CAPTURES["reset_before_banner"])) == (
        "FAIL", "probe_failed: SSH failed: kex_exchange_identification: read: Connection reset by peer "
        "Connection reset by 127.0.0.1 port 22997")
    assert pr.judge({"failed": True, "msg": "no module result (rc None): timed out after 300s"})[0] == "FAIL"


def box(name, finding, outcome="given back", verdict=None):
    return {"name": name, "id": name.rsplit("-", 1)[1], "finding": finding, "outcome": outcome,
            "verdict": verdict or ("UNPROBED" if finding and finding.startswith("ssh_") else "FAIL"),
            "ssh_command": "ssh -i /home/u/.ssh/id_ed25519 -p 22 root@127.0.170.20 true"}


def test_a_login_refused_stops_the_rent_and_says_what_to_check():
    boxes = [box("sweep-a-9000002", "ssh_auth_failed: root@127.0.170.20: Permission denied (publickey)."),
             box("sweep-a-9000003", "ssh_auth_failed: root@127.0.170.21: Permission denied (publickey).")]
    text = pr.stop_renting(boxes)
    assert text.startswith("ssh_auth_failed: the controller could not log in to 2 new box(es) over SSH "
                           "(root@127.0.170.20: Permission denied (publickey)).")
    assert "not the machines': no machine was recorded as bad, and no more boxes are rented" in text
    assert "Given back unprobed (this controller cannot use them as configured, and they bill): " \
           "sweep-a-9000002, sweep-a-9000003." in text
    assert "Try the login by hand: ssh -i /home/u/.ssh/id_ed25519 -p 22 root@127.0.170.20 true." in text
    for words in ("ansible_ssh_private_key_file", "ssh-agent", "the key the provider installs", "ansible_user"):
        assert words in text
    assert "NOT given back" not in text


def test_a_refused_host_key_stops_the_rent_and_a_box_not_given_back_is_named():
    boxes = [box("sweep-a-9000002", "ssh_host_key_failed: Host key verification failed.", outcome="not given back"),
             box("sweep-a-9000003", None, outcome="kept", verdict="PASS")]
    text = pr.stop_renting(boxes)
    assert text.startswith("ssh_host_key_failed: the controller's SSH settings refused the host key of 1 new box(es)")
    assert "NOT given back, and may still bill" in text and "sweep-a-9000002 (instance 9000002)" in text
    assert "rent_ssh_common_args" in text and "ssh-keygen -R" in text


def test_unfit_boxes_and_kept_boxes_do_not_stop_the_rent():
    assert pr.stop_renting([box("sweep-a-9000002", "throttle_active: HW slowdown"),
                            box("sweep-a-9000003", "probe_failed: its SSH port 127.0.170.3:22 did not answer within "
                                                   "300 s"),
                            box("sweep-a-9000004", None, outcome="kept", verdict="PASS")]) is None
    assert pr.stop_renting([]) is None and pr.stop_renting(None) is None
    assert pr.finding_code("ssh_auth_failed: x: y") == "ssh_auth_failed" and pr.finding_code(None) is None
