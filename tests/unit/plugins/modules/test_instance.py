"""The instance module against the loopback fakes of the providers' APIs: verbs, idempotence, check mode, waits,
clear refusals, and a key that never shows."""

from __future__ import annotations

import json

import pytest

from ansible_collections.remote_gpu.trainer.plugins.modules import instance

from provider_fakes import FIRST_ID, fake_api, serve_fixture

KEY = "LIFECYCLE-KEY-0f1e2d-never-shown"
serve = serve_fixture(KEY)


def args(fake, state, pid=None, **kw):
    base = {"provider": fake.provider, "id": pid or FIRST_ID[fake.provider], "state": state, "api_key": KEY,
            "api_url": fake.url, "poll_interval": 0.05, "timeout": 5, "retry_budget": 2}
    base.update(kw)
    return base


def verbs(fake):
    return [(r["method"], r["path"]) for r in fake.api_requests() if r["method"] != "GET"]


@pytest.mark.parametrize("provider,verb", [
    ("runpod", ("POST", "/v1/pods/fakepod0001/stop")),
    ("vastai", ("PUT", "/api/v0/instances/9000001/")),
    ("autodl", ("POST", "/api/v1/dev/instance/pro/power_off")),
])
def test_stop_then_stop_again_changes_nothing(module_runner, serve, provider, verb):
    fake = serve(provider)
    hits = []
    fake.on_lifecycle = lambda record, name, prov: hits.append((prov, name))
    failed, result = module_runner(instance, args(fake, "stopped"))
    assert not failed and result["changed"] and result["current"] == "stopped" and result["waited"], result
    assert verbs(fake) == [verb] and hits == [(provider, "stop")]
    failed, again = module_runner(instance, args(fake, "stopped"))
    assert not failed and again["changed"] is False and again["verb"] is None
    assert verbs(fake) == [verb]  # no second call
    failed, started = module_runner(instance, args(fake, "running"))
    assert not failed and started["changed"] and started["current"] == "running"
    assert hits == [(provider, "stop"), (provider, "start")]


@pytest.mark.parametrize("provider", ["runpod", "vastai", "lambda"])
def test_terminate_and_terminate_again(module_runner, serve, provider):
    fake = serve(provider, count=2)
    failed, result = module_runner(instance, args(fake, "absent"))
    assert not failed and result["changed"] and result["current"] == "absent", result
    failed, again = module_runner(instance, args(fake, "absent"))
    assert not failed and again["changed"] is False
    assert len(verbs(fake)) == 1
    assert fake.find(FIRST_ID[provider]) is None or fake.find(FIRST_ID[provider])["status"] == "terminated"


def test_lambda_stop_fails_clearly_and_calls_nothing(module_runner, serve):
    fake = serve("lambda")
    failed, result = module_runner(instance, args(fake, "stopped"))
    assert failed and "Lambda Cloud has no stop" in result["msg"] and verbs(fake) == []


def test_autodl_release_of_a_running_instance_fails_and_after_power_off_works(module_runner, serve):
    fake = serve("autodl")
    failed, result = module_runner(instance, args(fake, "absent"))
    assert failed and "releases only a powered-off instance" in result["msg"] and verbs(fake) == []
    assert not module_runner(instance, args(fake, "stopped"))[0]
    failed, result = module_runner(instance, args(fake, "absent"))
    assert not failed and result["changed"] and result["verb"] == "release" and fake.find(FIRST_ID["autodl"]) is None


def test_autodl_200_with_an_error_code_fails_with_the_code(module_runner, serve):
    fake = serve("autodl")
    fake.inject({}, {"code": "InsufficientBalance", "msg": "余额不足"})  # the status read passes; the verb fails
    failed, result = module_runner(instance, args(fake, "stopped"))
    assert failed and "error code InsufficientBalance (HTTP 200)" in result["msg"]


def test_check_mode_calls_no_verb(module_runner, serve):
    fake = serve("runpod")
    failed, result = module_runner(instance, dict(args(fake, "stopped"), _ansible_check_mode=True))
    assert not failed and result["changed"] and result["verb"] == "stop"
    assert result["request"] == "POST /pods/fakepod0001/stop" and verbs(fake) == []
    assert fake.find("fakepod0001")["desiredStatus"] == "RUNNING"


