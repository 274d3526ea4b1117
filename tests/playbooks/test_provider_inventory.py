"""ansible-inventory through the runpod, vastai, lambda_cloud and autodl inventory plugins, against the loopback
fakes of their APIs.

No root and no lab: the fake serves the providers' real shapes; the addresses are made up (nothing connects)."""

from __future__ import annotations

import json
import subprocess

import pytest

from pbhelpers import REPO, VENV_BIN, ansible_env, fake_api, unwrap

KEY = "TESTKEY-9f8e7d6c5b4a-never-print-me"
ENV_VAR = {"runpod": "RUNPOD_API_KEY", "vastai": "VAST_API_KEY", "lambda": "LAMBDA_API_KEY", "autodl": "AUTODL_TOKEN"}
PLUGIN = {"runpod": "runpod", "vastai": "vastai", "lambda": "lambda_cloud", "autodl": "autodl"}


@pytest.fixture
def serve(fake_apis):
    return lambda provider, records, key=KEY: fake_apis(provider, key, records)


def write_config(tmp_path, provider, fake, extra="", name=None):
    path = tmp_path / (name or "%s.yml" % PLUGIN[provider])
    text = "plugin: remote_gpu.trainer.%s\napi_url: %s\nretry_budget: 3\n%s" % (PLUGIN[provider], fake.url, extra)
    path.write_text(text)
    return path


def inventory(config, provider, *args, key=KEY, failed_is_fatal=True, **env):
    extra = {ENV_VAR[provider]: key} if key is not None else {}
    if failed_is_fatal:
        extra["ANSIBLE_INVENTORY_UNPARSED_FAILED"] = "True"
    extra.update(env)
    base = ansible_env(**extra)
    if key is None:
        base.pop(ENV_VAR[provider], None)
    out = config.parent / "inventory-out.json"
    if out.exists():
        out.unlink()
    proc = subprocess.run([str(VENV_BIN / "ansible-inventory"), "-i", str(config), "--list", "--export", "--output",
                           str(out), *args], capture_output=True, text=True, cwd=REPO, env=base, timeout=300, check=False)
    text = out.read_text() if out.exists() else ""
    proc.stdout += text  # the listing counts as output too (for the "key never shown" checks)
    data = unwrap(json.loads(text)) if proc.returncode == 0 else None
    return proc, data


def group_hosts(data, group):
    return sorted(data.get(group, {}).get("hosts", []))


# --- RunPod -------------------------------------------------------------------------------------------------------

def test_runpod_list_exact_hostvars_groups_and_starting(tmp_path, serve):
    records = [fake_api.runpod_pod(1, "198.51.100.1", 10341),
               fake_api.runpod_pod(2, "198.51.100.2", 10342, count=8, interruptible=True, price=21.52),
               fake_api.runpod_pod(3, None, None, ready=False), fake_api.runpod_pod(4, "h", 1, status="EXITED")]
    fake = serve("runpod", records)
    proc, data = inventory(write_config(tmp_path, "runpod", fake), "runpod")
    assert proc.returncode == 0, proc.stderr
    assert group_hosts(data, "runpod") == ["train-1", "train-2"] == group_hosts(data, "running")
    assert sorted(data["_meta"]["hostvars"]) == ["train-1", "train-2"]  # only running pods by default
    hv = dict(data["_meta"]["hostvars"]["train-2"])
    record = hv.pop("runpod")
    assert hv == {"ansible_host": "198.51.100.2", "ansible_port": 10342, "provider": "runpod",
                  "provider_id": "fakepod0002", "provider_status": "RUNNING", "provider_state": "running",
                  "gpu_type": "H100 80GB HBM3", "gpu_count": 8, "region": "EU-RO-1", "price_per_hour": 21.52,
                  "interruptible": True, "trainer_price_per_hour": 21.52, "runpod_pod_id": "fakepod0002",
                  "provider_api_url": fake.url}
    assert record["portMappings"] == {"22": 10342} and "env" not in record
    assert record["observed"]["status"] == "RUNNING" and "env" not in record["observed"]
    assert "fakepod0003" in proc.stderr and "include_states" in proc.stderr and "starting" in proc.stderr
    assert "fake-env-secret" not in proc.stdout
    # the REST v1 list (not paged) and the v2 list, for the observed status
    assert [r["path"] for r in fake.api_requests()] == ["/v1/pods", "/v2/pods"]
    proc, data = inventory(write_config(tmp_path, "runpod", fake, "include_states: [starting]\n"), "runpod")
    assert group_hosts(data, "starting") == ["train-3"] and group_hosts(data, "running") == ["train-1", "train-2"]
    assert group_hosts(data, "runpod") == ["train-1", "train-2", "train-3"]  # listed on demand: its profile applies
    starting = data["_meta"]["hostvars"]["train-3"]
    assert "ansible_host" not in starting and starting["provider_state"] == "starting"


