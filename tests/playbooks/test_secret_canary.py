"""The secret canary (issue 29): unique canary secrets planted in every place a user puts one, the collection driven
through its success and error paths at -vvv, and every byte it leaves behind grepped for them. Zero hits.

Planted: each provider's key (RUNPOD_API_KEY, VAST_API_KEY, LAMBDA_API_KEY, AUTODL_TOKEN), the providers' instance
environments (RunPod ``env``, vast.ai ``extra_env``: HF_TOKEN, WANDB_API_KEY), webhook URLs (token in the path and
in the query), a Feishu signing secret, an SMTP password, user:password@ in an api_url and a webhook URL, and
HF_TOKEN and WANDB_API_KEY in the job environment (``credentials_secrets``) and in what a job printed (its log tail).

Driven, against the loopback fakes (tests/lab/providers: fake_api.py, webhook_receiver.py), no lab fleet needed:
- the four inventory plugins (ansible-inventory --list -vvv, cache on): success, 401, 403, 429, 500, a body echoing
  the key, AutoDL's HTTP 200 error whose msg echoes the token, an unreachable URL, user:password@ in api_url;
- the instance module (ansible-playbook -vvv): a stop, 401, 500, a body echoing the key, a body nested 100,000 deep,
  an unreachable URL, user:password@ in api_url;
- fleet_report (patrol: report, history, fleet.html, fleet.json, .prom), autopilot_decide (decide and record: its
  report, the history, a park receipt) and notify (webhook, Slack, Feishu signed, a 500 sink, an unreachable sink,
  user:password@ in a URL, SMTP with a password) on a job_status result whose log tail printed the secrets.

Grepped: stdout and stderr, every file under the test's directory (reports, history, the dashboard, receipts, the
inventory cache, ansible-inventory's output) and every request the receivers got after the URL (bodies, mails).

- patrol.yml (the README's command, -vvv) on a real local job that printed HF_TOKEN and WANDB_API_KEY from its job
  environment and died: job_status's result, the line, the table, the report, the history, fleet.html.

Covered on the lab fleet instead, by tests/lab/tests/test_secret_canary_lab.py: the launch playbook's own run (the
credentials role writes the secrets file on the box, by design: mode 0600, the one file not grepped), patrol and
teardown (refused, a 401 echoing the key, approved) at -vvv, teardown's receipts and pulls, and every file the
collection writes on the boxes.
"""

from __future__ import annotations

import json
import pathlib
import os
import socket
import subprocess
import sys
import time

import pytest

from pbhelpers import REPO, VENV_BIN, ansible_env, fake_api, run_playbook

sys.path.insert(0, str(REPO / "tests" / "lab" / "providers"))
from webhook_receiver import SMTPReceiver, WebhookReceiver  # noqa: E402  pylint: disable=wrong-import-position

# Every canary is unique and shaped like the real secret where the real one has a shape.
CANARY = {
    "runpod": "rpa_CANARYrunpod7f3a9c1e5b2d8f4a6c0e",
    "vastai": "c4a7f0e2b9d14c6a8e3f5b7d9a1c3e5f7b9d1a3c5e7f9b1d3a5c7e9f1b3d5a7c",
    "lambda": "secret_CANARYlambda_4e8a2c6f0b1d3e5a",
    "autodl": "eyJhbGciOiJIUzI1NiJ9.CANARYautodl9d8c7b6a.c2lnbmF0dXJlQ0FOQVJZ",
    "hf_job": "hf_CANARYjobHFtoken0a1b2c3d4e5f6a7b8",
    "wandb_job": "7e4c1a9f2b8d6e3c5a0f4b7d9e2c6a8f1b3d5e7c",
    "hf_instance": "hf_CANARYinstanceHFtoken9f8e7d6c5b4a",
    "wandb_instance": "1f3e5d7c9b0a2e4d6c8b0a1f3e5d7c9b2a4e6d8c",
    "url_password": "CANARY-userinfo-pass-3e91",
    "hook_token": "CANARYhooktoken5d2c",
    "slack_token": "CANARYslack0T1B2x3y",
    "feishu_token": "CANARYfeishu4c8e",
    "feishu_secret": "CANARY-feishu-sign-9b1f",
    "smtp_password": "CANARY-smtp-pass-6a0d",
}
ENV_VAR = {"runpod": "RUNPOD_API_KEY", "vastai": "VAST_API_KEY", "lambda": "LAMBDA_API_KEY", "autodl": "AUTODL_TOKEN"}
PLUGIN = {"runpod": "runpod", "vastai": "vastai", "lambda": "lambda_cloud", "autodl": "autodl"}
PROVIDERS = tuple(ENV_VAR)
GPU_ENV = {"PATH": "%s:%s" % (REPO / "tests/lab/gpu/bin", os.environ["PATH"]),
           "FAKE_GPU_SCENARIO": str(REPO / "tests/lab/gpu/scenarios/h100-idle")}


