from __future__ import annotations

import json
import pathlib

import pytest
import yaml

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import teardown
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.version import COLLECTION_VERSION


SHA = "a" * 64


def verified(host="lab-01", run_id="exp42", sha=SHA, problems=None):
    return {"host": host, "run_id": run_id, "manifest_sha256": sha, "problems": problems or [],
            "files": [{"path": "best.pt", "bytes": 1, "sha256": "b" * 64}]}


def codes(refusals):
    return sorted(r["code"] for r in refusals)


def test_open_gate():
    assert teardown.gate_refusals("lab-01", "exp42", verified(), SHA, {"lab-01"}) == []


@pytest.mark.parametrize("record,box_sha,approvals,expected", [
    (None, SHA, {"lab-01"}, ["no_pull_verified"]),
    (verified(run_id="exp41"), SHA, {"lab-01"}, ["pull_verified_mismatch"]),
    (verified(host="lab-02"), SHA, {"lab-01"}, ["pull_verified_mismatch"]),
    (verified(sha="b" * 64), SHA, {"lab-01"}, ["manifest_changed"]),
    (verified(), "", {"lab-01"}, ["manifest_unknown"]),
    (verified(problems=[{"code": "missing"}]), SHA, {"lab-01"}, ["pull_not_verified"]),
    (verified(), SHA, set(), ["not_approved"]),
    (verified(), SHA, {"lab-02"}, ["not_approved"]),
    (None, "", set(), ["manifest_unknown", "no_pull_verified", "not_approved"]),
])
def test_each_refusal_names_its_condition(record, box_sha, approvals, expected):
    assert codes(teardown.gate_refusals("lab-01", "exp42", record, box_sha, approvals)) == expected


@pytest.mark.parametrize("value,names,refused", [
    ("lab-01,lab-02", {"lab-01", "lab-02"}, False),
    (["lab-01"], {"lab-01"}, False),
    (" lab-01 , ", {"lab-01"}, False),
    ("", set(), False),
    (None, set(), False),
    ("all", set(), True),
    ("yes", set(), True),
    ("lab-01,ALL", set(), True),
    ("*", set(), True),
])
def test_parse_approvals_refuses_blanket_words(value, names, refused):
    got, error = teardown.parse_approvals(value)
    assert got == names
    assert (error is not None) is refused


def test_blanket_approval_closes_the_gate():
    names, error = teardown.parse_approvals("all")
    assert codes(teardown.gate_refusals("lab-01", "exp42", verified(), SHA, names, error)) == ["approval_refused"]


def test_pull_dir_rejects_path_tricks(tmp_path):
    assert teardown.pull_dir(str(tmp_path), "lab-01", "exp42") == str(tmp_path / "lab-01" / "exp42")
    for host, run in (("..", "x"), ("a/b", "x"), ("lab", ""), ("lab", "../x")):
        with pytest.raises(ValueError):
            teardown.pull_dir(str(tmp_path), host, run)


def test_load_verified_tolerates_absent_and_broken(tmp_path):
    assert teardown.load_verified(str(tmp_path / "none.json")) is None
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert teardown.load_verified(str(broken)) is None
    good = tmp_path / "good.json"
    good.write_text(json.dumps(verified()))
    assert teardown.load_verified(str(good))["host"] == "lab-01"


def test_unresolved_placeholders():
    assert teardown.unresolved_placeholders(["runpodctl", "remove", "pod", "$RUNPOD_POD_ID"]) == ["$RUNPOD_POD_ID"]
    assert teardown.unresolved_placeholders(["shutdown", "-h", "now"]) == []


def test_version_matches_galaxy_yml():
    galaxy = yaml.safe_load((pathlib.Path(__file__).resolve().parents[4] / "galaxy.yml").read_text())
    assert galaxy["version"] == COLLECTION_VERSION


@pytest.mark.parametrize("files", [[], None, "best.pt", {"path": "best.pt"}])
def test_a_verified_pull_of_nothing_never_opens_the_gate(files):
    record = verified()
    if files is None:
        del record["files"]
    else:
        record["files"] = files
    assert codes(teardown.gate_refusals("lab-01", "exp42", record, SHA, {"lab-01"})) == ["pull_verified_empty"]


def test_a_verified_file_that_is_a_directory_refuses(tmp_path):
    (tmp_path / teardown.VERIFIED_NAME).mkdir()
    assert teardown.load_verified(str(tmp_path / teardown.VERIFIED_NAME)) is None


