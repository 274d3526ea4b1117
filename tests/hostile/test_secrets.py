"""Hostile inputs of issue 29 (secrets and trust, round three): secrets a provider echoes or a URL carries, files a
job directory plants, history files that block or never end, a listed directory that is a link, and the inputs
whose messages named the wrong cause (see conftest.py for the three expected outcomes).

Each row failed on the code before issue 29: a secret in the message, a file outside the job directory read, a
hang, a mode applied through a link, a traceback or a wrong cause; except the rows marked ``held before``, which
show a path that point 3 names (the pull roster) confined by a guard that was already there."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import socket
import stat
import subprocess
import sys
import time

import pytest
import yaml

import hostile
from hostile import Case

from ansible_collections.remote_gpu.trainer.plugins.action.autopilot_decide import ActionModule as AutopilotDecide
from ansible_collections.remote_gpu.trainer.plugins.action.fleet_report import ActionModule as FleetReport
from ansible_collections.remote_gpu.trainer.plugins.action.notify import ActionModule as Notify
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import profile_check
from ansible_collections.remote_gpu.trainer.plugins.modules import (
    env_audit, instance, job_status, pull_manifest, write_files)

REPO = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("fake_api", REPO / "tests" / "lab" / "providers" / "fake_api.py")
fake_api = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_api)

# Canaries: each is unique, so a hit anywhere names the leak.
KEY = "rpa_CANARYKEY0hostile0a1b2c3d4e5f"
URL_PASSWORD = "CANARY-url-password-71c3"
ECHOED = "sk-CANARYechoedtoken0123456789abcdef"
HF = "hf_CANARYhostileHFtoken0123456789"
SHADOW = "CANARY-shadow-line-9d1e"


class _Stopper:
    """A started fake in hostile.STARTED, ended after the test as the processes are (kill, wait)."""

    def __init__(self, fake):
        self.fake = fake

    def kill(self):
        self.fake.stop()

    def wait(self):
        return 0


def fake(provider, *faults):
    server = fake_api.FakeAPI(provider, KEY, fake_api.records_for(provider, [("198.51.100.1", 40001)])).start()
    server.inject(*faults)
    hostile.STARTED.append(_Stopper(server))
    return server


def without(*canaries):
    def check(result, _tmp):
        text = json.dumps(result, default=str)
        for canary in canaries:
            assert canary not in text, "%s leaked: %s" % (canary, text[:2000])
    return check


def instance_args(url, **extra):
    args = {"provider": "runpod", "id": "fakepod0001", "state": "stopped", "api_key": KEY, "api_url": url,
            "wait": False, "retry_budget": 60, "poll_interval": 0.05}
    args.update(extra)
    return args


def with_fault(*faults):
    def build(_tmp):
        return instance_args(fake("runpod", *faults).url)
    return build


DEEP = "[" * 100000 + "]" * 100000

SECRET_CASES = [
    # never retried: a retry would run the whole retry_budget (600 s), past the case's deadline (a hang)
    Case("instance: api_url with user:password@ is refused up front, never retried, never shown", instance,
         instance_args("http://canary:%s@127.0.0.1:9/v1" % URL_PASSWORD, retry_budget=600), "error",
         "user information", check=without(URL_PASSWORD, KEY), timeout=30),
    Case("instance: an HTTP 400 body echoing a token of a known shape (sk-...) is redacted", instance,
         with_fault({"status": 400, "raw": '{"error": "token %s is invalid for %s"}' % (ECHOED, HF)}), "error",
         "HTTP 400", check=without(ECHOED, HF, KEY)),
    Case("instance: an HTTP 400 body echoing the key itself is redacted", instance,
         with_fault({"status": 400, "raw": '{"error": "invalid api key %s"}' % KEY}), "error", "HTTP 400",
         check=without(KEY)),
    Case("instance: a body nested 100,000 deep is a malformed response, not a RecursionError", instance,
         with_fault({"raw": DEEP}), "error", "malformed response", check=without(KEY)),
]


def notify_userinfo(tmp):
    os.environ["HOSTILE29_HOOK_URL"] = "http://canary:%s@127.0.0.1:9/hook" % URL_PASSWORD
    return {"events": [{"host": "box1", "kind": "new_fail", "level": "FAIL", "text": "gone"}],
            "sinks": [{"type": "webhook", "url_env": "HOSTILE29_HOOK_URL"}]}


def notify_refused(result, _tmp):
    without(URL_PASSWORD)(result, _tmp)
    assert [f["sink"] for f in result["failures"]] == ["webhook#0"], result["failures"]
    assert "user information" in result["failures"][0]["error"], result["failures"]


def notify_echo(tmp):
    os.environ["HOSTILE29_CLOSED_URL"] = "http://127.0.0.1:9/hook"  # nothing listens: the payload is shown, not sent
    return {"events": [{"host": "box1", "kind": "new_fail", "level": "FAIL",
                        "text": "job gone: HF_TOKEN=%s rejected, Authorization: Bearer %s" % (HF, ECHOED)}],
            "sinks": [{"type": "webhook", "url_env": "HOSTILE29_CLOSED_URL", "timeout": 2}]}


def shown_redacted(result, tmp):
    assert result["messages"] and "payload" in result["messages"][0], result
    without(HF, ECHOED)(result, tmp)


NOTIFY_CASES = [
    Case("notify: a webhook URL with user:password@ is refused, never sent, never blamed on DNS", Notify,
         notify_userinfo, "ok", check=notify_refused),
    Case("notify: an event text carrying tokens (hf_..., Bearer ...) leaves redacted", Notify, notify_echo, "ok",
         check=shown_redacted),
]


# --- planted paths: a job directory names files outside it ------------------------------------------------------

def planted_meta(log_path_of, link=False, crash=False):
    """A job directory whose own, private (0600) job.meta.json names ``log_path_of(tmp, job_dir)``; the secret file
    lies outside the run directory (with ``crash``, it holds crash markers too)."""
    def build(tmp):
        secret = tmp / "shadow"
        secret.write_text("root:%s:19000:0:99999:7:::\n" % SHADOW + (
            "Traceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory\n" if crash else ""))
        job_dir = tmp / "jobs" / "j"
        job_dir.mkdir(parents=True)
        os.chmod(str(job_dir), 0o700)
        (job_dir / "job.log").write_text("epoch 1\n")
        target = log_path_of(tmp, job_dir)
        if link:
            os.symlink(str(secret), target)
        meta = job_dir / "job.meta.json"
        meta.write_text(json.dumps({"name": "j", "detach": "nohup", "log_path": str(target)}))
        os.chmod(str(meta), 0o600)
        return {"name": "j", "run_dir": str(tmp / "jobs"), "fail_on": "never"}
    return build


def no_byte_of_the_secret(code):
    def check(result, tmp):
        text = json.dumps(result, default=str)
        assert SHADOW not in text and "root:" not in text, text[:2000]
        assert code in [f["code"] for f in result["findings"]], result["findings"]
        assert result["jobs"][0]["log_path"] != str(tmp / "shadow")
        # what to do never points at the planted file ("Read the tail of /etc/shadow")
        assert not [f for f in result["findings"] if str(tmp / "shadow") in f.get("action", "")], result["findings"]
    return check


def no_crash_from_outside(result, tmp):
    no_byte_of_the_secret("job_meta_untrusted")(result, tmp)
    job = result["jobs"][0]
    assert not job["crash_markers"] and not job["earlier_crashes"], job
    assert "job_crashed" not in [f["code"] for f in result["findings"]], result["findings"]


def planted_oom_path(tmp):
    """A private meta whose oom_events_path names a file of the user's choosing (not a cgroup counter file)."""
    (tmp / "counters").write_text("oom_kill 99\n")
    job_dir = tmp / "jobs" / "j"
    job_dir.mkdir(parents=True)
    os.chmod(str(job_dir), 0o700)
    (job_dir / "job.log").write_text("epoch 1\n")
    (job_dir / "status.json").write_text(json.dumps({"item": None, "exit_code": 137, "started": "a", "finished": "b"}))
    meta = job_dir / "job.meta.json"
    meta.write_text(json.dumps({"name": "j", "oom_kill_at_launch": 0, "oom_events_path": str(tmp / "counters"),
                                "launched_epoch": time.time()}))
    os.chmod(str(meta), 0o600)
    return {"name": "j", "run_dir": str(tmp / "jobs"), "fail_on": "never"}