def hits(text):
    """The names of the canaries in ``text`` (never the text itself: the report would carry them)."""
    return sorted(name for name, value in CANARY.items() if value in text)


def hits_in_tree(root, inputs=()):
    """{file: canary names} of every file under ``root`` but the test's own ``inputs`` (the playbook it wrote)."""
    found = {}
    for path in sorted(pathlib.Path(root).rglob("*")):
        if path.is_file() and not path.is_symlink() and path.name not in inputs:
            names = hits(path.read_bytes().decode("utf-8", "replace"))
            if names:
                found[str(path.relative_to(root))] = names
    return found


def closed_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def env_for_run(**extra):
    """The controller's environment: every provider key, and the job's tokens as the user exports them."""
    env = dict((ENV_VAR[p], CANARY[p]) for p in PROVIDERS)
    env.update(HF_TOKEN=CANARY["hf_job"], WANDB_API_KEY=CANARY["wandb_job"])
    env.update(extra)
    return env


def records(provider):
    """The fake's records, with the instances' environments holding canaries."""
    found = fake_api.records_for(provider, [("198.51.100.1", 40001), ("198.51.100.2", 40002)])
    for record in found:
        if provider == "runpod":
            record["env"] = {"HF_TOKEN": CANARY["hf_instance"], "WANDB_API_KEY": CANARY["wandb_instance"]}
        elif provider == "vastai":
            record["extra_env"] = [["HF_TOKEN", CANARY["hf_instance"]], ["WANDB_API_KEY", CANARY["wandb_instance"]]]
        else:
            record["env"] = {"HF_TOKEN": CANARY["hf_instance"]}
    return found


@pytest.fixture
def fakes():
    started = []

    def start(provider, *faults):
        fake = fake_api.FakeAPI(provider, CANARY[provider], records(provider)).start()
        fake.inject(*faults)
        started.append(fake)
        return fake

    yield start
    for fake in started:
        fake.stop()


def echo_fault(provider):
    body = {"error": "invalid key %s (Authorization: Bearer %s)" % (CANARY[provider], CANARY[provider])}
    return {"status": 400, "raw": json.dumps(body)}


def inventory_runs(provider):
    """(label, faults, api_url or None for the fake's, extra config) of each run of a plugin."""
    runs = [("success", [], None), ("401", [{"status": 401}], None), ("echo", [echo_fault(provider)], None)]
    if provider == "autodl":
        runs.append(("code-echo", [{"code": "AuthorizationFailed", "msg": "token %s is invalid" % CANARY["autodl"]}],
                     None))
    if provider == "runpod":
        runs += [("403", [{"status": 403}], None), ("429", [{"status": 429, "retry_after": 5}] * 3, None),
                 ("500", [{"status": 500}] * 3, None),
                 ("unreachable", [], "http://127.0.0.1:%d/v1" % closed_port()),
                 ("userinfo", [], "http://canary:%s@127.0.0.1:%d/v1" % (CANARY["url_password"], closed_port()))]
    return runs


