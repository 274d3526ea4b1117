# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Providers' instance records -> inventory hosts (pure functions, no I/O).

Each ``<provider>_host(record)`` returns a dict:

- ``id``: the provider's id (a string);
- ``name``: the wanted inventory name (made unique by ``unique_names``);
- ``state``: the instance's state as ``provider_state`` reads it (``running``, ``starting``, ``stopping``,
  ``stopped``, ``preempted``, ``unhealthy``, ``terminated``, ``unreachable_direct`` or ``unknown``); only a
  ``running`` host has an address;
- ``message``/``warning``: provider_state's sentence for a state that needs a person, and its warning for an
  unknown status word (or None);
- ``address``/``port``: the SSH endpoint, or None;
- ``hostvars``: the same keys for every provider (``provider``, ``provider_id``, ``provider_status``, ``gpu_type``,
  ``gpu_count``, ``region``, ``price_per_hour``, ``interruptible``, ``provider_state``) plus ``trainer_price_per_hour`` for the
  billing checks, the id under the name that the profile's teardown verb reads (``runpod_pod_id``,
  ``vastai_instance_id``, ``lambda_instance_id``, ``autodl_instance_uuid``), and a curated copy of the provider's
  record under ``<provider>`` for ``compose``/``keyed_groups``.

A record that is not an object, or has no id, raises ``ValueError`` with a clear message.
"""

from __future__ import annotations

import re

from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_state import (
    lambda_durable_dir, provider_state)

_NAME_BAD = re.compile(r"[^A-Za-z0-9_.-]+")

# The fields of a provider's record that reach hostvars. Environment variables (``env``, ``extra_env``), onstart
# scripts and tokens are left out on purpose: they often hold secrets and ``ansible-inventory --list`` prints hostvars.
RUNPOD_KEEP = ("id", "name", "image", "desiredStatus", "costPerHr", "adjustedCostPerHr", "gpuCount", "gpu", "machine",
               "machineId", "publicIp", "portMappings", "ports", "interruptible", "lastStartedAt", "lastStatusChange",
               "containerDiskInGb", "volumeInGb", "volumeMountPath", "networkVolumeId", "templateId", "vcpuCount",
               "memoryInGb")
# the fields of RunPod's REST v2 record of a pod (its observed state) that reach hostvars, under runpod.observed
RUNPOD_OBSERVED_KEEP = ("status", "actions", "cost", "dataCenterId", "ssh")
VASTAI_KEEP = ("id", "label", "actual_status", "intended_status", "cur_state", "status_msg", "gpu_name", "num_gpus",
               "gpu_ram", "geolocation", "dph_total", "is_bid", "public_ipaddr", "ssh_host", "ssh_port", "ports",
               "image_uuid", "image_runtype", "machine_id", "host_id", "disk_space", "cpu_ram", "start_date",
               "cuda_max_good", "driver_version", "reliability2")

LAMBDA_KEEP = ("id", "name", "ip", "private_ip", "status", "hostname", "region", "instance_type", "ssh_key_names",
               "file_system_names", "file_system_mounts", "is_reserved", "tags", "actions")
# AutoDL Pro: the list row, plus the snapshot's address and price (root_password, ssh_command and the jupyter token
# are left out: ``ssh_command`` may carry the password in some clients' copies, and the others are credentials).
AUTODL_KEEP = ("uuid", "status", "region_name", "region_sign", "gpu_spec_uuid", "req_gpu_amount", "image_uuid",
               "started_at", "stopped_at", "created_at", "expand_system_disk_by_gb")
AUTODL_SNAPSHOT_KEEP = ("proxy_host", "ssh_port", "payg_price", "snapshot_gpu_alias_name", "gpu_amount",
                        "region_name", "region_sign")


def curated(record, keep):
    """Only the ``keep`` fields of ``record``, for hostvars."""
    return {key: record[key] for key in keep if key in record}


def runpod_kept(pod):
    """The part of a RunPod pod (v1 record, its v2 record under ``observed``) that reaches hostvars (``runpod``)."""
    kept = curated(pod, RUNPOD_KEEP)
    observed = pod.get("observed")
    if isinstance(observed, dict) and observed:
        kept["observed"] = curated(observed, RUNPOD_OBSERVED_KEEP)
        ssh = kept["observed"].get("ssh")
        if isinstance(ssh, dict):  # the proxy's user name routes to the pod: only the direct endpoint is kept
            kept["observed"]["ssh"] = {"direct": ssh.get("direct")}
    return kept


def autodl_kept(record):
    """The part of an AutoDL Pro row (its snapshot under ``snapshot``) that reaches hostvars (``autodl``)."""
    kept = curated(record, AUTODL_KEEP)
    snapshot = record.get("snapshot")
    kept["snapshot"] = curated(snapshot, AUTODL_SNAPSHOT_KEEP) if isinstance(snapshot, dict) else {}
    return kept


# the fields a host dict is read from beyond the curated copy: the host's name, and RunPod's fallbacks for
# gpu_type and region (their values reach hostvars as such)
NAME_FIELDS = {"runpod": ("gpuTypeId", "dataCenterId"), "vastai": (), "lambda": (), "autodl": ("name", "title")}


def cache_record(provider, record):
    """What the inventory keeps of ``provider``'s instance ``record``, in its cache and for its hosts: the fields
    that reach hostvars (the curated copy under ``<provider>``, the host's name), nothing else. A field that
    hostvars leave out (an environment, a start command, container arguments, a field the provider adds) is never
    written to the cache. A record that is not an object is kept as it is (the plugin skips it and says so)."""
    if not isinstance(record, dict):
        return record
    kept = {"runpod": runpod_kept, "vastai": lambda r: curated(r, VASTAI_KEEP),
            "lambda": lambda r: curated(r, LAMBDA_KEEP), "autodl": autodl_kept}[provider](record)
    kept.update(curated(record, NAME_FIELDS[provider]))
    return kept


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


def _common(provider, pid, status, gpu_type, gpu_count, region, price, interruptible, record, state):
    return {
        "provider": provider,
        "provider_id": pid,
        "provider_status": status,
        "provider_state": state,
        "gpu_type": gpu_type,
        "gpu_count": gpu_count,
        "region": region,
        "price_per_hour": price,
        "interruptible": bool(interruptible),
        "trainer_price_per_hour": price if price is not None else 0,
        provider: record,
    }


def _host(pid, name, read, address, port, hostvars):
    """The host dict: an address only for a running host; provider_state's message in hostvars when it has one."""
    if read["state"] == "running" and not address:
        read = dict(read, state="starting")  # the provider says running, but no SSH address is known yet
    running = read["state"] == "running"
    if read["message"]:
        hostvars["provider_state_message"] = read["message"]
    return {"id": pid, "name": name, "state": read["state"], "message": read["message"], "warning": read["warning"],
            "address": address if running else None, "port": port if running else None, "hostvars": hostvars}


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
    """One RunPod pod (REST ``GET /v1/pods`` item, with its v2 record under ``observed`` when the plugin read one) ->
    host dict (see the module docstring)."""
    pid = _require_record(pod, "runpod")
    read = provider_state("runpod", pod)
    observed = pod.get("observed") if isinstance(pod.get("observed"), dict) else {}
    status = str(observed.get("status") or pod.get("desiredStatus") or "").upper()
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
    kept = runpod_kept(pod)
    return _host(pid, _clean_name(pod.get("name")) or "runpod-" + _clean_name(pid), read, ip, port,
                 dict(_common("runpod", pid, status or None, gpu_type, gpu_count, region, price,
                              pod.get("interruptible"), kept, read["state"]), runpod_pod_id=pid))


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
    """One vast.ai instance (``GET /api/v1/instances/`` item) -> host dict (see the module docstring). Its ``label``
    is the host's name and stays in hostvars (``vastai.label``) for keyed_groups."""
    pid = _require_record(instance, "vastai")
    read = provider_state("vastai", instance)
    actual = str(instance.get("actual_status") or "").lower()
    host, port = vastai_ssh(instance)
    price = _num(instance.get("dph_total"))
    label = _clean_name(instance.get("label"))
    return _host(pid, label or "vastai-" + _clean_name(pid), read, host, port,
                 dict(_common("vastai", pid, actual or None, instance.get("gpu_name"),
                              _num(instance.get("num_gpus"), int), instance.get("geolocation"), price,
                              instance.get("is_bid"), curated(instance, VASTAI_KEEP), read["state"]),
                      vastai_instance_id=pid))


def lambda_host(instance):
    """One Lambda Cloud instance (``GET /api/v1/instances`` item) -> host dict (see the module docstring).

    Lambda gives every instance a public ``ip`` with SSH on port 22 (user ``ubuntu``, set by group_vars/lambda.yml).
    ``interruptible`` is false: Lambda's API can report an instance ``preempted`` (its state then says so), but it
    has no spot flag on the record. ``tags`` stay in hostvars (``lambda.tags``); ``lambda_durable_dir`` is where the
    first filesystem is really mounted (``file_system_mounts``, else ``/lambda/nfs/<name>``)."""
    pid = _require_record(instance, "lambda")
    read = provider_state("lambda", instance)
    status = str(instance.get("status") or "").lower()
    itype = instance.get("instance_type") if isinstance(instance.get("instance_type"), dict) else {}
    specs = itype.get("specs") if isinstance(itype.get("specs"), dict) else {}
    region = instance.get("region") if isinstance(instance.get("region"), dict) else {}
    ip = instance.get("ip")
    ip = ip.strip() if isinstance(ip, str) and ip.strip() else None
    cents = _num(itype.get("price_cents_per_hour"))
    price = round(cents / 100.0, 4) if cents is not None else None
    hostvars = dict(_common("lambda", pid, status or None, itype.get("gpu_description") or itype.get("description")
                            or itype.get("name"), _num(specs.get("gpus"), int), region.get("name"), price, False,
                            curated(instance, LAMBDA_KEEP), read["state"]), lambda_instance_id=pid)
    filesystems = instance.get("file_system_names")
    if isinstance(filesystems, list) and filesystems and isinstance(filesystems[0], str) and filesystems[0]:
        hostvars["lambda_nfs_name"] = filesystems[0]
    durable = lambda_durable_dir(instance)
    if durable:
        # the profile's durable dir (group_vars/lambda.yml): where Lambda really mounted the filesystem
        hostvars["lambda_durable_dir"] = durable
    return _host(pid, _clean_name(instance.get("name")) or "lambda-" + _clean_name(pid), read, ip, 22, hostvars)


def autodl_ssh(snapshot):
    """(proxy_host, ssh_port) from an AutoDL Pro snapshot (``GET /api/v1/dev/instance/pro/snapshot`` data)."""
    if not isinstance(snapshot, dict):
        return None, None
    host = snapshot.get("proxy_host")
    port = _port(snapshot.get("ssh_port"))
    if not host or not isinstance(host, str) or port is None:
        return None, None
    return host.strip(), port


def autodl_host(record):
    """One AutoDL Pro instance (a ``pro/list`` row with its ``pro/snapshot`` data under ``snapshot``) -> host dict.

    The address is the snapshot's ``proxy_host:ssh_port``; ``payg_price`` is in thousandths of a yuan per hour
    (so 1880 is 1.88 CNY/h). AutoDL Pro has no spot instances: ``interruptible`` is always false."""
    if not isinstance(record, dict):
        raise ValueError("autodl: an instance record is %s, not an object" % type(record).__name__)
    pid = record.get("uuid")
    if pid in (None, ""):
        raise ValueError("autodl: an instance record has no uuid")
    pid = str(pid)
    read = provider_state("autodl", record)
    status = str(record.get("status") or "").lower()
    snapshot = record.get("snapshot") if isinstance(record.get("snapshot"), dict) else {}
    host, port = autodl_ssh(snapshot)
    milli = _num(snapshot.get("payg_price"))
    price = round(milli / 1000.0, 4) if milli is not None else None
    gpu_count = _num(record.get("req_gpu_amount"), int)
    if gpu_count is None:
        gpu_count = _num(snapshot.get("gpu_amount"), int)
    kept = autodl_kept(record)
    if read["state"] == "running" and not host:
        read = dict(read, state="starting")  # running, but its snapshot has no address yet
    return _host(pid, _clean_name(record.get("name") or record.get("title")) or "autodl-" + _clean_name(pid), read,
                 host, port,
                 dict(_common("autodl", pid, status or None,
                              snapshot.get("snapshot_gpu_alias_name") or record.get("gpu_spec_uuid"), gpu_count,
                              record.get("region_name") or record.get("region_sign"), price, False, kept,
                              read["state"]), autodl_instance_uuid=pid))


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
