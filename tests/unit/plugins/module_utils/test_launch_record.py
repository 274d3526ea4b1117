"""The run's record (TensorBoard events, protocol/) synced with each item's best files (issue 34, item 5)."""
from __future__ import annotations

import hashlib
import json

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import launch
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import launch_plan, launch_scripts


def _tree(root, files):
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def test_record_sources_prefer_the_items_own_tb_subtree(tmp_path):
    tb, protocol = tmp_path / "tb", tmp_path / "protocol"
    _tree(tmp_path, {"tb/000/events.out.tfevents.1": b"e0", "tb/run.tfevents": b"x", "protocol/config.yaml": b"c"})
    assert launch.record_sources("000", str(tb), str(protocol)) == [("tb", str(tb / "000")), ("protocol", str(protocol))]
    # an item that wrote no subtree of its own gets the whole directory
    assert launch.record_sources("001", str(tb), str(protocol)) == [("tb", str(tb)), ("protocol", str(protocol))]


def test_record_sources_leave_out_empty_missing_and_unset_directories(tmp_path):
    (tmp_path / "tb" / "000").mkdir(parents=True)  # tensorboard_pin creates it; a job without events leaves it empty
    assert launch.record_sources("000", str(tmp_path / "tb"), str(tmp_path / "nowhere")) == []
    assert launch.record_sources("000", None, "") == []


def test_the_queue_record_names_the_record_directories():
    mine = launch_plan.assign(["a"], ["h1"])
    record = launch_plan.queue_record(mine, "train", "h1", "exp", 1, "/d", "/fs", tensorboard_dir="/d/tb/",
                                      protocol_dir="/d/protocol")
    assert (record["tensorboard_dir"], record["protocol_dir"]) == ("/d/tb", "/d/protocol")
    assert launch.record_dirs(record) == {"tensorboard_dir": "/d/tb", "protocol_dir": "/d/protocol",
                                          "wandb_dir": None}
    off = launch_plan.queue_record(mine, "train", "h1", "exp", 1, "/d", "/fs")
    assert (off["tensorboard_dir"], off["protocol_dir"]) == (None, None)
    with pytest.raises(ValueError, match="launch_protocol_dir must be an absolute path"):
        launch_plan.queue_record(mine, "train", "h1", "exp", 1, "/d", "/fs", protocol_dir="protocol")


def test_finish_syncs_the_items_events_and_the_protocol_verified(out, tmp_path):
    _tree(tmp_path, {"tb/000/events.out.tfevents.1": b"E" * 10, "protocol/config.yaml": b"lr: 1\n",
                     "protocol/notes/why.md": b"because\n"})
    dest = tmp_path / "durable" / "000"
    status, line = launch.finish_item("000", 0, "t0", str(out), sync_dest=str(dest), best=["best*"],
                                      scratch=["latest*"], tensorboard_dir=str(tmp_path / "tb"),
                                      protocol_dir=str(tmp_path / "protocol"))
    assert status["state"] == "done" and status["exit_code"] == 0, status
    synced = {entry["path"]: entry["sha256"] for entry in status["synced"]}
    assert sorted(synced) == ["best.pt", "protocol/config.yaml", "protocol/notes/why.md",
                              "tb/events.out.tfevents.1"]
    assert synced["tb/events.out.tfevents.1"] == hashlib.sha256(b"E" * 10).hexdigest()
    assert (dest / "tb" / "events.out.tfevents.1").read_bytes() == b"E" * 10
    assert (dest / "protocol" / "notes" / "why.md").read_bytes() == b"because\n"
    assert "synced 4 files" in line


def test_a_record_that_fails_to_sync_fails_the_items_sync(out, tmp_path):
    _tree(tmp_path, {"protocol/config.yaml": b"c"})
    dest = tmp_path / "durable" / "000"
    dest.mkdir(parents=True)
    (dest / "protocol").write_text("a file where the directory goes")
    status, line = launch.finish_item("000", 0, "t0", str(out), sync_dest=str(dest), best=["best*"],
                                      scratch=["latest*"], protocol_dir=str(tmp_path / "protocol"))
    assert (status["state"], status["exit_code"], status["command_exit_code"]) == ("sync_failed", 1, 0)
    assert status["sync_error"].startswith("the protocol record %s" % (tmp_path / "protocol"))
    assert [entry["path"] for entry in status["synced"]] == ["best.pt"]  # the best file is durable
    assert (out / "latest.pt").exists()  # nothing pruned before the whole sync is verified
    assert "FAILED to sync" in line


