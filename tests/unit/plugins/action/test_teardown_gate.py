"""The teardown gate's run(): open only with a verified pull for this host and run, the box's manifest sha and an
approval by name; every refusal has its code; check mode reports without failing."""

from __future__ import annotations

import json
import os

import pytest

from ansible.errors import AnsibleActionFail

from ansible_collections.remote_gpu.trainer.plugins.action.teardown_gate import ActionModule
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import teardown

from controller_actions import run_action

HOST, RUN, SHA = "box1", "exp42", "a" * 64
STOP = ["shutdown", "-h", "now"]


@pytest.fixture
def pulls(tmp_path):
    return tmp_path / "pulls"


def write_verified(pulls, host=HOST, run_id=RUN, sha=SHA, problems=(), where=None):
    """A PULL_VERIFIED.json as pull_verify writes it, in the pull directory of ``where`` (host, run)."""
    directory = pulls.joinpath(*(where or (HOST, RUN)))
    directory.mkdir(parents=True, exist_ok=True)
    record = {"host": host, "run_id": run_id, "manifest_sha256": sha, "total_bytes": 1,
              "files": [{"path": "best.pt", "bytes": 1, "sha256": "b" * 64}],
              "problems": list(problems)}
    (directory / teardown.VERIFIED_NAME).write_text(json.dumps(record))
    return directory


def gate(pulls, check_mode=False, **overrides):
    args = {"run_id": RUN, "pull_root": str(pulls), "manifest_sha256": SHA, "approve": HOST, "command": STOP}
    args.update(overrides)
    return run_action(ActionModule, args, host=HOST, check_mode=check_mode)


def codes(result):
    return [r["code"] for r in result["refusals"]]


def test_open_with_a_verified_pull_the_same_manifest_and_an_approval_by_name(pulls):
    directory = write_verified(pulls)
    result = gate(pulls, approve="box0, box1")
    assert result["open"] is True and result["refusals"] == [] and not result.get("failed")
    assert result["approved"] is True and result["changed"] is False
    assert result["pull_dir"] == str(directory)
    assert result["msg"] == "gate open for box1: pull verified for run exp42 and approved by name"


def test_an_approval_list_works_like_the_comma_separated_string(pulls):
    write_verified(pulls)
    assert gate(pulls, approve=["box1"])["open"] is True


def test_no_verified_pull_refuses(pulls):
    result = gate(pulls)
    assert result["failed"] is True and result["open"] is False
    assert codes(result) == ["no_pull_verified"]
    assert result["msg"].startswith("teardown refused for box1: no_pull_verified: no PULL_VERIFIED.json for box1")


def test_an_unreadable_verified_file_refuses_as_absent(pulls):
    directory = write_verified(pulls)
    (directory / teardown.VERIFIED_NAME).write_text("{not json")
    assert codes(gate(pulls)) == ["no_pull_verified"]


@pytest.mark.parametrize("host, run_id", [(HOST, "exp41"), ("box2", RUN)])
def test_a_verified_pull_of_another_run_or_host_refuses(pulls, host, run_id):
    write_verified(pulls, host=host, run_id=run_id)
    result = gate(pulls)
    assert result["failed"] is True and result["open"] is False
    assert codes(result) == ["pull_verified_mismatch"]


def test_the_verified_pull_of_another_run_does_not_open_this_run(pulls):
    write_verified(pulls, run_id="exp41", where=(HOST, "exp41"))
    result = gate(pulls)
    assert codes(result) == ["no_pull_verified"] and result["open"] is False


def test_a_manifest_that_changed_after_the_pull_refuses(pulls):
    write_verified(pulls)
    result = gate(pulls, manifest_sha256="b" * 64)
    assert result["failed"] is True and codes(result) == ["manifest_changed"]
    assert "bbbbbbbbbbbb" in result["refusals"][0]["message"] and "aaaaaaaaaaaa" in result["refusals"][0]["message"]


def test_an_unknown_box_manifest_refuses(pulls):
    write_verified(pulls)
    result = gate(pulls, manifest_sha256="")
    assert codes(result) == ["manifest_unknown"] and result["open"] is False


