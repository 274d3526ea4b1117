# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of fleet_report: build each targeted host's row from the raw results its probe tasks registered,
print the lines and the table, write the JSON report (and the Prometheus textfile), fail on the unfit hosts."""

from __future__ import annotations

import datetime
import json
import os
import time

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_native
from ansible.utils.display import Display

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import billing, fleet_patrol, fleet_preflight
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import fleet_history, fleet_html, fleet_prom
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import fleet_table
from ansible_collections.remote_gpu.trainer.plugins.modules.fleet_report import DOCUMENTATION as MODULE_DOCUMENTATION
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.doc_args import DocumentedAction, refused
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.fleet_hosts import (
    BILLING_VARS, ONE_PROBE_OPTION, RESULTS_BY_KIND, host_record, host_var, provider_facts, targeted_hosts,
    write_file)
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.host_vars import HostVariables
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.redact import redact_result

display = Display()

# Table columns per kind; the last column is the one that is truncated.
COLUMNS_BY_KIND = {"preflight": fleet_preflight.COLUMNS, "patrol": fleet_patrol.COLUMNS}


def check_args(args):
    """Refuse arguments that the argument spec cannot: a prom_path node_exporter would not read, a result_vars
    that lacks a result the kind needs."""
    if args["tail_lines"] < 0:
        raise AnsibleActionFail("tail_lines must be 0 or more (the number of last log lines shown), got %d"
                                % args["tail_lines"])
    if args["prom_path"] and not args["prom_path"].endswith(".prom"):
        raise AnsibleActionFail("prom_path %s must end in .prom (node_exporter's textfile collector reads only "
                                "*.prom files)" % args["prom_path"])
    if args["html_path"] and not (args["html_path"].endswith(".html") and args["history_dir"]):
        raise AnsibleActionFail("html_path %s must end in .html and needs history_dir (the page is drawn from the "
                                "history)" % args["html_path"])
    missing = [option for _key, option in RESULTS_BY_KIND[args["kind"]] if not args["result_vars"].get(option)]
    if args["kind"] == "preflight" and args["result_vars"].get(ONE_PROBE_OPTION):
        missing = []
    if missing:
        raise AnsibleActionFail("kind=%s needs result_vars.%s: the names of the variables that register the results "
                                "of those tasks%s" % (args["kind"], ", result_vars.".join(missing),
                                                      " (or result_vars.%s alone)" % ONE_PROBE_OPTION
                                                      if args["kind"] == "preflight" else ""))


def unknown_hosts(hosts, hostvars):
    """The names in ``hosts`` that the inventory does not hold (``hostvars``, a HostVariables, has every inventory
    host)."""
    if hosts is None:
        return []
    return [host for host in hosts if not host or host not in hostvars]


def billing_settings(host_vars, now, idle_minutes):
    """A host's settings for the idle_billing finding (billing.idle_billing)."""
    settings = dict((key, host_var(host_vars, var)) for key, var in BILLING_VARS)
    meter_stop = host_var(host_vars, "trainer_meter_stop")
    settings.update(now=now, idle_minutes=idle_minutes,
                    verb=meter_stop.get("verb") if isinstance(meter_stop, dict) else None)
    return settings


def danger_clocks(hosts, hostvars):
    """The danger clocks of the hosts' profiles, once per platform (billing.platform_clocks)."""
    return billing.platform_clocks([(host, host_var(hostvars.get(host), "trainer_profile"),
                                     host_var(hostvars.get(host), "trainer_danger_clocks")) for host in hosts])


def build_rows(args, hosts, hostvars, now=None):
    """One row per host, in the order of ``hosts``; ``now`` (epoch, default the current time) dates idle_billing."""
    now = time.time() if now is None else now
    rows = []
    for host in hosts:
        record = host_record(hostvars.get(host), args["kind"], args["result_vars"])
        if args["kind"] == "patrol":
            record["provider"] = provider_facts(host, hostvars.get(host), args["result_vars"].get("instance_info"))
            settings = billing_settings(hostvars.get(host), now, args["idle_minutes"])
            rows.append(fleet_patrol.patrol_row(host, record, strict=args["strict"], tail_lines=args["tail_lines"],
                                                idle_billing=settings))
        else:
            rows.append(fleet_preflight.preflight_row(host, record))
    return rows