def test_runpod_observed_status_off_reads_the_intent_only(tmp_path, serve):
    fake = serve("runpod", [fake_api.runpod_pod(1, "198.51.100.1", 10341, observed="ERROR")])
    proc, data = inventory(write_config(tmp_path, "runpod", fake, "observed_status: false\n"), "runpod")
    assert group_hosts(data, "runpod") == ["train-1"], proc.stderr  # desiredStatus RUNNING: the intent only
    assert [r["path"] for r in fake.api_requests()] == ["/v1/pods"]
    proc, data = inventory(write_config(tmp_path, "runpod", fake), "runpod")
    assert group_hosts(data, "runpod") == [] and "unhealthy" in proc.stderr  # observed ERROR: never running


def test_runpod_include_stopped(tmp_path, serve):
    fake = serve("runpod", [fake_api.runpod_pod(4, "h", 1, status="EXITED")])
    proc, data = inventory(write_config(tmp_path, "runpod", fake, "include_stopped: true\n"), "runpod")
    assert proc.returncode == 0, proc.stderr
    assert group_hosts(data, "stopped") == ["train-4"]


def test_runpod_group_vars_apply_and_limit_works(tmp_path, serve):
    """The hosts are in group runpod: group_vars/runpod.yml applies, and -l runpod selects them."""
    fake = serve("runpod", [fake_api.runpod_pod(1, "198.51.100.1", 10341)])
    config = write_config(tmp_path, "runpod", fake)
    proc = subprocess.run([str(VENV_BIN / "ansible"), "-i", str(config), "runpod", "--list-hosts"], capture_output=True,
                          text=True, cwd=REPO, env=ansible_env(RUNPOD_API_KEY=KEY), timeout=300, check=False)
    assert proc.returncode == 0 and "train-1" in proc.stdout, proc.stderr
    proc = subprocess.run([str(VENV_BIN / "ansible-inventory"), "-i", str(config), "--host", "train-1"],
                          capture_output=True, text=True, cwd=REPO, env=ansible_env(RUNPOD_API_KEY=KEY), timeout=300,
                          check=False)
    assert json.loads(proc.stdout)["trainer_profile"] == "runpod", proc.stderr


def test_constructable_compose_groups_keyed_groups_filters(tmp_path, serve):
    records = [fake_api.runpod_pod(1, "198.51.100.1", 1, gpu="NVIDIA H100 80GB HBM3", datacenter="EU-RO-1"),
               fake_api.runpod_pod(2, "198.51.100.2", 2, gpu="NVIDIA A40", datacenter="US-KS-2", interruptible=True),
               fake_api.runpod_pod(3, "198.51.100.3", 3, gpu="NVIDIA RTX 4090", datacenter="US-KS-2")]
    fake = serve("runpod", records)
    extra = ("filters:\n  - gpu_type is not search('4090')\n"
             "compose:\n  hourly_cents: (price_per_hour * 100) | int\n"
             "groups:\n  spot: interruptible\n"
             "keyed_groups:\n  - key: region\n    prefix: dc\n")
    proc, data = inventory(write_config(tmp_path, "runpod", fake, extra), "runpod")
    assert proc.returncode == 0, proc.stderr
    assert sorted(data["_meta"]["hostvars"]) == ["train-1", "train-2"]
    assert group_hosts(data, "spot") == ["train-2"]
    assert group_hosts(data, "dc_EU_RO_1") == ["train-1"] and group_hosts(data, "dc_US_KS_2") == ["train-2"]
    assert data["_meta"]["hostvars"]["train-1"]["hourly_cents"] == 269


