from __future__ import annotations

import json
import pathlib

import pytest
import yaml

from ansible_collections.remote_gpu.trainer.plugins.module_utils import teardown
from ansible_collections.remote_gpu.trainer.plugins.module_utils.version import COLLECTION_VERSION


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
