"""-i runpod.yml -i vastai.yml with an instance of the same name in both: a warning that names both, and no host
with two providers' ids (issue 28). No root, no lab: the fakes serve the providers' shapes."""

from __future__ import annotations

import json
import subprocess

from pbhelpers import REPO, VENV_BIN, ansible_env, fake_api, unwrap

KEY = "CLASH-KEY-1a2b3c-never-shown"
ID_VARS = ("runpod_pod_id", "vastai_instance_id", "lambda_instance_id", "autodl_instance_uuid")


def test_two_providers_one_name_never_merge(tmp_path):
    runpod = fake_api.FakeAPI("runpod", KEY, [fake_api.runpod_pod(1, "198.51.100.1", 40001, name="exp")]).start()
    vast = fake_api.FakeAPI("vastai", KEY, [fake_api.vastai_instance(2, "198.51.100.2", 40002, label="exp")]).start()
    try:
        (tmp_path / "runpod.yml").write_text("plugin: remote_gpu.trainer.runpod\napi_url: %s\n" % runpod.url)
        (tmp_path / "vastai.yml").write_text("plugin: remote_gpu.trainer.vastai\napi_url: %s\n" % vast.url)
        proc = subprocess.run(
            [str(VENV_BIN / "ansible-inventory"), "-i", str(tmp_path / "runpod.yml"), "-i", str(tmp_path / "vastai.yml"),
             "--list", "--export"], capture_output=True, text=True, cwd=REPO, timeout=300, check=False,
            env=ansible_env(RUNPOD_API_KEY=KEY, VAST_API_KEY=KEY, ANSIBLE_INVENTORY_UNPARSED_FAILED="True"))
    finally:
        runpod.stop()
        vast.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = unwrap(json.loads(proc.stdout))
    hostvars = data["_meta"]["hostvars"]
    assert sorted(hostvars) == ["exp", "exp-vastai"]
    for host, hv in hostvars.items():
        assert len([var for var in ID_VARS if var in hv]) == 1, (host, hv)
    assert hostvars["exp"]["runpod_pod_id"] == "fakepod0001" and hostvars["exp"]["ansible_port"] == 40001
    assert hostvars["exp-vastai"]["vastai_instance_id"] == "9000002"
    assert hostvars["exp-vastai"]["ansible_host"] == "198.51.100.2"
    warning = " ".join(proc.stderr.split())
    assert "vastai: instance 9000002 is named 'exp'" in warning and "runpod instance fakepod0001" in warning, warning
    assert "'exp-vastai'" in warning
    assert KEY not in proc.stdout + proc.stderr