def screen_text(rows, table, footer, clocks=()):
    """What the action prints: each host's line (patrol), a blank line, the danger clocks once per platform and a
    blank line, the table and the footer."""
    lines = [row["line"] for row in rows if row.get("line")]
    clocks = billing.clock_lines(clocks)
    return "\n".join(lines + ([""] if lines else []) + clocks + ([""] if clocks else []) + table + [footer])


def failure_message(kind, rows, failing):
    """The short failure message (the table is already on screen and the rows are in the report)."""
    if kind == "patrol":
        reasons = ["%s: %s" % (row["host"], "; ".join(row.get("reasons") or [row["verdict"]]))
                   for row in rows if row["host"] in failing]
        return "%d host(s) escalated: %s" % (len(failing), " || ".join(reasons))
    reasons = ["%s: %s %s" % (row["host"], row["verdict"], row.get("top_finding") or "")
               for row in rows if row["host"] in failing]
    return "%d host(s) not fit: %s" % (len(failing), "; ".join(reasons))


def index_path(html_path):
    """The dashboard's JSON index: the page's path ending in .json."""
    return html_path[:-len(".html")] + ".json" if html_path else None


# Inventory file names that say nothing about the fleet: the directory that holds them names it instead.
GENERIC_INVENTORY_NAMES = ("hosts", "inventory", "main", "all", "fleet")


def fleet_name(name, sources):
    """The dashboard's title: ``name`` (the fleet_name option) when given, else the first inventory source's name
    (``my_fleet.yml`` -> my_fleet, ``inventories/autodl/hosts.yml`` -> autodl, ``prod.remote_gpu.yml`` -> prod),
    else ``fleet``."""
    if name:
        return name
    for source in sources if isinstance(sources, (list, tuple)) else [sources] if sources else []:
        path = os.path.normpath(str(source)).rstrip(os.sep)
        stem = os.path.basename(path).split(".", 1)[0]
        if stem.lower() in GENERIC_INVENTORY_NAMES or not stem:
            stem = os.path.basename(os.path.dirname(path))
        if stem:
            return stem
    return "fleet"


def inventory_hosts(task_vars):
    """Every host name of the inventory (groups.all), or None when the variables do not say."""
    hosts = (task_vars.get("groups") or {}).get("all")
    return set(hosts) if isinstance(hosts, (list, tuple, set)) else None


def update_dashboard(args, rows, hostvars, clocks, now, inventory=None):
    """Append each row to its host's history (args.history_dir), then, with args.html_path, draw the page and its
    JSON index from every host's history -> the warnings (a refused host name, a torn line). With ``inventory`` (host
    names), the page has cards for those hosts only; hosts with history that it no longer holds are listed as gone."""
    warnings = []
    for row in rows:
        host_vars = hostvars.get(row["host"])
        price = billing.price_of(host_var(host_vars, "trainer_price_per_hour")) if billing.billed(
            host_var(host_vars, "trainer_billed")) else None
        record = fleet_history.history_record(row, args["kind"], now, price,
                                              host_var(host_vars, "trainer_price_currency"))
        if host_var(host_vars, "trainer_durable_dir") in (None, host_var(host_vars, "trainer_data_dir")):
            record.pop("dur_b", None)  # one tier (RunPod's /workspace): its usage is the data disk's
            record.pop("dur_i", None)
        try:
            fleet_history.append_record(args["history_dir"], record)
        except fleet_history.HistoryError as exc:
            warnings.append("history of %r not written: %s" % (row["host"], exc))
        except OSError as exc:
            raise AnsibleActionFail("cannot write the history to %s: %s. Set a writable history_dir." % (
                args["history_dir"], to_native(exc.strerror or exc)))
    if not args["html_path"]:
        return warnings
    window = max(1, args["chart_days"]) * 86400
    fleet, more = fleet_history.load_fleet(args["history_dir"], now, window=window, points=fleet_html.SAMPLE_POINTS,
                                           recent=fleet_html.RATE_WINDOW)
    warnings += more
    base = os.path.dirname(os.path.abspath(args["html_path"]))
    pulled = fleet_html.pulled_curves(os.path.abspath(args["pull_root"]), inventory or fleet, base) \
        if args["pull_root"] else None
    page = fleet_html.render(fleet, now, title=args["fleet_name"], clocks=clocks, warnings=warnings, window=window,
                             warn_pct=args["disk_warn_pct"], fail_pct=args["disk_fail_pct"], inventory=inventory,
                             source=args["title"], pulled=pulled)
    files = {}
    for host in fleet:
        try:
            path = os.path.relpath(os.path.join(os.path.abspath(args["history_dir"]),
                                                fleet_history.file_name(host)), base)
        except fleet_history.HistoryError:
            continue
        files[host] = path if not path.startswith("..") else fleet_history.file_name(host)
    index = fleet_html.index(fleet, now, files, window, inventory=inventory, title=args["fleet_name"])
    write_file(args["html_path"], page, "dashboard")
    write_file(index_path(args["html_path"]), json.dumps(index, indent=1, sort_keys=True) + "\n", "dashboard index")
    return warnings


