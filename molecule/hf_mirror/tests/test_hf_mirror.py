"""hf_mirror on the lab fleet, checked with the real huggingface_hub in the job environment."""

from __future__ import annotations

import hashlib
import json
import pathlib
import shlex
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "resources"))
import labenv  # noqa: E402

CONVERGE = labenv.converge(__file__)
testinfra_hosts = labenv.hosts("lab")
PY = "/root/job-env/bin/python"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
CONFIG = b'{"model_type": "lab-tiny", "hidden_size": 8}\n'
EXPECT = {
    "autodl": {"HF_ENDPOINT": "https://hf-mirror.com", "HF_HUB_DISABLE_XET": "1", "HF_HOME": "/root/autodl-tmp/huggingface_cache"},
    "runpod": {"HF_HUB_DISABLE_XET": "1", "HF_HOME": "/workspace/.cache/huggingface", "HF_HUB_ENABLE_HF_TRANSFER": "1"},
}
CONSTANTS = ("import json; from huggingface_hub import constants as c; print(json.dumps({'endpoint': c.ENDPOINT, "
             "'home': c.HF_HOME, 'cache': c.HF_HUB_CACHE, 'xet_off': c.HF_HUB_DISABLE_XET}))")


def platform(host):
    return labenv.hostvars(labenv.name(host))["lab_platform"]


class Mirror(labenv.QuietHandler):
    """One file of one model repo in the Hugging Face resolve layout: /<repo>/resolve/<rev>/<file>."""

    seen = []

    def _meta(self):
        path = self.path.split("?")[0]
        Mirror.seen.append((self.command, path))
        if path not in ("/lab/tiny-model/resolve/main/config.json", "/lab/tiny-model/resolve/%s/config.json" % COMMIT):
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return False
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(CONFIG)))
        self.send_header("ETag", '"%s"' % hashlib.sha1(CONFIG).hexdigest())
        self.send_header("X-Repo-Commit", COMMIT)
        self.end_headers()
        return True

    def do_HEAD(self):  # noqa: N802
        self._meta()

    def do_GET(self):  # noqa: N802
        if self._meta():
            self.wfile.write(CONFIG)


@pytest.fixture(scope="module")
def mirror():
    with labenv.serve(Mirror) as port:
        yield "http://%s:%d" % (labenv.STAND_IN, port)


def test_job_sees_exactly_the_role_variables(host):
    want = EXPECT[platform(host)]
    assert labenv.env_changes(host) == set(want)
    assert labenv.job_env(host, want) == want


def test_huggingface_hub_constants_report_mirror_and_cache(host):
    want = EXPECT[platform(host)]
    got = labenv.job(host, "%s -W ignore::FutureWarning -c %s" % (PY, shlex.quote(CONSTANTS)))
    assert got.rc == 0, got.stderr
    constants = json.loads(got.stdout)
    assert constants["endpoint"] == want.get("HF_ENDPOINT", "https://huggingface.co")
    assert constants["home"] == want["HF_HOME"]
    assert constants["cache"] == want["HF_HOME"] + "/hub"
    assert constants["xet_off"] is True
    assert host.file(want["HF_HOME"]).is_directory


def test_hf_hub_download_lands_under_hf_home_on_the_data_disk(host, mirror):
    if platform(host) != "autodl":
        pytest.skip("the download runs on the autodl instance")
    proc = labenv.run_playbook(CONVERGE, "--limit", labenv.name(host), "-e", "hf_mirror_endpoint=%s" % mirror)
    assert proc.returncode == 0, proc.stdout[-3000:]
    try:
        got = labenv.job(host, "%s -c %s" % (PY, shlex.quote(
            "from huggingface_hub import hf_hub_download; print(hf_hub_download('lab/tiny-model', 'config.json'))")))
        assert got.rc == 0, got.stderr
        path = got.stdout.strip()
        assert path == "/root/autodl-tmp/huggingface_cache/hub/models--lab--tiny-model/snapshots/%s/config.json" % COMMIT
        assert host.file(path).content == CONFIG
        assert host.check_output("df --output=target %s | tail -1" % path) == "/root/autodl-tmp"
        assert ("GET", "/lab/tiny-model/resolve/main/config.json") in Mirror.seen
    finally:
        proc = labenv.run_playbook(CONVERGE, "--limit", labenv.name(host))
        assert proc.returncode == 0, proc.stdout[-3000:]


def test_hf_transfer_only_when_installed():
    proc = labenv.run_playbook(CONVERGE, "--limit", "runpod", "-e", "hf_mirror_interpreter=/usr/bin/python3")
    try:
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert "HF_HUB_ENABLE_HF_TRANSFER not set: hf_transfer is not installed for /usr/bin/python3" in proc.stdout
        lab02 = labenv.runner().get_host("lab-02")
        assert "HF_HUB_ENABLE_HF_TRANSFER" not in labenv.env_changes(lab02)
    finally:
        assert labenv.run_playbook(CONVERGE, "--limit", "runpod").returncode == 0


def test_check_mode_changes_nothing():
    proc = labenv.run_playbook(CONVERGE, "--check")
    assert proc.returncode == 0 and labenv.recap_changed(proc.stdout) == 0, proc.stdout[-3000:]
