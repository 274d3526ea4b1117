"""autopilot_replace.py (issue 32, item 3): which boxes get replaced, with which spec, and when the old box may be
destroyed; and autopilot.decide's path through it (opted in or not)."""

from __future__ import annotations

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import autopilot as ap
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import autopilot_replace as rp

NOW = 1790000000
VAST = {"state": "preempted", "provider": "vastai", "id": 9000002, "status": "stopped", "message": "outbid"}
LAMBDA = {"state": "preempted", "provider": "lambda", "id": "i-1", "status": "preempted", "message": ""}
RECORD = {"rent": "sweep-a", "provider": "vastai", "api_url": "http://127.0.0.1:1", "count": 1,
          "spec": {"gpu": "H100_SXM", "gpu_count": 8, "max_price": 5, "interruptible": True},
          "boxes": [{"host": "sweep-a-9000002", "id": 9000002, "outcome": "kept"}]}
# vast.ai's profile: its only tier is the container disk, lost on destroy
VAST_TIERS = [{"name": "data", "path": "/workspace", "survives": ["stop"], "lost_on": ["destroy"]}]
NFS_TIERS = VAST_TIERS + [{"name": "durable", "path": "/mnt/nfs", "survives": ["stop", "destroy"], "lost_on": []}]
ON = ap.settings_of({"replace": True, "notify": True, "replace_after_minutes": 10})
OFF = ap.settings_of({"notify": True, "replace_after_minutes": 10})


def done(item, synced=1):
    return {"item": item, "state": "done", "sync_dest": "/mnt/nfs/runs/" + item, "synced": synced, "unsynced": []}


def rec(t, state, **ap_keys):
    return {"t": t, "kind": "autopilot", "host": "h", "ap": dict(ap_keys, state=state)}


def test_which_boxes_get_replaced():
    preempted_long = [rec(NOW - 900, "preempted"), rec(NOW - 300, "preempted")]
    # a provider that never gives the box back: at once
    assert "does not give it back" in rp.replace_cause(LAMBDA, None, [], NOW)
    # vast.ai may give it back: only after autopilot_replace_after_minutes of preemption, from the history
    assert rp.replace_cause(VAST, None, [rec(NOW - 300, "preempted")], NOW, 10) is None
    assert "has not given it back" in rp.replace_cause(VAST, None, preempted_long, NOW, 10)
    assert "has not given it back" in rp.replace_cause(VAST, None, [], NOW, 0)
    # a box that runs: only a GPU finding at FAIL; a job's FAIL or a GPU WARN is not one
    gpu_fail = {"findings": [{"level": "FAIL", "code": "gpu_ecc_uncorrectable", "message": "2 DBE"},
                             {"level": "FAIL", "code": "job_gone_incomplete", "message": "gone"}]}
    assert rp.replace_cause({"state": "running"}, gpu_fail, [], NOW).endswith("gpu_ecc_uncorrectable: 2 DBE")
    assert rp.replace_cause(None, {"findings": [{"level": "WARN", "code": "gpu_throttle", "message": "x"}]},
                            [], NOW) is None
    assert rp.replace_cause(None, {"findings": [gpu_fail["findings"][1]]}, [], NOW) is None


def test_when_the_old_box_may_be_destroyed():
    queue = ["000", "001", "002"]
    old = {"000": done("000"), "001": {"item": "001", "state": "failed"}}
    new_partway = {"001": done("001")}
    new_done = {"001": done("001"), "002": done("002")}
    survives = rp.survives_destroy(NFS_TIERS, "/mnt/nfs/runs")
    assert survives is True and rp.survives_destroy(VAST_TIERS, "/workspace/runs") is False
    assert rp.survives_destroy(VAST_TIERS, "/elsewhere") is None
    # not while the replacement has not finished every unfinished item
    ok, why = rp.may_destroy(queue, old, new_partway, survives)
    assert not ok and why == "item 002: not finished on the replacement yet"
    ok, why = rp.may_destroy(queue, old, new_done, survives)
    # item 000, done on the old box and not run again, is on the durable tier alone: the reason says where
    assert ok and why == (
        "every item of the queue is pulled, durable beyond the instance, or finished on the replacement; on the "
        "durable tier only (pull them from there): 000 (%s); anything else on the old box's disks (an item's "
        "metrics, samples) is deleted with it" % old["000"]["sync_dest"]), why
    # vast.ai: item 000 finished on the old box's /workspace, which dies with it: kept until pulled
    ok, why = rp.may_destroy(queue, old, new_done, False)
    assert not ok and "item 000: done on the old box, but its tier is lost on destroy" in why
    assert rp.may_destroy(queue, old, new_done, False, pulled=["000"])[0]
    # an unknown queue never destroys
    assert not rp.may_destroy([], {}, {}, True)[0]


