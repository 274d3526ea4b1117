"""Hostile inputs of issue 29, point 4 (every read bounded, none blocking): each reader of a file that a box or a
user can write, fed a FIFO, a huge file and a symlink out of its directory (see conftest.py for the outcomes).

The readers: the item log copy (item_log.py, run by launch.py's command line on the box), the checksum of the
pushed code tree (launch.py ``code``), the record of the last verified sync (sync_state.py, read by checked_sync
and by the finish step of every item), the job's records (job_layout.read_text, read by job_status) and the
checkpoint check (checkpoint.py, on pulled and synced files). Each goes through module_utils/safe_read.py. And the
one append of a job's helper into its directory (the sampler's samples.tsv): never blocking, never through a link;
and the sync sources an item's status names (launch resync): only the ones launch recorded in queue.json.

A row marked ``held before`` passed on the code before this change too (a guard there already caught it); every
other row failed on it: a hang, a file outside the directory read, or an unbounded copy."""

from __future__ import annotations

import json
import os

import pytest

from hostile import Case

from ansible_collections.remote_gpu.trainer.plugins.module_utils import (
    checkpoint, item_log, job_layout, launch, sampler, sync, sync_state)
from ansible_collections.remote_gpu.trainer.plugins.modules import job_status
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import launch_plan

SECRET = "CANARY-outside-the-tree-5b0c"


def private_job(tmp):
    """A job directory as detached_job makes it (0700), with one item's status path; -> (job_dir, status_file)."""
    job_dir = tmp / "jobs" / "j"
    (job_dir / "items" / "000").mkdir(parents=True)
    os.chmod(str(job_dir), 0o700)
    return job_dir, job_dir / "items" / "000" / "status.json"


def outside_log(tmp):
    """A file outside the job directory that looks like the item's part of a job log, with a secret in it."""
    path = tmp / "elsewhere.log"
    path.write_text((item_log.ITEM_START % "000") + "====\n" + SECRET + "\n")
    return path


# --- item_log: the item's part of the job log, copied into its output directory ---------------------------------

def copy_item_log(args):
    """What the finish step does: find the job's log from the item's status path, copy the item's part."""
    log = item_log.job_log_path(args["status_file"])
    written = item_log.write_item_log(log, "000", args["dest"])
    copy = b""
    if os.path.exists(args["dest"]):  # the test's own file
        with open(args["dest"], "rb") as handle:
            copy = handle.read()
    return {"log": log, "written": written, "size": len(copy), "copy": copy.decode("utf-8", "replace")}


def item_log_with(make):
    def build(tmp):
        job_dir, status_file = private_job(tmp)
        make(job_dir, tmp)
        (tmp / "out").mkdir()
        return {"status_file": str(status_file), "dest": str(tmp / "out" / item_log.ITEM_LOG)}
    return build


def _log_fifo(job_dir, _tmp):
    os.mkfifo(str(job_dir / "job.log"))


def _log_huge(job_dir, _tmp):
    """The item's start line, then 200 MiB (sparse) without another start line."""
    with open(str(job_dir / "job.log"), "wb") as handle:
        handle.write(((item_log.ITEM_START % "000") + "====\n").encode())
        handle.truncate(200 << 20)


def _log_link_out(job_dir, tmp):
    os.symlink(str(outside_log(tmp)), str(job_dir / "job.log"))


def _meta_log_out(job_dir, tmp):
    """A private, trusted meta whose log_path names a file outside the job directory."""
    (job_dir / "job.meta.json").write_text(json.dumps({"name": "j", "log_path": str(outside_log(tmp))}))
    os.chmod(str(job_dir / "job.meta.json"), 0o600)


def nothing_copied(result, _tmp):
    assert not result["written"] and SECRET not in result["copy"], result


def copy_bounded(result, _tmp):
    cut = (item_log.CUT_LINE % item_log.MAX_COPY).encode()
    assert result["written"] and result["size"] <= item_log.MAX_COPY + len(cut), result["size"]
    assert result["copy"].endswith(cut.decode()), result["copy"][-200:]


ITEM_LOG_CASES = [
    Case("item_log: a FIFO as the job log is not opened (held before: stat before the open)", copy_item_log,
         item_log_with(_log_fifo), "ok", check=nothing_copied, timeout=10),
    Case("item_log: a 200 MiB item part is copied to its bound only, and says so", copy_item_log,
         item_log_with(_log_huge), "ok", check=copy_bounded, timeout=30),
    Case("item_log: a job.log that links out of the job directory is not copied", copy_item_log,
         item_log_with(_log_link_out), "ok", check=nothing_copied, timeout=10),
    Case("item_log: a meta log_path outside the job directory is not copied", copy_item_log,
         item_log_with(_meta_log_out), "ok", check=nothing_copied, timeout=10),
]


# --- launch code: the checksum of the pushed tree ---------------------------------------------------------------

def checksum(args):
    return launch.tree_checksum(args["root"])


def tree_with(make):
    def build(tmp):
        root = tmp / "code"
        root.mkdir()
        (root / "train.py").write_text("print('hi')\n")
        make(root, tmp)
        return {"root": str(root)}
    return build


