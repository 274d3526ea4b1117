# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Autopilot's decisions (controller side, pure): from one host's probe (job_status's result, or why there is none),
its history (``reports/history/<host>.jsonl``), its opt-ins and limits and its profile's meter-stop verb, one
decision per tick: ``{action, wanted, reason, item, state, events, ...}``.

* ``action``: ``none``, ``heal`` (restart the queue runner at the first unfinished item), ``retry_sync`` (the same
  restart when only syncs failed: the runner retries the sync alone, never the command), ``park`` (the profile's
  reversible in-box verb), ``escalate`` (a person must act) or ``report`` (the host is not opted in to what it would
  need: ``wanted`` says what that is).
* ``state``: one word (with an item id after ``:``) that stands for the host's situation; an event is sent only
  when it differs from the previous tick's (:func:`change_events`), so an unchanged fleet sends nothing.
* ``events``: ``[{host, kind, level, text}]``, kind one of EVENT_KINDS (the notify action's contract).

Rules (issue 11): a job gone with an incomplete queue is healed from its first unfinished item, at most
``max_restarts`` times per item and run; an item that crashed twice with the same crash marker (its exit code and
its first crash marker) escalates and is never restarted. A failed sync is retried alone. A host is parked only
when its queue is complete, every item's files are verified durable (item status: ``done`` with a ``sync_dest``,
at least one verified copy, nothing unsynced), and its GPUs have been idle for ``idle_minutes`` judged from the
history (one sample is never enough), with the profile's ``trainer_park``: a reversible stop, in the box (AutoDL
``shutdown``) or through the provider's API (RunPod, vast.ai). The meter-stop verb is never run; where it destroys
and there is no park, the host escalates with the teardown command. Anything
unsynced, unreadable or a probe error means no stop, and the reason says why.
"""

from __future__ import annotations

from ansible_collections.remote_gpu.trainer.plugins.module_utils.fleet_table import integer, number

ACTIONS = ("none", "heal", "retry_sync", "park", "escalate", "report")
EVENT_KINDS = ("new_fail", "recovered", "healed", "parked", "queue_done", "unreachable", "escalated")
LEVELS = {"new_fail": "FAIL", "escalated": "FAIL", "unreachable": "WARN", "healed": "WARN", "recovered": "INFO",
          "parked": "INFO", "queue_done": "INFO"}
# A GPU at or under this utilisation counts as idle.
IDLE_UTIL_PCT = 5.0
DEFAULTS = {"heal": False, "autostop": False, "notify": False, "max_restarts": 2, "idle_minutes": 30,
            "unreachable_minutes": 30}
CONSOLE_HINT = ("check the platform's console: the account balance (a box stops when credit runs out), its power "
                "state, and whether it was preempted or reclaimed")
TEARDOWN = "ansible-playbook playbooks/teardown.yml -l {host} -e teardown_approve={host}"

# state families (the part before ":")
FAILING = ("fail", "probe_error", "gone", "sync_failed", "heal_failed", "park_failed")
ESCALATED = ("escalated", "unreachable_escalated", "idle_destroy_only", "idle_manual")
DONE = ("done", "done_unsynced")


class SettingsError(ValueError):
    """An opt-in or limit of the wrong type; the message names the variable."""


def _bool(value, name):
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on", "1", "false", "no", "off", "0"):
        return value.strip().lower() in ("true", "yes", "on", "1")
    raise SettingsError("autopilot_%s must be true or false, got %r" % (name, value))


def _count(value, name, least):
    number_ = integer(value)
    if number_ is None and isinstance(value, str) and value.strip().isdigit():
        number_ = int(value.strip())
    if number_ is None or isinstance(value, bool) or number_ < least:
        raise SettingsError("autopilot_%s must be a whole number of at least %d, got %r" % (name, least, value))
    return number_


def settings_of(raw):
    """The opt-ins and limits from a host's ``autopilot_*`` variables (``raw``: name without the prefix -> value,
    None or absent for the default) -> dict; raises SettingsError naming the bad variable."""
    raw = raw or {}
    found = dict(DEFAULTS)
    for key in ("heal", "autostop", "notify"):
        if raw.get(key) is not None:
            found[key] = _bool(raw[key], key)
    for key, least in (("max_restarts", 0), ("idle_minutes", 1), ("unreachable_minutes", 1)):
        if raw.get(key) is not None:
            found[key] = _count(raw[key], key, least)
    return found


def probe_outcome(result):
    """(reachable, error) of a registered job_status result: (False, why) for an unreachable host, (True, why)
    for a probe that failed or never ran, (True, None) for a result to judge."""
    if not isinstance(result, dict) or result.get("skipped") or not result:
        return True, "no probe result (the probe did not run on this host)"
    if result.get("unreachable"):
        return False, " ".join(str(result.get("msg") or "unreachable").split())[:300]
    if result.get("failed") or not isinstance(result.get("jobs"), list):
        return True, " ".join(str(result.get("msg") or "the probe returned no jobs").split())[:300]
    return True, None


def job_of(result, name):
    """The probe's report of job ``name`` (or None)."""
    for job in result.get("jobs") or []:
        if isinstance(job, dict) and job.get("name") == name:
            return job
    return None


