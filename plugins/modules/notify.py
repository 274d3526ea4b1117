#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: notify
short_description: Send the autopilot's events to webhooks, Slack, Feishu/Lark, DingTalk, WeCom and e-mail
version_added: 0.1.0
author:
  - remote_gpu.trainer maintainers (@remote-gpu)
description:
  - Runs on the controller (an action plugin). One task sends one message per sink, one line per event
    (host, kind, level, text). Run it once per tick (C(run_once) or a play on C(localhost)).
  - It never fails the play. A sink that cannot be reached, answers an error, or whose secret cannot be read is
    listed in RV(failures) and as a warning; the other sinks still send. Each sink is tried once, with a timeout.
  - Secrets (webhook URLs, which carry their token, signing secrets, the SMTP password) come only from environment
    variables of the controller or from files on the controller, named in the sink (C(url_env), C(url_file),
    C(secret_env), C(secret_file), C(password_env), C(password_file)). An inline C(url), C(secret), C(password),
    C(token) or C(webhook) key is refused. No secret is returned, printed or logged, also at C(-vvv).
  - 'Payloads, per sink C(type). V(webhook) posts C({"title", "text", "events"}) as JSON. V(slack) posts
    C({"text"}) to an incoming webhook. V(feishu) (or V(lark)) posts C({"msg_type": "text", "content": {"text"}})
    to a custom bot, signed with C(timestamp) and C(sign) when the sink has a secret. V(dingtalk) posts
    C({"msgtype": "text", "text": {"content"}}) to a custom robot, with C(timestamp) and C(sign) query parameters
    when the sink has a secret. V(wecom) posts C({"msgtype": "text", "text": {"content"}}) to a WeCom group robot
    (text cut to 2048 bytes). V(email) sends a plain-text mail through SMTP.'
  - An HTTP sink succeeds on a 2xx answer whose body reports no API error (Feishu C(code), DingTalk and WeCom
    C(errcode) other than 0). Redirects are not followed.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
attributes:
  check_mode:
    support: full
    details: Sends nothing and returns in RV(messages) what it would send.
options:
  events:
    description:
      - What happened, one mapping per event with the keys C(host), C(kind), C(level) and C(text).
      - C(kind) is one of V(new_fail), V(recovered), V(healed), V(parked), V(queue_done), V(unreachable),
        V(escalated), V(preempted), V(replaced). An event that lacks a key or has another kind is left out and
        listed in RV(failures) (sink V(events)).
      - No event, no message.
    type: list
    elements: dict
    required: true
  sinks:
    description:
      - Where to send, one mapping per sink. Common keys are C(type) (V(webhook), V(slack), V(feishu), V(lark),
        V(dingtalk), V(wecom), V(email)), C(name) (how it is named in the results; default C(<type>#<index>)) and
        C(timeout) (seconds, default 10).
      - HTTP sinks take exactly one of C(url_env) (the name of an environment variable that holds the URL) or
        C(url_file) (a file that holds it). V(feishu), V(lark) and V(dingtalk) take an optional signing secret
        as C(secret_env) or C(secret_file).
      - V(email) takes C(host), C(port) (default 587, or 465 with C(ssl)), C(starttls) (default true), C(ssl)
        (implicit TLS, default false), C(user), C(password_env) or C(password_file), C(from), C(to) (a list or a
        comma-separated string) and an optional C(subject).
      - A sink with a wrong key is listed in RV(failures) and skipped.
    type: list
    elements: dict
    default: []
  title:
    description: The first line of every message (and the start of the e-mail subject).
    type: str
    default: remote_gpu.trainer autopilot
"""

EXAMPLES = r"""
- name: Tell the team what changed in this tick
  remote_gpu.trainer.notify:
    title: "autopilot (lab fleet)"
    events:
      - host: lab-01
        kind: new_fail
        level: FAIL
        text: "job gone: exit 137 (cgroup OOM kill)"
    sinks:
      - type: slack
        url_env: SLACK_WEBHOOK_URL
      - type: feishu
        url_file: ~/.config/trainer/feishu-url
        secret_env: FEISHU_SECRET
      - type: dingtalk
        url_env: DINGTALK_WEBHOOK_URL
        secret_env: DINGTALK_SECRET
      - type: wecom
        url_env: WECOM_WEBHOOK_URL
      - type: email
        host: smtp.example.org
        user: trainer@example.org
        password_env: SMTP_PASSWORD
        from: trainer@example.org
        to: [me@example.org]
  run_once: true
  register: notified
"""

RETURN = r"""
sent:
  description: How many messages were delivered (one per sink that succeeded).
  type: int
  returned: always
  sample: 2
failures:
  description:
    - Each sink that failed (or a bad event, as sink V(events)) with the reason; the reason never holds a secret.
    - Not named C(failed), which Ansible would read as a failed task.
  type: list
  elements: dict
  returned: always
  sample: [{"sink": "slack#0", "error": "environment variable SLACK_WEBHOOK_URL is not set"}]
messages:
  description:
    - What was sent (or, in check mode or for a failed sink, would have been sent) per sink, without secrets.
    - C(payload) is the JSON body of an HTTP sink (a Feishu C(sign) shows as V((hidden))); an e-mail has
      C(subject), C(from), C(to) and C(body).
  type: list
  elements: dict
  returned: always
  sample: [{"sink": "slack#0", "type": "slack", "payload": {"text": "remote_gpu.trainer autopilot: 1 event\nlab-01 new_fail FAIL: job gone"}}]
would_send:
  description: How many sinks a run would send to (in check mode the count of messages not sent).
  type: int
  returned: always
  sample: 2
"""
