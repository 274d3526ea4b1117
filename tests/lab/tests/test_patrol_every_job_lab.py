"""Patrol judges the whole box (issue 28, items 1 and 3), with the README's own commands.

Two experiments on one lab box, launched as the README says (`ansible-playbook playbooks/launch.yml` with
`launch_name` train, then exp2): train's one item exits 0 after about 2 s (launch_min_seconds 30, the default),
exp2 keeps running, printing epoch lines, until the test lets it end. A second box has no job at all. Then
`ansible-playbook playbooks/patrol.yml`, as a user runs it from a laptop directory:

- the host's line, the table, the JSON report, the history and the dashboard (page and JSON index) name both jobs
  with their progress, one chart per (host, job), and the box without jobs says so and passes;
- train's item is `item_too_fast` (WARN; a FAIL that escalates once launch records launch_min_seconds_fail);
- each tick is still one SSH execution per host.
"""
from __future__ import annotations

import html.parser
import json
import os
import re
import subprocess
import time

import pytest

from labhelpers import REPO, SshCounter, needs_root, started_fleet

pytestmark = needs_root
VENV_BIN = os.path.join(REPO, ".venv", "bin")
BOX, EMPTY = "lab-01", "lab-02"
FLAG = "/root/go-exp2"

TRAIN_SH = r"""#!/usr/bin/env bash
# usage: train.sh NAME [--sleep S] [--wait FILE]: epoch lines, best.pt, then exit 0
name=$1; shift; sleep_s=0; wait=""
while [ $# -gt 0 ]; do
  case $1 in --sleep) sleep_s=$2; shift;; --wait) wait=$2; shift;; esac
  shift
done
if [ -n "$wait" ]; then
  e=0; while [ ! -e "$wait" ]; do e=$((e + 1)); echo "epoch $e/100"; sleep 0.5; done
else
  echo "epoch 1/2"; sleep "$sleep_s"; echo "epoch 2/2"
fi
printf 'best-%s' "$name" > "$TRAINER_OUTPUT_DIR/best.pt"
exit 0
"""


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "2") as lab:
        yield lab


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    root = tmp_path_factory.mktemp("src")
    (root / "train.sh").write_text(TRAIN_SH)
    return root


def env(**extra):
    return dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                ANSIBLE_DEPRECATION_WARNINGS="0", PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")), **extra)


def playbook(fleet, cwd, name, *args, extra_env=None):
    """``ansible-playbook -i INV playbooks/NAME ARGS`` from ``cwd``, as the README writes it."""
    return subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", fleet.inventory_path,
                           os.path.join(REPO, "playbooks", name), *args], cwd=str(cwd), capture_output=True,
                          text=True, env=env(**(extra_env or {})), timeout=600, check=False)


def launch(fleet, laptop, src, variables):
    variables = dict({"launch_src": str(src), "launch_command": "bash train.sh"}, **variables)
    proc = playbook(fleet, laptop, "launch.yml", "-l", BOX, "-e", json.dumps(variables))
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    return proc


def read_json(fleet, host, path):
    out = fleet.ssh(host, "cat %s 2>/dev/null || true" % path).stdout
    return json.loads(out) if out.strip() else None


