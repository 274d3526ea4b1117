"""autopilot.py: one decision per host and tick (issue 11), over a table of cases. The GPU samples are real
--query-gpu captures (an H100 idle and under load, tests/fixtures/nvidia) read by patrol's own parser."""

from __future__ import annotations

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import autopilot as ap
from ansible_collections.remote_gpu.trainer.plugins.module_utils import gpu_patrol as gp
from test_gpu_patrol import project

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
     ["terminate) destroys", "never runs it", "playbooks/teardown.yml -l h -e teardown_approve=h", "2.00 USD"],
     ["escalated"]),
    ("no-in-box-verb", probe(DONE3), IDLE_HISTORY, ON, LOCAL, "escalate", "idle_manual", None, ["by hand"],
     ["escalated"]),
    ("parked-stays-parked", probe(DONE3), IDLE_HISTORY + [rec(NOW - 30, "parked", action="park", ok=True)], ON,
     AUTODL, "none", "parked", None, ["parked earlier"], []),
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
    ("no-job", probe(exists=False), [], ON, AUTODL, "none", "idle", None, ["no job train"], []),
    ("not-graded", probe(ids=()), [], ON, AUTODL, "none", "stopped", None, ["no queue"], []),
]


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
    done = ap.settle(decision, {"ok": True, "msg": "started train under tmux, pid 42"})
    assert (done["state"], done["ok"], [e["kind"] for e in done["events"]]) == ("healed:001", True, ["healed"])
    assert "pid 42" in done["events"][0]["text"] and done["events"][0]["level"] == "WARN"
    failed = ap.settle(decision, {"ok": False, "msg": "disk full"})
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
