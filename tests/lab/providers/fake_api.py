# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A fake of RunPod's REST API, vast.ai's instance API, Lambda Cloud's API and AutoDL's 容器实例 Pro developer API,
on loopback (standard library only).

It serves records in the providers' published shapes (see README.md in this folder for where each comes from),
checks the ``Authorization`` header (``Bearer <key>``; AutoDL: the bare token), pages where the real API pages
(vast.ai ``next_token``/``after_token``, ``limit`` at most 25; AutoDL ``page_index``/``max_page``), serves the
lifecycle verbs (stop, start, terminate) and changes the record's status as the provider would, and injects faults,
one per API request, from a queue:

    {"status": 401}                      the answer has this HTTP status (429/5xx may carry "retry_after")
    {"slow": 3.0}                        waits this long, then answers normally
    {"truncate": true}                   announces a longer body than it sends, then closes
    {"malformed": true}                  a body that is not JSON
    {"code": "SomeError"}                AutoDL style: HTTP 200 with {"code": "SomeError", "msg": ...}
    {"status": 400, "raw": "..."}        this body, verbatim, with the status (default 200): an error page that echoes
                                         what it was sent, a body nested deeper than any parser goes

A lifecycle verb calls ``fake.on_lifecycle(record, verb)`` when set (verb: stop, start or terminate), after the
record changed: a lab test uses ``meter_log_hook`` to make the verb hit the lab instance's meter log.

Control (no auth): ``GET /_fake/requests`` (the log of API requests), ``POST /_fake/faults`` (a JSON list appended
to the queue), ``POST /_fake/instances`` (a JSON list that replaces the records), ``POST /_fake/reset``.

In a test: ``fake = FakeAPI("vastai", "key", records_for("vastai", pairs)).start()``, ``fake.url``, ``fake.stop()``.
By hand: ``python3 fake_api.py vastai --key K --hosts 127.0.10.2:22,127.0.10.3:22`` (prints the URL).

Create verbs (vast.ai ``POST /api/v0/bundles/`` offers and ``PUT /api/v0/asks/{id}/``, RunPod ``POST /v1/pods``, Lambda
``POST /api/v1/instance-operations/launch``): with a ``LabProvisioner`` (``--scenarios`` and ``--lab-state`` on the
command line), a create starts a lab instance (``tests/lab/fleet add``) with the GPU scenario of the offer (vast.ai)
or the next one of the list, after ``--provision-delay`` seconds; a destroy stops it (``fleet remove``).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VAST_MAX_LIMIT = 25
AUTODL_MAX_PAGE_SIZE = 100
PROVIDERS = ("runpod", "vastai", "lambda", "autodl")
ID_KEY = {"runpod": "id", "vastai": "id", "lambda": "id", "autodl": "uuid"}


# --- records in the real shapes (only ids and addresses are ours) ---------------------------------------------

def runpod_pod(index, host, port, status="RUNNING", name=None, gpu="NVIDIA H100 80GB HBM3", count=1,
               datacenter="EU-RO-1", price=2.69, interruptible=False, ready=True, observed=None,
               ports=("8888/http", "22/tcp")):
    """One item of RunPod REST ``GET /v1/pods`` (openapi Pod schema, docs.runpod.io/api-reference).

    ``observed`` is the pod's REST v2 ``status`` (PROVISIONING, STARTING, RUNNING, EXITED, ERROR, TERMINATED), which
    ``GET /v2/pods`` serves; by default it follows ``status`` (RUNNING and not ready: STARTING)."""
    if observed is None:
        observed = {"RUNNING": "RUNNING" if ready else "STARTING"}.get(status, status)
    record = {
        "id": "fakepod%04d" % index,
        "name": name if name is not None else "train-%d" % index,
        "image": "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04",
        "consumerUserId": "user_fake0000",
        "machineId": "fakemach%04d" % index,
        "desiredStatus": status,
        "costPerHr": price,
        "adjustedCostPerHr": price,
        "gpuCount": count,
        "vcpuCount": 16,
        "memoryInGb": 125,
        "containerDiskInGb": 50,
        "volumeInGb": 20,
        "volumeMountPath": "/workspace",
        "volumeEncrypted": False,
        "ports": list(ports),
        "portMappings": {"22": port} if ready and "22/tcp" in ports else None,
        "publicIp": host if ready else None,
        "env": {"JUPYTER_PASSWORD": "fake-env-secret-%d" % index},
        "interruptible": interruptible,
        "locked": False,
        "gpu": {"id": gpu, "count": count, "displayName": gpu.replace("NVIDIA ", "")},
        "machine": {"dataCenterId": datacenter, "location": datacenter.split("-")[0], "gpuDisplayName":
                    gpu.replace("NVIDIA ", ""), "secureCloud": True, "supportPublicIp": True},
        "lastStartedAt": "2026-11-30 08:00:00.000 +0000 UTC",
        "lastStatusChange": "Rented by User: Mon Nov 30 2026 08:00:00 GMT+0000",
        "_observed": observed,
    }
    return record


