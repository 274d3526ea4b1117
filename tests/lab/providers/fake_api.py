# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A fake of RunPod's REST API and of vast.ai's instance API, on loopback (standard library only).

It serves records in the providers' published shapes (see README.md in this folder for where each comes from),
checks the ``Authorization: Bearer <key>`` header, pages where vast.ai pages (``next_token``/``after_token``,
``limit`` at most 25), and injects faults, one per API request, from a queue:

    {"status": 401}                      the answer has this HTTP status (429/5xx may carry "retry_after")
    {"slow": 3.0}                        waits this long, then answers normally
    {"truncate": true}                   announces a longer body than it sends, then closes
    {"malformed": true}                  a body that is not JSON

Control (no auth): ``GET /_fake/requests`` (the log of API requests), ``POST /_fake/faults`` (a JSON list appended
to the queue), ``POST /_fake/instances`` (a JSON list that replaces the records), ``POST /_fake/reset``.

In a test: ``fake = FakeAPI("vastai", "key", vastai_instances(hosts)).start()``, ``fake.url``, ``fake.stop()``.
By hand: ``python3 fake_api.py vastai --key K --hosts 127.0.10.2:22,127.0.10.3:22`` (prints the URL).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VAST_MAX_LIMIT = 25


# --- records in the real shapes (only ids and addresses are ours) ---------------------------------------------

def runpod_pod(index, host, port, status="RUNNING", name=None, gpu="NVIDIA H100 80GB HBM3", count=1,
               datacenter="EU-RO-1", price=2.69, interruptible=False, ready=True):
    """One item of RunPod REST ``GET /v1/pods`` (openapi Pod schema, docs.runpod.io/api-reference)."""
    return {
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
        "ports": ["8888/http", "22/tcp"],
        "portMappings": {"22": port} if ready else None,
        "publicIp": host if ready else None,
        "env": {"JUPYTER_PASSWORD": "fake-env-secret-%d" % index},
        "interruptible": interruptible,
        "locked": False,
        "gpu": {"id": gpu, "count": count, "displayName": gpu.replace("NVIDIA ", "")},
        "machine": {"dataCenterId": datacenter, "location": datacenter.split("-")[0], "gpuDisplayName":
                    gpu.replace("NVIDIA ", ""), "secureCloud": True, "supportPublicIp": True},
        "templateId": None,
        "networkVolumeId": None,
        "lastStartedAt": "2026-11-30 08:00:00.000 +0000 UTC",
        "lastStatusChange": "Rented by User: Mon Nov 30 2026 08:00:00 GMT+0000",
    }


