"""autopilot.py: one decision per host and tick (issue 11), over a table of cases. The GPU samples are real
--query-gpu captures (an H100 idle and under load, tests/fixtures/nvidia) read by patrol's own parser."""

from __future__ import annotations

import json
import os
import sys

import pytest
import yaml

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import autopilot as ap
from ansible_collections.remote_gpu.trainer.plugins.module_utils import provider_rent
from ansible_collections.remote_gpu.trainer.plugins.module_utils import gpu_patrol as gp
# patrol's projection of a real capture lives with patrol's tests (box code), one folder over
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils"))
from test_gpu_patrol import project  # noqa: E402  pylint: disable=wrong-import-position,import-error

H100 = "query-gpu-all-fields__nvidia-h100-80gb-hbm3__590.48.01__linux-x86_64.%s.csv"
IDLE = gp.read_sample(0, project(H100 % "idle"), "")[0]
LOAD = gp.read_sample(0, project(H100 % "load"), "")[0]
NOW = 1790000000
# (trainer_meter_stop, trainer_park) of a profile, as group_vars/ writes them
NO_PARK = {"verb": "none", "how": "none", "command": [], "api": {}, "keeps": "nothing is parked"}
AUTODL = ({"verb": "power_off", "how": "power off", "command": ["shutdown", "-h", "now"], "reversible": True},
          {"verb": "power_off", "how": "shutdown", "command": ["shutdown", "-h", "now"], "api": {},
           "keeps": "the data disk"})
RUNPOD = ({"verb": "terminate", "how": "runpodctl remove pod", "command": ["runpodctl", "remove", "pod", "x"],
           "reversible": False},
          {"verb": "stop", "how": "the API", "command": [], "keeps": "the volume disk",
           "api": {"provider": "runpod", "id": "x", "state": "stopped", "key_env": "RUNPOD_API_KEY"}})
LAMBDA = ({"verb": "terminate", "how": "POST terminate", "command": [], "reversible": False}, NO_PARK)
LOCAL = ({"verb": "manual", "how": "nothing to stop", "command": [], "reversible": True}, NO_PARK)
GENERIC_SSH = ({"verb": "manual", "how": "stop or return the box with whoever provides it; nothing here reclaims it",
                "command": [], "reversible": False}, NO_PARK)
ON = ap.settings_of({"heal": True, "autostop": True, "notify": True, "idle_minutes": 30})
OFF = ap.settings_of({})


def item(id_, state="done", exit_code=None, unsynced=(), synced=2, sync_dest="/fs/runs/train/", finished="t1"):
    code = {"done": 0, "failed": 3, "sync_failed": 1}[state] if exit_code is None else exit_code
    return {"item": id_, "state": state, "exit_code": code, "finished": finished, "unsynced": list(unsynced),
            "synced": synced if state == "done" else 0, "sync_dest": sync_dest and sync_dest + id_}


def probe(items=(), ids=("000", "001", "002"), alive=False, gpus=None, findings=(), markers=(), current=None,
          earlier=(), exists=True):
    job = {"name": "train", "exists": exists, "alive": alive, "run_id": "train", "queue_items": list(ids),
           "items": list(items), "items_done": sum(1 for i in items if i["state"] == "done"),
           "items_total": len(ids), "crash_markers": list(markers), "current_item": current,
           "earlier_crashes": list(earlier), "last_exit_code": None if alive else 1}
    return {"jobs": [job], "gpus": IDLE if gpus is None else gpus, "findings": list(findings), "status": "PASS"}


def rec(t, state=None, util=None, **ap_keys):
    record = {"t": t, "kind": "autopilot" if state else "patrol", "host": "h"}
    if util is not None:
        record["gpu_util"] = util
    if state:
        record["ap"] = dict(ap_keys, state=state)
    return record


def heal_rec(t, item_, crash=None, crash_at=None, action="heal"):
    return rec(t, "healed:%s" % item_, action=action, item=item_, run="train", ok=True, crash=crash,
               crash_at=crash_at)


TRACEBACK = {"line_no": 9, "kind": "traceback", "text": "Traceback (most recent call last):"}
DONE3 = [item("000"), item("001"), item("002")]
IDLE_HISTORY = [rec(NOW - 3600 + 60 * i, util=0.0) for i in range(0, 60, 5)]

