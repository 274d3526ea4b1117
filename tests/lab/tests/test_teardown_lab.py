"""playbooks/teardown.yml against the lab fleet: the teardown gate with real boxes and real meter-stop stand-ins.

One fleet for the module: lab-01 and lab-02 are AutoDL (region A, sharing /root/autodl-fs), lab-03 is RunPod.
Each run's results are real checkpoints (a hand-built safetensors file and a PyTorch-layout zip) and a metrics
file under the durable dir, written over SSH. The stand-ins for `shutdown` and `runpodctl` only append their argv
to the host's meter.log, so "stopped" means "exactly one line with the profile's argv", and "refused" means
"no line at all". Every refusal also checks that the result root on the box is byte-for-byte untouched.

LAB_NET and LAB_STATE_DIR are honoured when set (a second fleet beside someone else's); otherwise the fleet uses
the default net and a pytest tmp dir.
"""
from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from labhelpers import lab_busy
from lab_teardown_support import REPO, LabFleet, safetensors_bytes, started, torch_zip_bytes

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="the lab fleet needs root (namespaces, tmpfs mounts)"),
              pytest.mark.root, pytest.mark.lab]

PLAYBOOK = os.path.join(REPO, "playbooks", "teardown.yml")
ROSTER = ("best.pt", "model.safetensors", "metrics.json")
SHUTDOWN = ["shutdown", "-h", "now"]
POD_ID = "pod-7f3a9c"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    lab = LabFleet("teardown", tmp_path_factory.mktemp("lab-teardown"), 3)
    busy = lab.busy()
    if busy:
        lab_busy("something already listens on %s:22; set LAB_NET (and LAB_STATE_DIR) to run beside it"
                 % ", ".join(busy))
    with started(lab) as up:
        assert [up.hosts[h]["lab_platform"] for h in ("lab-01", "lab-02", "lab-03")] == ["autodl", "autodl", "runpod"]
        yield up


@pytest.fixture(autouse=True)
def clean_meters(fleet):
    fleet.clear_meters()
    yield


def root_of(fleet, host, run_id):
    hv = fleet.hosts[host]
    return "%s/runs/%s" % (hv["lab_durable_dir"] or hv["lab_data_dir"], run_id)


def make_run(fleet, host, run_id):
    """A finished run on the box: two loadable checkpoints and a metrics file; returns its root."""
    root = root_of(fleet, host, run_id)
    fleet.put(host, root + "/best.pt", torch_zip_bytes())
    fleet.put(host, root + "/model.safetensors", safetensors_bytes())
    fleet.put(host, root + "/metrics.json", json.dumps({"run": run_id, "val_loss": 0.31}).encode())
    return root


def teardown(fleet, limit, run_id, pull_root, *extra, approve=None, roster=ROSTER):
    args = ["-l", limit, "-e", json.dumps({"teardown_run_id": run_id, "teardown_roster": list(roster),
                                           "teardown_pull_root": str(pull_root)})]
    if approve is not None:
        args += ["-e", "teardown_approve=%s" % approve]
    return fleet.playbook(PLAYBOOK, *args, *extra)


def out_of(proc):
    return proc.stdout + proc.stderr


def refusal_lines(proc, host):
    return [line for line in out_of(proc).splitlines() if "teardown refused for %s: " % host in line]


def assert_refused(proc, host, code):
    out = out_of(proc)
    assert proc.returncode != 0, out
    lines = refusal_lines(proc, host)
    assert lines, out
    assert any(re.search(r"\b%s: " % code, line) for line in lines), "%s not in %s\n%s" % (code, lines, out)


def assert_no_meter_call(fleet):
    assert {host: fleet.meter(host) for host in fleet.hosts} == {host: [] for host in fleet.hosts}


def pulled(pull_root, host, run_id):
    return pull_root / host / run_id


def receipt_of(pull_root, host):
    """One receipt per host, beside the pull directories of its runs."""
    return pull_root / host / "TEARDOWN_RECEIPT.json"


# ---------------------------------------------------------------------------------------------- happy path