# --- every job on the host ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("job, words", [
    ({"items_done": 1, "items_total": 3, "current_item": "001", "progress": {"text": "epoch 11/60"}},
     "items 1/3 done, item 001 running, progress 'epoch 11/60'"),
    ({"items_done": 2, "items_total": None, "progress": None}, "2 item(s) done, no progress line yet"),
    ({"items_done": None, "items_total": 4, "progress": {"text": "  "}}, "items 0/4 done, no progress line yet"),
    ({}, "no progress line yet"),
])
def test_job_progress_in_words(job, words):
    assert teardown.job_progress(job) == words


def test_job_progress_cuts_a_long_progress_line():
    assert len(teardown.job_progress({"progress": {"text": "x" * 5000}})) < 250


def test_live_job_refusals_name_every_live_job_and_only_those():
    jobs = [{"name": "train", "alive": False}, {"name": "exp2", "alive": True, "pid": 7, "progress": {"text": "e 1"}},
            {"name": "exp3", "alive": True, "pid": None}, "not a job"]
    found = teardown.live_job_refusals(jobs, "", "/r")
    assert [(r["code"], r["message"].split(" (")[0]) for r in found] == [
        ("job_alive", "job exp2 under /r is running"),
        ("job_alive", "job exp3 under /r is starting")]
    assert teardown.live_job_refusals(None) == [] and teardown.live_job_refusals([]) == []


def test_jobs_not_listed_is_its_own_refusal_whatever_the_list_says():
    found = teardown.live_job_refusals([], "permission denied", "/r")
    assert [r["code"] for r in found] == ["jobs_unknown"] and "permission denied" in found[0]["message"]


def test_pull_reasons_keep_only_the_pulls_that_did_not_verify():
    pulls = [{"item": {"run_id": "a"}, "verified": True, "msg": "ok"},
             {"item": {"run_id": "b"}, "verified": False, "msg": "sha256_mismatch x"},
             {"item": {"run_id": "c"}, "skipped": True},
             {"item": "junk", "msg": "?"}, None]
    assert teardown.pull_reasons(pulls) == {"b": "sha256_mismatch x"}
    assert teardown.pull_reasons(None) == {}


def test_shared_run_ids():
    runs = [{"job": "a", "run_id": "r"}, {"job": "b", "run_id": "r"}, {"job": "c", "run_id": "s"},
            {"job": None, "run_id": None}]
    assert teardown.shared_run_ids(runs) == {"r": ["a", "b"]}


def test_runs_refusals_check_each_run_in_its_own_directory(tmp_path):
    records = {str(tmp_path / "lab-01" / "train" / teardown.VERIFIED_NAME): verified(run_id="train"),
               str(tmp_path / "lab-01" / "exp2" / teardown.VERIFIED_NAME): verified(run_id="exp2", sha="c" * 64)}
    runs = [{"job": "train", "run_id": "train", "sha256": SHA}, {"job": "exp2", "run_id": "exp2", "sha256": SHA},
            {"job": "gone", "run_id": None, "sha256": "", "msg": "no queue.json"},
            {"job": "bad", "run_id": "..", "sha256": SHA}]
    found, checked = teardown.runs_refusals("lab-01", str(tmp_path), runs, records.get, {"exp2": "pulled earlier"})
    assert [(r["code"], r["message"].split(":")[0]) for r in found] == [
        ("manifest_changed", "job exp2"), ("manifest_unknown", "job gone"), ("bad_run_id", "job bad")]
    assert found[0]["message"].endswith("(pulled earlier)")
    assert [(c["job"], c["run_id"], c["file_count"]) for c in checked] == [("train", "train", 1), ("exp2", "exp2", 1)]
    assert checked[0]["pull_dir"] == str(tmp_path / "lab-01" / "train")


def test_nothing_to_pull_names_the_run_dir_or_the_reason():
    assert teardown.nothing_to_pull("/r")["code"] == "nothing_to_pull"
    assert "under /r" in teardown.nothing_to_pull("/r")["message"]
    assert teardown.nothing_to_pull("/r", "boom") == {
        "code": "manifest_unknown", "message": "no run to verify: the box's manifests could not be written (boom)"}


def test_a_host_not_approved_is_told_how_to_keep_the_run_to_the_approved_ones():
    """teardown without -l pulls every host and refuses the ones not approved: the refusal says how to keep to them."""
    (found,) = teardown.approval_refusals("box2", {"box1", "box3"})
    assert found == {"code": "not_approved", "message": "box2 was not approved by name (approved: box1, box3); to tear "
                                                        "down only those, keep the run to them with -l box1,box3"}
    (none,) = teardown.approval_refusals("box2", set())
    assert none["message"] == "box2 was not approved by name (approved: none)"