CASES = [
    # (id, probe result, history, settings, meter stop, expected action, state, item, words in the reason, events)
    ("running", probe([item("000")], alive=True, gpus=LOAD), [], ON, AUTODL, "none", "running", None, ["running"], []),
    ("running-fail-finding", probe([item("000")], alive=True, findings=[
        {"level": "FAIL", "code": "bytes_high", "message": "/root/autodl-tmp at 97%"}]), [rec(NOW - 60, "running")],
     ON, AUTODL, "none", "fail:bytes_high", None, ["97%"], ["new_fail"]),
    ("rebooted-mid-item-heals", probe([item("000")]), [rec(NOW - 60, "running")], ON, AUTODL, "heal", "gone:001",
     "001", ["interrupted", "from item 001", "restart 1 of at most 2"], ["healed"]),
    ("not-opted-in-reports", probe([item("000")]), [rec(NOW - 60, "running")], OFF, AUTODL, "report", "gone:001",
     "001", ["autopilot_heal is off"], ["new_fail"]),
    ("crash-first-time-heals", probe([item("000"), item("001", "failed"), item("002")], earlier=[
        {"item": "001", "crash_marker_count": 2, "first": TRACEBACK}]), [], ON, AUTODL, "heal", "gone:001", "001",
     ["crashed (exit 3; traceback"], ["healed"]),
    ("same-crash-twice-escalates", probe([item("000"), item("001", "failed", finished="t2"), item("002")],
                                         current="001", markers=[TRACEBACK]),
     [heal_rec(NOW - 120, "001", "exit 3; traceback: Traceback (most recent call last):", "t1"),
      rec(NOW - 60, "running")], ON, AUTODL, "escalate", "escalated:001", "001", ["crashed twice the same way"],
     ["escalated"]),
    ("escalated-stays-quiet", probe([item("000"), item("001", "failed", finished="t2"), item("002")],
                                    current="001", markers=[TRACEBACK]),
     [heal_rec(NOW - 120, "001", "exit 3; traceback: Traceback (most recent call last):", "t1"),
      rec(NOW - 60, "escalated:001", action="escalate", item="001")], ON, AUTODL, "escalate", "escalated:001", "001",
     ["crashed twice"], []),
    ("other-crash-heals-again", probe([item("000"), item("001", "failed", exit_code=137, finished="t2"), item("002")]),
     [heal_rec(NOW - 120, "001", "exit 3; traceback: Traceback (most recent call last):", "t1"),
      rec(NOW - 60, "running")], ON, AUTODL, "heal", "gone:001", "001", ["restart 2 of at most 2"], ["healed"]),
    ("max-restarts-escalates", probe([item("000")]), [heal_rec(NOW - 300, "001"), heal_rec(NOW - 120, "001")], ON,
     AUTODL, "escalate", "escalated:001", "001", ["restarted 2 time(s)"], ["escalated"]),
    ("restarts-of-another-run-do-not-count", probe([item("000")]),
     [rec(NOW - 300, "healed:001", action="heal", item="001", run="older", ok=True)] * 2 + [rec(NOW - 60, "running")],
     ON, AUTODL, "heal",
     "gone:001", "001", ["restart 1 of"], ["healed"]),
    ("sync-failed-retries-alone", probe([item("000"), item("001"), item("002", "sync_failed", unsynced=["best.pt"])]),
     [rec(NOW - 60, "running")], ON, AUTODL, "retry_sync", "sync_failed:002", "002",
     ["best.pt is not durable", "no retraining"], ["healed"]),
    ("sync-retries-exhausted", probe([item("000"), item("001"), item("002", "sync_failed", unsynced=["best.pt"])]),
     [heal_rec(NOW - 300, "002", action="retry_sync"), heal_rec(NOW - 100, "002", action="retry_sync")], ON, AUTODL,
     "escalate", "escalated:002", "002", ["best.pt is not durable after 2 sync retries"], ["escalated"]),
    ("done-idle-parks", probe(DONE3), IDLE_HISTORY, ON, AUTODL, "park", "done", None,
     ["GPUs idle for 60 min", "shutdown -h now"], ["parked"]),
    ("done-idle-autostop-off", probe(DONE3), IDLE_HISTORY, OFF, AUTODL, "report", "done", None,
     ["autopilot_autostop is off"], ["queue_done"]),
    ("one-sample-is-not-enough", probe(DONE3), [], ON, AUTODL, "none", "done", None, ["idle for 0 of 30 min"],
     ["queue_done"]),
    ("busy-sample-breaks-idle", probe(DONE3), sorted(IDLE_HISTORY + [rec(NOW - 600, util=97.0)], key=lambda r: r["t"]), ON, AUTODL, "none",
     "done", None, ["idle for 5 of 30"], ["queue_done"]),
    ("gpus-busy-now", probe(DONE3, gpus=LOAD), IDLE_HISTORY, ON, AUTODL, "none", "done", None, ["GPUs busy"],
     ["queue_done"]),
    ("gpu-unknown", probe(DONE3, gpus=[]), IDLE_HISTORY, ON, AUTODL, "none", "done", None, ["GPU use unknown"],
     ["queue_done"]),
    ("unsynced-file-never-parks", probe([item("000"), item("001", unsynced=["best.pt"]), item("002")]), IDLE_HISTORY,
     ON, AUTODL, "none", "done_unsynced", "001", ["item 001: best.pt not durable"], ["queue_done"]),
    ("sync-off-never-parks", probe([item("000", sync_dest=None), item("001"), item("002")]), IDLE_HISTORY, ON,
     AUTODL, "none", "done_unsynced", "000", ["sync off"], ["queue_done"]),
    ("no-verified-copy-never-parks", probe([item("000", synced=0), item("001"), item("002")]), IDLE_HISTORY, ON,
     AUTODL, "none", "done_unsynced", "000", ["no verified durable copy"], ["queue_done"]),
    ("runpod-parks-through-the-api", probe(DONE3), IDLE_HISTORY, ON, RUNPOD, "park", "done", None,
     ["through the runpod API", "keeps the volume disk"], ["parked"]),
    ("destroying-verb-never-runs", probe(DONE3), IDLE_HISTORY, ON, LAMBDA, "escalate", "idle_destroy_only", None,
     ["terminate) destroys", "never runs it",
      "ansible-playbook -i <your inventory> remote_gpu.trainer.teardown -l h -e teardown_approve=h", "2.00 USD"],
     ["escalated"]),
    ("manual-verb-is-stopped-by-hand", probe(DONE3), IDLE_HISTORY, ON, GENERIC_SSH, "escalate", "idle_destroy_only",
     None, ["Nothing in the profile stops this box's meter", "verb manual: stop or return the box",
            "remote_gpu.trainer.teardown -l h -e teardown_approve=h", "stop or return the box yourself in the "
            "provider's console", "2.00 USD"], ["escalated"]),
    ("no-in-box-verb", probe(DONE3), IDLE_HISTORY, ON, LOCAL, "escalate", "idle_manual", None, ["by hand"],
     ["escalated"]),
    ("parked-stays-parked", probe(DONE3), IDLE_HISTORY + [rec(NOW - 30, "parked", action="park", ok=True)], ON,
     AUTODL, "none", "parked", None, ["parked at", "no job has run or started on it since"], []),
    ("parked-box-gone-quiet", {"unreachable": True, "msg": "timed out"}, [rec(NOW - 30, "parked")], ON, AUTODL, "none",
     "parked", None, ["does not answer"], []),
    ("unreachable-first", {"unreachable": True, "msg": "Connection timed out during banner exchange"},
     [rec(NOW - 60, "running")], ON, AUTODL, "none", "unreachable", None, ["banner exchange"], ["unreachable"]),
    ("unreachable-long-escalates", {"unreachable": True, "msg": "timed out"},
     [rec(NOW - 3000, "running"), rec(NOW - 2400, "unreachable"), rec(NOW - 60, "unreachable")], ON, AUTODL,
     "escalate", "unreachable_escalated", None, ["unreachable for 40 min", "balance"], ["escalated"]),
    ("recovered", probe([item("000")], alive=True, gpus=LOAD), [rec(NOW - 60, "unreachable")], ON, AUTODL, "none",
     "running", None, [], ["recovered"]),
    ("probe-error-never-stops", {"failed": True, "msg": "MODULE FAILURE: /proc unreadable"}, IDLE_HISTORY, ON,
     AUTODL, "none", "probe_error", None, ["/proc unreadable", "nothing is healed or stopped"], ["new_fail"]),
    ("no-probe", None, [], ON, AUTODL, "none", "probe_error", None, ["did not run"], ["new_fail"]),
    ("no-job", probe(exists=False), [], ON, AUTODL, "none", "idle", None, ["no job under the run directory"], []),
    ("not-graded", probe(ids=()), [], ON, AUTODL, "none", "stopped", None, ["no queue"], []),
]


