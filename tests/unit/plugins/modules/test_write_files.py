"""write_files on a real filesystem: directories and modes, idempotence, force, links and FIFOs, check and diff mode."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.remote_gpu.trainer.plugins.modules import write_files

RETURN_KEYS = {"changed", "directories", "files", "msg"}


def mode(path):
    return stat.S_IMODE(os.lstat(str(path)).st_mode)


def leftovers(directory):
    return [n for _d, _s, names in os.walk(str(directory)) for n in names if n.endswith(".tmp")]


@pytest.fixture
def job(tmp_path):
    """The arguments of a launch-like write: two directories and three files."""
    root = tmp_path / "home" / ".trainer"
    return root, {
        "directories": [str(root / "jobs" / "train"), str(root / "lib")],
        "files": [
            {"path": str(root / "jobs" / "train" / "queue-abc.sh"), "content": "#!/bin/bash\necho q\n", "mode": "0700",
             "force": False},
            {"path": str(root / "jobs" / "train" / "queue.json"), "content": '{"items": []}\n', "mode": "0600"},
            {"path": str(root / "jobenv.sh"), "content": "# loader\n"},
        ],
    }


def test_creates_the_directories_and_parents_with_the_mode_and_writes_the_files(module_runner, job):
    root, args = job
    old_umask = os.umask(0o077)  # the mode is what the task says, not what the umask lets through
    try:
        failed, result = module_runner(write_files, args)
    finally:
        os.umask(old_umask)
    assert not failed, result["msg"]
    assert RETURN_KEYS <= set(result) and result["changed"] is True
    created = [root.parent, root, root / "jobs", root / "jobs" / "train", root / "lib"]
    assert [d["path"] for d in result["directories"]] == [str(path) for path in created]
    assert all(d["state"] == "created" and mode(d["path"]) == 0o700 for d in result["directories"])
    assert [f["state"] for f in result["files"]] == ["written"] * 3
    assert (root / "jobs" / "train" / "queue-abc.sh").read_text() == "#!/bin/bash\necho q\n"
    assert (mode(root / "jobs" / "train" / "queue-abc.sh"), mode(root / "jobs" / "train" / "queue.json"),
            mode(root / "jobenv.sh")) == (0o700, 0o600, 0o644)
    assert result["msg"] == "5 directories created, 3 written"
    assert leftovers(root.parent) == []


def test_a_second_run_changes_nothing(module_runner, job):
    root, args = job
    module_runner(write_files, args)
    before = {p: os.stat(str(root / p)).st_ino for p in ("jobenv.sh", "jobs/train/queue.json")}
    failed, result = module_runner(write_files, args)
    assert not failed and result["changed"] is False
    assert result["directories"] == []
    assert [f["state"] for f in result["files"]] == ["kept", "unchanged", "unchanged"]
    assert {p: os.stat(str(root / p)).st_ino for p in before} == before  # not even rewritten in place
    assert result["msg"] == "2 unchanged, 1 kept"


def test_a_drifted_mode_is_corrected_without_rewriting_and_an_unlisted_parent_is_left_alone(module_runner, job):
    root, args = job
    module_runner(write_files, args)
    os.chmod(str(root / "jobenv.sh"), 0o666)
    os.chmod(str(root / "lib"), 0o755)
    os.chmod(str(root), 0o755)  # a parent that the task does not list
    inode = os.stat(str(root / "jobenv.sh")).st_ino
    failed, result = module_runner(write_files, args)
    assert not failed and result["changed"] is True
    assert result["directories"] == [{"path": str(root / "lib"), "state": "mode"}]
    assert result["files"][2] == {"path": str(root / "jobenv.sh"), "state": "mode"}
    assert (mode(root / "jobenv.sh"), os.stat(str(root / "jobenv.sh")).st_ino) == (0o644, inode)
    assert (mode(root / "lib"), mode(root)) == (0o700, 0o755)
    assert result["msg"] == "1 directory given its mode, 1 mode, 1 unchanged, 1 kept"


def test_force_false_keeps_an_existing_script_and_true_replaces_changed_text(module_runner, job):
    root, args = job
    module_runner(write_files, args)
    (root / "jobs" / "train" / "queue-abc.sh").write_text("running\n")
    (root / "jobenv.sh").write_text("# edited by hand\n")
    failed, result = module_runner(write_files, args)
    assert not failed
    assert [f["state"] for f in result["files"]] == ["kept", "unchanged", "written"]
    assert (root / "jobs" / "train" / "queue-abc.sh").read_text() == "running\n"
    assert (root / "jobenv.sh").read_text() == "# loader\n"


def test_a_link_at_the_path_is_replaced_and_its_target_never_written(module_runner, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    link = tmp_path / "box" / "queue.json"
    link.parent.mkdir()
    link.symlink_to(outside)
    failed, result = module_runner(write_files, {"files": [{"path": str(link), "content": "{}\n"}]})
    assert not failed and result["files"][0]["state"] == "written"
    assert not link.is_symlink() and link.read_text() == "{}\n"
    assert outside.read_text() == "precious\n"


def test_a_fifo_at_the_path_is_replaced_without_being_opened(module_runner, tmp_path):
    fifo = tmp_path / "jobenv.sh"
    os.mkfifo(str(fifo))
    failed, result = module_runner(write_files, {"files": [{"path": str(fifo), "content": "x\n"}]})
    assert not failed and result["files"][0]["state"] == "written"
    assert stat.S_ISREG(os.lstat(str(fifo)).st_mode) and fifo.read_text() == "x\n"


@pytest.mark.parametrize("args, message", [
    ({"files": [{"path": "relative/queue.json", "content": ""}]}, "files[].path must be an absolute path"),
    ({"directories": ["jobs"]}, "directories[] must be an absolute path"),
    ({"directory_mode": "rwx"}, "directory_mode must be an octal string such as '0644', got 'rwx'"),
    ({"directory_mode": "0999"}, "directory_mode must be an octal string"),
    ({"files": [{"path": "/tmp/x", "content": "", "mode": "420"}]}, None),  # 0420 is a valid (if odd) octal mode
])
def test_bad_arguments_are_refused_with_what_to_write(module_runner, tmp_path, args, message):
    if message is None:
        args["files"][0]["path"] = str(tmp_path / "x")
        failed, result = module_runner(write_files, args)
        assert not failed and mode(tmp_path / "x") == 0o420
        return
    failed, result = module_runner(write_files, args)
    assert failed and message in result["msg"]
    assert result["changed"] is False


def test_a_directory_in_the_way_fails_and_reports_what_was_done_before(module_runner, tmp_path):
    (tmp_path / "queue.json").mkdir()
    failed, result = module_runner(write_files, {
        "directories": [str(tmp_path / "jobs")],
        "files": [{"path": str(tmp_path / "a.sh"), "content": "a\n"},
                  {"path": str(tmp_path / "queue.json"), "content": "{}\n"}]})
    assert failed
    assert result["msg"] == "write_files: %s is a directory: move it away, or write the file elsewhere" % (
        tmp_path / "queue.json")
    assert result["changed"] is True
    assert result["files"] == [{"path": str(tmp_path / "a.sh"), "state": "written"}]
    assert result["directories"] == [{"path": str(tmp_path / "jobs"), "state": "created"}]


def test_a_file_where_a_directory_is_listed_and_a_missing_directory_fail_clearly(module_runner, tmp_path):
    (tmp_path / "code").write_text("not a directory\n")
    failed, result = module_runner(write_files, {"directories": [str(tmp_path / "code" / "src")]})
    assert failed and "%s exists and is not a directory" % (tmp_path / "code") in result["msg"]
    failed, result = module_runner(write_files, {"files": [{"path": str(tmp_path / "nope" / "a"), "content": ""}]})
    assert failed and "the directory of %s does not exist: list it under directories" % (
        tmp_path / "nope" / "a") in result["msg"]
    assert not (tmp_path / "nope").exists()


def test_an_unwritable_directory_is_a_message_not_a_traceback(module_runner, tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes into a mode-0500 directory; the permission check needs another user")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    failed, result = module_runner(write_files, {"files": [{"path": str(locked / "a"), "content": ""}]})
    assert failed and "Permission denied" in result["msg"] and "check the path" in result["msg"]


def test_a_full_disk_is_a_message_and_the_old_file_stays(module_runner, tmpfs, tmp_path):
    with tmpfs(tmp_path / "disk", "size=64k,nr_inodes=50") as disk:
        (disk / "queue.json").write_text("old\n")
        big = {"path": str(disk / "queue.json"), "content": "x" * 200000}
        failed, result = module_runner(write_files, {"files": [big]})
        assert failed
        assert result["msg"].startswith("write_files: ") and "No space left on device" in result["msg"]
        assert (disk / "queue.json").read_text() == "old\n" and leftovers(disk) == []


def test_check_mode_reports_the_same_states_and_writes_nothing(module_runner, job):
    root, args = job
    failed, planned = module_runner(write_files, dict(args, _ansible_check_mode=True))
    assert not failed and planned["changed"] is True
    assert not root.parent.exists()
    failed, done = module_runner(write_files, args)
    assert (planned["directories"], planned["files"]) == (done["directories"], done["files"])
    failed, rerun = module_runner(write_files, dict(args, _ansible_check_mode=True))
    assert rerun["changed"] is False
    # the directory may come from an earlier task, which check mode did not run either
    later = {"files": [{"path": str(root / "new" / "queue.json"), "content": "{}\n"}], "_ansible_check_mode": True}
    failed, result = module_runner(write_files, later)
    assert not failed and result["files"][0]["state"] == "written" and not (root / "new").exists()


def test_diff_mode_shows_the_old_and_the_new_text(module_runner, tmp_path):
    path = tmp_path / "10-network_turbo.sh"
    path.write_text("export A=1\n")
    args = {"files": [{"path": str(path), "content": "export A=2\n"}], "_ansible_diff": True}
    failed, result = module_runner(write_files, args)
    assert not failed
    assert result["diff"] == [{"before_header": str(path), "after_header": str(path), "before": "export A=1\n",
                               "after": "export A=2\n"}]
    failed, result = module_runner(write_files, args)
    assert result["diff"] == [] and result["changed"] is False


def test_a_directory_entry_with_its_own_mode_and_a_link_to_it(module_runner, tmp_path):
    """What launch writes for the environment roles in one run: a 0755 directory among 0700 ones, and a link."""
    runs, pinned = tmp_path / "runs" / "tb", tmp_path / "tf-logs"
    args = {"directories": [str(tmp_path / "private"), {"path": str(runs), "mode": "0755"},
                            {"path": str(pinned), "mode": "0755"}],
            "links": [{"path": str(pinned / "exp"), "src": str(runs)}]}
    failed, planned = module_runner(write_files, dict(args, _ansible_check_mode=True))
    assert not failed, planned["msg"]
    assert planned["changed"] and planned["links"] == [{"path": str(pinned / "exp"), "state": "created"}]
    assert not os.path.lexists(str(pinned))
    failed, result = module_runner(write_files, args)
    assert not failed, result["msg"]
    assert (mode(tmp_path / "private"), mode(tmp_path / "runs"), mode(runs), mode(pinned)) == (0o700, 0o755, 0o755, 0o755)
    assert os.readlink(str(pinned / "exp")) == str(runs) and result["msg"].endswith("1 link created")
    failed, again = module_runner(write_files, args)
    assert not failed and again["changed"] is False and again["links"][0]["state"] == "unchanged"


def test_a_link_elsewhere_is_replaced_only_with_force_and_a_real_file_never(module_runner, tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    os.symlink(str(tmp_path / "old"), str(tmp_path / "run"))
    (tmp_path / "real").write_text("keep\n")
    link = {"path": str(tmp_path / "run"), "src": str(tmp_path / "new")}
    failed, result = module_runner(write_files, {"links": [link]})
    assert failed and "is a link to %s, not to %s" % (tmp_path / "old", tmp_path / "new") in result["msg"]
    assert os.readlink(str(tmp_path / "run")) == str(tmp_path / "old")
    failed, result = module_runner(write_files, {"links": [dict(link, force=True)]})
    assert not failed and result["links"][0]["state"] == "replaced" and result["changed"]
    assert os.readlink(str(tmp_path / "run")) == str(tmp_path / "new") and leftovers(tmp_path) == []
    failed, result = module_runner(write_files, {"links": [{"path": str(tmp_path / "real"), "src": str(tmp_path / "new"),
                                                            "force": True}]})
    assert failed and "exists and is not a link; it is never replaced" in result["msg"]
    assert (tmp_path / "real").read_text() == "keep\n"


@pytest.mark.parametrize("entry, message", [
    ({"path": "/tmp/x", "mode": "755"}, None),
    ({"path": "/tmp/x", "owner": "root"}, "a mapping with the keys path and mode"),
    ({"path": "relative/x"}, "must be an absolute path"),
    ({"path": "/tmp/x", "mode": "0999"}, "must be an octal string"),
    (7, "an entry of directories is a path"),
])
def test_bad_directory_entries_are_refused_with_what_to_write(module_runner, tmp_path, entry, message):
    if message is None:
        entry = dict(entry, path=str(tmp_path / "x"))
    failed, result = module_runner(write_files, {"directories": [entry]})
    if message is None:
        assert not failed and mode(tmp_path / "x") == 0o755
    else:
        assert failed and message in result["msg"] and "Traceback" not in result["msg"]


def test_state_absent_removes_a_file_or_link_and_a_missing_one_is_no_change(module_runner, tmp_path):
    (tmp_path / "frag.sh").write_text("export A=1\n")
    os.symlink(str(tmp_path / "nowhere"), str(tmp_path / "link"))
    args = {"files": [{"path": str(tmp_path / "frag.sh"), "state": "absent"},
                      {"path": str(tmp_path / "link"), "state": "absent"}]}
    failed, planned = module_runner(write_files, dict(args, _ansible_check_mode=True))
    assert not failed and planned["changed"] and (tmp_path / "frag.sh").exists()
    failed, result = module_runner(write_files, args)
    assert not failed and [f["state"] for f in result["files"]] == ["removed", "removed"] and result["changed"]
    assert not os.path.lexists(str(tmp_path / "frag.sh")) and not os.path.lexists(str(tmp_path / "link"))
    failed, again = module_runner(write_files, args)
    assert not failed and again["changed"] is False and [f["state"] for f in again["files"]] == ["absent", "absent"]
    failed, result = module_runner(write_files, {"files": [{"path": str(tmp_path / "x")}]})
    assert failed and "files[].content is required" in result["msg"]