def test_a_verification_with_problems_refuses(pulls):
    write_verified(pulls, problems=[{"code": "missing", "path": "best.pt", "message": "gone"}])
    assert codes(gate(pulls)) == ["pull_not_verified"]


@pytest.mark.parametrize("approve", ["all", "yes", "box1,all", ["*"], "Y"])
def test_a_blanket_approval_refuses_even_with_the_host_named(pulls, approve):
    write_verified(pulls)
    result = gate(pulls, approve=approve)
    assert result["failed"] is True and result["open"] is False and result["approved"] is False
    assert codes(result) == ["approval_refused"]
    assert "blanket word" in result["refusals"][0]["message"]


@pytest.mark.parametrize("approve", ["box2", "", None, "box10"])
def test_a_host_not_named_refuses(pulls, approve):
    write_verified(pulls)
    args = {} if approve is None else {"approve": approve}
    result = run_action(ActionModule, dict({"run_id": RUN, "pull_root": str(pulls), "manifest_sha256": SHA,
                                            "command": STOP}, **args), host=HOST)
    assert codes(result) == ["not_approved"] and result["open"] is False and result["failed"] is True


def test_a_placeholder_left_in_the_command_refuses(pulls):
    write_verified(pulls)
    result = gate(pulls, command=["runpodctl", "stop", "pod", "$RUNPOD_POD_ID"])
    assert codes(result) == ["command_placeholder"] and result["open"] is False
    assert "$RUNPOD_POD_ID" in result["refusals"][0]["message"]


API = {"provider": "runpod", "id": "fakepod0001", "state": "absent", "key_env": "RGT_TEST_RUNPOD_KEY"}


def test_an_api_verb_with_its_key_and_id_is_the_way_and_the_command_is_not_checked(pulls, monkeypatch):
    write_verified(pulls)
    monkeypatch.setenv("RGT_TEST_RUNPOD_KEY", "secret")
    result = gate(pulls, api=API, command=["runpodctl", "remove", "pod", "$RUNPOD_POD_ID"])
    assert result["open"] is True and result["stop_with"] == "api" and result["api_problem"] is None
    assert result["api"] == {"provider": "runpod", "id": "fakepod0001", "state": "absent"}
    assert "secret" not in json.dumps(result)


@pytest.mark.parametrize("api, problem", [
    (dict(API, id=""), "the instance id is unknown"),
    (API, "the environment variable RGT_TEST_RUNPOD_KEY is not set on the controller"),
])
def test_an_unusable_api_verb_falls_back_to_the_command_and_says_why(pulls, monkeypatch, api, problem):
    write_verified(pulls)
    monkeypatch.setenv("RGT_TEST_RUNPOD_KEY", "secret" if api["id"] == "" else "")
    result = gate(pulls, api=api)
    assert result["open"] is True and result["stop_with"] == "command" and problem in result["api_problem"]
    assert result["api"] is None


def test_an_unusable_api_verb_without_a_command_refuses_naming_the_variable(pulls, monkeypatch):
    write_verified(pulls)
    monkeypatch.delenv("RGT_TEST_RUNPOD_KEY", raising=False)
    result = gate(pulls, api=dict(API, provider="lambda"), command=[])
    assert codes(result) == ["api_unusable"] and result["open"] is False and result["failed"] is True
    assert "through the lambda API only" in result["msg"] and "RGT_TEST_RUNPOD_KEY is not set" in result["msg"]


def test_a_profile_with_neither_verb_is_stopped_by_hand(pulls):
    write_verified(pulls)
    result = gate(pulls, command=[])
    assert result["open"] is True and result["stop_with"] == "manual" and result["api_problem"] is None


@pytest.mark.parametrize("run_id", ["../exp42", "a/b", ".", ".."])
def test_a_run_id_that_cannot_name_a_directory_refuses(pulls, run_id):
    result = gate(pulls, run_id=run_id)
    assert result["failed"] is True and codes(result) == ["bad_run_id"]
    assert "cannot name a directory" in result["msg"]


def test_every_refusal_is_listed_and_the_reason_is_appended_to_the_first(pulls):
    result = gate(pulls, approve="all", command=["stop", "$POD"], reason="pull failed: rsync exit 23")
    assert codes(result) == ["no_pull_verified", "approval_refused", "command_placeholder"]
    assert result["refusals"][0]["message"].endswith(" (pull failed: rsync exit 23)")
    assert not result["refusals"][1]["message"].endswith(")")


