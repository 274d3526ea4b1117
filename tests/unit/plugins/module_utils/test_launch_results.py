"""What teardown pulls by default: launch's record of this host's items (module_utils/launch_results.py), and
pull_manifest's launch mode on a job directory laid out as launch and the run wrapper leave it."""
from __future__ import annotations

import hashlib
import json
import os

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import launch_results
from ansible_collections.remote_gpu.trainer.plugins.module_utils import manifest as mf
from ansible_collections.remote_gpu.trainer.plugins.modules import pull_manifest


def sha(data):
    return hashlib.sha256(data).hexdigest()


def copy(path, data):
    return {"path": path, "bytes": len(data), "sha256": sha(data)}


def queue(ids, output_root="/data/outputs/exp", durable_root="/fs/runs/exp"):
    return {"version": 1, "job": "train", "run_id": "exp", "host": "h", "queue_length": 5, "best": ["best*"],
            "output_root": output_root, "durable_root": durable_root,
            "items": [{"item": i, "arg": "", "output_dir": "%s/%s" % (output_root, i),
                       "sync_dest": "%s/%s" % (durable_root, i) if durable_root else None} for i in ids]}


def test_the_plan_takes_synced_copies_from_the_record_and_what_would_die_from_the_data_disk():
    statuses = {
        "000": {"exit_code": 0, "state": "done", "sync_dest": "/fs/runs/exp/000",
                "synced": [copy("best.pt", b"b0"), copy("trainer-item.log", b"log")]},
        "002": {"exit_code": 1, "command_exit_code": 0, "state": "sync_failed", "sync_dest": "/fs/runs/exp/002",
                "synced": [copy("best.json", b"j")], "unsynced": ["best.pt"]},
        "004": {"exit_code": 3, "state": "failed"},
    }
    seen = []

    def matching(directory, patterns):
        seen.append((directory, patterns))
        return ["best.pt"] if directory.endswith(("004", "006")) else []
    plan = launch_results.plan(queue(["000", "002", "004", "006", "008"]), statuses, matching)
    assert plan["durable"] == [copy("000/best.pt", b"b0"), copy("000/trainer-item.log", b"log"),
                               copy("002/best.json", b"j")]
    assert plan["unsynced"] == ["002/best.pt", "004/best.pt", "006/best.pt"]
    assert [(i["item"], i["state"], i["durable"], i["unsynced"]) for i in plan["items"]] == [
        ("000", "done", 2, 0), ("002", "sync_failed", 1, 1), ("004", "failed", 0, 1),
        ("006", "not_finished", 0, 1), ("008", "not_finished", 0, 0)]
    # a done item is never looked for on the data disk: its verified copies are the result
    assert [call[0] for call in seen] == ["/data/outputs/exp/004", "/data/outputs/exp/006", "/data/outputs/exp/008"]


def test_with_the_sync_off_the_outputs_on_the_data_disk_are_the_results():
    plan = launch_results.plan(queue(["000"], durable_root=None), {"000": {"exit_code": 0, "state": "done"}},
                               lambda directory, patterns: ["best.pt"])
    assert (plan["durable"], plan["unsynced"]) == ([], ["000/best.pt"])


@pytest.fixture
def box(tmp_path):
    """Two roots as launch leaves them: item 000 synced, item 002 trained but not synced, best.pt a link."""
    out, fs = tmp_path / "data" / "outputs" / "exp", tmp_path / "fs" / "runs" / "exp"
    (fs / "000").mkdir(parents=True)
    (fs / "000" / "best.pt").write_bytes(b"best-0")
    (out / "002").mkdir(parents=True)
    (out / "002" / "epoch_3.pt").write_bytes(b"epoch-3")
    os.symlink("epoch_3.pt", str(out / "002" / "best.pt"))
    record = queue(["000", "002"], output_root=str(out), durable_root=str(fs))
    statuses = {"000": {"exit_code": 0, "state": "done", "sync_dest": str(fs / "000"),
                        "synced": [copy("best.pt", b"best-0")]},
                "002": {"exit_code": 1, "command_exit_code": 0, "state": "sync_failed", "unsynced": ["best.pt"],
                        "synced": []}}
    return {"queue": record, "statuses": statuses, "out": out, "fs": fs}


