"""notify_format: events, one line per event, each sink's payload, the Feishu and DingTalk signatures, refusals."""

from __future__ import annotations

import urllib.parse

import pytest

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import notify_format as fmt

EVENT = {"host": "lab-01", "kind": "new_fail", "level": "fail", "text": "job gone:\n exit 137"}

# The DingTalk and Feishu documents publish the algorithm and sample code but no fixed timestamp with its output,
# so the expected signatures were computed with openssl from their sample secret ("this is secret") and Feishu's
# sample timestamp (1599360473; DingTalk counts milliseconds):
#   printf '%s\n%s' 1599360473000 'this is secret' | openssl dgst -sha256 -hmac 'this is secret' -binary | base64
#   printf '' | openssl dgst -sha256 -mac HMAC -macopt "key:$(printf '1599360473\nthis is secret')" -binary | base64
DOC_SECRET = "this is secret"
DINGTALK_SIGN = "hXZTWifRGHclNuZSKxoXc//sh51SWfVfRIhcdeKs63I="
FEISHU_SIGN = "/eYKrXQBzTjUZJ3s6NX16VxGbTwmK7AEs8/FnvC1CSw="


def test_events_are_checked_and_normalised():
    valid, problems = fmt.check_events([
        EVENT, "oops", {"host": "lab-02", "kind": "new_fail"},
        {"host": "lab-03", "kind": "exploded", "level": "FAIL", "text": "x"},
    ])
    assert valid == [{"host": "lab-01", "kind": "new_fail", "level": "FAIL", "text": "job gone: exit 137"}]
    assert problems == ["events[1] is not a mapping (str)", "events[2] lacks level, text",
                        "events[3] (host lab-03) has kind 'exploded', not one of " + ", ".join(fmt.KINDS)]
    assert fmt.check_events(None) == ([], [])


def test_one_line_per_event_after_the_title():
    events = fmt.check_events([EVENT, dict(EVENT, host="lab-02", kind="recovered", level="PASS", text="ok")])[0]
    assert fmt.message_text("T", events) == "T: 2 events\nlab-01 new_fail FAIL: job gone: exit 137\n" \
                                            "lab-02 recovered PASS: ok"
    assert fmt.message_text("T", events[:1]).startswith("T: 1 event\n")
    assert fmt.subject("T", events + events[:1]) == "T: 2 new_fail, 1 recovered"


def test_truncation_keeps_whole_lines_and_says_how_many_it_left_out():
    text = "head\n" + "\n".join("line %d %s" % (i, "é" * 50) for i in range(100))
    cut = fmt.truncate_utf8(text, 2048)
    assert len(cut.encode("utf-8")) <= 2048 and cut.startswith("head\nline 0 ")
    assert cut.endswith("more line(s) left out")
    kept = cut.count("\n") - 1  # lines of events kept
    assert cut.endswith("... %d more line(s) left out" % (100 - kept))
    assert fmt.truncate_utf8("short", 2048) == "short"
    assert len(fmt.truncate_utf8("x" * 5000, 100).encode()) == 100  # one long line: cut at the byte limit


def test_signatures_match_the_documented_algorithms():
    assert fmt.dingtalk_sign(DOC_SECRET, 1599360473000) == DINGTALK_SIGN
    assert fmt.feishu_sign(DOC_SECRET, 1599360473) == FEISHU_SIGN


def test_dingtalk_signed_url_appends_url_encoded_parameters():
    url = fmt.dingtalk_signed_url("https://oapi.dingtalk.com/robot/send?access_token=abc", DOC_SECRET, 1599360473000)
    assert url == ("https://oapi.dingtalk.com/robot/send?access_token=abc&timestamp=1599360473000&sign="
                   + urllib.parse.quote_plus(DINGTALK_SIGN))
    assert fmt.dingtalk_signed_url("http://h/x", "s", 1).startswith("http://h/x?timestamp=1&sign=")


def test_payloads_have_each_platforms_shape():
    events = fmt.check_events([EVENT])[0]
    text = "T: 1 event\nlab-01 new_fail FAIL: job gone: exit 137"
    assert fmt.payload("slack", "T", events) == {"text": text}
    assert fmt.payload("wecom", "T", events) == {"msgtype": "text", "text": {"content": text}}
    assert fmt.payload("dingtalk", "T", events) == {"msgtype": "text", "text": {"content": text}}
    assert fmt.payload("feishu", "T", events) == {"msg_type": "text", "content": {"text": text}}
    assert fmt.payload("webhook", "T", events) == {"title": "T", "text": text, "events": events}
    signed = fmt.payload("lark", "T", events, secret=DOC_SECRET, now=1599360473.9)
    assert signed == {"timestamp": "1599360473", "sign": FEISHU_SIGN, "msg_type": "text", "content": {"text": text}}
    assert fmt.shown_payload(signed)["sign"] == "(hidden)" and signed["sign"] == FEISHU_SIGN
    with pytest.raises(ValueError):
        fmt.payload("email", "T", events)


