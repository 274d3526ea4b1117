"""The acceptance of issue 28, item 2: the instance is verified before any API verb.

README's teardown command (``ansible-playbook -i <inventory> playbooks/teardown.yml -l HOST -e teardown_approve=HOST``)
against real sshd boxes whose container environment carries the platform's own id (RunPod ``RUNPOD_POD_ID``, vast.ai
``CONTAINER_ID``: the session's environment, RunPod's /etc/rp_environment), with the providers' APIs played by
the loopback fake:

- a host whose ``runpod_pod_id`` names a pod the provider does not know: no terminate, no "acted" receipt, rc != 0,
  and the message says what to check in the console;
- a host whose ``runpod_pod_id`` names another existing pod (the box's RUNPOD_POD_ID differs): refused, and the other
  pod is untouched (not even read) in the fake's log;
- two provider inventories with an instance of the same name: a warning that names both, no host with two
  providers' ids, and a teardown of the RunPod host hits only RunPod's pod.
"""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from labhelpers import REPO, fake_api, needs_root, started_fleet

pytestmark = needs_root
VENV_BIN = os.path.join(REPO, ".venv", "bin")
KEY = "IDLABKEY-4e5f6a-never-in-any-output"
RUN_ID = "identity"
ROSTER = ["model.safetensors", "metrics.json"]
ID_VARS = ("runpod_pod_id", "vastai_instance_id", "lambda_instance_id", "autodl_instance_uuid")


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "3", "--platform", "lab-01=runpod",
                       "--platform", "lab-02=runpod", "--platform", "lab-03=vastai") as lab:
        for host in ("lab-01", "lab-02", "lab-03"):
            put_results(lab, host)
        yield lab


def put(fleet, host, path, data):
    argv = fleet.ssh_argv(host, "mkdir -p \"$(dirname '%s')\" && cat > '%s'" % (path, path))
    proc = subprocess.run(argv, input=data, capture_output=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr


def put_results(fleet, host):
    from lab_teardown_support import safetensors_bytes  # pylint: disable=import-outside-toplevel
    root = "/workspace/runs/%s" % RUN_ID
    put(fleet, host, root + "/model.safetensors", safetensors_bytes())
    put(fleet, host, root + "/metrics.json", json.dumps({"host": host}).encode())


def address(fleet, host):
    hv = fleet.hosts[host]
    return hv["ansible_host"], int(hv["ansible_port"])


def ssh_vars(fleet, directory):
    """The user's SSH settings, in the inventory's group_vars/all.yml (as test_provider_inventory_lab does)."""
    allvars = fleet.inventory["all"]["vars"]
    (directory / "group_vars").mkdir(exist_ok=True)
    (directory / "group_vars" / "all.yml").write_text(json.dumps({
        "ansible_user": "root", "ansible_ssh_private_key_file": allvars["ansible_ssh_private_key_file"],
        "ansible_ssh_common_args": " ".join(fleet.common)}))


def hand_inventory(fleet, directory, host, pod_id, url):
    """What a person types: the host in the group runpod with its runpod_pod_id (and the fake's URL, where the
    plugin would have set provider_api_url)."""
    ssh_vars(fleet, directory)
    addr, port = address(fleet, host)
    path = directory / "hosts.yml"
    path.write_text(json.dumps({"runpod": {"hosts": {host: {
        "ansible_host": addr, "ansible_port": port, "runpod_pod_id": pod_id, "provider_api_url": url}}}}))
    return path


def teardown(inventories, host, pulls, env_extra):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")), **env_extra)
    argv = [os.path.join(VENV_BIN, "ansible-playbook")]
    for inventory in inventories:
        argv += ["-i", str(inventory)]
    argv += [os.path.join(REPO, "playbooks", "teardown.yml"), "-l", host,
             "-e", json.dumps({"teardown_run_id": RUN_ID, "teardown_roster": ROSTER, "teardown_pull_root": str(pulls)}),
             "-e", "teardown_approve=%s" % host]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, stdin=subprocess.DEVNULL,
                          check=False)
    return proc, proc.stdout + proc.stderr


def receipt_of(pulls, host):
    return pulls / host / "TEARDOWN_RECEIPT.json"


def touching(fake, pid):
    return [(r["method"], r["path"]) for r in fake.api_requests() if pid in r["path"] or pid in json.dumps(r["body"])]


