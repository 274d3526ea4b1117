"""What push_code checks before the code leaves the controller (issue 34, item 7)."""
from __future__ import annotations

import os

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import code_check


def test_porcelain_files_lists_each_path_once_and_a_renames_new_name():
    out = b" M train.py\0?? notes/\0R  new.sh\0old.sh\0A  a b.txt\0 D gone.py\0"
    assert code_check.porcelain_files(out) == ["a b.txt", "gone.py", "new.sh", "notes/", "train.py"]
    assert code_check.porcelain_files("") == []


def test_command_files_are_the_relative_words_of_the_command():
    # candidates only: scripts() keeps those that are files of the code directory
    assert code_check.command_files("bash train.sh --lr 1e-3") == ["bash", "train.sh", "1e-3"]
    assert code_check.command_files("python ./src/train.py -c $CFG > log 2>&1") == ["python", "src/train.py", "log"]
    assert code_check.command_files("/usr/bin/env X=1 ../up.sh ~/x.sh") == []
    assert code_check.command_files("bash 'unterminated") == []


def test_scripts_are_every_sh_file_and_the_files_the_command_names(tmp_path):
    for rel in ("train.sh", "tools/env.sh", "src/train.py", ".git/hooks/pre.sh", "data/big/x.sh", "README.md"):
        os.makedirs(os.path.dirname(str(tmp_path / rel)), exist_ok=True)
        (tmp_path / rel).write_text("x\n")
    assert code_check.scripts(str(tmp_path), "python src/train.py", exclude=[".git", "/data/"]) == [
        "src/train.py", "tools/env.sh", "train.sh"]


def test_crlf_files_reads_only_regular_files(tmp_path):
    (tmp_path / "dos.sh").write_bytes(b"#!/bin/bash\r\necho hi\r\n")
    (tmp_path / "unix.sh").write_bytes(b"#!/bin/bash\necho hi\n")
    (tmp_path / "cr-only.sh").write_bytes(b"echo 'a\rb'\n")
    os.symlink(str(tmp_path / "dos.sh"), str(tmp_path / "link.sh"))
    os.mkfifo(str(tmp_path / "fifo.sh"))
    rels = ["dos.sh", "unix.sh", "cr-only.sh", "link.sh", "fifo.sh", "missing.sh"]
    assert code_check.crlf_files(str(tmp_path), rels) == ["dos.sh"]


def test_the_messages_say_what_is_wrong_and_what_to_do():
    message = code_check.crlf_message("/src", ["train.sh"])
    assert "train.sh has CRLF" in message and "$'\\r': command not found" in message and "sed -i" in message
    assert "Nothing was pushed" in code_check.dirty_message("/src", ["a"], True)
    many = code_check.dirty_message("/src", ["f%02d" % i for i in range(25)], False)
    assert "25 file(s)" in many and "and 5 more" in many and "launch_require_clean: true" in many


def test_uses_wandb_reads_the_dependency_files_and_the_imports(tmp_path):
    assert code_check.uses_wandb(str(tmp_path)) is False
    (tmp_path / "requirements.txt").write_text("torch\nwandb-utils-like==1\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("# we used to import wandb here\nx = 'import wandb'\n")
    assert code_check.uses_wandb(str(tmp_path)) is False
    (tmp_path / "src" / "log.py").write_text("import os\n    from wandb import init\n")
    assert code_check.uses_wandb(str(tmp_path)) is True
    assert code_check.uses_wandb(str(tmp_path), exclude=["/src/"]) is False
    (tmp_path / "requirements-dev.txt").write_text("torch\nWandB>=0.16\n")
    assert code_check.uses_wandb(str(tmp_path), exclude=["/src/"]) is True


def test_pushed_files_are_those_under_the_pushed_directory_and_not_excluded():
    paths = ["README.md", "train/run.sh", "train/pulls/", "train/reports/x.json", "train/sub/.git", "other/a.py"]
    assert code_check.pushed_files(paths, "train/", [".git", "/pulls/", "/reports/"]) == ["run.sh"]
    assert code_check.pushed_files(["a", "pulls/"], "", ["/pulls/"]) == ["a"]