def test_wecom_text_stays_within_2048_bytes():
    events = fmt.check_events([dict(EVENT, host="lab-%02d" % i, text="长" * 60) for i in range(40)])[0]
    content = fmt.payload("wecom", "T", events)["text"]["content"]
    assert len(content.encode("utf-8")) <= 2048 and content.endswith("more line(s) left out")


@pytest.mark.parametrize("sink, problem", [
    ({"type": "slack", "url": "https://hooks.slack.com/services/T/B/x"}, "url is refused inline"),
    ({"type": "dingtalk", "url_env": "U", "secret": "SECx"}, "secret is refused inline"),
    ({"type": "email", "host": "h", "from": "a", "to": "b", "user": "u", "password": "p"}, "password is refused"),
    ({"type": "slack"}, "give exactly one of url_env, url_file"),
    ({"type": "slack", "url_env": "A", "url_file": "/f"}, "give exactly one of url_env, url_file"),
    ({"type": "slack", "url_env": "A", "secret_env": "S"}, "unknown key(s) secret_env for a slack sink"),
    ({"type": "teams", "url_env": "A"}, "type 'teams' is not one of"),
    ({"type": "email", "host": "h", "from": "a"}, "email needs to"),
    ({"type": "email", "host": "h", "from": "a", "to": "b", "password_env": "P"}, "a password needs user"),
    ({"type": "email", "host": "h", "from": "a", "to": "b", "user": "u"}, "user needs password_env or password_file"),
    ({"type": "email", "host": "h", "from": "a", "to": "b", "port": "smtp"}, "port must be a number"),
    ({"type": "webhook", "url_env": "A", "timeout": 0}, "timeout must be"),
    ({"type": "webhook", "url_env": "A", "timeout": "ten"}, "timeout must be"),
    ("slack", "a sink is a mapping"),
])
def test_bad_sinks_are_refused_with_the_rule_and_without_the_value(sink, problem):
    problems = fmt.check_sink(sink)
    assert any(problem in p for p in problems), problems
    for value in ("https://hooks.slack.com/services/T/B/x", "SECx"):
        assert all(value not in p for p in problems)


def test_good_sinks_pass():
    for sink in ({"type": "slack", "url_env": "S"}, {"type": "feishu", "url_file": "/f", "secret_env": "F"},
                 {"type": "dingtalk", "url_env": "D", "timeout": 3},
                 {"type": "email", "host": "h", "from": "a", "to": ["b"], "user": "u", "password_file": "/p"}):
        assert fmt.check_sink(sink) == [], sink


def test_labels_never_hold_a_secret():
    assert fmt.sink_label(2, {"type": "slack", "url_env": "X"}) == "slack#2"
    assert fmt.sink_label(0, {"type": "slack", "name": "team\nchat"}) == "team chat"
    assert fmt.sink_label(1, {"type": "nope"}) == "sink#1"


def test_redact_hides_plain_and_url_encoded_secrets():
    secret = "a+b/c=d"
    text = "bad url http://h/?s=%s and %s and %s" % (
        secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret))
    assert fmt.redact(text, [secret, None, ""]) == "bad url http://h/?s=*** and *** and ***"


def test_api_errors_in_a_200_answer():
    assert fmt.api_error("dingtalk", {"errcode": 0, "errmsg": "ok"}) is None
    assert fmt.api_error("wecom", {"errcode": 93000, "errmsg": "invalid webhook url"}) == \
        "the API answered errcode 93000: invalid webhook url"
    assert fmt.api_error("feishu", {"code": 19021, "msg": "sign match fail"}) == \
        "the API answered code 19021: sign match fail"
    assert fmt.api_error("feishu", {"StatusCode": 0}) is None
    assert fmt.api_error("slack", {"errcode": 1}) is None and fmt.api_error("wecom", None) is None


def test_recipients():
    assert fmt.recipients("a@x, b@x,") == ["a@x", "b@x"]
    assert fmt.recipients(["a@x", " "]) == ["a@x"]


def test_email_message():
    events = fmt.check_events([EVENT])[0]
    message = fmt.email_message("T", events, "from@x", ["a@x", "b@x"])
    assert message["Subject"] == "T: 1 new_fail" and message["To"] == "a@x, b@x"
    assert message.get_content() == "T: 1 event\nlab-01 new_fail FAIL: job gone: exit 137\n"
