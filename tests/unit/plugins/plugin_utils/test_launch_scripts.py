"""launch_scripts: the run wrapper and the queue runner, generated in Python and run here under bash."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import ansible_collections
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import launch_scripts

LIB = next(os.path.dirname(path) for path in ansible_collections.__path__
           if os.path.isdir(os.path.join(path, "remote_gpu", "trainer")))

TRAIN = r"""
echo "$TRAINER_ITEM $1 $TRAINER_RUN_ID" >> "$HOME_LOG"
printf 'best-%s' "$1" > "$TRAINER_OUTPUT_DIR/best.pt"
echo scratch > "$TRAINER_OUTPUT_DIR/latest.pt"
[ "$1" != fail ]
"""


def make(tmp_path, items, python=sys.executable, lib=LIB, durable=True, **extra):
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "train.sh").write_text(TRAIN)
    job_dir = tmp_path / "jobs" / "train"
    job_dir.mkdir(parents=True, exist_ok=True)
    settings = dict(name="train", host="lab-01", command="bash train.sh", dest=str(tmp_path / "code"),
                    output_root=str(tmp_path / "out"), durable_root=str(tmp_path / "durable") if durable else "",
                    run_id="r1", best=["best*"], scratch=["latest*"], job_dir=str(job_dir), python=python,
                    lib_dir=lib)
    settings.update(extra)
    scripts = launch_scripts.scripts(items, **settings)
    for script in scripts:
        with open(script["path"], "w") as handle:
            handle.write(script["text"])
    return scripts, job_dir


def run(script, tmp_path, *args):
    env = dict(os.environ, HOME_LOG=str(tmp_path / "runs.log"))
    return subprocess.run(["bash", script["path"]] + list(args), env=env, capture_output=True, text=True,
                          timeout=60, check=False)


def status(job_dir, item):
    with open(os.path.join(str(job_dir), "items", item, "status.json")) as handle:
        return json.load(handle)


def test_scripts_are_versioned_by_their_text_and_the_queue_names_the_run_wrapper(tmp_path):
    items = [{"item": "000", "arg": "a b"}]
    one = make(tmp_path, items)[0]
    again = make(tmp_path, items)[0]
    other = make(tmp_path, items, command="python x.py")[0]
    assert [s["kind"] for s in one] == ["run-item", "queue"]
    assert one == again and one[0]["path"] != other[0]["path"] and one[1]["path"] != other[1]["path"]
    assert os.path.basename(one[0]["path"]) == launch_scripts.versioned_name("run-item", one[0]["text"])
    assert os.path.basename(one[0]["path"]).startswith("run-item-") and len(os.path.basename(one[0]["path"])) == 24
    assert "RUN_ITEM=%s" % one[0]["path"] in one[1]["text"]
    assert "IDS=( 000 )" in one[1]["text"] and "ARGS=( 'a b' )" in one[1]["text"]
    assert "sampler" not in one[1]["text"]


def test_the_sampler_sidecar_is_started_and_stopped_with_the_queue(tmp_path):
    scripts = make(tmp_path, [{"item": "000", "arg": ""}], sampler=True, sampler_interval=3)[0]
    text = scripts[1]["text"]
    assert ('PYTHONPATH="$LIB" "$PY" -m ansible_collections.remote_gpu.trainer.plugins.module_utils.sampler '
            '--job-dir "$JOB_DIR" --interval 3 --runner-pid $$ &\nSAMPLER=$!\n'
            "trap 'kill \"$SAMPLER\" 2>/dev/null' EXIT") in text


def test_queue_runs_each_item_syncs_the_best_files_and_skips_done_items(tmp_path):
    scripts, job_dir = make(tmp_path, [{"item": "000", "arg": "a0"}, {"item": "001", "arg": "fail"},
                                       {"item": "002", "arg": "a2"}])
    proc = run(scripts[1], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # one item failed
    assert "==== trainer: queue finished, 1 item(s) failed ====" in proc.stdout
    done = status(job_dir, "000")
    assert done["exit_code"] == 0 and done["host"] == "lab-01" and done["arg"] == "a0" and done["sync_error"] is None
    assert [f["path"] for f in done["synced"]] == ["best.pt"] and done["pruned"] == ["latest.pt"]
    assert (tmp_path / "durable" / "000" / "best.pt").read_text() == "best-a0"
    assert "==== trainer: item 000 done, synced 1 files to %s/000 ====" % (tmp_path / "durable") in proc.stdout
    failed = status(job_dir, "001")
    assert failed["exit_code"] == 1 and failed["command_exit_code"] == 1 and failed["synced"] == []
    assert (tmp_path / "out" / "001" / "latest.pt").exists()  # no prune after a failure
    assert not (job_dir / "main.pid").exists() and not (job_dir / "current.item").exists()
    assert (tmp_path / "runs.log").read_text().split("\n")[:3] == ["000 a0 r1", "001 fail r1", "002 a2 r1"]

    proc = run(scripts[1], tmp_path)
    assert "==== trainer: item 000 already done, skipped ====" in proc.stdout
    assert [line.split()[0] for line in (tmp_path / "runs.log").read_text().split("\n") if line] == [
        "000", "001", "002", "001"]


def test_without_durable_root_nothing_is_synced(tmp_path):
    scripts, job_dir = make(tmp_path, [{"item": "000", "arg": "a0"}], durable=False)
    proc = run(scripts[0], tmp_path, "000", "a0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert status(job_dir, "000")["sync_dest"] is None and "nothing to sync" in proc.stdout


@pytest.mark.parametrize("python, lib", [("/nonexistent/python3", LIB), (sys.executable, "/nonexistent")])
def test_a_finish_step_that_cannot_run_fails_the_item(tmp_path, python, lib):
    scripts, job_dir = make(tmp_path, [{"item": "000", "arg": "a0"}], python=python, lib=lib)
    proc = run(scripts[0], tmp_path, "000", "a0")
    assert proc.returncode != 0
    assert "==== trainer: item 000 FAILED: the finish step exited" in proc.stdout
    assert not (job_dir / "items" / "000" / "status.json").exists()