def test_the_teardown_command_names_the_playbook_by_its_fqcn_with_an_inventory():
    """The command a person is told to run works where the collection is installed, not only in the checkout."""
    assert ap.TEARDOWN.format(host="h") == (
        "ansible-playbook -i <your inventory> remote_gpu.trainer.teardown -l h -e teardown_approve=h")
    for meter in (LAMBDA, GENERIC_SSH, LOCAL):
        found = ap.decide("h", probe(DONE3), IDLE_HISTORY, ON, meter[0], NOW, park=meter[1])
        assert found["teardown"] == ap.TEARDOWN.format(host="h") and "playbooks/" not in found["reason"]


def test_a_manual_meter_stop_is_not_said_to_destroy_the_box():
    """generic_ssh: nothing reclaims the box and nothing in the profile stops it (verb manual, not reversible): the
    escalation says to stop it by hand once teardown pulled and verified the results, never that a verb destroys it;
    any other irreversible verb destroys it."""
    found = ap.decide("h", probe(DONE3), IDLE_HISTORY, ON, GENERIC_SSH[0], NOW, park=GENERIC_SSH[1])
    assert (found["state"], found["action"]) == ("idle_destroy_only", "escalate")
    assert "destroys" not in found["reason"] and "never runs it" not in found["reason"]
    assert "pull and verify the results with %s" % ap.TEARDOWN.format(host="h") in found["reason"]
    bare = ap.decide("h", probe(DONE3), IDLE_HISTORY, ON, {"verb": "manual", "reversible": False}, NOW, park=NO_PARK)
    assert "(verb manual): it bills until you stop it" in bare["reason"]
    slurm = ap.decide("h", probe(DONE3), IDLE_HISTORY, ON, {"verb": "scancel", "reversible": False}, NOW,
                      park=NO_PARK)
    assert "The profile's only verb (scancel) destroys the box" in slurm["reason"]


