# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""rent_probe: each new box of a rent, on its own thread: wait until it runs and answers SSH, probe it, and give it
back through the API at once when it is FAIL (see the module's documentation). What a bad box is billed is the
provider's provisioning, at most one poll interval, the probe, and one API request: no Ansible task in between.
A box that the controller could not log in to (its own SSH settings) is UNPROBED: given back too, its machine not
judged, and the result's ``stop_renting`` tells the rent to rent no more."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import tempfile
import threading
import time

from ansible import constants as C
from ansible.errors import AnsibleActionFail

from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_hosts import (
    lambda_host, runpod_host, vastai_host)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_http import ProviderAPIError, scrub
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_identity import (
    check_address, check_id, expectation, record_address)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_lifecycle import (
    PROVIDERS, STUCK, Lifecycle, make_client, make_v2_client, plan)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_rent import (
    UNPROBED, judge, machine_id, ssh_fault, ssh_text, stop_renting)
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.rsync import Target
from ansible_collections.remote_gpu.trainer.plugins.modules.rent_probe import DOCUMENTATION as MODULE_DOCUMENTATION
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.direct import Unsupported, program_for
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.doc_args import DocumentedAction
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.host_vars import HostVariables

C_LOCALE = {"LC_ALL": "C", "LANG": "C"}
HOST_OF = {"vastai": vastai_host, "runpod": runpod_host, "lambda": lambda_host}
SSH_RETRY = 0.2  # seconds between two knocks on a box's SSH port once the provider says it runs
KNOWN_HOSTS_LOCK = threading.Lock()  # the boxes' threads write the rent's known_hosts one at a time


def known_host_name(address, port):
    """How ssh names ``address:port`` in a known_hosts file (unhashed)."""
    return str(address) if int(port) == 22 else "[%s]:%s" % (address, port)


def record_host_key(known_hosts, first_contact, address, port):
    """Write the key(s) that ssh accepted for ``address:port`` on first contact (the file ``first_contact``) into the
    rent's ``known_hosts``, replacing every older line for that name: the box was created just now through the
    provider's API, so a key recorded earlier for its address was another box's. Returns the number of keys written."""
    name = known_host_name(address, port)
    try:
        with open(first_contact, "r", encoding="utf-8", errors="replace") as handle:
            new = [line.strip() for line in handle.read(1 << 16).splitlines()
                   if line.strip() and line.split()[0].split(",")[0] == name]
    except OSError:
        return 0
    if not new:
        return 0
    directory = os.path.dirname(os.path.abspath(known_hosts))
    with KNOWN_HOSTS_LOCK:
        os.makedirs(directory, exist_ok=True)
        try:
            with open(known_hosts, "r", encoding="utf-8", errors="replace") as handle:
                kept = [line.rstrip("\n") for line in handle.read(1 << 22).splitlines()
                        if line.strip() and name not in line.split()[0].split(",")]
        except FileNotFoundError:
            kept = []
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".known_hosts.")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write("\n".join(kept + sorted(set(new))) + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, known_hosts)
    return len(set(new))


def ssh_answers(address, port, deadline):
    """Whether the box's SSH server greets (``SSH-``) before ``deadline`` (time.time())."""
    while True:
        try:
            with socket.create_connection((address, int(port)), timeout=max(0.5, min(5.0, deadline - time.time()))) \
                    as sock:
                sock.settimeout(max(0.5, min(5.0, deadline - time.time())))
                if sock.recv(64).startswith(b"SSH-"):
                    return True
        except OSError:
            pass
        if time.time() + SSH_RETRY > deadline:
            return False
        time.sleep(SSH_RETRY)


def module_result(rc, out, err):
    """A module's result from its run over SSH; a failed result when it printed none (the message says why, without
    ssh's noise). ssh's own failure (255) carries ``ssh_fault`` when the controller's settings caused it."""
    text = (out or "").strip()
    start = text.find("{")
    if start >= 0:
        try:
            return json.loads(text[start:])
        except ValueError:
            pass
    if rc == 255:
        return {"failed": True, "unreachable": True, "msg": "SSH failed: %s" % ssh_text(err),
                "ssh_fault": ssh_fault(err)}
    return {"failed": True, "msg": "no module result (rc %s): %s" % (rc, ssh_text(err or out))}


