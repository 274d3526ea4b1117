# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of the autopilot tick: decide per host (plugin_utils/autopilot.py), then record what was done:
history, receipts, the JSON report, and the events to notify."""

from __future__ import annotations

import datetime
import glob
import json
import os
import time

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_native
from ansible.utils.display import Display

from ansible_collections.remote_gpu.trainer.plugins.module_utils import safe_read
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import (
    autopilot, autopilot_replace, billing, fleet_history, fleet_patrol)
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.teardown import unresolved_placeholders
from ansible_collections.remote_gpu.trainer.plugins.modules.autopilot_decide import DOCUMENTATION as MODULE_DOCUMENTATION
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.doc_args import DocumentedAction, refused
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.fleet_hosts import (
    BILLING_VARS, host_record, host_var, provider_facts, targeted_hosts, write_file)
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.host_vars import HostVariables
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.redact import redact_result

display = Display()
SETTINGS = ("heal", "autostop", "notify", "replace", "max_restarts", "idle_minutes", "unreachable_minutes",
            "replace_after_minutes")
ACTS = ("heal", "retry_sync", "park", "replace", "retire")


def host_billing(host_vars):
    """{price, currency} of a box that bills, else {}."""
    settings = dict((key, host_var(host_vars, var)) for key, var in BILLING_VARS)
    if not billing.billed(settings.get("billed")):
        return {}
    return {"price": billing.price_of(settings.get("price_per_hour")), "currency": settings.get("currency")}


def history_of(history_dir, host):
    """The host's history records (oldest first) and the warnings of reading it."""
    try:
        name = fleet_history.file_name(host)
    except fleet_history.HistoryError as exc:
        return [], [str(exc)]
    if not os.path.isdir(history_dir):
        return [], []
    records, warnings, _size = fleet_history.read_history(history_dir, name)
    return records, warnings


def park_problem(decision, environ=None):
    """Why the park the decision names cannot run, or None: a command with a ``$VAR`` placeholder, an API park
    without the instance's id or without its key's variable on the controller."""
    environ = os.environ if environ is None else environ
    if decision.get("via") == "command":
        placeholders = unresolved_placeholders(decision.get("command"))
        return "its command still holds %s (set the matching inventory variable)" % ", ".join(
            placeholders) if placeholders else None
    api = decision.get("api") or {}
    if not str(api.get("id") or "").strip():
        return "the %s instance id is unknown (use the inventory plugin, or set it)" % api.get("provider")
    if not environ.get(str(api.get("key_env") or "")):
        return "the environment variable %s is not set on the controller" % (api.get("key_env") or "(none named)")
    return None


MAX_RENT_RECORD = 16 << 20


def records_dir(args):
    """The directory of the rents' records (``rent-<name>.json``): the autopilot report's."""
    return os.path.dirname(os.path.abspath(args["report_path"]))


def rent_records(reports_dir):
    """The rents' records under ``reports_dir`` (``rent-*.json``, as rent.yml writes them); unreadable ones are
    skipped with a warning (a replacement that finds no record escalates and says so). Read through safe_read: a
    FIFO, a device or a symlink planted there is never opened blocking or followed, a huge file never read whole."""
    found = []
    for path in sorted(glob.glob(os.path.join(reports_dir, "rent-*.json")))[:200]:
        try:
            data, _size, cut = safe_read.read_bounded(path, MAX_RENT_RECORD)
            if cut:
                raise ValueError("larger than %d bytes" % MAX_RENT_RECORD)
            found.append(json.loads(data.decode("utf-8")))
        except (OSError, ValueError, RecursionError, safe_read.ReadRefused) as exc:
            display.warning("rent record %s skipped: %s" % (path, exc))
    return found


MAX_LAUNCH_RECORD = 1 << 20


def launch_records(record_dir, host):
    """{path: parsed JSON} of the records launch wrote for ``host`` (``<record_dir>/<host>/*.json``, at most 100),
    read through safe_read (a link or a special file there is refused, never followed or opened blocking); a
    record that cannot be read is given as None, which autopilot_replace.relaunch_jobs refuses with its path."""
    if not host or host in (".", "..") or "/" in host or "\0" in host:
        return {}
    found = {}
    for path in sorted(glob.glob(os.path.join(glob.escape(os.path.join(record_dir, host)), "*.json")))[:100]:
        try:
            data, _size, cut = safe_read.read_bounded(path, MAX_LAUNCH_RECORD)
            found[path] = None if cut else json.loads(data.decode("utf-8"))
        except (OSError, ValueError, RecursionError, safe_read.ReadRefused) as exc:
            display.warning("launch record %s skipped: %s" % (path, exc))
            found[path] = None
    return found


