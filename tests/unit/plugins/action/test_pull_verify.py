"""pull_verify's run() on the controller: verify a local copy (pull=false) or pull it with rsync over the local
transport, against the box's manifest; PULL_VERIFIED.json is written only for a copy that matches."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil

import pytest

from ansible.errors import AnsibleActionFail

from ansible_collections.remote_gpu.trainer.plugins.action import pull_verify
from ansible_collections.remote_gpu.trainer.plugins.action import teardown_gate
from ansible_collections.remote_gpu.trainer.plugins.module_utils import manifest as mf
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import teardown
from ansible_collections.remote_gpu.trainer.plugins.modules import pull_manifest

from controller_actions import make_connection, run_action

HOST, RUN = "box1", "exp42"
FILES = {"metrics.json": b'{"acc": 0.9}\n', "ckpt/notes.txt": b"epoch 7\n", "log.txt": b"L" * 3000}


def write_tree(root, files):
    for rel, data in files.items():
        path = root.joinpath(*rel.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


@pytest.fixture
def box(tmp_path):
    """A result root standing in for the box's, and its manifest beside it as pull_manifest writes it."""
    root = tmp_path / "box" / "runs" / RUN
    write_tree(root, FILES)
    data = mf.manifest_bytes(dict(mf.build_manifest(str(root), sorted(FILES)), run_id=RUN))
    manifest_path = root.parent / ("PULL_MANIFEST.%s.json" % RUN)
    manifest_path.write_bytes(data)
    return {"root": root, "manifest_path": manifest_path, "sha": hashlib.sha256(data).hexdigest()}


@pytest.fixture
def pulls(tmp_path):
    return tmp_path / "pulls"


def pull_dir(pulls):
    return pulls / HOST / RUN


def copy_to_controller(box, pulls):
    """What an earlier pull left on the controller: data/ and PULL_MANIFEST.json."""
    dest = pull_dir(pulls)
    shutil.copytree(str(box["root"]), str(dest / teardown.DATA_DIR))
    shutil.copyfile(str(box["manifest_path"]), str(dest / teardown.MANIFEST_NAME))
    return dest


def verify(box, pulls, check_mode=False, **overrides):
    args = {"src": str(box["root"]), "manifest_path": str(box["manifest_path"]), "manifest_sha256": box["sha"],
            "run_id": RUN, "pull_root": str(pulls), "pull": False, "use_torch": False}
    args.update(overrides)
    return run_action(pull_verify.ActionModule, args, host=HOST, check_mode=check_mode)


def verified_record(pulls):
    return json.loads((pull_dir(pulls) / teardown.VERIFIED_NAME).read_text())


def test_a_matching_copy_is_verified_and_opens_the_gate(box, pulls):
    dest = copy_to_controller(box, pulls)
    result = verify(box, pulls)
    assert not result.get("failed"), result["msg"]
    assert result["verified"] is True and result["changed"] is True and result["problems"] == []
    assert result["pull_dir"] == str(dest) and result["verified_path"] == str(dest / teardown.VERIFIED_NAME)
    assert result["manifest_sha256"] == box["sha"] and result["file_count"] == 3
    assert result["total_bytes"] == sum(len(data) for data in FILES.values())
    record = verified_record(pulls)
    assert record["host"] == HOST and record["run_id"] == RUN and record["manifest_sha256"] == box["sha"]
    assert [f["path"] for f in record["files"]] == ["ckpt/notes.txt", "log.txt", "metrics.json"]
    assert record["problems"] == [] and record["total_bytes"] == result["total_bytes"] and record["verified_at"]
    assert [n for n in os.listdir(str(dest)) if n.endswith(".tmp")] == []

    gate = run_action(teardown_gate.ActionModule, {"run_id": RUN, "pull_root": str(pulls),
                                                   "manifest_sha256": box["sha"], "approve": HOST}, host=HOST)
    assert gate["open"] is True, gate["msg"]


@pytest.mark.parametrize("damage, code", [
    (lambda data: (data / "metrics.json").write_bytes(b'{"acc": 0.1}\n'), "sha256_mismatch"),
    (lambda data: (data / "log.txt").write_bytes(b"L" * 2999), "size_mismatch"),
    (lambda data: (data / "ckpt" / "notes.txt").unlink(), "missing"),
    (lambda data: (data / "stray.bin").write_bytes(b"x"), "extra"),
])
def test_a_mismatch_removes_the_older_verified_file_and_fails_with_the_problems(box, pulls, damage, code):
    dest = copy_to_controller(box, pulls)
    assert not verify(box, pulls).get("failed")
    assert (dest / teardown.VERIFIED_NAME).exists()
    damage(dest / teardown.DATA_DIR)
    result = verify(box, pulls)
    assert result["failed"] is True and result["verified"] is False
    assert [p["code"] for p in result["problems"]] == [code]
    assert "does not match the box" in result["msg"] and code in result["msg"]
    assert "Nothing was marked verified" in result["msg"]
    assert not (dest / teardown.VERIFIED_NAME).exists()


