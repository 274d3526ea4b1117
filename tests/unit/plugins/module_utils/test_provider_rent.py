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
