"""remote_gpu.trainer.notify for real: ansible-playbook on localhost against the loopback receivers.

Every sink type delivers its documented payload (signatures checked here with an independent HMAC); a failing
sink, a missing variable and a sink that never answers are listed in `failures` and the play goes on; check mode
sends nothing; no secret shows in the output, also at -vvv.
"""

from __future__ import annotations

import base64
import email
import hashlib
import hmac
import json
import socket
import sys
import time

import pytest

from pbhelpers import REPO, run_playbook

sys.path.insert(0, str(REPO / "tests" / "lab" / "providers"))
from webhook_receiver import SMTPReceiver, WebhookReceiver  # noqa: E402  pylint: disable=wrong-import-position

# Lab-only secrets: the URL tokens, the signing secrets and the SMTP password. None may show in any output.
SECRETS = {
    "slack": "slacktoken5e1f0c9a",
    "webhook": "hooktoken77b2d1",
    "feishu": "feishuhook3c9e41",
    "feishu_secret": "feishu-sec-8d02aa",
    "dingtalk": "dingtoken19f4e7",
    "dingtalk_secret": "SECding6a0b3c5d",
    "wecom": "wecomkey-2f7c0e11",
    "smtp": "smtp-pass-b41e9d",
}
EVENTS = [
    {"host": "lab-01", "kind": "new_fail", "level": "FAIL", "text": "job gone: exit 137 (cgroup OOM kill)"},
    {"host": "lab-02", "kind": "parked", "level": "info", "text": "queue done, results verified; shutdown"},
]
INVENTORY = REPO / "inventories" / "local" / "hosts.yml"
PY = ("-e", "ansible_python_interpreter=%s" % sys.executable)  # for the copy task that keeps the result
LINES = ["lab-01 new_fail FAIL: job gone: exit 137 (cgroup OOM kill)",
         "lab-02 parked INFO: queue done, results verified; shutdown"]


@pytest.fixture
def receivers():
    webhook = WebhookReceiver().start()
    smtp = SMTPReceiver(password=SECRETS["smtp"]).start()
    webhook.answer("/broken", 500)
    webhook.answer("/ding-error", 200, {"errcode": 310000, "errmsg": "sign not match"})
    yield webhook, smtp
    webhook.stop()
    smtp.stop()


