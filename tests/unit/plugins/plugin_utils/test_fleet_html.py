"""fleet_html: the dashboard page from history records: one card per host with its verdict and top finding, charts
with one point per record, the summary (queue, finish, money), alerts on top, escaping of everything from the boxes,
nothing fetched, nothing scripted, and the JSON index."""

from __future__ import annotations

import html.parser
import json
import re

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import fleet_html

NOW = 1796000000
EVIL = '<img src=x onerror="alert(1)">\'&<script>alert(2)</script>'


def records(count, host="lab-01", tick=300, **extra):
    out = []
    for i in range(count):
        record = {"t": NOW - (count - 1 - i) * tick, "v": 1, "kind": "patrol", "host": host, "platform": "autodl",
                  "verdict": "PASS", "done": 10 + i, "total": 10 + count + 10, "prog": i, "unit": "epoch",
                  "data_b": 50 + i * 0.1, "data_i": 60, "gpu_util": 90, "gpu_mem": 70.5, "gpu_count": 8,
                  "log_age": 20}
        record.update(extra)
        out.append(record)
    return out


class Page(html.parser.HTMLParser):
    """Every tag, its attributes, and the text of the page."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.tags, self.text = [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def all(self, tag, **attrs):
        return [a for t, a in self.tags if t == tag and all(a.get(k) == v for k, v in attrs.items())]


def test_cards_show_verdict_top_finding_and_action_worst_first():
    fleet = {"lab-01": records(3),
             "lab-02": records(2, "lab-02", verdict="FAIL", top="job_crashed", msg="1 crash marker", action="Read the log")}
    page = Page(fleet_html.render(fleet, NOW, title="patrol"))
    cards = page.all("article")
    assert [c["data-host"] for c in cards] == ["lab-02", "lab-01"]
    assert [a["data-verdict"] for a in page.all("span") if "data-verdict" in a] == ["FAIL", "PASS"]
    text = "".join(page.text)
    assert "job_crashed: 1 crash marker" in text and "Do: Read the log" in text and "no finding" in text
    assert "12/23 items" in text and "epoch 2" in text and "last log line" in text


def test_charts_hold_one_point_per_record_and_at_most_max_points():
    fleet = {"lab-01": records(3), "lab-02": records(2000, "lab-02", tick=60)}
    page = Page(fleet_html.render(fleet, NOW))
    lines = page.all("polyline")
    by_series = {}
    for line in lines:
        points = line["points"].split()
        assert len(points) == int(line["data-points"])
        by_series.setdefault(line["data-series"], []).append(len(points))
    assert sorted(by_series) == ["data_b", "data_i", "done", "gpu_mem", "gpu_util"]
    # lab-01: its 3 records; lab-02: 2000 records thinned to every 7th (the last one kept)
    assert all(counts == [3, 286] for counts in by_series.values()), by_series
    assert max(len(fleet_html.thin(list(range(n)))) for n in range(2000)) <= fleet_html.MAX_POINTS
    # the thresholds are drawn: 85 and 95 % on the disk charts, the queue total on the items chart
    assert "warn 85%" in " ".join(page.text) and "fail 95%" in " ".join(page.text) and "total 23" in page.text


def test_every_string_from_the_boxes_is_escaped_and_nothing_runs_or_loads():
    fleet = {EVIL: records(2, EVIL, verdict=EVIL, top=EVIL, msg=EVIL, action=EVIL, platform=EVIL, unit=EVIL,
                           jobs=EVIL, cur=EVIL, price=1.5, idle_h=1.0, idle_cost=1.5)}
    clocks = [{"platform": EVIL, "hosts": [EVIL], "clocks": [{"clock": EVIL}]}]
    text = fleet_html.render(fleet, NOW, title=EVIL, clocks=clocks, warnings=[EVIL])
    page = Page(text)
    tags = {tag for tag, _attrs in page.tags}
    assert tags <= {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "section", "article",
                    "span", "b", "dl", "dt", "dd", "div", "figure", "figcaption", "svg", "polyline", "line", "text",
                    "circle", "ul", "li", "details", "summary", "footer"}, tags
    for _tag, attrs in page.tags:
        assert not any(name.startswith("on") or name in ("src", "href") for name in attrs), attrs
    assert "<script" not in text and "<img" not in text and EVIL in " ".join(page.text)
    csp = page.all("meta", **{"http-equiv": "Content-Security-Policy"})[0]["content"]
    assert csp.startswith("default-src 'none';")
    assert not re.search(r"https?://|url\(|@import", text)


def test_summary_counts_queue_finish_and_money():
    fleet = {"lab-01": records(13, price=2.0, cur="EUR"),  # 12 intervals of 5 min at 2 EUR/h: 2 EUR
             "lab-02": records(4, "lab-02", verdict="WARN", done=30, total=30, price=1.0, cur="USD"),
             "lab-03": records(2, "lab-03", verdict="FAIL", done=5, total=10)}  # no progress: no rate
    views = fleet_html.fleet_views(fleet, NOW)
    total = fleet_html.summary(views, NOW)
    assert total["verdicts"] == {"PASS": 1, "WARN": 1, "FAIL": 1}
    assert (total["items_done"], total["items_total"]) == (22 + 30 + 5, 33 + 30 + 10)
    assert total["finish_in_s"] is None and total["hosts_without_rate"] == 1
    assert total["spent"] == {"EUR": 2.0, "USD": 0.25} and total["burn_per_hour"] == {"EUR": 2.0, "USD": 1.0}
    lab01 = [v for v in views if v["host"] == "lab-01"][0]
    assert lab01["eta_s"] == 11 * 300  # one item per tick, 11 items to go
    fleet.pop("lab-03")
    assert fleet_html.summary(fleet_html.fleet_views(fleet, NOW), NOW)["finish_in_s"] == 11 * 300


def test_a_host_not_seen_for_a_day_no_longer_burns_money():
    fleet = {"lab-01": records(2, price=2.0, cur="EUR")}
    assert fleet_html.summary(fleet_html.fleet_views(fleet, NOW + 2 * 86400), NOW + 2 * 86400)["burn_per_hour"] == {}


def test_idle_billing_and_danger_clocks_come_first_in_words():
    fleet = {"lab-01": records(2, verdict="WARN", top="idle_billing", msg="the queue finished 2.0 h ago",
                               action="Stop the meter", idle_h=2.0, idle_cost=4.8, price=2.4, cur="EUR")}
    clocks = [{"platform": "autodl", "hosts": ["lab-01"],
               "clocks": [{"clock": "a powered-off instance is released after 15 days", "verified": "2026-06"}]}]
    text = fleet_html.render(fleet, NOW, clocks=clocks)
    alerts = text[text.index('id="alerts"'):text.index("<h2>Fleet</h2>")]
    assert "lab-01</b> idle and billing: the queue finished 2.0 h ago (about 4.80 EUR so far). Stop the meter" in alerts
    assert "Danger clock, <b>autodl</b> (lab-01): a powered-off instance is released after 15 days" in alerts
    assert 'id="alerts"' not in fleet_html.render({"lab-01": records(2)}, NOW)


def test_light_dark_and_phone_width():
    text = fleet_html.render({"lab-01": records(2)}, NOW)
    assert "@media (prefers-color-scheme:dark)" in text and "@media (max-width:480px)" in text
    assert 'name="viewport" content="width=device-width, initial-scale=1"' in text


def test_index_is_json_with_the_summary_and_no_series():
    fleet = {"lab-01": records(3)}
    index = fleet_html.index(fleet, NOW, files={"lab-01": "history/lab-01.jsonl"})
    json.dumps(index)
    host = index["hosts"][0]
    assert host["history_file"] == "history/lab-01.jsonl" and host["points"]["done"] == 3
    assert "series" not in host and index["summary"]["hosts"] == 1 and index["generated_at"].endswith("UTC")


def test_empty_history_is_a_page_not_a_traceback():
    assert "no history yet" in fleet_html.render({}, NOW)
    assert "lab-01" in fleet_html.render({"lab-01": [{"t": NOW}]}, NOW)  # a record with only a time


def test_a_host_not_seen_within_the_window_is_left_out():
    fleet = {"lab-01": records(2), "gone": records(2, "gone", tick=86400 * 3)}
    fleet["gone"] = [dict(r, t=r["t"] - 8 * 86400) for r in fleet["gone"]]
    assert [v["host"] for v in fleet_html.fleet_views(fleet, NOW)] == ["lab-01"]
    assert [v["host"] for v in fleet_html.fleet_views(fleet, NOW, window=30 * 86400)] == ["gone", "lab-01"]


def test_hand_edited_records_of_any_type_are_a_page_not_a_traceback():
    odd = [[1], {"a": 1}, "x", None, True, float("nan"), -5, 10 ** 30]
    for value in odd:
        record = dict((key, value) for key in ("verdict", "kind", "top", "msg", "action", "platform", "gpus",
                                               "done", "total", "prog", "prog_total", "unit", "data_b", "data_i",
                                               "gpu_util", "gpu_mem", "gpu_count", "log_age", "price", "cur",
                                               "idle_h", "idle_cost", "jobs", "b", "n"))
        fleet = {"lab-01": [dict(record, t=NOW - 600), dict(record, t=NOW)]}
        text = fleet_html.render(fleet, NOW)
        assert 'data-host="lab-01"' in text
        json.dumps(fleet_html.index(fleet, NOW), default=str)


def two_job_records(count, tick=300):
    """A host running two experiments: train (items 0..count-1 of 20, epoch 50+i) and exp2 (step 10*i, no queue)."""
    out = []
    for i in range(count):
        out.append({"t": NOW - (count - 1 - i) * tick, "v": 1, "kind": "patrol", "host": "lab-01",
                    "platform": "autodl", "verdict": "PASS", "data_b": 50, "data_i": 60, "gpu_util": 90,
                    "gpu_mem": 70, "by_job": {
                        "train": {"st": "ALIVE", "done": i, "total": 20, "prog": 50 + i, "unit": "epoch",
                                  "log_age": 5},
                        "exp2": {"st": "ALIVE", "prog": 10 * i, "unit": "step", "log_age": 7,
                                 **({"fast": 1} if i == count - 1 else {})}}})
    return out


def test_two_jobs_on_one_host_are_two_charts_never_one_zig_zag():
    fleet = {"lab-01": two_job_records(4)}
    page = Page(fleet_html.render(fleet, NOW))
    figures = [a["data-job"] for a in page.all("figure") if "data-job" in a]
    assert figures == ["exp2", "train"]  # one chart per (host, job)
    charts = [a["data-chart"] for a in page.all("svg") if "data-chart" in a]
    assert "exp2: progress" in charts and "train: items done" in charts
    lines = [(line["data-series"], line["points"]) for line in page.all("polyline")]
    exp2_points = [float(p.split(",")[1]) for p in lines[0][1].split()]
    train_points = [float(p.split(",")[1]) for p in lines[1][1].split()]
    # each series only rises (a y that only falls on the SVG): no point of the other job in between
    assert lines[0][0] == "prog" and exp2_points == sorted(exp2_points, reverse=True) and len(exp2_points) == 4
    assert lines[1][0] == "done" and train_points == sorted(train_points, reverse=True) and len(train_points) == 4
    text = " ".join(page.text)
    assert "job exp2" in text and "step 30" in text and "1 too fast" in text
    assert "job train" in text and "3/20 items" in text and "epoch 53" in text
    index = fleet_html.index(fleet, NOW)
    (host,) = index["hosts"]
    assert [(j["name"], j["state"], j["points"]) for j in host["by_job"]] == [
        ("exp2", "ALIVE", {"done": 0, "prog": 4}), ("train", "ALIVE", {"done": 4, "prog": 4})]
    assert (host["done"], host["total"]) == (3, 20) and index["summary"]["items_total"] == 20
    assert host["by_job"][0]["too_fast"] == 1 and "series" not in host["by_job"][0]


def test_a_host_without_jobs_says_so_and_is_no_failure():
    record = dict(two_job_records(1)[0], by_job={})
    page = Page(fleet_html.render({"lab-01": [record]}, NOW))
    text = " ".join(page.text)
    assert "none (nothing launched)" in text and [a["data-verdict"] for a in page.all("span")
                                                  if "data-verdict" in a] == ["PASS"]
    assert fleet_html.index({"lab-01": [record]}, NOW)["hosts"][0]["no_jobs"] is True


def test_a_job_gone_from_the_latest_record_is_no_longer_drawn_and_old_records_still_are():
    history = two_job_records(3)
    history[-1] = dict(history[-1], by_job={"exp2": history[-1]["by_job"]["exp2"]})
    page = Page(fleet_html.render({"lab-01": history}, NOW))
    assert [a["data-job"] for a in page.all("figure") if "data-job" in a] == ["exp2"]
    # a history written before jobs were recorded one by one: the host's own queue and progress, one chart
    legacy = Page(fleet_html.render({"lab-01": records(3)}, NOW))
    assert not [a for a in legacy.all("figure") if "data-job" in a]
    assert [a["data-chart"] for a in legacy.all("svg")][0] == "items done" and "12/23 items" in legacy.text


def test_only_the_inventorys_hosts_have_cards_and_the_others_are_listed_as_gone():
    """The demo's lab-04, patrolled once by a 4-host fleet and then left out of a 3-host inventory, must not top the
    3-host fleet's page (as FAIL, in the summary): it is listed under Gone, with its last verdict."""
    fleet = {"lab-01": records(2), "lab-04": records(1, "lab-04", verdict="FAIL", top="throttle_active", msg="slow")}
    text = fleet_html.render(fleet, NOW, title="mine", inventory={"lab-01", "lab-02"})
    page = Page(text)
    assert [c["data-host"] for c in page.all("article")] == ["lab-01"]
    assert [a["data-gone"] for a in page.all("li") if "data-gone" in a] == ["lab-04"]
    words = "".join(page.text)
    assert "Gone" in words and "lab-04: FAIL, last checked" in words and "throttle_active" not in words
    assert '<b>1</b><span class="verdict v-pass">PASS 1</span>' in text  # the summary counts lab-01 only
    index = fleet_html.index(fleet, NOW, inventory={"lab-01"}, title="mine")
    assert [h["host"] for h in index["hosts"]] == ["lab-01"] and index["gone"] == ["lab-04"] and index["title"] == "mine"
    # without an inventory (an old caller), every host with history has its card, and nothing is gone
    assert len(Page(fleet_html.render(fleet, NOW)).all("article")) == 2 and "Gone" not in fleet_html.render(fleet, NOW)