def test_verified_and_approved_hosts_get_exactly_one_verb_call_each(fleet, tmp_path):
    run_id = "happy"
    roots = {host: make_run(fleet, host, run_id) for host in ("lab-01", "lab-03")}  # lab-02 shares lab-01's FS
    roots["lab-02"] = root_of(fleet, "lab-02", run_id)
    before = {host: fleet.snapshot(host, root) for host, root in roots.items()}
    assert before["lab-02"] == before["lab-01"] and len(before["lab-01"]) == 3
    pulls = tmp_path / "pulls"
    proc = teardown(fleet, "lab-01,lab-02,lab-03", run_id, pulls, "-e", "runpod_pod_id=%s" % POD_ID,
                    approve="lab-01,lab-02,lab-03")
    assert proc.returncode == 0, out_of(proc)
    argvs = {host: [line["argv"] for line in fleet.meter(host)] for host in fleet.hosts}
    assert argvs == {"lab-01": [SHUTDOWN], "lab-02": [SHUTDOWN], "lab-03": [["runpodctl", "remove", "pod", POD_ID]]}
    for host, root in roots.items():
        assert fleet.meter(host)[0]["host"] == host
        assert fleet.snapshot(host, root) == before[host]  # stopping the meter did not touch the results
        verified = json.loads((pulled(pulls, host, run_id) / "PULL_VERIFIED.json").read_text())
        assert (verified["host"], verified["run_id"]) == (host, run_id)
        assert sorted(item["sha256"] for item in verified["files"]) == sorted(v[0] for v in before[host].values())
        receipt = json.loads(receipt_of(pulls, host).read_text())
        assert receipt["host"] == host and receipt["acted"] is True
        assert receipt["command"] == argvs[host][0]
        assert [(run["job"], run["run_id"], run["manifest_sha256"]) for run in receipt["runs"]] == [
            (None, run_id, verified["manifest_sha256"])]


def test_only_the_host_named_in_the_approval_is_stopped(fleet, tmp_path):
    run_id = "named"
    root = make_run(fleet, "lab-01", run_id)
    before = fleet.snapshot("lab-01", root)
    proc = teardown(fleet, "lab-01,lab-02", run_id, tmp_path / "pulls", approve="lab-02")
    assert_refused(proc, "lab-01", "not_approved")
    assert not refusal_lines(proc, "lab-02"), out_of(proc)
    assert [line["argv"] for line in fleet.meter("lab-02")] == [SHUTDOWN]
    assert fleet.meter("lab-01") == [] and fleet.meter("lab-03") == []
    assert fleet.snapshot("lab-01", root) == before
    assert not receipt_of(tmp_path / "pulls", "lab-01").exists()


# ------------------------------------------------------------------------------------------------ refusals
# Each scenario prepares the box and the controller, then returns the arguments of the final, refused run.
# A preparatory pull runs without approval, so it is refused too (and checked to record nothing).


def verified_pull(fleet, host, run_id, pulls):
    proc = teardown(fleet, host, run_id, pulls)
    assert_refused(proc, host, "not_approved")
    assert (pulled(pulls, host, run_id) / "PULL_VERIFIED.json").is_file(), out_of(proc)
    assert_no_meter_call(fleet)


def flip_last_byte(path):
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0x01
    path.write_bytes(bytes(raw))


def file_missing_from_the_pull(fleet, run_id, pulls):
    verified_pull(fleet, "lab-01", run_id, pulls)
    (pulled(pulls, "lab-01", run_id) / "data" / "model.safetensors").unlink()
    return dict(extra=["-e", "teardown_pull_files=false"], code="no_pull_verified",
                says="missing model.safetensors")


def roster_file_missing_on_the_box(_fleet, _run_id, _pulls):
    return dict(roster=ROSTER + ("optimizer.pt",), code="manifest_unknown", says="optimizer.pt")


def one_byte_changed_in_the_pull(fleet, run_id, pulls):
    verified_pull(fleet, "lab-01", run_id, pulls)
    # the last byte of a tensor: the file still loads, only its sha256 tells
    flip_last_byte(pulled(pulls, "lab-01", run_id) / "data" / "model.safetensors")
    return dict(extra=["-e", "teardown_pull_files=false"], code="no_pull_verified",
                says="sha256_mismatch model.safetensors")


def checkpoint_truncated_in_the_pull(fleet, run_id, pulls):
    verified_pull(fleet, "lab-01", run_id, pulls)
    path = pulled(pulls, "lab-01", run_id) / "data" / "best.pt"
    path.write_bytes(path.read_bytes()[:-64])
    return dict(extra=["-e", "teardown_pull_files=false"], code="no_pull_verified", says="size_mismatch best.pt")


def checkpoint_truncated_on_the_box(fleet, run_id, _pulls):
    # truncated before the manifest: roster, bytes and hashes agree, only the load check fails
    root = root_of(fleet, "lab-01", run_id)
    fleet.ssh("lab-01", "truncate -s -64 %s/best.pt" % root)
    return dict(code="no_pull_verified", says="not_loadable best.pt")


def no_pull_verified_file(_fleet, _run_id, _pulls):
    return dict(extra=["--skip-tags", "teardown_pull"], code="no_pull_verified", says="PULL_VERIFIED.json")