def _items(job):
    return dict((row.get("item"), row) for row in job.get("items") or [] if isinstance(row, dict))


def queue_ids(job):
    """This host's share of the queue in order (launch's record), or None when the job is not graded by one."""
    ids = job.get("queue_items")
    return [str(i) for i in ids] if isinstance(ids, list) and ids else None


def unfinished(job):
    """The items of the share that neither finished nor trained (failed or never finished), in queue order."""
    rows = _items(job)
    return [item for item in queue_ids(job) or [] if (rows.get(item) or {}).get("state") not in ("done", "sync_failed")]


def sync_failed(job):
    rows = _items(job)
    return [item for item in queue_ids(job) or [] if (rows.get(item) or {}).get("state") == "sync_failed"]


def not_durable(job):
    """[(item, why)] for every item of the share whose files are not verified durable (pure)."""
    rows, found = _items(job), []
    for item in queue_ids(job) or []:
        row = rows.get(item) or {}
        unsynced = [str(f) for f in row.get("unsynced") or []]
        if row.get("state") != "done":
            found.append((item, "item %s is %s" % (item, row.get("state") or "not finished")
                          + (": %s not durable" % ", ".join(unsynced) if unsynced else "")))
        elif unsynced:
            found.append((item, "item %s: %s not durable" % (item, ", ".join(unsynced))))
        elif not row.get("sync_dest"):
            found.append((item, "item %s ran with the sync off: its files are only on the data disk" % item))
        elif not integer(row.get("synced")):
            found.append((item, "item %s records no verified durable copy" % item))
    return found


def crash_signature(job, item):
    """How ``item`` failed, to tell a repeated crash: ``exit N`` and its first crash marker (kind: text), or None
    when the item has no failed status (interrupted: a reboot or a kill is bad luck, not a bug)."""
    row = _items(job).get(item) or {}
    if row.get("state") != "failed":
        return None
    marker = None
    if job.get("current_item") == item and job.get("crash_markers"):
        marker = job["crash_markers"][0]
    for crash in job.get("earlier_crashes") or []:
        if isinstance(crash, dict) and crash.get("item") == item and isinstance(crash.get("first"), dict):
            marker = crash["first"]
    text = "exit %s" % row.get("exit_code")
    if isinstance(marker, dict):
        text += "; %s: %s" % (marker.get("kind"), " ".join(str(marker.get("text") or "").split())[:200])
    return text


def gpu_util(result):
    """Mean GPU utilisation of the probe (None when unknown: no GPU query, no GPU)."""
    gpus = [g for g in (result or {}).get("gpus") or [] if isinstance(g, dict)]
    utils = [u for u in (number(g.get("utilization_pct")) for g in gpus) if u is not None]
    return round(sum(utils) / len(utils), 1) if utils else None


def _ap(record):
    return record.get("ap") if isinstance(record, dict) and isinstance(record.get("ap"), dict) else None


def previous_state(history):
    """The state of the latest autopilot record, or None."""
    for record in reversed(history or []):
        if _ap(record) and _ap(record).get("state"):
            return _ap(record)["state"]
    return None


def acted(history, action, item, run):
    """The autopilot records of ``run`` whose ``action`` on ``item`` was carried out."""
    return [_ap(r) for r in history or [] if _ap(r) and _ap(r).get("action") == action and _ap(r).get("item") == item
            and _ap(r).get("run") == run and _ap(r).get("ok") is True]