def replace_inputs(host, host_vars, hostvars, args, history, hosts=()):
    """What autopilot_replace's decision needs (see autopilot_replace.decide_replace): the rent's record of the
    box (found by its provider id), the queue snapshot of its last probe, the replacement's items now, and whether
    its durable tier survives the instance."""
    provider = provider_facts(host, host_vars, args["provider_var"]) or {}
    snap = autopilot_replace.last_snapshot(history) or {}
    replacement, _retired = autopilot_replace.replacement_of(history)
    new_items = {}
    if replacement and replacement.get("host"):
        # the rent's name for it, or (an inventory plugin names a host by its label) the host with its provider id
        names = [str(replacement["host"])] + [host for host in hosts or () if replacement.get("id") is not None and str(
            host_var(hostvars.get(host), "provider_id")) == str(replacement["id"])]
        for name in names:
            new_probe = host_var(hostvars.get(name), args["probe_var"])
            new_items = (autopilot_replace.snapshot(new_probe) or {}).get("items") or {}
            if new_items:
                break
    record = autopilot_replace.find_record(rent_records(records_dir(args)),
                                           provider.get("provider"), provider.get("id"))
    return {"record": record, "rented_id": provider.get("id") if record else None, "queue": snap.get("queue"),
            "old_items": snap.get("items"), "new_items": new_items,
            "survives": autopilot_replace.survives_destroy(host_var(host_vars, "trainer_storage_tiers"),
                                                           host_var(host_vars, "trainer_durable_dir"))}


def decide_host(host, host_vars, args, now, check_mode, hostvars=None, hosts=()):
    """One host's decision, with ``act`` (what the playbook runs) and ``open`` (the park gate)."""
    raw = dict((key, host_var(host_vars, "autopilot_" + key)) for key in SETTINGS)
    if host_var(host_vars, "autopilot_job") is not None:
        display.warning("%s: autopilot_job is no longer used: the autopilot judges every job under the run "
                        "directory (heals each gone job by name, parks only when none is alive)" % host)
    history, warnings = history_of(args["history_dir"], host)
    probe = host_var(host_vars, args["probe_var"])
    try:
        settings = autopilot.settings_of(raw)
    except autopilot.SettingsError as exc:
        settings = None
        found = {"state": "config_error", "action": "none", "wanted": "none", "item": None, "host": host,
                 "reason": "%s: nothing is healed or stopped on this host" % exc,
                 "previous": autopilot.previous_state(history)}
        found["events"] = autopilot.change_events(host, found["previous"], dict(found, state="fail:config_error"))
        found["state"] = "fail:config_error"
    if settings is not None:
        meter_stop = host_var(host_vars, "trainer_meter_stop")
        found = autopilot.decide(host, probe, history, settings, meter_stop, now,
                                 billing=host_billing(host_vars), park=host_var(host_vars, "trainer_park"),
                                 clocks=host_var(host_vars, "trainer_danger_clocks"),
                                 provider=provider_facts(host, host_vars, args["provider_var"]),
                                 replace=replace_inputs(host, host_vars, hostvars, args, history, hosts)
                                 if hostvars else None)
        if settings["replace"]:
            snap = autopilot_replace.snapshot(probe if autopilot.probe_outcome(probe) == (True, None) else None)
            if snap:
                found["snap"] = snap
        if found.get("action") == "replace":
            # every job the old box ran, each with the variables and the share of the queue its launch recorded
            found["relaunch"] = autopilot_replace.relaunch_jobs(
                launch_records(args["launch_record_dir"], host),
                autopilot_replace.last_snapshot(history) or found.get("snap"))
            found["relaunch"]["dir"] = os.path.join(args["launch_record_dir"], host)
        problem = park_problem(found) if found.get("wanted") == "park" else None
        if problem and found["action"] == "park":
            found.update(action="escalate", wanted="escalate", state="idle_manual",
                         reason=found["reason"] + "; but %s, so it cannot be parked: park it by hand" % problem)
            found["events"] = autopilot.events_of(found)
        elif problem:
            found["reason"] += "; and %s" % problem
    found["notify"] = bool(settings and settings["notify"])
    found["open"] = found["action"] == "park" and not check_mode
    found["act"] = found["action"] if found["action"] in ACTS and not check_mode else None
    found["history_warnings"] = warnings
    return found


