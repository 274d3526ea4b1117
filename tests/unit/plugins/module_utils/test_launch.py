from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess
import sys

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import job_layout, launch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def test_tree_checksum_is_sha256_over_sorted_paths_and_file_hashes(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "b.py").write_bytes(b"print(1)\n")
    (tmp_path / "a.txt").write_bytes(b"a")
    os.symlink("a.txt", str(tmp_path / "link"))
    got = launch.tree_checksum(str(tmp_path))
    text = "%s  a.txt\nsymlink:a.txt  link\n%s  src/b.py\n" % (
        hashlib.sha256(b"a").hexdigest(), hashlib.sha256(b"print(1)\n").hexdigest())
    assert got == {"tree_sha256": hashlib.sha256(text.encode()).hexdigest(), "files": 3, "bytes": 10}


def test_tree_checksum_changes_with_content_and_names(tmp_path):
    (tmp_path / "a").write_bytes(b"1")
    first = launch.tree_checksum(str(tmp_path))["tree_sha256"]
    (tmp_path / "a").write_bytes(b"2")
    second = launch.tree_checksum(str(tmp_path))["tree_sha256"]
    os.rename(str(tmp_path / "a"), str(tmp_path / "b"))
    third = launch.tree_checksum(str(tmp_path))["tree_sha256"]
    assert len({first, second, third}) == 3


def test_pending_skips_only_exit_code_zero(tmp_path):
    items = tmp_path / "items"
    for item, data in (("000", {"exit_code": 0}), ("001", {"exit_code": 3}), ("002", {"exit_code": False}),
                       ("004", "not json")):
        (items / item).mkdir(parents=True)
        (items / item / "status.json").write_text(data if isinstance(data, str) else json.dumps(data))
    assert job_layout.pending_items(str(items), ["000", "001", "002", "003", "004"]) == ["001", "002", "003", "004"]


def test_finish_success_syncs_verified_then_prunes_and_prints_the_line_last(out, tmp_path):
    dest = tmp_path / "durable" / "000"
    status, line = launch.finish_item("000", 0, "t0", str(out), sync_dest=str(dest), best=["best*"],
                                      scratch=["latest*", "tmp*", "best*"], arg="a0", host="h")
    assert status["exit_code"] == 0 and status["sync_error"] is None
    assert [f["path"] for f in status["synced"]] == ["best.pt"]
    assert status["synced"][0]["sha256"] == hashlib.sha256(b"B" * 100).hexdigest()
    assert (dest / "best.pt").read_bytes() == b"B" * 100
    assert sorted(os.listdir(str(out))) == ["best.pt"]  # scratch pruned, the synced file kept
    assert sorted(status["pruned"]) == ["latest.pt", "tmpdir"]
    assert line == "==== trainer: item 000 done, synced 1 files to %s ====" % dest
    assert status["item"] == "000" and status["started"] == "t0" and status["finished"]


def test_finish_failed_command_does_not_sync_or_prune(out, tmp_path):
    dest = tmp_path / "durable" / "000"
    status, line = launch.finish_item("000", 3, "t0", str(out), sync_dest=str(dest), best=["best*"],
                                      scratch=["latest*"])
    assert status["exit_code"] == 3 and status["synced"] == [] and not dest.exists()
    assert (out / "latest.pt").exists()
    assert "failed, exit 3" in line


def test_finish_failed_command_keeps_the_items_log_beside_its_outputs(out, tmp_path):
    """The crash of a failed item is in its part of the job log: teardown pulls it from the data disk."""
    log = tmp_path / "job.log"
    log.write_text("==== trainer: item 000 started at t0 ====\nTraceback (most recent call last):\n"
                   "RuntimeError: CUDA out of memory\n==== trainer: item 001 started at t1 ====\nnot 000's\n")
    launch.finish_item("000", 1, "t0", str(out), best=["best*"], log_path=str(log))
    assert (out / "trainer-item.log").read_text().splitlines()[1:] == [
        "Traceback (most recent call last):", "RuntimeError: CUDA out of memory"]