def runpod_v2(record):
    """The REST v2 view (runpod-v2.json Pod) of a v1 record: the observed ``status``, the valid ``actions`` and the
    ``ssh`` endpoints (``direct`` only for a running pod that maps 22/tcp on a public IP)."""
    status = record.get("_observed") or "RUNNING"
    running = status == "RUNNING"
    mapped = (record.get("portMappings") or {}).get("22")
    direct = None
    if running and record.get("publicIp") and mapped and "22/tcp" in (record.get("ports") or []):
        direct = {"host": record["publicIp"], "port": int(mapped), "username": "root",
                  "command": "ssh root@%s -p %s" % (record["publicIp"], mapped)}
    actions = {"RUNNING": ["stop", "restart", "terminate"], "EXITED": ["start", "terminate"],
               "ERROR": ["restart", "stop", "terminate"], "TERMINATED": []}.get(status, ["terminate"])
    gpu = record.get("gpu") or {}
    return {
        "id": record["id"], "name": record.get("name") or "", "status": status, "actions": actions,
        "image": record.get("image") or "", "args": "", "disk": int(record.get("containerDiskInGb") or 1),
        "mounts": {}, "ports": list(record.get("ports") or []), "env": dict(record.get("env") or {}),
        "registry": None, "cloud": "SECURE", "dataCenterId": (record.get("machine") or {}).get("dataCenterId"),
        "cudaVersion": "12.8",
        "ssh": {"proxy": {"host": "ssh.runpod.io", "port": 22, "username": "%s-64411eb2" % record["id"],
                          "command": "ssh %s-64411eb2@ssh.runpod.io" % record["id"]}, "direct": direct},
        "gpu": {"id": gpu.get("id") or "NVIDIA H100 80GB HBM3", "count": int(gpu.get("count") or 1)},
        "template": None, "cost": float(record.get("costPerHr") or 0) if running else 0.0,
        "locked": bool(record.get("locked")), "runtime": {"uptime": 3600, "ports": []} if running else None,
        "createdAt": "2026-11-30T08:00:00Z", "startedAt": "2026-11-30T08:00:00Z" if running else None,
        "globalNetworking": {"enabled": False},
    }


def vastai_instance(index, host, port, direct=True, status="running", label=None, gpu="RTX_4090", count=1,
                    geo="Norway, NO", price=0.4, bid=False, runtype="ssh_direc ssh_proxy", intended=None, cur=None):
    """One item of vast.ai ``GET /api/v1/instances/`` (the fields vast-cli reads: vast.py instance_fields, _ssh_url).

    ``status`` is ``actual_status`` (vast's list: loading, running, stopped, frozen, exited, rebooting, unknown,
    offline); ``intended`` (``intended_status``) defaults to running for a box that runs, loads or crashed, frozen
    for a frozen one, else stopped; ``cur`` (``cur_state``) to running, or stopped for a stopped box."""
    if intended is None:
        intended = {"running": "running", "loading": "running", "exited": "running", "unknown": "running",
                    "offline": "running", "rebooting": "running", "frozen": "frozen"}.get(status, "stopped")
    if cur is None:
        cur = "stopped" if status == "stopped" else "running"
    return {
        "id": 9000000 + index,
        "label": label if label is not None else "train-%d" % index,
        "machine_id": 10000 + index,
        "host_id": 200 + index,
        "actual_status": status,
        "intended_status": intended,
        "cur_state": cur,
        "status_msg": "success, running fake/image",
        "num_gpus": count,
        "gpu_name": gpu,
        "gpu_ram": 24564,
        "gpu_util": 0.0,
        "cpu_cores_effective": 8.0,
        "cpu_ram": 64000,
        "disk_space": 100.0,
        "ssh_idx": "7",
        "ssh_host": "ssh7.vast.ai" if direct else host,
        "ssh_port": 30000 + index if direct else port,
        "public_ipaddr": host if direct else "203.0.113.%d" % (index % 250 + 1),
        "ports": {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(port)}]} if direct else {},
        "dph_total": price,
        "is_bid": bid,
        "geolocation": geo,
        "image_uuid": "pytorch/pytorch:latest",
        "image_runtype": runtype,
        "extra_env": [["HF_TOKEN", "fake-env-secret-%d" % index]],
        "onstart": "echo fake",
        "jupyter_token": "fake-jupyter-token-%d" % index,
        "inet_up": 800.0,
        "inet_down": 900.0,
        "reliability2": 0.995,
        "cuda_max_good": 12.4,
        "driver_version": "550.54.15",
        "start_date": 1796025600.0,
        "duration": 3600.0,
    }


def lambda_instance(index, host, status="active", name=None, itype="gpu_1x_h100_pcie",
                    gpu="H100 (80 GB PCIe)", gpus=1, cents=249, region="us-east-1", filesystem="lab-nfs"):
    """One item of Lambda Cloud ``GET /api/v1/instances`` (``{"data": [...]}``; Lambda's Instance schema). Without a
    ``host`` (not yet assigned) the record has no ``ip`` and no ``hostname``: the 1.8.3 document types both as
    strings, and leaves them out rather than null."""
    record = {
        "id": "0920582c7ff041399e34823a0be%05d" % index,
        "name": name if name is not None else "train-%d" % index,
        "ip": host,
        "private_ip": "10.19.60.%d" % (index % 250 + 1),
        "status": status,
        "ssh_key_names": ["lab-key"],
        "file_system_names": [filesystem] if filesystem else [],
        "region": {"name": region, "description": "Fake region %s" % region},
        "instance_type": {
            "name": itype,
            "description": "%dx %s" % (gpus, gpu),
            "gpu_description": gpu,
            "price_cents_per_hour": cents,
            "specs": {"vcpus": 26, "memory_gib": 200, "storage_gib": 1024, "gpus": gpus},
        },
        "hostname": "%s.fake-lambda.invalid" % str(host).replace(".", "-"),
        "jupyter_token": "fake-jupyter-token-%d" % index,
        "jupyter_url": "https://jupyter-%d.fake-lambda.invalid/?token=fake-jupyter-token-%d" % (index, index),
        "is_reserved": False,
        "actions": {"migrate": {"available": False}, "rebuild": {"available": False},
                    "restart": {"available": True}, "cold_reboot": {"available": True},
                    "terminate": {"available": True}},
    }
    if host is None:
        del record["ip"], record["hostname"]
    return record


