# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Danger clocks and idle billing (pure functions, controller side).

The profiles carry the platform's danger clocks (``trainer_danger_clocks``: timers that bill or delete data behind
the user's back, from ../shared/platforms.md and the AutoDL seed); preflight and patrol print them once per platform.
A finished queue on a box that still bills (``trainer_billed``) is the WARN finding ``idle_billing``, with the hours
idle and, when ``trainer_price_per_hour`` is known, the money. Nothing here runs on the box: the hours come from the
finish time that job_status already reports (patrol stays one SSH execution per host)."""

from __future__ import annotations

import calendar
import math
import re
import time

from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import finding

IDLE_BILLING = "idle_billing"
# Minutes a finished queue may sit before patrol says idle_billing (patrol's patrol_idle_minutes).
IDLE_MINUTES = 30
_UTC = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.\d+)?(?:Z|\+00:?00)$")


def utc_epoch(text):
    """Seconds since the epoch of a UTC time like ``2026-11-29T16:51:26Z`` (job_layout.now_iso), or None."""
    match = _UTC.match(text.strip()) if isinstance(text, str) else None
    if not match:
        return None
    try:
        return calendar.timegm(time.strptime("-".join(match.groups()), "%Y-%m-%d-%H-%M-%S"))
    except ValueError:
        return None


def _seconds(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return max(0.0, float(value))


def idle_seconds(jobs, now):
    """How long the box has been idle: the time since the last of its jobs finished, or None when it is not idle
    (a job is alive), when no job ran (none, or all missing), or when a job ended without a finish time (killed
    before the wrapper wrote its status: other findings report that).

    ``jobs`` are job_status's ``jobs``; a job's finish time is ``final_status.finished`` (the box's UTC clock), or,
    when that is not a time, the age of its log (``log_age_seconds``). ``now`` is the controller's epoch."""
    ran = [job for job in jobs if isinstance(job, dict) and job.get("exists", True)] if isinstance(jobs, list) else []
    if not ran or any(job.get("alive") for job in ran):
        return None
    ages = []
    for job in ran:
        final = job.get("final_status")
        if not isinstance(final, dict):
            return None
        finished = utc_epoch(final.get("finished"))
        age = _seconds(now - finished) if finished is not None else _seconds(job.get("log_age_seconds"))
        if age is None:
            return None
        ages.append(age)
    return min(ages)


def billed(value):
    """``trainer_billed`` as a bool: True, or a true word as an INI inventory or ``-e`` gives it (``true``, ``yes``,
    ``1``); anything else is False."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return value is True


def price_of(value):
    """A price per hour as a positive float, or None (0, empty, not a number: unknown)."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    value = _seconds(value)
    return value if value else None


def idle_billing(jobs, billing):
    """The ``idle_billing`` WARN finding of a host, or None.

    ``billing`` holds ``billed`` (the profile's ``trainer_billed``, see billed()), ``now`` (controller epoch),
    ``idle_minutes`` (grace after the finish, default IDLE_MINUTES), ``price_per_hour`` and ``currency``, and
    ``verb`` (the profile's meter-stop verb, for the action). The finding carries ``hours_idle`` and, with a price,
    ``cost`` and ``currency``."""
    if not isinstance(billing, dict) or not billed(billing.get("billed")) or _seconds(billing.get("now")) is None:
        return None
    idle = idle_seconds(jobs, billing["now"])
    grace = _seconds(billing.get("idle_minutes"))
    if idle is None or idle < (IDLE_MINUTES if grace is None else grace) * 60:
        return None
    hours = round(idle / 3600.0, 2)
    extra = {"hours_idle": hours}
    message = "the queue finished %.1f h ago and the box still bills" % hours
    price = price_of(billing.get("price_per_hour"))
    if price is not None:
        currency = str(billing.get("currency") or "").strip() or "?"
        extra.update(cost=round(hours * price, 2), currency=currency, price_per_hour=price)
        message += ": about %.2f %s so far at %.2f %s/h" % (hours * price, currency, price, currency)
    verb = billing.get("verb")
    action = ("Pull and verify the results, then stop the meter with the playbook remote_gpu.trainer.teardown%s; or "
              "launch the next queue." % (" (%s)" % verb if verb else ""))
    if price is None:
        action += " Set trainer_price_per_hour (and trainer_price_currency) for this host to see the money."
    return finding("WARN", IDLE_BILLING, message, action, **extra)


def _clocks(value):
    """The usable clocks of a profile's trainer_danger_clocks: dicts with a ``clock`` text."""
    if not isinstance(value, list):
        return []
    return [{"clock": str(c["clock"]), "verified": c.get("verified")} for c in value
            if isinstance(c, dict) and isinstance(c.get("clock"), str) and c["clock"].strip()]


def platform_clocks(hosts):
    """The danger clocks once per platform: ``[{platform, hosts, clocks}]`` sorted by platform, from ``hosts``,
    a list of (host, platform, trainer_danger_clocks). Hosts of one platform that carry different clocks (a host
    override) add theirs; a platform without clocks is left out."""
    by_platform = {}
    for host, platform, clocks in hosts:
        name = str(platform) if platform else "-"  # a registered variable may hold anything
        entry = by_platform.setdefault(name, {"platform": name, "hosts": [], "clocks": []})
        entry["hosts"].append(host)
        for clock in _clocks(clocks):
            if clock not in entry["clocks"]:
                entry["clocks"].append(clock)
    return [by_platform[name] for name in sorted(by_platform) if by_platform[name]["clocks"]]


def clock_lines(entries):
    """One line per platform: ``danger clocks, autodl (2 hosts): a powered-off ... (verified 2026-06); ...``."""
    lines = []
    for entry in entries:
        count = len(entry["hosts"])
        lines.append("danger clocks, %s (%d host%s): %s" % (
            entry["platform"], count, "" if count == 1 else "s",
            "; ".join(c["clock"] + (" (verified %s)" % c["verified"] if c.get("verified") else "")
                      for c in entry["clocks"])))
    return lines
