# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the controller actions that read the whole fleet share (fleet_report, autopilot_decide): the hosts a play
targets, a host's variable read without failing, a host's profile and probe results as one record, its provider's
word (read in this run, else the inventory's), the variables that billing reads, and an atomic, redacted write of a
report.

    hosts = targeted_hosts(None, task_vars)           # every host the play targets, sorted
    record = host_record(fleet.get(host), "patrol", {"job_status": "patrol_probe"})
    write_file("reports/patrol.json", text, "report")  # AnsibleActionFail naming the path when it cannot
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.remote_gpu.trainer.plugins.module_utils.atomic import write_atomic
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.redact import redact_text

# The host's profile variables every row reads: (record key, host variable).
PROFILE_VARS = (("platform", "trainer_profile"), ("data_dir", "trainer_data_dir"),
                ("durable_dir", "trainer_durable_dir"), ("interpreter", "trainer_interpreter"))
# What idle_billing reads of a host (profile, or a host override in the inventory): (setting, host variable).
BILLING_VARS = (("billed", "trainer_billed"), ("price_per_hour", "trainer_price_per_hour"),
                ("currency", "trainer_price_currency"))
# The probe results each kind reads: (record key, suboption of result_vars naming the registered variable).
RESULTS_BY_KIND = {
    "preflight": (("storage", "inode_check"), ("gpu", "gpu_health"), ("env", "env_audit")),
    "patrol": (("probe", "job_status"),),
}
# With kind=preflight, the one probe whose result holds the three checks' (fleet_preflight.split_probe).
ONE_PROBE_OPTION = "preflight_probe"


def targeted_hosts(hosts, task_vars):
    """The hosts to report, sorted: ``hosts`` when given, else every host the play targets (its pattern within
    ``--limit``), also those that failed or were unreachable earlier in the run."""
    return sorted(hosts if hosts is not None else task_vars.get("ansible_play_hosts_all") or [])


def host_var(host_vars, name):
    """A host's variable (templated), or None when it is unset or does not template."""
    try:
        return host_vars.get(name) if host_vars else None
    except Exception:  # pylint: disable=broad-except
        return None  # a profile that failed validation may not even template


def host_record(host_vars, kind, result_vars):
    """A host's profile and the raw results of its probe tasks (None for a task that never ran on it)."""
    record = dict((key, host_var(host_vars, var)) for key, var in PROFILE_VARS)
    if kind == "preflight" and result_vars.get(ONE_PROBE_OPTION):
        record["probe"] = host_var(host_vars, result_vars[ONE_PROBE_OPTION])
        return record
    record.update((key, host_var(host_vars, result_vars[option])) for key, option in RESULTS_BY_KIND[kind])
    return record


def provider_read(host, host_vars, provider_var):
    """The provider's facts of ``host`` read in this run (``instance_info``'s ``facts``, registered as the variable
    ``provider_var`` by a task that loops over the hosts it asks about: the result whose ``item`` is the host), or
    None when the run did not ask about it or the provider did not answer."""
    registered = host_var(host_vars, provider_var) if provider_var else None
    results = registered.get("results") if isinstance(registered, dict) else None
    for read in results if isinstance(results, list) else ():
        if isinstance(read, dict) and read.get("item") == host:
            if read.get("failed") or not isinstance(read.get("facts"), dict):
                return None
            return read["facts"]
    return None


def provider_facts(host, host_vars, provider_var):
    """The provider facts of the host (provider_state and the rest): those read in this run (``provider_read``)
    before those an inventory plugin or rent set, or None for a host of a static inventory (no provider_state).
    ``read`` says whether they were read in this run."""
    fresh = provider_read(host, host_vars, provider_var)

    def fact(key):
        return fresh.get(key) if fresh is not None else host_var(host_vars, key)

    state = fact("provider_state")
    if not state:
        return None
    name = fact("provider")
    record = fact(name) if isinstance(name, str) and name else None
    return {"state": state, "provider": name, "id": fact("provider_id"),
            "status": fact("provider_status"),
            "message": fact("provider_state_message"),
            "durable_dir": host_var(host_vars, "trainer_durable_dir"),
            # the curated record the plugin keeps in hostvars (<provider>): what a re-rent command is built from
            "record": record if isinstance(record, dict) else None,
            "read": fresh is not None}


def write_file(path, text, what):
    """Write ``text`` to ``path`` atomically (0644); an OSError becomes a message that names the path."""
    try:
        write_atomic(path, redact_text(text), make_dirs=True)  # reports, dashboards, receipts: no secret
    except OSError as exc:
        raise AnsibleActionFail("cannot write the %s to %s: %s. Set a writable %s path." % (
            what, path, to_native(exc.strerror or exc), what))