def outcome_of(decision, host_vars, args):
    """The outcome of the action the playbook ran for this decision: {ok, msg} of a park, {"jobs": {job: {ok,
    msg}}} of the heals, or None when none ran."""
    if decision.get("act") not in ACTS:
        return None
    if decision["act"] in ("replace", "retire"):
        result = host_var(host_vars, "autopilot_%s_outcome" % decision["act"])
        if not isinstance(result, dict):
            return {"ok": False, "msg": "the %s tasks did not run for this host" % decision["act"]}
        return result
    var = args["heal_var"]
    if decision["act"] == "park":
        var = args["park_api_var"] if decision.get("via") == "api" else args["park_var"]
    result = host_var(host_vars, var)
    if not isinstance(result, dict) or result.get("skipped"):
        if decision["act"] != "park":
            return {"jobs": {}}
        return {"ok": False, "msg": "the %s task did not run on this host" % decision["act"]}
    if decision["act"] == "park" and decision.get("via") == "api":
        if result.get("failed"):
            return {"ok": False, "msg": " ".join(str(result.get("msg") or "failed").split())[:300]}
        return {"ok": True, "msg": "the %s API: %s" % ((decision.get("api") or {}).get("provider"),
                                                       result.get("msg") or "stopped")}
    if decision["act"] == "park":
        if result.get("unreachable"):  # the box went down while the verb ran: what was asked
            return {"ok": True, "msg": "%s ran; the connection dropped as the box went down" % " ".join(
                decision.get("command") or [])}
        rc = result.get("rc")
        if rc == 0 and not result.get("failed"):
            return {"ok": True, "msg": "%s exited 0" % " ".join(decision.get("command") or [])}
        return {"ok": False, "msg": "%s: rc %s: %s" % (" ".join(decision.get("command") or []), rc, " ".join(
            str(result.get("stderr") or result.get("msg") or "").split())[:300])}
    jobs = heal_outcomes(result)
    if not jobs and (result.get("unreachable") or result.get("failed")):
        why = {"ok": False, "msg": " ".join(str(result.get("msg") or "failed").split())[:300]}
        jobs = dict((name, why) for name in decision.get("heal_jobs") or [])
    return {"jobs": jobs}


def heal_outcomes(result):
    """{job: {ok, msg}} of the heal task's loop over the decision's heal_jobs (one detached_job per job)."""
    found = {}
    for row in result.get("results") or []:
        if not isinstance(row, dict) or not isinstance(row.get("item"), str) or row.get("skipped"):
            continue
        if row.get("unreachable") or row.get("failed"):
            found[row["item"]] = {"ok": False, "msg": " ".join(str(row.get("msg") or "failed").split())[:300]}
        else:
            found[row["item"]] = {"ok": True, "msg": str(row.get("msg") or "resumed")}
    return found


def line_of(decision):
    act = decision["action"] if decision["action"] == decision.get("wanted") else "%s (wanted %s)" % (
        decision["action"], decision.get("wanted"))
    done = {True: " [done]", False: " [FAILED]"}.get(decision.get("ok"), "")
    return "%s: %s, %s%s: %s" % (decision["host"], decision["state"], act, done, decision["reason"])


def receipt_path(report_path, host, now):
    base = os.path.join(os.path.dirname(os.path.abspath(report_path)), "receipts")
    return os.path.join(base, "%s-%d-PARK_RECEIPT.json" % (fleet_history.file_name(host)[:-len(".jsonl")], int(now)))