def no_counter_read(result, _tmp):
    job = result["jobs"][0]
    assert job["oom_kills_since_launch"] is None and job["vanished_reason"] != "oom_kill", job


def planted_synced(rel, link=False):
    """A job that launch recorded (queue.json, one item, its durable root), whose item status.json names a synced
    copy ``rel`` that leads out of the durable root (with ``link``: ``rel`` is a symlink to the secret)."""
    def build(tmp):
        secret = tmp / "shadow"
        secret.write_text("root:%s:19000:0:99999:7:::\n" % SHADOW)
        durable, job_dir = tmp / "fs" / "runs" / "exp", tmp / "jobs" / "j"
        (durable / "000").mkdir(parents=True)
        (job_dir / "items" / "000").mkdir(parents=True)
        os.chmod(str(job_dir), 0o700)
        if link:
            os.symlink(str(secret), str(durable / "000" / rel))
        (job_dir / "queue.json").write_text(json.dumps({
            "version": 1, "job": "j", "run_id": "exp", "host": "box1", "queue_length": 1, "best": ["*.pt"],
            "output_root": str(tmp / "out"), "durable_root": str(durable),
            "items": [{"item": "000", "arg": "", "output_dir": str(tmp / "out" / "000"),
                       "sync_dest": str(durable / "000")}]}))
        (job_dir / "items" / "000" / "status.json").write_text(json.dumps({
            "item": "000", "exit_code": 0, "state": "done", "sync_dest": str(durable / "000"),
            "synced": [{"path": rel, "bytes": secret.stat().st_size, "sha256": "0" * 64}]}))
        return {"job": "j", "run_dir": str(tmp / "jobs"), "manifest_path": str(tmp / "manifest.json")}
    return build


