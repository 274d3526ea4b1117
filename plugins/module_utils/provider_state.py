# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a provider's status words mean: the one owner of the state tables (pure functions, no I/O).

The inventory plugins and the module remote_gpu.trainer.instance both read a record's state here, so a status
word means the same thing everywhere. ``provider_state(provider, record)`` answers a dict:

- ``state``: one of ``STATES``:
  ``running`` (the provider says the box is up and usable),
  ``starting``/``stopping`` (a transition that ends by itself),
  ``stopped`` (stopped by the user: disk kept, GPU not billed),
  ``preempted`` (stopped by the market or the provider, not by the user),
  ``unhealthy`` (billing, or may be, but not usable: it will not change by itself),
  ``terminated`` (gone), ``unreachable_direct`` (RunPod: running, but it can never get direct SSH) and
  ``unknown`` (a status word no table knows: never counted as running);
- ``raw``: the provider's own status word(s) the state was read from;
- ``message``: what the state means and what to do, for the states that need a person (else None);
- ``warning``: set for ``unknown``: the word, and that it is not counted as running.

The tables are keyed by every status value the providers document (tests/fixtures/openapi: RunPod REST v1
``desiredStatus`` and v2 ``status`` enums, vast.ai's documented ``actual_status`` list and vast-cli's, Lambda's
``status`` enums of 1.5.3 and 1.8.3); tests/unit/plugins/module_utils/test_provider_state.py fails when a document gains a value that a
table lacks.
"""

from __future__ import annotations

STATES = ("running", "starting", "stopping", "stopped", "preempted", "unhealthy", "terminated", "unreachable_direct",
          "unknown")

# states that end by themselves: a caller may wait while a box is in one of them, never in any other
TRANSITIONS = ("starting", "stopping")

# RunPod REST v2 ``status``, the observed state (runpod-v2.json PodStatus).
RUNPOD_OBSERVED = {
    "PROVISIONING": "starting",
    "STARTING": "starting",
    "RUNNING": "running",
    "EXITED": "stopped",     # refined: EXITED while desired RUNNING is a crash (unhealthy) or, for spot, preempted
    "ERROR": "unhealthy",
    "TERMINATED": "terminated",
}
# RunPod REST v1 ``desiredStatus``: the intent ("the current expected status"), used only without an observed one.
RUNPOD_DESIRED = {
    "RUNNING": "running",    # refined: no public IP / 22 mapping yet -> starting; no way to get one -> unreachable_direct
    "EXITED": "stopped",
    "TERMINATED": "terminated",
}
# vast.ai ``actual_status`` (statuses.json: vast's show-instance docs and vast-cli _STATUS_COLORS); None: provisioning.
VASTAI_ACTUAL = {
    None: "starting",
    "created": "starting",
    "loading": "starting",
    "rebooting": "starting",
    "running": "running",
    "stopped": "stopped",
    "frozen": "unhealthy",   # paused with memory preserved: the GPU still bills
    "exited": "unhealthy",   # the container's process exited unexpectedly: a crash, not a stop (refined below)
    "unknown": "unhealthy",  # no recent heartbeat from the host
    "offline": "unhealthy",  # the host is disconnected from vast
}
# Lambda Cloud ``status`` (lambda.json 1.5.3 instance.status, and lambda-1.8.3.json InstanceStatus, which adds preempted).
LAMBDA_STATUS = {
    "booting": "starting",
    "active": "running",
    "unhealthy": "unhealthy",
    "terminating": "stopping",
    "terminated": "terminated",
    "preempted": "preempted",
}
# AutoDL 容器实例 Pro ``status`` (no published document: the words the Pro clients show, tests/lab/providers/README.md).
AUTODL_STATUS = {
    "creating": "starting",
    "starting": "starting",
    "running": "running",
    "shutting_down": "stopping",
    "stopping": "stopping",
    "shutdown": "stopped",
    "stopped": "stopped",
    "off": "stopped",
    "releasing": "stopping",
    "released": "terminated",
}

TABLES = {
    "runpod": RUNPOD_OBSERVED,
    "runpod_desired": RUNPOD_DESIRED,
    "vastai": VASTAI_ACTUAL,
    "lambda": LAMBDA_STATUS,
    "autodl": AUTODL_STATUS,
}

RUNPOD_DIRECT = ("RunPod pod %s runs, but it can never get direct SSH: %s. RunPod's SSH proxy carries an interactive "
                 "shell only (no rsync, no scp), so the collection cannot use it. Expose 22/tcp (a TCP port, not "
                 "http) on a pod with a public IP (Secure Cloud, or a Community Cloud machine with supportPublicIp), "
                 "then stop and start the pod, or terminate it and rent one that does.")

MESSAGES = {
    ("runpod", "unhealthy"): "RunPod pod %s is %s: its container is in an error state or exited while it should "
                             "run. It will not recover by itself; read its logs in the console, then restart it "
                             "(state=restarted) or terminate it (state=absent).",
    ("runpod", "preempted"): "RunPod spot (interruptible) pod %s is %s: the market stopped it, not you. Its volume "
                             "is kept; start it again (state=running) when capacity returns, or terminate it and "
                             "rent an on-demand pod.",
    ("vastai", "unhealthy"): "vast.ai instance %s is %s: %s. It will not change by itself and may still bill; "
                             "reboot it (state=restarted), or destroy it (state=absent) and rent another offer.",
    ("vastai", "preempted"): "vast.ai interruptible (bid) instance %s is %s: it was outbid, and the market paused "
                             "it, not you. Its disk is kept (and billed); it resumes by itself only when your bid "
                             "wins again. Raise the bid (vastai change bid %s --price ...), or stop it "
                             "(state=stopped) or destroy it (state=absent).",
    ("lambda", "unhealthy"): "Lambda instance %s is %s: it still bills but is not usable. Restart it "
                             "(state=restarted) or terminate it (state=absent); local disk dies with a terminate, "
                             "only the attached filesystem survives.",
    ("lambda", "preempted"): "Lambda instance %s is %s: Lambda took it back. It does not come back: launch a new "
                             "instance (with the same filesystem) and relaunch from the durable checkpoint.",
}

VAST_MEANING = {
    "frozen": "paused with its memory preserved, and the GPU still bills",
    "exited": "its container's process exited unexpectedly (a crash, not a stop)",
    "unknown": "vast has no recent heartbeat from its host",
    "offline": "its host machine is disconnected from vast",
}


def _upper(value):
    return str(value).strip().upper() if value not in (None, "") else ""


def _lower(value):
    return str(value).strip().lower() if value not in (None, "") else None


def _answer(state, raw, message=None, warning=None):
    return {"state": state, "raw": raw, "message": message, "warning": warning}


def _unknown(provider, pid, raw):
    return _answer("unknown", raw, None,
                   "%s: instance %s reports the status %r, which this collection does not know; it is counted as "
                   "'unknown', never as running." % (provider, pid, raw))


def runpod_direct_ssh(pod):
    """Why a running RunPod pod can never get direct SSH (a sentence), or None when it can or may still.

    ``pod`` is the REST v1 record; its ``observed`` key, when set, is the v2 record of the same pod."""
    observed = pod.get("observed") if isinstance(pod.get("observed"), dict) else None
    if observed is not None and _upper(observed.get("status")) == "RUNNING":
        ssh = observed.get("ssh") if isinstance(observed.get("ssh"), dict) else {}
        if ssh.get("direct") is None:
            # v2: "Null unless 22/tcp is in ports and the running pod has been assigned a public port for it"
            return "RunPod reports no direct SSH endpoint (ssh.direct is null) for the running pod"
        return None
    ports = pod.get("ports")
    if isinstance(ports, list) and ports and "22/tcp" not in [str(p).strip() for p in ports]:
        return "its ports (%s) do not expose 22/tcp" % ", ".join(str(p) for p in ports)
    machine = pod.get("machine") if isinstance(pod.get("machine"), dict) else {}
    if machine.get("supportPublicIp") is False and not pod.get("publicIp"):
        return "its machine has no public IP (supportPublicIp false)"
    return None


def _runpod(pod):
    pid = pod.get("id")
    desired = _upper(pod.get("desiredStatus"))
    observed = pod.get("observed") if isinstance(pod.get("observed"), dict) else None
    interruptible = bool(pod.get("interruptible"))
    if observed is not None and observed.get("status") not in (None, ""):
        word = _upper(observed.get("status"))
        raw = word if not desired else "%s (desired %s)" % (word, desired)
        if word not in RUNPOD_OBSERVED:
            return _unknown("runpod", pid, word)
        state = RUNPOD_OBSERVED[word]
        if word == "EXITED" and desired == "RUNNING":
            state = "preempted" if interruptible else "unhealthy"
    else:
        word = desired
        raw = word or None
        if word not in RUNPOD_DESIRED:
            return _unknown("runpod", pid, word or None)
        state = RUNPOD_DESIRED[word]
    if state == "running":
        why = runpod_direct_ssh(pod)
        if why:
            return _answer("unreachable_direct", raw, RUNPOD_DIRECT % (pid, why))
        if observed is None and not (pod.get("publicIp") and isinstance(pod.get("portMappings"), dict)
                                     and pod["portMappings"].get("22") not in (None, "")):
            state = "starting"  # v1 only: RUNNING is the intent; no address yet
    message = MESSAGES.get(("runpod", state))
    return _answer(state, raw, message % (pid, raw) if message else None)


def _vastai(instance):
    pid = instance.get("id")
    actual = _lower(instance.get("actual_status"))
    intended = _lower(instance.get("intended_status"))
    cur = _lower(instance.get("cur_state"))
    raw = "%s (intended %s)" % (actual, intended)
    if actual not in VASTAI_ACTUAL:
        return _unknown("vastai", pid, actual)
    state = VASTAI_ACTUAL[actual]
    bid = bool(instance.get("is_bid"))
    if bid and intended == "running" and (actual in ("stopped", "exited") or cur == "stopped"):
        # vast: an interruptible instance "may be paused if outbid ... resume automatically when priority returns"
        state = "preempted"
    elif actual == "exited" and intended in ("stopped", None):
        state = "stopped"  # a stop that the container's exit code shows as exited: the user asked for it
    elif actual == "stopped" and intended == "running":
        state = "starting"  # a start the scheduler has not placed yet
    elif state in ("running", "starting") and intended == "stopped":
        state = "stopping"
    message = MESSAGES.get(("vastai", state))
    if message and state == "unhealthy":
        message = message % (pid, raw, VAST_MEANING.get(actual, actual))
    elif message:
        message = message % (pid, raw, pid)
    return _answer(state, raw, message)


def _lambda(instance):
    pid = instance.get("id")
    word = _lower(instance.get("status"))
    if word not in LAMBDA_STATUS:
        return _unknown("lambda", pid, word)
    state = LAMBDA_STATUS[word]
    if state == "running" and not (isinstance(instance.get("ip"), str) and instance["ip"].strip()):
        state = "starting"
    message = MESSAGES.get(("lambda", state))
    return _answer(state, word, message % (pid, word) if message else None)


def _autodl(record):
    pid = record.get("uuid") if isinstance(record, dict) else None
    word = _lower(record.get("status") if isinstance(record, dict) else record)
    if word not in AUTODL_STATUS:
        return _unknown("autodl", pid, word)
    return _answer(AUTODL_STATUS[word], word)


def provider_state(provider, record):
    """The state of ``provider``'s instance ``record`` (see the module docstring). ``record`` None: the provider does
    not know the instance (``terminated``, raw None). AutoDL's record may be the bare status string (pro/status)."""
    if record is None:
        return _answer("terminated", None)
    if provider == "autodl":
        return _autodl(record)
    if not isinstance(record, dict):
        raise ValueError("%s: an instance record is %s, not an object" % (provider, type(record).__name__))
    if provider == "runpod":
        return _runpod(record)
    if provider == "vastai":
        return _vastai(record)
    if provider == "lambda":
        return _lambda(record)
    raise ValueError("unknown provider %r" % (provider,))