def pull_verified_for_another_run(fleet, run_id, pulls):
    other = run_id + "-other"
    make_run(fleet, "lab-01", other)
    verified_pull(fleet, "lab-01", other, pulls)
    target = pulled(pulls, "lab-01", run_id)
    target.mkdir(parents=True)
    shutil.copy(pulled(pulls, "lab-01", other) / "PULL_VERIFIED.json", target / "PULL_VERIFIED.json")
    return dict(extra=["--skip-tags", "teardown_pull"], code="pull_verified_mismatch", says=other)


def pull_verified_for_another_host(fleet, run_id, pulls):
    # lab-02 sees the same durable FS, so its verified pull has the very same manifest
    verified_pull(fleet, "lab-02", run_id, pulls)
    target = pulled(pulls, "lab-01", run_id)
    target.mkdir(parents=True)
    shutil.copy(pulled(pulls, "lab-02", run_id) / "PULL_VERIFIED.json", target / "PULL_VERIFIED.json")
    return dict(extra=["--skip-tags", "teardown_pull"], code="pull_verified_mismatch", says="host lab-02")


def results_changed_after_the_pull(fleet, run_id, pulls):
    verified_pull(fleet, "lab-01", run_id, pulls)
    fleet.ssh("lab-01", "echo '{\"val_loss\": 0.29}' > %s/metrics.json" % root_of(fleet, "lab-01", run_id))
    return dict(extra=["--skip-tags", "teardown_pull"], code="manifest_changed", says="changed after the pull")


def no_approval(_fleet, _run_id, _pulls):
    return dict(approve=None, code="not_approved", says="approved: none")


def approval_names_another_host(_fleet, _run_id, _pulls):
    return dict(approve="lab-02", code="not_approved", says="approved: lab-02")


def blanket_approval(_fleet, _run_id, _pulls):
    return dict(approve="all", code="approval_refused", says="blanket word")


SCENARIOS = [file_missing_from_the_pull, roster_file_missing_on_the_box, one_byte_changed_in_the_pull,
             checkpoint_truncated_in_the_pull, checkpoint_truncated_on_the_box, no_pull_verified_file,
             pull_verified_for_another_run, pull_verified_for_another_host, results_changed_after_the_pull,
             no_approval, approval_names_another_host, blanket_approval]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.__name__ for s in SCENARIOS])
def test_refusal_records_no_verb_call_and_leaves_the_box_untouched(fleet, tmp_path, scenario):
    run_id = "ref-" + scenario.__name__.replace("_", "-")
    pulls = tmp_path / "pulls"
    root = make_run(fleet, "lab-01", run_id)
    plan = scenario(fleet, run_id, pulls)
    before = fleet.snapshot("lab-01", root)
    proc = teardown(fleet, "lab-01", run_id, pulls, *plan.get("extra", []), approve=plan.get("approve", "lab-01"),
                    roster=plan.get("roster", ROSTER))
    assert_refused(proc, "lab-01", plan["code"])
    assert plan["says"] in out_of(proc), out_of(proc)
    assert_no_meter_call(fleet)
    assert fleet.snapshot("lab-01", root) == before
    assert not receipt_of(pulls, "lab-01").exists()
    if plan["code"] in ("no_pull_verified", "manifest_unknown"):  # a failed verification leaves no old file behind
        assert not (pulled(pulls, "lab-01", run_id) / "PULL_VERIFIED.json").exists()


def test_runpod_without_a_pod_id_is_refused_although_verified_and_approved(fleet, tmp_path):
    run_id = "pod"
    root = make_run(fleet, "lab-03", run_id)
    before = fleet.snapshot("lab-03", root)
    pulls = tmp_path / "pulls"
    proc = teardown(fleet, "lab-03", run_id, pulls, approve="lab-03")
    assert_refused(proc, "lab-03", "command_placeholder")
    assert "runpod_pod_id" in out_of(proc)
    assert not [line for line in refusal_lines(proc, "lab-03") if "not_approved" in line or "no_pull" in line]
    assert (pulled(pulls, "lab-03", run_id) / "PULL_VERIFIED.json").is_file()  # only the placeholder refused it
    assert_no_meter_call(fleet)
    assert fleet.snapshot("lab-03", root) == before


def test_check_mode_with_an_open_gate_records_nothing(fleet, tmp_path):
    run_id = "check"
    root = make_run(fleet, "lab-01", run_id)
    pulls = tmp_path / "pulls"
    verified_pull(fleet, "lab-01", run_id, pulls)
    before = fleet.snapshot("lab-01", root)
    proc = teardown(fleet, "lab-01", run_id, pulls, "--check", approve="lab-01")
    assert proc.returncode == 0, out_of(proc)
    flat = " ".join(proc.stdout.split())  # the YAML callback wraps long messages
    assert "gate open for lab-01" in flat and "the verb would be power_off" in flat, proc.stdout
    assert_no_meter_call(fleet)
    assert fleet.snapshot("lab-01", root) == before
    assert not receipt_of(pulls, "lab-01").exists()
