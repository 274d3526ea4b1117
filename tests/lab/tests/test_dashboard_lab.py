"""The fleet dashboard in a real browser (issue 13): a few patrol ticks over a small lab fleet (a healthy box, a GPU
throttled under load, a data disk near its inode cap, a crashed job whose log line carries HTML), then headless
Chromium loads reports/fleet.html from disk with no network. The DOM must show every host's verdict and top finding,
each chart one point per history record, no injected element, and the browser must log no console error.
Screenshots at desktop and phone width go to tests/output/dashboard/."""
from __future__ import annotations

import html.parser
import json
import os
import re
import shutil
import subprocess

import pytest

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.fleet_html import without_action
from labhelpers import REPO, needs_root, started_fleet
from test_patrol_lab import adhoc, patrol

pytestmark = needs_root
OUTPUT = os.path.join(REPO, "tests", "output", "dashboard")
INJECTION = "<img src=x onerror=alert(1)><script>alert(2)</script>"
JOBS = {
    # healthy: 3 of 7 items, an epoch line a second
    "lab-01": ('for i in 001 002 003; do mkdir -p "$TRAINER_ITEMS_DIR/$i"; printf \'{"item": "%s", "exit_code": 0, '
               '"started": "s", "finished": "f"}\\n\' "$i" > "$TRAINER_ITEMS_DIR/$i/status.json"; done; '
               'for i in $(seq 1 100000); do echo "epoch $i"; sleep 1; done'),
    # its GPU is throttled under load (the scenario)
    "lab-02": 'for i in $(seq 1 100000); do echo "epoch $i"; sleep 1; done',
    # healthy job; the test fills the data disk's inodes to about 88 %
    "lab-03": 'for i in $(seq 1 100000); do echo "step $i"; sleep 1; done',
    # a crash whose log line carries HTML, then the process hangs (a DataLoader after a worker traceback)
    "lab-04": "echo 'epoch 1'; echo 'Traceback (most recent call last): %s'; echo 'RuntimeError: boom'; "
              "sleep 100000" % INJECTION,
}
TICKS = 3
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-extensions", "--no-default-browser-check",
                  "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9", "--enable-logging=stderr",
                  "--v=0"]


def chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


def browse(url, tmp_path, *args):
    """Run headless Chromium on ``url`` with no network (its own empty network namespace when unshare works, and
    no resolver or proxy in any case) -> (stdout, console messages)."""
    profile = tmp_path / ("profile-%d" % len(list(tmp_path.glob("profile-*"))))
    argv = [chromium()] + CHROMIUM_FLAGS + ["--user-data-dir=%s" % profile] + list(args) + [url]
    if shutil.which("unshare") and subprocess.run(["unshare", "--net", "true"], check=False).returncode == 0:
        argv = ["unshare", "--net"] + argv
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False,
                          env=dict(os.environ, LC_ALL="C", HOME=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line or "Content Security Policy" in line
               or "Refused to" in line or "Uncaught" in line]
    return proc.stdout, console


class Dom(html.parser.HTMLParser):
    """The cards of the dumped DOM: per host its verdict, top finding code, text and charts."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.cards, self.tags, self.card, self.job, self.gone, self.h1 = {}, [], None, None, [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        if "data-gone" in attrs:
            self.gone.append(attrs["data-gone"])
        if tag == "article":
            self.card = self.cards.setdefault(attrs["data-host"], {"charts": {}, "text": []})
        elif self.card is not None and "data-verdict" in attrs:
            self.card["verdict"] = attrs["data-verdict"]
        elif self.card is not None and "data-top" in attrs:
            self.card["top"] = attrs["data-top"]
        elif tag == "figure":
            self.job = attrs.get("data-job")  # a job's own chart (items done or progress), else the host's
        elif self.card is not None and tag == "polyline":
            self.card["charts"][(self.job, attrs["data-series"])] = (int(attrs["data-points"]),
                                                                     len(attrs["points"].split()))

    def handle_data(self, data):
        if self.tags and self.tags[-1] == "h1" and self.card is None:
            self.h1.append(data)
        if self.card is not None:
            self.card["text"].append(data)


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    args = ["--size", "4", "--scenario", "lab-02=h100-load-hwslowdown-edited", "--data-inodes", "2000"]
    with started_fleet(tmp_path_factory.mktemp("lab"), *args) as lab:
        for host, command in JOBS.items():
            rc, result = adhoc(lab, host, "remote_gpu.trainer.detached_job", {"name": "train", "command": command})
            assert rc == 0 and result["running"], result
        data = lab.hosts["lab-03"]["lab_data_dir"]
        fill = ("import os; d = %r; s = os.statvfs(d); os.makedirs(d + '/many', exist_ok=True); "
                "n = int(s.f_files * 0.88) - (s.f_files - s.f_ffree); "
                "[open('%%s/many/%%d' %% (d, i), 'w').close() for i in range(n)]" % data)
        lab.ssh("lab-03", "python3 -c %s" % json.dumps(fill))
        yield lab


@pytest.fixture(scope="module")
def ticks(fleet, tmp_path_factory):
    """TICKS patrol ticks; the reports directory and the last tick's rows."""
    out = tmp_path_factory.mktemp("reports")
    for tick in range(TICKS):
        if tick == 1:  # a host of an earlier inventory (as the demo's lab-04 for a 3-host fleet): history, no host
            records = (out / "history" / "lab-04.jsonl").read_text().splitlines()
            (out / "history" / "lab-09.jsonl").write_text("".join(
                json.dumps(dict(json.loads(line), host="lab-09")) + "\n" for line in records))
        proc, rows = patrol(fleet, out, "-e", "patrol_fail_run=false", "-e", "patrol_history_dir=%s" % (out / "history"),
                            "-e", "patrol_html_path=%s" % (out / "fleet.html"))
        assert proc.returncode == 0 and sorted(rows) == ["lab-01", "lab-02", "lab-03", "lab-04"], proc.stdout
    return out, rows