def test_the_manifest_has_a_source_per_root_and_transfers_the_target_of_a_link(box):
    manifest, _plan = launch_results.build(box["queue"], box["statuses"])
    assert manifest["files"] == [copy("durable/000/best.pt", b"best-0"), copy("unsynced/002/best.pt", b"epoch-3")]
    assert manifest["sources"] == [
        {"label": "durable", "root": str(box["fs"]), "transfer": ["000/best.pt"]},
        {"label": "unsynced", "root": str(box["out"]), "transfer": ["002/best.pt", "002/epoch_3.pt"]}]
    assert mf.load_manifest(mf.manifest_bytes(manifest)) == manifest


def test_a_durable_copy_that_changed_after_its_sync_is_refused(box):
    (box["fs"] / "000" / "best.pt").write_bytes(b"overwritten later")
    with pytest.raises(mf.ManifestError, match="changed after the sync"):
        launch_results.build(box["queue"], box["statuses"])


def test_a_link_out_of_the_data_disk_root_is_refused(box, tmp_path):
    (tmp_path / "secret").write_bytes(b"s")
    os.unlink(str(box["out"] / "002" / "best.pt"))
    os.symlink(str(tmp_path / "secret"), str(box["out"] / "002" / "best.pt"))
    with pytest.raises(mf.ManifestError, match="leads outside the root"):
        launch_results.build(box["queue"], box["statuses"])


def test_nothing_to_pull_is_refused_with_the_items_states(box):
    statuses = {"000": {"exit_code": 2, "state": "failed"}}
    with pytest.raises(mf.ManifestError, match="000 failed, 002 not_finished"):
        launch_results.build(box["queue"], statuses, matching=lambda directory, patterns: [])


@pytest.mark.parametrize("sources", [
    [{"label": "elsewhere", "root": "/x", "transfer": ["a"]}],
    [{"label": "durable", "root": "relative", "transfer": ["a"]}],
    [{"label": "durable", "root": "/x", "transfer": ["../etc/passwd"]}],
    [{"label": "durable", "root": "/x", "transfer": []}],
])
def test_malformed_sources_are_refused(sources):
    manifest = {"version": 1, "root": None, "sources": sources, "total_bytes": 1,
                "files": [{"path": "durable/a", "bytes": 1, "sha256": "0" * 64}]}
    with pytest.raises(mf.ManifestError):
        mf.validate_manifest(manifest)


# ------------------------------------------------------------------------------------------- the module


def job_dir_of(tmp_path, box, alive=False, name="train", run_id=None):
    job = tmp_path / "jobs" / name
    (job / "items").mkdir(parents=True)
    (job / "queue.json").write_text(json.dumps(dict(box["queue"], job=name, run_id=run_id or box["queue"]["run_id"])))
    for item, status in box["statuses"].items():
        (job / "items" / item).mkdir()
        (job / "items" / item / "status.json").write_text(json.dumps(status))
    if alive:  # this very process stands in for the running job
        with open("/proc/self/stat", encoding="ascii") as handle:
            start = handle.read().rsplit(")", 1)[1].split()[19]
        (job / "job.pid").write_text("%d\n" % os.getpid())
        (job / "job.starttime").write_text(start + "\n")
    return job


def test_pull_manifest_writes_launchs_record_into_the_job_directory(module_runner, tmp_path, box):
    job = job_dir_of(tmp_path, box)
    failed, result = module_runner(pull_manifest, {"job": "train", "run_dir": str(tmp_path / "jobs")})
    assert not failed, result["msg"]
    assert result["manifest_path"] == str(job / "PULL_MANIFEST.json") and result["run_id"] == "exp"
    assert json.loads((job / "PULL_MANIFEST.json").read_text()) == result["manifest"]
    assert result["file_count"] == 2 and "000 (done), 002 (sync_failed)" in result["msg"]
    failed, again = module_runner(pull_manifest, {"job": "train", "run_dir": str(tmp_path / "jobs")})
    assert not failed and again["changed"] is False and again["sha256"] == result["sha256"]


def earlier_items(tmp_path, box):
    """Items 004 (done, synced) and 006 (failed, its best file on the data disk) that this host ran for an earlier
    share of the run, and 008, an item of another run of the job (other roots): status files the share in
    queue.json (000, 002) does not list, as a relaunch over another host set leaves them."""
    job = job_dir_of(tmp_path, box)
    (box["fs"] / "004").mkdir()
    (box["fs"] / "004" / "best.pt").write_bytes(b"best-4")
    (box["out"] / "006").mkdir()
    (box["out"] / "006" / "best.pt").write_bytes(b"best-6")
    statuses = {
        "004": {"item": "004", "exit_code": 0, "state": "done", "output_dir": str(box["out"] / "004"),
                "sync_dest": str(box["fs"] / "004"), "synced": [copy("best.pt", b"best-4")]},
        "006": {"item": "006", "exit_code": 1, "state": "failed", "output_dir": str(box["out"] / "006")},
        "008": {"item": "008", "exit_code": 0, "state": "done", "output_dir": "/data/outputs/older-run/008",
                "sync_dest": str(box["fs"] / "008"), "synced": [copy("best.pt", b"best-8")]},
    }
    for item, status in statuses.items():
        (job / "items" / item).mkdir()
        (job / "items" / item / "status.json").write_text(json.dumps(status))
    return job