def nothing_of_the_secret(result, tmp):
    assert SHADOW not in json.dumps(result, default=str) and not (tmp / "manifest.json").exists(), result


PLANTED_CASES = [
    Case("pull_manifest: an item status naming a synced copy ../ out of the durable root is refused (held before)",
         pull_manifest, planted_synced("../../../../shadow"), "error", "'..' component", check=nothing_of_the_secret),
    Case("pull_manifest: a synced copy that links out of the durable root is refused (held before)", pull_manifest,
         planted_synced("best.pt", link=True), "error", "leads outside the root", check=nothing_of_the_secret),
    Case("job_status: a meta oom_events_path naming a file that is no cgroup counter file is not read", job_status,
         planted_oom_path, "ok", check=no_counter_read),
    Case("job_status: a private job.meta.json naming log_path outside the job directory (/etc/shadow)", job_status,
         planted_meta(lambda tmp, job_dir: tmp / "shadow"), "ok", check=no_byte_of_the_secret("job_meta_untrusted")),
    Case("job_status: a meta log_path that climbs out with .. is outside too", job_status,
         planted_meta(lambda tmp, job_dir: "%s/../../shadow" % job_dir), "ok",
         check=no_byte_of_the_secret("job_meta_untrusted")),
    Case("job_status: a meta log_path inside the job directory that links out of it is not followed", job_status,
         planted_meta(lambda tmp, job_dir: job_dir / "train.log", link=True), "ok",
         check=no_byte_of_the_secret("log_refused")),
    Case("job_status: crash markers in a file a meta log_path names outside the job directory are not reported",
         job_status, planted_meta(lambda tmp, job_dir: tmp / "shadow", crash=True), "ok", check=no_crash_from_outside),
]


