# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Autopilot's decisions (controller side, pure): from one host's probe (job_status's result over EVERY job under
the run directory, or why there is none), its history (``reports/history/<host>.jsonl``), its opt-ins and limits
and its profile's park and meter-stop verbs, one decision per host and tick.

A host's decision: ``{state, action, wanted, reason, item, job, jobs, heal_jobs, events, ...}``.

* ``jobs``: one decision per job found on the box (``{job, state, action, wanted, reason, item, run, ...}``), in
  the probe's order; absent when the jobs were not judged (unreachable, probe error, a park that holds).
* ``action``: ``none``, ``heal`` (restart the queue runner of each job in ``heal_jobs`` at its first unfinished
  item), ``retry_sync`` (the same restart when only syncs failed: the runner retries the sync alone, never the
  command), ``park`` (the profile's reversible stop), ``escalate`` (a person must act) or ``report`` (the host is
  not opted in to what it would need: ``wanted`` says what that is).
* ``state``: one word (with an item id after ``:``). The host's own states (:data:`HOST_FAMILIES`: unreachable,
  probe error, parked, a park that failed or cannot run) are the host's; otherwise it is the state of the job that
  leads the decision (``job``). Each job keeps a state of its own in the history, and an event is sent only when
  a state differs from the previous tick's (:func:`events_of`), so an unchanged fleet sends nothing.
