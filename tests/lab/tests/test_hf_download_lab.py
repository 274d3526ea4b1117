"""trainer-download (installed by the hf_mirror role) on an AutoDL lab box, in the job's real environment.

One fleet (lab-01, AutoDL: its /etc/network_turbo points at the lab's real tinyproxy), the real huggingface_hub in a
job environment on the box, and a Hugging Face stand-in mirror on the controller's address (the Hugging Face API and
resolve layout) whose model file drops the connection mid-body the first time, so that a second attempt of
trainer-download, resuming the partial file with a range request, completes it. The stand-in records each request;
the lab proxy's log (tinyproxy.log) says which of them came through the proxy.

Two playbook runs of network_turbo + hf_mirror: the install with the egress check, and one with the stand-in in
no_proxy (the job goes direct). Check mode and idempotence of the role are molecule/hf_mirror's.
"""
from __future__ import annotations

import hashlib
import http.server
import json
import os
import re
import shlex
import subprocess
import threading

import pytest

from labhelpers import REPO, needs_root, started_fleet

pytestmark = needs_root

VENV_BIN = os.path.join(REPO, ".venv", "bin")
WHEELS = os.path.join(REPO, ".cache", "lab-wheels")
PY = "/root/job-env/bin/python"
HELPER = "/root/.trainer/bin/trainer-download"
STAND_IN = "127.0.0.2"  # the controller's address: the boxes reach it, no profile's no_proxy holds it
REPO_ID = "lab/tiny-model"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
BLOB = hashlib.sha256(b"lab").digest() * 32768  # 1 MiB of model weights
FILES = {"config.json": b'{"model_type": "lab-tiny"}\n', "model.bin": BLOB}
PLAYBOOK = """---
- name: The job environment with the proxy hook and the Hugging Face mirror, and trainer-download
  hosts: lab
  gather_facts: false
  roles:
    - role: remote_gpu.trainer.network_turbo
    - role: remote_gpu.trainer.hf_mirror
      vars:
        hf_mirror_interpreter: %s
""" % PY


def etag(data):
    """The hub's ETag: an LFS file's sha256 (model.bin), a git blob's sha1 otherwise."""
    if data is BLOB:
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Mirror(http.server.BaseHTTPRequestHandler):
    """The Hugging Face API and resolve layout for one repository; model.bin is an LFS file (its ETag is its
    sha256). The first GET of model.bin sends half the body and drops the connection."""

    # one request per connection: after the deliberate drop, no kept-alive connection (through the lab's proxy) is
    # left for a later request to find closed
    protocol_version = "HTTP/1.0"
    seen = []  # (method, path, Range)
    model_gets = 0

    def log_message(self, *args):  # pylint: disable=arguments-differ
        pass

    def _send(self, status, body=b"", headers=()):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(body)

    def _answer(self):
        path = self.path.split("?")[0]
        Mirror.seen.append((self.command, path, self.headers.get("Range")))
        if path in ("/", "/api/models/%s/revision/main" % REPO_ID):
            info = {"id": REPO_ID, "sha": COMMIT, "siblings": [{"rfilename": name} for name in FILES]}
            return self._send(200, json.dumps(info).encode(), [("Content-Type", "application/json")])
        if path == "/api/models/%s/tree/%s" % (REPO_ID, COMMIT):
            tree = [{"type": "file", "path": name, "size": len(data), "oid": etag(data)} for name, data in FILES.items()]
            return self._send(200, json.dumps(tree).encode(), [("Content-Type", "application/json")])
        for name, data in FILES.items():
            if path in ("/%s/resolve/%s/%s" % (REPO_ID, rev, name) for rev in ("main", COMMIT)):
                return self._file(name, data)
        return self._send(404, headers=[("X-Error-Code", "RepoNotFound")])

    def _file(self, name, data):
        meta = [("ETag", '"%s"' % etag(data)), ("X-Repo-Commit", COMMIT),
                ("Accept-Ranges", "bytes"), ("Content-Type", "application/octet-stream")]
        if self.command == "GET" and name == "model.bin":
            Mirror.model_gets += 1
            if Mirror.model_gets == 1:  # half the body, then the connection drops
                self.send_response(200)
                for header in meta + [("Content-Length", str(len(data)))]:
                    self.send_header(*header)
                self.end_headers()
                self.wfile.write(data[:len(data) // 2])
                self.wfile.flush()
                self.close_connection = True
                return None
        wanted = self.headers.get("Range")
        if not wanted:
            return self._send(200, data, meta)
        start = int(wanted.split("=", 1)[1].split("-", 1)[0])
        content_range = "bytes %d-%d/%d" % (start, len(data) - 1, len(data))
        return self._send(206, data[start:], meta + [("Content-Range", content_range)])

    do_GET = do_HEAD = _answer


@pytest.fixture(scope="module")
def mirror():
    server = http.server.ThreadingHTTPServer((STAND_IN, 0), Mirror)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield "http://%s:%d" % (STAND_IN, server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def play(fleet, tmp_path, *args, **extra):
    playbook = tmp_path / "hf.yml"
    playbook.write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")), ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    return subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", fleet.inventory_path, str(playbook),
                           "-e", json.dumps(extra), *args], capture_output=True, text=True, env=env, timeout=300,
                          check=False)


class ProxyLog:
    """The requests for ``url`` that the lab's tinyproxy logged since this was made (its log only grows)."""

    def __init__(self, fleet, url):
        self.path = os.path.join(fleet.state, "proxy", "tinyproxy.log")
        self.url = url
        self.start = os.path.getsize(self.path)

    def requests(self):
        with open(self.path, encoding="utf-8", errors="replace") as log:
            log.seek(self.start)
            return re.findall(r"Request \(file descriptor \d+\): (\w+) %s([^?\s]*)\S* " % re.escape(self.url),
                              log.read())


def egress_line(proc):
    """The role's egress report line, its folded lines joined."""
    out = " ".join(proc.stdout.split())
    assert "hf_mirror egress: " in out, proc.stdout[-3000:]
    start = out.index("hf_mirror egress: ")
    return out[start:out.index('"', start)]


@pytest.fixture(scope="module")
def box(lab_free, mirror, tmp_path_factory):
    """lab-01 with the real huggingface_hub in /root/job-env, and the roles applied with the egress check."""
    subprocess.run([os.path.join(VENV_BIN, "python"), "-m", "pip", "download", "-q", "--disable-pip-version-check",
                    "--only-binary=:all:", "-d", WHEELS, "-c", os.path.join(REPO, "requirements-dev.txt"),
                    "huggingface-hub==2.4.0"], check=True, timeout=300)
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "1") as fleet:
        fleet.ssh("lab-01", "python3.11 -m venv /root/job-env && %s -m pip install -q --disable-pip-version-check "
                            "--no-index --find-links %s huggingface-hub==2.4.0" % (PY, shlex.quote(WHEELS)),
                  timeout=300)
        proxied = ProxyLog(fleet, mirror)
        first = play(fleet, tmp_path_factory.mktemp("play"), hf_mirror_endpoint=mirror, hf_mirror_egress_check=True)
        assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
        yield fleet, mirror, (first, proxied.requests())


