"""push_code's run() on the controller, over the local transport (rsync between two local directories)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import subprocess
from unittest.mock import MagicMock

import pytest
import yaml

from ansible_collections.remote_gpu.trainer.plugins.action import push_code
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import rsync
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.launch_scripts import LAUNCH_CLI


def run_here(cmd, in_data=None, sudoable=True):
    """The connection's exec_command, on this machine: the shell line as a box's sh would run it."""
    proc = subprocess.run(["/bin/sh", "-c", cmd], input=in_data, capture_output=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def run_push(args, check_mode=False, transport="local", options=None):
    # A mocked task, connection and play context, as Ansible's own unit tests of action plugins use; what the action
    # runs on the box (the record's shell line) runs on this machine.
    connection = MagicMock()
    connection.transport = transport
    connection.become = None
    connection.allow_executable = False
    connection.exec_command.side_effect = run_here
    connection._shell.tmpdir = None  # pylint: disable=protected-access
    connection.get_option.side_effect = dict(options or {}).get
    task = MagicMock()
    task.args = dict(args)
    task.async_val = 0
    task.check_mode = check_mode
    task.action = "remote_gpu.trainer.push_code"
    action = push_code.ActionModule(task=task, connection=connection, play_context=MagicMock(), loader=MagicMock(),
                                    templar=MagicMock(), shared_loader_obj=None)
    action._load_name = task.action  # pylint: disable=protected-access
    return action.run(task_vars={"inventory_hostname": "box1"})


@pytest.fixture
def src(tmp_path):
    root = tmp_path / "src"
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("print(1)\n")
    (root / "pkg" / "m.py").write_text("x = 1\n")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("not a real repository\n")
    return root


def test_push_transfers_then_reports_unchanged_and_deletes_after(src, tmp_path):
    dest = tmp_path / "box" / "code"
    (tmp_path / "box").mkdir()
    first = run_push({"src": str(src), "dest": str(dest)})
    assert first["changed"] is True and not first.get("failed"), first
    assert (dest / "train.py").read_text() == "print(1)\n" and (dest / "pkg" / "m.py").exists()
    assert not (dest / ".git").exists()  # the default exclude
    assert any(line.endswith("train.py") for line in first["changes"])
    again = run_push({"src": str(src), "dest": str(dest)})
    assert again["changed"] is False and again["changes"] == [] and "up to date" in again["msg"]
    (src / "pkg" / "m.py").unlink()
    third = run_push({"src": str(src), "dest": str(dest)})
    assert third["changed"] is True and not (dest / "pkg" / "m.py").exists()
    assert any("deleting" in line for line in third["changes"])


def test_check_mode_reports_and_transfers_nothing(src, tmp_path):
    dest = tmp_path / "box" / "code"
    dest.mkdir(parents=True)
    result = run_push({"src": str(src), "dest": str(dest)}, check_mode=True)
    assert result["changed"] is True and result["msg"].startswith("would push") and result["changes"]
    assert os.listdir(str(dest)) == []
    # a destination whose parent is missing: the dry run cannot compare, and still nothing is written
    result = run_push({"src": str(src), "dest": str(tmp_path / "absent" / "code")}, check_mode=True)
    assert result["changed"] is True and not result.get("failed") and "would push" in result["msg"]
    assert not (tmp_path / "absent").exists()


def test_the_helpers_go_to_lib_dest_only_those_named(src, tmp_path):
    (tmp_path / "box" / "code").mkdir(parents=True)
    lib = tmp_path / "box" / "lib"
    lib.mkdir()
    args = {"src": str(src), "dest": str(tmp_path / "box" / "code"), "lib_dest": str(lib),
            "lib_files": ["launch.py", "atomic.py"]}
    result = run_push(args)
    assert sorted(os.listdir(str(lib))) == ["atomic.py", "launch.py"]
    assert oct(os.stat(str(lib / "launch.py")).st_mode & 0o777) == "0o600"
    (lib / "__pycache__").mkdir()  # Python writes beside the helpers; that is no change to push
    again = run_push(args)
    assert result["changed"] is True and again["changed"] is False, again["changes"]
    bad = run_push(dict(args, lib_files=["nope.py"]))
    assert bad["failed"] and "nope.py" in bad["msg"]


def test_git_state_is_recorded(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(git + ["init", "-q"], check=True)
    (repo / "a").write_text("a")
    assert push_code.git_state(str(repo)) == (None, True, ["a"])  # no commit yet: the dirty state is still known
    subprocess.run(git + ["add", "a"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "x"], check=True)
    head = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert push_code.git_state(str(repo)) == (head, False, [])
    (repo / "b").write_text("b")
    (repo / "a").write_text("changed")
    assert push_code.git_state(str(repo)) == (head, True, ["a", "b"])
    assert push_code.git_state(str(tmp_path)) == (None, None, None)
    # a pushed subdirectory: only its own changes, relative to it, and never what the push leaves out
    (repo / "sub" / "pulls").mkdir(parents=True)
    (repo / "sub" / "pulls" / "x").write_text("pulled")
    (repo / "sub" / "t.py").write_text("t")
    assert push_code.git_state(str(repo / "sub"), exclude=["/pulls/"]) == (head, True, ["t.py"])


def _repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir(parents=True)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(git + ["init", "-q"], check=True)
    (repo / "train.sh").write_text("echo hi\n")
    subprocess.run(git + ["add", "train.sh"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "x"], check=True)
    return repo


def test_a_dirty_tree_is_pushed_with_a_warning_naming_its_files(tmp_path):
    repo = _repo(tmp_path)
    (repo / "train.sh").write_text("echo changed\n")
    (tmp_path / "box").mkdir()
    result = run_push({"src": str(repo), "dest": str(tmp_path / "box" / "code")})
    assert not result.get("failed"), result
    assert (result["dirty"], result["dirty_files"]) == (True, ["train.sh"])
    (warning,) = result["warnings"]
    assert "uncommitted changes in 1 file(s): train.sh" in warning and "launch_require_clean" in warning
    assert (tmp_path / "box" / "code" / "train.sh").read_text() == "echo changed\n"


def test_require_clean_refuses_a_dirty_tree_before_anything_is_pushed(tmp_path):
    repo = _repo(tmp_path)
    (repo / "notes.txt").write_text("n")
    result = run_push({"src": str(repo), "dest": str(tmp_path / "box" / "code"), "require_clean": True})
    assert result["failed"] and "notes.txt" in result["msg"] and "Nothing was pushed" in result["msg"]
    assert not (tmp_path / "box").exists()
    clean = _repo(tmp_path / "other")
    (tmp_path / "box2").mkdir()
    result = run_push({"src": str(clean), "dest": str(tmp_path / "box2" / "code"), "require_clean": True})
    assert not result.get("failed") and result["dirty_files"] == [], result


def test_a_script_with_crlf_line_endings_is_refused_before_anything_is_pushed(src, tmp_path):
    (src / "run.sh").write_bytes(b"#!/bin/bash\r\necho hi\r\n")
    result = run_push({"src": str(src), "dest": str(tmp_path / "box" / "code")})
    assert result["failed"] and result["crlf_files"] == ["run.sh"]
    assert "CRLF" in result["msg"] and "$'\\r': command not found" in result["msg"]
    assert not (tmp_path / "box").exists()


def test_missing_src_fails_with_what_to_do(tmp_path):
    result = run_push({"src": str(tmp_path / "absent"), "dest": "/x"})
    assert result["failed"] and "launch_src" in result["msg"]


def test_argv_uses_the_connections_ssh_settings_and_the_launch_flags():
    target = rsync.Target(address="10.0.0.5", user="root", port=2222, private_key_file="/k", ssh_args=["-o", "A=b"])
    argv = push_code.code_argv({"src": "/src/", "dest": "/data/code", "exclude": [".git", "data/"]}, target, False)
    assert argv[:5] == ["rsync", "-a", "--partial", "--delete-after", "--itemize-changes"]
    assert "--exclude=.git" in argv and "--exclude=data/" in argv and "--dry-run" not in argv
    assert argv[argv.index("-e") + 1] == "ssh -o BatchMode=yes -p 2222 -i /k -o A=b"
    assert argv[-3:] == ["--", "/src/", "root@10.0.0.5:/data/code/"]
    assert "--dry-run" in push_code.code_argv({"src": "/s", "dest": "/d", "exclude": []}, target, True)


@pytest.mark.parametrize("args, message", [
    ({"dest": ""}, "dest is empty"),
    ({"dest": "/"}, "root of the filesystem"),
    ({"dest": "/root"}, "'/root' is a top-level directory"),
    ({"dest": "/root/./"}, "top-level directory"),
    ({"dest": "code"}, "not an absolute path"),
    ({"dest": "/srv/code", "lib_dest": "--log-file=/x"}, "lib_dest '--log-file=/x' is not an absolute path"),
    ({"dest": "/srv/code", "timeout": 0}, "timeout must be a positive"),
])
def test_check_args_refuses_before_rsync(args, message):
    full = dict({"lib_dest": "", "timeout": 3600}, **args)
    with pytest.raises(rsync.RsyncError, match=re.escape(message)):
        push_code.check_args(full)


def test_check_args_passes_a_plain_push():
    push_code.check_args({"dest": "/root/autodl-tmp/code/train", "lib_dest": "", "timeout": 60})


def test_overlap_on_the_controller(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "c").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "a")
    assert push_code.overlap(str(tmp_path / "a"), str(tmp_path / "a" / "b"))
    assert push_code.overlap(str(tmp_path / "a" / "b"), str(tmp_path / "a"))
    assert push_code.overlap(str(tmp_path / "a"), str(tmp_path / "link"))
    assert not push_code.overlap(str(tmp_path / "a"), str(tmp_path / "c"))
    assert not push_code.overlap(str(tmp_path / "a"), str(tmp_path / "ab"))


def test_a_dest_over_its_own_src_is_refused_and_nothing_deleted(src, tmp_path):
    result = run_push({"src": str(src), "dest": str(src.parent)})
    assert result["failed"] and "one holds the other" in result["msg"]
    assert (src / "train.py").exists()


# what the launch role ships beside the code (launch.py and everything it imports), as the role pushes it
LAUNCH_LIB = yaml.safe_load((pathlib.Path(__file__).resolve().parents[4] / "roles" / "launch" / "vars" /
                             "main.yml").read_text())["_launch_lib_files"]


def record_args(src, tmp_path, **record):
    box = tmp_path / "box"
    (box / "code").mkdir(parents=True, exist_ok=True)
    (box / "job").mkdir(exist_ok=True)
    lib = box / "lib"
    (lib / "ansible_collections" / "remote_gpu" / "trainer" / "plugins" / "module_utils").mkdir(parents=True,
                                                                                                exist_ok=True)
    return {"src": str(src), "dest": str(box / "code"), "lib_files": LAUNCH_LIB,
            "lib_dest": str(lib / "ansible_collections" / "remote_gpu" / "trainer" / "plugins" / "module_utils"),
            "record": dict({"path": str(box / "job" / "code.json"), "interpreter": "/usr/bin/python3",
                            "python": "/usr/bin/python3", "pythonpath": str(lib)}, **record)}


def test_the_record_follows_the_push_and_is_rewritten_only_when_it_changes(src, tmp_path):
    from ansible_collections.remote_gpu.trainer.plugins.module_utils.launch import tree_checksum

    args = record_args(src, tmp_path)
    first = run_push(args)
    assert not first.get("failed") and first["changed"] is True, first
    code = first["code"]
    # the pushed tree's checksum, taken on the box (launch's helpers pushed with it), and the controller's git state
    assert code["tree_sha256"] == tree_checksum(args["dest"])["tree_sha256"] and code["files"] == 2, code
    assert (code["commit"], code["dirty"], code["src"], code["dest"]) == (None, None, str(src), args["dest"])
    assert code["torch"]["python"] == "/usr/bin/python3" and "changed" not in code
    assert json.loads((tmp_path / "box" / "job" / "code.json").read_text()) == code
    again = run_push(args)
    assert again["changed"] is False and again["code"] == code, again
    (src / "train.py").write_text("print(22)\n")  # another size: rsync's quick check may see the same second
    third = run_push(args)
    assert third["changed"] is True and third["code"]["tree_sha256"] != code["tree_sha256"]
    assert json.loads((tmp_path / "box" / "job" / "code.json").read_text()) == third["code"]


def test_check_mode_records_nothing(src, tmp_path):
    result = run_push(record_args(src, tmp_path), check_mode=True)
    assert result["code"] is None and not result.get("failed"), result
    assert not (tmp_path / "box" / "job" / "code.json").exists()


def test_a_record_that_cannot_be_written_fails_with_what_happened_and_what_to_do(src, tmp_path):
    result = run_push(record_args(src, tmp_path, interpreter="/nonexistent/python3"))
    assert result["failed"] and result["code"] is None, result
    assert re.match(r"pushed \d+ change\(s\) to ", result["msg"]) and "recording it in %s failed (exit code 127" % (
        tmp_path / "box" / "job" / "code.json") in result["msg"] and "run the launch again" in result["msg"]
    # the code did land: the next run only records it
    again = run_push(record_args(src, tmp_path))
    assert again["changes"] == [] and again["changed"] is True and again["code"]["files"] == 2, again


def test_the_record_needs_the_helpers_and_safe_paths(src, tmp_path):
    args = record_args(src, tmp_path)
    result = run_push(dict(args, lib_dest=""))
    assert result["failed"] and "record needs lib_dest" in result["msg"], result
    result = run_push(record_args(src, tmp_path, path="job/code.json"))
    assert result["failed"] and "record.path" in result["msg"], result


def test_the_record_command_quotes_every_word():
    args = {"src": "/home/me/my proj", "dest": "/root/code/$(touch x)",
            "record": {"path": "/root/job/code.json", "interpreter": "/usr/bin/python3",
                       "python": "/opt/env/bin/python", "pythonpath": "/root/.trainer/lib; rm -rf /"}}
    line = push_code.record_command(args, None, True, ["a b.py"])
    words = shlex.split(line)
    assert words[:3] == ["LC_ALL=C", "LANG=C", "PYTHONPATH=/root/.trainer/lib; rm -rf /"]
    assert words[3:] == ["/usr/bin/python3", "-m", LAUNCH_CLI, "code", "--root", "/root/code/$(touch x)",
                         "--out", "/root/job/code.json", "--commit", "", "--dirty", "true", "--dirty-files",
                         '["a b.py"]', "--src", "/home/me/my proj", "--python", "/opt/env/bin/python"]