def test_config_file_name_must_end_in_plugin_name(tmp_path, serve):
    fake = serve("runpod", [fake_api.runpod_pod(1, "198.51.100.1", 10341)])
    proc, _data = inventory(write_config(tmp_path, "runpod", fake, name="pods.yml"), "runpod")
    assert proc.returncode != 0 and fake.api_requests() == []


def test_cache_second_run_makes_no_request(tmp_path, serve):
    fake = serve("runpod", [fake_api.runpod_pod(1, "198.51.100.1", 10341)])
    extra = "cache: true\ncache_plugin: ansible.builtin.jsonfile\ncache_connection: %s\ncache_timeout: 600\n" % (
        tmp_path / "cache")
    config = write_config(tmp_path, "runpod", fake, extra)
    first, data1 = inventory(config, "runpod")
    second, data2 = inventory(config, "runpod")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert data1 == data2 and "train-1" in data2["_meta"]["hostvars"]
    assert len(fake.api_requests()) == 2  # the first run only: GET /v1/pods and /v2/pods
    # A failed refresh does not overwrite the good cache: the next cached run still has the hosts, with no request.
    fake.inject({"status": 401})
    failed, _data = inventory(config, "runpod", "--flush-cache")
    assert failed.returncode != 0
    third, data3 = inventory(config, "runpod")
    assert third.returncode == 0 and data3 == data1 and len(fake.api_requests()) == 3  # v1 + v2, the failed v1
    assert KEY not in "".join(p.stdout + p.stderr for p in (first, second, failed, third))
    assert KEY not in "".join(f.read_text() for f in (tmp_path / "cache").iterdir())


PLANTED = "PLANTED-cache-secret-31"
# fields of the providers' records that hostvars leave out and that no secret-key pattern names, each holding a planted
# secret (RunPod's start command and entrypoint, vast's container arguments, a field a provider may add tomorrow)
PLANT = {
    "runpod": {"dockerStartCmd": ["bash", "-c", "export HF_TOKEN=%s; sleep infinity" % PLANTED],
               "dockerEntrypoint": ["/start.sh", "--wandb", PLANTED], "newField": PLANTED},
    "vastai": {"image_args": ["-e", "WANDB_API_KEY=%s" % PLANTED], "template_name": "x %s" % PLANTED,
               "newField": PLANTED},
    "lambda": {"user_data": "#cloud-config\nexport HF_TOKEN=%s\n" % PLANTED, "newField": PLANTED},
    "autodl": {"start_cmd": "HF_TOKEN=%s python train.py" % PLANTED, "newField": PLANTED},
}
RECORDS = {"runpod": lambda: [fake_api.runpod_pod(1, "198.51.100.1", 10341)],
           "vastai": lambda: [fake_api.vastai_instance(1, "198.51.100.1", 40001)],
           "lambda": lambda: [fake_api.lambda_instance(1, "198.51.100.1")],
           "autodl": lambda: [fake_api.autodl_instance(1, "connect.westb.seetacloud.com", 41001)]}


@pytest.mark.parametrize("provider", sorted(PLANT))
def test_the_cache_holds_only_what_hostvars_hold(tmp_path, serve, provider):
    """Issue 31: with cache on, the cache file keeps of each record only the fields that reach hostvars (the curated
    copy under <provider>), so a secret in a field hostvars leave out (a start command, container arguments, a
    field the provider adds) is never written to disk; and a cached run lists the same hosts as a fresh one."""
    records = RECORDS[provider]()
    for record in records:
        record.update(PLANT[provider])
    fake = serve(provider, records)
    cache = tmp_path / "cache"
    extra = "cache: true\ncache_plugin: ansible.builtin.jsonfile\ncache_connection: %s\ncache_timeout: 600\n" % cache
    config = write_config(tmp_path, provider, fake, extra)
    first, fresh = inventory(config, provider, "-vvv")
    second, cached = inventory(config, provider)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert cached == fresh and len(fresh["_meta"]["hostvars"]) == 1, (fresh, cached)
    text = "".join(f.read_text() for f in cache.iterdir())
    assert text and PLANTED not in text, "a planted secret is in the inventory cache"
    assert PLANTED not in first.stdout + first.stderr + second.stdout + second.stderr
    hostvars = next(iter(fresh["_meta"]["hostvars"].values()))
    kept = hostvars[provider]
    for value in (json.loads(f.read_text()) for f in cache.iterdir()):
        if isinstance(value, dict) and isinstance(value.get("__payload__"), str):  # the jsonfile plugin's wrapper
            value = json.loads(value["__payload__"])
        assert isinstance(value, list) and value, value
        for record in value:
            assert set(record) <= set(kept) | {"name", "title"}, sorted(set(record) - set(kept))


