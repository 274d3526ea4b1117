"""The record of a run and the honesty of its code, on a one-host AutoDL lab (issue 34, items 5 and 7).

As the README's commands do: launch.yml, let the item finish, then an approved teardown.yml. The training writes
its TensorBoard events under $TRAINER_TB_DIR/$TRAINER_ITEM and its protocol (configs, notes) under
$TRAINER_PROTOCOL_DIR, both on the data disk outside the item's output directory; after the teardown they are on
the laptop, verified against the sha256 recorded at sync time (PULL_VERIFIED.json).

Before that, two launches are refused before anything is pushed: a script with CRLF line endings, and a dirty code
tree with launch_require_clean=true. The launch that runs pushes the same dirty tree: it says which files are
uncommitted, and code.json records them.
"""
from __future__ import annotations

import hashlib
import json
import subprocess

import pytest

from labhelpers import needs_root, started_fleet
from lab_teardown_support import checkpoint
from test_launch_lab import read_json, wait_finished
from test_lifecycle_lab import playbook, shown

pytestmark = needs_root
HOST = "lab-01"
EVENTS = b"fake tfevents record of item 000\n"
TRAIN_SH = r"""#!/usr/bin/env bash
TB="$TRAINER_TB_DIR/$TRAINER_ITEM"
mkdir -p "$TB" "$TRAINER_PROTOCOL_DIR"
printf 'fake tfevents record of item %s\n' "$TRAINER_ITEM" > "$TB/events.out.tfevents.1700000000.box"
printf 'lr: 0.001\n' > "$TRAINER_PROTOCOL_DIR/config.yaml"
printf '%s %s\n' "${WANDB_MODE-unset}" "${WANDB_DIR-unset}" > "$TRAINER_PROTOCOL_DIR/wandb.txt"
RUN="$WANDB_DIR/wandb/offline-run-20260101_000000-abc"
mkdir -p "$RUN" && echo W > "$RUN/run-abc.wandb"
cp "ckpt/$1.safetensors" "$TRAINER_OUTPUT_DIR/best.safetensors"
"""


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "1") as lab:  # lab-01: AutoDL
        assert lab.groups["autodl"] == [HOST]
        yield lab


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    """A git work tree with a commit and one uncommitted file (notes.txt)."""
    root = tmp_path_factory.mktemp("src")
    (root / "train.sh").write_text(TRAIN_SH)
    (root / "requirements.txt").write_text("wandb>=0.16\n")  # the code uses wandb
    (root / "ckpt").mkdir()
    (root / "ckpt" / "q0.safetensors").write_bytes(checkpoint("q0"))
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "train"]):
        subprocess.run(git + argv, check=True, capture_output=True)
    (root / "notes.txt").write_text("an idea not committed yet\n")
    return root


def launch(fleet, laptop, src, name, *extra):
    return playbook(fleet, laptop, "launch.yml", "-l", HOST, "-e", "launch_src=%s" % src,
                    "-e", "launch_command='bash train.sh'", "-e", "launch_name=%s" % name,
                    "-e", json.dumps({"launch_queue": ["q0"], "launch_min_seconds": 0}), *extra)


def test_a_crlf_script_and_a_dirty_tree_under_launch_require_clean_are_refused(fleet, src, tmp_path):
    crlf = tmp_path / "crlf"
    crlf.mkdir()
    (crlf / "train.sh").write_bytes(TRAIN_SH.replace("\n", "\r\n").encode())
    proc = launch(fleet, tmp_path, crlf, "crlf")
    assert proc.returncode != 0, shown(proc)
    assert "train.sh has CRLF (Windows) line endings" in proc.stdout and "command not found" in proc.stdout
    proc = launch(fleet, tmp_path, src, "clean", "-e", "launch_require_clean=true")
    assert proc.returncode != 0, shown(proc)
    assert "uncommitted changes in 1 file(s): notes.txt" in proc.stdout and "Nothing was pushed" in proc.stdout
    # refused before the push: neither job's code reached the box
    for name in ("crlf", "clean"):
        assert read_json(fleet, HOST, "~/.trainer/jobs/%s/code.json" % name) is None
        assert fleet.ssh(HOST, "ls -A %s/code/%s 2>/dev/null || true" % (
            fleet.hosts[HOST]["lab_data_dir"], name)).stdout.split() == []


def test_the_events_and_protocol_reach_the_laptop_verified_and_the_dirty_tree_is_recorded(fleet, src, tmp_path):
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    proc = launch(fleet, laptop, src, "train")
    assert proc.returncode == 0, shown(proc)
    # launch says the tree is dirty, with its files, and code.json records them
    assert "uncommitted changes in 1 file(s): notes.txt" in proc.stdout + proc.stderr, shown(proc)
    code = read_json(fleet, HOST, "~/.trainer/jobs/train/code.json")
    assert (code["dirty"], code["dirty_files"]) == (True, ["notes.txt"])
    # wandb: online on AutoDL (its network_turbo proxy), but no WANDB_API_KEY anywhere: a warning in the host's
    # report line (which the callback wraps)
    assert "the code uses wandb and WANDB_MODE is online, but neither" in " ".join(proc.stdout.split()), shown(proc)
    assert wait_finished(fleet, HOST, "train")["exit_code"] == 0

    proc = playbook(fleet, laptop, "teardown.yml", "-l", HOST, "-e", "teardown_approve=%s" % HOST)
    assert proc.returncode == 0, shown(proc)
    pulled = laptop / "pulls" / HOST / "train"
    verified = {entry["path"]: entry["sha256"] for entry in
                json.loads((pulled / "PULL_VERIFIED.json").read_text())["files"]}
    events = "durable/000/tb/events.out.tfevents.1700000000.box"
    protocol = "durable/000/protocol/config.yaml"
    assert events in verified and protocol in verified, sorted(verified)
    assert (pulled / "data" / events).read_bytes() == EVENTS
    assert (pulled / "data" / protocol).read_text() == "lr: 0.001\n"
    # the job ran with WANDB_MODE from the profile and its own WANDB_DIR, whose runs were pulled too
    wandb_dir = (pulled / "data" / "durable/000/protocol/wandb.txt").read_text().split()
    assert wandb_dir[0] == "online" and wandb_dir[1].endswith("/wandb/000"), wandb_dir
    assert "durable/000/wandb/wandb/offline-run-20260101_000000-abc/run-abc.wandb" in verified
    assert verified[events] == hashlib.sha256(EVENTS).hexdigest()

    # the next patrol's dashboard links the pulled curves
    proc = playbook(fleet, laptop, "patrol.yml", "-l", HOST)
    assert proc.returncode == 0, shown(proc)
    page = (laptop / "reports" / "fleet.html").read_text()
    assert '<li data-pulled="%s/train">' % HOST in page and 'href="../pulls/%s/train/data/durable/"' % HOST in page
    assert "wandb sync %s/000/wandb/wandb/offline-run-20260101_000000-abc" % (pulled / "data" / "durable") in page
