"""The notify action's secret reading and its run() without a network: no event, bad input, check mode."""

from __future__ import annotations

import os

import pytest

from ansible_collections.remote_gpu.trainer.plugins.action import notify
from ansible_collections.remote_gpu.trainer.plugins.action.notify import ActionModule, SinkError, read_secret

from controller_actions import run_action


def test_secret_from_env_or_file(tmp_path):
    assert read_secret({"url_env": "U"}, "url", {"U": " http://h/x \n"}) == "http://h/x"
    path = tmp_path / "url"
    path.write_text("http://h/y\n")
    assert read_secret({"url_file": str(path)}, "url", {}) == "http://h/y"
    assert read_secret({}, "secret", {}) is None


@pytest.mark.parametrize("sink, words", [
    ({"url_env": "NOPE"}, ["NOPE", "not set"]),
    ({"url_env": "EMPTY"}, ["EMPTY", "empty"]),
    ({"url_file": "/nonexistent/url"}, ["/nonexistent/url", "No such file"]),
])
def test_unreadable_secret_names_the_variable_or_path(sink, words):
    with pytest.raises(SinkError) as exc:
        read_secret(sink, "url", {"EMPTY": "  "})
    assert all(word in str(exc.value) for word in words)


def test_a_fifo_or_directory_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path):
        with pytest.raises(SinkError, match="is not a regular file"):
            read_secret({"password_file": str(path)}, "password", {})


def test_an_oversized_or_empty_file_is_refused(tmp_path):
    big, empty = tmp_path / "big", tmp_path / "empty"
    big.write_bytes(b"x" * (notify.SECRET_FILE_LIMIT + 1))
    empty.write_text("\n")
    with pytest.raises(SinkError, match="larger than"):
        read_secret({"secret_file": str(big)}, "secret", {})
    with pytest.raises(SinkError, match="is empty"):
        read_secret({"secret_file": str(empty)}, "secret", {})


def test_a_url_that_is_not_http_is_refused_without_quoting_it():
    with pytest.raises(SinkError) as exc:
        notify.check_url("file:///etc/passwd?token=s3cr3t", {"url_env": "U"})
    assert "U" in str(exc.value) and "s3cr3t" not in str(exc.value)


def test_no_event_sends_nothing():
    result = run_action(ActionModule, {"events": [], "sinks": [{"type": "slack", "url_env": "NOT_READ"}]})
    assert result["sent"] == 0 and result["failures"] == [] and result["messages"] == []
    assert not result.get("failed") and result["changed"] is False and result["msg"] == "no event to send"


def test_check_mode_reads_the_secrets_but_sends_nothing(monkeypatch):
    monkeypatch.setenv("LAB_UNIT_URL", "http://127.0.0.1:9/never")
    monkeypatch.setattr(notify, "post_json", lambda *a: pytest.fail("check mode sent"))
    events = [{"host": "h", "kind": "healed", "level": "INFO", "text": "restarted item 3"}]
    sinks = [{"type": "wecom", "url_env": "LAB_UNIT_URL"}, {"type": "slack", "url_env": "LAB_UNIT_MISSING"}]
    result = run_action(ActionModule, {"events": events, "sinks": sinks}, check_mode=True)
    assert not result.get("failed") and result["sent"] == 0 and result["would_send"] == 1
    missing = "environment variable LAB_UNIT_MISSING (url_env) is not set on the controller"
    assert result["failures"] == [{"sink": "slack#1", "error": missing}]
    assert result["messages"][0]["payload"]["text"]["content"].endswith("h healed INFO: restarted item 3")
    assert "would send 1" in result["msg"]


def test_a_sink_that_raises_the_unforeseen_is_reported_redacted(monkeypatch):
    monkeypatch.setenv("LAB_UNIT_URL", "http://127.0.0.1:9/tok-abc123")

    def boom(url, body, timeout):
        raise RuntimeError("exploded while posting to %s" % url)
    monkeypatch.setattr(notify, "post_json", boom)
    events = [{"host": "h", "kind": "parked", "level": "INFO", "text": "x"}]
    result = run_action(ActionModule, {"events": events, "sinks": [{"type": "webhook", "url_env": "LAB_UNIT_URL"}]})
    assert not result.get("failed")
    assert result["failures"] == [{"sink": "webhook#0", "error": "RuntimeError: exploded while posting to ***"}]