def idle_since(history, now, current):
    """Since when the GPUs have been idle (epoch), from the history's samples and the current one (``current``:
    the mean utilisation now): the oldest sample of the unbroken run of idle samples that ends now. None when the
    current sample is not idle or unknown. A sample without a utilisation (unreachable, no GPU query) breaks it."""
    if current is None or current > IDLE_UTIL_PCT:
        return None
    since = now
    for record in reversed(history or []):
        util = number(record.get("gpu_util")) if isinstance(record, dict) else None
        if util is None or util > IDLE_UTIL_PCT:
            break
        since = min(since, number(record.get("t")) or since)
    return since


def unreachable_since(history, now):
    """Since when the host has been unreachable (epoch): the oldest autopilot record of the unbroken run of
    unreachable ones that ends now (patrol's records in between are skipped), else ``now``."""
    since = now
    for record in reversed(history or []):
        ap = _ap(record)
        if ap is None:
            continue
        if ap.get("state") not in ("unreachable", "unreachable_escalated"):
            break
        since = min(since, number(record.get("t")) or since)
    return since


def family(state):
    return (state or "").split(":", 1)[0]


def change_events(host, previous, decision):
    """The events of a state change (pure): none when the state is the previous one."""
    state, text = decision["state"], decision["reason"]
    if state == previous:
        return []
    now, before = family(state), family(previous)
    kind = None
    if now == "unreachable":
        kind = "unreachable"
    elif now in ESCALATED:
        kind = "escalated"
    elif now in FAILING:
        kind = "new_fail"
    elif now == "healed":
        kind = "healed"
    elif now == "parked":
        kind = "parked"
    elif now in DONE and before not in DONE + ("parked",):
        kind = "queue_done"
    elif now in ("running", "done", "stopped", "idle") and (before in FAILING + ESCALATED or before == "unreachable"):
        kind = "recovered"
    if kind is None:
        return []
    return [{"host": host, "kind": kind, "level": LEVELS[kind], "text": "%s: %s" % (host, text)}]


def _decision(state, action, reason, item=None, **extra):
    found = {"state": state, "action": action, "wanted": action, "reason": reason, "item": item}
    found.update(extra)
    return found


def _opt(found, opted, setting):
    """A heal, retry_sync or park on a host that is not opted in becomes a report of what it would do."""
    if not opted and found["action"] in ("heal", "retry_sync", "park"):
        found["action"] = "report"
        found["reason"] += " (not done: autopilot_%s is off)" % setting
    return found


def _heal(job, settings, history, run):
    gone = unfinished(job)
    item = gone[0]
    signature = crash_signature(job, item)
    finished = (_items(job).get(item) or {}).get("finished")
    heals = acted(history, "heal", item, run)
    same = [h for h in heals if signature is not None and h.get("crash") == signature and h.get("crash_at") != finished]
    done = len(queue_ids(job) or []) - len(gone) - len(sync_failed(job))
    if same:
        return _decision("escalated:%s" % item, "escalate",
                         "item %s crashed twice the same way (%s): a deterministic crash is a bug, not bad luck; not "
                         "restarted. Read its log, fix it, then relaunch" % (item, signature), item, crash=signature,
                         crash_at=finished)
    if len(heals) >= settings["max_restarts"]:
        return _decision("escalated:%s" % item, "escalate",
                         "item %s was restarted %d time(s) already (autopilot_max_restarts %d); not restarted again"
                         % (item, len(heals), settings["max_restarts"]), item, crash=signature, crash_at=finished)
    how = "crashed (%s)" % signature if signature else "was interrupted (no status: a restart, a kill, a preemption)"
    return _opt(_decision("gone:%s" % item, "heal",
                          "job %s is gone at %d/%d items; item %s %s: restart the queue from item %s (restart %d of "
                          "at most %d)" % (job.get("name"), done, len(queue_ids(job)), item, how, item, len(heals) + 1,
                                           settings["max_restarts"]), item, crash=signature, crash_at=finished),
                settings["heal"], "heal")


