from __future__ import annotations

import json

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.remote_gpu.trainer.plugins.filter.launch import FilterModule
from ansible_collections.remote_gpu.trainer.plugins.filter.queue_assign import queue_assign
from ansible_collections.remote_gpu.trainer.plugins.module_utils.job_layout import record_digest

FILTERS = FilterModule().filters()
ITEMS = [{"item": "000", "arg": "a"}, {"item": "002", "arg": "c"}]


def test_queue_table_is_the_unit_tested_assignment_table():
    table = FILTERS["queue_table"](queue_assign(["cfg/a.yaml", ""], ["lab-02", "lab-01"]))
    assert table.split("\n") == ["ITEM  HOST    ARGUMENT", "000   lab-01  cfg/a.yaml", "001   lab-02  -"]
    with pytest.raises(AnsibleFilterError, match="queue_assign"):
        FILTERS["queue_table"]([{"item": "000"}])


@pytest.mark.parametrize("kwargs, line", [
    ({}, "all 2 item(s) done, not started"),
    ({"probe": {"jobs": [{"alive": True, "pid": 42}]}}, "running (pid 42), left alone (items 000 002)"),
    ({"probe": {"jobs": [{"alive": False, "pid": None}]}, "pending": ["002"],
      "job": {"msg": "started train under tmux, pid 7"},
      "code": {"tree_sha256": "ab" * 32, "commit": None}},
     "started train under tmux, pid 7; pending items 002 (code abababababab, commit none)"),
    ({"pending": ["000"], "job": {"msg": "started"}, "code": None}, "started; pending items 000"),
    ({"pending": ["000"], "job": {"msg": "started"}, "record": "{}",
      "code": {"tree_sha256": "ef" * 32, "commit": "1a2b3c", "dirty": True, "dirty_files": ["notes.txt"]}},
     "started; pending items 000 (code efefefefefef, commit 1a2b3c with 1 uncommitted file(s))"),
    ({"pending": ["000"], "job": {"msg": "started"},
      "code": {"tree_sha256": "cd" * 32, "commit": "1a2b3c", "torch": {
          "installed": True, "version": "2.3.0+cu121", "cuda": "12.1", "build": "cuda"}}},
     "started; pending items 000 (code cdcdcdcdcdcd, commit 1a2b3c, torch 2.3.0+cu121 CUDA 12.1)"),
    ({"pending": ["000"], "job": {"msg": "started"},
      "code": {"tree_sha256": "cd" * 32, "commit": None, "torch": {
          "installed": False, "reason": "torch is not installed for /usr/bin/python3"}}},
     "started; pending items 000 (code cdcdcdcdcdcd, commit none, no torch)"),
])
def test_launch_report(kwargs, line):
    assert FILTERS["launch_report"](ITEMS, "lab-01", **kwargs) == "lab-01: " + line


def test_launch_report_in_environment_only_mode():
    line = FILTERS["launch_report"](ITEMS, "lab-01", probe={"jobs": [{"alive": False}]}, environment_only=True)
    assert line == ("lab-01: no GPU: environment-only mode: the environment is applied, the queue is not started "
                    "(items 000 002; launch_no_gpu_ok=true runs launch_command without a GPU)")
    # a job that runs (a CPU queue started with launch_no_gpu_ok) is still left alone and said so
    report = FILTERS["launch_report"](ITEMS, "lab-01", probe={"jobs": [{"alive": True, "pid": 9}]},
                                      environment_only=True)
    assert "running (pid 9)" in report


def test_launch_report_without_items():
    assert FILTERS["launch_report"]([], "lab-09", probe={"skipped": True}) == "lab-09: no items"


def test_launch_scripts_filter_returns_both_scripts_and_reports_bad_settings():
    settings = dict(name="train", host="h", command="bash t.sh", dest="/c", output_root="/o", durable_root="/d",
                    run_id="r", best=["best*"], scratch="latest*", job_dir="/j/train", python="/py", lib_dir="/lib")
    scripts = FILTERS["launch_scripts"](ITEMS, **settings)
    assert [s["kind"] for s in scripts] == ["run-item", "queue"]
    assert all(s["path"].startswith("/j/train/%s-" % s["kind"]) for s in scripts)
    assert "--scratch latest*" in scripts[0]["text"].replace("'", "")  # a single pattern is a list of one
    with pytest.raises(AnsibleFilterError, match="launch_scripts"):
        FILTERS["launch_scripts"](ITEMS, name="train")


