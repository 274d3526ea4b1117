"""The box_identity module as Ansible runs it: read-only, the id from the session, a malformed value refused."""

from __future__ import annotations

import os

import pytest

from ansible_collections.remote_gpu.trainer.plugins.modules import box_identity

pytestmark = pytest.mark.skipif(os.path.exists("/etc/rp_environment"),
                                reason="this machine is a RunPod pod: its own id is another source")


def test_runpod_id_from_the_session(module_runner, monkeypatch):
    monkeypatch.setenv("RUNPOD_POD_ID", "sess0001")
    failed, result = module_runner(box_identity, {"provider": "runpod"})
    assert not failed and result["changed"] is False, result
    assert (result["id"], result["variable"], result["has_own_id"]) == ("sess0001", "RUNPOD_POD_ID", True)
    assert [row["source"] for row in result["sources"]] == ["session", "container", "file"]


def test_a_malformed_value_fails_with_its_code(module_runner, monkeypatch):
    monkeypatch.setenv("CONTAINER_ID", "9000001; rm -rf /")
    failed, result = module_runner(box_identity, {"provider": "vastai"})
    assert failed and result["error"] == "identity_malformed" and result["id"] is None


def test_lambda_has_no_id_of_its_own(module_runner, monkeypatch):
    monkeypatch.setenv("RUNPOD_POD_ID", "not-lambdas")
    failed, result = module_runner(box_identity, {"provider": "lambda", "_ansible_check_mode": True})
    assert not failed and result["has_own_id"] is False and result["id"] is None and result["sources"] == []
