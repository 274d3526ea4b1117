# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Send the autopilot's events to every sink at once; a sink that fails is reported, never fatal.

Why plain urllib/smtplib here and not one ansible.builtin.uri (or community.general.slack / mail) task per sink:
the tick has one list of events and many sinks, and a sink must never fail the tick. uri takes the webhook URL
(which holds the token) as its ``url`` argument, which -vvv and a failed task's ``invocation`` show unless the task
has no_log, and no_log hides the reason of a failure too. community.general.slack (token no_log) and .mail cover
two of the six sinks; nothing there signs Feishu or DingTalk requests or speaks to WeCom; and community.general
is not a dependency of this collection. Here the secret is read from the named variable or file inside the
action, used, and never put into a result, a warning or a log line (errors are redacted).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import smtplib
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import notify_format as fmt
from ansible_collections.remote_gpu.trainer.plugins.module_utils import safe_read
from ansible_collections.remote_gpu.trainer.plugins.module_utils.redact import url_userinfo_problem
from ansible_collections.remote_gpu.trainer.plugins.modules.notify import DOCUMENTATION as MODULE_DOCUMENTATION
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.doc_args import DocumentedAction
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.redact import redact_result

SECRET_FILE_LIMIT = 64 * 1024
ANSWER_LIMIT = 64 * 1024


class SinkError(Exception):
    """A sink could not be sent to; the message names the cause and never holds a secret."""


def read_secret(sink, what, environ=None):
    """The secret ``what`` (url, secret, password) of ``sink`` from its ``<what>_env`` or ``<what>_file``, or None
    when the sink names neither. SinkError names the variable or the path when it cannot be read."""
    environ = os.environ if environ is None else environ
    env_key, file_key = fmt.SECRET_SOURCES[what]
    if sink.get(env_key):
        name = str(sink[env_key])
        value = environ.get(name)
        if value is None:
            raise SinkError("environment variable %s (%s) is not set on the controller" % (name, env_key))
        if not value.strip():
            raise SinkError("environment variable %s (%s) is empty" % (name, env_key))
        return value.strip()
    if sink.get(file_key):
        path = os.path.abspath(os.path.expanduser(str(sink[file_key])))
        try:  # bounded, never blocking on a FIFO; a link is followed (secrets are often mounted through links)
            raw = safe_read.read_bounded(path, SECRET_FILE_LIMIT + 1, follow=True)[0]
        except safe_read.ReadRefused as exc:
            raise SinkError("%s %s is not a regular file (%s)" % (file_key, path, exc)) from None
        except OSError as exc:
            raise SinkError("cannot read %s %s: %s" % (file_key, path, exc.strerror or type(exc).__name__)) from None
        if len(raw) > SECRET_FILE_LIMIT:
            raise SinkError("%s %s is larger than %d bytes" % (file_key, path, SECRET_FILE_LIMIT))
        value = raw.decode("utf-8", "replace").strip()
        if not value:
            raise SinkError("%s %s is empty" % (file_key, path))
        return value
    return None


def check_url(url, sink):
    source = sink.get("url_env") or sink.get("url_file")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or any(c in url for c in " \r\n\t"):
        raise SinkError("the URL from %s is not an http(s) URL" % source)
    problem = url_userinfo_problem(url, "the URL from %s" % source)
    if problem:  # refused before any request: never sent, never blamed on DNS
        raise SinkError(problem)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # pylint: disable=too-many-arguments
        return None


def post_json(url, body, timeout):
    """POST ``body`` as JSON; (HTTP status, parsed answer or None). SinkError on a non-2xx answer or no answer."""
    request = urllib.request.Request(url, data=json.dumps(body, ensure_ascii=False).encode("utf-8"), method="POST",
                                     headers={"Content-Type": "application/json; charset=utf-8",
                                              "User-Agent": "remote_gpu.trainer-notify"})
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=timeout) as answer:
            status, raw = answer.status, answer.read(ANSWER_LIMIT)
    except urllib.error.HTTPError as exc:
        detail = ""
        try:
            detail = " ".join(exc.read(300).decode("utf-8", "replace").split())
        except (OSError, ValueError):
            pass
        raise SinkError("HTTP %d %s%s" % (exc.code, exc.reason, (": " + detail) if detail else "")) from None
    except urllib.error.URLError as exc:
        raise SinkError("no answer: %s" % (exc.reason,)) from None
    except (socket.timeout, TimeoutError):
        raise SinkError("no answer within %s s" % timeout) from None
    except (OSError, ValueError) as exc:
        raise SinkError("no answer: %s" % (exc,)) from None
    try:
        parsed = json.loads(raw.decode("utf-8")) if raw.strip() else None
    except ValueError:
        parsed = None
    return status, parsed