def test_check_mode_reports_a_refusal_without_failing(pulls):
    result = gate(pulls, check_mode=True)
    assert not result.get("failed") and result["open"] is False
    assert codes(result) == ["no_pull_verified"]
    assert result["msg"].startswith("check mode: teardown refused for box1: no_pull_verified")


def test_check_mode_with_an_open_gate_says_so(pulls):
    write_verified(pulls)
    result = gate(pulls, check_mode=True)
    assert result["open"] is True and not result.get("failed") and result["msg"].startswith("gate open for box1")


def test_the_gate_writes_nothing(pulls):
    directory = write_verified(pulls)
    before = sorted(os.listdir(str(directory)))
    gate(pulls)
    gate(pulls, approve="all")
    assert sorted(os.listdir(str(directory))) == before


def test_the_argument_spec_comes_from_the_documentation():
    assert ActionModule.SPEC == {
        "run_id": {"type": "str"},
        "runs": {"type": "list", "elements": "dict"},
        "pulls": {"type": "list", "elements": "dict", "default": []},
        "jobs": {"type": "list", "elements": "dict"},
        "jobs_error": {"type": "str", "default": ""},
        "run_dir": {"type": "str", "default": ""},
        "pull_root": {"type": "path", "default": "pulls"},
        "manifest_sha256": {"type": "str", "default": ""},
        "approve": {"type": "raw"},
        "command": {"type": "list", "elements": "str", "default": []},
        "api": {"type": "dict", "options": dict(
            (key, {"type": "str"}) for key in ("provider", "id", "state", "key_env"))},
        "reason": {"type": "str", "default": ""},
        "reversible": {"type": "bool", "default": False},
        "leave_behind": {"type": "bool", "default": False},
        "no_results": {"type": "bool", "default": False},
    }
    assert ActionModule._VALID_ARGS == frozenset(ActionModule.SPEC)  # pylint: disable=protected-access


@pytest.mark.parametrize("args, message", [
    ({"run_id": RUN, "approve": HOST, "aprove": HOST}, "Invalid options for remote_gpu.trainer.action: aprove"),
    ({"approve": HOST, "runs": "train"}, "runs"),
    ({"run_id": RUN, "command": {"not": "a list"}}, "command"),
])
def test_bad_arguments_are_refused_before_anything_is_read(pulls, args, message):
    write_verified(pulls)
    with pytest.raises(AnsibleActionFail, match=message):
        run_action(ActionModule, dict(args, pull_root=str(pulls)), host=HOST)


def test_a_verified_pull_with_no_files_keeps_the_gate_closed(pulls):
    directory = write_verified(pulls)
    record = json.loads((directory / teardown.VERIFIED_NAME).read_text())
    record.update(files=[], total_bytes=0)
    (directory / teardown.VERIFIED_NAME).write_text(json.dumps(record))
    result = gate(pulls)
    assert result["open"] is False and result["failed"] is True and codes(result) == ["pull_verified_empty"]
    assert "lists no files" in result["msg"]


# --- every job on the host: the gate as teardown.yml calls it --------------------------------------------------------


def run(job, run_id=None, sha=SHA, msg=""):
    """A run as pull_manifest returns it in ``runs``."""
    return {"job": job, "run_id": run_id or job, "sha256": sha, "manifest_path": "/j/%s/PULL_MANIFEST.json" % job,
            "file_count": 1, "total_bytes": 1, "items": [], "changed": False, "msg": msg}


def job(name, alive=False, pid=4242, done=1, total=3, text="epoch 11/60", current="001"):
    """A job as job_status reports it without a job name."""
    return {"name": name, "alive": alive, "pid": pid if alive else None, "items_done": done, "items_total": total,
            "current_item": current if alive else None, "progress": {"text": text} if text else None}


def every_job_gate(pull_root, runs, jobs, check_mode=False, **overrides):
    args = {"runs": runs, "jobs": jobs, "run_dir": "/root/.trainer/jobs", "pull_root": str(pull_root), "approve": HOST,
            "command": STOP}
    args.update(overrides)
    return run_action(ActionModule, args, host=HOST, check_mode=check_mode)