def _tree_fifo(root, _tmp):
    os.mkfifo(str(root / "pipe"))


def _tree_link_out(root, tmp):
    os.symlink(str(outside_log(tmp)), str(root / "link.log"))


def checksum_raced(args):
    """A FIFO put in a file's place after the walk saw a regular file there (the walk's isfile says True)."""
    real_isfile = os.path.isfile
    os.path.isfile = lambda path: True if path.endswith("pipe") else real_isfile(path)
    try:
        return launch.tree_checksum(args["root"])
    finally:
        os.path.isfile = real_isfile


def only_the_file(result, _tmp):
    assert result["files"] == 1 and result["bytes"] == len("print('hi')\n"), result


def link_not_read(result, _tmp):
    assert result["files"] == 2 and result["bytes"] == len("print('hi')\n"), result  # the link's target: not read


TREE_CASES = [
    Case("launch code: a FIFO in the tree is left out (held before: isfile)", checksum, tree_with(_tree_fifo), "ok",
         check=only_the_file, timeout=10),
    Case("launch code: a FIFO that replaced a file after the walk is left out, never opened blocking",
         checksum_raced, tree_with(_tree_fifo), "ok", check=only_the_file, timeout=10),
    Case("launch code: a symlink out of the tree counts as its target's name, never its bytes (held before)",
         checksum, tree_with(_tree_link_out), "ok", check=link_not_read, timeout=10),
]


# --- sync_state: the record of the last verified sync -----------------------------------------------------------

RECORD = {"best.pt": {"src": [1, 2, 3, 4, 5], "dest": [6, 7, 8, 9, 10], "sha256": "0" * 64}}


def load_state(args):
    """sync_state.load_state with the state directory under the test's tmp (STATE_DIR is read at each call)."""
    saved = sync_state.STATE_DIR
    sync_state.STATE_DIR = args["state_dir"]
    try:
        return {"state": sync_state.load_state(args["dest"])}
    finally:
        sync_state.STATE_DIR = saved


def state_with(make):
    def build(tmp):
        state_dir, dest = tmp / "state", tmp / "dest"
        state_dir.mkdir()
        dest.mkdir()
        saved = sync_state.STATE_DIR
        sync_state.STATE_DIR = str(state_dir)
        try:
            path = sync_state.state_path(str(dest))
        finally:
            sync_state.STATE_DIR = saved
        make(path, tmp)
        return {"state_dir": str(state_dir), "dest": str(dest)}
    return build


def _state_fifo(path, _tmp):
    os.mkfifo(path)


def _state_huge(path, _tmp):
    """A valid record after more whitespace than MAX_STATE_BYTES (json would read and parse all of it)."""
    with open(path, "w") as handle:
        handle.write(" " * (sync_state.MAX_STATE_BYTES + 1024) + json.dumps(RECORD))


def _state_link_out(path, tmp):
    (tmp / "elsewhere.json").write_text(json.dumps(RECORD))
    os.symlink(str(tmp / "elsewhere.json"), path)


def no_record(result, _tmp):
    assert result["state"] == {}, result


STATE_CASES = [
    Case("sync_state: a FIFO as the record of the last sync is no record, never a hang", load_state,
         state_with(_state_fifo), "ok", check=no_record, timeout=10),
    Case("sync_state: a record larger than its bound is no record", load_state, state_with(_state_huge), "ok",
         check=no_record, timeout=30),
    Case("sync_state: a record that links out of the state directory is no record", load_state,
         state_with(_state_link_out), "ok", check=no_record, timeout=10),
]


# --- job_layout.read_text: the job's records, through job_status -----------------------------------------------

def records_with(make):
    def build(tmp):
        job_dir, status_file = private_job(tmp)
        (job_dir / "job.log").write_text("epoch 1\n")
        make(job_dir, status_file, tmp)
        return {"name": "j", "run_dir": str(tmp / "jobs"), "fail_on": "never"}
    return build


def _status_fifo(job_dir, _status_file, _tmp):
    os.mkfifo(str(job_dir / "status.json"))


def _status_huge(job_dir, _status_file, _tmp):
    with open(str(job_dir / "status.json"), "wb") as handle:  # sparse: 3 GiB that takes no room
        handle.truncate(3 << 30)


def _item_status_link_out(_job_dir, status_file, tmp):
    outside = tmp / "elsewhere.json"
    outside.write_text(json.dumps({"item": "000", "exit_code": 1, "started": SECRET, "finished": SECRET,
                                   "sync_error": SECRET, "sync_dest": SECRET}))
    os.symlink(str(outside), str(status_file))


def status_ends(result, _tmp):
    assert result["jobs"][0]["name"] == "j" and SECRET not in json.dumps(result, default=str), result