def test_extra_files_pass_when_allowed(box, pulls):
    dest = copy_to_controller(box, pulls)
    (dest / teardown.DATA_DIR / "stray.bin").write_bytes(b"x")
    result = verify(box, pulls, allow_extra=True)
    assert result["verified"] is True and not result.get("failed")


def assert_refused(result, dest, fragment):
    """The pull failed, its message says why, and nothing was marked verified."""
    assert result["failed"] is True and fragment in result["msg"], result["msg"]
    assert not (dest / teardown.VERIFIED_NAME).exists()


def test_a_manifest_that_differs_from_the_boxs_fails_and_marks_nothing(box, pulls):
    dest = copy_to_controller(box, pulls)
    verify(box, pulls)
    result = verify(box, pulls, manifest_sha256="c" * 64)
    assert_refused(result, dest, "differs from the box's")


def test_a_missing_or_broken_manifest_fails_and_says_which(box, pulls):
    dest = copy_to_controller(box, pulls)
    (dest / teardown.MANIFEST_NAME).unlink()
    result = verify(box, pulls)
    assert result["failed"] is True and result["msg"].startswith("cannot read the pulled manifest")
    (dest / teardown.MANIFEST_NAME).write_bytes(b"{}")
    result = verify(box, pulls, manifest_sha256=hashlib.sha256(b"{}").hexdigest())
    assert result["failed"] is True and result["msg"].startswith("the pulled manifest is not valid")
    assert not (dest / teardown.VERIFIED_NAME).exists()


def test_check_mode_reports_the_plan_and_writes_nothing(box, pulls):
    result = verify(box, pulls, check_mode=True, pull=True)
    assert result["changed"] is True and not result.get("failed") and result["verified"] is False
    assert result["msg"].startswith("would pull box1:%s into %s" % (box["root"], pull_dir(pulls) / "data"))
    assert not pulls.exists()


def test_pull_over_the_local_transport_uses_rsync_and_verifies(box, pulls):
    if shutil.which("rsync") is None:
        pytest.skip("rsync is not installed")
    result = verify(box, pulls, pull=True)
    assert not result.get("failed"), result["msg"]
    assert result["verified"] is True
    data = pull_dir(pulls) / teardown.DATA_DIR
    assert (data / "log.txt").read_bytes() == FILES["log.txt"]
    assert (pull_dir(pulls) / teardown.MANIFEST_NAME).read_bytes() == box["manifest_path"].read_bytes()
    # a stale file from an earlier pull is deleted by the next one (--delete), so the roster stays exact
    (data / "stale.bin").write_bytes(b"old")
    assert verify(box, pulls, pull=True)["verified"] is True and not (data / "stale.bin").exists()


def test_a_failed_rsync_fails_with_what_to_do(box, pulls, monkeypatch):
    calls = []

    def failing(argv, timeout, what):
        """The manifest arrives (it is pulled first, and checked), the result root's pull fails."""
        calls.append((argv, timeout))
        if argv[-1].endswith(teardown.MANIFEST_NAME):
            shutil.copyfile(str(box["manifest_path"]), argv[-1])
            return
        raise pull_verify.rsync.RsyncError("rsync of %s failed (exit 23): gone. Run again" % what)
    monkeypatch.setattr(pull_verify.rsync, "run_rsync", failing)
    connection = make_connection("ssh", {"host": "10.0.0.5", "remote_user": "root", "port": 2222})
    result = run_action(pull_verify.ActionModule, {
        "src": "/root/runs/exp42/", "manifest_path": "/root/runs/PULL_MANIFEST.exp42.json",
        "manifest_sha256": box["sha"], "run_id": RUN, "pull_root": str(pulls), "timeout": 60}, host=HOST,
        connection=connection)
    assert result["failed"] is True and "exit 23" in result["msg"]
    assert calls[0][0][-2:] == ["root@10.0.0.5:/root/runs/PULL_MANIFEST.exp42.json",
                                str(pull_dir(pulls) / teardown.MANIFEST_NAME)]
    argv, timeout = calls[1]
    assert timeout == 60 and argv[-2:] == ["root@10.0.0.5:/root/runs/exp42/", str(pull_dir(pulls) / "data") + "/"]
    assert "--delete" in argv and "--partial" in argv
    # nothing of the box but files and links inside the tree reaches the controller
    assert {"--no-devices", "--no-specials", "--safe-links"} <= set(argv)
    assert argv[argv.index("-e") + 1] == "ssh -o BatchMode=yes -p 2222"