def test_a_box_unreachable_too_long_names_the_platforms_danger_clocks():
    history = [rec(NOW - 3000, "running"), rec(NOW - 2400, "unreachable"), rec(NOW - 60, "unreachable")]
    clocks = [{"clock": "arrears force a stop", "verified": "2026-06"}, "not a clock", {"verified": "2026-06"}]
    found = ap.decide("h", {"unreachable": True, "msg": "timed out"}, history, ON, AUTODL[0], NOW, park=AUTODL[1],
                      clocks=clocks)
    assert found["state"] == "unreachable_escalated"
    assert "balance" in found["reason"] and "on this platform: arrears force a stop." in found["reason"]
    assert ap.console_hint(None) == ap.CONSOLE_HINT


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_decisions(case):
    _id, result, history, settings, meter, action, state, item_, words, events = case
    found = ap.decide("h", result, history, settings, meter[0], NOW, billing={"price": 2.0, "currency": "USD"},
                      park=meter[1])
    assert (found["action"], found["state"], found["item"]) == (action, state, item_), found["reason"]
    for word in words:
        assert word in found["reason"]
    assert [event["kind"] for event in found["events"]] == events
    assert found["action"] in ap.ACTIONS and all(e["kind"] in ap.EVENT_KINDS for e in found["events"])


def test_settle_turns_the_outcome_into_the_state_and_one_event():
    decision = ap.decide("h", probe([item("000")]), [rec(NOW - 60, "running")], ON, AUTODL[0], NOW, park=AUTODL[1])
    done = ap.settle(decision, {"jobs": {"train": {"ok": True, "msg": "started train under tmux, pid 42"}}})
    assert (done["state"], done["ok"], [e["kind"] for e in done["events"]]) == ("healed:001", True, ["healed"])
    assert "pid 42" in done["events"][0]["text"] and done["events"][0]["level"] == "WARN"
    failed = ap.settle(decision, {"jobs": {"train": {"ok": False, "msg": "disk full"}}})
    assert (failed["state"], [e["kind"] for e in failed["events"]]) == ("heal_failed:001", ["new_fail"])
    record = ap.history_fields(done)
    assert record["action"] == "heal" and record["item"] == "001" and record["events"] == ["healed"]
    # the next tick counts this heal
    history = [rec(NOW, **record)]
    again = ap.decide("h", probe([item("000")]), history, ON, AUTODL[0], NOW + 60, park=AUTODL[1])
    assert "restart 2 of at most 2" in again["reason"] and again["events"] == []  # healed -> healed: no message
    nothing = ap.settle(ap.decide("h", probe([item("000")]), [], OFF, AUTODL[0], NOW, park=AUTODL[1]))
    assert nothing["acted"] is False and nothing["state"] == "gone:001"


def test_an_unchanged_fleet_sends_nothing_and_a_new_crash_one_message():
    history, sent = [], []
    for tick in range(5):
        found = ap.settle(ap.decide("h", probe([item("000")], alive=True, gpus=LOAD), history, ON, AUTODL[0],
                                    NOW + tick, park=AUTODL[1]))
        history.append(rec(NOW + tick, **ap.history_fields(found)))
        sent += found["events"]
    assert sent == []
    crash = probe([item("000"), item("001", "failed")], earlier=[{"item": "001", "first": TRACEBACK}])
    for tick in range(3):
        found = ap.settle(ap.decide("h", crash, history, OFF, AUTODL[0], NOW + 10 + tick, park=AUTODL[1]))
        history.append(rec(NOW + 10 + tick, **ap.history_fields(found)))
        sent += found["events"]
    assert [e["kind"] for e in sent] == ["new_fail"] and "001 crashed" in sent[0]["text"]


@pytest.mark.parametrize("raw, message", [
    ({"heal": "maybe"}, "autopilot_heal must be true or false"),
    ({"max_restarts": -1}, "autopilot_max_restarts must be a whole number of at least 0"),
    ({"idle_minutes": 0}, "autopilot_idle_minutes"),
    ({"unreachable_minutes": "soon"}, "autopilot_unreachable_minutes"),
    ({"max_restarts": True}, "autopilot_max_restarts"),
])
def test_bad_settings_are_named(raw, message):
    with pytest.raises(ap.SettingsError, match=message):
        ap.settings_of(raw)