@pytest.mark.parametrize("provider", PROVIDERS)
def test_inventory_plugins_leave_no_canary(tmp_path, fakes, provider):
    outputs = {}
    for label, faults, url in inventory_runs(provider):
        fake = fakes(provider, *faults)
        work = tmp_path / label
        work.mkdir()
        config = work / ("%s.yml" % PLUGIN[provider])
        config.write_text("plugin: remote_gpu.trainer.%s\napi_url: %s\nretry_budget: 2\ncache: true\n"
                          "cache_plugin: ansible.builtin.jsonfile\ncache_connection: %s\ninclude_stopped: true\n"
                          % (PLUGIN[provider], url or fake.url, work / "cache"))
        out = work / "inventory.json"
        proc = subprocess.run([str(VENV_BIN / "ansible-inventory"), "-i", str(config), "--list", "-vvv", "--output",
                               str(out)], capture_output=True, text=True, cwd=str(work), timeout=300, check=False,
                              env=ansible_env(**env_for_run(ANSIBLE_INVENTORY_UNPARSED_FAILED="True")))
        outputs[label] = proc
        assert hits(proc.stdout + proc.stderr) == [], "%s %s: canaries in the output" % (provider, label)
        if label == "success":
            assert proc.returncode == 0, proc.stderr[-2000:]
            assert "train-1" in out.read_text() or "198.51.100.1" in out.read_text()
            assert list((work / "cache").iterdir()), "the cache was not written"
        else:
            assert proc.returncode != 0, "%s %s: the source did not fail" % (provider, label)
    assert hits_in_tree(tmp_path, inputs=("%s.yml" % PLUGIN[provider],)) == {}
    if provider == "runpod":  # the failures say what is wrong, not something else
        assert "user information" in outputs["userinfo"].stderr
        assert "HTTP 401" in outputs["401"].stderr and "RUNPOD_API_KEY" in outputs["401"].stderr


INSTANCE_PLAY = """
- name: The instance module through its error paths
  hosts: localhost
  gather_facts: false
  tasks:
{tasks}
"""
INSTANCE_TASK = """
    - name: "{label}"
      remote_gpu.trainer.instance:
        provider: runpod
        id: fakepod0001
        state: stopped
        api_url: "{url}"
        retry_budget: 2
        poll_interval: 0.05
        timeout: 5
      ignore_errors: true
      register: result_{n}
"""


def test_the_instance_module_leaves_no_canary(tmp_path, fakes):
    deep = "[" * 100000 + "]" * 100000
    runs = [("stop", fakes("runpod").url), ("401", fakes("runpod", {"status": 401}).url),
            ("500", fakes("runpod", *[{"status": 500}] * 4).url),
            ("echo", fakes("runpod", echo_fault("runpod")).url),
            ("deep", fakes("runpod", {"raw": deep}).url),
            ("unreachable", "http://127.0.0.1:%d/v1" % closed_port()),
            ("userinfo", "http://canary:%s@127.0.0.1:%d/v1" % (CANARY["url_password"], closed_port()))]
    tasks = "".join(INSTANCE_TASK.format(label=label, url=url, n=n) for n, (label, url) in enumerate(runs))
    playbook = tmp_path / "instance.yml"
    playbook.write_text(INSTANCE_PLAY.format(tasks=tasks))
    proc = run_playbook(playbook, "localhost,", "-c", "local", "-vvv", "-e",
                        "ansible_python_interpreter=%s" % sys.executable, cwd=str(tmp_path), **env_for_run())
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert hits(output) == [] and hits_in_tree(tmp_path, inputs=("instance.yml",)) == {}
    assert "malformed response" in output and "user information" in output and "HTTP 401" in output


