"""Danger clocks once per platform, and the idle_billing finding of a finished queue on a box that still bills."""

from __future__ import annotations

import calendar

import pytest

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import billing, fleet_patrol

from fleet_samples import job, patrol_record, probe

FINISHED = "2026-11-29T16:00:00Z"
T0 = calendar.timegm((2026, 11, 29, 16, 0, 0))
HOUR = 3600.0


def done(finished=FINISHED, **kw):
    """A job whose queue ran to its end: not alive, with the status the wrapper writes last."""
    kw.setdefault("last_exit_code", 0)
    return job(alive=False, pid=None, items_done=7, final_status={
        "item": None, "exit_code": kw["last_exit_code"], "started": "2026-11-29T10:00:00Z", "finished": finished},
        **kw)


def settings(now=T0 + 3 * HOUR, **kw):
    base = {"billed": True, "now": now, "idle_minutes": 30, "price_per_hour": 0, "currency": "CNY",
            "verb": "power_off"}
    base.update(kw)
    return base


@pytest.mark.parametrize("text,expected", [
    ("2026-11-29T16:00:00Z", T0),
    ("2026-11-29T16:00:00.250Z", T0),
    ("2026-11-29T16:00:00+00:00", T0),
    (" 2026-11-29T16:00:00Z\n", T0),
    ("2026-11-29T16:00:00", None),          # no zone: not known to be UTC
    ("2026-11-29T18:00:00+02:00", None),    # another zone: the wrapper writes UTC only
    ("2026-13-29T16:00:00Z", None),
    ("yesterday", None),
    ("", None),
    (None, None),
    (1764432000, None),
])
def test_utc_epoch(text, expected):
    assert billing.utc_epoch(text) == expected


@pytest.mark.parametrize("jobs,now,expected", [
    ([done()], T0 + 2 * HOUR, 2 * HOUR),
    # the last job to finish dates the idle time
    ([done(), done("2026-11-29T17:00:00Z", name="eval")], T0 + 2 * HOUR, HOUR),
    # a failed queue that ended is idle as well
    ([done(last_exit_code=1)], T0 + HOUR, HOUR),
    # the box's clock ahead of the controller's: never negative
    ([done()], T0 - 60, 0.0),
    # a finish time that is not a time: the log's age
    ([done("soon", log_age_seconds=5400)], T0, 5400.0),
    ([done(None, log_age_seconds=600)], T0, 600.0),
    # a missing job beside a finished one is ignored
    ([done(), job(name="old", exists=False, alive=False)], T0 + HOUR, HOUR),
    # not idle, or not known to be
    ([done(), job(name="eval")], T0 + HOUR, None),               # a job is alive
    ([job(alive=False, final_status=None)], T0 + HOUR, None),     # killed before its status was written
    ([done(None, log_age_seconds=None)], T0 + HOUR, None),      # no finish time at all
    ([done(None, log_age_seconds=True)], T0 + HOUR, None),
    ([job(exists=False, alive=False)], T0 + HOUR, None),          # nothing ran
    ([], T0, None),
    (None, T0, None),
    ("jobs", T0, None),
    (["not a job", done()], T0 + HOUR, HOUR),
])
def test_idle_seconds(jobs, now, expected):
    assert billing.idle_seconds(jobs, now) == expected


@pytest.mark.parametrize("value,expected", [
    (2.5, 2.5), (3, 3.0), ("1.25", 1.25), (0, None), (0.0, None), ("", None), ("cheap", None), (None, None),
    (-1, None), (True, None), (float("nan"), None), (float("inf"), None),
])
def test_price_of(value, expected):
    assert billing.price_of(value) == expected


@pytest.mark.parametrize("jobs,opts,expected", [
    # (hours_idle, cost, currency) of the finding; None: no finding
    ([done()], {}, (3.0, None, None)),
    ([done()], {"price_per_hour": 2.5}, (3.0, 7.5, "CNY")),
    ([done()], {"price_per_hour": "1.98", "currency": "USD"}, (3.0, 5.94, "USD")),
    ([done()], {"price_per_hour": 2, "currency": ""}, (3.0, 6.0, "?")),
    ([done()], {"now": T0 + 90 * 60, "price_per_hour": 1}, (1.5, 1.5, "CNY")),
    # the grace after the finish: 30 minutes by default, patrol_idle_minutes otherwise, 0 at once
    ([done()], {"now": T0 + 29 * 60}, None),
    ([done()], {"now": T0 + 31 * 60}, (0.52, None, None)),
    ([done()], {"now": T0 + 31 * 60, "idle_minutes": None}, (0.52, None, None)),
    ([done()], {"now": T0 + 31 * 60, "idle_minutes": 60}, None),
    ([done()], {"now": T0 + 36, "idle_minutes": 0}, (0.01, None, None)),
    # only a box that bills, and only a finished queue
    ([done()], {"billed": False}, None),
    ([done()], {"billed": None}, None),
    ([done()], {"billed": "no"}, None),
    ([done()], {"billed": 1}, None),
    ([done()], {"billed": "true"}, (3.0, None, None)),   # an INI inventory or -e gives text
    ([done(), job(name="eval")], {}, None),
    ([job(alive=False, final_status=None)], {}, None),
    ([done()], {"now": None}, None),
])
def test_idle_billing_table(jobs, opts, expected):
    found = billing.idle_billing(jobs, settings(**opts))
    if expected is None:
        assert found is None
        return
    assert (found["level"], found["code"]) == ("WARN", "idle_billing")
    assert (found["hours_idle"], found.get("cost"), found.get("currency")) == expected
    assert found["message"].startswith("the queue finished %.1f h ago and the box still bills" % expected[0])
    if expected[1] is None:
        assert "trainer_price_per_hour" in found["action"] and "cost" not in found
    else:
        assert found["message"].endswith("about %.2f %s so far at %.2f %s/h" % (
            expected[1], expected[2], found["price_per_hour"], expected[2]))
    # the playbook by its FQCN, which works where the collection is installed too (not a path of the checkout)
    assert "remote_gpu.trainer.teardown (power_off)" in found["action"] and "playbooks/" not in found["action"]