def test_wait_times_out_when_the_provider_never_reports_the_state(module_runner, serve):
    fake = serve("runpod")
    real = fake.answer

    def stuck(path, query, method="GET", body=None):
        status, answer = real(path, query, method, body)
        if method == "POST":
            pod = fake.find("fakepod0001")
            pod["desiredStatus"] = pod["_observed"] = "RUNNING"  # the stop never lands
        return status, answer

    fake.answer = stuck
    failed, result = module_runner(instance, args(fake, "stopped", timeout=1))
    assert failed and "after 1 s the provider still reports running" in result["msg"] and result["changed"]


def test_wait_false_returns_after_the_verb(module_runner, serve):
    fake = serve("lambda")
    failed, result = module_runner(instance, args(fake, "absent", wait=False))
    assert not failed and result["changed"] and result["waited"] is False
    assert [r["method"] for r in fake.api_requests()] == ["GET", "POST"]


@pytest.mark.parametrize("provider", sorted(FIRST_ID))
def test_unknown_instance_is_a_clear_error(module_runner, serve, provider):
    fake = serve(provider)
    failed, result = module_runner(instance, args(fake, "stopped" if provider != "lambda" else "absent", pid="nope"))
    if provider == "lambda":  # terminating what does not exist is already done
        assert not failed and result["changed"] is False
    else:
        assert failed and "does not exist" in result["msg"]


def test_no_key_names_the_env_var(module_runner, serve, monkeypatch):
    fake = serve("vastai")
    monkeypatch.delenv("VAST_API_KEY", raising=False)
    failed, result = module_runner(instance, dict(args(fake, "stopped"), api_key=None))
    assert failed and "Set the environment variable VAST_API_KEY" in result["msg"] and fake.api_requests() == []
    assert result["error_kind"] == "no_key"  # the one key lookup of the providers (provider_http.resolve_api_key)


def test_key_from_the_env_var_and_wrong_key_never_shown(module_runner, serve, monkeypatch):
    fake = serve("runpod")
    monkeypatch.setenv("RUNPOD_API_KEY", KEY)
    failed, result = module_runner(instance, dict(args(fake, "stopped"), api_key=None))
    assert not failed and result["changed"]
    wrong = "WRONG-KEY-abcdef-never-shown"
    failed, result = module_runner(instance, dict(args(fake, "running"), api_key=wrong))
    assert failed and "HTTP 401" in result["msg"] and "RUNPOD_API_KEY" in result["msg"]
    assert wrong not in json.dumps(result) and KEY not in json.dumps(result)


@pytest.mark.parametrize("bad", [{"provider": "aws"}, {"state": "paused"}, {"id": ""}, {"timeout": "soon"}])
def test_bad_input_is_a_message_not_a_traceback(module_runner, serve, bad):
    fake = serve("runpod")
    failed, result = module_runner(instance, dict(args(fake, "stopped"), **bad))
    assert failed and "Traceback" not in result["msg"] and result["msg"]


# --- found: false, and the instance verified before the verb (issue 28) -----------------------------------------

@pytest.mark.parametrize("provider", ["runpod", "vastai", "lambda", "autodl"])
def test_absent_of_an_unknown_id_is_idempotent_and_says_not_found(module_runner, serve, provider):
    fake = serve(provider)
    failed, result = module_runner(instance, args(fake, "absent", pid="stale0042"))
    assert not failed and result["changed"] is False and result["found"] is False, result
    assert verbs(fake) == []
    failed, known = module_runner(instance, args(fake, "running"))
    assert not failed and known["found"] is True


def box(pid, source="/proc/1/environ"):
    return {"changed": False, "id": pid, "variable": "RUNPOD_POD_ID", "has_own_id": True, "source": source,
            "error": None, "conflict": False}


def test_an_unknown_id_with_a_check_is_never_stopped(module_runner, serve):
    fake = serve("runpod")
    failed, result = module_runner(instance, args(fake, "absent", pid="stale0042", identity=box("stale0042"),
                                                  host="lab-01"))
    assert failed and result["error_kind"] == "instance_not_found" and result["found"] is False, result
    assert "console" in result["msg"] and "runpod_pod_id" in result["msg"] and "lab-01" in result["msg"]
    assert verbs(fake) == [] and result["changed"] is False