def test_every_jobs_run_verified_opens_the_gate_and_lists_the_runs(pulls):
    train = write_verified(pulls, run_id="train", where=(HOST, "train"))
    exp2 = write_verified(pulls, run_id="exp2run", where=(HOST, "exp2run"))
    result = every_job_gate(pulls, [run("train"), run("exp2", "exp2run")], [job("train"), job("exp2")])
    assert result["open"] is True and not result.get("failed"), result["msg"]
    assert result["host_dir"] == str(pulls / HOST) and result["pull_dir"] is None
    assert [(r["job"], r["run_id"], r["pull_dir"], r["file_count"]) for r in result["runs"]] == [
        ("train", "train", str(train), 1), ("exp2", "exp2run", str(exp2), 1)]
    assert result["msg"] == ("gate open for box1: pull verified for run train (job train), run exp2run (job exp2) "
                             "and approved by name")


def test_a_live_job_refuses_by_name_with_its_progress_although_every_pull_is_verified(pulls):
    write_verified(pulls, run_id="train", where=(HOST, "train"))
    result = every_job_gate(pulls, [run("train")], [job("train"), job("exp2", alive=True)])
    assert result["failed"] is True and result["open"] is False and codes(result) == ["job_alive"]
    assert result["msg"] == (
        "teardown refused for box1: job_alive: job exp2 under /root/.trainer/jobs is running (items 1/3 done, item "
        "001 running, progress 'epoch 11/60'): its results are not final. Wait until patrol says it is done, or stop "
        "it with remote_gpu.trainer.detached_job (state: stopped), then tear down")


def test_a_live_job_alone_refuses_without_asking_for_a_pull(pulls):
    """teardown.yml pulls nothing while a job runs: no run, yet the only refusal is the live job."""
    result = every_job_gate(pulls, [], [job("train", alive=True, pid=None, text=None)], approve="")
    assert codes(result) == ["job_alive", "not_approved"]
    assert "is starting (its tmux session exists, no PID yet)" in result["msg"] and "no progress line yet" in result["msg"]


def test_jobs_that_could_not_be_listed_refuse(pulls):
    write_verified(pulls)
    result = every_job_gate(pulls, [run("x", RUN)], [], jobs_error="python3 not found")
    assert codes(result) == ["jobs_unknown"] and "python3 not found" in result["msg"]


def test_a_job_whose_results_are_not_verified_is_named(pulls):
    write_verified(pulls, run_id="train", where=(HOST, "train"))
    pulled = [{"item": run("exp2", "exp2run"), "verified": False, "msg": "the pull of box1 run exp2run does not match"},
              {"item": run("train"), "verified": True, "msg": "pulled and verified 1 file(s), 1 bytes"}]
    result = every_job_gate(pulls, [run("train"), run("exp2", "exp2run"), run("smoke", sha="", msg="no queue.json")],
                            [job("train"), job("exp2"), job("smoke")], pulls=pulled)
    assert codes(result) == ["no_pull_verified", "manifest_unknown"]
    first, second = result["refusals"]
    assert first["message"].startswith("job exp2: no PULL_VERIFIED.json for box1 run exp2run")
    assert first["message"].endswith("(the pull of box1 run exp2run does not match)")
    assert second["message"] == "job smoke: the box's manifest of run smoke could not be written (no queue.json)"


def test_two_jobs_with_one_run_id_refuse(pulls):
    write_verified(pulls, run_id="shared", where=(HOST, "shared"))
    result = every_job_gate(pulls, [run("train", "shared"), run("exp2", "shared")], [job("train"), job("exp2")])
    assert codes(result) == ["run_id_shared"] and "jobs train, exp2 all record run id shared" in result["msg"]


@pytest.mark.parametrize("reason, code", [("", "nothing_to_pull"), ("rsync: not found", "manifest_unknown")])
def test_no_run_at_all_refuses(pulls, reason, code):
    result = every_job_gate(pulls, [], [], reason=reason)
    assert codes(result) == [code] and result["open"] is False and result["runs"] == []
    assert (reason or "no job under /root/.trainer/jobs recorded results to pull") in result["msg"]