def lambda_durable_dir(instance):
    """The directory where the instance's first filesystem is mounted: its ``file_system_mounts`` entry's
    ``mount_point`` when the API gives one (a filesystem mounted elsewhere at launch), else Lambda's default
    ``/lambda/nfs/<name>``; None without a filesystem."""
    names = instance.get("file_system_names")
    name = names[0] if isinstance(names, list) and names and isinstance(names[0], str) and names[0] else None
    mounts = instance.get("file_system_mounts")
    if isinstance(mounts, list):
        for mount in mounts:
            point = mount.get("mount_point") if isinstance(mount, dict) else None
            if isinstance(point, str) and point.startswith("/") and ".." not in point.split("/"):
                return point.rstrip("/") or "/"
    return "/lambda/nfs/%s" % name if name else None


def allowed_actions(provider, record):
    """The actions the provider itself lists as valid for the instance now, where it publishes them (RunPod API v2
    ``actions``: start, stop, restart, terminate; Lambda's ``actions``: each ``{"available": bool}``), as a set of
    names; None where the record lists none."""
    if not isinstance(record, dict):
        return None
    if provider == "runpod":
        observed = record.get("observed") if isinstance(record.get("observed"), dict) else {}
        actions = observed.get("actions")
        if isinstance(actions, list):
            return {str(action) for action in actions}
    if provider == "lambda" and isinstance(record.get("actions"), dict):
        return {name for name, value in record["actions"].items()
                if isinstance(value, dict) and value.get("available") is True}
    return None
