"""teardown.yml on localhost with the `local` profile (verb: manual), so nothing can be stopped for real.

The lab tests cover the platforms whose verbs act (recorded by stand-ins); these cover the pull, the
verification and the gate's refusals, which are the same on every platform.
"""

from __future__ import annotations

import json

import pytest

from pbhelpers import REPO, fake_api, run_playbook, safetensors_bytes

PLAYBOOK = REPO / "playbooks" / "teardown.yml"


@pytest.fixture
def run_root(tmp_path):
    root = tmp_path / "box" / "runs" / "exp42"
    root.mkdir(parents=True)
    (root / "model.safetensors").write_bytes(safetensors_bytes())
    (root / "metrics.json").write_text('{"val_loss": 0.31}\n')
    return root


def teardown(local_inventory, tmp_path, run_root, *extra, approve="localhost", roster=("model.safetensors", "metrics.json"),
             **env):
    args = ["-e", json.dumps({"teardown_run_id": "exp42", "teardown_result_root": str(run_root),
                              "teardown_roster": list(roster), "teardown_pull_root": str(tmp_path / "pulls"),
                              "teardown_run_dir": str(tmp_path / "jobs")})]
    if approve is not None:
        args += ["-e", "teardown_approve=%s" % approve]
    return run_playbook(PLAYBOOK, local_inventory, *args, *extra, **env)


def pull_dir(tmp_path):
    return tmp_path / "pulls" / "localhost" / "exp42"


def receipt_path(tmp_path):
    """One receipt per host, beside the pull directories of its runs."""
    return tmp_path / "pulls" / "localhost" / "TEARDOWN_RECEIPT.json"


