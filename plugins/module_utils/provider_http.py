# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One small HTTP client for the providers' APIs (RunPod, vast.ai, Lambda, AutoDL; the inventory plugins and the
instance module).

Standard library only (urllib). What it guarantees:

- the API key comes from the option or the provider's environment variable, is sent only in the Authorization
  header (``Bearer <key>``, or the bare key where the provider wants that: AutoDL), and is scrubbed from every
  message this module raises (``ProviderAPIError``), at any verbosity;
- 401/403 give a message that names the environment variable to set;
- 429, 5xx, timeouts and refused connections are retried with exponential backoff (``Retry-After`` honoured,
  capped) within a bounded total time, then fail;
- a response larger than ``max_bytes``, a truncated body or a body that is not JSON is a clear error, never a
  traceback.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request

from ansible_collections.remote_gpu.trainer.plugins.module_utils.redact import redact, url_userinfo_problem

DEFAULT_MAX_BYTES = 32 * 1024 * 1024
RETRY_STATUSES = (429, 500, 502, 503, 504)


class ProviderAPIError(Exception):
    """A failure of a provider's API, with a message that is safe to show (the key is scrubbed)."""

    def __init__(self, message, status=None, kind="error"):
        super().__init__(redact(message))  # tokens of known shapes that a provider echoes (module_utils/redact.py)
        self.status = status
        self.kind = kind


def scrub(text, secret):
    """``text`` with ``secret`` (and its URL-quoted forms), user information in URLs and tokens of known shapes
    replaced by ``<redacted>``: module_utils/redact.py's ``redact``, the one owner."""
    return redact(text, [secret] if secret else ())


def resolve_api_key(option_value, env_var, environ, provider):
    """The key from the option, else from ``environ[env_var]``; a clear error naming the variable when neither is set."""
    key = option_value if option_value not in (None, "") else environ.get(env_var, "")
    key = (key or "").strip()
    if not key:
        raise ProviderAPIError(
            "%s: no API key. Set the environment variable %s on the controller, or the option api_key."
            % (provider, env_var),
            kind="no_key")
    return key


def _retry_after(headers, cap):
    value = (headers or {}).get("Retry-After") if headers is not None else None
    try:
        return max(0.0, min(float(value), cap))
    except (TypeError, ValueError):
        return None


