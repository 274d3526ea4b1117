# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Is the instance that an API verb would hit the host we mean? (pure; for the module remote_gpu.trainer.instance)

Two checks, whichever the platform allows:

- the id: the box's own id (RunPod ``RUNPOD_POD_ID``, vast.ai ``CONTAINER_ID``, read on the box by
  remote_gpu.trainer.box_identity) must equal the id the verb would use. Checked before any request, so a wrong id
  is never even read;
- the address: where the box has no id of its own (Lambda, AutoDL Pro) or sets none, the provider's record of the id
  must point at the host: its SSH address and port (the ones the inventory plugins make ``ansible_host`` and
  ``ansible_port`` from, provider_hosts) against ``expect_address``/``expect_port``.

And an id the provider does not know, or reports as terminated, is never taken as "already stopped" when a check
was asked for. Every refusal is a ``ProviderAPIError`` with a stable ``kind`` and a message that says what to check
in the provider's console.
"""

from __future__ import annotations

import ipaddress
import socket

from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_hosts import (
    autodl_ssh, runpod_ssh, vastai_ssh)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_http import ProviderAPIError

# provider -> (the host variable that carries the id, the console page that lists the instances)
CONSOLES = {
    "runpod": ("runpod_pod_id", "the Pods page of RunPod's console"),
    "vastai": ("vastai_instance_id", "the Instances page of vast.ai's console"),
    "lambda": ("lambda_instance_id", "the Instances page of Lambda Cloud's dashboard"),
    "autodl": ("autodl_instance_uuid", "容器实例 (instances) in AutoDL's console"),
}


def _check_console(provider, pid, host):
    var, page = CONSOLES[provider]
    who = "the instance that serves %s" % host if host else "the instance"
    return ("Check %s: find %s (by its address and port), and set %s to its id (or refresh a cached inventory: "
            "ansible-inventory --flush-cache). Nothing was called on %s." % (page, who, var, pid))


def expectation(identity, expect_id, expect_address, expect_port):
    """What to compare -> {"by": "id"|"address"|None, "id", "address", "port", "source"}, or ProviderAPIError.

    ``identity`` is the registered result of remote_gpu.trainer.box_identity (or None). Its id wins over
    ``expect_id``'s absence; ``expect_id`` given by hand wins over it only when they agree (they must: both name
    this box). Without an id, the address decides; with nothing at all, ``by`` is None (no check)."""
    source = "expect_id"
    box_id = None
    if identity:
        if not isinstance(identity, dict):
            raise ProviderAPIError("identity must be the registered result of remote_gpu.trainer.box_identity, "
                                   "not %s." % type(identity).__name__, kind="bad_identity")
        if identity.get("unreachable") or identity.get("failed") or identity.get("error"):
            raise ProviderAPIError(
                "the box's own identity could not be read (%s), so it is not known which instance this host is; "
                "nothing was called. Fix what the message says, or check the instance in the provider's console."
                % " ".join(str(identity.get("msg") or identity.get("error") or "failed").split())[:300],
                kind="identity_unreadable")
        if identity.get("skipped"):
            raise ProviderAPIError("the box's own identity was not read (its task was skipped); nothing was called.",
                                   kind="identity_unreadable")
        box_id = str(identity.get("id") or "").strip() or None
    expect_id = str(expect_id or "").strip() or None
    if box_id and expect_id and box_id != expect_id:
        raise ProviderAPIError("expect_id %s and the box's own id %s disagree; nothing was called."
                               % (expect_id, box_id), kind="identity_mismatch")
    if box_id:
        expect_id, source = box_id, identity.get("source") or identity.get("variable") or "the box"
    if expect_id:
        return {"by": "id", "id": expect_id, "address": None, "port": None, "source": source}
    address = str(expect_address or "").strip() or None
    if address:
        try:
            port = int(expect_port) if expect_port not in (None, "") else 22
        except (TypeError, ValueError):
            raise ProviderAPIError("expect_port must be a port number, not %r." % (expect_port,),
                                   kind="bad_identity") from None
        return {"by": "address", "id": None, "address": address, "port": port, "source": "expect_address"}
    if identity:
        raise ProviderAPIError("the box gives no id of its own (%s) and no expect_address was given to match the "
                               "provider's record against; nothing was called." % (
                                   identity.get("msg") or "no id"), kind="nothing_to_verify")
    return {"by": None, "id": None, "address": None, "port": None, "source": None}


def check_id(provider, pid, expected, host=None):
    """Refuse when the box's id differs from the id the verb would use (called before any request)."""
    if expected["by"] != "id" or expected["id"] == pid:
        return
    var = CONSOLES[provider][0]
    raise ProviderAPIError(
        "%s: refused: %s is %s, but the box%s says it is instance %s (%s). The verb would hit another instance "
        "(a stale or hand-typed id?). Set %s to %s if that is right, after checking %s; nothing was called."
        % (provider, var, pid, " " + host if host else "", expected["id"], expected["source"], var, expected["id"],
           CONSOLES[provider][1]), kind="identity_mismatch")