@pytest.mark.parametrize("args, message", [
    ({"pul": False}, "Invalid options for remote_gpu.trainer.action: pul"),
    ({"run_id": None}, "run_id"),
    ({"pull": "maybe"}, "pull"),
    ({"timeout": "soon"}, "timeout"),
])
def test_bad_arguments_are_refused(box, pulls, args, message):
    full = {"src": str(box["root"]), "manifest_path": str(box["manifest_path"]), "manifest_sha256": box["sha"],
            "run_id": RUN, "pull_root": str(pulls)}
    full.update(args)
    full = dict((key, value) for key, value in full.items() if value is not None)
    with pytest.raises(AnsibleActionFail, match=message):
        run_action(pull_verify.ActionModule, full, host=HOST)
    assert not pulls.exists()


def test_a_run_id_that_cannot_name_a_directory_fails(box, pulls):
    result = verify(box, pulls, run_id="../up")
    assert result["failed"] is True and "cannot name a directory" in result["msg"]
    assert not pulls.exists()


def test_the_argument_spec_comes_from_the_documentation():
    spec = pull_verify.ActionModule.SPEC
    assert set(spec) == {"src", "manifest_path", "manifest_sha256", "run_id", "pull_root", "allow_extra", "pull",
                         "use_torch", "timeout"}
    assert spec["pull"] == {"type": "bool", "default": True}
    assert spec["src"] == {"type": "str"}
    assert pull_verify.ActionModule._VALID_ARGS == frozenset(spec)  # pylint: disable=protected-access


# --------------------------------------------------------------------------- links, empty manifests, hostile paths


def safetensors_bytes(count):
    """A valid safetensors file of one U8 tensor of ``count`` bytes."""
    header = json.dumps({"w": {"dtype": "U8", "shape": [count], "data_offsets": [0, count]}}).encode()
    return len(header).to_bytes(8, "little") + header + b"E" * count


EPOCH = safetensors_bytes(5000)


@pytest.fixture
def linked_box(tmp_path):
    """A result root where best.safetensors -> epoch_10.safetensors and latest -> ckpt (links inside the root),
    with its manifest."""
    root = tmp_path / "box" / "runs" / RUN
    write_tree(root, {"epoch_10.safetensors": EPOCH, "ckpt/notes.txt": b"n\n"})
    (root / "best.safetensors").symlink_to("epoch_10.safetensors")
    (root / "latest").symlink_to("ckpt", target_is_directory=True)
    roster = ["best.safetensors", "epoch_10.safetensors", "latest/notes.txt"]
    data = mf.manifest_bytes(dict(mf.build_manifest(str(root), roster), run_id=RUN))
    manifest_path = root.parent / ("PULL_MANIFEST.%s.json" % RUN)
    manifest_path.write_bytes(data)
    return {"root": root, "manifest_path": manifest_path, "sha": hashlib.sha256(data).hexdigest()}


def copy_keeping_links(box, pulls):
    """What rsync -a leaves on the controller: the links arrive as links."""
    dest = pull_dir(pulls)
    shutil.copytree(str(box["root"]), str(dest / teardown.DATA_DIR), symlinks=True)
    shutil.copyfile(str(box["manifest_path"]), str(dest / teardown.MANIFEST_NAME))
    return dest


def assert_real_files(data, rels):
    for rel in rels:
        assert mf.link_in_path(str(data), rel) is None, rel
        assert os.path.isfile(str(data / rel))


def test_links_inside_the_root_are_pulled_as_real_files_and_verified(linked_box, pulls):
    dest = copy_keeping_links(linked_box, pulls)
    result = verify(linked_box, pulls, allow_extra=True)
    assert not result.get("failed"), result["msg"]
    assert result["verified"] is True and result["file_count"] == 3
    assert_real_files(dest / teardown.DATA_DIR, ["best.safetensors", "epoch_10.safetensors", "latest/notes.txt"])
    assert (dest / teardown.DATA_DIR / "best.safetensors").read_bytes() == EPOCH


def test_links_inside_the_root_over_rsync_end_to_end(linked_box, pulls):
    if shutil.which("rsync") is None:
        pytest.skip("rsync is not installed")
    result = verify(linked_box, pulls, pull=True, allow_extra=True)
    assert not result.get("failed"), result["msg"]
    data = pull_dir(pulls) / teardown.DATA_DIR
    assert_real_files(data, ["best.safetensors", "epoch_10.safetensors", "latest/notes.txt"])
    # the next pull puts the links back; they are made real again and the pull verifies again
    assert verify(linked_box, pulls, pull=True, allow_extra=True)["verified"] is True
    assert_real_files(data, ["best.safetensors", "latest/notes.txt"])


