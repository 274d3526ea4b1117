# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Stop, start and terminate an instance through its provider's API (for the module remote_gpu.trainer.instance).

The pure part: ``PROVIDERS`` (key variable, default URL, auth scheme), ``VERBS`` (the provider's verb for each
wanted state, or why it has none), ``observed_state`` (a provider's record -> running / stopped / absent /
transition, or a state that will not change by itself: preempted / unhealthy / unknown, read by provider_state)
and ``plan`` (what to do, or the clear refusal). ``Lifecycle`` does the I/O with ``ProviderHTTP``: read the state,
call the verb, wait until the provider reports the wanted state or the timeout passes; it never waits on a state
that does not end by itself.

Sources of each verb: tests/lab/providers/README.md (RunPod REST reference, vast-cli ``vast.py``, Lambda's Cloud API
docs, AutoDL Pro clients).
"""

from __future__ import annotations

import time
import urllib.parse

from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_http import (
    ProviderAPIError, ProviderHTTP, autodl_data)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_state import (
    allowed_actions, provider_state)

STATES = ("running", "stopped", "absent", "restarted")

# observed states that do not end by themselves: nothing waits on them (see plan)
STUCK = ("preempted", "unhealthy", "unknown")

RUNPOD_V2_URL = "https://api.runpod.io"


def runpod_v2_url(api_url):
    """RunPod's API v2 base URL for a v1 ``api_url``: RunPod's own (``https://api.runpod.io``) for the default v1 URL,
    else ``api_url`` without its trailing ``/v1`` (a proxy or the test fake that serves both)."""
    api_url = (api_url or PROVIDERS["runpod"]["url"]).rstrip("/")
    if api_url == PROVIDERS["runpod"]["url"].rstrip("/"):
        return RUNPOD_V2_URL
    return api_url[:-3] if api_url.endswith("/v1") else api_url


PROVIDERS = {
    "runpod": {"env_var": "RUNPOD_API_KEY", "url": "https://rest.runpod.io/v1", "auth_scheme": "Bearer"},
    "vastai": {"env_var": "VAST_API_KEY", "url": "https://console.vast.ai", "auth_scheme": "Bearer"},
    "lambda": {"env_var": "LAMBDA_API_KEY", "url": "https://cloud.lambda.ai", "auth_scheme": "Bearer"},
    "autodl": {"env_var": "AUTODL_TOKEN", "url": "https://api.autodl.com", "auth_scheme": None},
}

AUTODL_PRO = "/api/v1/dev/instance/pro/"


def _verb(name, method, path, body=None, api="v1"):
    return {"name": name, "method": method, "path": path, "body": body, "api": api}


# provider -> wanted state -> the provider's verb (path and body templates take {id}), or a str: why there is none.
VERBS = {
    "runpod": {
        "running": _verb("start", "POST", "/pods/{id}/start"),
        "stopped": _verb("stop", "POST", "/pods/{id}/stop"),
        "absent": _verb("terminate", "DELETE", "/pods/{id}"),
        # REST v1 documents no success answer for /pods/{id}/restart; v2's action does ("returns updated pod")
        "restarted": _verb("restart", "POST", "/v2/pods/{id}/action", {"action": "restart"}, api="v2"),
    },
    "vastai": {
        "running": _verb("start", "PUT", "/api/v0/instances/{id}/", {"state": "running"}),
        "stopped": _verb("stop", "PUT", "/api/v0/instances/{id}/", {"state": "stopped"}),
        "absent": _verb("destroy", "DELETE", "/api/v0/instances/{id}/"),
        "restarted": _verb("reboot", "PUT", "/api/v0/instances/reboot/{id}/"),
    },
    "lambda": {
        "running": "Lambda Cloud has no start: an instance runs from launch until it is terminated, and a terminated "
                   "one cannot be started again (launch a new one)",
        "stopped": "Lambda Cloud has no stop: an instance bills until it is terminated (state=absent, which deletes "
                   "its local disk; only the attached filesystem survives), and sudo shutdown does not stop billing",
        "absent": _verb("terminate", "POST", "/api/v1/instance-operations/terminate", {"instance_ids": ["{id}"]}),
        "restarted": _verb("restart", "POST", "/api/v1/instance-operations/restart", {"instance_ids": ["{id}"]}),
    },
    "autodl": {
        "running": _verb("power_on", "POST", AUTODL_PRO + "power_on", {"instance_uuid": "{id}", "payload": "gpu"}),
        "stopped": _verb("power_off", "POST", AUTODL_PRO + "power_off", {"instance_uuid": "{id}"}),
        "absent": _verb("release", "POST", AUTODL_PRO + "release", {"instance_uuid": "{id}"}),
        "restarted": "AutoDL Pro has no restart verb: power it off (state=stopped), then on (state=running)",
    },
}

# (provider, stuck state) -> the wanted states whose verb the provider carries out from there; any other wanted state
# (but absent, which every state allows) fails at once with what the state means (provider_state's message)
STUCK_VERBS = {
    ("runpod", "unhealthy"): ("stopped", "restarted"),
    ("runpod", "preempted"): ("stopped", "running"),   # resume a spot pod (it may find no capacity: then it times out)
    ("vastai", "unhealthy"): ("stopped", "running", "restarted"),  # not on an unknown/offline host, see plan
    ("vastai", "preempted"): ("stopped",),              # running again needs the bid to win: not a verb
    ("lambda", "unhealthy"): ("restarted",),
}


def _fill(template, pid):
    if isinstance(template, str):
        return template.replace("{id}", pid)
    if isinstance(template, list):
        return [_fill(item, pid) for item in template]
    if isinstance(template, dict):
        return {key: _fill(value, pid) for key, value in template.items()}
    return template


def verb_request(provider, state, pid):
    """The provider's verb for ``state`` on instance ``pid``: {name, method, path, body}; ProviderAPIError (kind
    ``unsupported``) with the reason when the provider has none."""
    verb = VERBS[provider][state]
    if isinstance(verb, str):
        raise ProviderAPIError("%s: cannot make instance %s %s: %s." % (provider, pid, state, verb), kind="unsupported")
    quoted = urllib.parse.quote(str(pid), safe="")
    return {"name": verb["name"], "method": verb["method"], "path": verb["path"].replace("{id}", quoted),
            "body": _fill(verb["body"], str(pid)), "api": verb.get("api", "v1")}


def observed_state(provider, record):
    """(state, raw status) of the provider's record, read by provider_state: state is running (a RunPod pod without
    direct SSH too: the provider runs it), stopped, absent, transition (starting, stopping: it ends by itself), or
    one that does not end by itself: preempted, unhealthy or unknown. ``record`` None means the provider does not know
    the instance (absent)."""
    return observed(provider, record)[:2]


def observed(provider, record):
    """(state, raw status, provider_state's answer) of the provider's record (see observed_state)."""
    if record is None:
        return "absent", None, provider_state(provider, None)
    if provider != "autodl" and not isinstance(record, dict):
        raise ProviderAPIError("%s: the instance's record is %s, not an object." % (provider, type(record).__name__),
                               kind="malformed")
    read = dict(provider_state(provider, record), actions=allowed_actions(provider, record))
    state = {"running": "running", "unreachable_direct": "running", "stopped": "stopped", "terminated": "absent",
             "starting": "transition", "stopping": "transition"}.get(read["state"], read["state"])
    return state, read["raw"], read


def plan(provider, state, current, pid, read=None):
    """What to do to bring an instance from ``current`` (observed_state's state) to ``state``.

    Returns None when nothing is to be done (idempotence), else the verb_request; ProviderAPIError with a clear
    message when it cannot be done: a verb the provider does not have, an instance that does not exist, an AutoDL
    Pro instance that is not powered off before its release, or a state that will not change by itself (preempted,
    unhealthy, unknown) from which the provider cannot carry out the verb: then the message says what the state
    means and what to do (``read``: provider_state's answer), at once, without waiting; or a verb that is not among
    the actions the provider lists as valid for the instance now (``read["actions"]``, RunPod v2 and Lambda).
    ``restarted`` always acts."""
    if state == current and state != "restarted":
        return None
    if current == "absent":
        raise ProviderAPIError("%s: instance %s does not exist (or was terminated); it cannot be made %s."
                               % (provider, pid, state), kind="absent")
    if current in STUCK and state != "absent":
        raw = (read or {}).get("raw")
        host_lost = provider == "vastai" and str(raw or "").split(" ", 1)[0] in ("unknown", "offline")
        if host_lost or state not in STUCK_VERBS.get((provider, current), ()):
            meaning = (read or {}).get("message") or (read or {}).get("warning") or (
                "%s: instance %s is %s (%s)." % (provider, pid, current, raw))
            raise ProviderAPIError("%s It does not change by itself, so nothing waits for it; no verb was called "
                                   "to make it %s." % (meaning, state), kind="instance_%s" % current)
    request = verb_request(provider, state, pid)
    allowed = (read or {}).get("actions")
    if allowed is not None and request["name"] not in allowed:
        raise ProviderAPIError("%s: instance %s is %s, and the provider lists %s as its valid actions now; %s is not "
                               "among them, so it was not called.%s" % (
                                   provider, pid, current, ", ".join(sorted(allowed)) or "no action", request["name"],
                                   (" " + read["message"]) if (read or {}).get("message") else ""),
                               kind="action_not_available")
    if provider == "autodl" and state == "absent" and current != "stopped":
        raise ProviderAPIError("autodl: AutoDL Pro releases only a powered-off instance, and %s is %s. Power it off "
                               "first (state=stopped), then release it (state=absent); this module never powers off "
                               "implicitly before a release." % (pid, current), kind="unsupported")
    return request


def _not_found(err):
    return err.status == 404 or (err.kind == "api_code" and any(
        word in str(err) for word in ("NotFound", "NotExist", "not_found", "not exist")))


class Lifecycle:
    """Read and change one provider's instance through ``ProviderHTTP``."""

    def __init__(self, provider, client, sleep=time.sleep, clock=time.monotonic, v2_client=None):
        self.provider = provider
        self.client = client
        self.v2_client = v2_client  # RunPod's API v2: the observed status, and the restart action
        self.sleep = sleep
        self.clock = clock
        self.record = None
        self.found = False
        self.state = None  # provider_state's answer of the last read
        self.observed_ok = None  # RunPod: whether the last read had the v2 (observed) status
        self.stuck = False  # whether the last wait_for ended on a state that does not change by itself

    def _runpod_observed(self, quoted):
        """The pod's v2 record, or None when there is no v2 client or v2 does not answer (the v1 intent is read)."""
        if self.v2_client is None:
            return None
        try:
            body = self.v2_client.get_json("/v2/pods/%s" % quoted)
        except ProviderAPIError:
            self.observed_ok = False
            return None
        self.observed_ok = isinstance(body, dict)
        return body if isinstance(body, dict) else None

    def read(self, pid):
        """(state, raw status) as the provider reports it now. Keeps the record in ``self.record`` and whether the
        provider knows the id at all in ``self.found`` (False: not found, a 404 or AutoDL's not-found code)."""
        quoted = urllib.parse.quote(str(pid), safe="")
        self.record, self.found = None, False
        try:
            if self.provider == "runpod":
                record = self.client.get_json("/pods/%s" % quoted)
                v2 = self._runpod_observed(quoted) if isinstance(record, dict) else None
                if v2 is not None:
                    record = dict(record, observed=v2)
            elif self.provider == "vastai":
                body = self.client.get_json("/api/v0/instances/%s/" % quoted)
                record = body.get("instances") if isinstance(body, dict) else body
            elif self.provider == "lambda":
                body = self.client.get_json("/api/v1/instances/%s" % quoted)
                record = body.get("data") if isinstance(body, dict) else body
            else:
                record = autodl_data(self.client.get_json(AUTODL_PRO + "status", {"instance_uuid": str(pid)}),
                                     "GET %sstatus for %s" % (AUTODL_PRO, pid))
        except ProviderAPIError as err:
            if _not_found(err):
                return "absent", None
            raise
        self.record, self.found = record, record is not None
        state, raw, self.state = observed(self.provider, record)
        return state, raw

    def snapshot(self, pid):
        """AutoDL Pro only: the instance's snapshot (``proxy_host``, ``ssh_port``, ...), where its address is."""
        return autodl_data(self.client.get_json(AUTODL_PRO + "snapshot", {"instance_uuid": str(pid)}),
                           "GET %ssnapshot for %s" % (AUTODL_PRO, pid))

    def act(self, request):
        client = self.v2_client if request.get("api") == "v2" else self.client
        if client is None:
            raise ProviderAPIError("%s: %s needs RunPod's API v2, and no v2 URL is known."
                                   % (self.provider, request["name"]), kind="unsupported")
        answer = client.request_json(request["method"], request["path"], body=request["body"])
        if self.provider == "autodl":
            autodl_data(answer, "%s %s" % (request["method"], request["path"]))
        elif self.provider == "vastai" and isinstance(answer, dict) and answer.get("success") is False:
            raise ProviderAPIError("vastai: %s %s answered success=false: %s" % (
                request["method"], request["path"], " ".join(str(answer.get("msg") or answer.get("error")).split())[:300]),
                kind="refused")
        return answer

    def wait_for(self, pid, wanted, timeout, interval, before=None):
        """Poll until the provider reports ``wanted`` -> (reached, state, raw) within ``timeout`` seconds. It stops at
        once when the instance enters a state that does not end by itself (preempted, unhealthy, unknown) other than
        ``before``, the one it was in when the verb was called (the provider may not have applied the verb yet), or
        falls back into ``before`` after it left it (a restarted crashed instance that crashed again)."""
        deadline = self.clock() + float(timeout)
        left = False
        self.stuck = False
        while True:
            state, raw = self.read(pid)
            if state == wanted:
                return True, state, raw
            if state in STUCK and (state != before or left):
                self.stuck = True  # it ended the wait, not the timeout
                return False, state, raw
            left = left or state != before
            if self.clock() + interval > deadline:
                return False, state, raw
            self.sleep(interval)

    def settle(self, pid, timeout, interval):
        """Wait while the instance is in a transition (starting, stopping) -> (state, raw) at the end."""
        deadline = self.clock() + float(timeout)
        while True:
            state, raw = self.read(pid)
            if state != "transition" or self.clock() + interval > deadline:
                return state, raw
            self.sleep(interval)


def make_client(provider, api_key, api_url=None, timeout=30.0, retry_budget=60.0):
    spec = PROVIDERS[provider]
    return ProviderHTTP(provider, api_url or spec["url"], api_key, spec["env_var"], timeout=timeout,
                        retry_budget=retry_budget, auth_scheme=spec["auth_scheme"])


def make_v2_client(api_key, api_url=None, timeout=30.0, retry_budget=60.0):
    """RunPod's API v2 client (``runpod_v2_url`` of the v1 ``api_url``)."""
    spec = PROVIDERS["runpod"]
    return ProviderHTTP("runpod", runpod_v2_url(api_url), api_key, spec["env_var"], timeout=timeout,
                        retry_budget=retry_budget, auth_scheme=spec["auth_scheme"])