def test_launch_scripts_filter_takes_the_threads_from_env_audits_cgroup_result():
    settings = dict(name="train", host="h", command="python t.py", dest="/c", output_root="/o", durable_root="/d",
                    run_id="r", best=["best*"], scratch=[], job_dir="/j/train", python="/py", lib_dir="/lib",
                    env_prefix="/root/miniconda3", conda_activate=True)
    limited = FILTERS["launch_scripts"](ITEMS, cpu={"recommended_threads": 12, "host_cpus": 64}, **settings)[0]
    unlimited = FILTERS["launch_scripts"](ITEMS, cpu={"recommended_threads": 64, "host_cpus": 64}, **settings)[0]
    assert "export OMP_NUM_THREADS=12" in limited["text"] and "export MKL_NUM_THREADS=12" in limited["text"]
    assert "OMP_NUM_THREADS" not in unlimited["text"]
    assert '. "$prefix/etc/profile.d/conda.sh" && conda activate base' in limited["text"]
    with pytest.raises(AnsibleFilterError, match="cpu must be the cgroup dict"):
        FILTERS["launch_scripts"](ITEMS, cpu="12", **settings)
    without_prefix = dict(settings)
    without_prefix["env_prefix"] = ""
    with pytest.raises(AnsibleFilterError, match="conda_activate needs env_prefix"):
        FILTERS["launch_scripts"](ITEMS, **without_prefix)


def test_launch_onstart_filter_resumes_the_started_wrapper():
    job = {"wrapper": "/j/train/wrapper-0123456789ab.sh", "detach": "tmux", "changed": True}
    block = FILTERS["launch_onstart"](ITEMS, job=job, name="train", job_dir="/j/train", python="/py", lib_dir="/lib")
    assert "tmux new-session -d -s trainer-train -c /j/train 'exec bash /j/train/wrapper-0123456789ab.sh'" in block
    assert "setsid -f nohup bash /j/train/wrapper-0123456789ab.sh" in block
    assert 'pending "$dir/items" 000 002' in block
    with pytest.raises(AnsibleFilterError, match="names no wrapper"):
        FILTERS["launch_onstart"](ITEMS, job={"skipped": True}, name="train", job_dir="/j", python="/py",
                                  lib_dir="/lib")


def test_the_report_of_a_running_job_names_it_when_told_its_name():
    line = FilterModule().filters()["launch_report"]([{"item": "000"}], "lab-03", probe={"jobs": [{"alive": True, "pid": 7}]}, name="resume")
    assert line == "lab-03: resume is running (pid 7): nothing pushed or changed (items 000)"


def record_of(**change):
    """launch_record's text for ITEMS: the record below, with ``change`` to its settings."""
    settings = dict(name="train", host="lab-01", run_id="r1", queue_length=3, output_root="/o", durable_root="/d")
    settings.update(change)
    return FILTERS["launch_record"](ITEMS, **settings)


RECORD = record_of()


def probe_of(alive=False, record=RECORD, source="launch", ids=("000", "002"), codes=(0, 0)):
    """A job_status result of the shape the module returns (module_utils/job_status.py's job entry): its record's
    digest is that of the queue.json the box holds, here ``record``'s."""
    return {"jobs": [{"alive": alive, "pid": None, "items_source": source, "queue_items": list(ids),
                      "queue_sha256": record_digest(json.loads(record)) if record else None,
                      "items": [{"item": item, "exit_code": code} for item, code in zip(ids, codes)]}]}


