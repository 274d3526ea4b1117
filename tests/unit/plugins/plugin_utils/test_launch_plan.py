"""Launch's plan on the controller: the queue's assignment, the printed table and each host's queue record."""

from __future__ import annotations

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import jobs
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import launch_plan


def test_assign_spreads_round_robin_over_sorted_hosts():
    rows = launch_plan.assign(["a", "b", "c", "d", "e", "f", "g"], ["lab-03", "lab-01", "lab-02"])
    assert [(r["item"], r["host"], r["arg"]) for r in rows] == [
        ("000", "lab-01", "a"), ("001", "lab-02", "b"), ("002", "lab-03", "c"), ("003", "lab-01", "d"),
        ("004", "lab-02", "e"), ("005", "lab-03", "f"), ("006", "lab-01", "g")]
    assert [r["index"] for r in rows] == list(range(7))


def test_assign_is_deterministic_and_each_item_exactly_once():
    queue = ["cfg/%d.yaml" % i for i in range(23)]
    one = launch_plan.assign(queue, ["b", "a", "c", "a"])
    two = launch_plan.assign(queue, ["c", "b", "a"])
    assert one == two
    assert sorted(r["arg"] for r in one) == sorted(queue)
    assert {r["host"] for r in one} == {"a", "b", "c"}


def test_assign_more_hosts_than_items_and_wide_ids():
    assert [r["host"] for r in launch_plan.assign(["x"], ["h2", "h1"])] == ["h1"]
    rows = launch_plan.assign([str(i) for i in range(1001)], ["h"])
    assert rows[0]["item"] == "0000" and rows[-1]["item"] == "1000"
    assert launch_plan.assign([], ["h"]) == []


@pytest.mark.parametrize("queue, hosts", [(["a"], []), ([{"a": 1}], ["h"]), ([True], ["h"])])
def test_assign_rejects_bad_input(queue, hosts):
    with pytest.raises(ValueError):
        launch_plan.assign(queue, hosts)


def test_assignment_table():
    lines = launch_plan.assignment_table(launch_plan.assign(["--lr 1", ""], ["lab-01"]))
    assert lines[0].split() == ["ITEM", "HOST", "ARGUMENT"]
    assert lines[1].split() == ["000", "lab-01", "--lr", "1"]
    assert lines[2].split() == ["001", "lab-01", "-"]


def test_assign_rejects_a_string_queue():
    with pytest.raises(ValueError, match="must be a list"):
        launch_plan.assign("a,b", ["h"])


def test_the_queue_record_is_this_hosts_share_with_its_roots():
    plan = launch_plan.assign(["a", "b", "c"], ["h2", "h1"])
    mine = [row for row in plan if row["host"] == "h1"]
    record = launch_plan.queue_record(mine, "train", "h1", "exp", len(plan), "/d/outputs/exp/", "/fs/runs/exp",
                                      best=["best*"], scratch=["latest*"])
    assert record["items"] == [
        {"item": "000", "arg": "a", "output_dir": "/d/outputs/exp/000", "sync_dest": "/fs/runs/exp/000"},
        {"item": "002", "arg": "c", "output_dir": "/d/outputs/exp/002", "sync_dest": "/fs/runs/exp/002"}]
    assert (record["queue_length"], record["run_id"], record["durable_root"], record["best"]) == (
        3, "exp", "/fs/runs/exp", ["best*"])
    assert launch_plan.queue_record(mine, "train", "h1", "exp", 3, "/d", "")["items"][0]["sync_dest"] is None
    with pytest.raises(ValueError, match="less than"):
        launch_plan.queue_record(mine, "train", "h1", "exp", 1, "/d", "/fs")


def test_the_queue_record_carries_launch_min_seconds_for_job_status():
    mine = launch_plan.assign(["a"], ["h1"])
    record = launch_plan.queue_record(mine, "train", "h1", "exp", 1, "/d", "/fs", min_seconds=30, min_seconds_fail=True)
    assert (record["min_seconds"], record["min_seconds_fail"]) == (30, True)
    # what job_status reads of it
    assert jobs.min_seconds_of(record) == (30, "FAIL")
    off = launch_plan.queue_record(mine, "train", "h1", "exp", 1, "/d", "/fs")
    assert (off["min_seconds"], off["min_seconds_fail"], jobs.min_seconds_of(off)) == (0, False, (None, None))
    for bad in (-1, "30", True, 2.5):
        with pytest.raises(ValueError, match="launch_min_seconds"):
            launch_plan.queue_record(mine, "train", "h1", "exp", 1, "/d", "/fs", min_seconds=bad)


def test_reassign_gives_each_new_host_its_old_boxs_share_under_the_same_ids():
    plan = launch_plan.assign(["a", "b", "c", "d", "e"], ["old-1", "old-2"])
    share_1 = [dict((k, r[k]) for k in ("index", "item", "arg")) for r in plan if r["host"] == "old-1"]
    rows = launch_plan.reassign({"new-1": list(reversed(share_1))})
    # old-1 ran 000, 002 and 004; old-2's items (001, 003) are not started a second time
    assert [(r["item"], r["host"], r["arg"]) for r in rows] == [
        ("000", "new-1", "a"), ("002", "new-1", "c"), ("004", "new-1", "e")]
    both = launch_plan.reassign({"new-2": [r for r in plan if r["host"] == "old-2"], "new-1": share_1})
    assert [(r["item"], r["host"]) for r in both] == [("000", "new-1"), ("001", "new-2"), ("002", "new-1"),
                                                      ("003", "new-2"), ("004", "new-1")]
    assert launch_plan.reassign({}) == []


@pytest.mark.parametrize("shares, words", [
    ({"n1": [{"index": 0, "item": "000", "arg": "a"}], "n2": [{"index": 0, "item": "000", "arg": "a"}]},
     "item 000 is recorded for n1 and for n2"),
    ({"n1": [{"index": "0", "item": "000", "arg": "a"}]}, "is not {index, item, arg}"),
    ({"n1": [{"index": True, "item": "000", "arg": "a"}]}, "is not {index, item, arg}"),
    ({"n1": ["000"]}, "is not {index, item, arg}"),
])
def test_reassign_refuses_an_item_claimed_twice_or_malformed(shares, words):
    with pytest.raises(ValueError, match=words.replace("{", r"\{").replace("}", r"\}")):
        launch_plan.reassign(shares)