def test_download_through_a_flaky_mirror_resumes_and_completes(box):
    fleet, mirror = box[:2]
    Mirror.seen.clear()
    proxied = ProxyLog(fleet, mirror)
    # a bare SSH shell: no proxy, no HF_ENDPOINT; trainer-download takes the job's environment itself
    bare = fleet.ssh("lab-01", "env").stdout
    assert "http_proxy=" not in bare and "HF_ENDPOINT=" not in bare
    got = fleet.ssh("lab-01", "%s download %s --backoff 1" % (HELPER, REPO_ID), check=False, timeout=240)
    assert got.returncode == 0, got.stderr
    snapshot = "/root/autodl-tmp/huggingface_cache/hub/models--lab--tiny-model/snapshots/%s" % COMMIT
    assert got.stdout.strip() == snapshot, got.stdout
    # two attempts: the drop, then the resume (a loaded machine can cost one more: a request that the proxy or the
    # stand-in mirror dropped before any byte of the file; the Range header below says what resumed)
    assert re.search(r"done after [23] attempts", got.stderr), got.stderr
    on_box = fleet.ssh("lab-01", "sha256sum %s/model.bin" % snapshot).stdout.split()[0]
    assert on_box == hashlib.sha256(BLOB).hexdigest()
    gets = [rng for method, path, rng in Mirror.seen if method == "GET" and path.endswith("/model.bin")]
    # the drop, then trainer-download's second attempt resumes the partial file where it stopped
    assert gets == [None, "bytes=%d-" % (len(BLOB) // 2)], Mirror.seen
    # the job's path: every request came through the proxy hook's proxy (the same requests: snapshot_download asks
    # for the files in parallel, so the proxy and the mirror can log two of them in either order)
    assert sorted(proxied.requests()) == sorted(request[:2] for request in Mirror.seen), proxied.requests()


def test_dead_mirror_without_modelscope_says_what_was_tried_and_what_to_do(box):
    fleet = box[0]
    got = fleet.ssh("lab-01", "bash -c %s" % shlex.quote(
        ". ~/.trainer/jobenv.sh; HF_ENDPOINT=http://%s:9 %s ~/.trainer/bin/trainer_download.py download lab/gone "
        "--retries 2 --backoff 1 --attempt-timeout 60" % (STAND_IN, PY)), check=False, timeout=240)
    assert got.returncode == 3, got.stderr
    assert "Hugging Face attempt 1 (" in got.stderr and "Hugging Face attempt 2 (" in got.stderr, got.stderr
    assert "ModelScope not tried: the modelscope package is not installed for %s" % PY in got.stderr, got.stderr
    assert "What to do: run `trainer-download egress`" in got.stderr
    assert got.stdout == "" and "Traceback" not in got.stderr


def test_egress_check_reports_the_jobs_real_path_proxy_on_then_off(box, tmp_path):
    fleet, mirror, (first, first_proxied) = box
    # the install's check: through the proxy of the job's environment (a bare SSH shell has none)
    proxy = "http://127.0.0.1:%d" % fleet.record["proxy"]["port"]
    want = ("hf_mirror egress: hf_egress_ok (INFO): the job's Hugging Face endpoint %s (mirror) answered HTTP 200 "
            "through the proxy %s (from http_proxy)." % (mirror, proxy))
    assert egress_line(first) == want + " Nothing to do: downloads in jobs take this path.", egress_line(first)
    assert first_proxied == [("GET", "/")]

    # the stand-in in no_proxy: the job (and so the check) goes direct, and says why
    Mirror.seen.clear()
    proxied = ProxyLog(fleet, mirror)
    direct = play(fleet, tmp_path, hf_mirror_endpoint=mirror, hf_mirror_egress_check=True,
                  network_turbo_no_proxy=[STAND_IN])
    assert direct.returncode == 0, direct.stdout[-4000:]
    assert egress_line(direct).startswith(
        "hf_mirror egress: hf_egress_ok (INFO): the job's Hugging Face endpoint %s (mirror) answered HTTP 200 "
        "directly (no_proxy covers %s)." % (mirror, STAND_IN)), egress_line(direct)
    assert Mirror.seen == [("GET", "/", None)] and proxied.requests() == []