* ``events``: ``[{host, kind, level, text}]``, kind one of EVENT_KINDS (the notify action's contract).

Rules (issues 11 and 28): a job gone (not alive, not starting) with an incomplete queue is healed by name from its
first unfinished item, at most ``max_restarts`` times per item and run; a live job is never started again. An item
that crashed twice with the same crash marker (its exit code and its first crash marker) escalates and is never
restarted. A failed sync is retried alone. A live job that is hung (``job_hung``: its log, its checkpoints and its
GPU idle for ``patrol_hung_minutes``) escalates; it is never stopped or restarted. An item that exited 0 too fast
(``too_fast``: launch_min_seconds) is not done: its job escalates, nothing is restarted or parked.

A host is parked only when NO job on it is alive or starting, every job's queue is complete, every item's files
are verified durable (item status: ``done`` with a ``sync_dest``, at least one verified copy, nothing unsynced),
and its GPUs have been idle for ``idle_minutes`` judged from the history (one sample is never enough), with the
profile's ``trainer_park``: a reversible stop, in the box (AutoDL ``shutdown``) or through the provider's API
(RunPod, vast.ai). Where that park keeps the data disk (``trainer_park.keeps_data_disk``), files that are done but
not durable do not keep an idle box running: it is parked, and the message names the files and the platform's
release clock (``trainer_park.release_days``). The meter-stop verb is never run; where it destroys and there is no
park, the host escalates with the teardown command. A job with no queue record, a probe error or anything
unreadable means no stop, and the reason says why.

A park holds until a job runs again: a tick that sees a job alive, or any job whose start (``last_start``, from
its log) or launch (``launched_epoch``, from its trusted meta) is newer than the park, ends it; the jobs are then
judged again (a job killed by a restart right after its launch is healed).
"""

from __future__ import annotations

import datetime
import json

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import autopilot_replace
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.fleet_table import integer, number

ACTIONS = ("none", "heal", "retry_sync", "park", "escalate", "report", "replace", "retire")
EVENT_KINDS = ("new_fail", "recovered", "healed", "parked", "queue_done", "unreachable", "escalated", "preempted",
               "replaced")
LEVELS = {"new_fail": "FAIL", "escalated": "FAIL", "unreachable": "WARN", "healed": "WARN", "recovered": "INFO",
          "parked": "INFO", "queue_done": "INFO", "preempted": "WARN", "replaced": "WARN"}
# A GPU at or under this utilisation counts as idle.
IDLE_UTIL_PCT = 5.0
DEFAULTS = {"heal": False, "autostop": False, "notify": False, "replace": False, "max_restarts": 2,
            "idle_minutes": 30, "unreachable_minutes": 30, "replace_after_minutes": 30}
CONSOLE_HINT = ("check the platform's console: the account balance (a box stops when credit runs out), its power "
                "state, and whether it was preempted or reclaimed")
# the playbook by its FQCN: the same command works in the checkout (ansible.cfg) and where the collection is installed
TEARDOWN = "ansible-playbook -i <your inventory> remote_gpu.trainer.teardown -l {host} -e teardown_approve={host}"
MAX_REASON = 3000

# state families (the part before ":")
FAILING = ("fail", "probe_error", "gone", "sync_failed", "heal_failed", "park_failed")
ESCALATED = ("escalated", "too_fast", "gate_refused", "unreachable_escalated", "idle_destroy_only", "idle_manual",
             "preempted_escalated")
DONE = ("done", "done_unsynced")
# the host's own states (never a job's); "fail:config_error" is one too (the action plugin's)
HOST_FAMILIES = ("unreachable", "unreachable_escalated", "probe_error", "parked", "park_failed", "idle_destroy_only",
                 "idle_manual", "preempted", "preempted_escalated") + autopilot_replace.STEPS + (
                     "replace_failed", "retire_failed")
# providers that give a preempted box back by themselves (a vast.ai bid instance resumes when its bid wins again, a
# RunPod spot pod can be started again); any other preempted box (Lambda) does not come back
GIVES_BACK = ("vastai", "runpod")
CONFIG_ERROR = "fail:config_error"
# the actions that settle as one host state: (state when it succeeded, state when it failed)
SETTLED_AS = {"park": ("parked", "park_failed"), "replace": ("replaced", "replace_failed"),
              "retire": ("retired", "retire_failed")}
JOB_KEYS = ("state", "action", "wanted", "item", "run", "crash", "crash_at", "ok")


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
    for key in ("heal", "autostop", "notify", "replace"):
        if raw.get(key) is not None:
            found[key] = _bool(raw[key], key)
    for key, least in (("max_restarts", 0), ("idle_minutes", 1), ("unreachable_minutes", 1),
                       ("replace_after_minutes", 0)):
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


def jobs_of(result):
    """The probe's reports of the jobs that exist on the box, in its order (every job under the run directory)."""
    return [job for job in (result or {}).get("jobs") or []
            if isinstance(job, dict) and job.get("exists") and isinstance(job.get("name"), str)]


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


def too_fast(job):
    """The items of the share that exited 0 sooner than launch_min_seconds (item key ``too_fast``; absent: false),
    in queue order; when the items carry no such key but the job counts ``items_too_fast``, ``["?"]``."""
    rows = _items(job)
    found = [item for item in queue_ids(job) or [] if (rows.get(item) or {}).get("too_fast") is True]
    if not found and (integer(job.get("items_too_fast")) or 0) > 0:
        return ["?"]
    return found


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


def family(state):
    return (state or "").split(":", 1)[0]


def is_host_state(state):
    """True for a state of the host itself (unreachable, probe error, parked, ...), never a job's."""
    return family(state) in HOST_FAMILIES or state == CONFIG_ERROR


def previous_state(history):
    """The host state of the latest autopilot record, or None."""
    for record in reversed(history or []):
        if _ap(record) and _ap(record).get("state"):
            return _ap(record)["state"]
    return None


def previous_jobs(history):
    """(state by job name, state of any other job) of the latest autopilot record that judged the jobs. A record
    written before every job was judged (no ``jobs`` key) gives its state to every job."""
    for record in reversed(history or []):
        ap = _ap(record)
        if ap is None:
            continue
        if isinstance(ap.get("jobs"), dict):
            return dict((name, row.get("state")) for name, row in ap["jobs"].items() if isinstance(row, dict)), None
        if not ap.get("state") or is_host_state(ap.get("state")):
            continue
        return {}, ap.get("state")
    return {}, None


def _job_records(history, job):
    """The autopilot records of job ``job`` (its part of each record; an older record without ``jobs`` is one)."""
    for record in history or []:
        ap = _ap(record)
        if ap is None:
            continue
        if isinstance(ap.get("jobs"), dict):
            row = ap["jobs"].get(job)
            if isinstance(row, dict):
                yield row
        elif not is_host_state(ap.get("state")):
            yield ap


def acted(history, action, item, run, job=None):
    """The autopilot records of job ``job`` in ``run`` whose ``action`` on ``item`` was carried out."""
    return [r for r in _job_records(history, job) if r.get("action") == action and r.get("item") == item
            and r.get("run") == run and r.get("ok") is True]


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


def parked_at(history):
    """When the autopilot parked the host (epoch of the latest record of a park that succeeded), or None."""
    for record in reversed(history or []):
        ap = _ap(record)
        if ap and ap.get("action") == "park" and ap.get("ok") is True:
            return number(record.get("t"))
    return None


def epoch_of(text):
    """The epoch of an ISO 8601 UTC time as the job wrapper writes it (``2026-07-03T22:11:09Z``, or with an
    offset), or None for anything else (the text comes from the box: bounded, never trusted)."""
    if not isinstance(text, str) or len(text) > 40:
        return None
    value = text.strip()
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


def started(job):
    """The latest start of a job known from its own records (epoch): its log's last start marker
    (``last_start``) or its trusted meta's launch time (``launched_epoch``); None when neither is known."""
    times = [t for t in (epoch_of(job.get("last_start")), number(job.get("launched_epoch"))) if t is not None]
    return max(times) if times else None


def when(epoch):
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def park_enders(jobs, since):
    """[why] for each job that shows the park of ``since`` (epoch; None: unknown) is over: alive now, or started or
    launched after it."""
    found = []
    for job in jobs:
        start = started(job)
        if job.get("alive"):
            found.append("job %s is alive" % job["name"])
        elif since is not None and start is not None and start > since:
            found.append("job %s started at %s, after the park" % (job["name"], when(start)))
    return found


def _host_events(host, previous, state, reason):
    """The events of a change of the host's own state (pure): unreachable, escalated, new_fail, parked, or
    recovered when a host that failed on its own (unreachable, probe error, ...) is judged again."""
    if state == previous:
        return []
    now = family(state)
    kind = None
    if now == "unreachable":
        kind = "unreachable"
    elif now == "preempted":
        kind = "preempted"
    elif now in ("unreachable_escalated", "idle_destroy_only", "idle_manual", "preempted_escalated",
                 "replace_wanted"):
        kind = "escalated"
    elif now in ("replaced", "retired"):
        kind = "replaced"
    elif now in ("probe_error", "park_failed", "replace_failed", "retire_failed") or state == CONFIG_ERROR:
        kind = "new_fail"
    elif now == "parked":
        kind = "parked"
    elif is_host_state(previous) and family(previous) != "parked" and not is_host_state(state):
        kind = "recovered"
    if kind is None:
        return []
    return [{"host": host, "kind": kind, "level": LEVELS[kind], "text": "%s: %s" % (host, reason)}]


def _job_events(host, previous, state, reason):
    """The events of a change of one job's state (pure): none when the state is the previous one."""
    if state == previous:
        return []
    now, before = family(state), family(previous)
    kind = None
    if now in ("escalated", "too_fast", "gate_refused"):
        kind = "escalated"
    elif now in ("fail", "gone", "sync_failed", "heal_failed"):
        kind = "new_fail"
    elif now == "healed":
        kind = "healed"
    elif now in DONE and before not in DONE + ("parked",):
        kind = "queue_done"
    elif now in ("running", "done", "stopped") and before in FAILING + ESCALATED:
        kind = "recovered"
    if kind is None:
        return []
    return [{"host": host, "kind": kind, "level": LEVELS[kind], "text": "%s: %s" % (host, reason)}]


def change_events(host, previous, decision):
    """The events of a host state change (pure), for a decision without jobs (kept for callers of one state)."""
    return _host_events(host, previous, decision["state"], decision["reason"])


def _job_view(job):
    """A job's decision as it will read once its action succeeded."""
    if job["action"] in ("heal", "retry_sync"):
        return "healed:%s" % job["item"]
    return job["state"]


def events_of(found, settled=False):
    """Every event of a host's decision (pure): the host's own state change, then each job's. Before the action
    ran (``settled`` false), a heal or park reads as done, so that decide() announces what will be sent."""
    host = found["host"]
    state = found["state"]
    if not settled and found["action"] in SETTLED_AS:
        state = SETTLED_AS[found["action"]][0]
    events = _host_events(host, found.get("previous"), state, found["reason"])
    for job in found.get("jobs") or []:
        view = job["state"] if settled else _job_view(job)
        for event in _job_events(host, job.get("previous"), view, job["reason"]):
            # the message of a park (or of the escalation of an idle box) says that every queue is done
            if not (event["kind"] == "queue_done" and state in ("parked", "idle_destroy_only", "idle_manual")):
                events.append(event)
    return events


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
    name = job["name"]
    gone = unfinished(job)
    item = gone[0]
    signature = crash_signature(job, item)
    finished = (_items(job).get(item) or {}).get("finished")
    heals = acted(history, "heal", item, run, name)
    same = [h for h in heals if signature is not None and h.get("crash") == signature and h.get("crash_at") != finished]
    done = len(queue_ids(job) or []) - len(gone) - len(sync_failed(job))
    if same:
        return _decision("escalated:%s" % item, "escalate",
                         "job %s: item %s crashed twice the same way (%s): a deterministic crash is a bug, not bad "
                         "luck; not restarted. Read its log, fix it, then relaunch" % (name, item, signature), item,
                         crash=signature, crash_at=finished)
    if len(heals) >= settings["max_restarts"]:
        return _decision("escalated:%s" % item, "escalate",
                         "job %s: item %s was restarted %d time(s) already (autopilot_max_restarts %d); not "
                         "restarted again" % (name, item, len(heals), settings["max_restarts"]), item,
                         crash=signature, crash_at=finished)
    how = "crashed (%s)" % signature if signature else "was interrupted (no status: a restart, a kill, a preemption)"
    return _opt(_decision("gone:%s" % item, "heal",
                          "job %s is gone at %d/%d items; item %s %s: restart job %s's queue from item %s (restart "
                          "%d of at most %d)" % (name, done, len(queue_ids(job)), item, how, name, item,
                                                 len(heals) + 1, settings["max_restarts"]),
                          item, crash=signature, crash_at=finished), settings["heal"], "heal")


def _retry_sync(job, settings, history, run):
    name = job["name"]
    item = sync_failed(job)[0]
    row = _items(job).get(item) or {}
    files = ", ".join(str(f) for f in row.get("unsynced") or []) or "its files"
    tries = acted(history, "retry_sync", item, run, name)
    if len(tries) >= settings["max_restarts"]:
        return _decision("escalated:%s" % item, "escalate",
                         "job %s: item %s trained but %s is not durable after %d sync retries: fix the durable "
                         "tier, then relaunch; nothing is stopped" % (name, item, files, len(tries)), item)
    return _opt(_decision("sync_failed:%s" % item, "retry_sync",
                          "job %s: item %s trained but %s is not durable: retry its sync alone (no retraining); "
                          "nothing is stopped until it is durable" % (name, item, files), item),
                settings["heal"], "heal")


def judge_job(job, result, settings, history):
    """One job's decision (pure): running (or a FAIL finding of its own or of the box), stopped (no queue record),
    heal, retry_sync, too_fast (escalate), done or done_unsynced (the park is the host's)."""
    name, run = job["name"], job.get("run_id")
    if job.get("alive"):
        fails = [f for f in result.get("findings") or [] if isinstance(f, dict) and f.get("level") == "FAIL"
                 and f.get("job") in (None, name)]
        hung = [f for f in fails if f.get("code") == "job_hung"]
        if hung:
            # alive, but its log, checkpoints and GPU are all idle: a person decides (a live job is never
            # stopped or restarted by the autopilot)
            item = job.get("current_item")
            return _decision("escalated:%s" % (item or "hung"), "escalate", "job %s is hung (job_hung): %s; not "
                             "stopped or restarted by the autopilot: look at it, then stop it and restart it from its "
                             "last checkpoint" % (name, " ".join(str(hung[0].get("message") or "").split())[:300]),
                             item)
        if fails:
            return _decision("fail:%s" % fails[0].get("code"), "none", "job %s running, but %s: %s" % (
                name, fails[0].get("code"), " ".join(str(fails[0].get("message") or "").split())[:300]))
        return _decision("running", "none", "job %s running (%s/%s items done)" % (
            name, job.get("items_done"), job.get("items_total")))
    if queue_ids(job) is None:
        return _decision("stopped", "none", "job %s is not running and launch recorded no queue for it (%s): "
                         "nothing to resume, and nothing proves its files durable" % (
                             name, "exit %s" % job.get("last_exit_code")))
    gate = job.get("gate_refused")
    if isinstance(gate, dict) and isinstance(gate.get("item"), str):
        causes = [str(cause) for cause in gate.get("causes") or []]
        return _decision("gate_refused:%s" % gate["item"], "escalate",
                         "job %s paused before item %s: the item gate refused it (%s); not restarted, it would be "
                         "refused again: fix the cause (the job's item_gate_refused finding says what), then "
                         "relaunch" % (name, gate["item"], ", ".join(causes) or "?"), gate["item"], causes=causes)
    if unfinished(job):
        return _heal(job, settings, history, run)
    if sync_failed(job):
        return _retry_sync(job, settings, history, run)
    fast = too_fast(job)
    if fast:
        rows = _items(job)
        what = ", ".join("%s (%ss)" % (i, (rows.get(i) or {}).get("seconds", "?")) if i != "?" else
                         "%s item(s)" % job.get("items_too_fast") for i in fast)
        return _decision("too_fast:%s" % fast[0], "escalate",
                         "job %s: item(s) %s exited 0 sooner than launch_min_seconds (item_too_fast): not counted "
                         "as done, so the box is not parked and nothing is restarted; read the item's log "
                         "(trainer-item.log next to its outputs), fix the cause, remove the item's status.json "
                         "(items/<item>/status.json in the job directory: a relaunch skips an item that exited 0) and "
                         "relaunch; if the run is really that short, lower launch_min_seconds" % (name, what), fast[0])
    missing = not_durable(job)
    if missing:
        return _decision("done_unsynced", "none", "job %s: queue done; %s" % (
            name, "; ".join(why for _i, why in missing)), missing[0][0], missing=[why for _i, why in missing])
    return _decision("done", "none", "job %s: queue done (%d items), every file durable" % (
        name, len(queue_ids(job) or [])))


def _keeps_disk(park):
    return park.get("verb", "none") != "none" and park.get("keeps_data_disk") is True


def _park(host, jobs, result, settings, history, meter_stop, now, billing, park):
    """The host's decision when every job's queue is done and no job is alive (``jobs``: their decisions)."""
    park = park if isinstance(park, dict) else {}
    meter_stop = meter_stop if isinstance(meter_stop, dict) else {}
    names = ", ".join(job["job"] for job in jobs)
    missing = ["job %s: %s" % (job["job"], why) for job in jobs for why in job.get("missing") or []]
    state = "done_unsynced" if missing else "done"
    if missing and not _keeps_disk(park):
        return _decision(state, "none", "queue done (jobs %s), not parked: %s%s" % (
            names, "; ".join(missing), "" if park.get("verb", "none") == "none" else
            "; the profile's park (%s) does not keep the data disk (trainer_park.keeps_data_disk)" % park.get("verb")),
            next(job["item"] for job in jobs if job.get("missing")))
    durable = "every queue done (jobs %s), %s" % (
        names, "NOT every file durable" if missing else "every file durable")
    util = gpu_util(result)
    since = idle_since(history, now, util)
    if util is None:
        return _decision(state, "none", "%s; GPU use unknown, so not parked" % durable)
    if since is None:
        return _decision(state, "none", "%s; GPUs busy (%s%%), not parked" % (durable, util))
    minutes = (now - since) / 60.0
    if minutes < settings["idle_minutes"]:
        return _decision(state, "none", "%s; GPUs idle for %d of %d min (autopilot_idle_minutes)" % (
            durable, int(minutes), settings["idle_minutes"]))
    cost = ""
    price = number((billing or {}).get("price"))
    if price:
        cost = "; about %.2f %s so far while idle" % (price * minutes / 60.0, (billing or {}).get("currency") or "")
    idle = "%s, no job alive, GPUs idle for %d min%s" % (durable, int(minutes), cost)
    verb, command, api = park.get("verb") or "none", park.get("command"), park.get("api") or {}
    keeps = park.get("keeps") or "the disks"
    unsynced = {}
    if missing:
        days = integer(park.get("release_days"))
        clock = (" The platform releases a parked box after %d days, and its data disk with it: start it and sync "
                 "or pull them before %s" % (days, when(now + days * 86400)) if days else
                 " Start it and sync or pull them before you release it")
        keeps += (". It keeps the data disk, where these files are NOT durable yet: %s.%s"
                  % ("; ".join(missing), clock))
        unsynced = {"unsynced": missing, "release_days": days or None}
    if verb != "none" and isinstance(command, list) and command:
        return _opt(_decision(state, "park", "%s: park it with %s (%s, reversible; keeps %s)" % (
            idle, verb, " ".join(str(word) for word in command), keeps), verb=verb,
            via="command", command=[str(word) for word in command], **unsynced), settings["autostop"], "autostop")
    if verb != "none" and isinstance(api, dict) and api.get("provider"):
        return _opt(_decision(state, "park", "%s: park it with %s through the %s API (reversible; keeps %s)" % (
            idle, verb, api["provider"], keeps), verb=verb, via="api", api=dict(api), **unsynced),
            settings["autostop"], "autostop")
    if meter_stop.get("reversible") is not True:
        teardown = TEARDOWN.format(host=host)
        if meter_stop.get("verb") == "manual":  # generic_ssh: nothing reclaims the box, and nothing here stops it
            how = " ".join(str(meter_stop.get("how") or "").split())
            why = ("Nothing in the profile stops this box's meter (verb manual%s): it bills until you stop it. When "
                   "you are done, pull and verify the results with %s (it stops nothing on this box), then stop or "
                   "return the box yourself in the provider's console" % (": " + how if how else "", teardown))
        else:
            why = "The profile's only verb (%s) destroys the box: autopilot never runs it. When you are done: %s" % (
                meter_stop.get("verb") or "unknown", teardown)
        return _decision("idle_destroy_only", "escalate", "%s. %s" % (idle, why), cost=cost.strip("; ") or None,
                         teardown=teardown)
    return _decision("idle_manual", "escalate", "%s. The profile has no verb to park it (%s): park it by hand" % (
        idle, park.get("how") or meter_stop.get("how") or "see the profile"), teardown=TEARDOWN.format(host=host))


def console_hint(clocks=None):
    """What to check in the platform's console for a box that stopped answering: the generic hint, plus the
    profile's danger clocks (``trainer_danger_clocks``: balance, arrears, release, preemption facts) when given."""
    facts = [str(clock.get("clock")) for clock in clocks or () if isinstance(clock, dict) and clock.get("clock")]
    return CONSOLE_HINT + ("; on this platform: %s" % "; ".join(facts) if facts else "")


def _joined(lead, jobs):
    """The host's reason: the leading job's, then the others' (bounded)."""
    text = "; ".join([lead["reason"]] + [job["reason"] for job in jobs if job is not lead])
    return text if len(text) <= MAX_REASON else text[:MAX_REASON - 3] + "..."


def _combine(host, decisions, result, settings, history, meter_stop, now, billing, park):
    """The host's decision from its jobs' (pure): heal every gone job, else escalate, else report, else wait for
    the live jobs, else (every queue done, no job alive) the park."""
    if not decisions:
        return _decision("idle", "none", "no job under the run directory on this host")
    healing = [job for job in decisions if job["action"] in ("heal", "retry_sync")]
    escalating = [job for job in decisions if job["action"] == "escalate"]
    reporting = [job for job in decisions if job["action"] == "report"]
    alive = [job for job in decisions if family(job["state"]) in ("running", "fail")]
    settled = all(family(job["state"]) in DONE for job in decisions)
    lead = (healing or escalating or reporting or sorted(alive, key=lambda job: job["state"] == "running")
            or ([] if settled else [job for job in decisions if family(job["state"]) not in DONE]) or [None])[0]
    if lead is None:
        return _park(host, decisions, result, settings, history, meter_stop, now, billing, park)
    action = lead["action"]
    if healing:
        action = "heal" if any(job["action"] == "heal" for job in healing) else "retry_sync"
    found = _decision(lead["state"], action, _joined(lead, decisions), lead["item"], job=lead["job"])
    found["wanted"] = lead["wanted"]
    if healing:
        found["heal_jobs"] = [job["job"] for job in healing]
    return found


def command_to_rent(provider):
    """The exact command that rents a new instance like the preempted one (``provider``: the host's provider facts,
    ``record`` the curated record an inventory plugin keeps in hostvars), or None when the record does not say
    enough. Lambda: the instance module's state=present with the instance's own type, region, SSH key and
    filesystem, under ``<name>-relaunch`` (the preempted instance keeps its name until it is terminated)."""
    record = provider.get("record") if isinstance(provider.get("record"), dict) else {}
    if provider.get("provider") != "lambda" or not record:
        return None
    itype = record.get("instance_type") if isinstance(record.get("instance_type"), dict) else {}
    region = record.get("region") if isinstance(record.get("region"), dict) else {}
    keys = [k for k in record.get("ssh_key_names") or [] if isinstance(k, str) and k][:1]
    filesystems = [f for f in record.get("file_system_names") or [] if isinstance(f, str) and f][:1]
    if not (isinstance(itype.get("name"), str) and itype["name"] and isinstance(region.get("name"), str)
            and region["name"] and keys):
        return None
    name = "%s-relaunch" % (record.get("name") or "lambda-%s" % str(provider.get("id") or "")[:8])
    spec = {"instance_type": itype["name"], "regions": [region["name"]], "ssh_key_names": keys}
    if filesystems:
        spec["file_system_names"] = filesystems
    args = json.dumps({"provider": "lambda", "state": "present", "name": name, "spec": spec})
    if "'" in args:  # not safe inside the shell's single quotes: the step stays a sentence
        return None
    return "ansible localhost -m remote_gpu.trainer.instance -a '%s'" % args


def preempted(host, provider, billing=None, gone=False):
    """The decision for a box its provider reports ``preempted`` (pure): ``provider`` is the host's provider facts
    from the inventory plugin (``provider``, ``id``, ``status``, ``message``, ``durable_dir``, ``record``: the curated
    record in hostvars).

    A provider that gives the box back (GIVES_BACK) -> ``preempted``, nothing done: when it runs again, the jobs are
    judged as after a reboot and a gone job is healed from its durable checkpoint. Any other -> ``preempted_escalated``
    with the exact commands to re-rent and relaunch; so is a box that gave none back for
    ``autopilot_replace_after_minutes`` (``gone``). What it costs: the price it ran at; while a box that comes back
    is paused, its disk bills, not its GPU."""
    name = provider.get("provider") or "the provider"
    paused = name in GIVES_BACK and not gone
    cost = ""
    if billing and billing.get("price"):
        disk = ": while it is paused the GPU does not bill, its disk still does" if name in GIVES_BACK else ""
        cost = "; it ran at %s %s/h%s" % (billing.get("price"), billing.get("currency"), disk)
    said = " ".join(str(provider.get("message") or "").split())
    head = "preempted: %s reports %s (%s), stopped by the market or the provider, not by you%s" % (
        name, provider.get("id"), provider.get("status"), cost)
    if paused:
        return _decision("preempted", "none", "%s. %s When it runs again, the autopilot heals the queue from the "
                                              "durable checkpoint, as after a reboot; nothing is healed or stopped "
                                              "meanwhile." % (head, said))
    durable = provider.get("durable_dir") or "the durable directory"
    rent = command_to_rent(provider)
    commands = ("1) rent a new %s instance with the same filesystem (its checkpoints are in %s)%s; 2) ansible-playbook "
                "-i <your %s inventory> remote_gpu.trainer.preflight -l <new host>; 3) ansible-playbook -i <your %s "
                "inventory> remote_gpu.trainer.launch -l <new host> (the queue resumes from the checkpoints in %s); 4) "
                "forget the old one: ansible localhost -m remote_gpu.trainer.instance -a 'provider=%s id=%s "
                "state=absent'" % (name, durable, (": " + rent) if rent else "", name, name, durable, name,
                                   provider.get("id")))
    return _decision("preempted_escalated", "escalate", "%s. %s It %s. To go on: %s" % (
        head, said, "has not come back" if name in GIVES_BACK else "does not come back by itself", commands))


def decide(host, result, history, settings, meter_stop=None, now=0, billing=None, park=None, clocks=None,
           provider=None, replace=None):
    """One host's decision over every job on it (pure). ``result``: the registered job_status result of every job
    under the run directory (unreachable, failed, skipped or None included); ``history``: the host's records,
    oldest first; ``settings``: settings_of's dict; ``meter_stop``: the profile's trainer_meter_stop (never run: it
    names the teardown when the box cannot be parked); ``park``: the profile's trainer_park (a reversible stop, in
    the box or through the API; ``keeps_data_disk`` and ``release_days`` say what a park keeps); ``billing``:
    {price, currency} when the box bills; ``clocks``: the profile's trainer_danger_clocks (the console hint of a
    box that stays unreachable names them); ``provider``: the host's provider facts from an inventory plugin (see
    :func:`preempted`), whose ``state`` ``preempted`` is reported as such, never as unreachable; ``replace``: what
    a replacement needs (``record``: the rent's record, ``queue``, ``old_items``, ``new_items``, ``survives``,
    ``pulled``: see :func:`autopilot_replace.decide_replace`), used when ``autopilot_replace`` is on and the box is
    preempted for good or FAIL on a GPU finding, or a replacement is under way."""
    previous = previous_state(history)
    reachable, error = probe_outcome(result)
    jobs = [] if error else jobs_of(result)
    ended = held = None
    if family(previous) == "parked" and not (reachable and error):
        since = parked_at(history)
        enders = park_enders(jobs, since) if reachable else []
        at = " at %s" % when(since) if since is not None else " earlier"
        if enders:
            ended = "the park%s ended: %s" % (" of %s" % when(since) if since is not None else "", "; ".join(enders))
        else:
            held = _decision("parked", "none", "parked%s; %s" % (
                at, "it does not answer, as a parked box should" if not reachable else
                "no job has run or started on it since"))
    replace = replace if isinstance(replace, dict) else {}
    cause = autopilot_replace.replace_cause(provider, result if reachable and not error else None, history, now,
                                            settings.get("replace_after_minutes", 30))
    underway = autopilot_replace.replacement_of(history)[0] is not None
    if held:
        found = held
    elif (cause or underway) and (settings.get("replace") or underway):
        found = autopilot_replace.decide_replace(
            cause, settings, replace.get("record"), history, replace.get("queue"), replace.get("old_items"),
            replace.get("new_items"), replace.get("survives"), replace.get("pulled") or (), replace.get("rented_id"))
    elif (provider or {}).get("state") == "preempted":
        # not opted in: a preemption that does not end (cause) escalates, with the commands to re-rent and relaunch
        found = preempted(host, provider, billing, gone=bool(cause))
        if cause:
            found["reason"] += " Or set autopilot_replace: true to let the autopilot rent a replacement."
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
    else:
        before, legacy = previous_jobs(history)
        decisions = []
        for job in jobs:
            decision = judge_job(job, result, settings, history)
            decision.update(job=job["name"], run=job.get("run_id"), previous=before.get(job["name"], legacy))
            decisions.append(decision)
        found = _combine(host, decisions, result, settings, history, meter_stop, now, billing, park)
        found["jobs"] = decisions
        found.setdefault("heal_jobs", [])
        if ended:
            found["park_ended"] = ended
            found["reason"] = "%s; %s" % (ended, found["reason"])
    lead = next((job for job in found.get("jobs") or [] if job["job"] == found.get("job")), None)
    found.update(host=host, run=(lead or {}).get("run"), util=gpu_util(result) if reachable and not error else None,
                 previous=previous)
    found["events"] = events_of(found)
    return found


def settle(decision, outcome=None):
    """The decision after its action ran: ``outcome`` is ``{ok, msg}`` of the park, or ``{"jobs": {name: {ok,
    msg}}}`` of the heals (a job missing there did not run), None when nothing ran -> the decision with ``ok``,
    ``acted``, the final ``state`` (the host's, and each healed job's) and its events. A failed heal or park is a
    new FAIL."""
    found = dict(decision)
    found["jobs"] = [dict(job) for job in decision.get("jobs") or []] if "jobs" in decision else None
    if found["jobs"] is None:
        found.pop("jobs")
    if outcome is None or found["action"] not in ("heal", "retry_sync") + tuple(SETTLED_AS):
        found.update(ok=None, acted=False)
        found["events"] = events_of(found, settled=True)
        return found
    if found["action"] in SETTLED_AS:
        ok = bool(outcome.get("ok"))
        # a replacement's outcome names every job relaunched, or not, and a change of the code: room for them
        msg = " ".join(str(outcome.get("msg") or "").split())[:600]
        state = SETTLED_AS[found["action"]][0 if ok else 1]
        reason = found["reason"] + ("; %s: %s" % (state, msg) if ok else "; the %s FAILED: %s" % (
            "verb" if found["action"] == "park" else found["action"], msg))
        found.update(ok=ok, acted=True, state=state, reason=reason)
        if ok and isinstance(outcome.get("replacement"), dict):
            found["replacement"] = dict(outcome["replacement"])
        found["events"] = events_of(found, settled=True)
        return found
    results = outcome.get("jobs") if isinstance(outcome.get("jobs"), dict) else {}
    oks = []
    for job in found.get("jobs") or []:
        if job["job"] not in (found.get("heal_jobs") or []):
            continue
        ran = results.get(job["job"]) or {"ok": False, "msg": "the heal task did not run for job %s" % job["job"]}
        ok = bool(ran.get("ok"))
        msg = " ".join(str(ran.get("msg") or "").split())[:300]
        job.update(ok=ok, state=("healed:%s" if ok else "heal_failed:%s") % job["item"],
                   reason=job["reason"] + ("; restarted: %s" % msg if ok else "; the restart FAILED: %s" % msg))
        oks.append(ok)
    lead = next((job for job in found.get("jobs") or [] if job["job"] == found.get("job")), None)
    if lead is not None:
        found["state"] = lead["state"]
        found["reason"] = ("%s; " % found["park_ended"] if found.get("park_ended") else "") + _joined(
            lead, found["jobs"])
    found.update(ok=bool(oks) and all(oks), acted=True)
    found["events"] = events_of(found, settled=True)
    return found


def history_fields(decision):
    """What a history record keeps of a settled decision (its ``ap`` key): the host's part, and each judged
    job's state (``jobs``, absent when the jobs were not judged)."""
    keys = ("state", "action", "wanted", "reason", "item", "job", "run", "crash", "crash_at", "ok", "acted",
            "heal_jobs", "replacement", "snap")
    found = dict((key, decision.get(key)) for key in keys if decision.get(key) not in (None, []))
    if isinstance(decision.get("jobs"), list):
        found["jobs"] = dict((job["job"], dict((key, job.get(key)) for key in JOB_KEYS if job.get(key) is not None))
                             for job in decision["jobs"])
    found["events"] = [event["kind"] for event in decision.get("events") or []]
    return found
