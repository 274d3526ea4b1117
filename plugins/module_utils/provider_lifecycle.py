# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Stop, start and terminate an instance through its provider's API (for the module remote_gpu.trainer.instance).

The pure part: ``PROVIDERS`` (key variable, default URL, auth scheme), ``VERBS`` (the provider's verb for each
wanted state, or why it has none), ``observed_state`` (a provider's record -> running / stopped / absent /
transition) and ``plan`` (what to do, or the clear refusal). ``Lifecycle`` does the I/O with ``ProviderHTTP``:
read the state, call the verb, wait until the provider reports the wanted state or the timeout passes.

Sources of each verb: tests/lab/providers/README.md (RunPod REST reference, vast-cli ``vast.py``, Lambda's Cloud API
docs, AutoDL Pro clients).
"""

from __future__ import annotations

import time
import urllib.parse

from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_http import (
    ProviderAPIError, ProviderHTTP, autodl_data)

STATES = ("running", "stopped", "absent")

PROVIDERS = {
    "runpod": {"env_var": "RUNPOD_API_KEY", "url": "https://rest.runpod.io/v1", "auth_scheme": "Bearer"},
    "vastai": {"env_var": "VAST_API_KEY", "url": "https://console.vast.ai", "auth_scheme": "Bearer"},
    "lambda": {"env_var": "LAMBDA_API_KEY", "url": "https://cloud.lambda.ai", "auth_scheme": "Bearer"},
    "autodl": {"env_var": "AUTODL_TOKEN", "url": "https://api.autodl.com", "auth_scheme": None},
}

AUTODL_PRO = "/api/v1/dev/instance/pro/"


def _verb(name, method, path, body=None):
    return {"name": name, "method": method, "path": path, "body": body}


# provider -> wanted state -> the provider's verb (path and body templates take {id}), or a str: why there is none.
VERBS = {
    "runpod": {
        "running": _verb("start", "POST", "/pods/{id}/start"),
        "stopped": _verb("stop", "POST", "/pods/{id}/stop"),
        "absent": _verb("terminate", "DELETE", "/pods/{id}"),
    },
    "vastai": {
        "running": _verb("start", "PUT", "/api/v0/instances/{id}/", {"state": "running"}),
        "stopped": _verb("stop", "PUT", "/api/v0/instances/{id}/", {"state": "stopped"}),
        "absent": _verb("destroy", "DELETE", "/api/v0/instances/{id}/"),
    },
    "lambda": {
        "running": "Lambda Cloud has no start: an instance runs from launch until it is terminated, and a terminated "
                   "one cannot be started again (launch a new one)",
        "stopped": "Lambda Cloud has no stop: an instance bills until it is terminated (state=absent, which deletes "
                   "its local disk; only the attached filesystem survives), and sudo shutdown does not stop billing",
        "absent": _verb("terminate", "POST", "/api/v1/instance-operations/terminate", {"instance_ids": ["{id}"]}),
    },
    "autodl": {
        "running": _verb("power_on", "POST", AUTODL_PRO + "power_on", {"instance_uuid": "{id}", "payload": "gpu"}),
        "stopped": _verb("power_off", "POST", AUTODL_PRO + "power_off", {"instance_uuid": "{id}"}),
        "absent": _verb("release", "POST", AUTODL_PRO + "release", {"instance_uuid": "{id}"}),
    },
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
            "body": _fill(verb["body"], str(pid))}


def observed_state(provider, record):
    """(state, raw status) of the provider's record: state is running, stopped, absent or transition (starting,
    stopping, booting, ...). ``record`` None means the provider does not know the instance (absent)."""
    if record is None:
        return "absent", None
    if provider == "autodl":  # pro/status answers the status string itself
        raw = str(record if not isinstance(record, dict) else record.get("status") or "").lower()
        table = {"running": "running", "shutdown": "stopped", "released": "absent"}
        return table.get(raw, "transition"), raw
    if not isinstance(record, dict):
        raise ProviderAPIError("%s: the instance's record is %s, not an object." % (provider, type(record).__name__),
                               kind="malformed")
    if provider == "runpod":
        raw = str(record.get("desiredStatus") or "").upper()
        table = {"RUNNING": "running", "EXITED": "stopped", "TERMINATED": "absent"}
        return table.get(raw, "transition"), raw
    if provider == "vastai":
        actual = str(record.get("actual_status") or "").lower()
        intended = str(record.get("intended_status") or "").lower()
        raw = "%s (intended %s)" % (actual or "none", intended or "none")
        if actual == "running" and intended != "stopped":
            return "running", raw
        if actual in ("exited", "stopped", "offline") and intended != "running":
            return "stopped", raw
        return "transition", raw
    raw = str(record.get("status") or "").lower()  # lambda
    table = {"active": "running", "unhealthy": "running", "terminated": "absent"}
    return table.get(raw, "transition"), raw


def plan(provider, state, current, pid):
    """What to do to bring an instance from ``current`` (observed_state's state) to ``state``.

    Returns None when nothing is to be done (idempotence), else the verb_request; ProviderAPIError with a clear
    message when it cannot be done: a verb the provider does not have, an instance that does not exist, or an AutoDL
    Pro instance that is not powered off before its release."""
    if state == current:
        return None
    if current == "absent":
        raise ProviderAPIError("%s: instance %s does not exist (or was terminated); it cannot be made %s."
                               % (provider, pid, state), kind="absent")
    request = verb_request(provider, state, pid)
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

    def __init__(self, provider, client, sleep=time.sleep, clock=time.monotonic):
        self.provider = provider
        self.client = client
        self.sleep = sleep
        self.clock = clock
        self.record = None
        self.found = False

    def read(self, pid):
        """(state, raw status) as the provider reports it now. Keeps the record in ``self.record`` and whether the
        provider knows the id at all in ``self.found`` (False: not found, a 404 or AutoDL's not-found code)."""
        quoted = urllib.parse.quote(str(pid), safe="")
        self.record, self.found = None, False
        try:
            if self.provider == "runpod":
                record = self.client.get_json("/pods/%s" % quoted)
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
        return observed_state(self.provider, record)

    def snapshot(self, pid):
        """AutoDL Pro only: the instance's snapshot (``proxy_host``, ``ssh_port``, ...), where its address is."""
        return autodl_data(self.client.get_json(AUTODL_PRO + "snapshot", {"instance_uuid": str(pid)}),
                           "GET %ssnapshot for %s" % (AUTODL_PRO, pid))

    def act(self, request):
        answer = self.client.request_json(request["method"], request["path"], body=request["body"])
        if self.provider == "autodl":
            autodl_data(answer, "%s %s" % (request["method"], request["path"]))
        elif self.provider == "vastai" and isinstance(answer, dict) and answer.get("success") is False:
            raise ProviderAPIError("vastai: %s %s answered success=false: %s" % (
                request["method"], request["path"], " ".join(str(answer.get("msg") or answer.get("error")).split())[:300]),
                kind="refused")
        return answer

    def wait_for(self, pid, wanted, timeout, interval):
        """Poll until the provider reports ``wanted`` -> (reached, state, raw) within ``timeout`` seconds."""
        deadline = self.clock() + float(timeout)
        while True:
            state, raw = self.read(pid)
            if state == wanted:
                return True, state, raw
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