def test_the_ticks_grade_the_four_boxes(ticks):
    _out, rows = ticks
    assert rows["lab-01"]["verdict"] == "PASS", rows["lab-01"]["findings"]
    assert rows["lab-02"]["top_finding"].startswith("throttle_active: ")
    assert rows["lab-03"]["verdict"] == "WARN" and rows["lab-03"]["top_finding"].startswith("inodes_high: ")
    assert rows["lab-04"]["top_finding"].startswith("job_crashed: ") and INJECTION in rows["lab-04"]["top_finding"]


@pytest.mark.skipif(not chromium(), reason="chromium is not installed (apt-get install -y --no-install-recommends "
                                           "chromium; scripts/setup.sh installs it for CI)")
def test_chromium_shows_every_card_its_charts_and_no_console_error(fleet, ticks, tmp_path):
    out, rows = ticks
    page = out / "fleet.html"
    text = page.read_text()
    # the console scan works: a page that logs an error is caught
    probe = tmp_path / "probe.html"
    probe.write_text("<!DOCTYPE html><html><body><script>console.error('probe-error')</script></body></html>")
    _dom, console = browse(probe.as_uri(), tmp_path, "--dump-dom")
    assert any("probe-error" in line for line in console), console

    dom_text, console = browse(page.as_uri(), tmp_path, "--dump-dom")
    assert console == [], console
    dom = Dom(dom_text)
    # the inventory's hosts only; lab-09 (history, but not in the inventory) is listed as gone, not as a card
    assert sorted(dom.cards) == sorted(rows) and dom.gone == ["lab-09"]
    # titled after the fleet (the lab's inventory file, <state>/inventory.yml: its directory's name), not "patrol"
    assert "".join(dom.h1) == os.path.basename(os.path.dirname(fleet.inventory_path)), dom.h1
    # the font stack falls back to CJK fonts (关机, 释放 in the platforms' actions)
    assert '"Noto Sans CJK SC","Source Han Sans SC","PingFang SC"' in dom_text
    for host, row in rows.items():
        card = dom.cards[host]
        words = "".join(card["text"])
        assert card["verdict"] == row["verdict"] and row["verdict"] in words
        code = row["top_finding"].split(":", 1)[0] if row["top_finding"] != "-" else ""
        assert card["top"] == code, (host, card["top"], row["top_finding"])
        # the top finding, and its action once (a finding's message often ends with its action too)
        action = next((f.get("action") for f in row["findings"] if f.get("code") == code), None) if code else None
        assert (without_action(row["top_finding"], action) in words) if code else "no finding" in words
        if action:
            assert words.count(action.strip().rstrip(".")[:60]) == 1, (host, words)
        # one point per history record that holds the value
        records = [json.loads(line) for line in (out / "history" / ("%s.jsonl" % host)).read_text().splitlines()]
        assert len(records) == TICKS
        for (job, series), (declared, drawn) in card["charts"].items():
            values = [((r.get("by_job") or {}).get(job) or {}) if job else r for r in records]
            expected = len([v for v in values if isinstance(v.get(series), (int, float))])
            assert declared == drawn == expected, (host, job, series, declared, drawn, expected)
        assert card["charts"][(None, "data_i")][0] == TICKS and card["charts"][(None, "gpu_util")][0] == TICKS
        # each job of the box has a chart of its own (here one job, train, per box)
        assert [job for job, _series in card["charts"] if job] == ["train"], card["charts"]
    # the log line's HTML is text in the DOM, never an element
    assert "img" not in dom.tags and "script" not in dom.tags
    assert INJECTION in "".join(dom.cards["lab-04"]["text"])
    # no secret and no controller path but the report directory's own (which the page does not even name)
    for needle in (REPO, fleet.state, str(out), "id_ed25519", "BEGIN OPENSSH"):
        assert needle not in text, needle
    assert not re.search(r"https?://", text)

    os.makedirs(OUTPUT, exist_ok=True)
    for name, size in (("desktop", "1280,2000"), ("phone", "390,3200")):
        shot = os.path.join(OUTPUT, "fleet-%s.png" % name)
        if os.path.exists(shot):
            os.unlink(shot)
        _out, console = browse(page.as_uri(), tmp_path, "--screenshot=%s" % shot, "--window-size=%s" % size,
                               "--hide-scrollbars")
        assert console == [] and os.path.getsize(shot) > 10000, console
    index = json.loads((out / "fleet.json").read_text())
    assert sorted(h["host"] for h in index["hosts"]) == sorted(rows)


def test_the_dashboard_goes_next_to_the_report_and_patrol_dashboard_false_writes_none(fleet, tmp_path):
    proc, rows = patrol(fleet, tmp_path, "-l", "lab-01")
    assert proc.returncode == 0 and rows["lab-01"]["verdict"] == "PASS", proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.html", "fleet.json", "history", "patrol.json"]
    assert len((tmp_path / "history" / "lab-01.jsonl").read_text().splitlines()) == 1
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    proc, rows = patrol(fleet, quiet, "-l", "lab-01", "-e", "patrol_dashboard=false")
    assert proc.returncode == 0 and rows and sorted(p.name for p in quiet.iterdir()) == ["patrol.json"]