def test_settings_defaults_and_strings():
    assert ap.settings_of(None) == ap.DEFAULTS
    assert ap.settings_of({"heal": "yes", "max_restarts": "3", "notify": None}) == dict(
        ap.DEFAULTS, heal=True, max_restarts=3)


def test_idle_is_judged_from_the_history():
    assert ap.idle_since([], NOW, 0.0) == NOW
    assert ap.idle_since(IDLE_HISTORY, NOW, 0.0) == NOW - 3600
    assert ap.idle_since(IDLE_HISTORY, NOW, 50.0) is None
    assert ap.idle_since(IDLE_HISTORY + [rec(NOW - 10)], NOW, 0.0) == NOW  # a sample without a GPU reading breaks it
    assert ap.gpu_util({"gpus": IDLE}) <= ap.IDLE_UTIL_PCT < ap.gpu_util({"gpus": LOAD})


# --- every job on the box (issue 28): two experiments on one box, launch_name train and exp2 ---

def job(name, items=(), ids=("000", "001"), alive=False, **extra):
    found = {"name": name, "exists": True, "alive": alive, "run_id": name, "queue_items": list(ids),
             "items": list(items), "items_done": sum(1 for i in items if i["state"] == "done"),
             "items_total": len(ids), "crash_markers": [], "current_item": None, "earlier_crashes": [],
             "last_exit_code": None if alive else 0}
    found.update(extra)
    return found


def box(*jobs, gpus=None, findings=()):
    return {"jobs": list(jobs), "gpus": IDLE if gpus is None else gpus, "findings": list(findings), "status": "PASS",
            "alive_jobs": [j["name"] for j in jobs if j["alive"]], "discovered": True}


DONE2 = [item("000"), item("001")]
KEEPS = dict(AUTODL[1], keeps_data_disk=True, release_days=15)


def decide(result, history=(), settings=None, park=None, now=NOW):
    return ap.decide("h", result, list(history), settings or ON, AUTODL[0], now, park=park or AUTODL[1])


@pytest.mark.parametrize("exp2", [
    job("exp2", [item("000")], alive=True, progress={"text": "epoch 37/100"}),   # running at epoch 37, GPU idle
    job("exp2", [], alive=True, pid=None),                                        # starting: tmux, no PID file yet
])
def test_no_park_while_any_job_is_alive_even_with_idle_gpus(exp2):
    found = decide(box(job("train", DONE2), exp2), IDLE_HISTORY)
    assert (found["action"], found["state"], found["job"]) == ("none", "running", "exp2"), found["reason"]
    assert "job exp2 running" in found["reason"] and "job train: queue done" in found["reason"]
    assert [(j["job"], j["state"]) for j in found["jobs"]] == [("train", "done"), ("exp2", "running")]
    assert found["heal_jobs"] == [] and [e["kind"] for e in found["events"]] == ["queue_done"]


def test_parked_once_every_job_is_done_and_durable_and_the_box_idle():
    found = decide(box(job("train", DONE2), job("exp2", DONE2)), IDLE_HISTORY)
    assert (found["action"], found["state"], found["via"]) == ("park", "done", "command")
    assert "every queue done (jobs train, exp2), every file durable, no job alive" in found["reason"]
    assert [e["kind"] for e in found["events"]] == ["parked"]  # the park's message says the queues are done
    parked = ap.settle(found, {"ok": True, "msg": "shutdown -h now exited 0"})
    assert parked["state"] == "parked" and ap.history_fields(parked)["jobs"]["exp2"]["state"] == "done"
    history = IDLE_HISTORY + [rec(NOW, **ap.history_fields(parked))]
    again = decide(box(job("train", DONE2, launched_epoch=NOW - 7200), job("exp2", DONE2)), history, now=NOW + 60)
    assert (again["action"], again["state"], again["events"]) == ("none", "parked", [])


def test_one_job_not_durable_or_without_a_queue_keeps_the_box_running():
    found = decide(box(job("train", DONE2), job("exp2", [item("000"), item("001", unsynced=["best.pt"])])),
                   IDLE_HISTORY)
    assert (found["action"], found["state"], found["item"]) == ("none", "done_unsynced", "001")
    assert "job exp2: item 001: best.pt not durable" in found["reason"]
    found = decide(box(job("train", DONE2), job("exp2", ids=())), IDLE_HISTORY)
    assert (found["action"], found["state"], found["job"]) == ("none", "stopped", "exp2")


