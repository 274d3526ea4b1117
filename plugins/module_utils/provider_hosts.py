# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Providers' instance records -> inventory hosts (pure functions, no I/O).

Each ``<provider>_host(record)`` returns a dict:

- ``id``: the provider's id (a string);
- ``name``: the wanted inventory name (made unique by ``unique_names``);
- ``state``: ``ready`` (an SSH address is known), ``starting`` (the provider is still bringing it up: no address
  yet) or ``stopped`` (stopped, exited or being destroyed);
- ``address``/``port``: the SSH endpoint, or None;
- ``hostvars``: the same keys for every provider (``provider``, ``provider_id``, ``provider_status``, ``gpu_type``,
  ``gpu_count``, ``region``, ``price_per_hour``, ``interruptible``) plus ``trainer_price_per_hour`` for the
  billing checks, the id under the name that the profile's teardown verb reads (``runpod_pod_id``,
  ``vastai_instance_id``), and a curated copy of the provider's record under ``<provider>`` for ``compose``/``keyed_groups``.

A record that is not an object, or has no id, raises ``ValueError`` with a clear message.
"""

from __future__ import annotations

import re

_NAME_BAD = re.compile(r"[^A-Za-z0-9_.-]+")

# The fields of a provider's record that reach hostvars. Environment variables (``env``, ``extra_env``), onstart
# scripts and tokens are left out on purpose: they often hold secrets and ``ansible-inventory --list`` prints hostvars.
RUNPOD_KEEP = ("id", "name", "image", "desiredStatus", "costPerHr", "adjustedCostPerHr", "gpuCount", "gpu", "machine",
               "machineId", "publicIp", "portMappings", "ports", "interruptible", "lastStartedAt", "lastStatusChange",
               "containerDiskInGb", "volumeInGb", "volumeMountPath", "networkVolumeId", "templateId", "vcpuCount",
               "memoryInGb")
VASTAI_KEEP = ("id", "label", "actual_status", "intended_status", "cur_state", "status_msg", "gpu_name", "num_gpus",
               "gpu_ram", "geolocation", "dph_total", "is_bid", "public_ipaddr", "ssh_host", "ssh_port", "ports",
               "image_uuid", "image_runtype", "machine_id", "host_id", "disk_space", "cpu_ram", "start_date",
               "cuda_max_good", "driver_version", "reliability2")


def curated(record, keep):
    """Only the ``keep`` fields of ``record``, for hostvars."""
    return {key: record[key] for key in keep if key in record}


def _num(value, kind=float):
    try:
        return kind(value)
    except (TypeError, ValueError):
        return None


def _port(value):
    port = _num(value, int)
    return port if port is not None and 0 < port < 65536 else None


def _clean_name(value):
    return _NAME_BAD.sub("-", str(value or "")).strip("-.")


def _common(provider, pid, status, gpu_type, gpu_count, region, price, interruptible, record):
    return {
        "provider": provider,
        "provider_id": pid,
        "provider_status": status,
        "gpu_type": gpu_type,
        "gpu_count": gpu_count,
        "region": region,
        "price_per_hour": price,
        "interruptible": bool(interruptible),
        "trainer_price_per_hour": price if price is not None else 0,
        provider: record,
    }


def _require_record(record, provider):
    if not isinstance(record, dict):
        raise ValueError("%s: an instance record is %s, not an object" % (provider, type(record).__name__))
    pid = record.get("id")
    if pid in (None, ""):
        raise ValueError("%s: an instance record has no id" % provider)
    return str(pid)


def runpod_ssh(pod):
    """(ip, port) for a RunPod pod from the REST shape: ``publicIp`` and ``portMappings["22"]``; (None, None) if not ready."""
    ip = pod.get("publicIp")
    mappings = pod.get("portMappings")
    port = _port(mappings.get("22")) if isinstance(mappings, dict) else None
    if not ip or not isinstance(ip, str) or port is None:
        return None, None
    return ip, port


def runpod_host(pod):
    """One RunPod pod (REST ``GET /v1/pods`` item) -> host dict (see the module docstring)."""
    pid = _require_record(pod, "runpod")
    status = str(pod.get("desiredStatus") or "").upper()
    gpu = pod.get("gpu") if isinstance(pod.get("gpu"), dict) else {}
    machine = pod.get("machine") if isinstance(pod.get("machine"), dict) else {}
    gpu_count = _num(gpu.get("count"), int)
    if gpu_count is None:
        gpu_count = _num(pod.get("gpuCount"), int)
    gpu_type = gpu.get("displayName") or machine.get("gpuDisplayName") or gpu.get("id") or pod.get("gpuTypeId")
    region = machine.get("dataCenterId") or machine.get("location") or pod.get("dataCenterId")
    price = _num(pod.get("adjustedCostPerHr"))
    if price is None:
        price = _num(pod.get("costPerHr"))
    ip, port = runpod_ssh(pod)
    if status == "RUNNING":
        state = "ready" if ip else "starting"
    elif status in ("", "CREATED", "PROVISIONING", "STARTING", "RESTARTING"):
        state = "starting"
    else:  # EXITED, TERMINATED, ...
        state = "stopped"
    return {
        "id": pid,
        "name": _clean_name(pod.get("name")) or "runpod-" + _clean_name(pid),
        "state": state,
        "address": ip if state == "ready" else None,
        "port": port if state == "ready" else None,
        "hostvars": dict(_common("runpod", pid, status, gpu_type, gpu_count, region, price, pod.get("interruptible"),
                                 curated(pod, RUNPOD_KEEP)), runpod_pod_id=pid),
    }


def vastai_ssh(instance):
    """(host, port) as vast's CLI decides (vast.py ``_ssh_url``).

    A direct mapping of ``22/tcp`` wins, on ``public_ipaddr``; else the proxy ``ssh_host:ssh_port`` (``ssh_port + 1``
    for a jupyter runtype). (None, None) when neither is known yet."""
    ports = instance.get("ports") if isinstance(instance.get("ports"), dict) else {}
    direct = ports.get("22/tcp")
    if direct is not None:
        first = direct[0] if isinstance(direct, list) and direct else None
        port = _port(first.get("HostPort")) if isinstance(first, dict) else None
        ip = instance.get("public_ipaddr")
        ip = ip.strip() if isinstance(ip, str) else None
        if ip and port:
            return ip, port
        return None, None
    host = instance.get("ssh_host")
    port = _port(instance.get("ssh_port"))
    if not host or not isinstance(host, str) or port is None:
        return None, None
    if "jupyter" in str(instance.get("image_runtype") or ""):
        port = _port(port + 1)
    return host, port


def vastai_host(instance):
    """One vast.ai instance (``GET /api/v1/instances/`` item) -> host dict (see the module docstring)."""
    pid = _require_record(instance, "vastai")
    actual = str(instance.get("actual_status") or "").lower()
    intended = str(instance.get("intended_status") or "").lower()
    host, port = vastai_ssh(instance)
    if actual == "running" and intended != "stopped":
        state = "ready" if host else "starting"
    elif actual in ("exited", "stopped", "offline") or intended == "stopped":
        state = "stopped"
    else:  # created, loading, scheduling, None
        state = "starting"
    price = _num(instance.get("dph_total"))
    label = _clean_name(instance.get("label"))
    return {
        "id": pid,
        "name": label or "vastai-" + _clean_name(pid),
        "state": state,
        "address": host if state == "ready" else None,
        "port": port if state == "ready" else None,
        "hostvars": dict(_common("vastai", pid, actual or None, instance.get("gpu_name"),
                                 _num(instance.get("num_gpus"), int), instance.get("geolocation"), price,
                                 instance.get("is_bid"), curated(instance, VASTAI_KEEP)), vastai_instance_id=pid),
    }


def unique_names(hosts):
    """Give each host a unique ``name``: a name that two hosts share becomes ``<name>-<id>`` for each of them."""
    counts = {}
    for host in hosts:
        counts[host["name"]] = counts.get(host["name"], 0) + 1
    seen = set()
    for host in hosts:
        name = host["name"]
        if counts[name] > 1:
            name = "%s-%s" % (name, _clean_name(host["id"]))
        while name in seen:
            name = "%s-%s" % (name, "x")
        seen.add(name)
        host["name"] = name
    return hosts