# --- vast.ai ------------------------------------------------------------------------------------------------------

def test_vastai_list_direct_proxy_and_starting(tmp_path, serve):
    records = [fake_api.vastai_instance(1, "198.51.100.11", 40001),
               fake_api.vastai_instance(2, "ssh4.vast.ai", 31002, direct=False, bid=True, count=4, price=1.6),
               fake_api.vastai_instance(3, "198.51.100.13", 40003, status="loading")]
    fake = serve("vastai", records)
    proc, data = inventory(write_config(tmp_path, "vastai", fake, "include_states: [starting]\n"), "vastai")
    assert proc.returncode == 0, proc.stderr
    assert group_hosts(data, "running") == ["train-1", "train-2"] and group_hosts(data, "starting") == ["train-3"]
    hvs = data["_meta"]["hostvars"]
    assert (hvs["train-1"]["ansible_host"], hvs["train-1"]["ansible_port"]) == ("198.51.100.11", 40001)
    hv = dict(hvs["train-2"])
    record = hv.pop("vastai")
    assert hv == {"ansible_host": "ssh4.vast.ai", "ansible_port": 31002, "provider": "vastai", "provider_id": "9000002",
                  "provider_status": "running", "provider_state": "running", "gpu_type": "RTX_4090", "gpu_count": 4,
                  "region": "Norway, NO", "price_per_hour": 1.6, "interruptible": True, "trainer_price_per_hour": 1.6,
                  "vastai_instance_id": "9000002", "provider_api_url": fake.url}
    assert record["ssh_port"] == 31002 and "extra_env" not in record and "jupyter_token" not in record
    assert record["label"] == "train-2"  # kept for keyed_groups
    assert "fake-env-secret" not in proc.stdout and "fake-jupyter-token" not in proc.stdout
    assert data["_meta"]["hostvars"]["train-3"]["provider_state"] == "starting"
    proc, data = inventory(write_config(tmp_path, "vastai", fake), "vastai")
    assert "train-3" not in data["_meta"]["hostvars"] and "9000003" in proc.stderr and "starting" in proc.stderr


def test_vastai_500_instances_over_20_pages_one_request_each(tmp_path, serve):
    pairs = [("198.51.100.%d" % (i % 250 + 1), 40000 + i) for i in range(500)]
    fake = serve("vastai", fake_api.records_for("vastai", pairs))
    proc, data = inventory(write_config(tmp_path, "vastai", fake), "vastai")
    assert proc.returncode == 0, proc.stderr
    assert len(group_hosts(data, "vastai")) == 500
    reqs = fake.api_requests()
    assert len(reqs) == 20 and all(r["path"] == "/api/v1/instances/" and r["auth_ok"] for r in reqs)
    assert [r["query"].get("after_token") for r in reqs] == [None] + ["t%d" % (25 * i) for i in range(1, 20)]
    assert {r["query"]["limit"] for r in reqs} == {"25"}


def test_vastai_a_failed_page_fails_the_whole_source(tmp_path, serve):
    fake = serve("vastai", fake_api.records_for("vastai", [("198.51.100.1", 40000 + i) for i in range(60)]))
    fake.inject({}, {}, {"malformed": True})
    proc, _data = inventory(write_config(tmp_path, "vastai", fake), "vastai")
    assert proc.returncode != 0 and "malformed response" in proc.stderr
    assert "Traceback" not in proc.stderr and len(fake.api_requests()) == 3


# --- Lambda Cloud -------------------------------------------------------------------------------------------------