def test_heal_restarts_only_the_gone_job_never_a_live_one():
    found = decide(box(job("train", [item("000")], alive=True), job("exp2", [item("000")])),
                   [rec(NOW - 60, "running", jobs={"train": {"state": "running"}, "exp2": {"state": "running"}})])
    assert (found["action"], found["heal_jobs"], found["job"], found["state"]) == (
        "heal", ["exp2"], "exp2", "gone:001")
    assert found["reason"].startswith("job exp2 is gone at 1/2 items") and "job train running" in found["reason"]
    assert [(e["kind"], "exp2" in e["text"]) for e in found["events"]] == [("healed", True)]
    # both gone: each is healed by name; one restart fails, the other is recorded as healed
    both = decide(box(job("train", [item("000")]), job("exp2", [])))
    assert both["heal_jobs"] == ["train", "exp2"]
    done = ap.settle(both, {"jobs": {"train": {"ok": True, "msg": "resumed train"},
                                     "exp2": {"ok": False, "msg": "disk full"}}})
    assert done["ok"] is False and [(j["job"], j["state"]) for j in done["jobs"]] == [
        ("train", "healed:001"), ("exp2", "heal_failed:000")]
    assert sorted(e["kind"] for e in done["events"]) == ["healed", "new_fail"]
    fields = ap.history_fields(done)
    assert fields["heal_jobs"] == ["train", "exp2"] and fields["jobs"]["train"]["ok"] is True


def test_restarts_are_counted_per_job():
    exp2 = {"state": "healed:001", "action": "heal", "item": "001", "run": "exp2", "ok": True}
    heals = [rec(NOW - 300 + i, "healed:001", jobs={"exp2": exp2}) for i in range(2)]
    found = decide(box(job("train", [item("000")]), job("exp2", [item("000")])), heals)
    rows = dict((j["job"], j) for j in found["jobs"])
    assert (rows["exp2"]["action"], rows["train"]["action"]) == ("escalate", "heal")
    assert found["heal_jobs"] == ["train"] and "restart 1 of at most 2" in rows["train"]["reason"]


def test_a_finding_of_another_job_does_not_fail_the_live_one():
    other = {"level": "FAIL", "code": "command_not_found", "job": "train", "message": "train: exit 127"}
    disk = {"level": "FAIL", "code": "bytes_high", "message": "/root/autodl-tmp at 97%"}
    found = decide(box(job("train", DONE2), job("exp2", [], alive=True), findings=[other]))
    assert found["state"] == "running"
    found = decide(box(job("train", DONE2), job("exp2", [], alive=True), findings=[other, disk]))
    assert found["state"] == "fail:bytes_high"


@pytest.mark.parametrize("rows, extra, state, item_", [
    ([item("000"), dict(item("001"), too_fast=True, seconds=2)], {}, "too_fast:001", "001"),
    (DONE2, {"items_too_fast": 1}, "too_fast:?", "?"),              # the job's count alone
])
def test_an_item_too_fast_is_not_done_and_durable(rows, extra, state, item_):
    found = decide(box(job("train", rows, **extra)), IDLE_HISTORY)
    assert (found["action"], found["state"], found["item"]) == ("escalate", state, item_)
    assert "sooner than launch_min_seconds" in found["reason"] and "not parked" in found["reason"]
    # a relaunch skips an item that exited 0: the advice says to remove its status.json first, as item_too_fast does
    assert "remove the item's status.json" in found["reason"] and "and relaunch" in found["reason"]
    assert "lower launch_min_seconds" in found["reason"]
    assert [e["kind"] for e in found["events"]] == ["escalated"]


def test_without_the_too_fast_keys_an_item_is_judged_as_before():
    found = decide(box(job("train", [item("000"), dict(item("001"), too_fast=False, seconds=300)],
                           items_too_fast=0)), IDLE_HISTORY)
    assert found["action"] == "park"


PARK_T = NOW - 600


def parked_history():
    parked = {"state": "parked", "action": "park", "ok": True, "jobs": {"train": {"state": "done"}}}
    return IDLE_HISTORY[:6] + [rec(PARK_T, **parked), rec(PARK_T + 300, "parked")]


@pytest.mark.parametrize("train, held, words", [
    (job("train", DONE2, launched_epoch=PARK_T - 3600, last_start="2026-09-21T13:00:00Z"), True,
     ["parked at", "no job has run"]),
    # a new queue launched after the park, killed by a platform restart before any tick saw it
    (job("train", [], ids=("000",), launched_epoch=PARK_T + 120), False, ["the park of", "job train started at",
                                                                          "job train is gone at 0/1"]),
    (job("train", [], ids=("000",), last_start=ap.when(PARK_T + 200).replace(" ", "T")[:16] + ":00Z"), False,
     ["job train started at"]),
    (job("train", [], ids=("000",), alive=True), False, ["job train is alive", "job train running"]),
])
def test_a_park_ends_at_a_job_start_newer_than_it(train, held, words):
    found = decide(box(train), parked_history())
    assert (found["state"] == "parked") is held, found["reason"]
    for word in words:
        assert word in found["reason"]
    if not held and not train["alive"]:
        assert (found["action"], found["heal_jobs"]) == ("heal", ["train"])
        assert [e["kind"] for e in found["events"]] == ["healed"]


def test_a_parked_box_that_does_not_answer_stays_parked_and_a_probe_error_is_reported():
    assert decide({"unreachable": True, "msg": "timed out"}, parked_history())["state"] == "parked"
    assert decide({"failed": True, "msg": "boom"}, parked_history())["state"] == "probe_error"