def test_the_spec_comes_from_the_rents_record_and_each_replacement_has_its_own_name():
    assert rp.rent_spec(RECORD) == ("vastai", "sweep-a", RECORD["spec"], "http://127.0.0.1:1")
    old_record = dict(RECORD)
    old_record.pop("spec")
    found = rp.decide_replace("preempted", ON, old_record, [])
    assert (found["action"], found["state"]) == ("escalate", "replace_wanted")
    assert "holds no spec" in found["reason"]
    assert "remote_gpu.trainer.rent" in found["reason"] and "playbooks/" not in found["reason"]
    first = rp.decide_replace("preempted", ON, RECORD, [])
    assert first["action"] == "replace" and first["rent"] == {
        "provider": "vastai", "name": "sweep-a-r1", "spec": RECORD["spec"], "api_url": "http://127.0.0.1:1",
        "count": 1}
    history = [rec(NOW - 60, "retired", action="replace", ok=True, replacement={"host": "sweep-a-r1-9000005"})]
    assert rp.replacement_name("sweep-a", history) == "sweep-a-r2"


def test_decide_opted_in_rents_waits_destroys_once_and_notifies_each_step_once():
    history = [rec(NOW - 900, "preempted"), rec(NOW - 300, "preempted")]
    replace = {"record": RECORD, "queue": ["000", "001"], "old_items": {"000": done("000")}, "survives": True,
               "rented_id": 9000002}
    step = ap.decide("h", {"unreachable": True, "msg": "down"}, history, ON, now=NOW, provider=VAST,
                     replace=replace)
    assert (step["state"], step["action"], step["rent"]["name"]) == ("replacing", "replace", "sweep-a-r1")
    assert [e["kind"] for e in step["events"]] == ["replaced"]
    settled = ap.settle(step, {"ok": True, "msg": "sweep-a-r1-9000005 passed preflight, launched",
                               "replacement": {"host": "sweep-a-r1-9000005"}})
    assert (settled["state"], settled["replacement"]) == ("replaced", {"host": "sweep-a-r1-9000005"})
    history.append(dict(rec(NOW, "x"), ap=ap.history_fields(settled)))
    # the replacement is still training item 001: the old box is kept, nothing is sent
    waiting = ap.decide("h", {"unreachable": True}, history, ON, now=NOW + 60, provider=VAST,
                        replace=dict(replace, new_items={}))
    assert (waiting["state"], waiting["action"], waiting["events"]) == ("replaced", "none", [])
    history.append(dict(rec(NOW + 60, "x"), ap=ap.history_fields(ap.settle(waiting))))
    retire = ap.decide("h", {"unreachable": True}, history, ON, now=NOW + 120, provider=VAST,
                       replace=dict(replace, new_items={"001": done("001")}))
    assert (retire["state"], retire["action"], retire["rented_id"]) == ("replaced", "retire", "9000002")
    # an instance that no rent's record names is never destroyed
    unnamed = ap.decide("h", {"unreachable": True}, history, ON, now=NOW + 120, provider=VAST,
                        replace=dict(replace, new_items={"001": done("001")}, rented_id=None))
    assert unnamed["action"] == "none" and "no rent's record names this instance" in unnamed["reason"]
    settled = ap.settle(retire, {"ok": True, "msg": "destroyed"})
    assert settled["state"] == "retired" and [e["kind"] for e in settled["events"]] == ["replaced"]
    history.append(dict(rec(NOW + 120, "x"), ap=ap.history_fields(settled)))
    # destroyed once: later ticks do nothing and send nothing
    after = ap.decide("h", {"unreachable": True}, history, ON, now=NOW + 180, provider=VAST, replace=replace)
    assert (after["state"], after["action"], after["events"]) == ("retired", "none", [])


def test_decide_without_the_opt_in_rents_nothing_and_escalates_once_preempted_for_good():
    history = [rec(NOW - 900, "preempted"), rec(NOW - 300, "preempted")]
    found = ap.decide("h", {"unreachable": True}, history, OFF, now=NOW, provider=VAST,
                      replace={"record": RECORD})
    assert (found["state"], found["action"]) == ("preempted_escalated", "escalate")
    assert "rent" not in found and "autopilot_replace: true" in found["reason"]
    assert [e["kind"] for e in found["events"]] == ["escalated"]
    # before autopilot_replace_after_minutes it is the plain preemption (it may come back)
    early = ap.decide("h", {"unreachable": True}, [], OFF, now=NOW, provider=VAST)
    assert (early["state"], early["action"]) == ("preempted", "none")