class ActionModule(DocumentedAction):
    DOCUMENTATION = MODULE_DOCUMENTATION

    def run(self, tmp=None, task_vars=None):
        """Every refusal (bad arguments, unknown hosts, an unwritable path) is a failed result with its message,
        as the other controller actions return theirs."""
        try:
            return super().run(tmp, task_vars)
        except AnsibleActionFail as exc:
            return refused(exc)

    def act(self, result, args, task_vars):
        check_args(args)
        hostvars = HostVariables(task_vars.get("hostvars"), self._templar)
        unknown = unknown_hosts(args["hosts"], hostvars)
        if unknown:
            raise AnsibleActionFail("hosts names %s, not in the inventory: fix the name(s) in hosts, or omit hosts to "
                                    "report every host of the play" % ", ".join(repr(host) for host in unknown))
        hosts = targeted_hosts(args["hosts"], task_vars)
        rows = redact_result(build_rows(args, hosts, hostvars), task_vars)  # the screen, report and history too
        clocks = danger_clocks(hosts, hostvars)
        table = fleet_table.render_table(rows, COLUMNS_BY_KIND[args["kind"]])
        counts = fleet_table.summary(rows)
        failing = fleet_table.failing_hosts(rows, strict=args["strict"])
        display.display(screen_text(rows, table, fleet_table.footer(args["title"], counts), clocks))

        report = {
            "title": args["title"],
            "kind": args["kind"],
            "generated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "strict": args["strict"],
            "summary": counts,
            "failing": failing,
            "hosts": rows,
            "danger_clocks": clocks,
        }
        if args["report_path"]:
            write_file(args["report_path"], json.dumps(report, indent=2, sort_keys=True, default=str) + "\n", "report")
        if args["prom_path"]:
            # written 0644: node_exporter usually runs as its own user
            write_file(args["prom_path"], fleet_prom.prometheus_text(rows, time.time()), "Prometheus textfile")
        args["fleet_name"] = fleet_name(args.get("fleet_name"), task_vars.get("ansible_inventory_sources"))
        warnings = update_dashboard(args, rows, hostvars, clocks, time.time(),
                                    inventory=inventory_hosts(task_vars)) if args["history_dir"] else []
        for warning in warnings:
            display.warning("fleet history: %s" % warning)
        result.update(changed=False, summary=counts, failing=failing, report_path=args["report_path"],
                      prom_path=args["prom_path"], danger_clocks=clocks, html_path=args["html_path"],
                      index_path=index_path(args["html_path"]), history_warnings=warnings)
        if failing and args["fail_run"]:
            result.update(failed=True, msg=failure_message(args["kind"], rows, failing))
        else:
            result.update(table=table, rows=rows)
        return result