def test_every_job_check_mode_reports_without_failing(pulls):
    result = every_job_gate(pulls, [], [job("exp2", alive=True)], check_mode=True)
    assert not result.get("failed") and result["msg"].startswith("check mode: teardown refused for box1: job_alive")


LEFT = {"dir": "/root/autodl-tmp/outputs/exp2run/001", "count": 3, "bytes": 5120, "cut": False,
        "files": ["metrics.json", "samples/0.png", "samples/1.png"]}


def test_an_irreversible_stop_over_outputs_the_pull_does_not_hold_refuses_naming_them(pulls):
    """exp2's item 001 keeps metrics.json and samples/ beside its best files: a terminate would delete them."""
    write_verified(pulls, run_id="train", where=(HOST, "train"))
    write_verified(pulls, run_id="exp2run", where=(HOST, "exp2run"))
    runs = [dict(run("train"), item_states=[{"item": "000", "state": "done", "durable": 2, "unsynced": 0}]),
            dict(run("exp2", "exp2run"), item_states=[
                {"item": "001", "state": "done", "durable": 2, "unsynced": 0, "left_behind": LEFT}])]
    jobs = [job("train"), job("exp2")]
    refused = every_job_gate(pulls, runs, jobs, reversible=False)
    assert refused["failed"] is True and codes(refused) == ["outputs_left_behind"]
    assert ("outputs_left_behind: the meter stop is irreversible and deletes files that teardown does not pull: job "
            "exp2 item 001: 3 file(s), 5.0 KiB under /root/autodl-tmp/outputs/exp2run/001 (metrics.json, "
            "samples/0.png, samples/1.png)") in refused["msg"]
    assert "-e teardown_leave_behind=true" in refused["msg"] and "job train" not in refused["msg"]
    assert refused["left_behind"] == [dict(LEFT, job="exp2", run_id="exp2run", item="001")]
    # told to leave them, or a stop that keeps the data disk: open, and they are still listed
    for opened in (every_job_gate(pulls, runs, jobs, reversible=False, leave_behind=True),
                   every_job_gate(pulls, runs, jobs, reversible=True)):
        assert opened["open"] is True and opened["left_behind"] == refused["left_behind"], opened["msg"]
    # nothing left behind: nothing to refuse
    runs[1]["item_states"][0].pop("left_behind")
    assert every_job_gate(pulls, runs, jobs, reversible=False)["open"] is True


def test_a_walk_cut_short_says_at_least():
    rows = teardown.left_behind([dict(run("exp2"), item_states=[{"item": "001", "left_behind": dict(
        LEFT, count=20000, bytes=3 << 30, files=["a"], cut=True)}])])
    assert teardown.left_behind_text(rows) == ("job exp2 item 001: at least 20000 file(s), 3.0 GiB under "
                                               "/root/autodl-tmp/outputs/exp2run/001 (a, ...)")


def test_a_box_with_no_job_opens_without_a_pull_only_on_the_persons_word(pulls):
    """A rented box never launched on: nothing to pull. Refused (the message says how to go on) until
    teardown_no_results; the word never opens a box whose jobs could not be listed, whose manifest step failed, or
    that has a job whose pull is not verified."""
    refused = every_job_gate(pulls, [], [])
    assert codes(refused) == ["nothing_to_pull"] and "-e teardown_no_results=true" in refused["msg"]
    opened = every_job_gate(pulls, [], [], no_results=True)
    assert opened["open"] is True and not opened.get("failed") and opened["runs"] == []
    assert opened["msg"] == ("gate open for box1: no job under /root/.trainer/jobs, nothing pulled (teardown_no_results: "
                             "the box holds no results) and approved by name")
    assert codes(every_job_gate(pulls, [], [], no_results=True, approve="box2")) == ["not_approved"]
    assert codes(every_job_gate(pulls, [], [], no_results=True, jobs_error="python3 not found")) == ["jobs_unknown"]
    assert codes(every_job_gate(pulls, [], [], no_results=True, reason="job train: unreadable")) == ["manifest_unknown"]
    assert codes(every_job_gate(pulls, [run("train")], [job("train")], no_results=True)) == ["no_pull_verified"]