@pytest.fixture
def silent_port():
    """A port that accepts connections (the kernel's backlog) and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    yield listener.getsockname()[1]
    listener.close()


def write_playbook(tmp_path, sinks, events=None):
    events = EVENTS if events is None else events
    out = tmp_path / "notified.json"
    playbook = tmp_path / "notify.yml"
    playbook.write_text(json.dumps([{
        "name": "Notify", "hosts": "localhost", "gather_facts": False,
        "tasks": [
            {"name": "Send the events", "remote_gpu.trainer.notify": {"title": "lab autopilot", "events": events,
                                                                      "sinks": sinks},
             "register": "notified"},
            {"name": "Keep the result", "ansible.builtin.copy": {"content": "{{ notified | to_json }}",
                                                                 "dest": str(out)},
             "check_mode": False},
        ]}]))
    return playbook, out


def all_sinks(tmp_path, webhook, smtp):
    url = webhook.url
    (tmp_path / "feishu-url").write_text("%s/feishu/open-apis/bot/v2/hook/%s\n" % (url, SECRETS["feishu"]))
    (tmp_path / "ding-secret").write_text(SECRETS["dingtalk_secret"] + "\n")
    env = {
        "LAB_SLACK_URL": "%s/slack/services/T0LAB/B0LAB/%s" % (url, SECRETS["slack"]),
        "LAB_HOOK_URL": "%s/hook/in?token=%s" % (url, SECRETS["webhook"]),
        "LAB_FEISHU_SECRET": SECRETS["feishu_secret"],
        "LAB_DING_URL": "%s/ding/robot/send?access_token=%s" % (url, SECRETS["dingtalk"]),
        "LAB_WECOM_URL": "%s/wecom/cgi-bin/webhook/send?key=%s" % (url, SECRETS["wecom"]),
        "LAB_SMTP_PASSWORD": SECRETS["smtp"],
        "LAB_BROKEN_URL": "%s/broken/%s" % (url, SECRETS["webhook"]),
    }
    sinks = [
        {"type": "webhook", "url_env": "LAB_HOOK_URL"},
        {"type": "slack", "url_env": "LAB_SLACK_URL"},
        {"type": "feishu", "url_file": str(tmp_path / "feishu-url"), "secret_env": "LAB_FEISHU_SECRET"},
        {"type": "dingtalk", "url_env": "LAB_DING_URL", "secret_file": str(tmp_path / "ding-secret")},
        {"type": "wecom", "url_env": "LAB_WECOM_URL"},
        {"type": "email", "name": "mail", "host": smtp.host, "port": smtp.port, "starttls": False,
         "user": "trainer@lab.invalid", "password_env": "LAB_SMTP_PASSWORD", "from": "trainer@lab.invalid",
         "to": ["me@lab.invalid", "you@lab.invalid"]},
        {"type": "webhook", "name": "broken", "url_env": "LAB_BROKEN_URL"},
        {"type": "slack", "name": "unset", "url_env": "LAB_NOT_SET_ANYWHERE"},
    ]
    return sinks, env


def no_secret(output):
    for name, value in SECRETS.items():
        # never print the output: it would carry the secret into the test report
        assert value not in output, "the %s secret appears in the output" % name


def test_every_sink_delivers_and_a_failing_one_does_not_fail_the_play(tmp_path, receivers):
    webhook, smtp = receivers
    sinks, env = all_sinks(tmp_path, webhook, smtp)
    playbook, out = write_playbook(tmp_path, sinks)
    before = time.time()
    proc = run_playbook(playbook, INVENTORY, *PY, "-vvv", **env)
    output = proc.stdout + proc.stderr
    no_secret(output)
    assert proc.returncode == 0, output[-3000:]
    result = json.loads(out.read_text())
    no_secret(out.read_text())
    assert result["sent"] == 6 and result["changed"] is True
    failed = {entry["sink"]: entry["error"] for entry in result["failures"]}
    assert set(failed) == {"broken", "unset"}
    assert failed["broken"].startswith("HTTP 500")
    assert "LAB_NOT_SET_ANYWHERE" in failed["unset"] and "not set" in failed["unset"]
    assert "[WARNING]: notify: broken: HTTP 500" in output

    text = "lab autopilot: 2 events\n" + "\n".join(LINES)
    (hook,) = webhook.messages("/hook")
    assert hook["query"] == {"token": [SECRETS["webhook"]]}
    assert hook["headers"]["Content-Type"].startswith("application/json")
    assert hook["body"] == {"title": "lab autopilot", "text": text, "events": [
        dict(EVENTS[0]), dict(EVENTS[1], level="INFO")]}

    (slack,) = webhook.messages("/slack")
    assert slack["path"].endswith(SECRETS["slack"]) and slack["body"] == {"text": text}

    (feishu,) = webhook.messages("/feishu")
    body = feishu["body"]
    assert body["msg_type"] == "text" and body["content"] == {"text": text}
    timestamp = int(body["timestamp"])
    assert before - 5 <= timestamp <= time.time() + 5
    key = ("%d\n%s" % (timestamp, SECRETS["feishu_secret"])).encode()
    assert body["sign"] == base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()

    (ding,) = webhook.messages("/ding/")
    assert ding["body"] == {"msgtype": "text", "text": {"content": text}}
    assert ding["query"]["access_token"] == [SECRETS["dingtalk"]]
    stamp = ding["query"]["timestamp"][0]
    assert before * 1000 - 5000 <= int(stamp) <= time.time() * 1000 + 5000
    secret = SECRETS["dingtalk_secret"].encode()
    want = base64.b64encode(hmac.new(secret, ("%s\n" % stamp).encode() + secret, hashlib.sha256).digest()).decode()
    assert ding["query"]["sign"] == [want]  # parse_qs undid the URL encoding

    (wecom,) = webhook.messages("/wecom")
    assert wecom["query"] == {"key": [SECRETS["wecom"]]}
    assert wecom["body"] == {"msgtype": "text", "text": {"content": text}}

    (mail,) = smtp.messages()
    assert mail["auth"] == ["trainer@lab.invalid", SECRETS["smtp"]]
    assert mail["mail_from"] == "trainer@lab.invalid" and mail["rcpt_to"] == ["me@lab.invalid", "you@lab.invalid"]
    parsed = email.message_from_string(mail["data"])
    assert parsed["Subject"] == "lab autopilot: 1 new_fail, 1 parked"
    assert parsed.get_payload(decode=True).decode().strip() == text

    shown = {m["sink"]: m for m in result["messages"]}
    assert shown["feishu#2"]["payload"]["sign"] == "(hidden)" and shown["dingtalk#3"]["signed"] is True
    assert shown["mail"]["to"] == ["me@lab.invalid", "you@lab.invalid"]


def test_check_mode_sends_nothing_and_says_what_it_would_send(tmp_path, receivers):
    webhook, smtp = receivers
    sinks, env = all_sinks(tmp_path, webhook, smtp)
    playbook, out = write_playbook(tmp_path, sinks)
    proc = run_playbook(playbook, INVENTORY, *PY, "--check", "-vvv", **env)
    output = proc.stdout + proc.stderr
    no_secret(output)
    assert proc.returncode == 0, output[-3000:]
    result = json.loads(out.read_text())
    assert webhook.messages() == [] and smtp.messages() == []
    assert result["sent"] == 0 and result["changed"] is False
    assert result["would_send"] == 7  # broken would be tried; unset cannot be
    assert [entry["sink"] for entry in result["failures"]] == ["unset"]
    assert {m["sink"] for m in result["messages"]} >= {"webhook#0", "slack#1", "mail", "broken"}


def test_api_errors_timeouts_and_inline_secrets_are_failures_not_play_failures(tmp_path, receivers, silent_port):
    webhook, _smtp = receivers
    env = {"LAB_DING_URL": "%s/ding-error/robot/send?access_token=%s" % (webhook.url, SECRETS["dingtalk"]),
           "LAB_SILENT_URL": "http://127.0.0.1:%d/hook" % silent_port}
    sinks = [
        {"type": "dingtalk", "name": "ding", "url_env": "LAB_DING_URL"},
        {"type": "webhook", "name": "silent", "url_env": "LAB_SILENT_URL", "timeout": 2},
        {"type": "slack", "name": "inline", "url": "%s/slack/%s" % (webhook.url, SECRETS["slack"])},
        {"type": "wecom", "name": "dir", "url_file": str(tmp_path)},
        {"type": "carrier-pigeon", "name": "bird"},
    ]
    events = EVENTS + [{"host": "lab-03", "kind": "exploded", "level": "FAIL", "text": "?"}]
    playbook, out = write_playbook(tmp_path, sinks, events)
    started = time.time()
    proc = run_playbook(playbook, INVENTORY, *PY, "-vvv", **env)
    output = proc.stdout + proc.stderr
    no_secret(output.replace(webhook.url + "/slack/" + SECRETS["slack"], ""))  # the inline value is the user's
    assert proc.returncode == 0, output[-3000:]
    result = json.loads(out.read_text())
    failed = {entry["sink"]: entry["error"] for entry in result["failures"]}
    assert result["sent"] == 0
    assert "errcode 310000" in failed["ding"]
    assert "no answer" in failed["silent"]
    assert "url is refused inline" in failed["inline"]
    assert SECRETS["slack"] not in json.dumps(result)
    assert "is not a regular file" in failed["dir"]
    assert "carrier-pigeon" in failed["bird"]
    assert "'exploded'" in failed["events"]
    assert len(webhook.messages("/slack")) == 0
    assert time.time() - started < 120  # bounded: one 2 s timeout, no retries (generous for a loaded machine)