def _retry_sync(job, settings, history, run):
    item = sync_failed(job)[0]
    row = _items(job).get(item) or {}
    files = ", ".join(str(f) for f in row.get("unsynced") or []) or "its files"
    tries = acted(history, "retry_sync", item, run)
    if len(tries) >= settings["max_restarts"]:
        return _decision("escalated:%s" % item, "escalate",
                         "item %s trained but %s is not durable after %d sync retries: fix the durable tier, then "
                         "relaunch; nothing is stopped" % (item, files, len(tries)), item)
    return _opt(_decision("sync_failed:%s" % item, "retry_sync",
                          "item %s trained but %s is not durable: retry its sync alone (no retraining); nothing is "
                          "stopped until it is durable" % (item, files), item), settings["heal"], "heal")


def _park(host, job, result, settings, history, meter_stop, now, billing, park):
    missing = not_durable(job)
    if missing:
        return _decision("done_unsynced", "none", "queue done, not parked: %s" % "; ".join(why for _i, why in missing),
                         missing[0][0])
    util = gpu_util(result)
    since = idle_since(history, now, util)
    if util is None:
        return _decision("done", "none", "queue done and durable; GPU use unknown, so not parked")
    if since is None:
        return _decision("done", "none", "queue done and durable; GPUs busy (%s%%), not parked" % util)
    minutes = (now - since) / 60.0
    if minutes < settings["idle_minutes"]:
        return _decision("done", "none", "queue done and durable; GPUs idle for %d of %d min (autopilot_idle_minutes)"
                         % (int(minutes), settings["idle_minutes"]))
    meter_stop = meter_stop if isinstance(meter_stop, dict) else {}
    park = park if isinstance(park, dict) else {}
    cost = ""
    price = number((billing or {}).get("price"))
    if price:
        cost = "; about %.2f %s so far while idle" % (price * minutes / 60.0, (billing or {}).get("currency") or "")
    idle = "queue done, every file durable, GPUs idle for %d min%s" % (int(minutes), cost)
    verb, command, api = park.get("verb") or "none", park.get("command"), park.get("api") or {}
    if verb != "none" and isinstance(command, list) and command:
        return _opt(_decision("done", "park", "%s: park it with %s (%s, reversible; keeps %s)" % (
            idle, verb, " ".join(str(word) for word in command), park.get("keeps") or "the disks"), verb=verb,
            via="command", command=[str(word) for word in command]), settings["autostop"], "autostop")
    if verb != "none" and isinstance(api, dict) and api.get("provider"):
        return _opt(_decision("done", "park", "%s: park it with %s through the %s API (reversible; keeps %s)" % (
            idle, verb, api["provider"], park.get("keeps") or "the disks"), verb=verb, via="api", api=dict(api)),
            settings["autostop"], "autostop")
    if meter_stop.get("reversible") is not True:
        return _decision("idle_destroy_only", "escalate",
                         "%s. The profile's only verb (%s) destroys the box: autopilot never runs it. When you are "
                         "done: %s" % (idle, meter_stop.get("verb") or "unknown", TEARDOWN.format(host=host)),
                         cost=cost.strip("; ") or None, teardown=TEARDOWN.format(host=host))
    return _decision("idle_manual", "escalate", "%s. The profile has no verb to park it (%s): park it by hand" % (
        idle, park.get("how") or meter_stop.get("how") or "see the profile"), teardown=TEARDOWN.format(host=host))


def console_hint(clocks=None):
    """What to check in the platform's console for a box that stopped answering: the generic hint, plus the
    profile's danger clocks (``trainer_danger_clocks``: balance, arrears, release, preemption facts) when given."""
    facts = [str(clock.get("clock")) for clock in clocks or () if isinstance(clock, dict) and clock.get("clock")]
    return CONSOLE_HINT + ("; on this platform: %s" % "; ".join(facts) if facts else "")