def test_finish_sync_failure_makes_the_item_fail_and_keeps_scratch(out, tmp_path):
    status, line = launch.finish_item("000", 0, "t0", str(out), sync_dest=str(tmp_path / "d"), best=["nothing*"],
                                      scratch=["latest*"])
    assert status["exit_code"] == 1 and status["command_exit_code"] == 0
    assert "no file under" in status["sync_error"]
    assert (out / "latest.pt").exists()
    assert "done" not in line and "FAILED to sync" in line


def test_finish_reports_a_sync_that_fails_verification(out, tmp_path):
    def broken(_module):
        return True, {"msg": "checked_sync failed: verification failed", "files": []}
    status, _line = launch.finish_item("000", 0, "t0", str(out), sync_dest=str(tmp_path / "d"), best=["best*"],
                                       sync=broken)
    assert status["exit_code"] == 1 and status["sync_error"].startswith("checked_sync failed")


def test_finish_without_sync_dest(out):
    status, line = launch.finish_item("000", 0, "t0", str(out), best=["best*"])
    assert status["exit_code"] == 0 and status["sync_dest"] is None and "nothing to sync" in line


def _cli(*args, **kw):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.run([sys.executable, "-m", "ansible_collections.remote_gpu.trainer.plugins.module_utils.launch"]
                          + list(args), capture_output=True, text=True, env=env, check=False, **kw)


def test_cli_code_writes_code_json_once(tmp_path):
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "t.py").write_text("x")
    out = tmp_path / "code.json"
    first = _cli("code", "--root", str(tmp_path / "tree"), "--out", str(out), "--commit", "abc", "--dirty", "false")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["changed"] is True
    record = json.loads(out.read_text())
    assert record["commit"] == "abc" and record["dirty"] is False and record["files"] == 1
    again = _cli("code", "--root", str(tmp_path / "tree"), "--out", str(out), "--commit", "abc", "--dirty", "false")
    assert json.loads(again.stdout)["changed"] is False


def test_cli_code_records_the_torch_of_the_jobs_interpreter_run_in_the_code_directory(tmp_path):
    """code.json's torch: what --python finds from the code directory (the job's working directory), read from
    torch/version.py without importing torch; the 'not installed' record where it finds none."""
    tree = tmp_path / "tree"
    (tree / "torch").mkdir(parents=True)
    (tree / "torch" / "__init__.py").write_text("raise SystemExit('imported')\n")
    version_py = next((pathlib.Path(REPO) / "tests" / "fixtures" / "torch").glob("version.py__2.2.1+cu121__*"))
    (tree / "torch" / "version.py").write_text(version_py.read_text())
    out = tmp_path / "code.json"
    proc = _cli("code", "--root", str(tree), "--out", str(out), "--python", sys.executable)
    assert proc.returncode == 0, proc.stderr
    torch = json.loads(out.read_text())["torch"]
    assert torch == {"python": sys.executable, "installed": True, "location": str(tree / "torch"),
                     "version": "2.2.1+cu121", "cuda": "12.1", "hip": None, "build": "cuda", "reason": None}
    assert json.loads(proc.stdout)["torch"] == torch
    (tree / "torch" / "version.py").unlink()
    (tree / "torch" / "__init__.py").unlink()
    (tree / "torch").rmdir()
    proc = _cli("code", "--root", str(tree), "--out", str(out), "--python", sys.executable)
    record = json.loads(out.read_text())
    assert json.loads(proc.stdout)["changed"] is True  # the torch record changed
    if record["torch"]["location"] is None:  # unless this interpreter has a torch of its own
        assert record["torch"]["installed"] is False and "not installed" in record["torch"]["reason"]
    proc = _cli("code", "--root", str(tree), "--out", str(out), "--python", str(tmp_path / "no-python"))
    assert proc.returncode == 0, proc.stderr  # a torch probe never fails the launch
    assert json.loads(out.read_text())["torch"]["installed"] is None


def test_item_status_states_the_torch_it_ran_with(out):
    torch = {"version": "2.2.1+cu121", "cuda": "12.1", "build": "cuda"}
    code = {"commit": "c1", "tree_sha256": "ab", "torch": torch}
    status, _line = launch.finish_item("000", 0, "t0", str(out), code=code)
    assert status["torch"] == torch and status["code"] == code
    assert launch.provisional_status("000", 0, "t0", str(out), code=code)["torch"] == torch
    assert launch.finish_item("000", 0, "t0", str(out), code={"commit": "c1"})[0]["torch"] is None  # older code.json
    assert launch.finish_item("000", 0, "t0", str(out))[0]["torch"] is None