class ProviderHTTP:
    """GET JSON from one provider's API with the guarantees listed in the module's docstring."""

    def __init__(self, provider, base_url, api_key, env_var, timeout=30.0, retry_budget=60.0, backoff_base=1.0,
                 backoff_cap=16.0, max_bytes=DEFAULT_MAX_BYTES, user_agent="remote_gpu.trainer", sleep=time.sleep,
                 clock=time.monotonic, opener=None, auth_scheme="Bearer"):
        self.provider = provider
        self.base_url = (base_url or "").rstrip("/")
        self.api_key = api_key
        self.env_var = env_var
        self.timeout = float(timeout)
        self.retry_budget = float(retry_budget)
        self.backoff_base = float(backoff_base)
        self.backoff_cap = float(backoff_cap)
        self.max_bytes = int(max_bytes)
        self.user_agent = user_agent
        self.sleep = sleep
        self.clock = clock
        self.opener = opener or urllib.request.build_opener(urllib.request.ProxyHandler())
        self.auth_scheme = auth_scheme
        self.requests = 0
        problem = url_userinfo_problem(self.base_url, "%s: api_url" % provider)
        if problem:  # a permanent error: refused before any request, never retried, never blamed on DNS
            raise ProviderAPIError(problem, kind="bad_url")
        parsed = urllib.parse.urlparse(self.base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ProviderAPIError("%s: api_url must be an http(s) URL, got %r." % (provider, self._scrub(base_url)),
                                   kind="bad_url")

    def _scrub(self, text):
        return scrub(text, self.api_key)

    def _fail(self, message, status=None, kind="error"):
        raise ProviderAPIError(self._scrub("%s: %s" % (self.provider, message)), status=status, kind=kind)

    def url(self, path, query=None):
        url = self.base_url + "/" + path.lstrip("/")
        if query:
            url += "?" + urllib.parse.urlencode(query)
        return url

    def get_json(self, path, query=None):
        """GET ``path`` (relative to the base URL) with ``query`` and return the decoded JSON."""
        return self.request_json("GET", path, query)

    def request_json(self, method, path, query=None, body=None):
        """``method`` ``path`` (relative to the base URL) with ``query`` and a JSON ``body`` (None: no body); the
        decoded JSON answer, or None for an empty answer (a 204). Retries as ``get_json`` does."""
        url = self.url(path, query)
        data = None if body is None else json.dumps(body).encode("utf-8")
        started = self.clock()
        delay = self.backoff_base
        attempt = 0
        while True:
            attempt += 1
            outcome, detail, wait_hint = self._once(url, method, data)
            if outcome == "ok":
                return detail
            # outcome == "retry": a 429, a 5xx or a network error
            elapsed = self.clock() - started
            wait = wait_hint if wait_hint is not None else min(delay, self.backoff_cap)
            if elapsed + wait > self.retry_budget:
                self._fail("%s; gave up after %d attempt(s) in %.0f s (retry budget %.0f s)."
                           % (detail, attempt, elapsed, self.retry_budget), kind="retries_exhausted")
            self.sleep(wait)
            delay *= 2

    def _once(self, url, method="GET", data=None):
        headers = {
            "Authorization": ("%s %s" % (self.auth_scheme, self.api_key)) if self.auth_scheme else self.api_key,
            "Accept": "application/json",
            "User-Agent": self.user_agent,
        }
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, method=method, headers=headers, data=data)
        self.requests += 1
        shown = self._scrub(urllib.parse.urlsplit(url)._replace(query="").geturl())
        try:
            response = self.opener.open(request, timeout=self.timeout)
        except urllib.error.HTTPError as err:
            status = err.code
            try:
                body = err.read(2048).decode("utf-8", "replace")
            except Exception:  # pylint: disable=broad-except
                body = ""
            finally:
                err.close()
            if status in (401, 403):
                self._fail("the API refused the key (HTTP %d) at %s. Set the environment variable %s "
                           "(or the option api_key) to a valid %s API key." % (status, shown, self.env_var, self.provider),
                           status=status, kind="auth")
            if status in RETRY_STATUSES:
                return "retry", "HTTP %d from %s" % (status, shown), _retry_after(err.headers, self.backoff_cap)
            self._fail("HTTP %d from %s: %s" % (status, shown, " ".join(body.split())[:300]), status=status,
                       kind="http")
        except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError, http.client.HTTPException,
                OSError) as err:
            reason = getattr(err, "reason", err)
            return "retry", "cannot reach %s (%s)" % (shown, reason or type(err).__name__), None
        announced = response.headers.get("Content-Length") if response.headers is not None else None
        try:
            with response:
                body = response.read(self.max_bytes + 1)
        except http.client.IncompleteRead as err:
            self._fail("truncated response from %s (%d bytes received, more announced)." % (shown, len(err.partial)),
                       kind="truncated")
        except (socket.timeout, TimeoutError) as err:
            return "retry", "timed out reading %s (%s)" % (shown, err), None
        except (http.client.HTTPException, OSError) as err:
            self._fail("broken response from %s (%s)." % (shown, type(err).__name__), kind="truncated")
        if len(body) > self.max_bytes:
            self._fail("response from %s is larger than %d bytes; refused." % (shown, self.max_bytes), kind="too_large")
        if announced is not None and announced.strip().isdigit() and len(body) < int(announced):
            self._fail("truncated response from %s (%d of %s announced bytes received)." % (shown, len(body), announced),
                       kind="truncated")
        if not body.strip() and method != "GET":
            return "ok", None, None
        try:
            return "ok", json.loads(body.decode("utf-8")), None
        except (UnicodeDecodeError, ValueError, RecursionError) as err:  # RecursionError: nested deeper than json can
            self._fail("malformed response from %s: not JSON (%s; %d bytes)." % (shown, err.__class__.__name__, len(body)),
                       kind="malformed")


AUTODL_AUTH_WORDS = ("auth", "token", "login", "permission", "forbidden")


def autodl_data(body, what, env_var="AUTODL_TOKEN"):
    """The ``data`` of an AutoDL developer-API answer (``{"code": "Success", "msg": "", "data": ...}``).

    AutoDL answers HTTP 200 with an error code in the body: any ``code`` other than ``Success`` is a
    ``ProviderAPIError`` that shows the code and AutoDL's message (and names ``env_var`` when the code is about the
    token). A body that is not such an object is a clear error too."""
    if not isinstance(body, dict) or "code" not in body:
        raise ProviderAPIError("autodl: %s answered %s, not AutoDL's {code, msg, data} object; nothing from it is "
                               "used." % (what, type(body).__name__), kind="malformed")
    code = body.get("code")
    if code != "Success":
        msg = " ".join(str(body.get("msg") or "").split())[:300]
        hint = ""
        if any(word in str(code).lower() for word in AUTODL_AUTH_WORDS):
            hint = " Set the environment variable %s (or the option api_key) to a valid AutoDL developer token." % env_var
        raise ProviderAPIError("autodl: %s answered error code %s (HTTP 200): %s.%s"
                               % (what, code, msg or "no message", hint), kind="api_code")
    return body.get("data")
