"""The autopilot_decide action without a play: decide for every host of the play from its hostvars, act only
where opted in and never in check mode, refuse a park whose command holds a $VAR, name a bad opt-in, then record
the outcome of what ran (history, receipt, report, the events of the hosts opted in to notify)."""

from __future__ import annotations

import json
import time

import pytest

from ansible_collections.remote_gpu.trainer.plugins.action.autopilot_decide import ActionModule, outcome_of

from controller_actions import run_action

AUTODL = {"verb": "power_off", "how": "power off", "command": ["shutdown", "-h", "now"], "reversible": True}
JOB = {"name": "train", "exists": True, "alive": False, "run_id": "train", "queue_items": ["000", "001"],
       "items": [{"item": "000", "state": "done", "exit_code": 0, "finished": "t", "sync_dest": "/fs/000",
                  "synced": 2, "unsynced": []}], "items_done": 1, "items_total": 2, "crash_markers": [],
       "earlier_crashes": [], "current_item": "001", "last_exit_code": None}
API = {"provider": "runpod", "id": "pod1", "state": "stopped", "key_env": "RUNPOD_API_KEY"}
PROBE = {"jobs": [JOB], "gpus": [], "findings": [], "status": "FAIL"}


def host(**extra):
    found = {"autopilot_probe": PROBE, "trainer_meter_stop": AUTODL, "trainer_profile": "autodl"}
    found.update(extra)
    return found


def play(hostvars, tmp_path):
    return {"hostvars": hostvars, "ansible_play_hosts_all": sorted(hostvars)}


def args(tmp_path, **extra):
    found = {"history_dir": str(tmp_path / "history"), "report_path": str(tmp_path / "autopilot.json")}
    found.update(extra)
    return found