@pytest.mark.parametrize("value,expected", [
    (True, True), ("true", True), (" Yes ", True), ("1", True), ("on", True),
    (False, False), ("false", False), ("no", False), ("", False), (None, False), (1, False), ("bills", False),
])
def test_billed(value, expected):
    assert billing.billed(value) is expected


def test_idle_billing_without_settings_is_none():
    assert billing.idle_billing([done()], None) is None
    assert billing.idle_billing([done()], "billed") is None


AUTODL = [{"clock": "released after 15 days powered off", "verified": "2026-06"},
          {"clock": "a powered-off instance still bills its data disk", "verified": "2026-06"}]
RUNPOD = [{"clock": "at zero balance pods and storage can be deleted", "verified": "2026-06"}]


def test_platform_clocks_once_per_platform():
    entries = billing.platform_clocks([("lab-02", "autodl", AUTODL), ("lab-03", "runpod", RUNPOD),
                                       ("lab-01", "autodl", AUTODL), ("lab-04", "local", []),
                                       ("lab-05", None, None), ("lab-06", "autodl", AUTODL[:1])])
    assert [(e["platform"], e["hosts"]) for e in entries] == [("autodl", ["lab-02", "lab-01", "lab-06"]),
                                                              ("runpod", ["lab-03"])]
    assert entries[0]["clocks"] == AUTODL
    assert billing.clock_lines(entries) == [
        "danger clocks, autodl (3 hosts): released after 15 days powered off (verified 2026-06); "
        "a powered-off instance still bills its data disk (verified 2026-06)",
        "danger clocks, runpod (1 host): at zero balance pods and storage can be deleted (verified 2026-06)"]


def test_platform_clocks_union_of_host_overrides_and_malformed_entries():
    extra = [{"clock": "my own clock"}, "not a clock", {"clock": ""}, {"verified": "2026-06"}, {"clock": 7}]
    entries = billing.platform_clocks([("a", "autodl", AUTODL[:1]), ("b", "autodl", extra), ("c", "x", "clocks")])
    assert entries == [{"platform": "autodl", "hosts": ["a", "b"],
                        "clocks": [AUTODL[0], {"clock": "my own clock", "verified": None}]}]
    assert billing.clock_lines(entries) == [
        "danger clocks, autodl (2 hosts): released after 15 days powered off (verified 2026-06); my own clock"]
    assert billing.platform_clocks([]) == [] and billing.clock_lines([]) == []
    # a profile name that is not text (a broken inventory) is shown as text, never a traceback
    odd = billing.platform_clocks([("a", {"x": 1}, AUTODL[:1]), ("b", 7, AUTODL[:1]), ("c", "autodl", AUTODL[:1])])
    assert [e["platform"] for e in odd] == ["7", "autodl", "{'x': 1}"]


def test_patrol_row_of_a_finished_queue_on_a_billing_box_is_idle_billing():
    record = patrol_record(probe([done()]))
    row = fleet_patrol.patrol_row("lab-01", record, idle_billing=settings(price_per_hour=2.5))
    assert row["verdict"] == "WARN" and row["reasons"] == []
    assert row["top_finding"] == ("idle_billing: the queue finished 3.0 h ago and the box still bills: about 7.50 CNY "
                                  "so far at 2.50 CNY/h")
    assert [f["code"] for f in row["findings"]] == ["idle_billing"]
    # without the settings (or on a box that does not bill) the row is as before
    assert fleet_patrol.patrol_row("lab-01", record)["verdict"] == "PASS"
    assert fleet_patrol.patrol_row("lab-01", record, idle_billing=settings(billed=False))["verdict"] == "PASS"
    # strict escalates every WARN, this one too
    strict = fleet_patrol.patrol_row("lab-01", record, strict=True, idle_billing=settings())
    assert strict["verdict"] == "FAIL" and strict["reasons"][0].startswith("idle_billing: the queue finished 3.0 h")


def test_idle_billing_comes_after_the_findings_that_say_more():
    gone = {"level": "WARN", "code": "oom_killed", "message": "m", "action": "a", "job": "train"}
    row = fleet_patrol.patrol_row("lab-01", patrol_record(probe([done(last_exit_code=137)], [gone])),
                                  idle_billing=settings())
    assert [f["code"] for f in row["findings"]] == ["oom_killed", "idle_billing"]
    assert fleet_patrol.PATROL_PRIORITY[-1] == "idle_billing"
