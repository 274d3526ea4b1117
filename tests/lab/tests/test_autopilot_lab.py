"""The autopilot on the lab fleet (issue 11), as a user runs it: launch.yml once, then only
`ansible-playbook playbooks/autopilot.yml` ticks, with the opt-ins as extra vars.

* Every job under the run directory is judged (issue 28): two experiments on one box (launch_name train and exp2)
  with an idle GPU are never parked while either is alive, and parked exactly once when both are done; a box parked
  and then given a new queue that the platform kills by a restart before the next tick is healed, because the
  job's own records show a launch after the park.
* A host rebooted mid-item is healed by ticks alone: the queue completes there, the interrupted item ran twice and
  every other item once (on both hosts).
* An item that crashes the same way twice is restarted once, then escalated, and never started a third time.
* A host whose queue is done and verified durable gets exactly one meter-stop after the idle window (seeded
  history, a 30-minute window, no sleeping), with a receipt; a host with one unsynced file gets none, and the
  message about it names the file.
* Five ticks over an unchanged fleet send no message; a new crash sends exactly one. A tick where nothing needs
  action is one SSH execution per host.
Messages go to the loopback webhook receiver (tests/lab/providers/webhook_receiver.py).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from labhelpers import LAB, REPO, SshCounter, needs_root, started_fleet
from lab_teardown_support import fill_inodes
from test_launch_lab import TRAIN_SH, read_json, runs, wait_finished
from test_launch_lab import launch as launch_yml

sys.path.insert(0, os.path.join(LAB, "providers"))
from webhook_receiver import WebhookReceiver  # noqa: E402  pylint: disable=wrong-import-position
import fake_api  # noqa: E402  pylint: disable=wrong-import-position

pytestmark = needs_root
VENV_BIN = os.path.join(REPO, ".venv", "bin")
FLEET = os.path.join(LAB, "fleet")
DURABLE_INODES = 300
SINKS = [{"type": "webhook", "name": "lab", "url_env": "LAB_HOOK_URL"}]
SHUTDOWN = ["shutdown", "-h", "now"]


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "4", "--platform", "lab-03=autodl",
                       "--region", "lab-03=B", "--platform", "lab-04=runpod",
                       "--durable-inodes", str(DURABLE_INODES)) as lab:
        yield lab


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    root = tmp_path_factory.mktemp("src")
    (root / "train.sh").write_text(TRAIN_SH)
    return root


@pytest.fixture
def hook():
    receiver = WebhookReceiver().start()
    yield receiver
    receiver.stop()


def tick(fleet, cwd, hook, *args, failing=False):
    """One tick, as the README writes it: ``ansible-playbook -i INV playbooks/autopilot.yml ARGS`` from ``cwd``
    (where reports/ lands) -> (process, the tick's JSON report); it must succeed, or fail when ``failing``."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")),
               LAB_HOOK_URL=(hook.url + "/hook") if hook else "http://127.0.0.1:9/none")
    env.update(getattr(fleet, "extra_env", {}))
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", fleet.inventory_path,
                           os.path.join(REPO, "playbooks", "autopilot.yml"), *args], capture_output=True, text=True,
                          env=env, cwd=str(cwd), stdin=subprocess.DEVNULL, timeout=600, check=False)
    assert (proc.returncode != 0) == failing, proc.stdout[-6000:] + proc.stderr[-3000:]
    report = json.loads((cwd / "reports" / "autopilot.json").read_text())
    return proc, report


def launch(fleet, src, *args, extra=None, **kwargs):
    """launch.yml as the README runs it. These queues' items take a second or two, so they are launched with
    ``launch_min_seconds: 0``, unless a test gives it: a shorter run is otherwise item_too_fast and never done."""
    return launch_yml(fleet, src, *args, extra=dict({"launch_min_seconds": 0}, **(extra or {})), **kwargs)


def by_host(report):
    return dict((row["host"], row) for row in report["hosts"])


def sent(hook):
    """Every event the webhook received, in order."""
    return [event for message in hook.messages("/hook") for event in (message["body"] or {}).get("events") or []]