def test_the_box_says_it_is_another_pod_then_nothing_is_requested(module_runner, serve):
    fake = serve("runpod", count=2)
    failed, result = module_runner(instance, args(fake, "absent", pid="fakepod0002", identity=box("fakepod0001"),
                                                  expect_address="198.51.100.2", expect_port=40002))
    assert failed and result["error_kind"] == "identity_mismatch", result
    assert result["identity"] == {"by": "id", "expected": "fakepod0001", "source": "/proc/1/environ",
                                  "observed": "fakepod0002", "match": False}
    assert fake.api_requests() == []  # the other pod is not even read
    assert fake.find("fakepod0002")["desiredStatus"] == "RUNNING"


def test_the_box_id_matches_then_the_verb_runs(module_runner, serve):
    fake = serve("runpod", count=2)
    failed, result = module_runner(instance, args(fake, "stopped", identity=box("fakepod0001")))
    assert not failed and result["changed"] and result["identity"]["match"] is True, result
    assert verbs(fake) == [("POST", "/v1/pods/fakepod0001/stop")]


@pytest.mark.parametrize("provider,pid", [("lambda", FIRST_ID["lambda"]), ("autodl", FIRST_ID["autodl"]),
                                          ("runpod", "fakepod0001"), ("vastai", "9000001")])
def test_without_a_box_id_the_record_must_point_at_the_host(module_runner, serve, provider, pid):
    fake = serve(provider, count=2)
    no_id = {"changed": False, "id": None, "has_own_id": provider in ("runpod", "vastai"), "error": None,
             "msg": "no id"}
    port = 22 if provider == "lambda" else 40001
    state = "absent" if provider == "lambda" else "stopped"
    failed, result = module_runner(instance, args(fake, state, pid=pid, identity=no_id,
                                                  expect_address="198.51.100.2", expect_port=40002 if provider !=
                                                  "lambda" else 22))
    assert failed and result["error_kind"] == "address_mismatch", result
    assert result["identity"]["by"] == "address" and result["identity"]["match"] is False
    assert result["identity"]["observed"] == "198.51.100.1:%d" % port
    assert verbs(fake) == []
    failed, result = module_runner(instance, args(fake, state, pid=pid, identity=no_id,
                                                  expect_address="198.51.100.1", expect_port=port))
    assert not failed and result["changed"] and result["identity"]["match"] is True, result
    assert len(verbs(fake)) == 1


def test_a_failed_identity_read_calls_nothing(module_runner, serve):
    fake = serve("runpod")
    failed, result = module_runner(instance, args(fake, "absent", identity={"failed": True, "msg": "disagree"}))
    assert failed and result["error_kind"] == "identity_unreadable"
    assert fake.api_requests() == []


def serve_odd(serve, provider, name):
    fake = serve(provider)
    fake.records = [fake_api.odd(provider, name, 1, "198.51.100.1", 40001)]
    return fake


def test_stop_a_frozen_vast_instance_acts_at_once_and_says_what_frozen_meant(module_runner, serve):
    fake = serve_odd(serve, "vastai", "frozen")
    failed, result = module_runner(instance, args(fake, "stopped", timeout=600))
    assert not failed and result["changed"] and result["current"] == "stopped", result
    assert result["previous"] == "unhealthy" and "GPU still bills" in result["message"]
    assert verbs(fake) == [("PUT", "/api/v0/instances/9000001/")]
    # read, stop, one read that finds it stopped: nothing waited while it was frozen
    assert [r["method"] for r in fake.api_requests()] == ["GET", "PUT", "GET"]


@pytest.mark.parametrize("provider, name, state, kind", [
    ("vastai", "unknown", "stopped", "instance_unhealthy"),
    ("vastai", "offline", "running", "instance_unhealthy"),
    ("vastai", "outbid", "running", "instance_preempted"),
    ("lambda", "preempted", "running", "instance_preempted"),
    ("runpod", "error", "running", "instance_unhealthy"),
])
def test_a_state_that_will_not_change_fails_at_once_never_after_the_timeout(module_runner, serve, provider, name,
                                                                            state, kind):
    fake = serve_odd(serve, provider, name)
    failed, result = module_runner(instance, args(fake, state, timeout=600))
    assert failed and result["error_kind"] == kind, result
    assert "does not change by itself" in result["msg"]
    assert "state=absent" in result["msg"] or "launch a new instance" in result["msg"]  # what to do
    assert verbs(fake) == []  # nothing was called
    # one read of the instance (RunPod: v1 and v2), no poll: a wait would read it again every poll_interval
    assert len(fake.api_requests()) == (2 if provider == "runpod" else 1), fake.api_requests()


