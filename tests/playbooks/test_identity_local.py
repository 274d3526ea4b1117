"""teardown.yml verifies the instance before the API verb (issue 28), on localhost with an API profile.

The local connection hands the controller's environment to the box-side module, so ``RUNPOD_POD_ID`` set for the
playbook is "the box's own id" here; the lab tests (tests/lab/tests/test_identity_lab.py) do the same against real
sshd boxes whose container environment carries it."""

from __future__ import annotations

import json

import pytest

from pbhelpers import REPO, fake_api, run_playbook, safetensors_bytes

PLAYBOOK = REPO / "playbooks" / "teardown.yml"
KEY = "IDENTITY-LOCAL-KEY-3c2b-never-shown"
ENV_VAR = {"lambda": "LAMBDA_API_KEY", "runpod": "RUNPOD_API_KEY"}


@pytest.fixture
def run_root(tmp_path):
    root = tmp_path / "box" / "runs" / "exp42"
    root.mkdir(parents=True)
    (root / "model.safetensors").write_bytes(safetensors_bytes((1.0, 2.0)))
    return root


def meter_stop(provider, pid, state="absent"):
    return {"trainer_meter_stop": {
        "verb": "terminate", "how": "the provider's API", "command": [],
        "api": {"provider": provider, "id": pid, "state": state, "key_env": ENV_VAR[provider]},
        "reversible": False, "deletes": "the disks", "verified": "2026-06"}}


def teardown(local_inventory, tmp_path, run_root, fake, pid, **env):
    extra = dict(meter_stop(fake.provider, pid), provider_api_url=fake.url, teardown_run_id="exp42",
                 teardown_result_root=str(run_root), teardown_roster=["model.safetensors"],
                 teardown_pull_root=str(tmp_path / "pulls"))
    env[ENV_VAR[fake.provider]] = KEY
    return run_playbook(PLAYBOOK, local_inventory, "-e", json.dumps(extra), "-e", "teardown_approve=localhost",
                        **env)


def receipt(tmp_path):
    return tmp_path / "pulls" / "localhost" / "TEARDOWN_RECEIPT.json"


def verbs(fake):
    return [(r["method"], r["path"]) for r in fake.api_requests() if r["method"] != "GET"]


@pytest.fixture
def serve(fake_apis):
    return lambda provider, records: fake_apis(provider, KEY, records)


def test_lambda_record_that_points_elsewhere_is_refused(local_inventory, tmp_path, run_root, serve):
    record = fake_api.lambda_instance(1, "198.51.100.9")  # another machine than this host (localhost)
    fake = serve("lambda", [record])
    proc = teardown(local_inventory, tmp_path, run_root, fake, record["id"])
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "address_mismatch" in out and "198.51.100.9:22" in out, out[-3000:]
    assert verbs(fake) == [] and fake.find(record["id"])["status"] == "active"
    assert not receipt(tmp_path).exists()
    assert KEY not in out


def test_an_id_the_provider_does_not_know_writes_no_acted_receipt(local_inventory, tmp_path, run_root, serve):
    fake = serve("lambda", [fake_api.lambda_instance(1, "127.0.0.1")])
    proc = teardown(local_inventory, tmp_path, run_root, fake, "0920582c-stale")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "instance_not_found" in out and "lambda_instance_id" in out and "dashboard" in out, out[-3000:]
    assert verbs(fake) == []
    assert not receipt(tmp_path).exists()


def test_the_box_says_it_is_another_pod(local_inventory, tmp_path, run_root, serve):
    pods = [fake_api.runpod_pod(1, "127.0.0.1", 22), fake_api.runpod_pod(2, "127.0.0.1", 2222)]
    fake = serve("runpod", pods)
    proc = teardown(local_inventory, tmp_path, run_root, fake, "fakepod0002", RUNPOD_POD_ID="fakepod0001")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "identity_mismatch" in out and "fakepod0001" in out, out[-3000:]
    assert fake.api_requests() == []  # the other pod is not even read
    assert not receipt(tmp_path).exists()


def test_the_box_is_the_pod_then_one_terminate_and_an_acted_receipt(local_inventory, tmp_path, run_root, serve):
    fake = serve("runpod", [fake_api.runpod_pod(1, "127.0.0.1", 22), fake_api.runpod_pod(2, "127.0.0.1", 2222)])
    proc = teardown(local_inventory, tmp_path, run_root, fake, "fakepod0001", RUNPOD_POD_ID="fakepod0001")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert verbs(fake) == [("DELETE", "/v1/pods/fakepod0001")]
    assert json.loads(receipt(tmp_path).read_text())["acted"] is True