def wait_for(predicate, timeout=90, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise AssertionError("timed out waiting for %s" % what)


def item_runs(fleet, host):
    return sorted(line.split()[0] for line in runs(fleet, host) if line.strip())


def fresh(fleet, *hosts):
    """A box with no job of an earlier test on it (the autopilot judges every job under the run directory)."""
    for host in hosts:
        fleet.ssh(host, "rm -rf ~/.trainer/jobs ~/launch-runs.log")


def test_a_host_rebooted_mid_item_is_healed_by_ticks_alone(fleet, src, tmp_path, hook):
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    flag = "/root/go-heal"
    fresh(fleet, "lab-01", "lab-02")
    # lab-01 runs 000 and 002, lab-02 runs 001 and 003; item 000 waits for a flag, so the reboot hits it mid-item
    launch(fleet, src, "-l", "lab-01,lab-02", extra={"launch_queue": ["h0 --wait %s" % flag, "h1", "h2", "h3"]})
    wait_for(lambda: "000" in item_runs(fleet, "lab-01"), what="item 000 to start on lab-01")
    assert wait_finished(fleet, "lab-02", "train")["exit_code"] == 0
    subprocess.run([FLEET, "reboot", "lab-01"], env=dict(os.environ, LAB_STATE_DIR=fleet.state), check=True,
                   capture_output=True)
    assert read_json(fleet, "lab-01", "~/.trainer/jobs/train/items/000/status.json") is None
    fleet.ssh("lab-01", "touch %s" % flag)  # the second run of 000 goes through

    opt = ["-l", "lab-01,lab-02", "-e", "autopilot_heal=true autopilot_notify=true",
           "-e", json.dumps({"autopilot_notify_sinks": SINKS})]
    # --check prints the decision and acts on nothing: no restart, no history, no message
    proc, report = tick(fleet, laptop, hook, *opt, "--check")
    row = by_host(report)["lab-01"]
    assert report["check_mode"] and (row["action"], row["acted"]) == ("heal", False)
    assert "lab-01: gone:000, heal: job train is gone at 0/2 items" in proc.stdout
    assert not (laptop / "reports" / "history").exists() and sent(hook) == []
    time.sleep(1)
    assert item_runs(fleet, "lab-01") == ["000"]

    _proc, report = tick(fleet, laptop, hook, *opt)
    rows = by_host(report)
    assert (rows["lab-01"]["action"], rows["lab-01"]["item"], rows["lab-01"]["ok"]) == ("heal", "000", True)
    assert "interrupted" in rows["lab-01"]["reason"]
    assert rows["lab-02"]["action"] == "none"
    assert wait_finished(fleet, "lab-01", "train")["exit_code"] == 0
    _proc, report = tick(fleet, laptop, hook, *opt)
    assert by_host(report)["lab-01"]["state"] == "done"

    # the queue completed on lab-01; the interrupted item ran twice, every other item once
    assert item_runs(fleet, "lab-01") == ["000", "000", "002"]
    assert item_runs(fleet, "lab-02") == ["001", "003"]
    for item in ("000", "002"):
        status = read_json(fleet, "lab-01", "~/.trainer/jobs/train/items/%s/status.json" % item)
        assert status["state"] == "done" and status["unsynced"] == []
    kinds = [(event["host"], event["kind"]) for event in sent(hook)]
    assert kinds == [("lab-01", "healed"), ("lab-02", "queue_done"), ("lab-01", "queue_done")]
    history = [json.loads(line) for line in (laptop / "reports" / "history" / "lab-01.jsonl").read_text().splitlines()]
    assert [record["ap"]["action"] for record in history] == ["heal", "none"]
    assert history[0]["ap"]["reason"].startswith("job train is gone at 0/2 items")


def test_the_same_crash_twice_is_restarted_once_then_escalated(fleet, src, tmp_path, hook):
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    fresh(fleet, "lab-02")
    launch(fleet, src, "-l", "lab-02", extra={"launch_name": "crashy", "launch_queue": ["c0 --fail"]})
    assert wait_finished(fleet, "lab-02", "crashy")["exit_code"] != 0
    opt = ["-l", "lab-02", "-e", "autopilot_heal=true autopilot_notify=true",
           "-e", json.dumps({"autopilot_notify_sinks": SINKS})]
    _proc, report = tick(fleet, laptop, hook, *opt)
    row = by_host(report)["lab-02"]
    assert (row["action"], row["ok"]) == ("heal", True) and "crashed (exit 3; traceback" in row["reason"]
    wait_for(lambda: item_runs(fleet, "lab-02") == ["000", "000"], what="the second start of 000")
    wait_for(lambda: (read_json(fleet, "lab-02", "~/.trainer/jobs/crashy/status.json") or {}).get("exit_code") == 1,
             what="the second crash")
    for _tick in range(2):
        _proc, report = tick(fleet, laptop, hook, *opt)
        row = by_host(report)["lab-02"]
        assert (row["action"], row["state"]) == ("escalate", "escalated:000")
        assert "crashed twice the same way" in row["reason"]
    time.sleep(2)
    assert item_runs(fleet, "lab-02") == ["000", "000"]  # never a third start
    assert [event["kind"] for event in sent(hook)] == ["healed", "escalated"]


def seed_idle_history(laptop, host, now, minutes=40):
    """Patrol's records of an idle box over the last ``minutes`` (its GPUs at 0 %), as patrol ticks write them."""
    history = laptop / "reports" / "history"
    history.mkdir(parents=True, exist_ok=True)
    with open(history / ("%s.jsonl" % host), "a", encoding="utf-8") as handle:
        for ago in range(minutes, 0, -5):
            handle.write(json.dumps({"t": int(now - ago * 60), "v": 1, "kind": "patrol", "host": host,
                                     "gpu_util": 0.0, "gpu_mem": 0.0}) + "\n")


def test_done_and_durable_is_parked_once_and_unsynced_never(fleet, src, tmp_path, hook):
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    flag = "/root/go-park"
    fresh(fleet, "lab-01", "lab-03")
    # lab-01 (region A) runs 000; lab-03 (region B) runs 001, which waits while its durable FS is filled up
    launch(fleet, src, "-l", "lab-01,lab-03", extra={"launch_name": "fin", "launch_queue": ["p0", "p1 --wait %s" % flag]})
    assert wait_finished(fleet, "lab-01", "fin")["exit_code"] == 0
    region_b = os.path.join(fleet.state, "regions", "autodl-B")
    filler = fill_inodes(region_b, DURABLE_INODES)
    try:
        fleet.ssh("lab-03", "touch %s" % flag)
        assert wait_finished(fleet, "lab-03", "fin")["exit_code"] == 1
        now = time.time()
        for host in ("lab-01", "lab-03"):
            seed_idle_history(laptop, host, now)
        opt = ["-l", "lab-01,lab-03", "-e", "autopilot_autostop=true autopilot_notify=true "
               "autopilot_idle_minutes=30", "-e", json.dumps({"autopilot_notify_sinks": SINKS})]
        _proc, report = tick(fleet, laptop, hook, *opt)
        rows = by_host(report)
        assert (rows["lab-01"]["action"], rows["lab-01"]["ok"], rows["lab-01"]["state"]) == ("park", True, "parked")
        assert re.search(r"GPUs idle for 4\d min", rows["lab-01"]["reason"])  # from the seeded history
        assert rows["lab-03"]["action"] == "report" and rows["lab-03"]["wanted"] == "retry_sync"
        assert "best.pt" in rows["lab-03"]["reason"] and "nothing is stopped" in rows["lab-03"]["reason"]
        with open(rows["lab-01"]["receipt"], encoding="utf-8") as handle:
            receipt = json.load(handle)
        assert (receipt["host"], receipt["verb"], receipt["command"], receipt["by"]) == (
            "lab-01", "power_off", SHUTDOWN, "autopilot")
        events = sent(hook)
        assert sorted((e["host"], e["kind"]) for e in events) == [("lab-01", "parked"), ("lab-03", "new_fail")]
        assert "best.pt" in [e for e in events if e["host"] == "lab-03"][0]["text"]
        for _tick in range(2):  # later ticks: nothing more is stopped, nothing more is sent
            _proc, report = tick(fleet, laptop, hook, *opt)
            assert by_host(report)["lab-01"]["state"] == "parked" and by_host(report)["lab-01"]["action"] == "none"
        assert len(sent(hook)) == 2
        assert [line["argv"] for line in fleet.meter("lab-01")] == [SHUTDOWN]
        assert fleet.meter("lab-03") == []
    finally:
        if filler:
            shutil.rmtree(filler)


def test_an_item_that_ends_too_fast_is_never_a_done_queue(fleet, src, tmp_path, hook):
    """An item that exits 0 after a second or two with launch_min_seconds 30 did not train: with an idle GPU and the
    idle window passed, the autopilot does not park the box, and says why."""
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    fresh(fleet, "lab-01")
    launch(fleet, src, "-l", "lab-01", extra={"launch_name": "quick", "launch_queue": ["f0"],
                                              "launch_min_seconds": 30})
    assert wait_finished(fleet, "lab-01", "quick")["exit_code"] == 0
    seed_idle_history(laptop, "lab-01", time.time())
    stops = len(fleet.meter("lab-01"))  # an earlier test of this module parked lab-01 once
    opt = ["-l", "lab-01", "-e", "autopilot_autostop=true autopilot_idle_minutes=30"]
    _proc, report = tick(fleet, laptop, hook, *opt)
    row = by_host(report)["lab-01"]
    assert row["action"] != "park" and "too_fast" in row["state"], row
    assert len(fleet.meter("lab-01")) == stops


def test_an_unchanged_fleet_sends_nothing_and_a_new_crash_one_message(fleet, src, tmp_path, hook):
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    flag = "/root/go-steady"
    fresh(fleet, "lab-02")
    launch(fleet, src, "-l", "lab-02", extra={"launch_name": "steady", "launch_queue": ["s0 --wait %s --fail" % flag]})
    wait_for(lambda: "000" in [line.split()[0] for line in runs(fleet, "lab-02") if "s0" in line],
             what="the steady item to start")
    opt = ["-l", "lab-02", "-e", "autopilot_notify=true",
           "-e", json.dumps({"autopilot_notify_sinks": SINKS})]
    counter = SshCounter(tmp_path)
    fleet.extra_env = counter.env
    try:
        for _tick in range(5):
            _proc, report = tick(fleet, laptop, hook, *opt)
            assert by_host(report)["lab-02"]["state"] == "running"
        # nothing needed action: one SSH execution per host and tick (the probe)
        assert counter.per_host(fleet, ["lab-02"]) == {"lab-02": 5}
    finally:
        fleet.extra_env = {}
    assert sent(hook) == []
    fleet.ssh("lab-02", "touch %s" % flag)  # the item now crashes
    assert wait_finished(fleet, "lab-02", "steady")["exit_code"] == 1
    for _tick in range(2):
        _proc, report = tick(fleet, laptop, hook, *opt)
        assert by_host(report)["lab-02"]["state"] == "gone:000"
    events = sent(hook)
    assert [(e["host"], e["kind"]) for e in events] == [("lab-02", "new_fail")]
    assert "000 crashed" in events[0]["text"] and "autopilot_heal is off" in events[0]["text"]


def test_a_wrong_setting_is_recorded_and_fails_the_tick(fleet, tmp_path, hook):
    """A value the argument spec's type admits but the autopilot refuses (autopilot_idle_minutes=0): nothing is
    healed or stopped on the host, the state is recorded, and the tick exits non-zero with the reason, so that a
    timer's log or a CI job sees it (nothing is notified: the host's settings, autopilot_notify among them, are the
    ones refused)."""
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    proc, report = tick(fleet, laptop, hook, "-l", "lab-03", "-e", "autopilot_notify=true autopilot_idle_minutes=0",
                        "-e", json.dumps({"autopilot_notify_sinks": SINKS}), failing=True)
    assert by_host(report)["lab-03"]["state"] == "fail:config_error"
    flat = " ".join((proc.stdout + proc.stderr).split())
    assert ("autopilot settings refused on 1 host(s): lab-03: autopilot_idle_minutes must be a whole number of at "
            "least 1, got '0'") in flat, flat[-3000:]   # -e key=value: a string
    assert sent(hook) == []


def test_a_vanished_host_is_reported_once_and_recovers(fleet, tmp_path, hook):
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    fresh(fleet, "lab-03")
    opt = ["-l", "lab-03", "-e", "autopilot_notify=true ansible_timeout=5",
           "-e", json.dumps({"autopilot_notify_sinks": SINKS})]
    state_env = dict(os.environ, LAB_STATE_DIR=fleet.state)
    _proc, report = tick(fleet, laptop, hook, *opt)
    assert by_host(report)["lab-03"]["state"] == "idle"
    vanish = subprocess.run([FLEET, "vanish", "lab-03"], env=state_env, capture_output=True, text=True, check=False)
    assert vanish.returncode == 0, vanish.stderr
    try:
        for _tick in range(2):
            _proc, report = tick(fleet, laptop, hook, *opt)
            row = by_host(report)["lab-03"]
            assert (row["state"], row["action"]) == ("unreachable", "none")
            assert "nothing is healed or stopped" in row["reason"]
    finally:
        subprocess.run([FLEET, "revive", "lab-03"], env=state_env, check=True, capture_output=True)
    _proc, report = tick(fleet, laptop, hook, *opt)
    assert by_host(report)["lab-03"]["state"] == "idle"
    assert [(e["host"], e["kind"]) for e in sent(hook)] == [("lab-03", "unreachable"), ("lab-03", "recovered")]


def test_a_runpod_box_is_parked_through_the_api_stop_never_terminated(fleet, src, tmp_path, hook, monkeypatch):
    """RunPod's meter-stop verb destroys; its trainer_park is the API's stop (remote_gpu.trainer.instance), which
    keeps the volume. Without the key on the controller it is not parked and the reason names the variable."""
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    fresh(fleet, "lab-04")
    launch(fleet, src, "-l", "lab-04", extra={"launch_name": "rp", "launch_queue": ["r0"]})
    assert wait_finished(fleet, "lab-04", "rp")["exit_code"] == 0
    seed_idle_history(laptop, "lab-04", time.time())
    pod = fake_api.runpod_pod(4, fleet.hosts["lab-04"]["ansible_host"], 22, name="lab-04")  # lab-04's RUNPOD_POD_ID
    fake = fake_api.FakeAPI("runpod", "fake-key", [pod]).start()
    monkeypatch.delenv("RUNPOD_API_KEY", raising=False)
    try:
        opt = ["-l", "lab-04", "-e", "autopilot_autostop=true autopilot_idle_minutes=30",
               "-e", json.dumps({"runpod_pod_id": pod["id"], "provider_api_url": fake.url})]
        _proc, report = tick(fleet, laptop, hook, *opt)
        row = by_host(report)["lab-04"]
        assert (row["action"], row["state"]) == ("escalate", "idle_manual")
        assert "RUNPOD_API_KEY is not set on the controller" in row["reason"]
        assert fake.api_requests() == []
        fleet.extra_env = {"RUNPOD_API_KEY": "fake-key"}
        try:
            _proc, report = tick(fleet, laptop, hook, *opt)
        finally:
            fleet.extra_env = {}
        row = by_host(report)["lab-04"]
        assert (row["action"], row["via"], row["ok"], row["state"]) == ("park", "api", True, "parked"), row["reason"]
        assert fake.find(pod["id"])["desiredStatus"] != "RUNNING", (fake.api_requests(), row)
        verbs = [(r["method"], r["path"]) for r in fake.api_requests() if r["method"] != "GET"]
        assert verbs == [("POST", "/v1/pods/%s/stop" % pod["id"])]  # stop, never DELETE (terminate)
        with open(row["receipt"], encoding="utf-8") as handle:
            receipt = json.load(handle)
        assert (receipt["verb"], receipt["api"]["provider"], receipt["meter_stop_verb"]) == (
            "stop", "runpod", "terminate")
        assert fleet.meter("lab-04") == []
    finally:
        fake.stop()


def lines_of(fleet, host, name):
    """The runs of the items whose command names ``name`` (train.sh NAME) on ``host``."""
    return [line for line in runs(fleet, host) if len(line.split()) > 1 and line.split()[1] == name]


def test_two_experiments_on_one_box_no_park_while_any_job_is_alive_then_exactly_one(fleet, src, tmp_path, hook):
    """Issue 28: launch_name train and exp2 on one AutoDL box, the GPU emulator idle (h100-idle) all along, as in a
    CPU-bound step: no park while either job is alive or starting, exactly one park once both are done and durable
    and the idle window has passed. Live jobs are never started a second time."""
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    fresh(fleet, "lab-02")
    go_train, go_exp2 = "/root/go-two-train", "/root/go-two-exp2"
    parks = len(fleet.meter("lab-02"))  # the box's meter log outlives the tests
    fleet.ssh("lab-02", "rm -f %s %s" % (go_train, go_exp2))
    launch(fleet, src, "-l", "lab-02", extra={"launch_queue": ["t0 --wait %s" % go_train]})
    launch(fleet, src, "-l", "lab-02", extra={"launch_name": "exp2",
                                              "launch_queue": ["e0 --epochs 3 --wait %s" % go_exp2]})
    wait_for(lambda: lines_of(fleet, "lab-02", "t0") and lines_of(fleet, "lab-02", "e0"), what="both jobs to start")
    seed_idle_history(laptop, "lab-02", time.time())  # 40 min of an idle GPU: only the jobs can stop a park
    opt = ["-l", "lab-02", "-e", "autopilot_autostop=true autopilot_heal=true autopilot_notify=true "
           "autopilot_idle_minutes=30", "-e", json.dumps({"autopilot_notify_sinks": SINKS})]

    _proc, report = tick(fleet, laptop, hook, *opt)
    row = by_host(report)["lab-02"]
    assert (row["action"], row["state"]) == ("none", "running"), row["reason"]
    assert sorted((job["job"], job["state"]) for job in row["jobs"]) == [("exp2", "running"), ("train", "running")]
    assert "job train running" in row["reason"] and "job exp2 running" in row["reason"]

    fleet.ssh("lab-02", "touch %s" % go_train)
    assert wait_finished(fleet, "lab-02", "train")["exit_code"] == 0
    for _tick in range(2):  # train done and durable, exp2 alive at its last epoch: never parked, never restarted
        _proc, report = tick(fleet, laptop, hook, *opt)
        row = by_host(report)["lab-02"]
        assert (row["action"], row["state"], row["job"]) == ("none", "running", "exp2"), row["reason"]
        assert "job train: queue done" in row["reason"] and "job exp2 running" in row["reason"]
    assert len(fleet.meter("lab-02")) == parks

    fleet.ssh("lab-02", "touch %s" % go_exp2)
    assert wait_finished(fleet, "lab-02", "exp2")["exit_code"] == 0
    _proc, report = tick(fleet, laptop, hook, *opt)
    row = by_host(report)["lab-02"]
    assert (row["action"], row["ok"], row["state"]) == ("park", True, "parked"), row["reason"]
    assert "every queue done (jobs " in row["reason"] and "every file durable, no job alive" in row["reason"]
    assert re.search(r"GPUs idle for 4\d min", row["reason"])
    with open(row["receipt"], encoding="utf-8") as handle:
        assert json.load(handle)["jobs"] == ["exp2", "train"]  # the receipt names the jobs it judged
    for _tick in range(2):
        _proc, report = tick(fleet, laptop, hook, *opt)
        assert (by_host(report)["lab-02"]["state"], by_host(report)["lab-02"]["action"]) == ("parked", "none")
    assert [line["argv"] for line in fleet.meter("lab-02")[parks:]] == [SHUTDOWN]  # exactly one park
    assert len(lines_of(fleet, "lab-02", "t0")) == 1 and len(lines_of(fleet, "lab-02", "e0")) == 1
    kinds = [(e["host"], e["kind"]) for e in sent(hook)]
    assert kinds == [("lab-02", "queue_done"), ("lab-02", "parked")], kinds
    history = [json.loads(line) for line in (laptop / "reports" / "history" / "lab-02.jsonl").read_text().splitlines()]
    judged = [record["ap"]["jobs"] for record in history if "jobs" in record.get("ap", {})]
    assert sorted(judged[0]) == ["exp2", "train"]  # each job's state is kept per tick


def test_a_parked_box_given_a_new_queue_then_restarted_by_the_platform_is_healed(fleet, src, tmp_path, hook):
    """Issue 28, item 4: park a box, launch a new queue on it and let the platform restart it before the next
    tick. The box's own records show a launch after the park, so the park ends: the ticks heal the new job and its
    queue finishes."""
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    fresh(fleet, "lab-01")
    flag = "/root/go-after-park"
    fleet.ssh("lab-01", "rm -f %s" % flag)
    parks = len(fleet.meter("lab-01"))  # the box's meter log outlives the tests
    launch(fleet, src, "-l", "lab-01", extra={"launch_queue": ["b0"]})
    assert wait_finished(fleet, "lab-01", "train")["exit_code"] == 0
    seed_idle_history(laptop, "lab-01", time.time())
    opt = ["-l", "lab-01", "-e", "autopilot_autostop=true autopilot_heal=true autopilot_idle_minutes=30"]
    _proc, report = tick(fleet, laptop, hook, *opt)
    assert by_host(report)["lab-01"]["state"] == "parked"
    assert len(fleet.meter("lab-01")) == parks + 1

    # started again by its user, a new queue, and the platform restarts the box before any tick
    launch(fleet, src, "-l", "lab-01", extra={"launch_name": "exp3", "launch_queue": ["n0 --wait %s" % flag, "n1"]})
    wait_for(lambda: lines_of(fleet, "lab-01", "n0"), what="item 000 of exp3 to start")
    subprocess.run([FLEET, "reboot", "lab-01"], env=dict(os.environ, LAB_STATE_DIR=fleet.state), check=True,
                   capture_output=True)
    fleet.ssh("lab-01", "touch %s" % flag)

    _proc, report = tick(fleet, laptop, hook, *opt)
    row = by_host(report)["lab-01"]
    assert (row["action"], row["heal_jobs"], row["ok"]) == ("heal", ["exp3"], True), row["reason"]
    assert "the park of" in row["reason"] and "job exp3 started at" in row["reason"]
    assert "job exp3 is gone at 0/2 items" in row["reason"]
    assert wait_finished(fleet, "lab-01", "exp3")["exit_code"] == 0
    for item in ("000", "001"):
        status = read_json(fleet, "lab-01", "~/.trainer/jobs/exp3/items/%s/status.json" % item)
        assert status["state"] == "done" and status["unsynced"] == []
    assert len(lines_of(fleet, "lab-01", "n0")) == 2 and len(lines_of(fleet, "lab-01", "n1")) == 1
    assert len(lines_of(fleet, "lab-01", "b0")) == 1  # the finished job was never started again
    # done, durable and still idle: parked again, once
    _proc, report = tick(fleet, laptop, hook, *opt)
    row = by_host(report)["lab-01"]
    assert (row["action"], row["state"]) == ("park", "parked") and "jobs exp3, train" in row["reason"], row["reason"]
    assert [line["argv"] for line in fleet.meter("lab-01")[parks:]] == [SHUTDOWN, SHUTDOWN]