# --- bounded, non-blocking reads: the autopilot's history -------------------------------------------------------

JOB = {"name": "train", "exists": True, "alive": True, "run_id": "train", "queue_items": ["000"], "items": [],
       "items_done": 0, "items_total": 1, "crash_markers": [], "earlier_crashes": [], "current_item": "000",
       "last_exit_code": None}
AUTOPILOT_VARS = {"ansible_play_hosts_all": ["box1"],
                  "hostvars": {"box1": {"autopilot_probe": {"jobs": [JOB], "gpus": [], "findings": [],
                                                            "status": "PASS"},
                                        "trainer_profile": "autodl"}}}


def history_with(make):
    def build(tmp):
        history = tmp / "history"
        history.mkdir()
        make(history / "box1.jsonl", tmp)
        return {"phase": "decide", "history_dir": str(history), "report_path": str(tmp / "autopilot.json")}
    return build


def _fifo(path, _tmp):
    os.mkfifo(str(path))


def _huge(path, _tmp):
    with open(str(path), "wb") as handle:  # sparse: 3 GiB of history that takes no room
        handle.truncate(3 << 30)
        handle.seek((3 << 30) - 200)
        handle.write(b'\n{"t": 1, "host": "box1", "gpu_util": 0.0}\n')


def _symlink(path, tmp):
    secret = tmp / "elsewhere.jsonl"
    secret.write_text('{"t": 1, "host": "box1", "note": "%s"}\n' % SHADOW)
    os.symlink(str(secret), str(path))


def _rent_fifo(_path, tmp):
    """A FIFO named like a rent's record in the reports directory (the report's), where every tick looks for them."""
    os.mkfifo(str(tmp / "rent-planted.json"))


def decided(result, _tmp):
    assert result["decisions"]["box1"]["state"], result


def says(*words):
    def check(result, _tmp):
        assert result["decisions"]["box1"]["state"], result
        warnings = " ".join(result["history_warnings"])
        for word in words:
            assert word in warnings, result["history_warnings"]
        assert SHADOW not in json.dumps(result, default=str)
    return check


def record_with(make):
    """The record phase of a tick, after its decide phase, with ``make(history_dir, tmp)`` planted first."""
    def build(tmp):
        from controller_actions import run_action  # pylint: disable=import-outside-toplevel,import-error
        history = tmp / "history"
        history.mkdir()
        args = {"history_dir": str(history), "report_path": str(tmp / "autopilot.json")}
        decided = run_action(AutopilotDecide, dict(args, phase="decide"), task_vars=AUTOPILOT_VARS)
        make(history, tmp)
        return dict(args, phase="record", decisions=decided["decisions"])
    return build


def _lock_fifo(history, _tmp):
    os.mkfifo(str(history / ".lock"))


def _lock_held(history, _tmp):
    """Another run that holds the history lock and never lets go."""
    (history / ".lock").write_text("")
    holder = hostile.start([sys.executable, "-c", "import fcntl, sys, time\n"
                            "f = open(sys.argv[1], 'w'); fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True)\n"
                            "time.sleep(600)", str(history / ".lock")], stdout=subprocess.PIPE)
    assert holder.stdout.readline().strip() == b"held"


def record_says(*words):
    def check(result, _tmp):
        assert result["decisions"]["box1"]["state"], result
        warnings = " ".join(result["history_warnings"])
        for word in words:
            assert word in warnings, result["history_warnings"]
    return check