class ActionModule(DocumentedAction):
    DOCUMENTATION = MODULE_DOCUMENTATION

    def run(self, tmp=None, task_vars=None):
        try:
            return super().run(tmp, task_vars)
        except AnsibleActionFail as exc:
            return refused(exc)

    def notify_available(self):
        try:
            return bool(self._shared_loader_obj.action_loader.has_plugin("remote_gpu.trainer.notify"))
        except Exception:  # pylint: disable=broad-except
            return False

    def act(self, result, args, task_vars):
        if args["history_dir"] is None:
            args["history_dir"] = os.path.join(os.path.dirname(args["report_path"]), "history")
        args["launch_record_dir"] = os.path.abspath(args["launch_record_dir"])
        hostvars = HostVariables(task_vars.get("hostvars"), self._templar)
        hosts = targeted_hosts(None, task_vars)
        now = time.time()
        check = bool(self._task.check_mode)
        if args["phase"] == "decide":
            decisions = dict((host, decide_host(host, hostvars.get(host), args, now, check, hostvars, hosts))
                             for host in hosts)
            warnings = sorted(set(w for d in decisions.values() for w in d.pop("history_warnings")))
            for warning in warnings:
                display.warning("autopilot history: %s" % warning)
            result.update(changed=False, decisions=decisions, events=[], notify_events=[], history_warnings=warnings,
                          config_errors=[],
                          # where the rents' records are read (reports/rent-*.json): a replacement's rent writes its own
                          records_dir=records_dir(args),
                          acting=sorted(host for host, found in decisions.items() if found["act"]),
                          notify_available=self.notify_available())
            return result
        return self.record(result, args, hostvars, hosts, now, check)

    def record(self, result, args, hostvars, hosts, now, check):
        settled, warnings = {}, []
        for host in hosts:
            decision = (args["decisions"] or {}).get(host)
            if not isinstance(decision, dict):
                continue
            host_vars = hostvars.get(host)
            found = redact_result(autopilot.settle(decision, outcome_of(decision, host_vars, args)))
            found["line"] = line_of(found)
            if found.get("acted") and found["action"] == "park" and not check:
                found["receipt"] = self.write_receipt(args, found, host_vars, now)
            if not check:
                warnings += self.append_history(args, found, host_vars, now)
            settled[host] = found
        title = "autopilot%s" % (" (check mode: nothing acted, nothing recorded)" if check else "")
        display.display("\n".join([title] + [d["line"] for d in settled.values()]))
        for warning in warnings:
            display.warning("autopilot history: %s" % warning)
        self.write_report(args, settled, now, check=check)
        events = [event for d in settled.values() for event in d.get("events") or []]
        notify = [event for d in settled.values() if d.get("notify") for event in d.get("events") or []]
        available = self.notify_available()
        if notify and not available:
            display.warning("autopilot: %d event(s) not sent: remote_gpu.trainer.notify is not installed; they are in "
                            "the report %s" % (len(notify), args["report_path"]))
        result.update(changed=any(d.get("acted") for d in settled.values()), decisions=settled, events=events,
                      notify_events=notify, notify_available=available, history_warnings=warnings, acting=[],
                      config_errors=["%s: %s" % (host, d.get("reason")) for host, d in settled.items()
                                     if d.get("state") == autopilot.CONFIG_ERROR])
        return result

    def append_history(self, args, decision, host_vars, now):
        record_in = host_record(host_vars, "patrol", {"job_status": args["probe_var"]})
        row = fleet_patrol.patrol_row(decision["host"], record_in)
        price = host_billing(host_vars)
        record = fleet_history.history_record(row, "autopilot", now, price.get("price"), price.get("currency"))
        record["ap"] = autopilot.history_fields(decision)
        try:
            fleet_history.append_record(args["history_dir"], record)
        except fleet_history.HistoryError as exc:
            return ["history of %r not written: %s" % (decision["host"], exc)]
        except OSError as exc:
            raise AnsibleActionFail("cannot write the history to %s: %s. Set a writable history_dir." % (
                args["history_dir"], to_native(exc.strerror or exc)))
        return []

    def write_receipt(self, args, decision, host_vars, now):
        meter = host_var(host_vars, "trainer_meter_stop") or {}
        receipt = {"host": decision["host"], "platform": host_var(host_vars, "trainer_profile"),
                   "verb": decision.get("verb"), "command": decision.get("command"),
                   "api": dict((k, v) for k, v in (decision.get("api") or {}).items() if k != "key_env") or None,
                   "reversible": True, "meter_stop_verb": meter.get("verb"),
                   "acted": True, "ok": decision.get("ok"), "reason": decision["reason"], "run_id": decision.get("run"),
                   "jobs": [job["job"] for job in decision.get("jobs") or []],
                   "unsynced": decision.get("unsynced") or [], "release_days": decision.get("release_days"),
                   "by": "autopilot", "time": datetime.datetime.fromtimestamp(
                       now, datetime.timezone.utc).isoformat(timespec="seconds")}
        path = receipt_path(args["report_path"], decision["host"], now)
        write_file(path, json.dumps(receipt, indent=1, sort_keys=True) + "\n", "park receipt")
        return path

    def write_report(self, args, decisions, now, check):
        report = {"title": "autopilot", "kind": "autopilot", "check_mode": check,
                  "generated_at": datetime.datetime.fromtimestamp(now, datetime.timezone.utc).isoformat(
                      timespec="seconds"),
                  "hosts": [dict(d, host=host) for host, d in sorted(decisions.items())],
                  "events": [event for d in decisions.values() for event in d.get("events") or []]}
        write_file(args["report_path"], json.dumps(report, indent=2, sort_keys=True, default=str) + "\n", "report")