def test_the_box_carries_its_platform_id_where_the_platform_puts_it(fleet):
    """RUNPOD_POD_ID in the session and in /etc/rp_environment; CONTAINER_ID on vast.ai; each equal to the fake's id
    of the instance of the same index. remote_gpu.trainer.box_identity reads them there."""
    out = fleet.ssh("lab-01", "echo $RUNPOD_POD_ID; cat /etc/rp_environment").stdout.split()
    assert out == ["fakepod0001", "export", 'RUNPOD_POD_ID="fakepod0001"']
    assert fake_api.runpod_pod(1, "x", 1)["id"] == "fakepod0001"
    vast = fleet.ssh("lab-03", "echo $CONTAINER_ID").stdout.strip()
    assert vast == str(fake_api.vastai_instance(3, "x", 1)["id"])


def test_an_id_the_provider_does_not_know_is_never_stopped(fleet, tmp_path):
    """lab-01 says it is fakepod0001 and runpod_pod_id says so too, but the account's API does not know that pod
    (the key of another account, a pod terminated in the console): no terminate, no receipt, rc != 0, and the
    message says what to check in the console."""
    other = fake_api.runpod_pod(2, *address(fleet, "lab-02"), name="lab-02")
    fake = fake_api.FakeAPI("runpod", KEY, [other]).start()
    pulls = tmp_path / "pulls"
    try:
        inventory = hand_inventory(fleet, tmp_path, "lab-01", "fakepod0001", fake.url)
        proc, out = teardown([inventory], "lab-01", pulls, {"RUNPOD_API_KEY": KEY})
    finally:
        fake.stop()
    assert proc.returncode != 0, out[-4000:]
    assert (pulls / "lab-01" / RUN_ID / "PULL_VERIFIED.json").exists(), out[-4000:]  # the pull itself went through
    text = " ".join(out.split())
    assert "instance_not_found" in text and "fakepod0001 is not found" in text, out[-4000:]
    assert "Pods page of RunPod's console" in text and "runpod_pod_id" in text
    assert [r["method"] for r in fake.api_requests()] == ["GET"]  # read, never a verb
    assert not receipt_of(pulls, "lab-01").exists()
    assert fleet.meter("lab-01") == [] and KEY not in out


def test_a_stale_id_after_a_re_rent_is_refused_before_any_request(fleet, tmp_path):
    """runpod_pod_id still names the pod rented before (unknown to the provider now); the box is fakepod0001."""
    pods = [fake_api.runpod_pod(1, *address(fleet, "lab-01"), name="lab-01")]
    fake = fake_api.FakeAPI("runpod", KEY, pods).start()
    pulls = tmp_path / "pulls"
    try:
        inventory = hand_inventory(fleet, tmp_path, "lab-01", "fakepod0007", fake.url)
        proc, out = teardown([inventory], "lab-01", pulls, {"RUNPOD_API_KEY": KEY, "ANSIBLE_VERBOSITY": "3"})
    finally:
        fake.stop()
    assert proc.returncode != 0, out[-4000:]
    text = " ".join(out.split())
    assert "identity_mismatch" in text and "says it is instance fakepod0001" in text, out[-4000:]
    assert fake.api_requests() == []
    # the box's side of teardown ran without AnsiballZ (plugin_utils/direct), and -vvv shows no key
    for module in ("job_status", "pull_manifest", "box_identity"):
        assert "%s runs without AnsiballZ" % module in out, module
    assert "runs through AnsiballZ" not in out and KEY not in out
    assert not receipt_of(pulls, "lab-01").exists()
    assert fake.find("fakepod0001")["desiredStatus"] == "RUNNING"


def test_an_id_that_names_another_existing_pod_leaves_that_pod_untouched(fleet, tmp_path):
    """lab-01's runpod_pod_id is typed as fakepod0002, lab-02's pod: the box says fakepod0001, so teardown refuses,
    the fake's log shows nothing about fakepod0002, and lab-02 still answers with an empty meter log."""
    pods = [fake_api.runpod_pod(i, *address(fleet, host), name=host) for i, host in ((1, "lab-01"), (2, "lab-02"))]
    fake = fake_api.FakeAPI("runpod", KEY, pods).start()
    pulls = tmp_path / "pulls"
    try:
        inventory = hand_inventory(fleet, tmp_path, "lab-01", "fakepod0002", fake.url)
        proc, out = teardown([inventory], "lab-01", pulls, {"RUNPOD_API_KEY": KEY})
    finally:
        fake.stop()
    assert proc.returncode != 0, out[-4000:]
    assert "identity_mismatch" in out, out[-4000:]
    assert touching(fake, "fakepod0002") == [] and fake.api_requests() == []
    assert fake.find("fakepod0002")["desiredStatus"] == "RUNNING"
    assert not receipt_of(pulls, "lab-01").exists()
    assert fleet.meter("lab-02") == [] and fleet.ssh("lab-02", "true").returncode == 0


