# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Loopback receivers for notifications (standard library only): an HTTP webhook receiver and a tiny SMTP server.

Both record every message they get, for the tests of ``remote_gpu.trainer.notify`` and of the autopilot.

    receiver = WebhookReceiver().start()      # http://127.0.0.1:<port>
    receiver.url                              # base URL; any path is accepted: receiver.url + "/slack/T0/B0/x"
    receiver.answer("/broken", 500)           # this path answers 500 (a failing sink); body optional
    receiver.answer("/ding", 200, {"errcode": 310000, "errmsg": "sign not match"})
    receiver.messages()                       # [{method, path, query, headers, body, raw}, ...] in arrival order
    receiver.messages("/slack")               # only those whose path starts with "/slack"
    receiver.stop()

    smtp = SMTPReceiver().start()             # smtp.host, smtp.port; EHLO/HELO, AUTH PLAIN/LOGIN, MAIL, RCPT, DATA
    smtp.messages()                           # [{mail_from, rcpt_to, data, auth: [user, password] or None}, ...]
    smtp.stop()

The SMTP server speaks plain SMTP only (no STARTTLS): point a sink at it with ``starttls: false``.
By hand: ``python3 webhook_receiver.py [--status 500]`` prints the URL and the SMTP address and logs each message.
"""

from __future__ import annotations

import argparse
import base64
import json
import socketserver
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BODY_LIMIT = 4 * 1024 * 1024


class _Handler(BaseHTTPRequestHandler):
    server_version = "lab-webhook-receiver/1"

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        if self.server.owner.verbose:
            super().log_message(format, *args)

    def _record(self):
        owner = self.server.owner
        length = min(int(self.headers.get("Content-Length") or 0), BODY_LIMIT)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw.decode("utf-8")) if raw else None
        except ValueError:
            body = None
        parts = urllib.parse.urlsplit(self.path)
        record = {"method": self.command, "path": parts.path, "query": urllib.parse.parse_qs(parts.query),
                  "headers": dict(self.headers.items()), "body": body, "raw": raw.decode("utf-8", "replace"),
                  "time": time.time()}
        with owner.lock:
            owner.records.append(record)
        status, answer = owner.answer_for(parts.path)
        data = answer if isinstance(answer, bytes) else json.dumps(answer).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_POST = do_PUT = do_GET = _record


class _Served:
    """start() (in the subclass) serves ``self._server`` on ``self._thread``; stop() ends it; usable as a context."""
    _server = None
    _thread = None

    def stop(self):
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=10)
            self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class WebhookReceiver(_Served):
    """An HTTP server on 127.0.0.1 (or ``host``) that records every request and answers ``status`` (default 200)."""

    def __init__(self, host="127.0.0.1", port=0, status=200, body=None, verbose=False):
        self.host, self.port, self.verbose = host, port, verbose
        self.default = (status, body if body is not None else {"ok": True, "code": 0, "errcode": 0})
        self.answers, self.records, self.lock = {}, [], threading.Lock()
        self._server = self._thread = None

    def answer(self, path_prefix, status, body=None):
        """Requests whose path starts with ``path_prefix`` get ``status`` and ``body`` (JSON, or bytes as is)."""
        with self.lock:
            self.answers[path_prefix] = (status, body if body is not None else {"error": "lab receiver: %d" % status})
        return self

    def answer_for(self, path):
        with self.lock:
            matches = sorted((p for p in self.answers if path.startswith(p)), key=len, reverse=True)
            return self.answers[matches[0]] if matches else self.default

    def start(self):
        self._server = ThreadingHTTPServer((self.host, self.port), _Handler)
        self._server.daemon_threads = True
        self._server.owner = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="webhook-receiver", daemon=True)
        self._thread.start()
        return self

    @property
    def url(self):
        return "http://%s:%d" % (self.host, self.port)

    def messages(self, path_prefix=""):
        with self.lock:
            return [dict(r) for r in self.records if r["path"].startswith(path_prefix)]

    def clear(self):
        with self.lock:
            self.records.clear()


class _SMTPHandler(socketserver.StreamRequestHandler):
    """Just enough of RFC 5321 for smtplib: EHLO/HELO, AUTH PLAIN/LOGIN, MAIL, RCPT, DATA, RSET, NOOP, QUIT."""

    timeout = 30

    def reply(self, line):
        self.wfile.write(line.encode("ascii") + b"\r\n")

    def readline(self):
        line = self.rfile.readline(65536)
        if not line:
            raise EOFError
        return line.decode("utf-8", "replace").rstrip("\r\n")

    def handle(self):
        owner = self.server.owner
        state = {"mail_from": None, "rcpt_to": [], "auth": None}
        self.reply("220 lab-smtp-receiver ready")
        try:
            while True:
                line = self.readline()
                verb = line.split(" ", 1)[0].upper()
                arg = line[len(verb):].strip()
                if verb == "EHLO":
                    self.reply("250-lab-smtp-receiver")
                    self.reply("250-AUTH PLAIN LOGIN")
                    self.reply("250 8BITMIME")
                elif verb == "HELO":
                    self.reply("250 lab-smtp-receiver")
                elif verb == "AUTH":
                    state["auth"] = self.auth(arg)
                    if state["auth"] is None:
                        self.reply("535 5.7.8 authentication failed")
                    elif owner.password is not None and state["auth"][1] != owner.password:
                        self.reply("535 5.7.8 authentication failed")
                        state["auth"] = None
                    else:
                        self.reply("235 2.7.0 authentication succeeded")
                elif verb == "MAIL":
                    state["mail_from"], state["rcpt_to"] = arg.split(":", 1)[-1].strip().strip("<>").split(">")[0], []
                    self.reply("250 OK")
                elif verb == "RCPT":
                    state["rcpt_to"].append(arg.split(":", 1)[-1].strip().strip("<>").split(">")[0])
                    self.reply("250 OK")
                elif verb == "DATA":
                    self.reply("354 end data with <CR><LF>.<CR><LF>")
                    lines = []
                    while True:
                        data_line = self.readline()
                        if data_line == ".":
                            break
                        lines.append(data_line[1:] if data_line.startswith("..") else data_line)
                    with owner.lock:
                        owner.records.append({"mail_from": state["mail_from"], "rcpt_to": list(state["rcpt_to"]),
                                              "data": "\n".join(lines), "auth": state["auth"]})
                    self.reply("250 OK queued")
                elif verb in ("RSET", "NOOP"):
                    self.reply("250 OK")
                elif verb == "QUIT":
                    self.reply("221 bye")
                    return
                else:
                    self.reply("502 5.5.2 command not implemented")
        except (EOFError, OSError):
            return

    def auth(self, arg):
        """[user, password] from AUTH PLAIN or AUTH LOGIN, or None."""
        mechanism, _space, initial = arg.partition(" ")
        try:
            if mechanism.upper() == "PLAIN":
                if not initial:
                    self.reply("334 ")
                    initial = self.readline()
                _authz, user, password = base64.b64decode(initial).decode("utf-8").split("\0")
                return [user, password]
            if mechanism.upper() == "LOGIN":
                if initial:
                    user = base64.b64decode(initial).decode("utf-8")
                else:
                    self.reply("334 VXNlcm5hbWU6")
                    user = base64.b64decode(self.readline()).decode("utf-8")
                self.reply("334 UGFzc3dvcmQ6")
                return [user, base64.b64decode(self.readline()).decode("utf-8")]
        except (ValueError, UnicodeDecodeError):
            return None
        return None


class _SMTPServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class SMTPReceiver(_Served):
    """A plain SMTP server on 127.0.0.1 that records each mail; with ``password`` it refuses another password."""

    def __init__(self, host="127.0.0.1", port=0, password=None):
        self.host, self.port, self.password = host, port, password
        self.records, self.lock = [], threading.Lock()
        self._server = self._thread = None

    def start(self):
        self._server = _SMTPServer((self.host, self.port), _SMTPHandler)
        self._server.owner = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="smtp-receiver", daemon=True)
        self._thread.start()
        return self

    def messages(self):
        with self.lock:
            return [dict(r) for r in self.records]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--status", type=int, default=200, help="the HTTP status every request gets")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--smtp-port", type=int, default=0)
    args = parser.parse_args()
    webhook = WebhookReceiver(port=args.port, status=args.status, verbose=True).start()
    smtp = SMTPReceiver(port=args.smtp_port).start()
    print("webhook receiver: %s\nsmtp receiver: %s:%d" % (webhook.url, smtp.host, smtp.port), flush=True)
    seen = [0, 0]
    try:
        while True:
            time.sleep(0.5)
            for index, records in enumerate((webhook.messages(), smtp.messages())):
                for record in records[seen[index]:]:
                    print(json.dumps(record, ensure_ascii=False, default=str), flush=True)
                seen[index] = len(records)
    except KeyboardInterrupt:
        pass
    finally:
        webhook.stop()
        smtp.stop()


if __name__ == "__main__":
    main()