def test_what_this_host_ran_for_an_earlier_share_is_pulled_too(module_runner, tmp_path, box):
    job = earlier_items(tmp_path, box)
    failed, result = module_runner(pull_manifest, {"job": "train", "run_dir": str(tmp_path / "jobs")})
    assert not failed, result["msg"]
    assert [entry["path"] for entry in result["manifest"]["files"]] == [
        "durable/000/best.pt", "durable/004/best.pt", "unsynced/002/best.pt", "unsynced/006/best.pt"]
    assert json.loads((job / "PULL_MANIFEST.json").read_text()) == result["manifest"]
    assert [(i["item"], i["state"], i.get("earlier", False)) for i in result["item_states"]] == [
        ("000", "done", False), ("002", "sync_failed", False), ("004", "done", True), ("006", "failed", True)]
    assert "004 (done, an earlier share), 006 (failed, an earlier share)" in result["msg"]
    # 008 names another run's output directory: not this run's item, never listed
    assert "008" not in json.dumps(result["manifest"])


def test_an_earlier_items_durable_copy_that_its_new_host_rewrote_is_left_out(module_runner, tmp_path, box):
    earlier_items(tmp_path, box)
    (box["fs"] / "004" / "best.pt").write_bytes(b"the new host's own run of 004")
    failed, result = module_runner(pull_manifest, {"job": "train", "run_dir": str(tmp_path / "jobs")})
    assert not failed, result["msg"]
    assert "durable/004/best.pt" not in [entry["path"] for entry in result["manifest"]["files"]]
    (state,) = [i for i in result["item_states"] if i["item"] == "004"]
    assert (state["durable"], state["superseded"]) == (0, 1)
    # a copy of the share that changed is still refused (test_a_durable_copy_that_changed_after_its_sync_is_refused)
    (box["fs"] / "000" / "best.pt").write_bytes(b"overwritten later")
    failed, result = module_runner(pull_manifest, {"job": "train", "run_dir": str(tmp_path / "jobs")})
    assert failed and "changed after the sync" in result["msg"]


@pytest.mark.parametrize("args, alive, message", [
    ({"run_id": "other"}, False, "which launch recorded as exp"),
    ({"root": "/fs"}, False, "root is not used with job"),
    ({"job": "../x"}, False, "job name"),
    ({"job": "nope"}, False, "was not started by the launch role"),
    ({}, True, "is still running"),
])
def test_pull_manifest_launch_mode_refusals(module_runner, tmp_path, box, args, alive, message):
    job_dir_of(tmp_path, box, alive=alive)
    failed, result = module_runner(pull_manifest, dict({"job": "train", "run_dir": str(tmp_path / "jobs")}, **args))
    assert failed and message in result["msg"], result["msg"]
    assert not (tmp_path / "jobs" / "train" / "PULL_MANIFEST.json").exists()


# --- jobs: every job of the host in one run of the module (what teardown.yml gives it) ---------------------------------


def run_of(result, job):
    (found,) = [run for run in result["runs"] if run["job"] == job]
    return found


def test_jobs_writes_each_jobs_manifest_in_its_own_directory(module_runner, tmp_path, box):
    train = job_dir_of(tmp_path, box)
    exp2 = job_dir_of(tmp_path, box, name="exp2", run_id="exp2run")
    failed, result = module_runner(pull_manifest, {"jobs": ["train", "exp2", "train"],
                                                   "run_dir": str(tmp_path / "jobs")})
    assert not failed, result["msg"]
    assert [(run["job"], run["run_id"]) for run in result["runs"]] == [("train", "exp"), ("exp2", "exp2run")]
    for run, job in ((run_of(result, "train"), train), (run_of(result, "exp2"), exp2)):
        assert run["manifest_path"] == str(job / "PULL_MANIFEST.json")
        raw = (job / "PULL_MANIFEST.json").read_bytes()
        assert run["sha256"] == sha(raw) and run["file_count"] == 2 and run["changed"] is True
        assert json.loads(raw)["run_id"] == run["run_id"]
        assert [item["item"] for item in run["item_states"]] == ["000", "002"]
    assert result["changed"] is True
    failed, again = module_runner(pull_manifest, {"jobs": ["train", "exp2"], "run_dir": str(tmp_path / "jobs")})
    assert not failed and again["changed"] is False
    assert [run["sha256"] for run in again["runs"]] == [run["sha256"] for run in result["runs"]]