def test_two_provider_inventories_with_the_same_instance_name(fleet, tmp_path):
    """runpod.yml and vastai.yml both list an instance named 'exp' (lab-01's pod, lab-03's vast instance): a warning
    names both, the vast one is 'exp-vastai', no host carries two providers' ids, and the teardown of 'exp' sends
    exactly one DELETE, to RunPod, for lab-01's pod."""
    runpod = fake_api.FakeAPI("runpod", KEY, [fake_api.runpod_pod(1, *address(fleet, "lab-01"), name="exp")]).start()
    vast = fake_api.FakeAPI("vastai", KEY, [fake_api.vastai_instance(3, *address(fleet, "lab-03"), label="exp")]).start()
    runpod.on_lifecycle = fake_api.meter_log_hook({"fakepod0001": ("lab-01", fleet.hosts["lab-01"]["lab_meter_log"])})
    open(fleet.hosts["lab-01"]["lab_meter_log"], "w", encoding="utf-8").close()
    pulls = tmp_path / "pulls"
    env = {"RUNPOD_API_KEY": KEY, "VAST_API_KEY": KEY}
    try:
        ssh_vars(fleet, tmp_path)
        configs = [tmp_path / "runpod.yml", tmp_path / "vastai.yml"]
        configs[0].write_text("plugin: remote_gpu.trainer.runpod\napi_url: %s\n" % runpod.url)
        configs[1].write_text("plugin: remote_gpu.trainer.vastai\napi_url: %s\n" % vast.url)
        listing = subprocess.run(
            [os.path.join(VENV_BIN, "ansible-inventory"), "-i", str(configs[0]), "-i", str(configs[1]), "--list"],
            capture_output=True, text=True, timeout=300, check=False,
            env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1", **env))
        proc, out = teardown(configs, "exp", pulls, env)
    finally:
        runpod.stop()
        vast.stop()
    assert listing.returncode == 0, listing.stderr[-3000:]
    hostvars = json.loads(listing.stdout)["_meta"]["hostvars"]
    assert sorted(hostvars) == ["exp", "exp-vastai"]
    assert all(len([v for v in ID_VARS if v in hv]) == 1 for hv in hostvars.values()), hostvars
    warning = " ".join(listing.stderr.split())
    assert "vastai: instance 9000003 is named 'exp'" in warning and "runpod instance fakepod0001" in warning, warning
    assert proc.returncode == 0, out[-4000:]
    assert [(r["method"], r["path"]) for r in runpod.api_requests() if r["method"] != "GET"] == [
        ("DELETE", "/v1/pods/fakepod0001")]
    assert [r for r in vast.api_requests() if r["method"] != "GET"] == []
    assert [line["argv"] for line in fleet.meter("lab-01")] == [["provider-api", "runpod", "terminate", "fakepod0001"]]
    assert fleet.meter("lab-03") == []
    receipt = json.loads(receipt_of(pulls, "exp").read_text())
    assert receipt["acted"] is True and receipt["api"]["id"] == "fakepod0001"
    assert KEY not in out + listing.stdout + listing.stderr


def test_vastai_a_cached_record_of_another_instance_at_this_address_is_refused(fleet, tmp_path):
    """vast.ai: the listing (a stale cache after a re-rent) says lab-03's address is instance 9000005; the box's
    CONTAINER_ID says 9000003. The destroy is refused before any request; the plugin's inventory is what the user ran."""
    stale = fake_api.vastai_instance(5, *address(fleet, "lab-03"), label="lab-03")
    fake = fake_api.FakeAPI("vastai", KEY, [stale]).start()
    pulls = tmp_path / "pulls"
    try:
        ssh_vars(fleet, tmp_path)
        config = tmp_path / "vastai.yml"
        config.write_text("plugin: remote_gpu.trainer.vastai\napi_url: %s\n" % fake.url)
        proc, out = teardown([config], "lab-03", pulls, {"VAST_API_KEY": KEY})
        listed = len(fake.api_requests())  # the inventory's own listing
    finally:
        fake.stop()
    assert proc.returncode != 0, out[-4000:]
    text = " ".join(out.split())
    assert "identity_mismatch" in text and "says it is instance 9000003" in text and "vastai_instance_id" in text, \
        out[-4000:]
    assert listed >= 1 and [r for r in fake.api_requests() if "/api/v0/instances/" in r["path"]] == []
    assert fake.find("9000005")["actual_status"] == "running"
    assert not receipt_of(pulls, "lab-03").exists() and fleet.meter("lab-03") == []