@pytest.mark.parametrize("probe, record, done", [
    (probe_of(), RECORD, True),
    # the box's record written with other whitespace and key order is the same record
    (probe_of(record=json.dumps(json.loads(RECORD), indent=4)), RECORD, True),
    (probe_of(alive=True), RECORD, False),           # a job that runs is the running case, not this one
    (probe_of(alive=None), RECORD, False),           # unknown is not "not running"
    (probe_of(), record_of(run_id="r2"), False),  # another run
    (probe_of(), record_of(min_seconds=30, min_seconds_fail=True), False),  # another setting: the record changes
    (probe_of(), record_of(queue_length=4), False),  # another queue
    (probe_of(record=None), RECORD, False),          # no record on the box
    (probe_of(), None, False),
    (probe_of(), "not json", False),
    (probe_of(source="queue_length"), RECORD, False),  # no queue record of launch's
    (probe_of(codes=(0, 1)), RECORD, False),         # an item that failed is run again
    (probe_of(codes=(0, True)), RECORD, False),      # a bool is no exit code (the queue runner's own test)
    (probe_of(codes=(0, None)), RECORD, False),
    (probe_of(ids=("000",), codes=(0,)), RECORD, False),  # 002 never ran
    ({"skipped": True}, RECORD, False),
    (None, RECORD, False),
])
def test_launch_done_only_when_the_boxs_record_is_this_one_and_every_item_is_done(probe, record, done):
    assert FILTERS["launch_done"](ITEMS, probe, record) is done
    line = FILTERS["launch_report"](ITEMS, "lab-01", probe=probe, record=record, name="train")
    assert ("nothing pushed or changed (items 000 002; a new launch_name runs the queue again)" in line) is done


def test_launch_done_report_names_the_run():
    assert FILTERS["launch_report"](ITEMS, "lab-01", probe=probe_of(), record=RECORD) == (
        "lab-01: all 2 item(s) of run r1 were done: nothing pushed or changed (items 000 002; a new launch_name "
        "runs the queue again)")
    assert FILTERS["launch_done"]([], probe_of(), RECORD) is False


def test_a_probe_given_the_record_says_what_the_record_would():
    # the launch role gives job_status the record (queue_record): its queue_done and run_id make the line, without
    # the record on the controller
    probe = probe_of()
    probe["jobs"][0].update(queue_done=True, run_id="r1")
    line = FILTERS["launch_report"](ITEMS, "lab-01", probe=probe)
    assert line == FILTERS["launch_report"](ITEMS, "lab-01", probe=probe_of(), record=RECORD)
    # a job that runs and a host without items are said as before, whatever queue_done says
    running = probe_of(alive=True)
    running["jobs"][0].update(queue_done=True, run_id="r1")
    assert FILTERS["launch_report"](ITEMS, "lab-01", probe=running, name="train").startswith("lab-01: train is running")
    assert FILTERS["launch_report"]([], "lab-01", probe=probe) == "lab-01: no items"
    # queue_done false is not done
    probe["jobs"][0]["queue_done"] = False
    line = FILTERS["launch_report"](ITEMS, "lab-01", probe=probe)
    assert "were done" not in line and line == "lab-01: all 2 item(s) done, not started"


def test_the_hosts_left_alone_are_said_from_their_probes_and_the_others_not():
    plan = [{"item": "000", "host": "lab-01", "arg": "a"}, {"item": "001", "host": "lab-02", "arg": "b"},
            {"item": "002", "host": "lab-03", "arg": "c"}, {"item": "003", "host": "lab-04", "arg": "d"}]
    hosts = ["lab-01", "lab-02", "lab-03", "lab-04", "lab-05"]
    probes = [{"jobs": [{"name": "train", "alive": True, "pid": 7}]},
              {"jobs": [{"name": "train", "alive": False, "queue_done": True, "run_id": "r1"}]},
              {"jobs": [{"name": "train", "alive": False, "queue_done": False}]},  # items left: it prepares
              {"skipped": True},  # items, no probe (a rule broken): it prepares, and stops there
              {"skipped": True}]  # no items
    assert FILTERS["launch_left_alone"](plan, hosts, probes) == [
        "lab-01: train is running (pid 7): nothing pushed or changed (items 000)",
        "lab-02: all 1 item(s) of run r1 were done: nothing pushed or changed (items 001; a new launch_name runs the "
        "queue again)",
        "lab-05: no items"]
    assert FILTERS["launch_left_alone"](plan, hosts[2:4], probes[2:4]) == []
    with pytest.raises(AnsibleFilterError, match="launch_left_alone: .*2 probes for 3 hosts"):
        FILTERS["launch_left_alone"](plan, hosts[:3], probes[:2])
    with pytest.raises(AnsibleFilterError, match="launch_left_alone: the input must be queue_assign's plan"):
        FILTERS["launch_left_alone"]([{"item": "000"}], hosts[:1], probes[:1])
