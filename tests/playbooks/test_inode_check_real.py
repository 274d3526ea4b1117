"""inode_check for real: through ansible, on a tmpfs with a real inode cap."""

from __future__ import annotations

import errno
import json
import os
import subprocess

import pytest

from pbhelpers import REPO, VENV_BIN, ansible_env

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs with nr_inodes= needs root")


@pytest.fixture
def capped_tmpfs(tmp_path):
    mount = tmp_path / "autodl-fs"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m,nr_inodes=400", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def run_inode_check(path):
    proc = subprocess.run(
        [str(VENV_BIN / "ansible"), "localhost", "-i", str(REPO / "inventories/local/hosts.yml"),
         "-m", "remote_gpu.trainer.inode_check", "-a", json.dumps({"paths": [str(path)], "fail_on": "never", "hf_cache": ""})],
        capture_output=True, text=True, check=False, env=ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="json"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # ad-hoc output: "localhost | SUCCESS => {...}" (the result as JSON)
    return json.loads(proc.stdout.split(" => ", 1)[1])


def fill(directory, count):
    made = 0
    for i in range(count):
        try:
            os.close(os.open(os.path.join(directory, "img%05d.png" % i), os.O_CREAT | os.O_WRONLY, 0o644))
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
            break
        made += 1
    return made


def test_inodes_high_then_exhausted_on_a_capped_tmpfs(capped_tmpfs):
    images = capped_tmpfs / "eval_images"
    images.mkdir()
    fill(str(images), 350)
    result = run_inode_check(capped_tmpfs)
    assert [f["code"] for f in result["findings"]] == ["inodes_high"]
    assert result["paths"][0]["inodes_total"] == 400 and result["paths"][0]["bytes_pct"] <= 1
    assert result["paths"][0]["top"][0]["path"] == str(images)
    assert fill(str(images), 400) < 400  # the kernel refused: ENOSPC with bytes to spare
    result = run_inode_check(capped_tmpfs)
    assert [(f["code"], f["level"]) for f in result["findings"]] == [("inodes_exhausted", "FAIL")]
    assert result["status"] == "FAIL"
