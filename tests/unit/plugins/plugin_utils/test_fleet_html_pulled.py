"""The dashboard links the TensorBoard curves that teardown pulled and verified (issue 34, item 5)."""
from __future__ import annotations

import json
import os

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import fleet_html


def _verified(root, host, run, paths):
    run_dir = root / host / run
    run_dir.mkdir(parents=True)
    files = [{"path": path, "sha256": "0" * 64, "bytes": 1} for path in paths]
    (run_dir / "PULL_VERIFIED.json").write_text(json.dumps({"files": files}))
    return run_dir


def test_curves_of_counts_the_verified_event_files_per_item():
    verified = {"files": [{"path": "durable/000/tb/events.out.tfevents.1"}, {"path": "durable/000/tb/x/e.2"},
                          {"path": "durable/001/tb/events.out.tfevents.3"}, {"path": "durable/001/best.pt"},
                          {"path": "durable/002/protocol/tb/a"}, {"path": "unsynced/003/tb/e"}, "junk", {"path": 3},
                          {"path": "durable/001/wandb/wandb/offline-run-1-a/run-a.wandb"},
                          {"path": "durable/001/wandb/wandb/offline-run-1-a/files/config.yaml"},
                          {"path": "durable/001/wandb/wandb/run-2-b/run-b.wandb"}]}
    assert fleet_html.curves_of(verified) == (["000", "001"], 3, ["001/wandb/wandb/offline-run-1-a"])
    assert fleet_html.curves_of(None) == ([], 0, [])


def test_pulled_curves_links_each_run_relative_to_the_page(tmp_path):
    pulls = tmp_path / "pulls"
    _verified(pulls, "h1", "train", ["durable/000/tb/events.out.tfevents.1", "durable/000/best.pt"])
    _verified(pulls, "h1", "nocurves", ["durable/000/best.pt"])
    _verified(pulls, "h2", "offline", ["durable/000/wandb/wandb/offline-run-1-a/run-a.wandb"])
    (pulls / "h2" / "torn").mkdir(parents=True)
    (pulls / "h2" / "torn" / "PULL_VERIFIED.json").write_text("{not json")
    os.mkfifo(str(pulls / "h2" / "fifo"))
    found = fleet_html.pulled_curves(str(pulls), ["h1", "h2", "h3", "../x"], str(tmp_path / "reports"))
    assert list(found) == ["h1", "h2"]
    (run,) = found["h1"]
    assert (run["run"], run["items"], run["files"], run["href"]) == ("train", ["000"], 1, "../pulls/h1/train/data/durable/")
    page = fleet_html.render({}, 1e9, pulled=found)
    assert '<li data-pulled="h1/train">' in page and 'href="../pulls/h1/train/data/durable/"' in page
    assert "tensorboard --logdir %s" % run["logdir"] in page
    assert "Pulled curves" not in fleet_html.render({}, 1e9)
    assert "wandb sync %s/000/wandb/wandb/offline-run-1-a</code>" % found["h2"][0]["logdir"] in page