def test_jobs_a_live_job_fails_by_name_and_the_others_still_get_their_manifest(module_runner, tmp_path, box):
    job_dir_of(tmp_path, box)
    exp2 = job_dir_of(tmp_path, box, name="exp2", run_id="exp2run", alive=True)
    failed, result = module_runner(pull_manifest, {"jobs": ["train", "exp2"], "run_dir": str(tmp_path / "jobs")})
    assert failed and result["msg"].startswith("pull_manifest failed for job(s) exp2: ")
    assert run_of(result, "train")["sha256"] and run_of(result, "train")["file_count"] == 2
    live = run_of(result, "exp2")
    assert live["sha256"] == "" and live["manifest_path"] == ""
    assert live["msg"].startswith("job exp2: job exp2 is still running on this host")
    assert not (exp2 / "PULL_MANIFEST.json").exists()


@pytest.mark.parametrize("args, message", [
    ({"jobs": []}, "jobs is empty"),
    ({"jobs": ["train"], "manifest_path": "/tmp/m.json"}, "manifest_path is not used with jobs"),
    ({"jobs": ["train"], "root": "/fs"}, "root is not used with job or jobs"),
    ({"jobs": ["train"], "job": "train"}, "mutually exclusive"),
])
def test_jobs_refusals_of_the_whole_task(module_runner, tmp_path, box, args, message):
    job_dir_of(tmp_path, box)
    failed, result = module_runner(pull_manifest, dict({"run_dir": str(tmp_path / "jobs")}, **args))
    assert failed and message in result["msg"], result["msg"]
    assert not (tmp_path / "jobs" / "train" / "PULL_MANIFEST.json").exists()


@pytest.mark.parametrize("jobs, run_id, bad, message", [
    (["train", "nope"], None, "nope", "was not started by the launch role"),
    (["train", "exp2"], "exp", "exp2", "run_id exp is not the run of job exp2"),
    (["train", "../x"], None, "../x", "job name '../x' may contain only"),
])
def test_jobs_one_jobs_refusal_is_named_in_its_run(module_runner, tmp_path, box, jobs, run_id, bad, message):
    job_dir_of(tmp_path, box)
    job_dir_of(tmp_path, box, name="exp2", run_id="exp2run")
    args = {"jobs": jobs, "run_dir": str(tmp_path / "jobs")}
    if run_id:
        args["run_id"] = run_id
    failed, result = module_runner(pull_manifest, args)
    assert failed and "failed for job(s) %s:" % bad in result["msg"]
    assert message in run_of(result, bad)["msg"] and run_of(result, bad)["sha256"] == ""
    assert run_of(result, "train")["sha256"]


def test_one_job_or_a_roster_also_returns_its_run(module_runner, tmp_path, box):
    job_dir_of(tmp_path, box)
    failed, result = module_runner(pull_manifest, {"job": "train", "run_dir": str(tmp_path / "jobs")})
    assert not failed
    assert result["runs"] == [{"job": "train", "run_id": "exp", "manifest_path": result["manifest_path"],
                               "sha256": result["sha256"], "file_count": 2, "total_bytes": result["total_bytes"],
                               "item_states": result["item_states"], "changed": True, "msg": result["msg"]}]
    failed, result = module_runner(pull_manifest, {"job": "nope", "run_dir": str(tmp_path / "jobs")})
    assert failed and [(run["job"], run["sha256"]) for run in result["runs"]] == [("nope", "")]
    assert result["runs"][0]["msg"] == result["msg"]