# Odd states on demand: ``odd(provider, name, index, host, port)`` -> a record in that state, as the provider's
# documents describe it (see docs/providers.md for what the collection makes of each).
ODD_STATES = {
    "runpod": {
        "starting": dict(ready=False, observed="STARTING"),
        "error": dict(observed="ERROR"),                                # container in an unrecoverable error
        "crashed": dict(observed="EXITED"),                             # exited while desired RUNNING
        "preempted": dict(observed="EXITED", interruptible=True),       # a spot pod the market stopped
        "no_public_port": dict(ports=("8888/http",)),                   # runs, but 22/tcp is not exposed
        "stopped": dict(status="EXITED"),
    },
    "vastai": {
        "loading": dict(status="loading"),
        "frozen": dict(status="frozen"),
        "exited": dict(status="exited"),                                # crashed while intended running
        "unknown": dict(status="unknown"),
        "offline": dict(status="offline"),
        "outbid": dict(status="stopped", bid=True, intended="running"),  # a bid instance paused by the market
        "stopped": dict(status="stopped"),
    },
    "lambda": {
        "booting": dict(status="booting"),
        "unhealthy": dict(status="unhealthy"),
        "preempted": dict(status="preempted"),
        "terminating": dict(status="terminating"),
    },
}


def odd(provider, name, index, host, port=22):
    """One record of ``provider`` in the odd state ``name`` (a key of ODD_STATES[provider])."""
    if provider == "lambda":
        return lambda_instance(index, host, **ODD_STATES["lambda"][name])
    make = {"runpod": runpod_pod, "vastai": vastai_instance}[provider]
    return make(index, host, port, **ODD_STATES[provider][name])


def autodl_instance(index, host, port, status="running", gpu_spec="v-48g", gpu="RTX 4090D", gpus=1,
                    region="西北B区", region_sign="westDC3", payg_milli=1880):
    """One AutoDL Pro instance: a ``pro/list`` row, plus under ``_snapshot`` what ``pro/snapshot`` answers for it
    (the fake serves the row without ``_snapshot`` in the list, and ``_snapshot`` from the snapshot endpoint)."""
    uuid = "pro-fake%07d" % index
    return {
        "uuid": uuid,
        "status": status,
        "region_name": region,
        "region_sign": region_sign,
        "gpu_spec_uuid": gpu_spec,
        "req_gpu_amount": gpus,
        "image_uuid": "base-image-l2t43iu6uk",
        "expand_system_disk_by_gb": 0,
        "created_at": "2026-11-30T08:00:00+08:00",
        "started_at": {"Time": "2026-11-30T08:00:05+08:00", "Valid": True},
        "stopped_at": {"Time": "0001-01-01T00:00:00Z", "Valid": False},
        "_snapshot": {
            "proxy_host": host,
            "ssh_port": port,
            "ssh_command": "ssh -p %s root@%s" % (port, host) if host else "",
            "root_password": "fake-root-password-%d" % index,
            "payg_price": payg_milli,
            "snapshot_gpu_alias_name": gpu,
            "gpu_amount": gpus,
            "region_name": region,
            "region_sign": region_sign,
        },
    }


def vastai_offer(index, scenario, gpu="H100_SXM", count=None, price=None, geo="Norway, NO", reliability=0.995,
                 direct_ports=64, gpu_ram=81559):
    """One offer of vast.ai ``POST /api/v0/bundles/`` (the fields of the document's example answer), on machine
    ``20000 + index``; ``_scenario`` is the lab GPU scenario its box gets when the offer is rented. ``count``
    defaults to the scenario capture's GPU count."""
    if count is None:
        count = scenario_gpus(scenario)
    price = round(2.0 + 0.1 * index, 4) if price is None else price
    return {
        "id": 7100000 + index, "ask_contract_id": 7100000 + index, "bundle_id": 880000 + index,
        "machine_id": 20000 + index, "host_id": 300 + index, "gpu_name": gpu, "num_gpus": count,
        "gpu_ram": gpu_ram, "gpu_total_ram": gpu_ram * count, "dph_total": price, "dph_base": round(price * 0.9, 4),
        "min_bid": round(price * 0.5, 4), "is_bid": False, "reliability": reliability, "reliability2": reliability,
        "direct_port_count": direct_ports, "geolocation": geo, "rentable": True, "rented": False,
        "verification": "verified", "cuda_max_good": 12.4, "driver_version": "535.161.08", "disk_space": 500.0,
        "inet_up": 800.0, "inet_down": 900.0, "public_ipaddr": "203.0.113.%d" % (index % 250 + 1),
        "_scenario": scenario,
    }


def scenario_gpus(scenario):
    """The GPU count of a lab scenario's capture (tests/lab/fleetlib/instance.py ``gpu_count``)."""
    lab = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if lab not in sys.path:
        sys.path.insert(0, lab)
    from fleetlib.instance import gpu_count  # pylint: disable=import-outside-toplevel
    return gpu_count(scenario)