def test_the_action_shows_once_even_when_the_message_ends_with_it():
    action = "this box is unfit: stop it (power_off: power off (关机) in the console) and rent a different one"
    message = "GPU 0 is being throttled: HW slowdown in 6 of 6 samples. This box is unfit: stop it (power_off: " \
              "power off (关机) in the console) and rent a different one."
    fleet = {"lab-04": records(1, "lab-04", verdict="FAIL", top="throttle_active", msg=message, action=action)}
    words = "".join(Page(fleet_html.render(fleet, NOW)).text)
    assert words.count("rent a different one") == 1, words
    assert "throttle_active: GPU 0 is being throttled: HW slowdown in 6 of 6 samples." in words
    assert "Do: this box is unfit" in words
    assert fleet_html.without_action("disk full", "free space on the data disk") == "disk full"


def test_title_names_the_fleet_and_the_font_stack_covers_cjk():
    text = fleet_html.render({"lab-01": records(1)}, NOW, title="autodl-prod", source="patrol")
    page = Page(text)
    assert "<title>autodl-prod: 1 host(s)</title>" in text and "<h1>autodl-prod</h1>" in text
    assert "by patrol" in "".join(page.text)
    stack = re.search(r"body\{[^}]*font:[^;}]*", fleet_html.CSS.replace("\n", "")).group(0)
    for family in ('"Noto Sans CJK SC"', '"Source Han Sans SC"', '"PingFang SC"', '"Microsoft YaHei"'):
        assert family in stack, stack
    assert stack.endswith("sans-serif")
