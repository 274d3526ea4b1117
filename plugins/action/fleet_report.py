# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of fleet_report: collect each host's row, print the table, write the JSON report."""

from __future__ import annotations

import datetime
import json
import time

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.remote_gpu.trainer.plugins.module_utils import fleet_report
from ansible_collections.remote_gpu.trainer.plugins.module_utils.atomic import write_atomic

display = Display()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("hosts", "record_var", "report_path", "strict", "title", "fail_run", "kind", "prom_path",
                             "tail_lines"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _spec, args = self.validate_argument_spec(argument_spec=dict(
            hosts=dict(type="list", elements="str", required=True),
            record_var=dict(type="str", required=True),
            report_path=dict(type="path"),
            strict=dict(type="bool", default=False),
            title=dict(type="str", default="fleet"),
            fail_run=dict(type="bool", default=True),
            kind=dict(type="str", choices=["preflight", "patrol"], default="preflight"),
            prom_path=dict(type="path"),
            tail_lines=dict(type="int", default=3),
        ))
        if args["prom_path"] and not args["prom_path"].endswith(".prom"):
            raise AnsibleActionFail("prom_path %s must end in .prom (node_exporter's textfile collector reads only "
                                    "*.prom files)" % args["prom_path"])
        hostvars = task_vars.get("hostvars", {})
        rows = []
        for host in sorted(args["hosts"]):
            host_vars = hostvars.get(host, {})
            if args["kind"] == "patrol":
                rows.append(fleet_report.patrol_row_from_record(host, self._patrol_record(host_vars, args["record_var"]),
                                                                strict=args["strict"], tail_lines=args["tail_lines"]))
                continue
            record = host_vars.get(args["record_var"]) if host_vars else None
            if isinstance(record, dict):
                rows.append(fleet_report.row_from_record(host, record))
            else:
                rows.append(fleet_report.no_result_row(host, host_vars.get("trainer_profile", "-") if host_vars else "-"))
        table = fleet_report.render_table(rows, columns=fleet_report.COLUMNS_BY_KIND[args["kind"]])
        counts = fleet_report.summary(rows)
        failing = fleet_report.failing_hosts(rows, strict=args["strict"])
        footer = "%s: %d host(s): %s" % (args["title"], len(rows),
                                         ", ".join("%s %d" % (k, v) for k, v in sorted(counts.items())) or "none")
        lines = [row["line"] for row in rows if row.get("line")]
        display.display("\n".join(lines + ([""] if lines else []) + table + [footer]))

        report = {
            "title": args["title"],
            "kind": args["kind"],
            "generated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "strict": args["strict"],
            "summary": counts,
            "failing": failing,
            "hosts": rows,
        }
        if args["report_path"]:
            self._write_json(args["report_path"], report)
        if args["prom_path"]:
            # written 0644: node_exporter usually runs as its own user
            self._write_atomically(args["prom_path"], fleet_report.prometheus_text(rows, time.time()),
                                   "Prometheus textfile")
        result.update(changed=False, summary=counts, failing=failing, report_path=args["report_path"],
                      prom_path=args["prom_path"])
        if failing and args["fail_run"]:
            # The table is already on screen and the rows are in the report: keep the failure short.
            if args["kind"] == "patrol":
                reasons = ["%s: %s" % (row["host"], "; ".join(row.get("reasons") or [row["verdict"]]))
                           for row in rows if row["host"] in failing]
                msg = "%d host(s) escalated: %s" % (len(failing), " || ".join(reasons))
            else:
                reasons = ["%s: %s %s" % (row["host"], row["verdict"], row.get("top_finding") or "")
                           for row in rows if row["host"] in failing]
                msg = "%d host(s) not fit: %s" % (len(failing), "; ".join(reasons))
            result.update(failed=True, msg=msg)
        else:
            result.update(table=table, rows=rows)
        return result

    @staticmethod
    def _patrol_record(host_vars, record_var):
        """The profile facts of a host and the raw result of its job_status task (None when it did not run)."""
        record = {}
        for key, var in (("platform", "trainer_profile"), ("data_dir", "trainer_data_dir"),
                         ("durable_dir", "trainer_durable_dir"), ("probe", record_var)):
            try:
                record[key] = host_vars.get(var) if host_vars else None
            except Exception:  # pylint: disable=broad-except
                record[key] = None  # a profile that failed validation may not even template
        return record

    @staticmethod
    def _write_atomically(path, text, what):
        try:
            write_atomic(path, text, make_dirs=True)
        except OSError as exc:
            raise AnsibleActionFail("cannot write the %s to %s: %s. Set a writable %s path." % (
                what, path, to_native(exc.strerror or exc), what))

    @classmethod
    def _write_json(cls, path, report):
        cls._write_atomically(path, json.dumps(report, indent=2, sort_keys=True, default=str) + "\n", "report")