def wait_for(what, check, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError("%s: not within %d s" % (what, timeout))


def patrol(fleet, laptop, *args, extra_env=None):
    """One tick -> (process, rows by host, the host lines before the table)."""
    proc = playbook(fleet, laptop, "patrol.yml", *args, extra_env=extra_env)
    report = laptop / "reports" / "patrol.json"
    rows = {row["host"]: row for row in json.loads(report.read_text())["hosts"]} if report.exists() else {}
    out = proc.stdout[:proc.stdout.index("PLAY RECAP")] if "PLAY RECAP" in proc.stdout else proc.stdout
    lines = {}
    for host in (BOX, EMPTY):
        mine = [line for line in out.splitlines() if line.startswith(host + " ")]
        assert len(mine) == 2, proc.stdout[-6000:]  # its line and its table row
        lines[host] = mine
    return proc, rows, lines


class Page(html.parser.HTMLParser):
    """The cards of the dashboard: per host its text, and per chart (data-job, series) its number of points."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.cards, self.card, self.job = {}, None, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "article":
            self.card = self.cards.setdefault(attrs["data-host"], {"charts": {}, "text": []})
        elif tag == "figure":
            self.job = attrs.get("data-job")
        elif tag == "polyline" and self.card is not None:
            self.card["charts"][(self.job, attrs["data-series"])] = int(attrs["data-points"])

    def handle_data(self, data):
        if self.card is not None:
            self.card["text"].append(data)


def codes(row, job=None):
    return sorted(f["code"] for f in row["findings"] if job is None or f.get("job") == job)


def test_two_experiments_on_one_box_are_both_patrolled_charted_and_a_too_fast_item_is_found(
        fleet, src, tmp_path):
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    # 1. train: one item of about 2 s, with the default launch_min_seconds (30)
    launch(fleet, laptop, src, {"launch_name": "train", "launch_queue": ["t0 --sleep 2"]})
    wait_for("train finished", lambda: read_json(fleet, BOX, "~/.trainer/jobs/train/status.json"))
    # 2. exp2, a second experiment on the same box, still running (launch_min_seconds of its own)
    launch(fleet, laptop, src, {"launch_name": "exp2", "launch_queue": ["e0 --wait %s" % FLAG],
                                "launch_min_seconds": 1})
    wait_for("exp2 prints epochs", lambda: "epoch 2/100" in fleet.ssh(
        BOX, "cat ~/.trainer/jobs/exp2/job.log 2>/dev/null || true").stdout)
    records = {name: read_json(fleet, BOX, "~/.trainer/jobs/%s/queue.json" % name) for name in ("train", "exp2")}
    assert [(r["min_seconds"], r["min_seconds_fail"]) for r in records.values()] == [(30, False), (1, False)]

    # 3. two patrol ticks, as the README runs them; each is one SSH execution per host
    ssh = SshCounter(tmp_path)
    for tick in range(2):
        proc, rows, lines = patrol(fleet, laptop, extra_env=ssh.env if tick == 0 else None)
        assert proc.returncode == 0, proc.stdout[-6000:]  # item_too_fast is a WARN: shown, not escalated
        if tick == 0:
            assert ssh.per_host(fleet, [BOX, EMPTY]) == {BOX: 1, EMPTY: 1}
        time.sleep(1.5)  # exp2 moves on between the ticks
    row = rows[BOX]
    assert [job["name"] for job in row["jobs"]] == ["exp2", "train"]
    exp2, train = row["jobs"]
    assert (exp2["state"], exp2["items_done"], exp2["items_total"], exp2["progress"]["unit"]) == (
        "ALIVE", 0, 1, "epoch")
    assert (train["state"], train["items_done"], train["items_total"], train["items_too_fast"]) == ("DONE", 1, 1, 1)
    (item,) = train["items"]
    assert item["too_fast"] is True and 1 <= item["seconds"] <= 15 and item["state"] == "done", item
    assert (exp2["items_too_fast"], exp2["min_seconds"], train["min_seconds"]) == (0, 1, 30)
    assert row["verdict"] == "WARN" and row["top_finding"].startswith("item_too_fast: train: 1 item(s)")
    assert codes(row, "train") == ["item_too_fast", "job_finished"] and codes(row, "exp2") == []
    (fast,) = [f for f in row["findings"] if f["code"] == "item_too_fast"]
    assert (fast["level"], fast["items"], fast["min_seconds"]) == ("WARN", ["000"], 30)
    # the host's line and its table row name both jobs with their progress
    line, table_row = lines[BOX]
    assert re.match(r"lab-01 WARN exp2 ALIVE items 0/1 epoch \d+/100 log 0m; "
                    r"train DONE items 1/1 \(1 too fast\) epoch 2/2 exit 0 log \d+m \| data ", line), line
    assert "exp2 ALIVE 0/1, train DONE 1/1 (1 too fast)" in table_row
    assert re.search(r"exp2 epoch \d+/100, train epoch 2/2", table_row), table_row
    # the box without a job: shown as such, not as a failure
    assert rows[EMPTY]["verdict"] == "PASS" and codes(rows[EMPTY]) == ["no_jobs"]
    assert lines[EMPTY][0].startswith("lab-02 PASS no jobs (nothing launched) | data "), lines[EMPTY][0]

    # 4. the history: one record per host per tick, each job by name; exp2's progress is its own series
    history = [json.loads(line) for line in (laptop / "reports" / "history" / "lab-01.jsonl").read_text().splitlines()]
    assert len(history) == 2 and all(sorted(r["by_job"]) == ["exp2", "train"] for r in history)
    assert [r["by_job"]["train"]["prog"] for r in history] == [2, 2]
    exp2_epochs = [r["by_job"]["exp2"]["prog"] for r in history]
    assert exp2_epochs[0] < exp2_epochs[1], exp2_epochs
    assert all(r["by_job"]["train"]["fast"] == 1 and r["by_job"]["exp2"]["st"] == "ALIVE" for r in history)
    empty = [json.loads(line) for line in (laptop / "reports" / "history" / "lab-02.jsonl").read_text().splitlines()]
    assert [r["by_job"] for r in empty] == [{}, {}]

    # 5. the dashboard: one chart per (host, job), each with its two points; the JSON index names both jobs
    page = Page((laptop / "reports" / "fleet.html").read_text())
    charts = page.cards[BOX]["charts"]
    assert charts[("exp2", "prog")] == 2 and charts[("train", "prog")] == 2, charts
    text = "".join(page.cards[BOX]["text"])
    assert "job exp2" in text and "job train" in text and "1 too fast" in text
    assert "none (nothing launched)" in "".join(page.cards[EMPTY]["text"])
    index = json.loads((laptop / "reports" / "fleet.json").read_text())
    by_host = {host["host"]: host for host in index["hosts"]}
    assert [(j["name"], j["state"]) for j in by_host[BOX]["by_job"]] == [("exp2", "ALIVE"), ("train", "DONE")]
    assert by_host[EMPTY]["no_jobs"] is True and by_host[EMPTY]["verdict"] == "PASS"

    # 6. exp2 ends (it ran longer than its 1 s); train is relaunched with launch_min_seconds_fail: its done item is
    # not run again, but its record now says so, and patrol escalates the too-fast item
    fleet.ssh(BOX, "touch %s" % FLAG)
    wait_for("exp2 finished", lambda: read_json(fleet, BOX, "~/.trainer/jobs/exp2/status.json"))
    launch(fleet, laptop, src, {"launch_name": "train", "launch_queue": ["t0 --sleep 2"],
                                "launch_min_seconds_fail": True})
    assert fleet.ssh(BOX, "grep -c '==== trainer: item 000 started' ~/.trainer/jobs/train/job.log").stdout.strip() \
        == "1"
    proc, rows, lines = patrol(fleet, laptop)
    assert proc.returncode != 0
    row = rows[BOX]
    assert [(job["name"], job["state"], job["items_too_fast"]) for job in row["jobs"]] == [
        ("exp2", "DONE", 0), ("train", "DONE", 1)]
    assert row["verdict"] == "FAIL" and row["reasons"][0].startswith("item_too_fast: train: ")
    assert lines[BOX][0].endswith("| escalate: item_too_fast"), lines[BOX][0]
    assert "fatal: [lab-01]: FAILED!" in proc.stdout and "escalated: item_too_fast" in proc.stdout
