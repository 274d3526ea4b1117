"""The providers' HTTP client against the loopback fake: auth, retries, bounded time, bad bodies, a scrubbed key."""

from __future__ import annotations

import importlib.util
import pathlib
import socket

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_http import (
    ProviderAPIError, ProviderHTTP, resolve_api_key, scrub)

_FAKE = pathlib.Path(__file__).resolve().parents[3] / "lab" / "providers" / "fake_api.py"
_spec = importlib.util.spec_from_file_location("fake_api", _FAKE)
fake_api = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_api)

KEY = "rpa_TESTKEY_0123456789abcdef"


@pytest.fixture
def fake():
    server = fake_api.FakeAPI("runpod", KEY, fake_api.records_for("runpod", [("127.0.0.1", 2222)])).start()
    yield server
    server.stop()


class Clock:
    """A fake clock that sleeping advances: waits are recorded, no test really sleeps."""

    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds

    def __call__(self):
        return self.now


def client(url, key=KEY, clock=None, **kw):
    clock = clock or Clock()
    return ProviderHTTP("runpod", url, key, "RUNPOD_API_KEY", sleep=clock.sleep, clock=clock, **kw)


def test_get_json_sends_bearer_key(fake):
    assert client(fake.url).get_json("/pods")[0]["id"] == "fakepod0001"
    assert [r["auth_ok"] for r in fake.api_requests()] == [True]


def test_resolve_key_option_then_env_then_clear_error():
    assert resolve_api_key("opt", "RUNPOD_API_KEY", {"RUNPOD_API_KEY": "env"}, "runpod") == "opt"
    assert resolve_api_key(None, "RUNPOD_API_KEY", {"RUNPOD_API_KEY": "env"}, "runpod") == "env"
    with pytest.raises(ProviderAPIError, match="Set the environment variable RUNPOD_API_KEY"):
        resolve_api_key("", "RUNPOD_API_KEY", {}, "runpod")


def test_scrub_plain_and_quoted():
    assert scrub("a k+y/1 b k%2By%2F1 c k%2By%2F1", "k+y/1") == "a <redacted> b <redacted> c <redacted>"


@pytest.mark.parametrize("status", [401, 403])
def test_refused_key_names_the_env_var_and_is_not_retried(fake, status):
    fake.inject({"status": status})
    clock = Clock()
    with pytest.raises(ProviderAPIError) as err:
        client(fake.url, clock=clock).get_json("/pods")
    assert err.value.kind == "auth" and "RUNPOD_API_KEY" in str(err.value) and KEY not in str(err.value)
    assert clock.sleeps == [] and len(fake.api_requests()) == 1


def test_wrong_key_is_refused(fake):
    with pytest.raises(ProviderAPIError, match="HTTP 401.*RUNPOD_API_KEY"):
        client(fake.url, key="wrong").get_json("/pods")


def test_429_and_5xx_are_retried_with_doubling_backoff(fake):
    fake.inject({"status": 429}, {"status": 500}, {"status": 503})
    clock = Clock()
    assert client(fake.url, clock=clock).get_json("/pods")
    assert clock.sleeps == [1.0, 2.0, 4.0]
    assert len(fake.api_requests()) == 4


def test_retry_after_is_honoured_and_capped(fake):
    fake.inject({"status": 429, "retry_after": 3}, {"status": 429, "retry_after": 999})
    clock = Clock()
    assert client(fake.url, clock=clock).get_json("/pods")
    assert clock.sleeps == [3.0, 16.0]


def test_retries_stop_within_the_budget(fake):
    fake.inject(*[{"status": 502}] * 50)
    clock = Clock()
    with pytest.raises(ProviderAPIError) as err:
        client(fake.url, clock=clock, retry_budget=10).get_json("/pods")
    assert err.value.kind == "retries_exhausted" and "HTTP 502" in str(err.value)
    assert clock.sleeps == [1.0, 2.0, 4.0] and sum(clock.sleeps) <= 10
    assert len(fake.api_requests()) == 4


def test_other_4xx_fails_at_once(fake):
    with pytest.raises(ProviderAPIError, match="HTTP 404"):
        client(fake.url).get_json("/nope")