HISTORY_CASES = [
    Case("autopilot_decide record: a FIFO as the history lock file ends and says why", AutopilotDecide,
         record_with(_lock_fifo), "ok", check=record_says(".lock", "not a regular file"), timeout=10,
         task_vars=AUTOPILOT_VARS),
    Case("autopilot_decide record: a history lock another run never lets go ends and says why", AutopilotDecide,
         record_with(_lock_held), "ok", check=record_says(".lock", "locked by another run"), timeout=25,
         task_vars=AUTOPILOT_VARS),
    Case("autopilot_decide: a FIFO as the host's history file ends and says why", AutopilotDecide,
         history_with(_fifo), "ok", check=says("box1.jsonl", "FIFO"), timeout=10, task_vars=AUTOPILOT_VARS),
    Case("autopilot_decide: a 3 GiB history file is read to its bound only, and says so", AutopilotDecide,
         history_with(_huge), "ok", check=says("box1.jsonl", "larger than"), timeout=10, task_vars=AUTOPILOT_VARS),
    Case("autopilot_decide: a history file that is a symlink is not followed, and says so", AutopilotDecide,
         history_with(_symlink), "ok", check=says("box1.jsonl", "symlink"), timeout=10, task_vars=AUTOPILOT_VARS),
    Case("autopilot_decide: a FIFO named rent-*.json in the reports directory ends (never opened blocking)",
         AutopilotDecide, history_with(_rent_fifo), "ok", check=decided, timeout=10, task_vars=AUTOPILOT_VARS),
]


# --- write_files: a listed directory that is a link -------------------------------------------------------------

def linked_directory(tmp):
    target = tmp / "nobody-named-me"
    target.mkdir()
    os.chmod(str(target), 0o700)
    os.symlink(str(target), str(tmp / "link"))
    return {"directories": [str(tmp / "link")], "directory_mode": "0777"}


def target_mode_kept(_result, tmp):
    assert stat.S_IMODE(os.stat(str(tmp / "nobody-named-me")).st_mode) == 0o700


WRITE_CASES = [
    Case("write_files: a listed directory that is a symlink: refused, the target's mode never changed", write_files,
         linked_directory, "error", "symbolic link", check=target_mode_kept),
]


# --- the messages: the cause named, and only the cause ----------------------------------------------------------

def patrol_vars(probe):
    return {"ansible_play_hosts_all": ["box1"],
            "hostvars": {"box1": {"trainer_profile": "autodl", "trainer_data_dir": "/data", "probe": probe}}}


def preflight_vars(probe):
    return {"ansible_play_hosts_all": ["box1"], "hostvars": {"box1": {"trainer_profile": "autodl", "pp": probe}}}


PATROL_ARGS = {"kind": "patrol", "result_vars": {"job_status": "probe"}, "fail_run": False}


def malformed(result, _tmp):
    row = result["rows"][0]
    assert row["verdict"] == "FAIL", row
    assert "malformed_result" in [f["code"] for f in row["findings"]], row["findings"]
    assert "failed or was unreachable" not in json.dumps(row)


def hook_is_a_directory(result, _tmp):
    messages = [f["message"] for f in result["findings"] if f["code"] == "proxy_hook_missing"]
    assert messages and "is a directory, not a hook file" in messages[0], result["findings"]


MESSAGE_CASES = [
    Case("env_audit: a proxy hook that is a directory says so, not 'does not exist'", env_audit,
         lambda tmp: {"proxy_hook": str(tmp), "torch": False, "cgroup_root": str(tmp), "fail_on": "never"}, "ok",
         check=hook_is_a_directory),
    Case("fleet_report: a patrol result that is a string is malformed_result", FleetReport, PATROL_ARGS, "ok",
         check=malformed, task_vars=patrol_vars("job_status said: something")),
    Case("fleet_report: a patrol record with neither jobs nor findings is malformed_result, not PASS", FleetReport,
         PATROL_ARGS, "ok", check=malformed, task_vars=patrol_vars({"changed": False, "msg": "hello"})),
    Case("fleet_report: a preflight_probe result that is a string is malformed_result", FleetReport,
         {"kind": "preflight", "result_vars": {"preflight_probe": "pp"}, "fail_run": False}, "ok", check=malformed,
         task_vars=preflight_vars("a string")),
    Case("fleet_report: a negative tail_lines is refused", FleetReport, dict(PATROL_ARGS, tail_lines=-3), "error",
         "tail_lines must be 0 or more", task_vars=patrol_vars({"jobs": [], "findings": []})),
]


