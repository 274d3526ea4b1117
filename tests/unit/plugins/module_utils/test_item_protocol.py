"""The item protocol of issue 16: a failed sync is its own state (trained, not durable) and a relaunch retries only
the sync; crash markers belong to the queue item that left them; exit 127 names the command; the tail skips the
wrappers' own lines."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

import ansible_collections
from ansible_collections.remote_gpu.trainer.plugins.module_utils import (
    item_log,
    job_layout,
    job_log,
    job_status,
    jobs,
    launch,
)
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import fleet_patrol, launch_plan, launch_scripts

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plugin_utils"))
from fleet_samples import (  # noqa: E402  pylint: disable=wrong-import-position,import-error
    finding_of, job as sample_job, patrol_record, probe)

LIB = next(os.path.dirname(path) for path in ansible_collections.__path__
           if os.path.isdir(os.path.join(path, "remote_gpu", "trainer")))
REGEX = job_log.compile_progress(None)
START = "==== trainer: started 2026-07-03T10:00:00Z pid 4242 ====\n"


def item_start(item, arg="a"):
    return "==== trainer: item %s started 2026-07-03T10:00:0%sZ: %s ====\n" % (item, item[-1], arg)


def scan(text, tail=20):
    return job_log.scan_log(text.splitlines(True), REGEX, tail)


# ------------------------------------------------------------------------------------------ crash-marker scope


def test_a_crash_of_an_earlier_item_is_not_the_current_state():
    log = (START + item_start("000") + "epoch 1\nTraceback (most recent call last):\nRuntimeError: boom\n"
           "CUDA out of memory\n==== trainer: item 000 failed, exit 1 ====\n" + item_start("001") + "epoch 1\n"
           "epoch 2\n")
    found = scan(log)
    assert found["crash_markers"] == [] and found["crash_marker_count"] == 0
    assert found["current_item"] == "001" and found["current_item_line"] == 8
    assert found["earlier_crashes"] == [{"item": "000", "crash_marker_count": 2, "first": {
        "line_no": 4, "kind": "traceback", "text": "Traceback (most recent call last):"}}]
    job = dict(sample_job(), crash_markers=found["crash_markers"], crash_marker_count=0, exists=True)
    assert "job_crashed" not in [f["code"] for f in jobs.job_findings(job, 1800)]


def test_a_crash_of_the_current_item_is_still_the_current_state():
    log = START + item_start("000") + "epoch 1\n" + item_start("001") + "epoch 1\nTraceback (most recent call last):\n"
    found = scan(log)
    assert [m["line_no"] for m in found["crash_markers"]] == [6] and found["current_item"] == "001"
    assert found["earlier_crashes"] == []


def test_earlier_crashes_are_scoped_to_the_latest_start_and_work_across_blocks():
    old_run = START + item_start("000") + "Segmentation fault\n" + item_start("001") + "epoch 1\n"
    assert scan(old_run + START + "epoch 1\n")["earlier_crashes"] == []  # a restart forgets the old run
    blocks = [START + item_start("000"), "Killed\n", item_start("001"), "epoch 3\n"]
    found = job_log.scan_log(blocks, REGEX, 5)
    assert found["earlier_crashes"][0]["item"] == "000" and found["earlier_crashes"][0]["first"]["line_no"] == 3
    assert found["crash_markers"] == [] and found["current_item"] == "001"


def test_crash_markers_of_a_job_without_items_are_unchanged():
    found = scan(START + "epoch 1\nTraceback (most recent call last):\n")
    assert found["crash_marker_count"] == 1 and found["current_item"] is None and found["earlier_crashes"] == []


# ------------------------------------------------------------------------------------- tail and command not found


def test_the_tail_skips_the_wrappers_markers():
    log = (START + item_start("000") + "epoch 4\nbash: line 1: python: command not found\n"
           "==== trainer: item 000 failed, exit 127 ====\n==== trainer: queue finished, 1 item(s) failed ====\n"
           "==== trainer: finished 2026-07-03T10:00:09Z exit 1 ====\n")
    found = scan(log, tail=2)
    assert found["tail"] == ["epoch 4", "bash: line 1: python: command not found"]
    assert job_log.is_marker("==== trainer: finished 2026-07-03T10:00:09Z exit 1 ====")
    assert not job_log.is_marker("==== epoch 3 ====") and not job_log.is_marker("==== trainer: half a line")


@pytest.mark.parametrize("line, command", [
    ("bash: line 1: python: command not found", "python"),
    ("bash: python: command not found", "python"),
    ("/root/.trainer/jobs/train/run-item-0123456789ab.sh: line 40: torchrun: command not found", "torchrun"),
    ("bash: line 1: /opt/conda/bin/python: No such file or directory", "/opt/conda/bin/python"),
    ("FileNotFoundError: [Errno 2] No such file or directory: 'data/x.bin'", None),
    ("ls: cannot access 'x': No such file or directory", None),
    ("python: can't open file '/root/train.py': [Errno 2] No such file or directory", None),
])
def test_not_found_command_is_read_from_bashs_message(line, command):
    assert job_log.not_found_command(line) == command


def test_not_found_lines_carry_their_item():
    found = scan(START + item_start("000") + "bash: line 1: python: command not found\n")
    assert found["not_found"] == [{"item": "000", "command": "python", "line_no": 3,
                                   "text": "bash: line 1: python: command not found"}]
    assert found["crash_markers"] == []


# ----------------------------------------------------------------------------------------------- the findings


def report(items=(), not_found=(), earlier=(), last_exit=None):
    job = {"name": "train", "last_exit_code": last_exit, "earlier_crashes": list(earlier)}
    return job_status.item_findings(job, list(items), list(not_found))


def item(name, exit_code, state, command_exit_code=None, unsynced=(), sync_error=None):
    return {"item": name, "exit_code": exit_code, "state": state, "command_exit_code": command_exit_code,
            "unsynced": list(unsynced), "sync_error": sync_error, "started": "s", "finished": "f"}


def test_sync_failed_is_a_fail_naming_the_files_and_the_reason():
    found = report([item("000", 0, "done", 0), item("001", 1, "sync_failed", 0, ["best.pt", "trainer-item.log"],
                                                    "checked_sync failed: not enough room: 3 inodes needed")])
    assert [(f["level"], f["code"], f["item"]) for f in found] == [("FAIL", "sync_failed", "001")]
    assert "best.pt, trainer-item.log" in found[0]["message"] and "inodes" in found[0]["message"]
    assert found[0]["files"] == ["best.pt", "trainer-item.log"] and "only the sync" in found[0]["action"]


def test_exit_127_is_command_not_found_naming_the_command():
    not_found = [{"item": "000", "command": "python", "line_no": 3, "text": "bash: line 1: python: command not found"}]
    found = report([item("000", 127, "failed", 127), item("001", 0, "done", 0)], not_found)
    assert [(f["level"], f["code"]) for f in found] == [("FAIL", "command_not_found")]
    assert found[0]["commands"] == ["python"] and "item(s) 000 exited 127" in found[0]["message"]
    assert "python" in found[0]["message"] and "trainer_interpreter" in found[0]["action"]
    plain = report(last_exit=127)  # a job without items: its own exit code, and no line to quote
    assert plain[0]["code"] == "command_not_found" and "the job exited 127" in plain[0]["message"]
    assert report([item("000", 1, "failed", 1)], last_exit=1) == []


def test_an_earlier_items_crash_is_one_warning_with_its_id():
    first = {"line_no": 4, "kind": "traceback", "text": "Traceback (most recent call last):"}
    found = report(earlier=[{"item": "003", "crash_marker_count": 2, "first": first}])
    assert [(f["level"], f["code"], f["item"]) for f in found] == [("WARN", "item_crashed", "003")]
    assert "earlier item 003 left 2 crash marker(s), first at line 4" in found[0]["message"]


def test_item_states(tmp_path):
    assert job_layout.item_state(None) is None
    assert job_layout.item_state({"exit_code": 0}) == "done"
    assert job_layout.item_state({"exit_code": 1, "state": "sync_failed", "command_exit_code": 0}) == "sync_failed"
    assert job_layout.item_state({"exit_code": 1, "state": "sync_failed", "command_exit_code": False}) == "failed"
    assert job_layout.item_state({"exit_code": 1, "command_exit_code": 0}) == "failed"  # an old status: rerun
    path = tmp_path / "001" / "status.json"
    job_layout.write_status(str(path), {"item": "001", "exit_code": 1, "state": "sync_failed", "command_exit_code": 0,
                                        "unsynced": ["best.pt"], "sync_error": "full"})
    # the run wrapper greps for this exact text before it would run an item's command
    assert '"state": "sync_failed"' in path.read_text()
    (status,) = job_layout.item_statuses(str(tmp_path))
    assert (status["state"], status["unsynced"], status["sync_error"], status["command_exit_code"]) == (
        "sync_failed", ["best.pt"], "full", 0)


def test_patrol_puts_the_reason_first_and_shows_the_state():
    gone = sample_job(alive=False, items_done=1, items_failed=1, items_sync_failed=1, last_exit_code=1)
    found = [finding_of("FAIL", "job_gone_incomplete", "train is not running"),
             finding_of("FAIL", "sync_failed", "item 001 trained but best.pt is not durable"),
             finding_of("WARN", "item_crashed", "earlier item 000")]
    row = fleet_patrol.patrol_row("lab-01", patrol_record(probe([gone], found)))
    assert row["top_finding"].startswith("sync_failed: ") and row["verdict"] == "FAIL"
    assert "(1 failed) (1 trained, not synced)" in row["line"]
    assert row["line"].endswith("escalate: sync_failed, job_gone_incomplete")  # item_crashed is a WARN
    warn = fleet_patrol.patrol_row("lab-01", patrol_record(probe([sample_job()], found[2:])))
    assert warn["verdict"] == "WARN"


# ---------------------------------------------------------------------------------- finish, resync, the item log


def test_a_failed_sync_is_the_state_sync_failed_with_the_files_not_durable(out, tmp_path):
    blocker = tmp_path / "durable"
    blocker.write_text("a file where the durable directory should be")
    status, line = launch.finish_item("000", 0, "t0", str(out), sync_dest=str(blocker / "000"), best=["best*"],
                                      scratch=["latest*"])
    assert (status["exit_code"], status["command_exit_code"], status["state"]) == (1, 0, "sync_failed")
    assert status["unsynced"] == ["best.pt"] and status["best"] == ["best*"] and status["scratch"] == ["latest*"]
    assert status["sync_error"].startswith("checked_sync failed") and "FAILED to sync" in line
    assert sorted(os.listdir(str(out))) == ["best.pt", "latest.pt", "tmpdir"]  # nothing pruned
    status_file = tmp_path / "items" / "000" / "status.json"
    job_layout.write_status(str(status_file), status)
    assert job_layout.pending_items(str(tmp_path / "items"), ["000"]) == ["000"]
    # a resync copies only what launch recorded for the item (queue.json), never what a status alone names
    assert "no queue record of launch" in launch.resync_item(str(status_file))[0]["sync_error"]
    (tmp_path / "queue.json").write_text(json.dumps({"version": 1, "best": ["best*"], "items": [
        {"item": "000", "arg": None, "output_dir": str(out), "sync_dest": str(blocker / "000")}]}))
    job_layout.write_status(str(status_file), status)

    again, line = launch.resync_item(str(status_file))  # still blocked: still trained, not durable
    assert again["state"] == "sync_failed" and again["sync_attempts"] == 2 and "FAILED to sync" in line
    blocker.unlink()
    done, line = launch.resync_item(str(status_file))
    assert (done["exit_code"], done["state"], done["sync_error"], done["unsynced"]) == (0, "done", None, [])
    assert done["started"] == "t0" and done["finished"] == status["finished"]  # the run it trained in
    assert [f["path"] for f in done["synced"]] == ["best.pt"] and done["pruned"] == ["latest.pt"]
    assert (tmp_path / "durable" / "000" / "best.pt").read_bytes() == b"B" * 100
    assert line.startswith("==== trainer: item 000 done, synced 1 files")


def test_resync_leaves_items_that_are_not_trained_to_the_command(out, tmp_path):
    status_file = tmp_path / "items" / "000" / "status.json"
    assert launch.resync_item(str(status_file)) == (None, None)
    job_layout.write_status(str(status_file), launch.finish_item("000", 3, "t0", str(out))[0])
    assert launch.resync_item(str(status_file)) == (None, None)
    assert launch.cli(["resync", str(status_file)]) == 3


def test_a_provisional_status_of_a_command_that_succeeded_retries_only_the_finish(out, tmp_path):
    status = launch.provisional_status("000", 0, "t0", str(out), sync_dest=str(tmp_path / "d"), best=["best*"])
    assert (status["exit_code"], status["state"]) == (1, "sync_failed")
    failed = launch.provisional_status("000", 2, "t0", str(out), sync_dest=str(tmp_path / "d"), best=["best*"])
    assert failed["state"] == "failed"


def test_the_items_part_of_the_job_log_is_written_and_synced(out, tmp_path):
    log = tmp_path / "job.log"
    log.write_text(START + item_start("000", "x") + "epoch 1 of 000\n" + item_start("001") + "epoch 1 of 001\n"
                   + item_start("000", "again") + "epoch 2 of 000\nTraceback (most recent call last):\n")
    status, _line = launch.finish_item("000", 0, "t0", str(out), sync_dest=str(tmp_path / "d"), best=["best*"],
                                       log_path=str(log))
    expected = item_start("000", "again") + "epoch 2 of 000\nTraceback (most recent call last):\n"
    assert (out / item_log.ITEM_LOG).read_text() == expected
    assert sorted(f["path"] for f in status["synced"]) == ["best.pt", item_log.ITEM_LOG]
    assert (tmp_path / "d" / item_log.ITEM_LOG).read_text() == expected
    assert item_log.write_item_log(str(log), "001", str(tmp_path / "one.log"))
    assert (tmp_path / "one.log").read_text() == item_start("001") + "epoch 1 of 001\n"  # ends at the next item
    assert not item_log.write_item_log(str(log), "009", str(tmp_path / "none.log"))
    assert not item_log.write_item_log(str(tmp_path / "absent.log"), "000", str(tmp_path / "none.log"))


def test_the_log_alone_never_makes_an_item_done(out, tmp_path):
    (out / item_log.ITEM_LOG).write_text("epoch 1\n")
    status, _line = launch.finish_item("000", 0, "t0", str(out), sync_dest=str(tmp_path / "d"), best=["nothing*"])
    assert status["state"] == "sync_failed" and "no file under" in status["sync_error"]
    assert not (tmp_path / "d").exists()


def test_start_marker_search_across_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(item_log, "LOG_CHUNK", 7)
    log = tmp_path / "job.log"
    log.write_text("x" * 30 + "\n" + item_start("000") + "epoch 1\n" + "y" * 40 + "\n")
    assert item_log.write_item_log(str(log), "000", str(tmp_path / "i.log"))
    assert (tmp_path / "i.log").read_text() == item_start("000") + "epoch 1\n" + "y" * 40 + "\n"


# ------------------------------------------------------------------------- the run wrapper, end to end, in bash

TRAIN = r"""
echo "$TRAINER_ITEM $1" >> "$HOME_LOG"
echo "epoch 1/1 of $1"
printf 'best-%s' "$1" > "$TRAINER_OUTPUT_DIR/best.pt"
echo scratch > "$TRAINER_OUTPUT_DIR/latest.pt"
"""


def test_the_run_wrapper_retries_only_the_sync_of_a_trained_item(tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.sh").write_text(TRAIN)
    job_dir = tmp_path / "jobs" / "train"
    job_dir.mkdir(parents=True)
    durable = tmp_path / "durable"
    durable.write_text("not a directory: every sync fails")
    scripts = launch_scripts.scripts(
        [{"item": "000", "arg": "a0"}], name="train", host="h", command="bash train.sh", dest=str(tmp_path / "code"),
        output_root=str(tmp_path / "out"), durable_root=str(durable), run_id="r", best=["best*"], scratch=["latest*"],
        job_dir=str(job_dir), python=sys.executable, lib_dir=LIB)
    for script in scripts:
        with open(script["path"], "w") as handle:
            handle.write(script["text"])
    # launch's record of the host's share: what a resync may copy (launch.recorded_problem)
    (job_dir / "queue.json").write_text(json.dumps(launch_plan.queue_record(
        [{"item": "000", "arg": "a0"}], "train", "h", "r", 1, str(tmp_path / "out"), str(durable), best=["best*"],
        scratch=["latest*"])))
    log = job_dir / "job.log"
    env = dict(os.environ, HOME_LOG=str(tmp_path / "runs.log"))

    def run_item():
        with open(str(log), "a") as handle:  # the job's log, as the job wrapper keeps it
            return subprocess.run(["bash", scripts[0]["path"], "000", "a0"], env=env, stdout=handle,
                                  stderr=subprocess.STDOUT, timeout=60, check=False).returncode

    def status():
        return json.loads((job_dir / "items" / "000" / "status.json").read_text())

    assert run_item() == 1
    assert status()["state"] == "sync_failed" and status()["unsynced"] == ["best.pt", item_log.ITEM_LOG]
    assert run_item() == 1  # still not durable: the command is not run again
    assert (tmp_path / "runs.log").read_text() == "000 a0\n"
    assert status()["state"] == "sync_failed" and status()["sync_attempts"] == 2
    durable.unlink()
    assert run_item() == 0
    assert (tmp_path / "runs.log").read_text() == "000 a0\n"  # one start, ever
    final = status()
    assert (final["exit_code"], final["state"], final["command_exit_code"]) == (0, "done", 0)
    assert (durable / "000" / "best.pt").read_text() == "best-a0"
    text = (durable / "000" / item_log.ITEM_LOG).read_text()
    assert text.startswith("==== trainer: item 000 started ") and "epoch 1/1 of a0\n" in text
    assert [f["sha256"] for f in final["synced"] if f["path"] == "best.pt"] == [
        hashlib.sha256(b"best-a0").hexdigest()]
    text = log.read_text()
    assert text.count("==== trainer: item 000 started ") == 1
    assert text.count("its command is not run again, only its sync is retried") == 2
    assert job_log.scan_log(text.splitlines(True), REGEX, 5)["current_item"] == "000"


def test_job_status_reports_the_item_states_and_scopes_the_crash_markers(module_runner, tmp_path):
    from ansible_collections.remote_gpu.trainer.plugins.modules import job_status as job_status_module

    job_dir = tmp_path / "jobs" / "train"
    (job_dir / "items").mkdir(parents=True)
    (job_dir / "job.pid").write_text("%d\n" % (2 ** 22 + 7))  # a PID that cannot exist: the job is gone
    (job_dir / "job.starttime").write_text("1\n")
    (job_dir / "status.json").write_text(json.dumps({"item": None, "exit_code": 1, "started": "a", "finished": "b"}))
    (job_dir / "job.log").write_text(
        START + item_start("000") + "Traceback (most recent call last):\nRuntimeError: boom\n"
        "==== trainer: item 000 failed, exit 1 ====\n" + item_start("001") + "bash: line 1: python: command not found\n"
        "==== trainer: item 001 failed, exit 127 ====\n" + item_start("002") + "epoch 9/9\n"
        "==== trainer: item 002 FAILED to sync (trained; a relaunch retries only the sync): full ====\n"
        "==== trainer: queue finished, 3 item(s) failed ====\n"
        "==== trainer: finished 2026-07-03T10:09:00Z exit 1 ====\n")
    for status in ({"item": "000", "exit_code": 1, "command_exit_code": 1, "state": "failed"},
                   {"item": "001", "exit_code": 127, "command_exit_code": 127, "state": "failed"},
                   {"item": "002", "exit_code": 1, "command_exit_code": 0, "state": "sync_failed",
                    "unsynced": ["best.pt"], "sync_error": "checked_sync failed: no free inodes"}):
        job_layout.write_status(str(job_dir / "items" / status["item"] / "status.json"), status)
    failed, result = module_runner(job_status_module, {"name": "train", "run_dir": str(tmp_path / "jobs"),
                                                       "queue_length": 3, "fail_on": "never", "tail_lines": 2})
    assert not failed, result
    job = result["jobs"][0]
    assert (job["items_failed"], job["items_sync_failed"], job["current_item"]) == (3, 1, "002")
    # each item's state and whether its files are durable, for autopilot (issue 11)
    assert [(i["item"], i["state"], i["exit_code"], i["unsynced"], i["synced"], i["sync_dest"]) for i in job["items"]] == [
        ("000", "failed", 1, [], 0, None), ("001", "failed", 127, [], 0, None),
        ("002", "sync_failed", 1, ["best.pt"], 0, None)]
    assert job["crash_marker_count"] == 0 and [c["item"] for c in job["earlier_crashes"]] == ["000"]
    assert job["tail"] == ["bash: line 1: python: command not found", "epoch 9/9"]
    by_code = {f["code"]: f for f in result["findings"]}
    assert sorted(by_code) == ["command_not_found", "item_crashed", "job_gone_incomplete", "sync_failed"]
    assert by_code["sync_failed"]["level"] == "FAIL" and "best.pt" in by_code["sync_failed"]["message"]
    assert "no free inodes" in by_code["sync_failed"]["message"]
    assert by_code["command_not_found"]["commands"] == ["python"]
    assert by_code["item_crashed"]["level"] == "WARN" and by_code["item_crashed"]["item"] == "000"