REPORT_PLAY = """
- name: Reports, history, dashboard, receipts and notifications of a job that printed its secrets
  hosts: localhost
  gather_facts: false
  vars:
    credentials_secrets:
      HF_TOKEN: "{hf}"
      WANDB_API_KEY: "{wandb}"
    trainer_profile: autodl
    trainer_data_dir: /root/autodl-tmp
    trainer_meter_stop: {{verb: power_off, how: shutdown, command: [true], reversible: true}}
    autopilot_heal: true
    autopilot_notify: true
    probe:
      status: FAIL
      findings:
        - {{level: FAIL, code: job_gone_incomplete, job: train,
            message: "train is not running; it printed HF_TOKEN={hf} WANDB_API_KEY={wandb}",
            action: "Read the tail of the log"}}
      gpus: []
      jobs:
        - {{name: train, exists: true, alive: false, run_id: train, queue_items: ["000"], items: [], items_done: 0,
            items_total: 1, crash_markers: ["RuntimeError: HF_TOKEN={hf}"], crash_marker_count: 1,
            earlier_crashes: [], current_item: "000", last_exit_code: 1,
            tail: ["export HF_TOKEN={hf}", "wandb: key {wandb}", "GET https://canary:{pw}@hub.example/x"]}}
  tasks:
    - name: Patrol's report, history and dashboard
      remote_gpu.trainer.fleet_report:
        kind: patrol
        hosts: [localhost]
        result_vars: {{job_status: probe}}
        fail_run: false
        report_path: "{out}/reports/patrol.json"
        prom_path: "{out}/reports/trainer.prom"
        history_dir: "{out}/reports/history"
        html_path: "{out}/reports/fleet.html"
        tail_lines: 5
    - name: The autopilot decides
      remote_gpu.trainer.autopilot_decide:
        phase: decide
        probe_var: probe
        report_path: "{out}/reports/autopilot.json"
      register: decided
    - name: The autopilot records
      remote_gpu.trainer.autopilot_decide:
        phase: record
        probe_var: probe
        decisions: "{{{{ decided.decisions }}}}"
        report_path: "{out}/reports/autopilot.json"
      register: recorded
    - name: Notify every sink
      remote_gpu.trainer.notify:
        events:
          - {{host: localhost, kind: new_fail, level: FAIL, text: "train died; HF_TOKEN={hf} key {wandb}"}}
        sinks:
          - {{type: webhook, url_env: CANARY_HOOK_URL}}
          - {{type: slack, url_env: CANARY_SLACK_URL}}
          - {{type: feishu, url_env: CANARY_FEISHU_URL, secret_env: CANARY_FEISHU_SECRET}}
          - {{type: webhook, name: broken, url_env: CANARY_BROKEN_URL}}
          - {{type: webhook, name: unreachable, url_env: CANARY_CLOSED_URL, timeout: 2}}
          - {{type: webhook, name: userinfo, url_env: CANARY_USERINFO_URL}}
          - {{type: email, host: 127.0.0.1, port: {smtp_port}, starttls: false, user: me@lab.invalid,
              password_env: CANARY_SMTP_PASSWORD, from: me@lab.invalid, to: [you@lab.invalid]}}
      register: notified
    - name: Everything registered, at -vvv
      ansible.builtin.debug:
        var: notified
"""