def test_lambda_list_exact_hostvars_booting_and_terminated(tmp_path, serve):
    records = [fake_api.lambda_instance(1, "198.51.100.21"),
               fake_api.lambda_instance(2, "198.51.100.22", itype="gpu_8x_h100_sxm5", gpu="H100 (80 GB SXM5)",
                                        gpus=8, cents=2392, region="us-west-1"),
               fake_api.lambda_instance(3, None, status="booting"),
               fake_api.lambda_instance(4, "198.51.100.24", status="terminated")]
    fake = serve("lambda", records)
    proc, data = inventory(write_config(tmp_path, "lambda", fake, "include_states: [starting]\n"), "lambda")
    assert proc.returncode == 0, proc.stderr
    assert group_hosts(data, "running") == ["train-1", "train-2"] and group_hosts(data, "starting") == ["train-3"]
    assert "train-4" not in data["_meta"]["hostvars"]
    hv = dict(data["_meta"]["hostvars"]["train-2"])
    record = hv.pop("lambda")
    assert hv == {"ansible_host": "198.51.100.22", "ansible_port": 22, "provider": "lambda",
                  "provider_id": records[1]["id"], "provider_status": "active", "provider_state": "running",
                  "gpu_type": "H100 (80 GB SXM5)", "gpu_count": 8, "region": "us-west-1", "price_per_hour": 23.92,
                  "interruptible": False, "trainer_price_per_hour": 23.92, "lambda_instance_id": records[1]["id"],
                  "provider_api_url": fake.url, "lambda_nfs_name": "lab-nfs", "lambda_durable_dir": "/lambda/nfs/lab-nfs"}
    assert record["instance_type"]["price_cents_per_hour"] == 2392 and "jupyter_token" not in record
    assert "fake-jupyter-token" not in proc.stdout
    assert [r["path"] for r in fake.api_requests()] == ["/api/v1/instances"]


def test_lambda_durable_dir_from_file_system_mounts_and_tags_kept(tmp_path, serve):
    record = fake_api.lambda_instance(1, "198.51.100.21")
    record["file_system_mounts"] = [{"mount_point": "/data/lab-nfs", "file_system_id": "fs-0001"}]
    record["tags"] = [{"key": "team", "value": "vision"}]
    fake = serve("lambda", [record])
    extra = "keyed_groups:\n  - key: lambda.tags | items2dict\n    prefix: tag\n"
    proc, data = inventory(write_config(tmp_path, "lambda", fake, extra), "lambda")
    assert proc.returncode == 0, proc.stderr
    hv = data["_meta"]["hostvars"]["train-1"]
    assert hv["lambda_durable_dir"] == "/data/lab-nfs" and hv["lambda"]["tags"] == [{"key": "team", "value": "vision"}]
    assert group_hosts(data, "tag_team_vision") == ["train-1"]
    proc = subprocess.run([str(VENV_BIN / "ansible"), "-i", str(write_config(tmp_path, "lambda", fake)), "train-1",
                           "-m", "ansible.builtin.debug", "-a", "var=trainer_durable_dir"], capture_output=True,
                          text=True, cwd=REPO, env=ansible_env(LAMBDA_API_KEY=KEY), timeout=300, check=False)
    assert "trainer_durable_dir: /data/lab-nfs" in proc.stdout, proc.stdout + proc.stderr


def test_lambda_config_file_is_named_lambda_cloud(tmp_path, serve):
    fake = serve("lambda", [fake_api.lambda_instance(1, "198.51.100.21")])
    proc, _data = inventory(write_config(tmp_path, "lambda", fake, name="lambda.yml"), "lambda")
    assert proc.returncode != 0 and fake.api_requests() == []


# --- AutoDL Pro ---------------------------------------------------------------------------------------------------