def test_where_the_park_keeps_the_data_disk_unsynced_files_do_not_keep_an_idle_box_running():
    rows = [item("000"), item("001", unsynced=["best.pt"])]
    found = decide(box(job("train", DONE2), job("exp2", rows)), IDLE_HISTORY, park=KEEPS)
    assert (found["action"], found["state"]) == ("park", "done_unsynced"), found["reason"]
    assert "job exp2: item 001: best.pt not durable" in found["reason"]
    assert "after 15 days" in found["reason"] and ap.when(NOW + 15 * 86400)[:10] in found["reason"]
    assert found["unsynced"] == ["job exp2: item 001: best.pt not durable"] and found["release_days"] == 15
    # only after the idle window
    early = decide(box(job("train", DONE2), job("exp2", rows)), [], park=KEEPS)
    assert (early["action"], early["state"]) == ("none", "done_unsynced") and "idle for 0 of 30" in early["reason"]
    # a park that loses the disk: unsynced files keep it running, as before
    lose = decide(box(job("train", DONE2), job("exp2", rows)), IDLE_HISTORY, park=dict(KEEPS, keeps_data_disk=False))
    assert lose["action"] == "none" and "does not keep the data disk" in lose["reason"]
    # a failed sync is retried, a live job waited for, a too-fast item escalated, whatever the park keeps
    failed = decide(box(job("exp2", [item("000"), item("001", "sync_failed", unsynced=["best.pt"])])), IDLE_HISTORY,
                    park=KEEPS)
    assert failed["action"] == "retry_sync"
    live = decide(box(job("train", rows), job("exp2", [], alive=True)), IDLE_HISTORY, park=KEEPS)
    assert live["action"] == "none"


def test_job_states_come_from_the_latest_judged_record_and_older_records_still_count():
    history = [rec(NOW - 120, "running", jobs={"train": {"state": "running"}, "exp2": {"state": "gone:000"}}),
               rec(NOW - 60, "unreachable")]
    assert ap.previous_jobs(history) == ({"train": "running", "exp2": "gone:000"}, None)
    assert ap.previous_jobs([rec(NOW - 60, "done")]) == ({}, "done")  # a record written before every job was judged
    assert ap.acted([heal_rec(NOW, "001")], "heal", "001", "train", "train")  # and its heal counts


@pytest.mark.parametrize("text, epoch", [
    ("2026-07-03T22:11:09Z", 1783116669.0), ("2026-07-03T22:11:09+00:00", 1783116669.0), (None, None), (7, None),
    ("yesterday", None), ("2026-07-03T22:11:09Z" + " " * 40, None),
])
def test_start_times_from_the_box_are_parsed_or_refused(text, epoch):
    assert ap.epoch_of(text) == epoch


GROUP_VARS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "group_vars")
# platforms.md: AutoDL's power-off keeps the data disk (released after 15 days); RunPod's stop keeps the volume disk;
# vast.ai's stop keeps the container disk; Paperspace's shutdown keeps the disk; Gpushare clears /hy-tmp 24 h after
# a stop (china); the others have no park.
KEEPS_DATA_DISK = {"autodl": (True, 15), "runpod": (True, None), "vastai": (True, None), "paperspace": (True, None),
                   "china": (False, None), "lambda": (False, None), "generic_ssh": (False, None),
                   "local": (False, None), "slurm": (False, None), "kubernetes": (False, None)}


@pytest.mark.parametrize("profile", sorted(KEEPS_DATA_DISK))
def test_every_profile_says_whether_its_park_keeps_the_data_disk(profile):
    with open(os.path.join(GROUP_VARS, profile + ".yml"), encoding="utf-8") as handle:
        park = yaml.safe_load(handle)["trainer_park"]
    assert (park["keeps_data_disk"], park.get("release_days")) == KEEPS_DATA_DISK[profile]
    assert park["keeps_data_disk"] is False or park["verb"] != "none"  # only a park can keep anything


# --- preemption (issue 31): provider_state from an inventory plugin ------------------------------------------------

VAST_PREEMPTED = {"state": "preempted", "provider": "vastai", "id": "9000001", "status": "stopped",
                  "message": "vast.ai interruptible (bid) instance 9000001 is stopped (intended running): it was "
                             "outbid.", "durable_dir": "/workspace/durable"}
LAMBDA_PREEMPTED = {"state": "preempted", "provider": "lambda", "id": "0920582c", "status": "preempted",
                    "message": "Lambda instance 0920582c is preempted: Lambda took it back.",
                    "durable_dir": "/lambda/nfs/lab"}
UNREACHABLE = {"unreachable": True, "msg": "Failed to connect to the host via ssh"}