def check_found(provider, pid, found, current, host=None):
    """Refuse an instance that the provider does not know, or reports as terminated, when a check was asked for."""
    if not found:
        raise ProviderAPIError("%s: instance %s is not found: the provider does not know this id, so nothing was "
                               "stopped or terminated, and the box%s may still be billing. %s"
                               % (provider, pid, " " + host if host else "", _check_console(provider, pid, host)),
                               kind="instance_not_found")
    if current == "absent":
        raise ProviderAPIError("%s: the provider reports instance %s as terminated, yet it is expected to be the "
                               "host%s. %s" % (provider, pid, " " + host if host else "",
                                               _check_console(provider, pid, host)), kind="instance_gone")


def record_address(provider, record, snapshot=None):
    """(host, port) of the provider's record of an instance, as the inventory plugins address it; (None, None)."""
    if provider == "runpod" and isinstance(record, dict):
        return runpod_ssh(record)
    if provider == "vastai" and isinstance(record, dict):
        return vastai_ssh(record)
    if provider == "lambda" and isinstance(record, dict):
        ip = record.get("ip")
        return (ip.strip(), 22) if isinstance(ip, str) and ip.strip() else (None, None)
    if provider == "autodl":
        return autodl_ssh(snapshot)
    return None, None


def _norm(host):
    return str(host or "").strip().rstrip(".").lower()


def _addresses(host, resolve):
    try:
        return {str(ipaddress.ip_address(host))}
    except ValueError:
        pass
    try:
        return set(info[4][0] for info in resolve(host, None))
    except (OSError, UnicodeError, ValueError):
        return set()


def same_address(left, right, resolve=socket.getaddrinfo):
    """Whether two host names or addresses name the same host: equal, or resolving to a shared address."""
    a, b = _norm(left), _norm(right)
    if not a or not b:
        return False
    if a == b:
        return True
    first, second = _addresses(a, resolve), _addresses(b, resolve)
    return bool(first & second)


def check_address(provider, pid, expected, observed, host=None, resolve=socket.getaddrinfo):
    """Refuse when the provider's record of ``pid`` does not point at the host (address and port)."""
    if expected["by"] != "address":
        return
    address, port = observed
    if address and port == expected["port"] and same_address(address, expected["address"], resolve):
        return
    shown = "%s:%s" % (address, port) if address else "no SSH address"
    raise ProviderAPIError(
        "%s: refused: the provider's record of instance %s points at %s, but the host%s is %s:%s. The verb would hit "
        "another instance (a stale or hand-typed id?). %s" % (
            provider, pid, shown, " " + host if host else "", expected["address"], expected["port"],
            _check_console(provider, pid, host)), kind="address_mismatch")