def test_resync_takes_the_record_directories_from_launchs_queue_record(out, tmp_path):
    _tree(tmp_path, {"protocol/config.yaml": b"c"})
    job = tmp_path / "jobs" / "train"
    job.mkdir(parents=True)
    mine = launch_plan.assign(["a"], ["h1"])
    record = launch_plan.queue_record(mine, "train", "h1", "exp", 1, str(out.parent), str(tmp_path / "fs"),
                                      best=["best*"], protocol_dir=str(tmp_path / "protocol"))
    record["items"][0]["output_dir"] = str(out)
    (job / "queue.json").write_text(json.dumps(record))
    status_file = job / "items" / "000" / "status.json"
    status_file.parent.mkdir(parents=True)
    failed = launch.provisional_status("000", 0, "t0", str(out), sync_dest=str(tmp_path / "fs" / "000"),
                                       best=["best*"])
    status_file.write_text(json.dumps(failed))
    status, _line = launch.resync_item(str(status_file))
    assert status["state"] == "done", status
    assert sorted(entry["path"] for entry in status["synced"]) == ["best.pt", "protocol/config.yaml"]


def test_the_run_wrapper_passes_the_record_directories_to_the_finish_step():
    common = dict(name="train", host="h1", command="bash train.sh", dest="/c", output_root="/o",
                  durable_root="/fs", run_id="r", best=["best*"], scratch=[], job_dir="/j", python="python3",
                  lib_dir="/l")
    text = launch_scripts.run_item_text(tensorboard_dir="/o/tb", protocol_dir="/o/protocol", **common)
    assert '    set -- "$@" --tb-dir /o/tb' in text and '    set -- "$@" --protocol-dir /o/protocol' in text
    assert "--tb-dir" not in launch_scripts.run_item_text(**common)


def test_code_json_records_the_uncommitted_files_of_the_pushed_tree():
    assert launch.dirty_files('["train.py", "notes/"]') == ["train.py", "notes/"]
    assert launch.dirty_files("null") is None and launch.dirty_files("") is None and launch.dirty_files("{") is None
    assert len(launch.dirty_files(json.dumps(["f%d" % i for i in range(2000)]))) == launch.MAX_DIRTY_FILES


def test_the_report_line_says_the_code_was_dirty():
    from ansible_collections.remote_gpu.trainer.plugins.filter.launch import launch_report
    record = {"tree_sha256": "a" * 64, "commit": "c0ffee", "dirty": True, "dirty_files": ["train.py"]}
    line = launch_report([{"item": "000"}], "h1", pending=["000"], code=record)
    assert "(code aaaaaaaaaaaa, commit c0ffee with 1 uncommitted file(s))" in line


def test_the_items_wandb_dir_is_exported_and_synced_with_its_offline_runs(out, tmp_path):
    common = dict(name="train", host="h1", command="bash train.sh", dest="/c", output_root="/o",
                  durable_root="/fs", run_id="r", best=["best*"], scratch=[], job_dir="/j", python="python3",
                  lib_dir="/l")
    text = launch_scripts.run_item_text(wandb_dir="/o/wandb", **common)
    assert "export WANDB_DIR=/o/wandb/\"$ID\"" in text and '    set -- "$@" --wandb-dir /o/wandb' in text
    assert "WANDB_DIR" not in launch_scripts.run_item_text(**common)
    _tree(tmp_path, {"wandb/000/wandb/offline-run-20260101_000000-abc/run-abc.wandb": b"W",
                     "wandb/001/wandb/offline-run-x/run-x.wandb": b"other item"})
    dest = tmp_path / "durable" / "000"
    status, _line = launch.finish_item("000", 0, "t0", str(out), sync_dest=str(dest), best=["best*"],
                                       wandb_dir=str(tmp_path / "wandb"))
    assert [entry["path"] for entry in status["synced"]] == [
        "best.pt", "wandb/wandb/offline-run-20260101_000000-abc/run-abc.wandb"]


