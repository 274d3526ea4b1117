"""Issue 31, preemption as an event: the autopilot over plugin-only inventories (vastai.yml, lambda_cloud.yml
against the fake APIs, include_states: [preempted]) whose instances are lab hosts.

* A vast.ai bid instance that is outbid mid-item (the fake reports it preempted; the lab reboots the box, as the
  market's pause kills its job) is reported once as preempted, never as unreachable; when the fake reports it
  running again, the queue finishes there (healed by the tick, or resumed by vast's onstart, which the restart runs
  again), the interrupted item run twice.
* A Lambda instance that Lambda preempts is escalated once, with the commands to re-rent and relaunch.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from labhelpers import LAB, REPO, needs_root, started_fleet
from test_launch_lab import TRAIN_SH, runs, wait_finished
from test_launch_lab import launch as launch_yml
# hook is a fixture: pytest finds it by name in this module
from test_autopilot_lab import hook, wait_for  # noqa: F401  pylint: disable=unused-import

sys.path.insert(0, os.path.join(LAB, "providers"))
import fake_api  # noqa: E402  pylint: disable=wrong-import-position

pytestmark = needs_root
VENV_BIN = os.path.join(REPO, ".venv", "bin")
FLEET = os.path.join(LAB, "fleet")
KEY = "LABKEY-31-preempted-never-shown"
SINKS = [{"type": "webhook", "name": "lab", "url_env": "LAB_HOOK_URL"}]


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "2", "--platform", "lab-01=vastai",
                       "--platform", "lab-02=lambda") as lab:
        yield lab


def plugin_inventory(fleet, where, provider, fake):
    allvars = fleet.inventory["all"]["vars"]
    (where / "group_vars").mkdir(exist_ok=True)
    (where / "group_vars" / "all.yml").write_text(json.dumps({
        "ansible_user": "root", "ansible_ssh_private_key_file": allvars["ansible_ssh_private_key_file"],
        "ansible_ssh_common_args": " ".join(fleet.common)}))
    plugin = {"vastai": "vastai", "lambda": "lambda_cloud"}[provider]
    config = where / ("%s.yml" % plugin)
    config.write_text("plugin: remote_gpu.trainer.%s\napi_url: %s\nretry_budget: 3\ninclude_states: [preempted]\n"
                      % (plugin, fake.url))
    return config


def tick(config, cwd, hook, *args):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")), LAB_HOOK_URL=hook.url + "/hook",
               VAST_API_KEY=KEY, LAMBDA_API_KEY=KEY)
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", str(config),
                           os.path.join(REPO, "playbooks", "autopilot.yml"), *args], capture_output=True, text=True,
                          env=env, cwd=str(cwd), stdin=subprocess.DEVNULL, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert (proc.stdout + proc.stderr).count(KEY) == 0
    report = json.loads((cwd / "reports" / "autopilot.json").read_text())
    return proc, dict((row["host"], row) for row in report["hosts"])


def sent(hook):
    return [(event["host"], event["kind"]) for message in hook.messages("/hook")
            for event in (message["body"] or {}).get("events") or []]


def test_an_outbid_vast_bid_instance_is_one_preempted_event_then_healed_when_it_is_back(fleet, tmp_path, hook):
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.sh").write_text(TRAIN_SH)
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    flag = "/root/go-preempted"
    fleet.ssh("lab-01", "rm -rf ~/.trainer/jobs ~/launch-runs.log %s" % flag)
    launch_yml(fleet, src, "-l", "lab-01", extra={"launch_min_seconds": 0,
                                                  "launch_queue": ["p0 --wait %s" % flag, "p1"]})
    wait_for(lambda: any(line.startswith("000") for line in runs(fleet, "lab-01")), what="item 000 to start")
    addr, port = fleet.hosts["lab-01"]["ansible_host"], int(fleet.hosts["lab-01"]["ansible_port"])
    outbid = fake_api.vastai_instance(1, addr, port, label="lab-01", status="stopped", bid=True, intended="running")
    fake = fake_api.FakeAPI("vastai", KEY, [outbid]).start()
    try:
        config = plugin_inventory(fleet, tmp_path, "vastai", fake)
        # the market pauses the box: its job dies with it
        subprocess.run([FLEET, "reboot", "lab-01"], env=dict(os.environ, LAB_STATE_DIR=fleet.state), check=True,
                       capture_output=True)
        opt = ["-l", "lab-01", "-e", "autopilot_heal=true autopilot_notify=true ansible_timeout=5",
               "-e", json.dumps({"autopilot_notify_sinks": SINKS})]
        for _tick in range(2):
            _proc, rows = tick(config, laptop, hook, *opt)
            assert (rows["lab-01"]["state"], rows["lab-01"]["action"]) == ("preempted", "none"), rows["lab-01"]
            assert "outbid" in rows["lab-01"]["reason"] and "durable checkpoint" in rows["lab-01"]["reason"]
        assert sent(hook) == [("lab-01", "preempted")]  # once, never "unreachable"
        # the bid wins again: the fake reports it running at its address
        fake.records = [fake_api.vastai_instance(1, addr, port, label="lab-01", bid=True)]
        fleet.ssh("lab-01", "touch %s" % flag)
        _proc, rows = tick(config, laptop, hook, *opt)
        # vast's profile detaches with onstart, which the restart runs again: the queue may already have resumed by
        # itself; else the tick heals it
        assert rows["lab-01"]["action"] in ("heal", "none"), rows["lab-01"]
        assert rows["lab-01"]["action"] == "none" or (rows["lab-01"]["item"], rows["lab-01"]["ok"]) == ("000", True)
        assert wait_finished(fleet, "lab-01", "train")["exit_code"] == 0
        _proc, rows = tick(config, laptop, hook, *opt)
        assert rows["lab-01"]["state"] == "done"
    finally:
        fake.stop()
    kinds = sent(hook)
    assert kinds[0] == ("lab-01", "preempted") and kinds.count(("lab-01", "preempted")) == 1
    assert ("lab-01", "recovered") in kinds and ("lab-01", "queue_done") in kinds
    assert ("lab-01", "unreachable") not in kinds
    assert sorted(line.split()[0] for line in runs(fleet, "lab-01") if line.strip()) == ["000", "000", "001"]


def test_a_preempted_lambda_instance_is_escalated_once_with_the_relaunch_commands(fleet, tmp_path, hook):
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    record = fake_api.lambda_instance(2, fleet.hosts["lab-02"]["ansible_host"], name="lab-02", status="preempted",
                                      filesystem="lab")
    fake = fake_api.FakeAPI("lambda", KEY, [record]).start()
    try:
        config = plugin_inventory(fleet, tmp_path, "lambda", fake)
        opt = ["-l", "lab-02", "-e", "autopilot_heal=true autopilot_notify=true ansible_timeout=5",
               "-e", json.dumps({"autopilot_notify_sinks": SINKS})]
        for _tick in range(2):
            _proc, rows = tick(config, laptop, hook, *opt)
            row = rows["lab-02"]
            assert (row["state"], row["action"]) == ("preempted_escalated", "escalate"), row
            assert "does not come back" in row["reason"] and "remote_gpu.trainer.launch -l <new host>" in row["reason"]
            assert "/lambda/nfs/lab" in row["reason"] and "state=absent" in row["reason"]
    finally:
        fake.stop()
    assert sent(hook) == [("lab-02", "escalated")]