@pytest.mark.parametrize("retarget", ["outside", "nowhere"])
def test_a_roster_link_that_leaves_the_pull_or_dangles_is_never_verified(linked_box, pulls, tmp_path, retarget):
    dest = copy_keeping_links(linked_box, pulls)
    assert not verify(linked_box, pulls, allow_extra=True).get("failed")   # an older verification exists
    best = dest / teardown.DATA_DIR / "best.safetensors"
    best.unlink()
    if retarget == "outside":
        (tmp_path / "controller-file").write_bytes(EPOCH)      # even the right bytes do not count
        best.symlink_to(tmp_path / "controller-file")
    else:
        best.symlink_to("gone.safetensors")
    result = verify(linked_box, pulls, allow_extra=True)
    assert result["failed"] is True and result["verified"] is False
    assert [(p["code"], p["path"]) for p in result["problems"]] == [("symlink", "best.safetensors")]
    assert not (dest / teardown.VERIFIED_NAME).exists()
    gate = run_action(teardown_gate.ActionModule, {"run_id": RUN, "pull_root": str(pulls),
                                                   "manifest_sha256": linked_box["sha"], "approve": HOST}, host=HOST)
    assert gate["open"] is False and "no_pull_verified" in [r["code"] for r in gate["refusals"]]


def test_a_manifest_with_no_files_is_never_verified(box, pulls):
    dest = copy_to_controller(box, pulls)
    empty = b'{"files": [], "root": "/r", "total_bytes": 0, "version": 1}\n'
    (dest / teardown.MANIFEST_NAME).write_bytes(empty)
    result = verify(box, pulls, manifest_sha256=hashlib.sha256(empty).hexdigest(), allow_extra=True)
    assert_refused(result, dest, "lists no files")


def test_a_verified_file_that_is_a_directory_fails_with_what_to_remove(box, pulls):
    dest = copy_to_controller(box, pulls)
    (dest / teardown.VERIFIED_NAME).mkdir()
    result = verify(box, pulls)
    assert result["failed"] is True and "is a directory" in result["msg"] and "remove it" in result["msg"]


def test_a_data_path_that_is_a_file_fails_with_what_to_remove(box, pulls):
    pull_dir(pulls).mkdir(parents=True)
    (pull_dir(pulls) / teardown.DATA_DIR).write_bytes(b"not a directory")
    result = verify(box, pulls)
    assert result["failed"] is True and "is not a directory" in result["msg"]


def test_a_pull_root_that_cannot_be_written_fails_cleanly(box, pulls, monkeypatch):
    def read_only(*_args, **_kwargs):
        raise OSError(30, "Read-only file system")
    monkeypatch.setattr(pull_verify.os, "makedirs", read_only)
    result = verify(box, pulls)
    assert result["failed"] is True and "Read-only file system" in result["msg"]
    assert "writable pull_root" in result["msg"]


def test_a_pulled_manifest_that_is_a_fifo_fails_without_hanging(box, pulls):
    dest = copy_to_controller(box, pulls)
    (dest / teardown.MANIFEST_NAME).unlink()
    os.mkfifo(str(dest / teardown.MANIFEST_NAME))
    result = verify(box, pulls)
    assert result["failed"] is True and result["msg"].startswith("cannot read the pulled manifest")


def test_pull_manifest_then_pull_verify_with_links_in_and_out_of_the_root(module_runner, tmp_path, pulls):
    """Both sides for real: pull_manifest's main() on the box root, then pull_verify (rsync over the local transport
    when installed, else the copy rsync -a leaves)."""
    root = tmp_path / "box" / RUN
    write_tree(root, {"epoch_10.safetensors": EPOCH})
    (root / "best.safetensors").symlink_to("epoch_10.safetensors")
    failed, made = module_runner(pull_manifest, {"root": str(root), "roster": ["best.safetensors"], "run_id": RUN})
    assert not failed, made["msg"]
    box_args = {"root": root, "manifest_path": pathlib.Path(made["manifest_path"]), "sha": made["sha256"]}
    rsync_there = shutil.which("rsync") is not None
    if not rsync_there:
        copy_keeping_links(box_args, pulls)
    result = verify(box_args, pulls, pull=rsync_there, allow_extra=True)
    assert result["verified"] is True, result["msg"]
    assert_real_files(pull_dir(pulls) / teardown.DATA_DIR, ["best.safetensors"])

    (tmp_path / "secret").write_bytes(b"key")
    (root / "leak.safetensors").symlink_to(tmp_path / "secret")
    failed, made = module_runner(pull_manifest, {"root": str(root), "roster": ["best.safetensors", "leak.safetensors"]})
    assert failed and "leak.safetensors" in made["msg"] and "leads outside the root" in made["msg"]
    assert made["sha256"] == ""   # the playbook skips pull_verify, and the gate stays closed (manifest_unknown)