def test_decide_acts_only_where_opted_in_and_never_in_check_mode(tmp_path):
    hostvars = {"a": host(autopilot_heal=True, autopilot_notify=True), "b": host(), "c": host(autopilot_heal="often")}
    result = run_action(ActionModule, args(tmp_path, phase="decide"), task_vars=play(hostvars, tmp_path))
    decisions = result["decisions"]
    assert (decisions["a"]["act"], decisions["a"]["item"]) == ("heal", "001")
    assert (decisions["b"]["act"], decisions["b"]["action"], decisions["b"]["wanted"]) == (None, "report", "heal")
    assert decisions["c"]["state"] == "fail:config_error" and "autopilot_heal must be" in decisions["c"]["reason"]
    assert result["acting"] == ["a"]
    check = run_action(ActionModule, args(tmp_path, phase="decide"), check_mode=True,
                       task_vars=play(hostvars, tmp_path))
    assert check["acting"] == [] and check["decisions"]["a"]["action"] == "heal"

    # the record: a's heal ran; b and c only reported; events of the opted-in host only are to be sent
    hostvars["a"]["autopilot_heal_result"] = {"changed": True, "results": [
        {"item": "train", "changed": True, "msg": "resumed train under tmux, pid 7"}]}
    record = run_action(ActionModule, args(tmp_path, phase="record", decisions=decisions),
                        task_vars=play(hostvars, tmp_path))
    assert record["decisions"]["a"]["state"] == "healed:001" and record["decisions"]["a"]["ok"] is True
    kinds = [(e["host"], e["kind"]) for e in record["events"]]
    assert kinds == [("a", "healed"), ("b", "new_fail"), ("c", "new_fail")]
    assert [e["host"] for e in record["notify_events"]] == ["a"]
    lines = (tmp_path / "history" / "a.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["ap"]["action"] == "heal" and json.loads(lines[-1])["kind"] == "autopilot"
    report = json.loads((tmp_path / "autopilot.json").read_text())
    assert [row["host"] for row in report["hosts"]] == ["a", "b", "c"] and not report["check_mode"]
    # c's wrong setting is recorded and notified like any state, and named for the playbook to fail the tick
    (error,) = record["config_errors"]
    assert error.startswith("c: autopilot_heal must be") and "nothing is healed or stopped" in error


@pytest.mark.parametrize("park, env, expected, words", [
    ({"verb": "stop", "command": ["vastai", "stop", "instance", "$CONTAINER_ID"], "api": {}}, {},
     ("escalate", None, False), ["$CONTAINER_ID"]),
    ({"verb": "stop", "command": [], "api": API}, {}, ("escalate", None, False), ["RUNPOD_API_KEY is not set"]),
    ({"verb": "stop", "command": [], "api": dict(API, id="")}, {"RUNPOD_API_KEY": "k"}, ("escalate", None, False),
     ["runpod instance id is unknown"]),
    ({"verb": "stop", "command": [], "api": API}, {"RUNPOD_API_KEY": "k"}, ("park", "park", True),
     ["through the runpod API"]),
    ({"verb": "none", "command": [], "api": {}}, {}, ("escalate", None, False), ["park it by hand"]),
])
def test_a_park_opens_only_with_all_it_needs(tmp_path, monkeypatch, park, env, expected, words):
    monkeypatch.delenv("RUNPOD_API_KEY", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    done = dict(JOB, items=[dict(JOB["items"][0]), dict(JOB["items"][0], item="001")], items_done=2)
    idle = {"jobs": [done], "gpus": [{"utilization_pct": 0}], "findings": []}
    history = tmp_path / "history"
    history.mkdir()
    now = int(time.time())
    (history / "p.jsonl").write_text("".join(json.dumps({"t": now - 60 * m, "host": "p", "gpu_util": 0.0}) + "\n"
                                             for m in (50, 40, 30)))
    hostvars = {"p": host(autopilot_probe=idle, autopilot_autostop=True, trainer_park=dict(park, how="h", keeps="k"))}
    result = run_action(ActionModule, args(tmp_path, phase="decide"), task_vars=play(hostvars, tmp_path))
    decision = result["decisions"]["p"]
    assert (decision["action"], decision["act"], decision["open"]) == expected, decision["reason"]
    for word in words:
        assert word in decision["reason"]


def test_the_outcome_of_a_park_or_heal():
    park = {"act": "park", "command": ["shutdown", "-h", "now"]}
    names = {"park_var": "p", "heal_var": "h", "park_api_var": "p"}
    assert outcome_of(park, {"p": {"rc": 0}}, names)["ok"] is True
    assert outcome_of(park, {"p": {"unreachable": True}}, names)["ok"] is True  # the box went down as asked
    assert outcome_of(park, {"p": {"rc": 1, "stderr": "denied"}}, names) == {
        "ok": False, "msg": "shutdown -h now: rc 1: denied"}
    assert outcome_of({"act": "heal"}, {}, names) == {"jobs": {}}  # settle: "did not run" for each job
    heal = {"act": "heal", "heal_jobs": ["train", "exp2"]}
    assert outcome_of(heal, {"h": {"failed": True, "msg": "unreachable host"}}, names) == {"jobs": {
        "train": {"ok": False, "msg": "unreachable host"}, "exp2": {"ok": False, "msg": "unreachable host"}}}
    assert outcome_of(heal, {"h": {"changed": True, "results": [
        {"item": "train", "failed": True, "msg": "disk full"}, {"item": "exp2", "msg": "resumed exp2"}]}},
        names) == {"jobs": {"train": {"ok": False, "msg": "disk full"}, "exp2": {"ok": True, "msg": "resumed exp2"}}}
    assert outcome_of({"act": None}, {}, names) is None
    api = {"act": "park", "via": "api", "api": API}
    assert outcome_of(api, {"p": {"changed": True, "msg": "stopped"}}, names) == {
        "ok": True, "msg": "the runpod API: stopped"}
    assert outcome_of(api, {"p": {"failed": True, "msg": "401"}}, names) == {"ok": False, "msg": "401"}


def test_without_history_dir_the_history_lies_next_to_the_report(tmp_path):
    """As patrol's and preflight's: -e autopilot_report_path=DIR/x.json alone moves the history to DIR/history."""
    hostvars = {"a": host()}
    found = {"report_path": str(tmp_path / "ticks" / "autopilot.json")}
    decisions = run_action(ActionModule, dict(found, phase="decide"), task_vars=play(hostvars, tmp_path))["decisions"]
    run_action(ActionModule, dict(found, phase="record", decisions=decisions), task_vars=play(hostvars, tmp_path))
    assert (tmp_path / "ticks" / "history" / "a.jsonl").is_file()
    assert (tmp_path / "ticks" / "autopilot.json").is_file()


def test_two_jobs_on_one_box_heal_only_the_gone_one_and_record_each(tmp_path):
    """Issue 28: train alive, exp2 gone: the decision heals exp2 by name (heal_jobs), the record reads the heal
    loop's result of exp2, and the history keeps each job's state."""
    live = dict(JOB, name="train", run_id="train", alive=True)
    gone = dict(JOB, name="exp2", run_id="exp2")
    hostvars = {"a": host(autopilot_probe=dict(PROBE, jobs=[live, gone]), autopilot_heal=True, autopilot_job="x")}
    decisions = run_action(ActionModule, args(tmp_path, phase="decide"), task_vars=play(hostvars, tmp_path))["decisions"]
    assert (decisions["a"]["act"], decisions["a"]["heal_jobs"], decisions["a"]["job"]) == ("heal", ["exp2"], "exp2")
    hostvars["a"]["autopilot_heal_result"] = {"changed": True, "results": [
        {"item": "exp2", "changed": True, "msg": "resumed exp2 under tmux, pid 9"}]}
    record = run_action(ActionModule, args(tmp_path, phase="record", decisions=decisions),
                        task_vars=play(hostvars, tmp_path))["decisions"]["a"]
    assert (record["state"], record["ok"]) == ("healed:001", True) and "pid 9" in record["reason"]
    ap = json.loads((tmp_path / "history" / "a.jsonl").read_text().splitlines()[-1])["ap"]
    assert ap["jobs"] == {"train": {"state": "running", "action": "none", "wanted": "none", "run": "train"},
                          "exp2": {"state": "healed:001", "action": "heal", "wanted": "heal", "item": "001",
                                   "run": "exp2", "ok": True}}
    assert ap["heal_jobs"] == ["exp2"]


def test_the_providers_word_read_in_the_tick_takes_the_place_of_the_state_rent_wrote(tmp_path):
    """A box of the inventory rent wrote (provider_state: running, as rent saw it) that did not answer: the tick's
    read of the provider (instance_info's facts) says it is preempted, and the decision says so; a failed read, or
    none of this host, leaves the inventory's word."""
    unreachable = {"unreachable": True, "msg": "ssh: connect to host 203.0.113.7 port 41007: Connection refused"}
    rented = {"autopilot_probe": unreachable, "provider": "vastai", "provider_id": "9000002",
              "provider_state": "running", "provider_status": "running", "vastai": {"id": 9000002, "is_bid": True},
              "trainer_profile": "vastai", "trainer_meter_stop": {"verb": "destroy", "how": "destroy",
                                                                  "reversible": False}}
    fresh = {"changed": False, "found": True, "state": "preempted", "facts": {
        "provider": "vastai", "provider_id": "9000002", "provider_state": "preempted", "provider_status": "stopped",
        "provider_state_message": "vast.ai instance 9000002 is stopped by the market (a bid instance outbid)",
        "vastai": {"id": 9000002, "is_bid": True}}}
    # the tick's one task loops over the hosts it asks about; its registered result is every host's
    registered = {"changed": False, "results": [
        dict(fresh, item="read"),
        {"item": "failed", "failed": False, "msg": "vastai: no API key. Set the environment variable VAST_API_KEY",
         "error_kind": "no_key"},
        {"item": "other", "facts": dict(fresh["facts"], provider_state="running")}]}
    hostvars = dict((name, dict(rented, provider_now=registered)) for name in ("read", "failed", "skipped"))
    result = run_action(ActionModule, args(tmp_path, phase="decide"), task_vars=play(hostvars, tmp_path))
    decisions = result["decisions"]
    assert decisions["read"]["state"] == "preempted", decisions["read"]
    assert "preempted" not in decisions["failed"]["state"] and "preempted" not in decisions["skipped"]["state"]
    assert decisions["failed"]["state"] == decisions["skipped"]["state"], decisions
    assert result["records_dir"] == str(tmp_path)


def test_a_replaced_box_carries_the_records_of_every_job_its_launches_wrote(tmp_path):
    """A Lambda box the provider preempted (never given back: replaced at once): its decision carries each job's
    launch record (launch_record_dir/<host>/<job>.json), the share of the queue the box ran; a link planted there
    is refused, not followed; a host without records has none."""
    box = {"autopilot_probe": {"unreachable": True, "msg": "ssh: connect to host 192.0.2.9 port 22: timed out"},
           "autopilot_replace": True, "provider": "lambda", "provider_id": "i-1", "provider_state": "preempted",
           "trainer_profile": "lambda", "trainer_meter_stop": {"verb": "terminate", "how": "terminate",
                                                               "reversible": False}}
    (tmp_path / "rent-sweep-a.json").write_text(json.dumps({
        "rent": "sweep-a", "provider": "lambda", "count": 1, "spec": {"gpu": "gpu_1x_h100_pcie", "gpu_count": 1},
        "boxes": [{"host": "old", "id": "i-1", "outcome": "kept"}, {"host": "bare", "id": "i-2", "outcome": "kept"}]}))
    records = tmp_path / "launches" / "old"
    records.mkdir(parents=True)
    for name, items in (("train", ["000", "002"]), ("exp2", ["001"])):
        (records / (name + ".json")).write_text(json.dumps({
            "launch_name": name, "launch_src": "/home/me/proj", "launch_command": "python train.py",
            "_launch_recorded": {"version": 1, "host": "old", "job": name, "queue_length": 3,
                                 "items": [{"index": int(i), "item": i, "host": "old", "arg": i} for i in items]}}))
    secret = tmp_path / "elsewhere.json"
    secret.write_text(json.dumps({"launch_name": "planted"}))
    (records / "planted.json").symlink_to(secret)
    hostvars = {"old": dict(box), "bare": dict(box, provider_id="i-2")}
    result = run_action(ActionModule, args(tmp_path, phase="decide", launch_record_dir=str(tmp_path / "launches")),
                        task_vars=play(hostvars, tmp_path))
    old = result["decisions"]["old"]
    assert old["act"] == "replace", old
    assert sorted(old["relaunch"]["jobs"]) == ["exp2", "train"]
    assert [r["item"] for r in old["relaunch"]["jobs"]["train"]["items"]] == ["000", "002"]
    assert old["relaunch"]["dir"] == str(records)
    assert [line.split(" ")[0] for line in old["relaunch"]["refused"]] == [str(records / "planted.json")]
    bare = result["decisions"]["bare"]
    assert bare["act"] == "replace" and bare["relaunch"]["jobs"] == {} and bare["relaunch"]["refused"] == []
    # another launch_record_dir: read there (nothing)
    moved = run_action(ActionModule, args(tmp_path, phase="decide", launch_record_dir=str(tmp_path / "none")),
                       task_vars=play(hostvars, tmp_path))
    assert moved["decisions"]["old"]["relaunch"]["jobs"] == {}