@pytest.mark.parametrize("case", SECRET_CASES + NOTIFY_CASES, ids=str)
def test_secrets(case, hostile):
    hostile(case)


@pytest.mark.parametrize("case", PLANTED_CASES, ids=str)
def test_planted_paths(case, hostile):
    hostile(case)


@pytest.mark.parametrize("case", HISTORY_CASES, ids=str)
def test_history_reads(case, hostile):
    hostile(case)


@pytest.mark.parametrize("case", WRITE_CASES, ids=str)
def test_write_files_links(case, hostile):
    hostile(case)


@pytest.mark.parametrize("case", MESSAGE_CASES, ids=str)
def test_messages(case, hostile):
    hostile(case)


# profile_check's messages (the checks themselves: the action's templar is Ansible's, not the harness's mock)
SPEC = profile_check.spec_options(yaml.safe_load((REPO / profile_check.SPEC_FILE).read_text()))
PROFILE_ROWS = [
    # (the bad value, the key that must be blamed, keys that are valid and must not be)
    ({"trainer_data_dir": "autodl-tmp"}, "trainer_data_dir",
     ("trainer_durable_dir", "trainer_inode_cap", "trainer_meter_stop")),
    ({"trainer_durable_dir": "fs"}, "trainer_durable_dir", ("trainer_data_dir", "trainer_inode_cap")),
    ({"trainer_inode_cap": 0}, "trainer_inode_cap", ("trainer_data_dir", "trainer_durable_dir")),
    ({"trainer_env_prefix": "miniconda3"}, "trainer_env_prefix", ("trainer_onstart_hook",)),
    ({"trainer_onstart_hook": "/root/onstart.sh"}, "trainer_onstart_hook", ("trainer_env_prefix",)),
]


@pytest.mark.parametrize("change,blamed,innocent", PROFILE_ROWS, ids=lambda value: str(value)[:40])
def test_profile_check_blames_only_the_bad_value(change, blamed, innocent):
    values = yaml.safe_load((REPO / "group_vars" / "autodl.yml").read_text())
    values.update(change)
    problems, _checked = profile_check.fleet_problems(SPEC, {"box1": values})
    text = " ".join(problems["box1"])
    assert blamed in text, problems
    for other in innocent:
        assert other not in text, "%s blamed too: %s" % (other, text)


# profile_check with a host the inventory does not hold: Ansible's own hostvars (a mock cannot answer as it does)
UNKNOWN_HOST_PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - remote_gpu.trainer.profile_check:
        hosts: [no-such-box-29]
      register: checked
      ignore_errors: true
    - ansible.builtin.copy:
        content: "{{ checked | to_json }}"
        dest: "%s"