def test_cli_finish_writes_status_atomically_and_exit_code(out, tmp_path):
    status_file = tmp_path / "job" / "items" / "000" / "status.json"
    code = tmp_path / "code.json"
    code.write_text('{"commit": null, "tree_sha256": "ab", "torch": {"version": "2.5.1", "build": "cpu"}}')
    proc = _cli("finish", "--item", "000", "--exit-code", "0", "--started", "t0", "--output-dir", str(out),
                "--status", str(status_file), "--sync-dest", str(tmp_path / "d"), "--best", "best*",
                "--scratch", "latest*", "--code", str(code), "--host", "lab-01", "--arg", "a0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("==== trainer: item 000 done, synced 1 files")
    status = json.loads(status_file.read_text())
    assert status["code"]["tree_sha256"] == "ab" and status["host"] == "lab-01"
    assert status["torch"] == {"version": "2.5.1", "build": "cpu"}
    assert not os.path.exists(str(status_file) + ".tmp")
    assert _cli("done", str(status_file)).returncode == 0
    proc = _cli("finish", "--item", "001", "--exit-code", "5", "--started", "t0", "--output-dir", str(out),
                "--status", str(status_file))
    assert proc.returncode == 5 and _cli("done", str(status_file)).returncode == 1


def test_launch_ships_every_module_util_its_helpers_import():
    """The launch role copies a fixed list of module_utils to the box; the list must include everything they import."""
    import pathlib
    import re

    import yaml

    repo = pathlib.Path(__file__).resolve().parents[4]
    role = repo / "roles" / "launch"
    shipped = yaml.safe_load((role / "vars" / "main.yml").read_text())["_launch_lib_files"]
    # every tasks file of the role (main.yml includes prepare.yml, where the push is)
    tasks = [task for path in sorted((role / "tasks").glob("*.yml")) for task in yaml.safe_load(path.read_text()) or []]
    pushes = [task for block in tasks for task in block.get("block", [block]) if "remote_gpu.trainer.push_code" in task]
    assert pushes and pushes[0]["remote_gpu.trainer.push_code"]["lib_files"] == "{{ _launch_lib_files }}"
    assert "launch.py" in shipped and len(set(shipped)) == len(shipped)
    utils = repo / "plugins" / "module_utils"
    for name in shipped:
        assert (utils / name).is_file(), "the launch role ships %s, which does not exist" % name
        imports = re.findall(r"plugins\.module_utils(?:\.(\w+)| import ([\w, ]+))", (utils / name).read_text())
        for module in {m.split()[0] for a, b in imports for m in (a or b).split(",")}:
            assert module + ".py" in shipped, "%s imports %s, which the launch role does not ship" % (name, module)


def test_finish_writes_a_provisional_failed_status_before_anything_can_fail(out, tmp_path, monkeypatch):
    """A finish step that dies half-way (here: the sync raises) still leaves a status that says the item failed."""
    status_file = tmp_path / "items" / "000" / "status.json"

    def crash(*_args, **_kwargs):
        assert json.loads(status_file.read_text())["exit_code"] == 1  # already written when the work starts
        raise RuntimeError("disk vanished")

    monkeypatch.setattr(launch, "finish_item", crash)
    with pytest.raises(RuntimeError):
        launch.cli(["finish", "--item", "000", "--exit-code", "0", "--started", "t0", "--output-dir", str(out),
                    "--status", str(status_file), "--host", "h", "--arg", "a0"])
    status = json.loads(status_file.read_text())
    assert status["exit_code"] == 1 and status["command_exit_code"] == 0 and status["item"] == "000"
    assert "did not complete" in status["sync_error"] and status["host"] == "h" and status["arg"] == "a0"
    assert not job_layout.pending_items(str(tmp_path / "items"), ["000"]) == []


def test_finish_status_has_the_same_keys_as_the_provisional_one(out):
    final, _line = launch.finish_item("000", 3, "t0", str(out))
    assert set(final) == set(launch.provisional_status("000", 3, "t0", str(out)))