def vastai_instance(index, host, port, direct=True, status="running", label=None, gpu="RTX_4090", count=1,
                    geo="Norway, NO", price=0.4, bid=False, runtype="ssh_direc ssh_proxy"):
    """One item of vast.ai ``GET /api/v1/instances/`` (the fields vast-cli reads: vast.py instance_fields, _ssh_url)."""
    return {
        "id": 9000000 + index,
        "label": label if label is not None else "train-%d" % index,
        "machine_id": 10000 + index,
        "host_id": 200 + index,
        "actual_status": status,
        "intended_status": "running" if status in ("running", "loading") else "stopped",
        "cur_state": status,
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


def parse_hosts(text):
    """'h1:p1,h2:p2' -> [(h1, p1), ...]"""
    pairs = []
    for item in filter(None, (text or "").split(",")):
        host, _sep, port = item.rpartition(":")
        pairs.append((host, int(port)))
    return pairs


def records_for(provider, pairs):
    make = runpod_pod if provider == "runpod" else vastai_instance
    return [make(i + 1, host, port) for i, (host, port) in enumerate(pairs)]


# --- the server -----------------------------------------------------------------------------------------------

class FakeAPI:
    def __init__(self, provider, api_key, records=(), host="127.0.0.1", port=0):
        if provider not in ("runpod", "vastai"):
            raise ValueError("provider must be runpod or vastai")
        self.provider = provider
        self.api_key = api_key
        self.records = list(records)
        self.faults = []
        self.log = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer((host, port), _handler(self))
        self.server.daemon_threads = True
        self.thread = None

    @property
    def url(self):
        host, port = self.server.server_address[:2]
        base = "http://%s:%d" % (host, port)
        return base + "/v1" if self.provider == "runpod" else base

    def start(self):
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def inject(self, *faults):
        with self.lock:
            self.faults.extend(faults)

    def api_requests(self):
        with self.lock:
            return list(self.log)

    def _next_fault(self):
        with self.lock:
            return self.faults.pop(0) if self.faults else None

    # the API answers: (status, body object)
    def answer(self, path, query):
        if self.provider == "runpod":
            if path.rstrip("/") == "/v1/pods":
                return 200, list(self.records)
            return 404, {"error": "not found"}
        if path.rstrip("/") != "/api/v1/instances":
            return 404, {"error": "not found"}
        try:
            limit = int(json.loads(query.get("limit", ["25"])[0]))
        except ValueError:
            return 400, {"error": "bad limit"}
        limit = max(1, min(limit, VAST_MAX_LIMIT))
        token = query.get("after_token", [""])[0]
        start = int(token[1:]) if token.startswith("t") and token[1:].isdigit() else 0
        ordered = sorted(self.records, key=lambda r: r["id"])
        page = ordered[start:start + limit]
        more = start + limit < len(ordered)
        return 200, {"instances": page, "next_token": "t%d" % (start + limit) if more else None,
                     "total_instances": len(ordered), "label_counts": {}}


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

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            payload = json.loads(self.rfile.read(length) or b"null")
            if self.path == "/_fake/faults":
                fake.inject(*payload)
            elif self.path == "/_fake/instances":
                fake.records = list(payload)
            elif self.path == "/_fake/reset":
                with fake.lock:
                    fake.faults.clear()
                    fake.log.clear()
            else:
                return self._send(404, {"error": "not found"})
            return self._send(200, {"ok": True})

        def do_GET(self):
            parsed = urllib.parse.urlsplit(self.path)
            if parsed.path == "/_fake/requests":
                return self._send(200, fake.api_requests())
            query = urllib.parse.parse_qs(parsed.query)
            auth_ok = self.headers.get("Authorization") == "Bearer " + fake.api_key
            with fake.lock:
                fake.log.append({"path": parsed.path, "query": {k: v[0] for k, v in query.items()},
                                 "auth_ok": auth_ok, "at": time.time()})
            fault = fake._next_fault()
            if fault and fault.get("slow"):
                time.sleep(float(fault["slow"]))
                fault = None
            if fault and fault.get("status"):
                headers = [("Retry-After", str(fault["retry_after"]))] if "retry_after" in fault else []
                return self._send(int(fault["status"]), {"error": "injected %s" % fault["status"]}, headers)
            if not auth_ok:
                return self._send(401, {"error": "Unauthorized"})
            status, body = fake.answer(parsed.path, query)
            data = json.dumps(body).encode()
            if fault and fault.get("truncate"):
                return self._send(status, None, raw=data[:len(data) // 2], announce=len(data))
            if fault and fault.get("malformed"):
                return self._send(status, None, raw=data[:len(data) // 2])
            return self._send(status, None, raw=data)

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("provider", choices=("runpod", "vastai"))
    parser.add_argument("--key", required=True)
    parser.add_argument("--listen", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--hosts", default="", help="host:port,... that the instances' SSH addresses point to")
    parser.add_argument("--count", type=int, default=0, help="that many more instances at 127.0.0.1:22")
    args = parser.parse_args()
    pairs = parse_hosts(args.hosts) + [("127.0.0.1", 22)] * args.count
    fake = FakeAPI(args.provider, args.key, records_for(args.provider, pairs), args.listen, args.port)
    print(fake.url, flush=True)
    try:
        fake.server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
