"""The acceptance of issue 12 (first part): a four-line runpod.yml / vastai.yml and preflight.yml -l <profile>,
with the provider's API played by the loopback fake and its instances pointing at lab hosts. The API key appears
zero times in the -vvv output and in the JSON report."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from labhelpers import REPO, fake_api, needs_root, run_fleet, started_fleet

pytestmark = needs_root
VENV_BIN = os.path.join(REPO, ".venv", "bin")
KEY = "LABKEY-7c1d0e-never-in-any-output"


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "6", "--platform", "lab-01=runpod",
                       "--platform", "lab-02=runpod", "--platform", "lab-03=vastai",
                       "--platform", "lab-04=vastai", "--platform", "lab-05=lambda",
                       "--platform", "lab-06=autodl") as lab:
        yield lab


def user_inventory(fleet, tmp_path, plugin, url):
    """What a user writes: the plugin file (<plugin>.yml), and the SSH settings in the inventory's
    group_vars/all.yml (the profile's group_vars set the user where the platform fixes it: Lambda's ubuntu)."""
    allvars = fleet.inventory["all"]["vars"]
    common = " ".join(fleet.common)  # the fleet's -o pairs, without its ControlPath
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text(json.dumps({
        "ansible_user": "root", "ansible_ssh_private_key_file": allvars["ansible_ssh_private_key_file"],
        "ansible_ssh_common_args": common, "preflight_check_torch": False}))
    config = tmp_path / ("%s.yml" % plugin)
    config.write_text("plugin: remote_gpu.trainer.%s\napi_url: %s\n" % (plugin, url))
    return config


def preflight(config, tmp_path, env_var, *args):
    report = tmp_path / "preflight.json"
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))
    env[env_var] = KEY
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", str(config),
                           os.path.join(REPO, "playbooks", "preflight.yml"), "-e", "preflight_sample_seconds=1",
                           "-e", "preflight_report_path=%s" % report, *args],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    text = report.read_text() if report.exists() else ""
    rows = {row["host"]: row for row in json.loads(text)["hosts"]} if text else {}
    return proc, rows, text


def address(fleet, host):
    hv = fleet.hosts[host]
    return hv["ansible_host"], int(hv["ansible_port"])


def preflight_on_fake_api(fleet, tmp_path, provider, instances, plugin, env_var, limit, hosts):
    """The part every provider shares: the fake ``provider`` API serves ``instances``, the user's <plugin>.yml and
    ``preflight.yml -l <limit> -vvv`` with the key in ``env_var``; then rc 0, a report of exactly ``hosts``, each
    PASS with the platform ``limit``, and the key nowhere in the output or the report. Returns (proc, rows, report,
    fake) for the provider's own checks."""
    fake = fake_api.FakeAPI(provider, KEY, instances).start()
    try:
        config = user_inventory(fleet, tmp_path, plugin, fake.url)
        proc, rows, report = preflight(config, tmp_path, env_var, "-l", limit, "-vvv")
    finally:
        fake.stop()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert sorted(rows) == hosts
    assert all(row["verdict"] == "PASS" and row["platform"] == limit for row in rows.values()), rows
    assert (proc.stdout + proc.stderr + report).count(KEY) == 0
    return proc, rows, report, fake


def test_runpod_yml_preflight_limit_runpod(fleet, tmp_path):
    pods = [fake_api.runpod_pod(i, *address(fleet, host), name=host) for i, host in ((1, "lab-01"), (2, "lab-02"))]
    pods.append(fake_api.runpod_pod(3, None, None, name="new-pod", ready=False))
    proc, _rows, _report, fake = preflight_on_fake_api(fleet, tmp_path, "runpod", pods, "runpod", "RUNPOD_API_KEY",
                                                       "runpod", ["lab-01", "lab-02"])
    assert "fakepod0003" in proc.stderr and "'starting'" in proc.stderr  # left out, with a warning
    assert [r["path"] for r in fake.api_requests()] == ["/v1/pods", "/v2/pods"]  # the list, the observed status


def test_vastai_yml_preflight_limit_vastai_direct_and_proxy(fleet, tmp_path):
    direct = fake_api.vastai_instance(3, *address(fleet, "lab-03"), label="lab-03")
    proxy = fake_api.vastai_instance(4, *address(fleet, "lab-04"), direct=False, label="lab-04")
    preflight_on_fake_api(fleet, tmp_path, "vastai", [direct, proxy], "vastai", "VAST_API_KEY", "vastai",
                          ["lab-03", "lab-04"])


def test_lambda_cloud_yml_preflight_limit_lambda(fleet, tmp_path):
    """Lambda: ip:22, user ubuntu from group_vars/lambda.yml, the filesystem's name gives the durable dir."""
    instance = fake_api.lambda_instance(5, address(fleet, "lab-05")[0], name="lab-05", filesystem="lab")
    booting = fake_api.lambda_instance(7, None, status="booting")
    proc = preflight_on_fake_api(fleet, tmp_path, "lambda", [instance, booting], "lambda_cloud", "LAMBDA_API_KEY",
                                 "lambda", ["lab-05"])[0]
    assert "'starting'" in proc.stderr