def ssh_command(target, address, port):
    """The login that the probe tried, as a command to try by hand (the key and the user, no other option)."""
    dest = ("%s@%s" % (target.user, address)) if target.user else str(address)
    key = " -i %s" % shlex.quote(target.private_key_file) if target.private_key_file else ""
    return "ssh%s -p %s %s true" % (key, port, shlex.quote(dest))


class ActionModule(DocumentedAction):
    DOCUMENTATION = MODULE_DOCUMENTATION
    _requires_connection = False

    def act(self, result, args, task_vars):
        provider = args["provider"]
        if self._task.check_mode:
            raise AnsibleActionFail("rent_probe destroys boxes, so it does not run in check mode (rent.yml skips it).")
        key = (args["api_key"] or os.environ.get(PROVIDERS[provider]["env_var"]) or "").strip()
        if not key:
            raise AnsibleActionFail("%s: no API key. Set the environment variable %s on the controller, or the "
                                    "option api_key." % (provider, PROVIDERS[provider]["env_var"]))
        fleet = HostVariables(task_vars.get("hostvars"), self._templar)
        boxes, workers = [], []
        first_contacts = tempfile.TemporaryDirectory(prefix="rent-probe-") if args["known_hosts"] else None
        for instance in args["instances"]:
            if not isinstance(instance, dict) or not instance.get("id"):
                raise AnsibleActionFail("instances: each one is an entry of the instance module's instances, with "
                                        "an id; got %r" % (instance,))
            name = str(instance.get("name") or "")
            box = {"name": name, "id": str(instance["id"]), "verdict": None, "finding": None, "outcome": None,
                   "error": None, "hostvars": None, "machine_id": instance.get("machine_id"),
                   "price_per_hour": instance.get("price_per_hour"), "offer": instance.get("offer"),
                   "created_at": instance.get("created_at") or time.time(), "running_at": None,
                   "answered_at": None, "probe_started_at": None, "probed_at": None, "probe_seconds": None, "probe_seconds_box": None, "destroy_at": None,
                   "seconds_billed": None, "polls": 0, "destroy_confirmed": None, "host_keys_recorded": None,
                   "identity": None, "ssh_command": None}
            setup = self.connection_of(fleet.get(name), args["probes"].get(name), provider)
            if first_contacts is not None:
                setup["first_contact"] = os.path.join(first_contacts.name, "%d" % len(boxes))
            worker = threading.Thread(target=self.one_box, args=(box, setup, provider, key, args), daemon=True)
            boxes.append(box)
            workers.append(worker)
        for worker in workers:
            worker.start()
        limit = time.time() + args["timeout"] * 2 + args["ssh_timeout"] * 2 + 60
        for worker in workers:
            worker.join(max(0.0, limit - time.time()))
        if first_contacts is not None:
            first_contacts.cleanup()
        for box in boxes:
            if box["outcome"] is None:
                box.update(outcome="not given back", error=box["error"] or "its check did not end in time")
            box["error"] = scrub(box["error"], key) if box["error"] else None
            box["finding"] = scrub(box["finding"], key) if box["finding"] else None
            box["ssh_command"] = scrub(box["ssh_command"], key) if box["ssh_command"] else None
        # a box the controller could not log in to: every next one would fail the same way, and bill
        result.update(changed=any(b["outcome"] == "given back" for b in boxes), boxes=boxes,
                      stop_renting=stop_renting(boxes))
        stuck = [b for b in boxes if b["outcome"] == "not given back"]
        if stuck:
            result.update(failed=True, msg="%d unfit box(es) were NOT given back, and may still be billing: %s" % (
                len(stuck), "; ".join("%s (instance %s): %s" % (b["name"], b["id"], b["error"]) for b in stuck)))
        return result

    def connection_of(self, view, probe, provider):
        """What one box's thread needs from its host variables: the probe's program, the identity read's program,
        the SSH settings (address and port come later, from the provider's record)."""
        setup = {"problem": None, "probe": None, "identity": None, "target": None, "python": "/usr/bin/python3",
                 "first_contact": None, "common_args": ""}
        if view is None:
            setup["problem"] = "the host is not in the play (add_host it first)"
            return setup

        def var(*names):
            for name in names:
                value = view.get(name)
                if value not in (None, ""):
                    return value
            return None
        user = var("ansible_user", "ansible_ssh_user") or C.DEFAULT_REMOTE_USER
        key_file = var("ansible_ssh_private_key_file", "ansible_private_key_file") or C.DEFAULT_PRIVATE_KEY_FILE
        ssh_args = ["-o", "ConnectTimeout=%d" % int(C.DEFAULT_TIMEOUT or 20)]
        setup["common_args"] = str(var("ansible_ssh_common_args") or "")
        for name in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
            ssh_args += shlex.split(str(var(name) or ""))
        setup["target"] = Target(user=str(user) if user else None, private_key_file=os.path.expanduser(key_file)
                                 if key_file else None, ssh_args=ssh_args)
        setup["python"] = str(var("ansible_python_interpreter", "trainer_interpreter") or "/usr/bin/python3")
        if not isinstance(probe, dict):
            setup["problem"] = "probe_failed: no probe arguments were given for it"
            return setup
        try:
            setup["probe"] = program_for("preflight_probe", dict(probe, fail_on="never"))
            setup["identity"] = program_for("box_identity", {"provider": provider})
        except Unsupported as exc:
            setup["problem"] = "probe_failed: the probe's arguments do not validate (%s): %s" % (exc, probe)
        return setup

    @staticmethod
    def run_on(setup, address, port, text, timeout):
        """(rc, stdout, stderr) of the host's Python reading ``text`` over one SSH execution."""
        target = setup["target"]
        target.address, target.port = address, port
        dest = ("%s@%s" % (target.user, address)) if target.user else address
        command = "/bin/sh -c %s" % shlex.quote("LC_ALL=C %s" % shlex.quote(setup["python"]))
        env = dict(os.environ, **C_LOCALE)
        try:
            proc = subprocess.run(target.ssh_argv() + [dest, command], input=text.encode("utf-8"),
                                  capture_output=True, env=env, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return None, "", "timed out after %ss" % timeout
        except OSError as exc:
            return 127, "", "ssh: %s" % exc
        return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")

    def one_box(self, box, setup, provider, key, args):
        try:
            self._one_box(box, setup, provider, key, args)
        except Exception as exc:  # pylint: disable=broad-except
            box.update(outcome=box["outcome"] or "not given back",
                       error="%s: %s" % (type(exc).__name__, " ".join(str(exc).split())[:400]))

    def _one_box(self, box, setup, provider, key, args):
        pid, interval = box["id"], max(0.05, float(args["poll_interval"]))
        self._timeout = args["timeout"]
        life = Lifecycle(provider, make_client(provider, key, args["api_url"], retry_budget=args["retry_budget"]),
                         v2_client=make_v2_client(key, args["api_url"], retry_budget=args["retry_budget"])
                         if provider == "runpod" else None)
        deadline = box["created_at"] + args["timeout"]
        host = None
        while True:  # 1. until the provider says it runs, with an SSH address
            current, raw = life.read(pid)
            box["polls"] += 1
            host = HOST_OF[provider](life.record) if isinstance(life.record, dict) else None
            if current == "running" and host and host["address"]:
                break
            if current in STUCK or current == "absent" or time.time() + interval > deadline:
                box.update(verdict="FAIL", finding="probe_failed: it never ran with an SSH address: the provider "
                           "reports %s (%s) %.0f s after the create" % (current, raw, time.time() - box["created_at"]))
                return self.give_back(box, life, current, None, None, provider)
            time.sleep(interval)
        box["running_at"] = time.time()
        box["machine_id"] = machine_id(provider, life.record) or box["machine_id"]
        hostvars = dict(host["hostvars"], provider_api_url=args["api_url"] or PROVIDERS[provider]["url"],
                        ansible_host=host["address"], ansible_port=host["port"])
        box["hostvars"] = hostvars
        box["price_per_hour"] = hostvars.get("price_per_hour", box["price_per_hour"])
        address, port = host["address"], host["port"]
        # 2. until SSH answers
        if not ssh_answers(address, port, box["running_at"] + args["ssh_timeout"]):
            box.update(verdict="FAIL", finding="probe_failed: its SSH port %s:%s did not answer within %d s"
                       % (address, port, args["ssh_timeout"]))
            return self.give_back(box, life, current, None, (address, port), provider)
        box["answered_at"] = time.time()
        if setup["first_contact"]:
            # a new box's key, taken on first contact into a file of its own (after the box's own SSH arguments,
            # which win); the rent's known_hosts gets it only if the box is kept
            setup["target"].ssh_args = setup["target"].ssh_args + [
                "-o", "UserKnownHostsFile=%s" % setup["first_contact"], "-o", "StrictHostKeyChecking=accept-new",
                "-o", "HashKnownHosts=no"]
        if setup["problem"]:
            box.update(verdict="FAIL", finding=setup["problem"])
            return self.give_back(box, life, current, None, (address, port), provider)
        # 3. the probe, and at the same time the box's own id (two SSH executions, one wait)
        identity = {}

        def read_identity():
            identity.update(module_result(*self.run_on(dict(setup, target=Target(
                user=setup["target"].user, private_key_file=setup["target"].private_key_file,
                ssh_args=setup["target"].ssh_args)), address, port, setup["identity"], args["ssh_timeout"])))
        reader = threading.Thread(target=read_identity, daemon=True)
        reader.start()
        box["probe_started_at"] = started = time.time()
        probe = module_result(*self.run_on(setup, address, port, setup["probe"], args["ssh_timeout"]))
        box["probed_at"] = time.time()
        box["probe_seconds"] = round(box["probed_at"] - started, 2)
        seconds = probe.get("seconds")
        box["probe_seconds_box"] = seconds.get("total") if isinstance(seconds, dict) else None
        box["verdict"], box["finding"] = judge(probe)
        if box["verdict"] == UNPROBED:
            # the controller's own login failed: nothing is known of the box, which this controller cannot use as
            # configured and which bills; it is given back like an unfit one (the rent records no bad machine)
            box["ssh_command"] = ssh_command(setup["target"], address, port)
        elif box["verdict"] != "FAIL":
            box.update(outcome="kept", seconds_billed=round(time.time() - box["created_at"], 1))
            if setup["first_contact"]:
                reader.join(args["ssh_timeout"] + 5)
                box["host_keys_recorded"] = record_host_key(args["known_hosts"], setup["first_contact"], address, port)
                # every later play checks the key recorded now (the box's own arguments first: theirs win)
                hostvars["ansible_ssh_common_args"] = " ".join(part for part in (
                    setup["common_args"], "-o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes"
                    % shlex.quote(args["known_hosts"])) if part)
            return None
        reader.join(args["ssh_timeout"] + 5)
        return self.give_back(box, life, current, identity, (address, port), provider)

    def give_back(self, box, life, current, identity, address, provider):
        """Destroy ``box`` through the API after its identity check; the billed clock stops at the answer."""
        pid = box["id"]
        ok = isinstance(identity, dict) and identity and not identity.get("failed") and identity.get("id")
        try:
            if ok:
                expected = expectation(identity, None, None, None)
                box["identity"] = {"by": "id", "expected": expected["id"], "observed": pid,
                                   "source": expected["source"], "match": expected["id"] == pid}
                check_id(provider, pid, expected, box["name"])
            elif address is not None:
                # no id of its own (Lambda), or it could not be read: the record must point at what was probed
                expected = expectation(None, None, address[0], address[1])
                observed = record_address(provider, life.record)
                box["identity"] = {"by": "address", "expected": "%s:%s" % address, "source": "the probed address",
                                   "observed": "%s:%s" % observed if observed[0] else None, "match": False}
                check_address(provider, pid, expected, observed, box["name"])
                box["identity"]["match"] = True
            request = plan(provider, "absent", current, pid, life.state)
            if request is not None:
                life.act(request)
        except ProviderAPIError as err:
            if err.kind not in ("identity_mismatch", "address_mismatch", "bad_identity", "nothing_to_verify"):
                gone, _raw = life.read(pid)
                if gone == "absent":
                    box.update(outcome="given back", destroy_at=time.time(), destroy_confirmed=True,
                               seconds_billed=round(time.time() - box["created_at"], 1))
                    return None
            box.update(outcome="not given back", error=str(err))
            return None
        box.update(outcome="given back", destroy_at=time.time())
        box["seconds_billed"] = round(box["destroy_at"] - box["created_at"], 1)
        # the clock has stopped; the record is not read again between the SSH answer and the destroy
        reached, _state, _raw = life.wait_for(pid, "absent", self._timeout, 1.0)
        box["destroy_confirmed"] = reached
        return None