def test_verified_and_approved_writes_verified_file_and_receipt(local_inventory, tmp_path, run_root):
    proc = teardown(local_inventory, tmp_path, run_root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verified = json.loads((pull_dir(tmp_path) / "PULL_VERIFIED.json").read_text())
    assert verified["host"] == "localhost" and verified["run_id"] == "exp42"
    assert sorted(f["path"] for f in verified["files"]) == ["metrics.json", "model.safetensors"]
    receipt = json.loads(receipt_path(tmp_path).read_text())
    assert receipt["verb"] == "manual" and receipt["acted"] is False
    assert [(run["job"], run["run_id"], run["manifest_sha256"]) for run in receipt["runs"]] == [
        (None, "exp42", verified["manifest_sha256"])]
    assert receipt["runs"][0]["pull_dir"] == str(pull_dir(tmp_path)) and receipt["jobs_on_host"] == []
    assert (pull_dir(tmp_path) / "data" / "model.safetensors").read_bytes() == (run_root / "model.safetensors").read_bytes()
    assert "Nothing was stopped on localhost" in proc.stdout


def assert_refused(proc, code):
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "teardown refused for localhost" in out and code in out, out


def test_missing_roster_file_refuses_and_names_it(local_inventory, tmp_path, run_root):
    proc = teardown(local_inventory, tmp_path, run_root, roster=("model.safetensors", "metrics.json", "best.pt"))
    assert_refused(proc, "manifest_unknown")
    assert "best.pt" in proc.stdout
    assert not receipt_path(tmp_path).exists()


def test_one_byte_changed_on_the_controller_refuses(local_inventory, tmp_path, run_root):
    assert teardown(local_inventory, tmp_path, run_root).returncode == 0
    receipt_path(tmp_path).unlink()
    pulled = pull_dir(tmp_path) / "data" / "metrics.json"
    pulled.write_text(pulled.read_text().replace("0.31", "0.32"))
    proc = teardown(local_inventory, tmp_path, run_root, "-e", "teardown_pull_files=false")
    assert_refused(proc, "no_pull_verified")
    assert "sha256_mismatch metrics.json" in proc.stdout
    assert not (pull_dir(tmp_path) / "PULL_VERIFIED.json").exists()
    assert not receipt_path(tmp_path).exists()


def test_file_missing_from_the_pull_refuses(local_inventory, tmp_path, run_root):
    assert teardown(local_inventory, tmp_path, run_root).returncode == 0
    (pull_dir(tmp_path) / "data" / "model.safetensors").unlink()
    proc = teardown(local_inventory, tmp_path, run_root, "-e", "teardown_pull_files=false")
    assert_refused(proc, "no_pull_verified")
    assert "missing model.safetensors" in proc.stdout


def test_truncated_checkpoint_refuses_even_when_hashes_match(local_inventory, tmp_path, run_root):
    ckpt = run_root / "model.safetensors"
    ckpt.write_bytes(ckpt.read_bytes()[:-5])  # truncated on the box before the manifest: hashes agree, load fails
    proc = teardown(local_inventory, tmp_path, run_root)
    assert_refused(proc, "no_pull_verified")
    assert "not_loadable model.safetensors" in proc.stdout


@pytest.mark.parametrize("approve,code", [(None, "not_approved"), ("otherhost", "not_approved"),
                                          ("all", "approval_refused"), ("yes", "approval_refused")])
def test_approval_must_name_the_host(local_inventory, tmp_path, run_root, approve, code):
    proc = teardown(local_inventory, tmp_path, run_root, approve=approve)
    assert_refused(proc, code)
    assert not receipt_path(tmp_path).exists()


def test_verified_file_for_another_run_refuses(local_inventory, tmp_path, run_root):
    assert teardown(local_inventory, tmp_path, run_root).returncode == 0
    path = pull_dir(tmp_path) / "PULL_VERIFIED.json"
    record = json.loads(path.read_text())
    record["run_id"] = "exp41"
    path.write_text(json.dumps(record))
    # skip the pull so that the gate sees the file as it is
    proc = teardown(local_inventory, tmp_path, run_root, "--skip-tags", "teardown_pull")
    assert_refused(proc, "pull_verified_mismatch")


def test_no_verified_file_refuses(local_inventory, tmp_path, run_root):
    proc = teardown(local_inventory, tmp_path, run_root, "--skip-tags", "teardown_pull")
    assert_refused(proc, "no_pull_verified")


def test_check_mode_shows_the_plan_and_writes_nothing(local_inventory, tmp_path, run_root):
    proc = teardown(local_inventory, tmp_path, run_root, "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "would pull" in proc.stdout
    assert not (tmp_path / "pulls").exists() or not any((tmp_path / "pulls").rglob("*.json"))
    assert "check mode: teardown refused for localhost: no_pull_verified" in proc.stdout
    assert not (run_root.parent / "PULL_MANIFEST.exp42.json").exists()  # the box was not written either


# --- an API verb (remote_gpu.trainer.instance), with a Lambda-like profile on localhost -----------------------------

def api_meter_stop(instance_id):
    """The Lambda profile's meter stop (no command, an API verb) for the local host."""
    return {"trainer_meter_stop": {
        "verb": "terminate", "how": "POST /api/v1/instance-operations/terminate with the instance id", "command": [],
        "api": {"provider": "lambda", "id": instance_id, "state": "absent", "key_env": "LAMBDA_API_KEY"},
        "reversible": False, "deletes": "the local NVMe", "verified": "2026-06"}}


def test_api_verb_terminates_once_through_the_fake_and_records_it(local_inventory, tmp_path, run_root):
    key = "LAMBDA-TEARDOWN-KEY-5e4d-never-shown"
    # the record points at the host (Lambda gives the box no id: teardown matches the record's ip and port 22)
    record = fake_api.lambda_instance(1, "127.0.0.1")
    fake = fake_api.FakeAPI("lambda", key, [record]).start()
    try:
        extra = dict(api_meter_stop(record["id"]), provider_api_url=fake.url)
        proc = teardown(local_inventory, tmp_path, run_root, "-e", json.dumps(extra), "-vvv", LAMBDA_API_KEY=key)
    finally:
        fake.stop()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    posts = [(r["method"], r["path"], r["body"]) for r in fake.api_requests() if r["method"] != "GET"]
    assert posts == [("POST", "/api/v1/instance-operations/terminate", {"instance_ids": [record["id"]]})]
    receipt_text = receipt_path(tmp_path).read_text()
    receipt = json.loads(receipt_text)
    assert receipt["command"] == [] and receipt["api"]["verb"] == "terminate" and receipt["api"]["state"] == "absent"
    assert receipt["api"]["request"] == "POST /api/v1/instance-operations/terminate"
    assert key not in proc.stdout + proc.stderr + receipt_text


def test_api_verb_without_the_key_stops_nothing_and_says_which_variable(local_inventory, tmp_path, run_root):
    proc = teardown(local_inventory, tmp_path, run_root, "-e", json.dumps(api_meter_stop("0920582c")),
                    LAMBDA_API_KEY="")
    assert proc.returncode != 0
    assert "the environment variable LAMBDA_API_KEY is not set on the controller" in proc.stdout, proc.stdout[-3000:]
    assert not receipt_path(tmp_path).exists()
    assert (pull_dir(tmp_path) / "PULL_VERIFIED.json").exists()  # the results are safe; only the stop is refused


# --- every job on the host: a live job refuses the whole teardown, a roster included ---------------------------------

def live_job(jobs_dir, name, proc):
    """A job directory as detached_job leaves it, whose job is ``proc`` (a real process): its PID, its start time
    (/proc/PID/stat field 22) and a log with a progress line."""
    job = jobs_dir / name
    job.mkdir(parents=True)
    with open("/proc/%d/stat" % proc.pid, encoding="ascii") as handle:
        start = handle.read().rsplit(")", 1)[1].split()[19]
    (job / "job.pid").write_text("%d\n" % proc.pid)
    (job / "job.starttime").write_text(start + "\n")
    (job / "job.log").write_text("loading data\nepoch 11/60 loss 0.42\n")
    return job


def test_a_live_job_refuses_even_a_roster_and_names_the_job_and_its_progress(local_inventory, tmp_path, run_root):
    import subprocess  # pylint: disable=import-outside-toplevel
    proc = subprocess.Popen(["sleep", "300"])  # the job that still runs
    try:
        live_job(tmp_path / "jobs", "exp2", proc)
        refused = teardown(local_inventory, tmp_path, run_root)
    finally:
        proc.kill()
        proc.wait()
    assert_refused(refused, "job_alive")
    flat = " ".join(refused.stdout.split())
    assert "job_alive: job exp2 under %s is running (0 item(s) done, progress 'epoch 11/60')" % (tmp_path / "jobs") in flat, flat
    assert not (tmp_path / "pulls").exists()  # nothing was pulled while the job ran
    assert not receipt_path(tmp_path).exists()
    # the job is gone: the same command pulls the roster's run, verifies it and writes the receipt
    done = teardown(local_inventory, tmp_path, run_root)
    assert done.returncode == 0, done.stdout + done.stderr
    receipt = json.loads(receipt_path(tmp_path).read_text())
    assert receipt["jobs_on_host"] == ["exp2"] and [run["run_id"] for run in receipt["runs"]] == ["exp42"]


def launched_job(jobs_dir, durable, name, run_id, data):
    """A finished job as launch and its run wrapper leave it: queue.json (one item, synced) and the item's status
    with the sha256 recorded at sync time; its durable copy under ``durable``/<run_id>/000/."""
    import hashlib  # pylint: disable=import-outside-toplevel
    dest = durable / run_id / "000"
    dest.mkdir(parents=True)
    (dest / "best.safetensors").write_bytes(data)
    job = jobs_dir / name
    (job / "items" / "000").mkdir(parents=True)
    (job / "queue.json").write_text(json.dumps({
        "version": 1, "job": name, "run_id": run_id, "host": "localhost", "queue_length": 1, "best": ["best*"],
        "output_root": str(durable.parent / "outputs" / run_id), "durable_root": str(durable / run_id),
        "items": [{"item": "000", "arg": "", "output_dir": str(durable.parent / "outputs" / run_id / "000"),
                   "sync_dest": str(dest)}]}))
    (job / "items" / "000" / "status.json").write_text(json.dumps({
        "item": "000", "exit_code": 0, "state": "done", "sync_dest": str(dest),
        "synced": [{"path": "best.safetensors", "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}]}))
    return dest / "best.safetensors"


def test_every_job_is_pulled_and_a_job_without_results_is_named_until_teardown_job_narrows(local_inventory, tmp_path):
    jobs, durable = tmp_path / "jobs", tmp_path / "fs" / "runs"
    launched_job(jobs, durable, "train", "train", safetensors_bytes((1.0, 2.0)))
    launched_job(jobs, durable, "exp2", "exp2-lr3e4", safetensors_bytes((3.0, 4.0)))
    (jobs / "smoke").mkdir()
    (jobs / "smoke" / "job.log").write_text("hello\n")  # a job started by hand: no launch record, nothing to pull
    common = ["-e", json.dumps({"teardown_run_dir": str(jobs), "teardown_pull_root": str(tmp_path / "pulls")}),
              "-e", "teardown_approve=localhost"]
    proc = run_playbook(PLAYBOOK, local_inventory, *common)
    assert_refused(proc, "manifest_unknown")
    flat = " ".join(proc.stdout.split())
    assert "manifest_unknown: job smoke: the box's manifest could not be written" in flat, flat
    for run_id in ("train", "exp2-lr3e4"):  # the others' results were pulled and verified all the same
        verified = json.loads((tmp_path / "pulls" / "localhost" / run_id / "PULL_VERIFIED.json").read_text())
        assert [f["path"] for f in verified["files"]] == ["durable/000/best.safetensors"]
    assert not receipt_path(tmp_path).exists()
    proc = run_playbook(PLAYBOOK, local_inventory, *common, "-e", "teardown_job=train")
    assert proc.returncode == 0, proc.stdout[-3000:]
    receipt = json.loads(receipt_path(tmp_path).read_text())
    assert receipt["jobs"] == ["train"] and [run["run_id"] for run in receipt["runs"]] == ["train"]
    assert receipt["jobs_on_host"] == ["exp2", "smoke", "train"]
    proc = run_playbook(PLAYBOOK, local_inventory, *common)
    assert_refused(proc, "manifest_unknown")  # without teardown_job, smoke still keeps the gate closed
    import shutil  # pylint: disable=import-outside-toplevel
    shutil.rmtree(str(jobs / "smoke"))
    proc = run_playbook(PLAYBOOK, local_inventory, *common)
    assert proc.returncode == 0, proc.stdout[-3000:]
    receipt = json.loads(receipt_path(tmp_path).read_text())
    assert receipt["jobs"] == ["exp2", "train"]
    assert [(run["job"], run["run_id"]) for run in receipt["runs"]] == [("exp2", "exp2-lr3e4"), ("train", "train")]