def test_autodl_yml_preflight_limit_autodl(fleet, tmp_path):
    """AutoDL Pro: the list, then the snapshot's proxy_host:ssh_port; the token goes bare in Authorization."""
    instance = fake_api.autodl_instance(6, *address(fleet, "lab-06"))
    proc, _rows, report, fake = preflight_on_fake_api(fleet, tmp_path, "autodl", [instance], "autodl", "AUTODL_TOKEN",
                                                      "autodl", ["autodl-pro-fake0000006"])
    assert all(r["auth_ok"] for r in fake.api_requests()) and len(fake.api_requests()) == 2
    assert "fake-root-password" not in proc.stdout + proc.stderr + report


# --- teardown through the provider's API, on an inventory made only by the plugin ---------------------------------

def put(fleet, host, path, data):
    argv = fleet.ssh_argv(host, "mkdir -p \"$(dirname '%s')\" && cat > '%s'" % (path, path))
    proc = subprocess.run(argv, input=data, capture_output=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr


def test_runpod_teardown_ends_in_one_api_stop_for_the_approved_host_only(fleet, tmp_path):
    """The user's runpod.yml, a verified pull, approval of lab-01 only: the fake records exactly one DELETE of
    lab-01's pod, which lands in lab-01's meter log and stops that lab instance (it no longer answers); lab-02 (not
    approved) gets nothing and still answers; runpodctl never runs."""
    from lab_teardown_support import safetensors_bytes, torch_zip_bytes  # pylint: disable=import-outside-toplevel
    hosts = ("lab-01", "lab-02")
    pods = [fake_api.runpod_pod(i, *address(fleet, host), name=host) for i, host in enumerate(hosts, 1)]
    fake = fake_api.FakeAPI("runpod", KEY, pods).start()
    record = fake_api.meter_log_hook(
        {pod["id"]: (host, fleet.hosts[host]["lab_meter_log"]) for pod, host in zip(pods, hosts)})
    host_of = {pod["id"]: host for pod, host in zip(pods, hosts)}

    def stop_the_lab_instance(pod, verb, provider=None):
        """The API verb hits the lab instance: its meter log records it, and it stops answering (fleet vanish)."""
        record(pod, verb, provider)
        run_fleet(["vanish", host_of[pod["id"]]], fleet.state)
    fake.on_lifecycle = stop_the_lab_instance
    for host in hosts:
        open(fleet.hosts[host]["lab_meter_log"], "w", encoding="utf-8").close()
    run_id = "provider-teardown"
    roster = ["best.pt", "model.safetensors", "metrics.json"]
    for host in hosts:
        root = "/workspace/runs/%s" % run_id
        put(fleet, host, root + "/best.pt", torch_zip_bytes())
        put(fleet, host, root + "/model.safetensors", safetensors_bytes())
        put(fleet, host, root + "/metrics.json", json.dumps({"host": host}).encode())
    pulls = tmp_path / "pulls"
    try:
        config = user_inventory(fleet, tmp_path, "runpod", fake.url)
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")), RUNPOD_API_KEY=KEY)
        proc = subprocess.run(
            [os.path.join(VENV_BIN, "ansible-playbook"), "-i", str(config),
             os.path.join(REPO, "playbooks", "teardown.yml"), "-l", "runpod", "-vvv",
             "-e", json.dumps({"teardown_run_id": run_id, "teardown_roster": roster,
                               "teardown_pull_root": str(pulls)}),
             "-e", "teardown_approve=lab-01"],
            capture_output=True, text=True, env=env, timeout=600, stdin=subprocess.DEVNULL, check=False)
        argv = fleet.ssh_argv("lab-01", "true")
        argv[argv.index("ConnectTimeout=10")] = "ConnectTimeout=3"
        gone = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        still = fleet.ssh("lab-02", "true", check=False)
    finally:
        fake.stop()
        run_fleet(["revive", "lab-01"], fleet.state, check=False)
    out = proc.stdout + proc.stderr
    assert gone.returncode == 255 and "timed out" in gone.stderr, gone.stderr  # the stopped box is gone
    assert still.returncode == 0  # the host that was not approved still answers
    assert "teardown refused for lab-02" in out, out[-4000:]  # not approved: the gate fails it, rc != 0
    assert (pulls / "lab-01" / run_id / "PULL_VERIFIED.json").exists(), out[-4000:]
    verbs = [(r["method"], r["path"]) for r in fake.api_requests() if r["method"] != "GET"]
    assert verbs == [("DELETE", "/v1/pods/fakepod0001")], out[-4000:]
    assert all(r["auth_ok"] for r in fake.api_requests())
    lines = fleet.meter("lab-01")
    assert [line["argv"] for line in lines] == [["provider-api", "runpod", "terminate", "fakepod0001"]], lines
    assert fleet.meter("lab-02") == []
    receipt_text = (pulls / "lab-01" / "TEARDOWN_RECEIPT.json").read_text()
    receipt = json.loads(receipt_text)
    assert receipt["acted"] is True and receipt["command"] == [] and receipt["verb"] == "terminate"
    assert (receipt["api"]["provider"], receipt["api"]["id"], receipt["api"]["state"], receipt["api"]["verb"],
            receipt["api"]["request"]) == ("runpod", "fakepod0001", "absent", "terminate", "DELETE /pods/fakepod0001")
    assert not (pulls / "lab-02" / "TEARDOWN_RECEIPT.json").exists()
    reports = "".join(p.read_text() for p in pulls.rglob("*.json"))
    assert (out + reports).count(KEY) == 0