def decide(host, result, history, settings, meter_stop=None, now=0, job_name="train", billing=None, park=None,
           clocks=None):
    """One host's decision (pure). ``result``: the registered job_status result (unreachable, failed, skipped or
    None included); ``history``: the host's records, oldest first; ``settings``: settings_of's dict;
    ``meter_stop``: the profile's trainer_meter_stop (never run: it names the teardown when the box cannot be
    parked); ``park``: the profile's trainer_park (a reversible stop, in the box or through the API); ``billing``:
    {price, currency} when the box bills; ``clocks``: the profile's trainer_danger_clocks (the console hint of a box
    that stays unreachable names them)."""
    previous = previous_state(history)
    reachable, error = probe_outcome(result)
    job = None if error else job_of(result, job_name)
    run = (job or {}).get("run_id")
    if family(previous) == "parked" and (not reachable or (job and not job.get("alive"))):
        found = _decision("parked", "none", "parked earlier; %s" % (
            "it does not answer, as a parked box should" if not reachable else "its job has not run since"))
    elif not reachable:
        since = unreachable_since(history, now)
        minutes = (now - since) / 60.0
        if minutes >= settings["unreachable_minutes"]:
            found = _decision("unreachable_escalated", "escalate",
                              "unreachable for %d min (autopilot_unreachable_minutes %d): %s. Last error: %s" % (
                                  int(minutes), settings["unreachable_minutes"], console_hint(clocks), error))
        else:
            found = _decision("unreachable", "none", "unreachable (%s); nothing is healed or stopped" % error)
    elif error:
        found = _decision("probe_error", "none", "the probe failed (%s); nothing is healed or stopped" % error)
    elif job is None or not job.get("exists"):
        found = _decision("idle", "none", "no job %s on this host" % job_name)
    elif job.get("alive"):
        fails = [f for f in result.get("findings") or [] if isinstance(f, dict) and f.get("level") == "FAIL"]
        if fails:
            found = _decision("fail:%s" % fails[0].get("code"), "none", "job running, but %s: %s" % (
                fails[0].get("code"), " ".join(str(fails[0].get("message") or "").split())[:300]))
        else:
            found = _decision("running", "none", "job %s running (%s/%s items done)" % (
                job_name, job.get("items_done"), job.get("items_total")))
    elif queue_ids(job) is None:
        found = _decision("stopped", "none", "job %s is not running and launch recorded no queue for it (%s): "
                          "nothing to resume or park" % (job_name, "exit %s" % job.get("last_exit_code")))
    elif unfinished(job):
        found = _heal(job, settings, history, run)
    elif sync_failed(job):
        found = _retry_sync(job, settings, history, run)
    else:
        found = _park(host, job, result, settings, history, meter_stop, now, billing, park)
    found.update(host=host, run=run, util=gpu_util(result) if reachable and not error else None,
                 previous=previous)
    found["events"] = change_events(host, previous, _settled_view(found))
    return found


def _settled_view(found):
    """The decision as it will read once its action succeeded (for the events decide() announces)."""
    if found["action"] in ("heal", "retry_sync"):
        return dict(found, state="healed:%s" % found["item"])
    if found["action"] == "park":
        return dict(found, state="parked")
    return found


def settle(decision, outcome=None):
    """The decision after its action ran: ``outcome`` is {ok: bool, msg} (None when nothing ran) -> the decision
    with ``ok``, ``acted``, the final ``state`` and its events. A failed heal or park is a new FAIL."""
    found = dict(decision)
    if outcome is None or found["action"] not in ("heal", "retry_sync", "park"):
        found.update(ok=None, acted=False)
        found["events"] = change_events(found["host"], found.get("previous"), found)
        return found
    ok = bool(outcome.get("ok"))
    msg = " ".join(str(outcome.get("msg") or "").split())[:300]
    if found["action"] == "park":
        state = "parked" if ok else "park_failed"
        reason = found["reason"] + ("; parked: %s" % msg if ok else "; the verb FAILED: %s" % msg)
    else:
        state = ("healed:%s" if ok else "heal_failed:%s") % found["item"]
        reason = found["reason"] + ("; restarted: %s" % msg if ok else "; the restart FAILED: %s" % msg)
    found.update(ok=ok, acted=True, state=state, reason=reason)
    found["events"] = change_events(found["host"], found.get("previous"), found)
    return found


def history_fields(decision):
    """What a history record keeps of a settled decision (its ``ap`` key)."""
    keys = ("state", "action", "wanted", "reason", "item", "run", "crash", "crash_at", "ok", "acted")
    found = dict((key, decision.get(key)) for key in keys if decision.get(key) is not None)
    found["events"] = [event["kind"] for event in decision.get("events") or []]
    return found
