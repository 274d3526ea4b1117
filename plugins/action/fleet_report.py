# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of fleet_report: collect each host's row, print the table, write the JSON report."""

from __future__ import annotations

import datetime
import json
import os
import tempfile

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.remote_gpu.trainer.plugins.module_utils import fleet_report

display = Display()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("hosts", "record_var", "report_path", "strict", "title", "fail_run"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _spec, args = self.validate_argument_spec(argument_spec=dict(
            hosts=dict(type="list", elements="str", required=True),
            record_var=dict(type="str", required=True),
            report_path=dict(type="path"),
            strict=dict(type="bool", default=False),
            title=dict(type="str", default="fleet"),
            fail_run=dict(type="bool", default=True),
        ))
        hostvars = task_vars.get("hostvars", {})
        rows = []
        for host in sorted(args["hosts"]):
            host_vars = hostvars.get(host, {})
            record = host_vars.get(args["record_var"]) if host_vars else None
            if isinstance(record, dict):
                rows.append(fleet_report.row_from_record(host, record))
            else:
                rows.append(fleet_report.no_result_row(host, host_vars.get("trainer_profile", "-") if host_vars else "-"))
        table = fleet_report.render_table(rows)
        counts = fleet_report.summary(rows)
        failing = fleet_report.failing_hosts(rows, strict=args["strict"])
        footer = "%s: %d host(s): %s" % (args["title"], len(rows),
                                         ", ".join("%s %d" % (k, v) for k, v in sorted(counts.items())) or "none")
        display.display("\n".join(table + [footer]))

        report = {
            "title": args["title"],
            "generated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "strict": args["strict"],
            "summary": counts,
            "failing": failing,
            "hosts": rows,
        }
        if args["report_path"]:
            self._write_json(args["report_path"], report)
        result.update(changed=False, summary=counts, failing=failing, report_path=args["report_path"])
        if failing and args["fail_run"]:
            # The table is already on screen and the rows are in the report: keep the failure short.
            reasons = ["%s: %s %s" % (row["host"], row["verdict"], row.get("top_finding") or "")
                       for row in rows if row["host"] in failing]
            result.update(failed=True, msg="%d host(s) not fit: %s" % (len(failing), "; ".join(reasons)))
        else:
            result.update(table=table, rows=rows)
        return result

    @staticmethod
    def _write_json(path, report):
        directory = os.path.dirname(os.path.abspath(path))
        try:
            os.makedirs(directory, exist_ok=True)
            fd, tmp_path = tempfile.mkstemp(prefix=".report.", dir=directory)
            with os.fdopen(fd, "w") as handle:
                json.dump(report, handle, indent=2, sort_keys=True, default=str)
                handle.write("\n")
            os.replace(tmp_path, path)
        except OSError as exc:
            raise AnsibleActionFail("cannot write the report to %s: %s. Set a writable report path." % (
                path, to_native(exc.strerror or exc)))