class LabProvisioner:
    """The fake's create and destroy verbs, played on the lab fleet: a create starts a lab instance (``tests/lab/fleet
    add``) with the offer's GPU scenario (vast.ai), or the next one of ``scenarios`` (RunPod, Lambda), after ``delay``
    seconds of provisioning; the record runs, with the instance's SSH address, once it answers. A destroy stops it
    (``fleet remove``). Instance ``index`` gets the lab's address and platform id of that index (vast.ai id
    ``9000000 + index``, RunPod ``fakepod<index>``), so the box's own id matches the record."""

    def __init__(self, state_dir, scenarios=(), delay=1.0, first_index=2, fleet=None):
        self.state_dir = str(state_dir)
        self.scenarios = list(scenarios)
        self.delay = float(delay)
        self.next_index = int(first_index)
        self.fleet = fleet or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fleet")
        self.lock = threading.Lock()
        self.events = []  # (time, verb, index, detail)
        self.errors = []

    def take_index(self):
        with self.lock:
            index = self.next_index
            self.next_index += 1
            return index

    def next_scenario(self):
        with self.lock:
            if not self.scenarios:
                raise LookupError("the fake has no GPU scenario left to provision (--scenarios)")
            return self.scenarios.pop(0)

    def _fleet(self, *args):
        import subprocess  # pylint: disable=import-outside-toplevel
        env = dict(os.environ, LAB_STATE_DIR=self.state_dir)
        with self.lock:  # one fleet change at a time (fleet.json)
            return subprocess.run([self.fleet] + list(args), env=env, capture_output=True, text=True, timeout=120,
                                  check=False)

    def create(self, fake, record, platform, scenario, index, ready):
        """Provision in the background; ``ready(record, addr, port)`` runs under the fake's lock once it answers."""
        def work():
            time.sleep(self.delay)
            proc = self._fleet("add", "--platform", platform, "--scenario", scenario, "--index", str(index))
            if proc.returncode != 0:
                self.errors.append("fleet add %s: %s" % (index, proc.stderr.strip()[-500:]))
                return
            info = json.loads(proc.stdout.strip().splitlines()[-1])
            with fake.lock:
                ready(record, info["addr"], int(info["port"]))
            self.events.append((time.time(), "ready", index, scenario))
        self.events.append((time.time(), "create", index, scenario))
        threading.Thread(target=work, daemon=True).start()

    def destroy(self, index):
        proc = self._fleet("remove", "lab-%02d" % index)
        self.events.append((time.time(), "destroy", index, proc.returncode))
        if proc.returncode != 0:
            self.errors.append("fleet remove %s: %s" % (index, proc.stderr.strip()[-500:]))


def meter_log_hook(meter_logs):
    """An ``on_lifecycle`` hook: ``meter_logs`` maps an instance id to (lab host, its meter log); a verb appends one
    JSON line there, as the lab's meter-stop stand-ins do (tests/lab/fleetlib/instance.py ``_stand_in``)."""
    def hook(record, verb, provider=None):
        rid = str(record.get("uuid") or record.get("id"))
        if rid not in meter_logs:
            return
        host, path = meter_logs[rid]
        rec = {"ts": time.time(), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": host,
               "argv": ["provider-api", provider or "", verb, rid], "path": "fake_api", "uid": 0}
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(rec) + "\n")
    return hook


def parse_hosts(text):
    """'h1:p1,h2:p2' -> [(h1, p1), ...]"""
    pairs = []
    for item in filter(None, (text or "").split(",")):
        host, _sep, port = item.rpartition(":")
        pairs.append((host, int(port)))
    return pairs


def records_for(provider, pairs):
    if provider == "lambda":
        return [lambda_instance(i + 1, host) for i, (host, _port) in enumerate(pairs)]
    make = {"runpod": runpod_pod, "vastai": vastai_instance, "autodl": autodl_instance}[provider]
    return [make(i + 1, host, port) for i, (host, port) in enumerate(pairs)]


def _public(record):
    """The record as the list answers it (the fake's own ``_`` keys left out)."""
    if not isinstance(record, dict):  # a malformed record, as a test serves it
        return record
    return {k: v for k, v in record.items() if not k.startswith("_")}


# --- the server -----------------------------------------------------------------------------------------------

