"""The collection builds, installs into an empty collections path, and documents its modules."""

from __future__ import annotations

import subprocess

from pbhelpers import REPO, VENV_BIN, ansible_env


def test_build_install_and_ansible_doc(tmp_path):
    build = subprocess.run([str(VENV_BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(tmp_path), str(REPO)],
                           capture_output=True, text=True, check=False, env=ansible_env())
    assert build.returncode == 0, build.stderr
    tarball = next(tmp_path.glob("remote_gpu-trainer-*.tar.gz"))
    listing = subprocess.run(["tar", "-tzf", str(tarball)], capture_output=True, text=True, check=True).stdout
    assert "plugins/modules/inode_check.py" in listing
    assert "tests/" not in listing and "molecule/" not in listing and ".venv" not in listing
    empty = tmp_path / "collections"
    config = tmp_path / "empty.cfg"
    config.write_text("[defaults]\n")
    env = ansible_env(ANSIBLE_CONFIG=str(config), ANSIBLE_COLLECTIONS_PATH=str(empty))
    install = subprocess.run([str(VENV_BIN / "ansible-galaxy"), "collection", "install", "-p", str(empty), str(tarball)],
                             capture_output=True, text=True, check=False, env=env)
    assert install.returncode == 0, install.stderr
    doc = subprocess.run([str(VENV_BIN / "ansible-doc"), "remote_gpu.trainer.inode_check"], capture_output=True, text=True,
                         check=False, env=env, cwd=tmp_path)
    assert doc.returncode == 0, doc.stderr
    for needle in ("paths", "warn_pct", "fail_pct", "budgets", "hf_cache", "EXAMPLES", "RETURN VALUES", "inodes_pct"):
        assert needle in doc.stdout, needle
    role_doc = subprocess.run([str(VENV_BIN / "ansible-doc"), "-t", "role", "remote_gpu.trainer.profile"],
                              capture_output=True, text=True, check=False, env=env, cwd=tmp_path)
    assert role_doc.returncode == 0 and "trainer_data_dir" in role_doc.stdout