def test_runpod_delete_is_204_and_the_pod_is_then_absent(module_runner, serve):
    fake = serve("runpod")
    failed, result = module_runner(instance, args(fake, "absent"))
    assert not failed and result["changed"] and result["current"] == "absent", result
    assert verbs(fake) == [("DELETE", "/v1/pods/fakepod0001")]


def test_runpod_state_comes_from_the_observed_v2_status(module_runner, serve):
    fake = serve_odd(serve, "runpod", "error")  # desired RUNNING, observed ERROR
    failed, result = module_runner(instance, args(fake, "stopped"))
    assert not failed and result["previous"] == "unhealthy" and result["current"] == "stopped", result
    assert any(r["path"] == "/v2/pods/fakepod0001" for r in fake.api_requests())


def test_runpod_verb_not_in_the_pods_own_actions_is_refused_at_once(module_runner, serve):
    fake = serve_odd(serve, "runpod", "crashed")  # observed EXITED: RunPod lists start and terminate only
    failed, result = module_runner(instance, args(fake, "stopped", timeout=600))
    assert failed and result["error_kind"] == "action_not_available", result
    assert "start, terminate" in result["msg"] and verbs(fake) == []


def test_lambda_terminate_waits_through_terminating(module_runner, serve):
    fake = serve("lambda")
    failed, result = module_runner(instance, args(fake, "absent"))
    assert not failed and result["current"] == "absent" and result["waited"], result
    statuses = [r for r in fake.api_requests() if r["method"] == "GET"]
    assert len(statuses) >= 3  # before, terminating, terminated


@pytest.mark.parametrize("provider, name, verb", [
    ("vastai", "exited", ("PUT", "/api/v0/instances/reboot/9000001/")),
    ("lambda", "unhealthy", ("POST", "/api/v1/instance-operations/restart")),
    ("runpod", "error", ("POST", "/v2/pods/fakepod0001/action")),
])
def test_restarted_uses_the_providers_restart_verb(module_runner, serve, provider, name, verb):
    fake = serve_odd(serve, provider, name)
    failed, result = module_runner(instance, args(fake, "restarted"))
    assert not failed and result["changed"] and result["current"] == "running", result
    assert verbs(fake) == [verb]


def test_autodl_stopped_counts_as_off_so_a_release_goes_ahead(module_runner, serve):
    fake = serve("autodl")
    fake.records[0]["status"] = "stopped"
    failed, result = module_runner(instance, args(fake, "absent"))
    assert not failed and result["changed"] and result["previous"] == "stopped", result
    assert verbs(fake) == [("POST", "/api/v1/dev/instance/pro/release")]


# --- state=present: rent through the API (the fake runs a created instance at once without a lab provisioner) ---

VAST_SPEC = {"gpu": "H100_SXM", "gpu_count": 1, "max_price": 2.5, "image": "pytorch/pytorch:latest", "disk_gb": 64}


def rent_args(fake, **kw):
    base = {"provider": fake.provider, "state": "present", "name": "sweep-a", "count": 2, "api_key": KEY,
            "api_url": fake.url, "poll_interval": 0.05, "timeout": 5, "retry_budget": 2}
    base.update(kw)
    return base


def vast_offers():
    return [fake_api.vastai_offer(i, "h100-idle", price=p) for i, p in ((1, 2.3), (2, 2.1), (3, 2.9), (4, 2.2))]