def test_left_behind_lists_what_the_pull_does_not_hold_and_follows_no_link(tmp_path):
    """An item's output directory as a training script leaves it: its best files and log (pulled), metrics and
    samples (not pulled), a scratch checkpoint and a scratch directory (pruned by the run wrapper), a link to a file
    outside and a link to a directory outside (never followed, never counted)."""
    out = tmp_path / "outputs" / "exp" / "000"
    (out / "samples").mkdir(parents=True)
    (out / "ckpt-latest" / "deep").mkdir(parents=True)
    for rel, data in (("best.pt", b"b" * 10), ("best/epoch.json", b"{}"), ("trainer-item.log", b"log"),
                      ("metrics.json", b"m" * 100), ("samples/0.png", b"p" * 7), ("latest.pt", b"l"),
                      ("ckpt-latest/deep/x.bin", b"x")):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    outside = tmp_path / "secret"
    (outside / "many").mkdir(parents=True)
    (outside / "key").write_text("k")
    (out / "link-file").symlink_to(outside / "key")
    (out / "samples" / "link-dir").symlink_to(outside / "many")
    found = launch_results.left_behind(str(out), ["best*", "trainer-item.log"], ["latest*", "ckpt-latest"])
    assert found == {"dir": str(out), "count": 2, "bytes": 107, "files": ["metrics.json", "samples/0.png"],
                     "cut": False, "paths": ["metrics.json", "samples/0.png"]}
    # a bounded walk: it stops after the limit and says so
    cut = launch_results.left_behind(str(out), ["best*"], [], limit=3)
    assert cut["cut"] is True and cut["count"] <= 3
    assert launch_results.left_behind(str(tmp_path / "none"), ["best*"], [])["count"] == 0


def test_the_plan_names_an_items_left_behind_files_only_where_there_are_some():
    seen = []

    def leftover(directory, keep, scratch):
        seen.append((directory, keep, scratch))
        count = 2 if directory.endswith("000") else 0
        return {"dir": directory, "count": count, "bytes": 9 * count, "files": ["metrics.json"][:count], "cut": False,
                "paths": ["metrics.json", "samples/0.png"][:count]}
    record = dict(queue(["000", "001"]), scratch=["latest*"])
    statuses = {item: {"exit_code": 0, "state": "done", "sync_dest": "/fs/runs/exp/%s" % item,
                       "synced": [copy("best.pt", b"b")]} for item in ("000", "001")}
    plan = launch_results.plan(record, statuses, lambda d, p: [], leftover)
    assert [row.get("left_behind") for row in plan["items"]] == [
        {"dir": "/data/outputs/exp/000", "count": 2, "bytes": 18, "files": ["metrics.json"], "cut": False}, None]
    assert seen[0][1:] == (["best*", "trainer-item.log"], ["latest*"])


def test_asked_to_the_plan_pulls_what_an_item_left_from_the_data_disk_unless_the_walk_was_cut():
    def leftover(directory, keep, scratch):
        cut = directory.endswith("001")
        return {"dir": directory, "count": 2, "bytes": 18, "files": ["metrics.json", "samples/0.png"], "cut": cut,
                "paths": ["metrics.json", "samples/0.png"]}
    statuses = {item: {"exit_code": 0, "state": "done", "sync_dest": "/fs/runs/exp/%s" % item,
                       "synced": [copy("best.pt", b"b")]} for item in ("000", "001")}
    plan = launch_results.plan(queue(["000", "001"]), statuses, lambda d, p: [], leftover, pull_left=True)
    assert plan["unsynced"] == ["000/metrics.json", "000/samples/0.png"]
    assert plan["durable"] == [copy("000/best.pt", b"b"), copy("001/best.pt", b"b")]
    assert [(row["item"], row["unsynced"], "left_behind" in row) for row in plan["items"]] == [
        ("000", 2, False), ("001", 0, True)]
    assert "paths" not in plan["items"][1]["left_behind"]


def test_the_manifest_holds_what_an_item_left_when_asked_and_the_pull_finds_it_by_its_sha256(tmp_path):
    """pull_manifest's job mode, on a job directory as launch and the run wrapper leave it, with pull_left_behind."""
    out = tmp_path / "outputs" / "exp"
    (out / "000" / "samples").mkdir(parents=True)
    (out / "000" / "best.pt").write_bytes(b"b0")
    (out / "000" / "metrics.json").write_bytes(b'{"loss": 0.1}')
    (out / "000" / "samples" / "0.png").write_bytes(b"png")
    record = dict(queue(["000"], output_root=str(out), durable_root=None), scratch=["latest*"])
    statuses = {"000": {"exit_code": 0, "state": "done"}}
    left_alone = launch_results.build(record, statuses)[0]
    assert [f["path"] for f in left_alone["files"]] == ["unsynced/000/best.pt"]
    manifest, wanted = launch_results.build(record, statuses, pull_left=True)
    assert {f["path"]: f["sha256"] for f in manifest["files"]} == {
        "unsynced/000/best.pt": sha(b"b0"), "unsynced/000/metrics.json": sha(b'{"loss": 0.1}'),
        "unsynced/000/samples/0.png": sha(b"png")}
    assert "left_behind" not in wanted["items"][0]
