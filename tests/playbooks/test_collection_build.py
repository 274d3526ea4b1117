"""The collection builds, installs into an empty collections path, and documents its modules; the tarball holds the
collection and nothing else: no output folder of a checkout (pulls, reports, data, rent's inventories, lab state,
caches, environments, builds), nor a renter's fleet in inventories/mine, ever goes into it (issue 30)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile

from pbhelpers import REPO, VENV_BIN, ansible_env

# What a built tarball may hold at its top level: the collection, and nothing a checkout accumulates.
TOP_LEVEL = {"MANIFEST.json", "FILES.json", "README.md", "LICENSE", "ansible.cfg", "execution-environment.yml",
             "changelogs", "docs", "group_vars", "inventories", "meta", "playbooks", "plugins", "roles"}
# What the installed collection needs to run its playbooks by FQCN.
REQUIRED = ["meta/runtime.yml", "playbooks/preflight.yml", "playbooks/launch.yml", "playbooks/patrol.yml",
            "playbooks/teardown.yml", "playbooks/autopilot.yml", "playbooks/autopilot_timer.yml",
            "playbooks/group_vars/autodl.yml", "group_vars/autodl.yml", "roles/profile/meta/argument_specs.yml",
            "roles/launch/tasks/main.yml", "plugins/modules/preflight_probe.py", "plugins/action/push_code.py",
            "plugins/plugin_utils/direct.py", "plugins/plugin_utils/launch_scripts.py",
            "plugins/inventory/runpod.py", "inventories/example/hosts.yml"]
# Output folders a checkout gathers (the playbooks run in it, the lab, the tools), each planted with a file.
PLANTED = ["pulls/lab-01/train/best.safetensors", "pulls/lab-01/TEARDOWN_RECEIPT.json", "reports/patrol.json",
           "reports/history/lab-01.jsonl", "reports/fleet.html", "data/shard-000.bin", "build/old.tar.gz",
           "tests/lab/state/inventory.yml", "tests/output/junit.xml", ".cache/pip/x", ".pytest_cache/v/x",
           ".mypy_cache/x", ".ruff_cache/x", ".tox/py/x", ".nox/lane/x", ".ansible/tmp/x", ".collections/x",
           ".venv/bin/python", "venv/bin/python", "remote_gpu-trainer-0.0.9.tar.gz", "launch.retry",
           "autopilot.log", "inventories/rented/sweep-a.yml", "inventories/mine/hosts.yml",
           "inventories/mine/known_hosts"]


def galaxy_build(source, output):
    """``ansible-galaxy collection build`` of ``source`` into ``output`` -> {member name: TarInfo}."""
    build = subprocess.run([str(VENV_BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(output),
                            str(source)], capture_output=True, text=True, check=False, env=ansible_env())
    assert build.returncode == 0, build.stdout + build.stderr
    (tarball,) = output.glob("remote_gpu-trainer-*.tar.gz")
    with tarfile.open(tarball) as tar:
        return tarball, {member.name.rstrip("/"): member for member in tar.getmembers()}


def copy_of_checkout(dest):
    """The files of the checkout as git sees them (tracked, and untracked that are not ignored), symlinks kept."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = REPO / name
        if not os.path.lexists(src):
            continue  # deleted in the work tree, not yet committed
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), target)
        else:
            shutil.copy2(src, target)


def check_listing(members):
    names = set(members)
    top = {name.split("/")[0] for name in names}
    assert top <= TOP_LEVEL, "the tarball holds what is not the collection: %s" % sorted(top - TOP_LEVEL)
    missing = [name for name in REQUIRED if name not in names]
    assert not missing, missing
    # the profiles next to the playbooks stay links to the one copy in group_vars/
    assert members["playbooks/group_vars/autodl.yml"].issym()
    assert members["playbooks/group_vars/autodl.yml"].linkname == "../../group_vars/autodl.yml"


def test_tarball_leaves_out_every_output_folder(tmp_path):
    src = tmp_path / "checkout"
    copy_of_checkout(src)
    for name in PLANTED:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text("planted by the test; must not be in the tarball\n")
    out = tmp_path / "out"
    out.mkdir()
    members = galaxy_build(src, out)[1]
    check_listing(members)
    assert [name for name in PLANTED if name in members] == []


def test_build_install_and_ansible_doc(tmp_path):
    tarball, members = galaxy_build(REPO, tmp_path)
    check_listing(members)
    assert "plugins/modules/inode_check.py" in members
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


def test_execution_environment_installs_the_built_tarball(tmp_path):
    """ansible-builder's galaxy stage, as its Containerfile runs it (``COPY _build /build``, ``WORKDIR /build``,
    ``ansible-galaxy collection install -r requirements.yml``): execution-environment.yml's galaxy requirements name
    the tarball that ``make build`` writes to build/, with galaxy.yml's current version."""
    import yaml
    stage = tmp_path / "build-stage"
    (stage / "build").mkdir(parents=True)
    galaxy_build(REPO, stage / "build")
    ee = yaml.safe_load((REPO / "execution-environment.yml").read_text())
    (stage / "requirements.yml").write_text(yaml.safe_dump(ee["dependencies"]["galaxy"]))
    collections = tmp_path / "usr-share-ansible-collections"
    env = ansible_env(ANSIBLE_CONFIG=str(tmp_path / "none.cfg"))
    (tmp_path / "none.cfg").write_text("[defaults]\n")
    install = subprocess.run([str(VENV_BIN / "ansible-galaxy"), "collection", "install", "-r", "requirements.yml",
                              "--collections-path", str(collections)], capture_output=True, text=True, check=False,
                             env=env, cwd=str(stage))
    assert install.returncode == 0, install.stdout + install.stderr
    assert (collections / "ansible_collections" / "remote_gpu" / "trainer" / "playbooks" / "patrol.yml").is_file()
