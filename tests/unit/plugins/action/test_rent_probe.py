"""The rent_probe action's verdict and its give-back: a FAIL box is destroyed only after its identity matched (its own
id, or the record's address against the probed one); a box whose identity does not match is never destroyed."""

from __future__ import annotations

import time

import pytest

from ansible_collections.remote_gpu.trainer.plugins.action import rent_probe as action
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_rent import judge
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.rsync import Target

from controller_actions import make_action


class FakeLife:
    """A Lifecycle stand-in: the record read last, the verbs acted."""

    def __init__(self, record, state="running"):
        self.record = record
        self.state = {"state": state, "raw": state, "actions": None, "message": None}
        self.acted = []

    def act(self, request):
        self.acted.append(request)
        return {"success": True}

    def read(self, _pid):
        return "absent", None

    def wait_for(self, _pid, _wanted, _timeout, _interval, before=None):
        return True, "absent", None


RECORD = {"id": 9000002, "public_ipaddr": "127.0.170.2", "actual_status": "running",
          "ports": {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": "22"}]}}


def box():
    return {"id": "9000002", "name": "sweep-a-9000002", "created_at": 1000.0, "answered_at": 1003.0,
            "outcome": None, "error": None, "identity": None}


def give_back(identity, address=("127.0.170.2", 22)):
    act = make_action(action.ActionModule, {}, name="remote_gpu.trainer.rent_probe")
    act._timeout = 5  # pylint: disable=protected-access
    life, one = FakeLife(dict(RECORD)), box()
    act.give_back(one, life, "running", identity, address, "vastai")
    return one, life


def test_a_fail_box_whose_own_id_matches_is_destroyed_and_billed_to_the_destroys_acceptance():
    one, life = give_back({"id": "9000002", "source": "session"})
    assert one["outcome"] == "given back" and one["identity"]["match"] is True
    assert [(r["name"], r["method"]) for r in life.acted] == [("destroy", "DELETE")]
    assert one["seconds_billed"] == round(one["destroy_at"] - 1000.0, 1) and one["destroy_confirmed"] is True


def test_a_box_that_says_it_is_another_instance_is_never_destroyed():
    one, life = give_back({"id": "9000007", "source": "session"})
    assert one["outcome"] == "not given back" and "refused" in one["error"] and life.acted == []


@pytest.mark.parametrize("address, outcome", [(("127.0.170.2", 22), "given back"), (("127.0.170.9", 22), "not given back")])
def test_without_an_id_of_its_own_the_record_must_point_at_the_probed_address(address, outcome):
    one, life = give_back({"failed": True, "msg": "unreachable"}, address)
    assert one["outcome"] == outcome and one["identity"]["by"] == "address"
    assert len(life.acted) == (1 if outcome == "given back" else 0)


def test_the_verdict_is_the_probes_status_and_its_first_fail_finding():
    probe = {"status": "FAIL", "inode_check": {"findings": []},
             "gpu_health": {"findings": [{"level": "WARN", "code": "x", "message": "m"},
                                         {"level": "FAIL", "code": "throttle_active", "message": "HW slowdown"}]},
             "env_audit": None}
    assert judge(probe) == ("FAIL", "throttle_active: HW slowdown")
    assert judge({"status": "PASS", "gpu_health": {"findings": []}}) == ("PASS", None)
    assert judge({"failed": True, "unreachable": True, "msg": "SSH failed"}) == ("FAIL", "probe_failed: SSH failed")
    assert judge(None)[1] == "probe_failed: the box did not answer"


# ssh's own known_hosts lines (unhashed, as the first contact writes them with HashKnownHosts=no); the keys are the
# lab's ed25519 host keys' shape, not secrets
NEW_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHn3bWq0lIqcEo2t9Ktw3R1gqNwQ8u3t4oZB4yQ8t0cN"
OLD_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBd0WbS5z9mZ0J1v6KxV7cJ2eQyqPnSx0e8YqGm4tJ2a"
OTHER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ8c4kTq2yVt7m0Q1nWc3B4pXrE6dZs9aUoL5fGh2iK7"


def test_a_kept_boxs_first_contact_key_replaces_an_older_key_for_its_address_and_keeps_the_others(tmp_path):
    rent = tmp_path / "rented" / "sweep-a.known_hosts"
    rent.parent.mkdir()
    rent.write_text("[ssh5.vast.ai]:41022 %s\nssh4.vast.ai %s\n" % (OLD_KEY, OTHER_KEY))
    first = tmp_path / "first"
    # both of the box's two first contacts (probe and identity) may write the line
    first.write_text("[ssh5.vast.ai]:41022 %s\n[ssh5.vast.ai]:41022 %s\n" % (NEW_KEY, NEW_KEY))
    assert action.record_host_key(str(rent), str(first), "ssh5.vast.ai", 41022) == 1
    lines = rent.read_text().splitlines()
    assert lines == ["ssh4.vast.ai %s" % OTHER_KEY, "[ssh5.vast.ai]:41022 %s" % NEW_KEY], lines


def test_port_22_is_named_bare_and_a_missing_rent_file_and_directory_are_made(tmp_path):
    rent = tmp_path / "new" / "dir" / "r.known_hosts"
    first = tmp_path / "first"
    first.write_text("203.0.113.7 %s\n" % NEW_KEY)
    assert action.record_host_key(str(rent), str(first), "203.0.113.7", 22) == 1
    assert rent.read_text() == "203.0.113.7 %s\n" % NEW_KEY


def test_no_key_from_the_first_contact_changes_nothing(tmp_path):
    rent = tmp_path / "r.known_hosts"
    rent.write_text("[h]:2 %s\n" % OLD_KEY)
    first = tmp_path / "first"
    first.write_text("[other]:2 %s\n" % NEW_KEY)  # another address's line is never taken for this box
    assert action.record_host_key(str(rent), str(first), "h", 2) == 0
    assert action.record_host_key(str(rent), str(tmp_path / "absent"), "h", 2) == 0
    assert rent.read_text() == "[h]:2 %s\n" % OLD_KEY


# ssh's stderr as OpenSSH 9.2p1 printed it (tests/unit/plugins/module_utils/test_provider_rent.py SSH_CAPTURES)
DENIED = ("Warning: Permanently added '127.0.170.2' (ED25519) to the list of known hosts.\n"
          "root@127.0.170.2: Permission denied (publickey).\n")
RESET = "kex_exchange_identification: read: Connection reset by peer\nConnection reset by 127.0.170.2 port 22\n"


def test_ssh_s_own_failure_says_whose_fault_it_is_without_its_noise():
    denied = action.module_result(255, "", DENIED)
    assert denied == {"failed": True, "unreachable": True, "ssh_fault": "ssh_auth_failed",
                      "msg": "SSH failed: root@127.0.170.2: Permission denied (publickey)."}
    assert action.module_result(255, "", RESET)["ssh_fault"] is None
    assert action.module_result(1, "", DENIED)["msg"] == (
        "no module result (rc 1): root@127.0.170.2: Permission denied (publickey).")
    assert action.module_result(0, '{"status": "PASS"}', DENIED) == {"status": "PASS"}


class RunningLife(FakeLife):
    """A Lifecycle stand-in for a box that runs at once: its record is read running, with its SSH address."""

    def read(self, _pid):
        return self.state["state"], self.state["raw"]


def judged(monkeypatch, stderr=DENIED, answers=True, count=2):
    """act() over ``count`` new vast.ai boxes that run and answer at once, each SSH execution (probe and identity)
    failing with ``stderr``; nothing leaves the process."""
    monkeypatch.setattr(action, "make_client", lambda *a, **k: None)
    monkeypatch.setattr(action, "make_v2_client", lambda *a, **k: None)
    lives = []

    def life(*_args, **_kwargs):
        lives.append(RunningLife(dict(RECORD)))
        return lives[-1]
    monkeypatch.setattr(action, "Lifecycle", life)
    monkeypatch.setattr(action, "ssh_answers", lambda *_a: answers)
    monkeypatch.setattr(action, "HostVariables", lambda *_a: {})
    monkeypatch.setattr(action.ActionModule, "run_on", staticmethod(lambda *_a: (255, "", stderr)))
    monkeypatch.setattr(action.ActionModule, "connection_of", lambda self, view, probe, provider: {
        "problem": None, "probe": "probe", "identity": "identity", "python": "/usr/bin/python3",
        "first_contact": None, "common_args": "",
        "target": Target(user="root", private_key_file="/home/u/.ssh/id_ed25519", ssh_args=[])})
    act = make_action(action.ActionModule, {}, name="remote_gpu.trainer.rent_probe")
    instances = [{"id": str(9000002 + i), "name": "sweep-a-%d" % (9000002 + i), "created_at": time.time(),
                  "machine_id": str(20002 + i)} for i in range(count)]
    args = {"provider": "vastai", "instances": instances, "probes": {}, "api_key": "k", "api_url": None,
            "timeout": 5, "ssh_timeout": 2, "poll_interval": 0.05, "retry_budget": 0, "known_hosts": None}
    return act.act({}, args, {"hostvars": {}}), lives


def test_a_box_the_controller_cannot_log_in_to_is_given_back_unprobed_and_the_rent_told_to_stop(monkeypatch):
    result, lives = judged(monkeypatch)
    assert [(b["verdict"], b["outcome"]) for b in result["boxes"]] == [("UNPROBED", "given back")] * 2
    assert all(b["finding"] == "ssh_auth_failed: root@127.0.170.2: Permission denied (publickey)."
               for b in result["boxes"]), result["boxes"]
    # given back after the identity check (the record points at the probed address): the money-safe choice
    assert [[(r["name"], r["method"]) for r in life.acted] for life in lives] == [[("destroy", "DELETE")]] * 2
    assert result["boxes"][0]["ssh_command"] == "ssh -i /home/u/.ssh/id_ed25519 -p 22 root@127.0.170.2 true"
    stop = result["stop_renting"]
    assert stop.startswith("ssh_auth_failed: the controller could not log in to 2 new box(es) over SSH")
    assert "Given back unprobed" in stop and "sweep-a-9000002, sweep-a-9000003" in stop
    assert "ansible_ssh_private_key_file" in stop and "no more boxes are rented" in stop
    assert "Permanently added" not in stop and not result.get("failed")


@pytest.mark.parametrize("stderr, answers, finding", [
    (RESET, True, "probe_failed: SSH failed: kex_exchange_identification: read: Connection reset by peer"),
    (DENIED, False, "probe_failed: its SSH port 127.0.170.2:22 did not answer within 2 s"),
])
def test_a_box_that_resets_or_never_answers_is_the_boxs_fault_and_the_rent_goes_on(
        monkeypatch, stderr, answers, finding):
    result, _lives = judged(monkeypatch, stderr=stderr, answers=answers, count=1)
    (one,) = result["boxes"]
    assert (one["verdict"], one["outcome"]) == ("FAIL", "given back") and one["finding"].startswith(finding), one
    assert result["stop_renting"] is None and one["ssh_command"] is None