def _two_boxes(out, tmp_path):
    """An item finished with a verified copy on a shared durable tier by one box's job, and the same job's queue
    record on a second box (a replacement) that has no status for it -> (the second box's status file, the copy)."""
    fs = tmp_path / "fs"
    mine = launch_plan.assign(["a"], ["h2"])
    record = launch_plan.queue_record(mine, "train", "h2", "exp", 1, str(out.parent), str(fs), best=["best*"])
    job = tmp_path / "h2" / "jobs" / "train"
    job.mkdir(parents=True)
    (job / "queue.json").write_text(json.dumps(record))
    status, _line = launch.finish_item("000", 0, "t0", str(out), sync_dest=str(fs / "000"), best=["best*"], host="h1",
                                       arg="a")
    assert status["state"] == "done"
    return job / "items" / "000" / "status.json", fs / "000"


def test_an_item_done_with_a_verified_durable_copy_is_adopted_on_another_box_not_trained_again(out, tmp_path):
    status_file, dest = _two_boxes(out, tmp_path)
    record = json.loads((dest.parent / ".trainer-done" / "000.json").read_text())
    assert record["host"] == "h1" and record["state"] == "done" and [f["path"] for f in record["synced"]] == ["best.pt"]
    status, line = launch.adopt_item(str(status_file), str(dest))
    assert status["state"] == "done" and status["trained_on"] == "h1" and status["adopted_from"].endswith("000.json")
    assert "item 000 was done on h1" in line and "not trained again" in line
    # the run wrapper asks first: adopted, it exits 0 without running the command
    text = launch_scripts.run_item_text(name="train", host="h2", command="bash train.sh", dest="/c",
                                        output_root="/o", durable_root="/fs", run_id="r", best=["best*"],
                                        scratch=[], job_dir="/j", python="python3", lib_dir="/l", adopt=True)
    adopt = text.index(' adopt "$STATUS" "$DURABLE/$ID" && exit 0')
    assert adopt < text.index('rm -f "$STATUS"') < text.index('exec bash -c "$COMMAND $ARG"')
    assert 'export TRAINER_DURABLE_DIR="$DURABLE/$ID"' in text
    # only a replacement's relaunch adopts (launch_adopt_durable): a plain launch on a box that shares the durable
    # tier with another (two AutoDL boxes of one region) runs the item it was given
    plain = launch_scripts.run_item_text(name="train", host="h2", command="bash train.sh", dest="/c",
                                         output_root="/o", durable_root="/fs", run_id="r", best=["best*"],
                                         scratch=[], job_dir="/j", python="python3", lib_dir="/l")
    assert " adopt " not in plain and 'export TRAINER_DURABLE_DIR="$DURABLE/$ID"' in plain


@pytest.mark.parametrize("spoil", ["changed copy", "missing copy", "other dest", "planted record", "failed record",
                                   "other arg"])
def test_an_item_is_not_adopted_unless_its_copy_matches_the_record_and_the_queue_names_it(out, tmp_path, spoil):
    status_file, dest = _two_boxes(out, tmp_path)
    done = dest.parent / ".trainer-done" / "000.json"
    if spoil == "changed copy":
        (dest / "best.pt").write_bytes(b"C" * 100)
    elif spoil == "missing copy":
        (dest / "best.pt").unlink()
    elif spoil == "other dest":  # the queue record names where to look, never the caller alone
        assert launch.adopt_item(str(status_file), str(tmp_path / "elsewhere" / "000"))[0] is None
        return
    elif spoil == "planted record":  # a record naming a file outside the copy
        record = json.loads(done.read_text())
        record["synced"] = [{"path": "../../../etc/passwd", "bytes": 1, "sha256": "0"}]
        done.write_text(json.dumps(record))
    elif spoil == "other arg":  # the queue changed under the same run id: the item is trained again
        record = json.loads(done.read_text())
        record.update(arg="b")
        done.write_text(json.dumps(record))
    else:
        record = json.loads(done.read_text())
        record.update(exit_code=1, state="failed")
        done.write_text(json.dumps(record))
    status, why = launch.adopt_item(str(status_file), str(dest))
    assert status is None and why, why