class FakeAPI:
    def __init__(self, provider, api_key, records=(), host="127.0.0.1", port=0, validate=True, offers=(),
                 provisioner=None):
        if provider not in PROVIDERS:
            raise ValueError("provider must be one of %s" % ", ".join(PROVIDERS))
        self.provider = provider
        self.api_key = api_key
        self.records = list(records)
        self.offers = list(offers)       # vast.ai: what POST /api/v0/bundles/ serves (an offer taken is not served)
        self.provisioner = provisioner   # LabProvisioner: a create starts a lab instance, a destroy stops it
        self.faults = []
        self.log = []
        self.on_lifecycle = None
        self.violations = []
        self.check = _checker(provider) if validate else None
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer((host, port), _handler(self))
        self.server.daemon_threads = True
        self.thread = None

    @property
    def url(self):
        host, port = self.server.server_address[:2]
        base = "http://%s:%d" % (host, port)
        return base + "/v1" if self.provider == "runpod" else base

    def auth_ok(self, header):
        if self.provider == "autodl":  # AutoDL: "Authorization: <token>", no scheme
            return header == self.api_key
        return header == "Bearer " + self.api_key

    def start(self):
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        """Stop serving; AssertionError when an answer it served broke the provider's published document."""
        self.server.shutdown()
        self.server.server_close()
        if self.violations:
            raise AssertionError("the fake %s API served %d answer(s) that its OpenAPI document does not allow "
                                 "(tests/fixtures/openapi):\n%s" % (self.provider, len(self.violations),
                                                                    "\n".join(self.violations[:20])))

    def off_spec(self, reason):
        """Serve without checking against the document, for a test that breaks it on purpose (``reason`` says how:
        a garbled body, a malformed record)."""
        self.check = None
        self.off_spec_reason = reason

    def validate(self, method, path, status, answer, data):
        """Hold one served answer to the document (OpenAPICheck); a problem is kept in ``violations``."""
        if self.check is None:
            return
        problems = self.check.answer(method, path, status, answer, data)
        if problems:
            with self.lock:
                self.violations.extend(problems)

    def inject(self, *faults):
        with self.lock:
            self.faults.extend(faults)

    def api_requests(self):
        with self.lock:
            return list(self.log)

    def _next_fault(self):
        with self.lock:
            return self.faults.pop(0) if self.faults else None

    def find(self, rid):
        key = ID_KEY[self.provider]
        for record in self.records:
            if str(record.get(key)) == str(rid):
                return record
        return None

    def lifecycle(self, record, verb):
        if verb == "terminate" and self.provisioner is not None and record.get("_lab_index"):
            self.provisioner.destroy(record["_lab_index"])
            for offer in self.offers:  # the machine is free again: its offer is served again
                if offer["id"] == record.get("_offer"):
                    offer.pop("_taken", None)
        hook = self.on_lifecycle
        if hook is None:
            return
        try:
            takes_provider = len(inspect.signature(hook).parameters) >= 3
        except (TypeError, ValueError):
            takes_provider = False
        if takes_provider:
            hook(record, verb, self.provider)
        else:  # on_lifecycle(instance_record, verb)
            hook(record, verb)

    # the API answers: (status, body object)
    def answer(self, path, query, method="GET", body=None):
        handler = getattr(self, "_answer_" + self.provider)
        return handler(path.rstrip("/"), query, method, body if isinstance(body, dict) else {})

    def _runpod_verb(self, record, verb):
        """start, stop, restart or terminate, as RunPod's documents describe them: stop -> desired and observed
        EXITED; start and restart -> RUNNING; terminate -> the pod is gone (its GET answers 404)."""
        if verb == "terminate":
            self.records.remove(record)
            record["desiredStatus"] = record["_observed"] = "TERMINATED"
        else:
            record["desiredStatus"] = record["_observed"] = "EXITED" if verb == "stop" else "RUNNING"
        self.lifecycle(record, verb if verb != "restart" else "start")

    def _answer_runpod(self, path, query, method, body):
        if path.startswith("/v2/"):
            return self._answer_runpod_v2(path, method, body)
        if path == "/v1/pods" and method == "GET":
            return 200, [_public(r) for r in self.records]
        if path == "/v1/pods" and method == "POST":
            return self._runpod_create(body)
        parts = path.split("/")  # ['', 'v1', 'pods', id, verb?]
        if len(parts) not in (4, 5) or parts[:3] != ["", "v1", "pods"]:
            return 404, {"error": "not found"}
        record = self.find(parts[3])
        if record is None:
            return 404, {"error": "pod not found"}
        verb = parts[4] if len(parts) == 5 else None
        if method == "GET" and verb is None:
            return 200, _public(record)
        if method == "DELETE" and verb is None:
            self._runpod_verb(record, "terminate")
            return 204, None  # "Pod successfully deleted." with no body
        if method == "POST" and verb in ("stop", "start"):
            self._runpod_verb(record, verb)
            return 200, _public(record)
        return 404, {"error": "not found"}

    def _provision(self, record, platform, scenario, index, address):
        """Start the lab instance of a created record (when a provisioner is set), else run it at once."""
        record["_lab_index"] = index
        if self.provisioner is None:
            address(record, "127.0.0.1", 22)
            return
        self.provisioner.create(self, record, platform, scenario, index, address)

    def _runpod_create(self, body):
        """POST /v1/pods (PodCreateInput): a pod, starting until its lab instance answers."""
        if not body.get("imageName") or not isinstance(body.get("gpuTypeIds"), list) or not body["gpuTypeIds"]:
            return 400, {"error": "imageName and gpuTypeIds are required"}
        index = self.provisioner.take_index() if self.provisioner else len(self.records) + 1
        scenario = self.provisioner.next_scenario() if self.provisioner else None
        record = runpod_pod(index, None, None, name=body.get("name") or "", gpu=body["gpuTypeIds"][0],
                            count=int(body.get("gpuCount") or 1), interruptible=bool(body.get("interruptible")),
                            ready=False, ports=tuple(body.get("ports") or ("22/tcp",)))
        record["image"] = body["imageName"]
        record["env"] = {k: v for k, v in (body.get("env") or {}).items() if k != "PUBLIC_KEY"}

        def address(rec, host, port):
            rec["publicIp"], rec["portMappings"], rec["_observed"] = host, {"22": port}, "RUNNING"
        self.records.append(record)
        self._provision(record, "runpod", scenario, index, address)
        return 201, _public(record)

    def _answer_runpod_v2(self, path, method, body):
        def problem(status, title):
            return status, {"type": "about:blank", "title": title, "status": status, "detail": title}
        if path == "/v2/pods" and method == "GET":
            return 200, {"pods": [runpod_v2(r) for r in self.records]}
        parts = path.split("/")  # ['', 'v2', 'pods', id, 'action'?]
        if len(parts) not in (4, 5) or parts[:3] != ["", "v2", "pods"]:
            return problem(404, "Not Found")
        record = self.find(parts[3])
        if record is None:
            return problem(404, "Pod not found")
        if len(parts) == 4 and method == "GET":
            return 200, runpod_v2(record)
        if len(parts) == 4 and method == "DELETE":
            self._runpod_verb(record, "terminate")
            return 204, None
        if len(parts) == 5 and parts[4] == "action" and method == "POST":
            action = body.get("action")
            if action not in ("start", "stop", "restart", "terminate"):
                return problem(422, "action must be start, stop, restart or terminate")
            if action not in runpod_v2(record)["actions"]:
                return problem(409, "Action not valid for current pod status")
            self._runpod_verb(record, action)
            return (204, None) if action == "terminate" else (200, runpod_v2(record))
        return problem(404, "Not Found")

    def _vast_bundles(self, body):
        """POST /api/v0/bundles/: the offers not taken, filtered on gpu_name (eq, in) and num_gpus (eq, gte)."""
        def fits(offer, field):
            cond = body.get(field)
            if not isinstance(cond, dict):
                return True
            value = offer.get(field)
            return all({"eq": lambda v, c: v == c, "in": lambda v, c: v in c, "gte": lambda v, c: v >= c,
                        "lte": lambda v, c: v <= c}.get(op, lambda v, c: True)(value, arg) for op, arg in cond.items())
        offers = [_public(o) for o in self.offers if not o.get("_taken") and fits(o, "gpu_name")
                  and fits(o, "num_gpus")]
        return 200, {"offers": offers}

    def _vast_ask(self, offer_id, body):
        """PUT /api/v0/asks/{id}/: accept an offer -> a new instance (contract), loading until its box answers."""
        offer = next((o for o in self.offers if str(o["id"]) == str(offer_id)), None)
        if offer is None or offer.get("_taken"):
            return 404, {"success": False, "error": "invalid_args",
                         "msg": "error 404/3603: no_such_ask Instance type by id %s is not available." % offer_id}
        if not body.get("image"):
            return 400, {"success": False, "error": "invalid_args", "msg": "image is required"}
        index = self.provisioner.take_index() if self.provisioner else len(self.records) + 1
        record = vastai_instance(index, None, None, status="loading", label=body.get("label") or "",
                                 gpu=offer["gpu_name"], count=offer["num_gpus"], price=offer["dph_total"],
                                 geo=offer["geolocation"], bid="price" in body, intended="running")
        record.update(machine_id=offer["machine_id"], host_id=offer["host_id"], image_uuid=body["image"],
                      onstart=body.get("onstart") or "", extra_env=[], ports={}, public_ipaddr="",
                      image_runtype=body.get("runtype") or "ssh", _offer=offer["id"])
        record["actual_status"] = None  # vast: null while the instance is provisioned
        offer["_taken"] = True

        def address(rec, host, port):
            rec.update(actual_status="running", cur_state="running", public_ipaddr=host,
                       ports={"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(port)}]})
        self.records.append(record)
        self._provision(record, "vastai", offer.get("_scenario"), index, address)
        return 200, {"success": True, "new_contract": record["id"]}

    def _answer_vastai(self, path, query, method, body):
        if path == "/api/v0/bundles" and method == "POST":
            return self._vast_bundles(body)
        if path.startswith("/api/v0/asks/") and method == "PUT":
            return self._vast_ask(path.rsplit("/", 1)[1], body)
        parts = path.split("/")  # ['', 'api', 'v0', 'instances', id]
        if len(parts) == 5 and parts[:4] == ["", "api", "v0", "instances"]:
            record = self.find(parts[4])
            if record is None and method == "GET":
                return 200, {"instances": None}  # vast-cli show__instance: "not found or no longer exists"
            if record is None:
                return 404, {"success": False, "error": "no_such_instance", "msg": "Instance not found."}
            if method == "GET":
                return 200, {"instances": _public(record)}
            if method == "DELETE":
                self.records.remove(record)
                self.lifecycle(record, "terminate")
                return 200, {"success": True}
            if method == "PUT" and body.get("state") in ("stopped", "running"):
                running = body["state"] == "running"
                record["intended_status"] = body["state"]
                # a stop is "stopped" (vast's docs: halted, disk kept); "exited" is a crash, never a stop
                record["actual_status"] = record["cur_state"] = "running" if running else "stopped"
                self.lifecycle(record, "start" if running else "stop")
                return 200, {"success": True}
            return 400, {"success": False, "error": "invalid_args", "msg": "state must be running or stopped"}
        if len(parts) == 6 and parts[:4] == ["", "api", "v0", "instances"] and parts[4] == "reboot" \
                and method == "PUT":
            record = self.find(parts[5])
            if record is None:
                return 400, {"success": False, "error": "invalid_args", "msg": "invalid instance_id"}
            if record["actual_status"] in ("unknown", "offline"):
                return 400, {"success": False, "error": "invalid_args", "msg": "the host is not reachable"}
            record["actual_status"] = record["cur_state"] = record["intended_status"] = "running"
            self.lifecycle(record, "start")
            return 200, {"success": True}
        if path != "/api/v1/instances" or method != "GET":
            return 404, {"error": "not found"}
        try:
            limit = int(json.loads(query.get("limit", ["25"])[0]))
        except ValueError:
            return 400, {"error": "bad limit"}
        limit = max(1, min(limit, VAST_MAX_LIMIT))
        token = query.get("after_token", [""])[0]
        start = int(token[1:]) if token.startswith("t") and token[1:].isdigit() else 0
        ordered = sorted(self.records, key=lambda r: r["id"])
        page = [_public(r) for r in ordered[start:start + limit]]
        more = start + limit < len(ordered)
        return 200, {"instances": page, "next_token": "t%d" % (start + limit) if more else None,
                     "total_instances": len(ordered), "label_counts": {}}

    @staticmethod
    def _lambda_read(record):
        """A terminate leaves the instance ``terminating`` for one read, then ``terminated`` (Lambda's lifecycle)."""
        if record.get("_terminating_reads"):
            record["_terminating_reads"] -= 1
        elif record.get("status") == "terminating" and "_terminating_reads" in record:
            record["status"] = "terminated"
        return _public(record)

    def _answer_lambda(self, path, query, method, body):
        if path == "/api/v1/instances" and method == "GET":
            return 200, {"data": [self._lambda_read(r) for r in self.records]}
        if path.startswith("/api/v1/instances/") and method == "GET":
            record = self.find(path.rsplit("/", 1)[1])
            if record is None:
                return 404, {"error": {"code": "global/object-does-not-exist",
                                       "message": "Specified instance does not exist."}}
            return 200, {"data": self._lambda_read(record)}
        verb = path.rsplit("/", 1)[1] if path.startswith("/api/v1/instance-operations/") else None
        if verb == "launch" and method == "POST":
            if not body.get("region_name") or not body.get("instance_type_name") or not body.get("ssh_key_names"):
                return 400, {"error": {"code": "global/invalid-parameters",
                                       "message": "region_name, instance_type_name and ssh_key_names are required"}}
            index = self.provisioner.take_index() if self.provisioner else len(self.records) + 1
            scenario = self.provisioner.next_scenario() if self.provisioner else None
            record = lambda_instance(index, None, status="booting", name=body.get("name"),
                                     itype=body["instance_type_name"], region=body["region_name"],
                                     filesystem=(body.get("file_system_names") or [None])[0])

            def address(rec, host, _port):
                rec.update(ip=host, status="active")
            self.records.append(record)
            self._provision(record, "lambda", scenario, index, address)
            return 200, {"data": {"instance_ids": [record["id"]]}}
        if verb in ("terminate", "restart") and method == "POST":
            ids = body.get("instance_ids")
            if not isinstance(ids, list) or not ids:
                return 400, {"error": {"code": "global/invalid-parameters", "message": "instance_ids is required"}}
            records = [self.find(i) for i in ids]
            if any(r is None for r in records):
                return 404, {"error": {"code": "global/object-does-not-exist",
                                       "message": "Specified instance does not exist."}}
            if verb == "restart":
                for record in records:
                    record["status"] = "active"
                    self.lifecycle(record, "start")
                return 200, {"data": {"restarted_instances": [_public(r) for r in records]}}
            for record in records:
                record["status"] = "terminating"
                record["_terminating_reads"] = 1
                self.lifecycle(record, "terminate")
            return 200, {"data": {"terminated_instances": [_public(r) for r in records]}}
        return 404, {"error": {"code": "global/not-found", "message": "not found"}}

    def _answer_autodl(self, path, query, method, body):
        def ok(data):
            return 200, {"code": "Success", "msg": "", "data": data, "request_id": "fake-%d" % len(self.log)}

        def err(code, msg):
            return 200, {"code": code, "msg": msg, "data": None, "request_id": "fake-%d" % len(self.log)}

        base = "/api/v1/dev/instance/pro/"
        if not path.startswith(base):
            return 404, {"code": "NotFound", "msg": "not found"}
        verb = path[len(base):]
        if verb == "list" and method == "POST":
            try:
                index = max(1, int(body.get("page_index", 1)))
                size = max(1, min(int(body.get("page_size", 10)), AUTODL_MAX_PAGE_SIZE))
            except (TypeError, ValueError):
                return err("InvalidParams", "page_index and page_size must be integers")
            rows = [_public(r) for r in self.records]
            max_page = max(1, -(-len(rows) // size))
            return ok({"list": rows[(index - 1) * size:index * size], "page_index": index, "page_size": size,
                       "max_page": max_page, "offset": (index - 1) * size, "result_total": len(rows)})
        uuid = body.get("instance_uuid") or query.get("instance_uuid", [""])[0]
        record = self.find(uuid) if uuid else None
        if record is None:
            return err("InstanceNotFound", "实例不存在")
        if verb == "snapshot" and method == "GET":
            return ok(dict(record.get("_snapshot") or {}))
        if verb == "status" and method == "GET":
            return ok(record["status"])
        if verb in ("power_off", "power_on", "release") and method == "POST":
            if verb == "release":
                if record["status"] not in ("shutdown", "stopped"):  # powered off
                    return err("InstanceNotShutdown", "实例未关机, 请先关机再释放")
                self.records.remove(record)
                record["status"] = "released"
                self.lifecycle(record, "terminate")
                return ok(None)
            record["status"] = "shutdown" if verb == "power_off" else "running"
            self.lifecycle(record, "stop" if verb == "power_off" else "start")
            return ok(None)
        return 404, {"code": "NotFound", "msg": "not found"}


def _checker(provider):
    """The OpenAPICheck of ``provider`` (openapi_check.py beside this file; it needs jsonschema)."""
    spec = importlib.util.spec_from_file_location("openapi_check", os.path.join(os.path.dirname(__file__),
                                                                                "openapi_check.py"))
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as err:
        raise RuntimeError("fake_api: validating answers against the providers' OpenAPI documents needs jsonschema "
                           "(%s); install requirements-dev.txt, or pass validate=False" % err) from None
    return module.OpenAPICheck(provider)


def _handler(fake):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def _send(self, status, body, extra_headers=(), raw=None, announce=None):
            data = raw if raw is not None else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(announce if announce is not None else len(data)))
            for key, value in extra_headers:
                self.send_header(key, value)
            if announce is not None:
                self.send_header("Connection", "close")
            self.end_headers()
            try:
                self.wfile.write(data)
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                self.close_connection = True
                return
            if announce is not None:
                self.close_connection = True

        def _body(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                return json.loads(raw) if raw else None
            except ValueError:
                return None

        def _control(self, path, payload):
            if path == "/_fake/faults":
                fake.inject(*payload)
            elif path == "/_fake/instances":
                fake.records = list(payload)
            elif path == "/_fake/reset":
                with fake.lock:
                    fake.faults.clear()
                    fake.log.clear()
            else:
                return self._send(404, {"error": "not found"})
            return self._send(200, {"ok": True})

        def _api(self, method):
            parsed = urllib.parse.urlsplit(self.path)
            body = self._body() if method in ("POST", "PUT", "DELETE") else None
            if parsed.path.startswith("/_fake/"):
                if method == "GET" and parsed.path == "/_fake/requests":
                    return self._send(200, fake.api_requests())
                if method == "GET" and parsed.path == "/_fake/violations":
                    return self._send(200, list(fake.violations))
                if method == "POST":
                    return self._control(parsed.path, body)
                return self._send(404, {"error": "not found"})
            query = urllib.parse.parse_qs(parsed.query)
            auth_ok = fake.auth_ok(self.headers.get("Authorization"))
            with fake.lock:
                fake.log.append({"method": method, "path": parsed.path, "query": {k: v[0] for k, v in query.items()},
                                 "body": body, "auth_ok": auth_ok, "at": time.time()})
            fault = fake._next_fault()
            if fault and fault.get("slow"):
                time.sleep(float(fault["slow"]))
                fault = None
            if fault and isinstance(fault.get("raw"), str):
                return self._send(int(fault.get("status") or 200), None, raw=fault["raw"].encode("utf-8"))
            if fault and fault.get("status"):
                headers = [("Retry-After", str(fault["retry_after"]))] if "retry_after" in fault else []
                return self._send(int(fault["status"]), {"error": "injected %s" % fault["status"]}, headers)
            if fault and fault.get("code"):
                return self._send(200, {"code": fault["code"], "msg": fault.get("msg", "injected error"),
                                        "data": None})
            if not auth_ok:
                return self._send(401, {"error": "Unauthorized"})
            with fake.lock:
                status, answer = fake.answer(parsed.path, query, method, body)
            data = b"" if answer is None else json.dumps(answer).encode()  # None: an empty body
            fake.validate(method, parsed.path, status, answer, data)
            if fault and fault.get("truncate"):
                return self._send(status, None, raw=data[:len(data) // 2], announce=len(data))
            if fault and fault.get("malformed"):
                return self._send(status, None, raw=data[:len(data) // 2])
            return self._send(status, None, raw=data)

        def do_GET(self):
            return self._api("GET")

        def do_POST(self):
            return self._api("POST")

        def do_PUT(self):
            return self._api("PUT")

        def do_DELETE(self):
            return self._api("DELETE")

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("provider", choices=PROVIDERS)
    parser.add_argument("--key", required=True)
    parser.add_argument("--listen", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--hosts", default="", help="host:port,... that the instances' SSH addresses point to")
    parser.add_argument("--count", type=int, default=0, help="that many more instances at 127.0.0.1:22")
    parser.add_argument("--scenarios", default="",
                        help="GPU scenarios, comma-separated (e.g. 8xh100-hwslowdown,h100-idle,h100-idle): vast.ai "
                             "serves one offer per scenario (machine 20000 + its position); a create starts a lab "
                             "instance with the offer's scenario (RunPod, Lambda: the next one of the list)")
    parser.add_argument("--lab-state", default=os.environ.get("LAB_STATE_DIR", ""),
                        help="the state directory of the running lab fleet that creates add to (LAB_STATE_DIR)")
    parser.add_argument("--provision-delay", type=float, default=1.0, help="seconds before a created box starts")
    parser.add_argument("--first-index", type=int, default=10, help="the lab index (lab-NN) of the first created box")
    args = parser.parse_args()
    pairs = parse_hosts(args.hosts) + [("127.0.0.1", 22)] * args.count
    scenarios = [name.strip() for name in args.scenarios.split(",") if name.strip()]
    extra = {}
    if scenarios:
        if not args.lab_state:
            parser.error("--scenarios needs the lab fleet's state directory (--lab-state or LAB_STATE_DIR)")
        extra["offers"] = [vastai_offer(i + 1, name) for i, name in enumerate(scenarios)] \
            if args.provider == "vastai" else []
        extra["provisioner"] = LabProvisioner(args.lab_state, scenarios=scenarios, delay=args.provision_delay,
                                              first_index=args.first_index)
    try:
        fake = FakeAPI(args.provider, args.key, records_for(args.provider, pairs), args.listen, args.port, **extra)
    except RuntimeError as err:  # no jsonschema in this interpreter: serve, unchecked, and say so
        print(err, file=sys.stderr)
        fake = FakeAPI(args.provider, args.key, records_for(args.provider, pairs), args.listen, args.port,
                       validate=False, **extra)
    print(fake.url, flush=True)
    try:
        fake.server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