RECORD_CASES = [
    Case("job_status: a FIFO as status.json ends (held before: job_layout's own non-blocking read)", job_status,
         records_with(_status_fifo), "ok", check=status_ends, timeout=10),
    Case("job_status: a 3 GiB status.json is read to its bound only (held before)", job_status,
         records_with(_status_huge), "ok", check=status_ends, timeout=20),
    Case("job_status: an item's status.json that links out of the job directory is not read", job_status,
         records_with(_item_status_link_out), "ok", check=status_ends, timeout=10),
]


# --- launch resync: the sync sources an item's status names -----------------------------------------------------

def resync(args):
    status, line = launch.resync_item(args["status_file"])
    return {"status": status, "line": line}


def planted_sync_status(tmp):
    """launch's queue.json for item 000, and an items/000/status.json planted next to it that names a directory of
    its choosing as the output to copy, to a destination of its choosing."""
    job_dir, status_file = private_job(tmp)
    (job_dir / "queue.json").write_text(json.dumps(launch_plan.queue_record(
        [{"item": "000", "arg": "a"}], "j", "h", "j", 1, str(tmp / "out"), str(tmp / "durable"), best=["best*"])))
    (tmp / "home" / ".ssh").mkdir(parents=True)
    (tmp / "home" / ".ssh" / "id_rsa").write_text(SECRET)
    status_file.write_text(json.dumps({
        "item": "000", "exit_code": 1, "command_exit_code": 0, "state": "sync_failed", "started": "t",
        "finished": "t", "output_dir": str(tmp / "home" / ".ssh"), "sync_dest": str(tmp / "leak"), "best": ["*"],
        "scratch": [], "synced": [], "unsynced": ["id_rsa"]}))
    return {"status_file": str(status_file)}


def nothing_synced(result, tmp):
    assert not (tmp / "leak").exists() and result["status"]["state"] == "sync_failed", result
    assert "not trusted" in result["status"]["sync_error"], result


RESYNC_CASES = [
    Case("launch resync: a status in items/ naming its own output_dir and sync_dest copies nothing", resync,
         planted_sync_status, "ok", check=nothing_synced, timeout=20),
]


# --- checkpoint: the loadability check of a pulled or synced checkpoint ------------------------------------------

def check_checkpoint(args):
    return {"problems": checkpoint.check_loadable(args["path"], label="best.pt", use_torch=False)}


def _checkpoint_fifo(tmp):
    os.mkfifo(str(tmp / "best.pt"))
    return {"path": str(tmp / "best.pt")}


def not_loadable_fifo(result, _tmp):
    assert [p["code"] for p in result["problems"]] == ["not_loadable"], result
    assert "FIFO" in result["problems"][0]["message"], result


def read_back(args):
    try:
        return {"sha256": sync.read_back(args["path"])}
    except OSError as exc:
        return {"error": str(exc)}


def refused_as_fifo(result, _tmp):
    assert "FIFO" in result.get("error", ""), result


CHECKPOINT_CASES = [
    Case("checked_sync: a FIFO in the copy's place when it is read back is refused, never a hang", read_back,
         _checkpoint_fifo, "ok", check=refused_as_fifo, timeout=10),
    Case("checkpoint: a FIFO in a checkpoint's place is not_loadable, never opened blocking", check_checkpoint,
         _checkpoint_fifo, "ok", check=not_loadable_fifo, timeout=10),
]


# --- sampler: the one file the job's sampler appends to (samples.tsv, in the job directory) ----------------------

def append_sample(args):
    sampler.append(args["path"], "t\titem\n")
    return {}


def samples_with(make):
    def build(tmp):
        job_dir, _status_file = private_job(tmp)
        make(job_dir / sampler.SAMPLES_FILE, tmp)
        return {"path": str(job_dir / sampler.SAMPLES_FILE)}
    return build


def _samples_link_out(path, tmp):
    (tmp / "bashrc").write_text("# the user's own file\n")
    os.symlink(str(tmp / "bashrc"), str(path))


def outside_untouched(_result, tmp):
    assert (tmp / "bashrc").read_text() == "# the user's own file\n"


SAMPLER_CASES = [
    Case("sampler: a FIFO as samples.tsv loses the line, never blocks the sampler", append_sample,
         samples_with(lambda path, _tmp: os.mkfifo(str(path))), "ok", timeout=10),
    Case("sampler: a samples.tsv that links out of the job directory is never appended to", append_sample,
         samples_with(_samples_link_out), "ok", check=outside_untouched, timeout=10),
]


@pytest.mark.parametrize("case", ITEM_LOG_CASES + TREE_CASES + STATE_CASES + RECORD_CASES + CHECKPOINT_CASES
                         + SAMPLER_CASES + RESYNC_CASES, ids=str)
def test_readers(case, hostile):
    hostile(case)


def test_job_layout_reads_through_the_one_reader(tmp_path, monkeypatch):
    """job_layout.read_text is safe_read's, not a copy: a refusal there is a refusal here."""
    from ansible_collections.remote_gpu.trainer.plugins.module_utils import safe_read

    calls = []
    monkeypatch.setattr(safe_read, "read_text", lambda *a, **k: calls.append((a, k)) or "x")
    assert job_layout.read_text(str(tmp_path / "f")) == "x" and calls[0][1]["follow"] is False