"""


def test_profile_check_names_a_host_that_is_not_in_the_inventory(tmp_path):
    out = tmp_path / "checked.json"
    playbook = tmp_path / "play.yml"
    playbook.write_text(UNKNOWN_HOST_PLAY % out)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c",
                           "local", "-e", "ansible_python_interpreter=%s" % sys.executable, str(playbook)],
                          capture_output=True, text=True, cwd=str(tmp_path), env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    checked = json.loads(out.read_text())
    assert "TemplateContext" not in json.dumps(checked)
    assert "no-such-box-29" in checked["problems"], checked
    assert "not a host of the inventory" in " ".join(checked["problems"]["no-such-box-29"])


# The inventory plugins (ansible-inventory, as a user runs it): rows of (name, provider, config lines, faults, what the
# output must say, the canaries nothing may show). ``{url}`` is the fake's URL, ``{closed}`` a port nothing listens on.
AUTODL_TOKEN = "eyJhbGciOiJIUzI1NiJ9.CANARYhostile29x.c2lnbmF0dXJlMjk"
INVENTORY_ROWS = [
    ("autodl: the API's msg echoes the token (HTTP 200, an error code)", "autodl", "api_url: {url}\n",
     [{"code": "AuthorizationFailed", "msg": "token %s is invalid" % AUTODL_TOKEN}], "AuthorizationFailed",
     (AUTODL_TOKEN,)),
    ("runpod: api_url with user:password@ is refused at once, not retried and blamed on DNS", "runpod",
     "api_url: http://canary:%s@127.0.0.1:{closed}/v1\n" % URL_PASSWORD, [], "user information",
     (URL_PASSWORD,)),
    ("runpod: a body nested 100,000 deep is a malformed response, not a RecursionError", "runpod",
     "api_url: {url}\n", [{"raw": DEEP}], "malformed response", (KEY,)),
    ("autodl: a body nested 100,000 deep is a malformed response, not a RecursionError", "autodl",
     "api_url: {url}\n", [{"raw": DEEP}], "malformed response", (AUTODL_TOKEN,)),
    ("runpod: with cache on, the cache keeps no instance environment", "runpod",
     "api_url: {url}\ncache: true\ncache_plugin: ansible.builtin.jsonfile\ncache_connection: {tmp}/cache\n", [],
     None, (HF,)),
]


@pytest.mark.parametrize("row", INVENTORY_ROWS, ids=lambda row: row[0])
def test_inventory_plugins(row, tmp_path):
    _name, provider, config, faults, fragment, canaries = row
    key = AUTODL_TOKEN if provider == "autodl" else KEY
    records = fake_api.records_for(provider, [("198.51.100.1", 40001)])
    for record in records:
        record["env"] = {"HF_TOKEN": HF}
    server = fake_api.FakeAPI(provider, key, records).start()
    server.inject(*faults)
    try:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
        sock.close()
        path = tmp_path / ("%s.yml" % provider)
        # a retry would run for the whole retry_budget, past the run's deadline (TimeoutExpired): never retried
        path.write_text("plugin: remote_gpu.trainer.%s\nretry_budget: 600\n" % provider + config.format(
            url=server.url, closed=closed, tmp=tmp_path))
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_INVENTORY_UNPARSED_FAILED="True", AUTODL_TOKEN=AUTODL_TOKEN, RUNPOD_API_KEY=KEY)
        proc = subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-inventory"), "-i", str(path),
                               "--list"], capture_output=True, text=True, cwd=str(tmp_path), env=env, timeout=120,
                              check=False)
        output = proc.stdout + proc.stderr
        for canary in canaries:
            assert canary not in output, "a canary in the output"
            for cached in (tmp_path / "cache").rglob("*") if (tmp_path / "cache").exists() else ():
                assert canary not in cached.read_text(), "a canary in the cache"
        if fragment:
            assert proc.returncode != 0 and fragment in output, output[-2000:]
        else:
            assert proc.returncode == 0 and list((tmp_path / "cache").iterdir()), output[-2000:]
    finally:
        server.stop()


# hf_mirror with an endpoint that carries user information: refused before anything is written, and never printed
# (the role's assert printed the whole URL with its password, and blamed the URL's form)
HF_ENDPOINT_PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: remote_gpu.trainer.hf_mirror
      vars:
        trainer_profile: autodl
        trainer_hf_endpoint: "https://canary:%s@hf-mirror.example/"
        trainer_hf_disable_xet: true
        trainer_hf_home: ""
        trainer_hf_transfer: false
        trainer_interpreter: "%s"
        hf_mirror_env_dir: "%s"
"""


def test_hf_mirror_refuses_an_endpoint_with_user_information(tmp_path):
    playbook = tmp_path / "play.yml"
    playbook.write_text(HF_ENDPOINT_PLAY % (URL_PASSWORD, sys.executable, tmp_path / "env.d"))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "-vvv", "-i", "localhost,",
                           "-c", "local", "-e", "ansible_python_interpreter=%s" % sys.executable, str(playbook)],
                          capture_output=True, text=True, cwd=str(tmp_path), env=env, timeout=300, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-2000:]
    assert "user information" in output, output[-2000:]
    assert URL_PASSWORD not in output, "the endpoint's password was printed"
    assert not (tmp_path / "env.d").exists(), "something was written"