def test_present_rents_the_cheapest_fitting_offers_and_a_second_run_creates_nothing(module_runner):
    fake = fake_api.FakeAPI("vastai", KEY, offers=vast_offers()).start()
    try:
        failed, result = module_runner(instance, rent_args(fake, spec=VAST_SPEC, exclude_machines=["20004"]))
        assert not failed and result["changed"], result
        asks = [(r["path"], r["body"]) for r in fake.api_requests() if r["method"] == "PUT"]
        assert [p for p, _b in asks] == ["/api/v0/asks/7100002/", "/api/v0/asks/7100001/"]  # cheapest first, not 4
        assert asks[0][1] == {"image": "pytorch/pytorch:latest", "label": "sweep-a", "runtype": "ssh",
                              "target_state": "running", "disk": 64.0}
        assert [o["id"] for o in result["excluded"]["max_price"]] == [7100003]
        assert [o["id"] for o in result["excluded"]["bad_machine"]] == [7100004]
        assert [i["machine_id"] for i in result["instances"]] == ["20002", "20001"]
        hv = result["instances"][0]["hostvars"]
        assert (hv["ansible_host"], hv["ansible_port"], hv["vastai_instance_id"]) == ("127.0.0.1", 22,
                                                                                      result["created"][0])
        assert hv["provider_api_url"] == fake.url and KEY not in json.dumps(result)
        before = len(fake.api_requests())
        failed, again = module_runner(instance, rent_args(fake, spec=VAST_SPEC))
        assert not failed and again["changed"] is False and again["created"] == [], again
        assert sorted(again["existing"]) == sorted(result["created"])
        assert [r["method"] for r in fake.api_requests()[before:] if r["method"] != "GET"] == []
    finally:
        fake.stop()


def test_present_in_check_mode_and_under_a_price_cap_creates_nothing(module_runner):
    fake = fake_api.FakeAPI("vastai", KEY, offers=vast_offers()).start()
    try:
        failed, result = module_runner(instance, dict(rent_args(fake, spec=VAST_SPEC), _ansible_check_mode=True))
        assert not failed and result["changed"] and [o["id"] for o in result["offers"]] == [7100002, 7100004]
        failed, capped = module_runner(instance, rent_args(fake, spec=dict(VAST_SPEC, max_price=0.5)))
        assert failed and capped["error_kind"] == "no_offer", capped
        assert "max_price 0.5 $/h excluded 4 offer(s)" in capped["msg"] and "Nothing was rented" in capped["msg"]
        assert [r["method"] for r in fake.api_requests()] == ["GET", "POST", "GET", "POST"]  # list, search; no ask
    finally:
        fake.stop()


def test_present_on_runpod_posts_a_pod_and_on_lambda_launches(module_runner):
    pods = fake_api.FakeAPI("runpod", KEY).start()
    lam = fake_api.FakeAPI("lambda", KEY).start()
    try:
        failed, result = module_runner(instance, rent_args(pods, count=1, spec={
            "gpu": "NVIDIA H100 80GB HBM3", "image": "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04",
            "disk_gb": 50, "public_key": "ssh-ed25519 AAAA me"}))
        assert not failed and result["created"] == ["fakepod0001"], result
        (post,) = [r for r in pods.api_requests() if r["method"] == "POST"]
        assert post["path"] == "/v1/pods" and post["body"]["ports"] == ["22/tcp"] and post["body"]["name"] == "sweep-a"
        assert result["instances"][0]["hostvars"]["runpod_pod_id"] == "fakepod0001"
        failed, result = module_runner(instance, rent_args(lam, count=1, spec={
            "instance_type": "gpu_1x_h100_pcie", "regions": "us-east-1", "ssh_key_names": "laptop"}))
        assert not failed and len(result["created"]) == 1, result
        (post,) = [r for r in lam.api_requests() if r["method"] == "POST"]
        assert post["path"] == "/api/v1/instance-operations/launch" and post["body"]["ssh_key_names"] == ["laptop"]
    finally:
        pods.stop()
        lam.stop()


@pytest.mark.parametrize("kw, words", [
    ({"spec": {"gpu": "H100_SXM"}}, "spec.image is required"),
    ({"provider": "autodl", "spec": {}}, "state=present is not supported"),
])
def test_present_refuses_a_spec_it_cannot_rent(module_runner, kw, words):
    fake = fake_api.FakeAPI("vastai", KEY, offers=vast_offers()).start()
    try:
        failed, result = module_runner(instance, dict(rent_args(fake), **kw))
        assert failed and words in result["msg"] and fake.api_requests() == [], result
    finally:
        fake.stop()