def send_mail(sink, message, password, timeout):
    host, use_ssl = str(sink["host"]), bool(sink.get("ssl"))
    port = int(sink.get("port") or (465 if use_ssl else 587))
    starttls = sink.get("starttls", True) and not use_ssl
    try:
        if use_ssl:
            server = smtplib.SMTP_SSL(host, port, timeout=timeout, context=ssl.create_default_context())
        else:
            server = smtplib.SMTP(host, port, timeout=timeout)
        try:
            if starttls:
                server.starttls(context=ssl.create_default_context())
            if sink.get("user"):
                server.login(str(sink["user"]), password or "")
            refused = server.send_message(message)
        finally:
            try:
                server.quit()
            except (smtplib.SMTPException, OSError):
                server.close()
    except smtplib.SMTPAuthenticationError as exc:
        raise SinkError("SMTP %s:%d refused the login of %s (%s)" % (host, port, sink.get("user"), exc.smtp_code)) from None
    except smtplib.SMTPNotSupportedError as exc:
        raise SinkError("SMTP %s:%d: %s (set starttls: false for a server without TLS)" % (host, port, exc)) from None
    except (smtplib.SMTPException, OSError, ssl.SSLError) as exc:
        raise SinkError("SMTP %s:%d: %s" % (host, port, exc or type(exc).__name__)) from None
    if refused:
        raise SinkError("SMTP %s:%d refused recipient(s) %s" % (host, port, ", ".join(sorted(refused))))


def deliver(label, sink, title, events, check_mode, now):
    """(message shown, error or None, sent) for one sink. Never raises for a sink problem."""
    kind, secrets, shown = sink["type"], [], {"sink": label, "type": sink["type"]}
    try:
        timeout = float(sink.get("timeout", fmt.DEFAULT_TIMEOUT))
        if kind == "email":
            password = read_secret(sink, "password")
            secrets.append(password)
            to = fmt.recipients(sink["to"])
            if not to:
                raise SinkError("email needs at least one address in to")
            message = fmt.email_message(title, events, str(sink["from"]), to, sink.get("subject"))
            shown.update(subject=message["Subject"], to=to, body=message.get_content())
            shown["from"] = str(sink["from"])
            if not check_mode:
                send_mail(sink, message, password, timeout)
            return shown, None, not check_mode
        url = read_secret(sink, "url")
        secrets.append(url)
        check_url(url, sink)
        secret = read_secret(sink, "secret") if kind in fmt.SIGNED_TYPES else None
        secrets.append(secret)
        body = fmt.payload(kind, title, events, secret=secret if kind in ("feishu", "lark") else None, now=now)
        shown["payload"] = fmt.shown_payload(body)
        if kind == "dingtalk" and secret is not None:
            url = fmt.dingtalk_signed_url(url, secret, int(now * 1000))
            shown["signed"] = True
        elif kind in ("feishu", "lark") and secret is not None:
            shown["signed"] = True
        if check_mode:
            return shown, None, False
        _status, answer = post_json(url, body, timeout)
        error = fmt.api_error(kind, answer)
        if error:
            raise SinkError(error)
        return shown, None, True
    except SinkError as exc:
        return shown, fmt.redact(str(exc), secrets), False
    except Exception as exc:  # pylint: disable=broad-except
        # the last guard of "a sink never fails the tick": an unforeseen error is reported, redacted
        return shown, fmt.redact("%s: %s" % (type(exc).__name__, exc), secrets), False


class ActionModule(DocumentedAction):
    DOCUMENTATION = MODULE_DOCUMENTATION
    _requires_connection = False

    def act(self, result, args, task_vars):
        events, problems = fmt.check_events(args["events"])
        events = redact_result(events, task_vars)  # what is sent carries no secret either (plugin_utils/redact.py)
        failed = [{"sink": "events", "error": problem} for problem in problems]
        title = args["title"] or fmt.DEFAULT_TITLE
        messages, sent, would_send, jobs = [], 0, 0, []
        sinks = args["sinks"] or []
        if events:
            for index, sink in enumerate(sinks):
                label = fmt.sink_label(index, sink)
                issues = fmt.check_sink(sink)
                if issues:
                    failed.append({"sink": label, "error": "; ".join(issues)})
                else:
                    jobs.append((label, sink))
        now = time.time()
        if jobs:
            # one thread per sink: the tick waits at most about one timeout, whatever the number of sinks
            with concurrent.futures.ThreadPoolExecutor(max_workers=min(len(jobs), 16)) as pool:
                outcomes = list(pool.map(lambda job: deliver(job[0], job[1], title, events, self._task.check_mode,
                                                             now), jobs))
            for (label, _sink), (shown, error, delivered) in zip(jobs, outcomes):
                messages.append(shown)
                if error:
                    failed.append({"sink": label, "error": error})
                else:
                    would_send += 1
                    sent += 1 if delivered else 0
        warnings = ["notify: %s: %s" % (entry["sink"], entry["error"]) for entry in failed]
        if warnings:
            result["warnings"] = result.get("warnings", []) + warnings
        # not "failed": Ansible takes a true "failed" key as a failed task, and a sink must never fail the tick
        result.update(changed=sent > 0, sent=sent, failures=failed, messages=messages, would_send=would_send)
        if not events:
            result["msg"] = "no event to send"
        elif self._task.check_mode:
            result["msg"] = "check mode: would send %d message(s), %d sink(s) failed" % (would_send, len(failed))
        else:
            result["msg"] = "sent %d message(s) for %d event(s); %d failed" % (sent, len(events), len(failed))
        return result