def test_autodl_list_snapshot_exact_hostvars_and_secrets_left_out(tmp_path, serve):
    records = [fake_api.autodl_instance(1, "connect.westb.seetacloud.com", 41001),
               fake_api.autodl_instance(2, "connect.westc.seetacloud.com", 41002, gpus=4, payg_milli=7520,
                                        region="西北C区", region_sign="westDC4"),
               fake_api.autodl_instance(3, None, None, status="starting"),
               fake_api.autodl_instance(4, "connect.westb.seetacloud.com", 41004, status="shutdown")]
    fake = serve("autodl", records)
    proc, data = inventory(write_config(tmp_path, "autodl", fake, "include_states: [starting]\n"), "autodl")
    assert proc.returncode == 0, proc.stderr
    assert group_hosts(data, "running") == ["autodl-pro-fake0000001", "autodl-pro-fake0000002"]
    assert group_hosts(data, "starting") == ["autodl-pro-fake0000003"]
    hv = dict(data["_meta"]["hostvars"]["autodl-pro-fake0000002"])
    record = hv.pop("autodl")
    assert {k: hv[k] for k in ("ansible_host", "ansible_port", "provider", "provider_id", "provider_status",
                               "gpu_type", "gpu_count", "region", "price_per_hour", "interruptible",
                               "trainer_price_per_hour", "autodl_instance_uuid")} == {
        "ansible_host": "connect.westc.seetacloud.com", "ansible_port": 41002, "provider": "autodl",
        "provider_id": "pro-fake0000002", "provider_status": "running", "gpu_type": "RTX 4090D", "gpu_count": 4,
        "region": "西北C区", "price_per_hour": 7.52, "interruptible": False, "trainer_price_per_hour": 7.52,
        "autodl_instance_uuid": "pro-fake0000002"}
    assert record["snapshot"]["ssh_port"] == 41002
    assert "fake-root-password" not in proc.stdout + proc.stderr and "ssh_command" not in proc.stdout
    # one list page, one snapshot per running instance, every request with the bare token
    reqs = fake.api_requests()
    assert [(r["method"], r["path"]) for r in reqs] == [("POST", "/api/v1/dev/instance/pro/list")] + [
        ("GET", "/api/v1/dev/instance/pro/snapshot")] * 2
    assert all(r["auth_ok"] for r in reqs)


def test_autodl_pages_to_max_page(tmp_path, serve):
    fake = serve("autodl", [fake_api.autodl_instance(i, "h", 40000 + i, status="shutdown") for i in range(1, 121)])
    proc, data = inventory(write_config(tmp_path, "autodl", fake, "include_stopped: true\n"), "autodl")
    assert proc.returncode == 0, proc.stderr
    assert len(group_hosts(data, "stopped")) == 120
    reqs = fake.api_requests()
    assert [r["body"]["page_index"] for r in reqs] == [1, 2, 3] and {r["body"]["page_size"] for r in reqs} == {50}


@pytest.mark.parametrize("code,words", [("InvalidParams", "error code InvalidParams (HTTP 200)"),
                                        ("AuthorizeFailed", "Set the environment variable AUTODL_TOKEN")])
def test_autodl_http_200_with_an_error_code_is_an_error(tmp_path, serve, code, words):
    fake = serve("autodl", [fake_api.autodl_instance(1, "h", 41001)])
    fake.inject({"code": code, "msg": "something is wrong"})
    proc, _data = inventory(write_config(tmp_path, "autodl", fake), "autodl", "-vvv")
    assert proc.returncode != 0 and words in proc.stderr and "something is wrong" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and KEY not in proc.stdout + proc.stderr


def test_autodl_error_code_on_a_snapshot_fails_the_whole_source(tmp_path, serve):
    fake = serve("autodl", [fake_api.autodl_instance(1, "h", 41001), fake_api.autodl_instance(2, "h", 41002)])
    fake.inject({}, {}, {"code": "InstanceNotFound"})
    proc, _data = inventory(write_config(tmp_path, "autodl", fake), "autodl")
    assert proc.returncode != 0 and "error code InstanceNotFound" in proc.stderr and "Traceback" not in proc.stderr


# --- errors, every provider ---------------------------------------------------------------------------------------

PROVIDERS = ("runpod", "vastai", "lambda", "autodl")
BASE_REQUESTS = {"autodl": 2, "runpod": 2}  # AutoDL: the list and the running snapshot; RunPod: v1 and v2 lists


def one_record(provider):
    return fake_api.records_for(provider, [("198.51.100.1", 40001)])


@pytest.mark.parametrize("provider", PROVIDERS)
def test_no_key_names_the_env_var(tmp_path, serve, provider):
    fake = serve(provider, one_record(provider))
    proc, _data = inventory(write_config(tmp_path, provider, fake), provider, key=None)
    assert proc.returncode != 0 and "Set the environment variable %s" % ENV_VAR[provider] in proc.stderr
    assert fake.api_requests() == []