def test_reports_history_dashboard_receipts_and_notifications_leave_no_canary(tmp_path):
    webhook = WebhookReceiver().start()
    smtp = SMTPReceiver(password=CANARY["smtp_password"]).start()
    webhook.answer("/broken", 500)
    try:
        out = tmp_path / "out"
        playbook = tmp_path / "reports.yml"
        playbook.write_text(REPORT_PLAY.format(hf=CANARY["hf_job"], wandb=CANARY["wandb_job"],
                                               pw=CANARY["url_password"], out=out, smtp_port=smtp.port))
        env = env_for_run(
            CANARY_HOOK_URL="%s/hook/in?token=%s" % (webhook.url, CANARY["hook_token"]),
            CANARY_SLACK_URL="%s/slack/services/T0/B0/%s" % (webhook.url, CANARY["slack_token"]),
            CANARY_FEISHU_URL="%s/feishu/open-apis/bot/v2/hook/%s" % (webhook.url, CANARY["feishu_token"]),
            CANARY_FEISHU_SECRET=CANARY["feishu_secret"],
            CANARY_BROKEN_URL="%s/broken/%s" % (webhook.url, CANARY["hook_token"]),
            CANARY_CLOSED_URL="http://127.0.0.1:%d/hook/%s" % (closed_port(), CANARY["hook_token"]),
            CANARY_USERINFO_URL=webhook.url.replace("://", "://canary:%s@" % CANARY["url_password"]) + "/userinfo",
            CANARY_SMTP_PASSWORD=CANARY["smtp_password"])
        proc = run_playbook(playbook, "localhost,", "-c", "local", "-vvv", "-e",
                            "ansible_python_interpreter=%s" % sys.executable, cwd=str(tmp_path), **env)
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, "the play failed (output not shown: it is what is being checked)"
        assert hits(output) == []
        assert hits_in_tree(tmp_path, inputs=("reports.yml",)) == {}
        for name in ("patrol.json", "fleet.html", "fleet.json", "trainer.prom", "autopilot.json"):
            assert (out / "reports" / name).is_file(), name
        assert list((out / "reports" / "history").glob("*.jsonl"))
        # what reached the sinks: the messages went out, redacted
        received = webhook.messages()
        assert len(received) >= 3
        assert hits(json.dumps([dict(m, headers={}, query={}, path="") for m in received])) == []
        assert [hits(mail["data"]) for mail in smtp.messages()] == [[]]
        assert "user information" in output
    finally:
        webhook.stop()
        smtp.stop()


def test_patrol_of_a_job_that_printed_its_secrets_leaves_no_canary(local_inventory, tmp_path):
    """The README's patrol playbook at -vvv, on a real local job that printed HF_TOKEN and WANDB_API_KEY (from its
    job environment) and died: job_status's result, the line, the table, the report, the history and fleet.html."""
    run_dir = tmp_path / "jobs"
    args = {"name": "train", "run_dir": str(run_dir), "state": "started", "detach": "nohup",
            "env": {"HF_TOKEN": CANARY["hf_job"], "WANDB_API_KEY": CANARY["wandb_job"]},
            "command": 'echo "export HF_TOKEN=$HF_TOKEN"; echo "wandb: logging in with $WANDB_API_KEY"; '
                       'echo "GET https://canary:%s@hub.example/x"; echo "Epoch 1/3"; exit 3' % CANARY["url_password"]}
    proc = subprocess.run([str(VENV_BIN / "ansible"), "-i", str(local_inventory), "localhost", "-m",
                           "remote_gpu.trainer.detached_job", "-a", json.dumps(args)],
                          capture_output=True, text=True, env=ansible_env(**env_for_run()), timeout=120, check=False)
    assert proc.returncode == 0, "the start failed: %s" % proc.stdout[-1000:]
    for _wait in range(100):
        if (run_dir / "train" / "status.json").exists():
            break
        time.sleep(0.1)
    log = (run_dir / "train" / "job.log").read_text()
    assert CANARY["hf_job"] in log and CANARY["wandb_job"] in log  # the job printed them: its own log, on the box
    out = tmp_path / "reports"
    proc = run_playbook(REPO / "playbooks" / "patrol.yml", local_inventory, "-vvv", "-e",
                        "patrol_report_path=%s" % (out / "patrol.json"), "-e", "patrol_run_dir=%s" % run_dir,
                        "-e", "patrol_queue_length=3", cwd=str(tmp_path), **env_for_run(**GPU_ENV))
    output = proc.stdout + proc.stderr
    assert hits(output) == [] and hits_in_tree(out) == {}
    report = json.loads((out / "patrol.json").read_text())
    assert report["hosts"][0]["verdict"] == "FAIL"
    assert (out / "fleet.html").is_file() and list((out / "history").glob("*.jsonl"))
    assert "<redacted>" in output  # the tail was shown, redacted