def test_truncated_body_is_a_clear_error(fake):
    fake.inject({"truncate": True})
    with pytest.raises(ProviderAPIError) as err:
        client(fake.url).get_json("/pods")
    assert err.value.kind == "truncated" and "truncated" in str(err.value)


def test_malformed_body_is_a_clear_error(fake):
    fake.inject({"malformed": True})
    with pytest.raises(ProviderAPIError) as err:
        client(fake.url).get_json("/pods")
    assert err.value.kind == "malformed" and "not JSON" in str(err.value)


def test_body_over_the_size_bound_is_refused(fake):
    with pytest.raises(ProviderAPIError) as err:
        client(fake.url, max_bytes=100).get_json("/pods")
    assert err.value.kind == "too_large"


def test_slow_answer_times_out_and_is_retried(fake):
    fake.inject({"slow": 1.5})
    clock = Clock()
    assert client(fake.url, clock=clock, timeout=0.3).get_json("/pods")
    assert clock.sleeps == [1.0] and len(fake.api_requests()) == 2


def test_unreachable_api_fails_within_budget():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    clock = Clock()
    with pytest.raises(ProviderAPIError, match="cannot reach"):
        client("http://127.0.0.1:%d/v1" % port, clock=clock, retry_budget=5).get_json("/pods")
    assert sum(clock.sleeps) <= 5


def test_key_in_a_url_is_scrubbed_from_messages(fake):
    # Someone puts the key in api_url: the 404 message shows the URL, never the key.
    with pytest.raises(ProviderAPIError) as err:
        client(fake.url + "/" + KEY).get_json("/pods")
    assert KEY not in str(err.value) and "<redacted>" in str(err.value)


def test_api_url_must_be_http():
    with pytest.raises(ProviderAPIError, match="http"):
        client("file:///etc/passwd")


# --- methods with a body, the bare-token scheme (AutoDL), AutoDL's 200-with-an-error-code ------------------------

def test_post_with_a_json_body_and_the_bare_token_scheme():
    server = fake_api.FakeAPI("autodl", KEY, fake_api.records_for("autodl", [("127.0.0.1", 2222)])).start()
    try:
        http = ProviderHTTP("autodl", server.url, KEY, "AUTODL_TOKEN", auth_scheme=None)
        body = http.request_json("POST", "/api/v1/dev/instance/pro/list", body={"page_index": 1, "page_size": 10})
        assert body["code"] == "Success" and body["data"]["list"][0]["uuid"] == "pro-fake0000001"
        assert "_snapshot" not in body["data"]["list"][0]
        (req,) = server.api_requests()
        assert req["method"] == "POST" and req["auth_ok"] and req["body"] == {"page_index": 1, "page_size": 10}
        bearer = ProviderHTTP("autodl", server.url, KEY, "AUTODL_TOKEN", retry_budget=0)
        with pytest.raises(ProviderAPIError, match="AUTODL_TOKEN"):  # "Bearer <token>" is not what AutoDL takes
            bearer.request_json("POST", "/api/v1/dev/instance/pro/list", body={})
    finally:
        server.stop()


def test_empty_answer_to_a_verb_is_none():
    server = fake_api.FakeAPI("runpod", KEY, fake_api.records_for("runpod", [("127.0.0.1", 2222)])).start()
    try:
        server.answer = lambda *args: (200, None)
        assert client(server.url).request_json("POST", "/pods/x/stop") is None
    finally:
        server.stop()


@pytest.mark.parametrize("body,words", [
    ({"code": "Success", "msg": "", "data": {"list": []}}, None),
    ({"code": "InstanceNotShutdown", "msg": "请先关机"}, "answered error code InstanceNotShutdown (HTTP 200): 请先关机."),
    ({"code": "AuthorizeFailed", "msg": "bad"}, "Set the environment variable AUTODL_TOKEN"),
    ([1, 2], "not AutoDL's {code, msg, data} object"),
    ({"data": {}}, "not AutoDL's {code, msg, data} object"),
])
def test_autodl_data(body, words):
    from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_http import autodl_data
    if words is None:
        assert autodl_data(body, "POST list") == {"list": []}
    else:
        with pytest.raises(ProviderAPIError) as err:
            autodl_data(body, "POST list")
        assert words in str(err.value)