@pytest.mark.parametrize("provider", PROVIDERS)
def test_wrong_key_names_the_env_var_and_key_never_shown_at_vvv(tmp_path, serve, provider):
    fake = serve(provider, one_record(provider))
    wrong = "WRONGKEY-0000-also-never-print"
    proc, _data = inventory(write_config(tmp_path, provider, fake), provider, "-vvv", key=wrong)
    assert proc.returncode != 0 and "HTTP 401" in proc.stderr and ENV_VAR[provider] in proc.stderr
    assert wrong not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("provider", PROVIDERS)
def test_key_appears_zero_times_at_vvv(tmp_path, serve, provider):
    fake = serve(provider, one_record(provider))
    proc, data = inventory(write_config(tmp_path, provider, fake), provider, "-vvv")
    assert proc.returncode == 0 and data["_meta"]["hostvars"], proc.stderr
    assert (proc.stdout + proc.stderr).count(KEY) == 0


@pytest.mark.parametrize("provider", PROVIDERS)
def test_rate_limit_and_5xx_are_retried(tmp_path, serve, provider):
    fake = serve(provider, one_record(provider))
    fake.inject({"status": 429, "retry_after": 0}, {"status": 503, "retry_after": 0})
    proc, data = inventory(write_config(tmp_path, provider, fake), provider)
    assert proc.returncode == 0 and data["_meta"]["hostvars"], proc.stderr
    assert len(fake.api_requests()) == BASE_REQUESTS.get(provider, 1) + 2


@pytest.mark.parametrize("provider", PROVIDERS)
def test_persistent_5xx_fails_within_the_budget(tmp_path, serve, provider):
    fake = serve(provider, one_record(provider))
    fake.inject(*[{"status": 500}] * 20)
    proc, _data = inventory(write_config(tmp_path, provider, fake), provider)
    assert proc.returncode != 0 and "gave up after" in proc.stderr and "HTTP 500" in proc.stderr
    assert len(fake.api_requests()) <= 3  # 1 s + 2 s of backoff fit in retry_budget: 3


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("fault,words", [({"truncate": True}, "truncated response"),
                                         ({"malformed": True}, "malformed response")])
def test_truncated_or_malformed_answer_is_a_clear_error(tmp_path, serve, provider, fault, words):
    fake = serve(provider, one_record(provider))
    fake.inject(fault)
    proc, _data = inventory(write_config(tmp_path, provider, fake), provider)
    assert proc.returncode != 0 and words in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("provider", PROVIDERS)
def test_slow_answer_times_out_then_retries(tmp_path, serve, provider):
    fake = serve(provider, one_record(provider))
    fake.inject({"slow": 3})
    proc, data = inventory(write_config(tmp_path, provider, fake, "timeout: 1\n"), provider)
    assert proc.returncode == 0 and data["_meta"]["hostvars"], proc.stderr
    assert len(fake.api_requests()) == BASE_REQUESTS.get(provider, 1) + 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_wrong_shape_is_a_clear_error(tmp_path, serve, provider):
    fake = serve(provider, [])
    fake.off_spec("the answer has the wrong shape on purpose")
    fake.answer = lambda path, query, *rest: (200, {"unexpected": True} if provider == "runpod" else [1, 2])
    proc, _data = inventory(write_config(tmp_path, provider, fake), provider)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert {"runpod": "not the list of pods", "vastai": "has no list 'instances'", "lambda": "has no list 'data'",
            "autodl": "not AutoDL's {code, msg, data} object"}[provider] in proc.stderr


def test_malformed_record_is_skipped_and_named(tmp_path, serve):
    fake = serve("runpod", [fake_api.runpod_pod(1, "198.51.100.1", 10341), {"name": "no id"}, "junk"])
    fake.off_spec("two records are malformed on purpose")
    proc, data = inventory(write_config(tmp_path, "runpod", fake), "runpod")
    assert proc.returncode == 0, proc.stderr
    assert group_hosts(data, "runpod") == ["train-1"]
    assert "skipped 2 malformed instance record(s)" in proc.stderr
