# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet dashboard (pure functions, controller side): one self-contained HTML page, and its JSON index, from
the hosts' history records (fleet_history).

The page has no script and fetches nothing: its Content-Security-Policy forbids every source but inline styles and
data: images, so it opens from a laptop's disk or a static web server. Every string that came from a box or the
inventory (host names, findings, log lines) is HTML-escaped; numbers are formatted, never copied. Charts are inline
SVG polylines, one point per history record in the window (at most MAX_POINTS: beyond that every k-th record).
A host's queue and progress are charted per job (the records' ``by_job``): one chart per (host, job).
Given the inventory's hosts, the page has cards for those only; a host that has history but is no longer in the
inventory is listed under "Gone", outside the summary. The font stack ends in CJK fonts, for the platforms' Chinese
console words (关机, 释放) on a machine whose default fonts lack them."""

from __future__ import annotations

import datetime
import html
import json
import math
import os

from ansible_collections.remote_gpu.trainer.plugins.module_utils import safe_read
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.fleet_table import number as _num

MAX_POINTS = 288
SAMPLE_POINTS = MAX_POINTS // 2  # what fleet_history.load_fleet parses over the window (plus the last RATE_WINDOW)
WINDOW = 7 * 86400          # the charts' window (seconds)
RATE_WINDOW = 6 * 3600      # the progress rate of the estimated finish is measured over the last 6 hours
BURN_FRESH = 86400          # a host counts as burning money while its last record is younger than this
SPEND_GAP = 6 * 3600        # longest gap between two records counted as billed time (unless compacted wider)
VERDICTS = ("FAIL", "UNREACHABLE", "NO_RESULT", "WARN", "PASS")
VERDICT_CLASS = {"FAIL": "v-fail", "UNREACHABLE": "v-down", "NO_RESULT": "v-down", "WARN": "v-warn",
                 "PASS": "v-pass"}
CHART_W, CHART_H = 300, 64

CSS = """
:root{--bg:#f6f7f9;--fg:#1b1f24;--muted:#5b6470;--card:#fff;--line:#d8dde3;--pass:#1a7f37;--warn:#9a6700;
--fail:#cf222e;--down:#6e40c9;--s1:#0969da;--s2:#bc4c00;--thr:#cf222e;--thw:#9a6700;color-scheme:light dark}
@media (prefers-color-scheme:dark){:root{--bg:#0d1117;--fg:#e6edf3;--muted:#8d96a0;--card:#161b22;--line:#30363d;
--pass:#3fb950;--warn:#d29922;--fail:#f85149;--down:#a371f7;--s1:#58a6ff;--s2:#f0883e;--thr:#f85149;--thw:#d29922}}
*{box-sizing:border-box}body{margin:0;padding:12px;background:var(--bg);color:var(--fg);
font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans CJK SC","Source Han Sans SC","PingFang SC",
"Hiragino Sans GB","Microsoft YaHei","WenQuanYi Micro Hei","Noto Sans CJK JP","Noto Sans CJK KR",sans-serif}
h1{font-size:20px;margin:4px 0 8px}h2{font-size:16px;margin:16px 0 8px}.muted{color:var(--muted)}
.alerts{border:2px solid var(--fail);border-radius:8px;padding:8px 12px;background:var(--card)}
.alerts li{margin:4px 0}.summary{display:flex;flex-wrap:wrap;gap:8px}.stat{background:var(--card);
border:1px solid var(--line);border-radius:8px;padding:8px 12px;min-width:140px}.stat b{display:block;font-size:18px}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(340px,1fr));gap:12px}
.card{background:var(--card);border:1px solid var(--line);border-left:6px solid var(--line);border-radius:8px;
padding:10px 12px;overflow-wrap:anywhere;min-width:0}.card h3{margin:0 0 4px;font-size:16px}
.card.v-pass{border-left-color:var(--pass)}.card.v-warn{border-left-color:var(--warn)}
.card.v-fail{border-left-color:var(--fail)}.card.v-down{border-left-color:var(--down)}
.verdict{font-weight:700;padding:1px 6px;border-radius:4px;color:#fff}.verdict.v-pass{background:var(--pass)}
.verdict.v-warn{background:var(--warn)}.verdict.v-fail{background:var(--fail)}.verdict.v-down{background:var(--down)}
.top{margin:6px 0}.action{margin:2px 0 6px;color:var(--muted)}dl{display:grid;grid-template-columns:auto 1fr;
gap:2px 10px;margin:6px 0}dt{color:var(--muted)}dd{margin:0}.charts{display:grid;grid-template-columns:1fr 1fr;
gap:6px}figure{margin:0}figcaption{font-size:12px;color:var(--muted)}svg.chart{width:100%;height:auto;
display:block;border:1px solid var(--line);border-radius:4px}svg.chart .s1{stroke:var(--s1)}
svg.chart .s2{stroke:var(--s2)}svg.chart polyline{fill:none;stroke-width:1.5}svg.chart .thr{stroke:var(--thr);
stroke-dasharray:4 3}svg.chart .thw{stroke:var(--thw);stroke-dasharray:4 3}svg.chart text{fill:var(--muted);
font-size:9px}footer{margin-top:16px;font-size:12px}
@media (max-width:480px){body{padding:6px}.grid{grid-template-columns:1fr}.charts{grid-template-columns:1fr}
.stat{min-width:0;flex:1 1 45%}}
"""


def esc(value):
    """Any value as HTML text (quotes escaped too, so it is safe in attributes)."""
    return html.escape("" if value is None else str(value), quote=True)


def _text(value):
    """A record's text value as str (None when empty or absent): a hand-edited record may hold anything."""
    return None if value is None or value == "" else str(value)


def ago(seconds):
    """``45 s``, ``12 min``, ``3.5 h``, ``4.2 d``."""
    seconds = max(0, seconds)
    if seconds < 90:
        return "%d s" % seconds
    if seconds < 90 * 60:
        return "%d min" % (seconds // 60)
    if seconds < 48 * 3600:
        return "%.1f h" % (seconds / 3600.0)
    return "%.1f d" % (seconds / 86400.0)


def utc(epoch):
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _latest(records, key, text=False):
    """The last record that holds a number (``text``: a non-empty text) for ``key``, or None."""
    for record in reversed(records):
        value = record.get(key)
        if (isinstance(value, str) and value) if text else _num(value) is not None:
            return record
    return None


def thin(points, limit=MAX_POINTS):
    """At most ``limit`` points: every k-th, the last one always kept."""
    if len(points) <= limit:
        return points
    step = int(math.ceil(len(points) / float(limit)))
    picked = points[len(points) - 1::-step][::-1]
    return picked


def series(records, key, start):
    """(time, value) of every record since ``start`` that holds a number for ``key``."""
    out = []
    for record in records:
        t = record.get("t", 0)
        if t < start:
            continue
        value = _num(record.get(key))
        if value is not None:
            out.append((t, value))
    return out


def eta(records, now):
    """The host's queue: (done, total, seconds to finish or None). Rate from the records of the last
    RATE_WINDOW seconds that hold items done."""
    last = _latest(records, "done")
    if last is None:
        return None, None, None
    done, total = last["done"], _num(last.get("total"))
    if not total or done >= total:
        return done, total, 0 if total else None
    first = None
    for record in records:
        if record.get("t", 0) >= last["t"] - RATE_WINDOW and _num(record.get("done")) is not None:
            first = record
            break
    if first is None or first is last or last["t"] <= first["t"] or done <= first["done"]:
        return done, total, None
    rate = (done - first["done"]) / float(last["t"] - first["t"])
    return done, total, max(0, (total - done) / rate - (now - last["t"]))


def spent(records):
    """(money spent, currency) over the history: price per hour x the time between records that carry a price
    (a gap counts up to SPEND_GAP, or a compacted record's bucket)."""
    total, currency = 0.0, None
    for before, after in zip(records, records[1:]):
        price = _num(before.get("price"))
        if price is None:
            continue
        gap = max(0, after.get("t", 0) - before.get("t", 0))
        total += price * min(gap, max(SPEND_GAP, _num(after.get("b")) or 0)) / 3600.0
        currency = _text(before.get("cur")) or currency or "?"
    return (round(total, 2), currency) if currency else (None, None)


def _by_job(record):
    value = record.get("by_job") if isinstance(record, dict) else None
    return value if isinstance(value, dict) else None


def _progress_label(record):
    return "%s %s%s" % (_text(record.get("unit")) or "progress", _fmt(record["prog"]),
                        "/%s" % _fmt(record["prog_total"]) if _num(record.get("prog_total")) is not None else "")


def job_view(name, records, now, start):
    """One job of a host (its ``by_job`` entries in the history records), as the card and the index show it: its
    latest state, queue and progress, its estimated finish, and its own series (items done, progress), so that each
    (host, job) is a chart of its own."""
    own = []
    for record in records:
        entry = (_by_job(record) or {}).get(name)
        if isinstance(entry, dict):
            own.append(dict(entry, t=record.get("t", 0), b=record.get("b")))
    last = own[-1] if own else {"t": start}
    view = {"name": name, "state": _text(last.get("st")), "t": last.get("t"), "start": start,
            "too_fast": _num(last.get("fast")) or 0}
    view["done"], view["total"], view["eta_s"] = eta(own, now)
    progress = _latest(own, "prog")
    view["progress"] = _progress_label(progress) if progress else None
    log = _latest(own, "log_age")
    view["log_age"] = log["log_age"] + max(0, now - log["t"]) if log else None
    view["series"] = dict((key, series(own, key, start)) for key in ("done", "prog"))
    return view


def _host_queue(jobs):
    """A host's (done, total, seconds to finish) from its jobs' views: the sums of the graded ones; the finish is
    the last job's, unknown when an open job has no rate."""
    graded = [job for job in jobs if job["total"]]
    if not graded:
        done = [job["done"] for job in jobs if job["done"] is not None]
        return (sum(done) if done else None), None, None
    done, total = sum(job["done"] or 0 for job in graded), sum(job["total"] for job in graded)
    open_jobs = [job for job in graded if (job["done"] or 0) < job["total"]]
    if not open_jobs:
        return done, total, 0
    known = [job["eta_s"] for job in open_jobs if job["eta_s"] is not None]
    return done, total, max(known) if len(known) == len(open_jobs) else None


def host_view(host, records, now, window=WINDOW):
    """What the card, the summary and the index show of one host (a dict of plain values). ``jobs_view``: each job
    of the box (from the latest record that lists them, ``by_job``), None for a history written before jobs were
    recorded one by one (then the host's own queue and progress are shown, as then)."""
    last = records[-1]
    verdict = last.get("verdict")
    view = {"host": host, "verdict": verdict if isinstance(verdict, str) and verdict else "?",
            "kind": _text(last.get("kind")), "t": last.get("t"),
            "top": last.get("top"), "msg": last.get("msg"), "action": last.get("action"),
            "platform": (_latest(records, "platform", text=True) or {}).get("platform")}
    gpus = _latest(records, "gpus", text=True)
    count = _latest(records, "gpu_count")
    view["gpu"] = gpus["gpus"] if gpus else ("%d GPU(s)" % count["gpu_count"] if count else None)
    for key in ("gpu_util", "gpu_mem", "data_b", "data_i", "dur_b", "dur_i", "jobs"):
        view[key] = last.get(key)
    progress = _latest(records, "prog")
    if progress:
        view["progress"] = _progress_label(progress)
    log = _latest(records, "log_age")
    view["log_age"] = log["log_age"] + max(0, now - log["t"]) if log else None
    view["done"], view["total"], view["eta_s"] = eta(records, now)
    view["spent"], view["currency"] = spent(records)
    price = _num(last.get("price"))
    view["price"] = price if price is not None and now - last.get("t", 0) <= BURN_FRESH else None
    if view["price"] is not None:
        view["currency"] = _text(last.get("cur")) or view["currency"] or "?"
    if _num(last.get("idle_h")) is not None:
        view["idle_h"], view["idle_cost"] = last["idle_h"], _num(last.get("idle_cost"))
    start = max(now - window, records[0].get("t", 0))
    view["series"] = dict((key, series(records, key, start)) for key in (
        "done", "prog", "gpu_util", "gpu_mem", "data_b", "data_i"))
    view["start"] = start
    listed = None
    for record in reversed(records):
        listed = _by_job(record)
        if listed is not None:
            break
    view["jobs_view"] = None if listed is None else [job_view(name, records, now, start) for name in sorted(listed)]
    if view["jobs_view"] is not None:
        view["no_jobs"] = not view["jobs_view"]
        view["done"], view["total"], view["eta_s"] = _host_queue(view["jobs_view"])
        view["progress"] = None if len(view["jobs_view"]) != 1 else view["jobs_view"][0]["progress"]
    return view


def _fmt(value):
    value = _num(value)
    if value is None:
        return "-"
    return "%d" % value if float(value).is_integer() else "%.1f" % value


def summary(views, now):
    """The fleet summary: hosts by verdict, queue completion, estimated finish, money spent and burning per hour
    (per currency)."""
    counts = {}
    for view in views:
        counts[view["verdict"]] = counts.get(view["verdict"], 0) + 1
    done = sum(v["done"] or 0 for v in views if v["total"])
    total = sum(v["total"] or 0 for v in views if v["total"])
    open_hosts = [v for v in views if v["total"] and (v["done"] or 0) < v["total"]]
    known = [v["eta_s"] for v in open_hosts if v["eta_s"] is not None]
    spent_by, burn_by = {}, {}
    for view in views:
        if view["spent"] is not None:
            spent_by[view["currency"]] = round(spent_by.get(view["currency"], 0) + view["spent"], 2)
        if view["price"] is not None:
            burn_by[view["currency"]] = round(burn_by.get(view["currency"], 0) + view["price"], 2)
    if not open_hosts:
        finish = 0 if total else None
    else:
        finish = max(known) if len(known) == len(open_hosts) else None
    return {"hosts": len(views), "verdicts": counts, "items_done": done, "items_total": total,
            "completion_pct": round(100.0 * done / total, 1) if total else None, "finish_in_s": finish,
            "hosts_without_rate": len(open_hosts) - len(known), "spent": spent_by, "burn_per_hour": burn_by}


def chart(title, view, lines, top=100.0, thresholds=(), now=None, suffix="%", job=None):
    """One inline-SVG chart: ``lines`` are (series key, css class); ``thresholds`` (value, css class, label);
    ``job``: the job whose series it draws (a ``data-job`` attribute)."""
    width, height, pad = CHART_W, CHART_H, 2
    start, end = view["start"], max(now or 0, view["t"] or 0)
    values = [value for key, _cls in lines for _t, value in view["series"][key]]
    top = max([top] + values + [value for value, _cls, _label in thresholds]) or 1.0
    span = float(max(1, end - start))

    def xy(t, value):
        return (pad + (width - 2 * pad) * (t - start) / span,
                height - pad - (height - 2 * pad) * min(max(value, 0), top) / top)

    parts, counts = [], []
    for number, (value, cls, label) in enumerate(thresholds):
        _x, y = xy(start, value)
        parts.append('<line class="%s" x1="0" x2="%d" y1="%.1f" y2="%.1f"/><text x="%d" y="%.1f">%s</text>' % (
            cls, width, y, y, width - 55 * (len(thresholds) - number), max(9, y - 2), esc(label)))
    for key, cls in lines:
        points = thin(view["series"][key])
        counts.append(len(points))
        coords = " ".join("%.1f,%.1f" % xy(t, value) for t, value in points)
        if len(points) == 1:  # a single point still shows
            parts.append('<circle class="%s" cx="%s" cy="%s" r="2" fill="currentColor"/>' % ((cls,) + tuple(
                coords.split(","))))
        parts.append('<polyline class="%s" data-series="%s" data-points="%d" points="%s"/>' % (
            cls, esc(key), len(points), coords))
    return ('<figure%s><svg class="chart" data-chart="%s" viewBox="0 0 %d %d" role="img" aria-label="%s">%s</svg>'
            '<figcaption>%s (%s points)</figcaption></figure>' % (
                ' data-job="%s"' % esc(job) if job is not None else "",
                esc(title), width, height, esc(title), "".join(parts), esc(title),
                "/".join("%d" % c for c in counts)))


def _job_text(job):
    """A job's line on its host's card: ``ALIVE, 1/4 items, done in about 2.0 h, epoch 12/20, log 1 min ago``."""
    words = [job["state"] or "?"]
    if job["total"] or job["done"] is not None:
        words.append("%s/%s items%s" % (_fmt(job["done"]), _fmt(job["total"]), (
            ", done in about %s" % ago(job["eta_s"]) if job["eta_s"] else "")))
    if job["too_fast"]:
        words.append("%s too fast" % _fmt(job["too_fast"]))
    if job["progress"]:
        words.append(job["progress"])
    if job["log_age"] is not None:
        words.append("log %s ago" % ago(job["log_age"]))
    return ", ".join(words)


def _job_chart(job, now):
    """A job's own chart: its items done against its total for a queue of several items, else (one item, or no
    item done yet) its progress (epoch or step); items done when it has no progress."""
    several = job["total"] and job["total"] > 1
    if job["series"]["done"] and (several or not job["series"]["prog"]):
        top = float(job["total"] or 1)
        return chart("%s: items done" % job["name"], job, [("done", "s1")], top=top, now=now,
                     thresholds=[(job["total"], "thw", "total %d" % job["total"])] if job["total"] else [],
                     job=job["name"])
    return chart("%s: progress" % job["name"], job, [("prog", "s1")], top=1.0, now=now, job=job["name"])


def without_action(message, action):
    """``message`` without the action at its end, when it repeats it (a finding's message often ends with what to do,
    which the card shows once, as its action); the message as it is otherwise."""
    if not isinstance(message, str) or not isinstance(action, str) or not message or not action:
        return message  # a hand-edited record may hold anything
    probe = action.strip().rstrip(".\u2026").strip()[:40].lower()
    at = message.lower().rfind(probe) if len(probe) >= 8 else -1
    if at <= 0:
        return message
    return message[:at].rstrip(" .;:,-") + "."


def _card(view, now, warn_pct, fail_pct):
    cls = VERDICT_CLASS.get(view["verdict"], "v-down")
    rows = [("platform", view["platform"] or "-"), ("GPU", view["gpu"] or "-")]
    if view["gpu_util"] is not None:
        rows.append(("GPU use", "%s%% util, %s%% memory" % (_fmt(view["gpu_util"]), _fmt(view["gpu_mem"]))))
    if view["total"] or view["done"] is not None:
        rows.append(("queue", "%s/%s items%s" % (_fmt(view["done"]), _fmt(view["total"]), (
            ", done in about %s" % ago(view["eta_s"]) if view["eta_s"] else ""))))
    jobs = view.get("jobs_view")
    if jobs is not None:
        rows += [("job %s" % job["name"], _job_text(job)) for job in jobs] or [("jobs", "none (nothing launched)")]
    else:
        if view.get("progress"):
            rows.append(("progress", view["progress"]))
        if view.get("jobs"):
            rows.append(("jobs", view["jobs"]))
    rows.append(("last log line", ago(view["log_age"]) + " ago" if view["log_age"] is not None else "-"))
    rows.append(("data disk", "%s%% bytes, %s%% inodes" % (_fmt(view["data_b"]), _fmt(view["data_i"]))))
    if view["dur_b"] is not None or view["dur_i"] is not None:
        rows.append(("durable FS", "%s%% bytes, %s%% inodes" % (_fmt(view["dur_b"]), _fmt(view["dur_i"]))))
    if view["price"] is not None:
        rows.append(("price", "%.2f %s/h" % (view["price"], view["currency"])))
    if view["spent"] is not None:
        rows.append(("spent", "about %.2f %s" % (view["spent"], view["currency"])))
    rows.append(("checked", "%s ago (%s)" % (ago(now - view["t"]), view["kind"] or "?")))
    message = without_action(view["msg"], view["action"])
    top = ("<b>%s</b>: %s" % (esc(view["top"]), esc(message or "")) if view["top"] else
           esc(message or "no finding"))
    disk = [(warn_pct, "thw", "warn %d%%" % warn_pct), (fail_pct, "thr", "fail %d%%" % fail_pct)]
    progress_key = "done" if view["series"]["done"] else "prog"
    if jobs is not None:  # one chart per job of the box: two experiments never share (and zig-zag) one line
        charts = [_job_chart(job, now) for job in jobs]
    else:
        charts = [chart("items done" if progress_key == "done" else "progress", view, [(progress_key, "s1")],
                        top=float(view["total"] or 1) if progress_key == "done" else 1.0, now=now,
                        thresholds=[(view["total"], "thw", "total %d" % view["total"])] if view["total"] and
                        progress_key == "done" else [])]
    charts += [
        chart("GPU util / memory %", view, [("gpu_util", "s1"), ("gpu_mem", "s2")], now=now),
        chart("data disk bytes %", view, [("data_b", "s1")], thresholds=disk, now=now),
        chart("data disk inodes %", view, [("data_i", "s2")], thresholds=disk, now=now),
    ]
    return ('<article class="card %s" data-host="%s"><h3>%s <span class="verdict %s" data-verdict="%s">%s</span>'
            '</h3><p class="top" data-top="%s">%s</p>%s<dl>%s</dl><div class="charts">%s</div></article>' % (
                cls, esc(view["host"]), esc(view["host"]), cls, esc(view["verdict"]), esc(view["verdict"]),
                esc(view["top"] or ""), top,
                '<p class="action">Do: %s</p>' % esc(view["action"]) if view["action"] else "",
                "".join("<dt>%s</dt><dd>%s</dd>" % (esc(k), esc(v)) for k, v in rows), "".join(charts)))


def _money(by_currency):
    return ", ".join("%.2f %s" % (value, currency) for currency, value in sorted(by_currency.items())) or "-"


def _alerts(views, clocks, now):
    items = []
    for view in views:
        if view.get("idle_h") is not None:
            items.append('<li data-alert="idle_billing"><b>%s</b> idle and billing: the queue finished %.1f h ago%s. '
                         '%s</li>' % (esc(view["host"]), view["idle_h"],
                                      " (about %.2f %s so far)" % (view["idle_cost"], esc(view["currency"]))
                                      if view.get("idle_cost") is not None else "", esc(view["action"] or "")))
    for entry in clocks or []:
        if not isinstance(entry, dict):
            continue
        texts = [c.get("clock") for c in entry.get("clocks") or [] if isinstance(c, dict) and c.get("clock")]
        hosts = entry.get("hosts") if isinstance(entry.get("hosts"), list) else []
        if texts:
            items.append('<li data-alert="danger_clock">Danger clock, <b>%s</b> (%s): %s</li>' % (
                esc(entry.get("platform")), esc(", ".join(str(h) for h in hosts)), esc("; ".join(map(str, texts)))))
    if not items:
        return ""
    return '<section class="alerts" id="alerts"><h2>Needs attention</h2><ul>%s</ul></section>' % "".join(items)


def fleet_views(fleet, now, window=WINDOW, inventory=None):
    """The views of the hosts seen within ``window``, worst verdict first, then by host name; with ``inventory`` (the
    inventory's host names), of those hosts only."""
    views = [host_view(host, records, now, window) for host, records in fleet.items()
             if records and records[-1].get("t", 0) >= now - window  # a host gone for longer is left out
             and (inventory is None or host in inventory)]
    order = dict((verdict, i) for i, verdict in enumerate(VERDICTS))
    return sorted(views, key=lambda v: (order.get(v["verdict"], 0), v["host"]))


def gone_hosts(fleet, now, window=WINDOW, inventory=None):
    """[(host, its last record)] of the hosts seen within ``window`` that ``inventory`` no longer holds, by name."""
    if inventory is None:
        return []
    return [(host, records[-1]) for host, records in sorted(fleet.items())
            if host not in inventory and records and (_num(records[-1].get("t")) or 0) >= now - window]


def _gone(gone, now):
    if not gone:
        return ""
    items = "".join('<li data-gone="%s"><b>%s</b>: %s, last checked %s ago</li>' % (
        esc(host), esc(host), esc(_text(last.get("verdict")) or "?"), esc(ago(now - _num(last.get("t"))))) for host, last in gone)
    return ('<h2>Gone</h2><section class="gone"><p class="muted">not in the inventory any more; their history stays '
            'in the history directory</p><ul>%s</ul></section>' % items)


PULL_VERIFIED = "PULL_VERIFIED.json"
MAX_PULLED_RUNS = 50  # per host
MAX_VERIFIED_BYTES = 16 << 20


def curves_of(verified):
    """What a verified pull holds of the run's record (PULL_VERIFIED.json's ``files``): the items whose TensorBoard
    events it holds (``durable/<item>/tb/...``), the number of event files, and the wandb runs it holds
    (``durable/<item>/wandb/wandb/<offline-run-...>/``, relative to ``durable/``) -> (items, count, runs), sorted."""
    items, count, runs = set(), 0, set()
    for entry in (verified or {}).get("files") or []:
        path = entry.get("path") if isinstance(entry, dict) else None
        parts = path.split("/") if isinstance(path, str) else []
        if len(parts) < 4 or parts[0] != "durable" or ".." in parts or "" in parts:
            continue
        if parts[2] == "tb":
            items.add(parts[1])
            count += 1
        elif parts[2:4] == ["wandb", "wandb"] and len(parts) >= 6 and parts[4].startswith("offline-run-"):
            runs.add("/".join(parts[1:5]))
    return sorted(items), count, sorted(runs)


def pulled_curves(pull_root, hosts, base):
    """The TensorBoard curves (and offline wandb runs) that teardown pulled and verified, per host: ``{host: [{"run",
    "items", "files", "wandb_runs", "logdir", "href"}]}`` from each ``<pull_root>/<host>/<run>/PULL_VERIFIED.json`` (read with safe_read, bounded;
    a missing, torn or foreign file is skipped). ``logdir`` is the directory to give ``tensorboard --logdir``
    (``<run>/data/durable``, one TensorBoard run per item: ``<item>/tb``), ``href`` the same relative to ``base``, the
    page's directory; ``wandb_runs`` the offline runs' directories, relative to ``logdir``."""
    found = {}
    for host in sorted(hosts or ()):
        if not isinstance(host, str) or not host or "/" in host or host in (".", ".."):
            continue
        host_dir = os.path.join(pull_root, host)
        try:
            runs = sorted(name for name in os.listdir(host_dir) if not name.startswith("."))[:MAX_PULLED_RUNS]
        except OSError:
            continue
        for run in runs:
            text = safe_read.read_text(os.path.join(host_dir, run, PULL_VERIFIED), MAX_VERIFIED_BYTES)
            try:
                verified = json.loads(text) if text else None
            except ValueError:
                verified = None
            items, count, wandb_runs = curves_of(verified if isinstance(verified, dict) else None)
            if not count and not wandb_runs:
                continue
            logdir = os.path.join(host_dir, run, "data", "durable")
            found.setdefault(host, []).append({"run": run, "items": items, "files": count, "logdir": logdir,
                                               "wandb_runs": wandb_runs,
                                               "href": os.path.relpath(logdir, base).replace(os.sep, "/") + "/"})
    return found


def _pulled(pulled):
    if not pulled:
        return ""
    rows = []
    for host in sorted(pulled):
        for run in pulled[host]:
            wandb = ""
            if run["wandb_runs"]:
                dirs = run["wandb_runs"] if len(run["wandb_runs"]) <= 10 else ["*/wandb/wandb/offline-run-*"]
                wandb = ' <span data-wandb="%d">%d offline wandb run(s): <code>wandb sync %s</code></span>' % (
                    len(run["wandb_runs"]), len(run["wandb_runs"]),
                    esc(" ".join("%s/%s" % (run["logdir"], rel) for rel in dirs)))
            rows.append('<li data-pulled="%s/%s"><b>%s</b> %s: %d event file(s) of item(s) %s, verified: '
                        '<a href="%s">%s</a> <code>tensorboard --logdir %s</code>%s</li>' % (
                            esc(host), esc(run["run"]), esc(host), esc(run["run"]), run["files"],
                            esc(", ".join(run["items"]) or "-"), esc(run["href"]), esc(run["logdir"]),
                            esc(run["logdir"]), wandb))
    return ('<h2>Pulled curves</h2><section class="pulled"><p class="muted">TensorBoard events and offline wandb runs '
            'that teardown pulled and verified (PULL_VERIFIED.json); they outlive the box</p><ul>%s</ul></section>' % "".join(rows))


def render(fleet, now, title="fleet", clocks=(), warnings=(), window=WINDOW, warn_pct=85, fail_pct=95, inventory=None,
           source=None, pulled=None):
    """The dashboard page (text) of ``fleet`` ({host: history records sorted by time}) at epoch ``now``, titled
    ``title`` (the fleet's name); with ``inventory`` (host names), cards for those hosts only and the others under
    "Gone"; ``source`` names the run that wrote the page (patrol, preflight); ``pulled`` (:func:`pulled_curves`)
    links the TensorBoard curves that teardown pulled."""
    views = fleet_views(fleet, now, window, inventory)
    gone = gone_hosts(fleet, now, window, inventory)
    total = summary(views, now)
    verdicts = " ".join('<span class="verdict %s">%s %d</span>' % (VERDICT_CLASS.get(v, "v-down"), esc(v), n)
                        for v, n in sorted(total["verdicts"].items(), key=lambda i: VERDICTS.index(i[0])
                                           if i[0] in VERDICTS else 0))
    if total["finish_in_s"] is not None:
        finish = "in about %s (%s)" % (ago(total["finish_in_s"]), utc(now + total["finish_in_s"]))
    elif total["items_total"]:
        finish = "unknown (%d host(s) without progress in the last %d h)" % (
            total["hosts_without_rate"], RATE_WINDOW // 3600)
    else:
        finish = "-"
    stats = [("hosts", "%d" % total["hosts"], verdicts),
             ("queue", "%s%%" % _fmt(total["completion_pct"]) if total["items_total"] else "-",
              "%d/%d items" % (total["items_done"], total["items_total"])),
             ("estimated finish", finish, ""),
             ("spent", _money(total["spent"]), "where prices are known"),
             ("burning", _money(total["burn_per_hour"]) + ("/h" if total["burn_per_hour"] else ""),
              "hosts with a price")]
    summary_html = "".join('<div class="stat" data-stat="%s"><span class="muted">%s</span><b>%s</b>%s</div>' % (
        esc(name), esc(name), esc(value), note if name == "hosts" else esc(note)) for name, value, note in stats)
    warn_html = ("<details><summary>%d history warning(s)</summary><ul>%s</ul></details>" % (
        len(warnings), "".join("<li>%s</li>" % esc(w) for w in list(warnings)[:50]))) if warnings else ""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
            "img-src data:\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<meta name=\"color-scheme\" content=\"light dark\">"
            "<title>%s: %d host(s)</title><style>%s</style></head><body>"
            "<h1>%s</h1><p class=\"muted\">generated %s%s; charts over the last %s</p>%s"
            "<h2>Fleet</h2><section class=\"summary\">%s</section><h2>Hosts</h2><section class=\"grid\">%s</section>"
            "%s%s<footer class=\"muted\">%s remote_gpu.trainer fleet dashboard</footer></body></html>\n" % (
                esc(title), len(views), CSS, esc(title), esc(utc(now)), " by %s" % esc(source) if source else "",
                esc(ago(window)), _alerts(views, clocks, now), summary_html,
                "".join(_card(view, now, warn_pct, fail_pct) for view in views) or "<p>no history yet</p>",
                _gone(gone, now), _pulled(pulled), warn_html))


def index(fleet, now, files=None, window=WINDOW, inventory=None, title=None):
    """The JSON index next to the page: the fleet's name, the summary and one entry per host (no series, no wordy
    history); with ``inventory``, its hosts only, and the names of the others under ``gone``."""
    views = fleet_views(fleet, now, window, inventory)
    hosts = []
    for view in views:
        entry = dict((key, value) for key, value in view.items() if key not in ("series", "start", "jobs_view"))
        entry["points"] = dict((key, len(thin(points))) for key, points in view["series"].items())
        if view.get("jobs_view") is not None:  # each job of the host, with the points of its own charts
            entry["by_job"] = [dict([(key, value) for key, value in job.items() if key not in ("series", "start")] + [
                ("points", dict((key, len(thin(points))) for key, points in job["series"].items()))])
                for job in view["jobs_view"]]
        if files and view["host"] in files:
            entry["history_file"] = files[view["host"]]
        hosts.append(entry)
    return {"generated_at": utc(now), "generated_epoch": int(now), "window_s": window, "summary": summary(views, now),
            "hosts": hosts, "gone": [host for host, _last in gone_hosts(fleet, now, window, inventory)],
            "title": title}