def test_a_preempted_bid_instance_is_one_preempted_event_not_unreachable_then_heals_when_it_is_back():
    history = [rec(NOW - 600, "running")]
    found = ap.decide("h", UNREACHABLE, history, ON, RUNPOD[0], NOW, billing={"price": 0.05, "currency": "USD"},
                      park=RUNPOD[1], provider=VAST_PREEMPTED)
    assert (found["state"], found["action"]) == ("preempted", "none")
    assert [e["kind"] for e in found["events"]] == ["preempted"]
    assert "outbid" in found["reason"] and "0.05 USD/h" in found["reason"] and "durable checkpoint" in found["reason"]
    # the next tick, still preempted: no second event
    again = ap.decide("h", UNREACHABLE, history + [rec(NOW, "preempted")], ON, RUNPOD[0], NOW + 60,
                      park=RUNPOD[1], provider=VAST_PREEMPTED)
    assert again["state"] == "preempted" and again["events"] == []
    # back (the bid won again, the box rebooted): its job is gone, so it is healed, and the host recovered
    back = ap.decide("h", probe([item("000")]), history + [rec(NOW, "preempted")], ON, RUNPOD[0], NOW + 120,
                     park=RUNPOD[1], provider=dict(VAST_PREEMPTED, state="running"))
    assert (back["action"], back["state"], back["item"]) == ("heal", "gone:001", "001"), back
    assert "from item 001" in back["reason"]


def test_a_preempted_lambda_instance_escalates_once_with_the_relaunch_commands():
    history = [rec(NOW - 600, "running")]
    found = ap.decide("h", UNREACHABLE, history, ON, LAMBDA[0], NOW, park=LAMBDA[1], provider=LAMBDA_PREEMPTED)
    assert (found["state"], found["action"]) == ("preempted_escalated", "escalate")
    assert [e["kind"] for e in found["events"]] == ["escalated"]
    for words in ("does not come back", "-i <your lambda inventory> remote_gpu.trainer.preflight -l <new host>",
                  "-i <your lambda inventory> remote_gpu.trainer.launch -l <new host>", "/lambda/nfs/lab",
                  "provider=lambda id=0920582c state=absent"):
        assert words in found["reason"]
    assert "playbooks/" not in found["reason"]
    again = ap.decide("h", UNREACHABLE, history + [rec(NOW, "preempted_escalated")], ON, LAMBDA[0], NOW + 60,
                      park=LAMBDA[1], provider=LAMBDA_PREEMPTED)
    assert again["events"] == []


def test_a_preempted_box_costs_its_disk_while_paused_and_a_lambda_one_is_not_said_to_bill_on():
    """What a preemption costs: a box given back bills its disk, not its GPU, while paused (the running price is
    what it ran at, not what it bills now); a preempted Lambda instance is not said to bill at all."""
    vast = ap.preempted("h", VAST_PREEMPTED, billing={"price": 0.4, "currency": "USD"})["reason"]
    assert "ran at 0.4 USD/h" in vast and "the GPU does not bill, its disk still does" in vast, vast
    assert "it bills 0.4" not in vast
    lam = ap.preempted("h", LAMBDA_PREEMPTED, billing={"price": 2.49, "currency": "USD"})["reason"]
    assert "ran at 2.49 USD/h" in lam and "it bills" not in lam and "still does" not in lam, lam


def test_a_preempted_lambda_instance_escalates_with_the_exact_rent_command():
    """Step 1 of the escalation is a command, not prose: the instance module's state=present with the preempted
    instance's own type, region, SSH key and filesystem (from its hostvars), under a name of its own (the old
    instance still carries its name until it is terminated)."""
    record = {"name": "lab-02", "instance_type": {"name": "gpu_1x_h100_pcie"}, "region": {"name": "us-east-1"},
              "ssh_key_names": ["lab-key"], "file_system_names": ["lab"]}
    reason = ap.preempted("h", dict(LAMBDA_PREEMPTED, record=record))["reason"]
    start = reason.index("remote_gpu.trainer.instance -a '{")
    args = json.loads(reason[start:].split("'", 2)[1])
    assert args == {"provider": "lambda", "state": "present", "name": "lab-02-relaunch",
                    "spec": {"instance_type": "gpu_1x_h100_pcie", "regions": ["us-east-1"],
                             "ssh_key_names": ["lab-key"], "file_system_names": ["lab"]}}, args
    assert "provider=lambda id=0920582c state=absent" in reason
    provider_rent.check_spec("lambda", args["spec"])  # the module takes the spec as it is
    # without the record (a static inventory's facts), the step stays a sentence, never a wrong command
    assert "state\": \"present" not in ap.preempted("h", LAMBDA_PREEMPTED)["reason"]


def test_a_static_inventory_host_without_provider_facts_is_still_unreachable():
    found = ap.decide("h", UNREACHABLE, [rec(NOW - 600, "running")], ON, RUNPOD[0], NOW, park=RUNPOD[1])
    assert found["state"] == "unreachable"