def test_replace_settings():
    assert ap.settings_of(None)["replace"] is False and ap.settings_of(None)["replace_after_minutes"] == 30
    assert ap.settings_of({"replace": "yes", "replace_after_minutes": "0"})["replace_after_minutes"] == 0


def test_the_rents_record_is_found_by_the_instance_id_and_the_queue_snapshot_is_compact():
    other = dict(RECORD, rent="sweep-b", boxes=[{"host": "sweep-b-7", "id": 7, "outcome": "given back"}])
    assert rp.find_record([other, RECORD], "vastai", "9000002") is RECORD
    assert rp.find_record([other, RECORD], "runpod", 9000002) is None
    assert rp.find_record([other], "vastai", 7) is None  # a box given back is no box of the rent
    result = {"jobs": [{"name": "train", "exists": True, "queue_items": ["000", "001"],
                        "items": [done("000"), {"item": "001", "state": "running", "log": "x" * 500}]},
                       {"name": "adhoc", "exists": True}]}
    snap = rp.snapshot(result)
    assert snap == {"queue": ["train/000", "train/001"],
                    "items": {"train/000": {"state": "done", "synced": 1, "sync_dest": "/mnt/nfs/runs/000"},
                              "train/001": {"state": "running"}}}
    history = [rec(NOW - 60, "running", snap=snap), rec(NOW, "preempted")]
    assert rp.last_snapshot(history) == snap and rp.snapshot({"jobs": []}) is None


def launch_record(name, items, queue_length=4, code=None, **extra):
    record = {"launch_name": name, "launch_src": "/home/me/proj", "launch_command": "python train.py",
              "_launch_recorded": {"version": 1, "host": "old", "job": name, "queue_length": queue_length,
                                   "items": [{"index": int(i), "item": i, "host": "old", "arg": "cfg/%s" % i}
                                             for i in items], "code": code}}
    record.update(extra)
    return record


def test_relaunch_jobs_takes_every_recorded_job_and_names_the_rest():
    code = {"tree_sha256": "ab" * 32, "commit": "3f2a9c1", "dirty": True, "files": 12}
    records = {"/r/old/train.json": launch_record("train", ["000", "002"], code=code),
               "/r/old/exp2.json": launch_record("exp2", ["001"], queue_length=2),
               # a record whose name is not its file's, one without items, one unreadable: refused, with the path
               "/r/old/exp3.json": launch_record("other", ["000"]),
               "/r/old/exp4.json": launch_record("exp4", []),
               "/r/old/exp5.json": None}
    # exp6 and exp7 ran on the box (its last snapshot) without a record: exp7's one item is done, nothing to relaunch
    snap = {"queue": ["train/000", "train/002", "exp2/001", "exp6/000", "exp6/001", "exp7/000"],
            "items": {"train/000": {"state": "done"}, "exp6/000": {"state": "done"}, "exp6/001": {"state": "running"},
                      "exp7/000": {"state": "done", "synced": 1}}}
    found = rp.relaunch_jobs(records, snap)
    assert sorted(found["jobs"]) == ["exp2", "train"]
    assert found["jobs"]["train"] == {"path": "/r/old/train.json", "queue_length": 4,
                                      "items": records["/r/old/train.json"]["_launch_recorded"]["items"],
                                      "code": {"tree_sha256": "ab" * 32, "commit": "3f2a9c1", "dirty": True}}
    assert found["jobs"]["exp2"]["code"] == {"tree_sha256": None, "commit": None, "dirty": None}  # not recorded
    assert found["jobs"]["exp2"]["queue_length"] == 2
    # exp6 has an item left and no record; exp3-5's records are not launch's
    assert found["missing"] == ["exp6"]
    assert [line.split(" ")[0] for line in found["refused"]] == ["/r/old/exp3.json", "/r/old/exp4.json",
                                                                 "/r/old/exp5.json"]
    assert "launch_name, launch_src, launch_command and the recorded items are required" in found["refused"][0]
    # no snapshot (the box never answered a tick): nothing is known missing
    assert rp.relaunch_jobs({}, None) == {"jobs": {}, "missing": [], "refused": []}
    # a recorded queue length shorter than the share is not believed
    short = rp.relaunch_jobs({"/r/old/t.json": launch_record("t", ["000", "001"], queue_length=1)})
    assert short["jobs"]["t"]["queue_length"] == 2
