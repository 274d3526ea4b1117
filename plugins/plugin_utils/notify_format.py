# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the notify action sends: events checked, one line per event, each sink's payload and its signature.

Pure functions (no network, no environment): the action ``remote_gpu.trainer.notify`` resolves the secrets and
sends. Where each payload and signing scheme comes from:

- Slack incoming webhook: ``POST`` of ``{"text": ...}`` (https://api.slack.com/messaging/webhooks).
- Feishu/Lark custom bot: ``{"msg_type": "text", "content": {"text": ...}}``; with signature verification the
  body also carries ``timestamp`` (seconds, as a string) and ``sign`` = base64(HMAC-SHA256 with the key
  ``"<timestamp>\\n<secret>"`` over an empty message)
  (https://open.feishu.cn/document/client-docs/bot-v3/add-custom-bot, "signature verification").
- DingTalk custom robot: ``{"msgtype": "text", "text": {"content": ...}}``; with "加签" the URL gains
  ``timestamp`` (milliseconds) and ``sign`` = urlEncode(base64(HMAC-SHA256 with the key ``secret`` over
  ``"<timestamp>\\n<secret>"``)) (https://open.dingtalk.com/document/robots/customize-robot-security-settings).
- WeCom (企业微信) group robot: ``{"msgtype": "text", "text": {"content": ...}}``, content at most 2048 bytes of
  UTF-8 (https://developer.work.weixin.qq.com/document/path/91770).
- Generic webhook: ``{"title", "text", "events"}`` (ours).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import urllib.parse
from email.message import EmailMessage

from ansible_collections.remote_gpu.trainer.plugins.module_utils import redact as redact_mod

KINDS = ("new_fail", "recovered", "healed", "parked", "queue_done", "unreachable", "escalated", "preempted",
         "replaced")
EVENT_KEYS = ("host", "kind", "level", "text")
SINK_TYPES = ("webhook", "slack", "feishu", "lark", "dingtalk", "wecom", "email")
HTTP_TYPES = ("webhook", "slack", "feishu", "lark", "dingtalk", "wecom")
SIGNED_TYPES = ("feishu", "lark", "dingtalk")
DEFAULT_TITLE = "remote_gpu.trainer autopilot"
DEFAULT_TIMEOUT = 10

# Per-sink size limits of the text (bytes of UTF-8): WeCom documents 2048; DingTalk and Feishu take more, Slack
# truncates beyond 40,000 characters. Above the limit the text is cut at a line and says how many lines it left out.
TEXT_LIMITS = {"wecom": 2048, "dingtalk": 18000, "feishu": 18000, "lark": 18000, "slack": 39000}

# Keys that would put a secret into the task's arguments (and so into -vvv output and logs): refused.
INLINE_SECRET_KEYS = ("url", "secret", "password", "token", "webhook")
SECRET_SOURCES = {"url": ("url_env", "url_file"), "secret": ("secret_env", "secret_file"),
                  "password": ("password_env", "password_file")}
SINK_KEYS = {
    "common": ("type", "name", "timeout"),
    "http": ("url_env", "url_file"),
    "signed": ("secret_env", "secret_file"),
    "email": ("host", "port", "starttls", "ssl", "user", "password_env", "password_file", "from", "to", "subject"),
}


def _one_line(value):
    return " ".join(str(value).split())


def check_events(events):
    """(valid events as {host, kind, level, text} strings, problems as strings) from the ``events`` option.

    An event that is not a mapping, lacks a key or has an unknown kind is left out with a problem that names it.
    """
    valid, problems = [], []
    for index, event in enumerate(events or []):
        if not isinstance(event, dict):
            problems.append("events[%d] is not a mapping (%s)" % (index, type(event).__name__))
            continue
        missing = [key for key in EVENT_KEYS if event.get(key) in (None, "")]
        if missing:
            problems.append("events[%d] lacks %s" % (index, ", ".join(missing)))
            continue
        kind = str(event["kind"])
        if kind not in KINDS:
            problems.append("events[%d] (host %s) has kind %r, not one of %s" % (
                index, _one_line(event["host"]), kind, ", ".join(KINDS)))
            continue
        valid.append({"host": _one_line(event["host"]), "kind": kind, "level": _one_line(event["level"]).upper(),
                      "text": _one_line(event["text"])})
    return valid, problems


def event_line(event):
    """One line per event: ``host kind LEVEL: text``."""
    return "%s %s %s: %s" % (event["host"], event["kind"], event["level"], event["text"])


def message_text(title, events):
    """The message: the title with a count, then one line per event."""
    head = "%s: %d event%s" % (title, len(events), "" if len(events) == 1 else "s")
    return "\n".join([head] + [event_line(event) for event in events])


def truncate_utf8(text, limit):
    """``text`` cut at a line boundary to at most ``limit`` bytes of UTF-8, saying how many lines it left out."""
    if limit is None or len(text.encode("utf-8")) <= limit:
        return text
    lines = text.split("\n")
    for keep in range(len(lines) - 1, 0, -1):
        candidate = "\n".join(lines[:keep] + ["... %d more line(s) left out" % (len(lines) - keep)])
        if len(candidate.encode("utf-8")) <= limit:
            return candidate
    return text.encode("utf-8")[:limit].decode("utf-8", "ignore")


def subject(title, events):
    """The e-mail subject: the title and the count of events per kind."""
    counts = {}
    for event in events:
        counts[event["kind"]] = counts.get(event["kind"], 0) + 1
    return "%s: %s" % (title, ", ".join("%d %s" % (counts[kind], kind) for kind in KINDS if kind in counts))


def feishu_sign(secret, timestamp):
    """Feishu/Lark custom bot signature: base64(HMAC-SHA256(key="<timestamp>\\n<secret>", message=b""))."""
    key = ("%d\n%s" % (int(timestamp), secret)).encode("utf-8")
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode("ascii")


def dingtalk_sign(secret, timestamp_ms):
    """DingTalk robot signature before URL encoding: base64(HMAC-SHA256(key=secret, "<timestamp>\\n<secret>"))."""
    message = ("%d\n%s" % (int(timestamp_ms), secret)).encode("utf-8")
    return base64.b64encode(hmac.new(secret.encode("utf-8"), message, hashlib.sha256).digest()).decode("ascii")


def dingtalk_signed_url(url, secret, timestamp_ms):
    """``url`` with DingTalk's ``timestamp`` and URL-encoded ``sign`` query parameters appended."""
    query = urllib.parse.urlencode({"timestamp": str(int(timestamp_ms)), "sign": dingtalk_sign(secret, timestamp_ms)})
    return "%s%s%s" % (url, "&" if urllib.parse.urlsplit(url).query else "?", query)


def payload(sink_type, title, events, secret=None, now=None):
    """The JSON body for an HTTP sink. ``secret``/``now`` (seconds) sign a Feishu body; DingTalk signs its URL."""
    text = truncate_utf8(message_text(title, events), TEXT_LIMITS.get(sink_type))
    if sink_type == "webhook":
        return {"title": title, "text": text, "events": [dict(event) for event in events]}
    if sink_type == "slack":
        return {"text": text}
    if sink_type in ("feishu", "lark"):
        body = {"msg_type": "text", "content": {"text": text}}
        if secret is not None:
            timestamp = int(now)
            body = dict({"timestamp": str(timestamp), "sign": feishu_sign(secret, timestamp)}, **body)
        return body
    if sink_type in ("dingtalk", "wecom"):
        return {"msgtype": "text", "text": {"content": text}}
    raise ValueError("not an HTTP sink type: %r" % sink_type)


def shown_payload(body):
    """``body`` as the action returns it: a Feishu signature (a credential for an hour) is hidden."""
    if isinstance(body, dict) and "sign" in body:
        return dict(body, sign="(hidden)")
    return body


def email_message(title, events, sender, recipients, subject_text=None):
    """The e-mail: plain text, one line per event."""
    message = EmailMessage()
    message["Subject"] = subject_text or subject(title, events)
    message["From"] = sender
    message["To"] = ", ".join(recipients)
    message.set_content(message_text(title, events) + "\n")
    return message


def sink_label(index, sink):
    """How a sink is named in ``failed`` and ``messages``: its ``name``, else ``<type>#<index>``; never a secret."""
    if isinstance(sink, dict) and sink.get("name"):
        return _one_line(sink["name"])
    kind = sink.get("type") if isinstance(sink, dict) else None
    return "%s#%d" % (kind if kind in SINK_TYPES else "sink", index)


def check_sink(sink):
    """Problems with a sink's settings, as strings (empty when it can be sent to). Never quotes a value."""
    if not isinstance(sink, dict):
        return ["a sink is a mapping with a type, not %s" % type(sink).__name__]
    kind = sink.get("type")
    if kind not in SINK_TYPES:
        return ["type %r is not one of %s" % (kind, ", ".join(SINK_TYPES))]
    problems = []
    inline = sorted(key for key in sink if key in INLINE_SECRET_KEYS)
    for key in inline:
        sources = SECRET_SOURCES.get(key, ("url_env", "url_file"))
        problems.append("%s is refused inline (it holds a secret that would show in logs and at -vvv): "
                        "name an environment variable with %s or a file with %s" % (key, sources[0], sources[1]))
    allowed = set(SINK_KEYS["common"])
    if kind in HTTP_TYPES:
        allowed.update(SINK_KEYS["http"])
        given = [key for key in SECRET_SOURCES["url"] if sink.get(key)]
        if len(given) != 1 and "url" not in inline and "webhook" not in inline:
            problems.append("give exactly one of url_env, url_file")
    if kind in SIGNED_TYPES:
        allowed.update(SINK_KEYS["signed"])
        if sink.get("secret_env") and sink.get("secret_file"):
            problems.append("give at most one of secret_env, secret_file")
    if kind == "email":
        allowed.update(SINK_KEYS["email"])
        for key in ("host", "from", "to"):
            if not sink.get(key):
                problems.append("email needs %s" % key)
        if sink.get("password_env") and sink.get("password_file"):
            problems.append("give at most one of password_env, password_file")
        if bool(sink.get("password_env") or sink.get("password_file")) != bool(sink.get("user")):
            problems.append("a password needs user, and user needs password_env or password_file")
        port = sink.get("port", 587)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            problems.append("port must be a number from 1 to 65535")
        if sink.get("starttls") and sink.get("ssl"):
            problems.append("give starttls or ssl, not both")
    unknown = sorted(str(key) for key in sink if key not in allowed and key not in INLINE_SECRET_KEYS)
    if unknown:
        problems.append("unknown key(s) %s for a %s sink (allowed: %s)" % (
            ", ".join(unknown), kind, ", ".join(sorted(allowed))))
    timeout = sink.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 120:
        problems.append("timeout must be a number of seconds in (0, 120]")
    return problems


def recipients(value):
    """``to`` as a list of addresses (a list, or a comma-separated string)."""
    if isinstance(value, str):
        value = value.split(",")
    return [str(item).strip() for item in value or [] if str(item).strip()]


def redact(text, secrets):
    """``text`` with every secret (and its URL-encoded forms) replaced by ``***``: module_utils/redact.py's
    ``redact``, the one owner (user information in URLs and tokens of known shapes go too)."""
    return redact_mod.redact(text, [secret for secret in secrets if secret], mark="***")


def api_error(sink_type, body):
    """The error a bot API reported in an HTTP 200 answer (Feishu ``code``, DingTalk/WeCom ``errcode``), or None."""
    if not isinstance(body, dict):
        return None
    if sink_type in ("dingtalk", "wecom") and body.get("errcode") not in (None, 0):
        return "the API answered errcode %s: %s" % (body.get("errcode"), _one_line(body.get("errmsg", ""))[:200])
    if sink_type in ("feishu", "lark"):
        code = body.get("code", body.get("StatusCode"))
        if code not in (None, 0):
            return "the API answered code %s: %s" % (code, _one_line(body.get("msg", body.get("StatusMessage", "")))[:200])
    return None
