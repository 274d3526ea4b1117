"""The fake provider APIs held to the vendored OpenAPI documents (tests/fixtures/openapi): every odd state they can
serve, through every read and verb, conforms; an answer that drifts from a document is caught (the validator can
fail), and stop() fails the test that served it."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import urllib.error
import urllib.request

import pytest

PROVIDERS_DIR = pathlib.Path(__file__).resolve().parents[3] / "lab" / "providers"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, PROVIDERS_DIR / ("%s.py" % name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fake_api = _load("fake_api")
openapi_check = _load("openapi_check")
KEY = "CONTRACT-KEY"


def call(fake, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(fake.url.rsplit("/v1", 1)[0] + path, data=data, method=method,
                                     headers={"Authorization": "Bearer " + KEY, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def odd_fleet(provider):
    return [fake_api.odd(provider, name, index, "198.51.100.%d" % index, 40000 + index)
            for index, name in enumerate(fake_api.ODD_STATES[provider], start=1)]


READS = {
    "runpod": lambda r: [("GET", "/v1/pods"), ("GET", "/v1/pods/%s" % r["id"]), ("GET", "/v2/pods"),
                         ("GET", "/v2/pods/%s" % r["id"])],
    "vastai": lambda r: [("GET", "/api/v1/instances/?limit=25"), ("GET", "/api/v0/instances/%s/" % r["id"])],
    "lambda": lambda r: [("GET", "/api/v1/instances"), ("GET", "/api/v1/instances/%s" % r["id"])],
}
VERBS = {
    "runpod": lambda r: [("POST", "/v1/pods/%s/stop" % r["id"], {}), ("POST", "/v1/pods/%s/start" % r["id"], {}),
                         ("POST", "/v2/pods/%s/action" % r["id"], {"action": "restart"}),
                         ("DELETE", "/v1/pods/%s" % r["id"], None), ("GET", "/v1/pods/%s" % r["id"], None)],
    "vastai": lambda r: [("PUT", "/api/v0/instances/%s/" % r["id"], {"state": "stopped"}),
                         ("PUT", "/api/v0/instances/reboot/%s/" % r["id"], {}),
                         ("DELETE", "/api/v0/instances/%s/" % r["id"], None),
                         ("GET", "/api/v0/instances/%s/" % r["id"], None)],
    "lambda": lambda r: [("POST", "/api/v1/instance-operations/restart", {"instance_ids": [r["id"]]}),
                         ("POST", "/api/v1/instance-operations/terminate", {"instance_ids": [r["id"]]}),
                         ("GET", "/api/v1/instances/%s" % r["id"], None),
                         ("GET", "/api/v1/instances/%s" % r["id"], None)],
}


@pytest.mark.parametrize("provider", sorted(READS))
def test_every_odd_state_through_every_read_and_verb_conforms_to_the_document(provider):
    records = odd_fleet(provider)
    fake = fake_api.FakeAPI(provider, KEY, records).start()
    try:
        for record in list(records):
            for method, path in READS[provider](record):
                assert call(fake, method, path)[0] == 200, (method, path)
            for method, path, body in VERBS[provider](record):
                call(fake, method, path, body)
    finally:
        fake.stop()  # raises on any violation
    assert fake.violations == [] and len(fake.api_requests()) > 20


def test_vast_unknown_id_is_200_null_and_a_stop_is_stopped():
    fake = fake_api.FakeAPI("vastai", KEY, fake_api.records_for("vastai", [("198.51.100.1", 40001)])).start()
    try:
        assert call(fake, "PUT", "/api/v0/instances/9000001/", {"state": "stopped"})[0] == 200
        assert fake.find("9000001")["actual_status"] == "stopped"
        assert call(fake, "GET", "/api/v0/instances/424242/") == (200, b'{"instances": null}')
    finally:
        fake.stop()


def test_runpod_delete_is_204_with_no_body_and_lambda_terminate_passes_through_terminating():
    fake = fake_api.FakeAPI("runpod", KEY, fake_api.records_for("runpod", [("198.51.100.1", 40001)])).start()
    try:
        assert call(fake, "DELETE", "/v1/pods/fakepod0001") == (204, b"")
    finally:
        fake.stop()
    fake = fake_api.FakeAPI("lambda", KEY, fake_api.records_for("lambda", [("198.51.100.1", 22)])).start()
    try:
        pid = fake.records[0]["id"]
        call(fake, "POST", "/api/v1/instance-operations/terminate", {"instance_ids": [pid]})
        seen = [json.loads(call(fake, "GET", "/api/v1/instances/%s" % pid)[1])["data"]["status"] for _read in range(3)]
        assert seen == ["terminating", "terminated", "terminated"]
    finally:
        fake.stop()


@pytest.mark.parametrize("provider, method, path, status, body, words", [
    ("runpod", "GET", "/v1/pods/p1", 200, {"id": "p1", "desiredStatus": "STOPPED"}, "is not one of"),
    ("runpod", "DELETE", "/v1/pods/p1", 200, {}, "documents no 200 answer"),
    ("runpod", "GET", "/v2/pods/p1", 200, {"id": "p1"}, "is a required property"),
    ("vastai", "GET", "/api/v0/instances/1/", 200, {"instances": {"id": 1, "ports": [22]}}, "is not valid"),
    ("vastai", "GET", "/api/v1/instances/", 200, [1, 2], "is not of type 'object'"),
    ("lambda", "GET", "/api/v1/instances/x", 200, {"data": {"id": "x", "status": "sleeping",
                                                            "ssh_key_names": [], "file_system_names": []}},
     "is not one of"),
])
def test_an_answer_that_drifts_from_the_document_is_caught(provider, method, path, status, body, words):
    problems = openapi_check.OpenAPICheck(provider).answer(method, path, status, body, json.dumps(body).encode())
    assert problems and any(words in problem for problem in problems), problems


def test_lambda_answers_are_held_to_lambdas_1_8_3_document():
    """Lambda's answers are validated against its 1.8.3 document (lambda-1.8.3.json), which lists preempted and
    requires actions; the 1.5.3 document holds the request bodies only."""
    check = openapi_check.OpenAPICheck("lambda")
    record = fake_api.lambda_instance(1, "198.51.100.1", status="preempted")
    assert check.answer("GET", "/api/v1/instances/x", 200, {"data": record}) == []
    record.pop("actions")
    problems = check.answer("GET", "/api/v1/instances/x", 200, {"data": record})
    assert any("'actions' is a required property" in problem for problem in problems), problems
    assert check.docs[check.answers_from]["info"]["version"] == "1.8.3"
    # a booting instance has no address yet: 1.8.3 leaves ip out (a string when present), never null
    booting = fake_api.lambda_instance(2, None, status="booting")
    assert check.answer("GET", "/api/v1/instances/x", 200, {"data": booting}) == [] and "ip" not in booting


def test_stop_fails_the_test_that_served_a_drifted_answer():
    fake = fake_api.FakeAPI("vastai", KEY, fake_api.records_for("vastai", [("198.51.100.1", 40001)])).start()
    fake.records[0]["ports"] = [22]  # the document's type, but not what vast's CLI reads: overrides.json
    call(fake, "GET", "/api/v0/instances/9000001/")
    with pytest.raises(AssertionError, match="does not allow"):
        fake.stop()
