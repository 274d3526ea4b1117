"""Teardown never deletes, unasked, what it did not pull: two experiments on each of two boxes (AutoDL, whose power
off keeps the data disk, and RunPod, whose terminate deletes it), launched with the README's commands. Job train
writes only its best checkpoint; job exp2 also writes metrics.json and samples/ into $TRAINER_OUTPUT_DIR (and a
scratch latest.pt, which the run wrapper prunes), which launch_best_glob (best*) does not keep.

- teardown with approval lists what each box keeps that is not pulled, before the question; it powers off the AutoDL
  box (reversible: the files stay on its disk) and refuses the RunPod terminate (outputs_left_behind), naming exp2's
  item, its files and how to go on; the RunPod pod gets no DELETE;
- with -e teardown_pull_left_behind=true they are pulled and verified with the rest, and the pod is terminated,
  once; the AutoDL receipt lists what it left on its disk, the RunPod one nothing.

And a third box (RunPod) that was never launched on: nothing to pull, refused (nothing_to_pull, saying how to go on)
until -e teardown_no_results=true, then terminated once, on its own pod.
"""
from __future__ import annotations

import json
import re

import pytest

from labhelpers import fake_api, needs_root, started_fleet
from lab_teardown_support import checkpoint
from test_launch_lab import wait_finished
from test_teardown_every_job_lab import playbook, refusal_of, shown, stops

pytestmark = needs_root
KEY = "LABKEY-teardown-left-behind-never-shown"
HOSTS = ("lab-01", "lab-02")  # autodl, runpod
ITEM = {"lab-01": "000", "lab-02": "001"}
TRAIN_SH = r"""#!/usr/bin/env bash
cp "ckpt/$1.safetensors" "$TRAINER_OUTPUT_DIR/best.safetensors"
echo scratch > "$TRAINER_OUTPUT_DIR/latest.pt"
if [ "$TRAINER_JOB_NAME" = exp2 ]; then
  echo '{"loss": 0.1}' > "$TRAINER_OUTPUT_DIR/metrics.json"
  mkdir -p "$TRAINER_OUTPUT_DIR/samples" && echo png > "$TRAINER_OUTPUT_DIR/samples/0.png"
fi
"""
QUEUES = {"train": ["t0", "t1"], "exp2": ["e0", "e1"]}


@pytest.fixture(scope="module")
def fleet(lab_free, tmp_path_factory):
    with started_fleet(tmp_path_factory.mktemp("lab"), "--size", "3", "--platform", "lab-02=runpod",
                       "--platform", "lab-03=runpod") as lab:
        assert [lab.hosts[h]["lab_platform"] for h in HOSTS] == ["autodl", "runpod"]
        yield lab


def test_an_irreversible_stop_is_refused_over_outputs_teardown_does_not_pull_until_told_to_leave_them(fleet, tmp_path):
    src = tmp_path / "src"
    (src / "ckpt").mkdir(parents=True)
    (src / "train.sh").write_text(TRAIN_SH)
    for arg in QUEUES["train"] + QUEUES["exp2"]:
        (src / "ckpt" / ("%s.safetensors" % arg)).write_bytes(checkpoint(arg))
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    for host in HOSTS:
        open(fleet.hosts[host]["lab_meter_log"], "w", encoding="utf-8").close()
    launch = ["-l", ",".join(HOSTS), "-e", "launch_src=%s" % src, "-e", "launch_command='bash train.sh'"]
    for name, queue in QUEUES.items():
        proc = playbook(fleet, laptop, "launch.yml", *launch, "-e", "launch_name=%s" % name,
                        "-e", json.dumps({"launch_queue": queue}))
        assert proc.returncode == 0, shown(proc)
        for host in HOSTS:
            assert wait_finished(fleet, host, name)["exit_code"] == 0

    pod_id = fleet.ssh("lab-02", "printf %s \"$RUNPOD_POD_ID\"").stdout.strip()
    pod = dict(fake_api.runpod_pod(2, fleet.hosts["lab-02"]["ansible_host"], int(fleet.hosts["lab-02"]["ansible_port"]),
                                   name="lab-02"), id=pod_id)
    fake = fake_api.FakeAPI("runpod", KEY, [pod]).start()
    fake.on_lifecycle = fake_api.meter_log_hook({pod_id: ("lab-02", fleet.hosts["lab-02"]["lab_meter_log"])})
    teardown = ["-e", json.dumps({"runpod_pod_id": pod_id, "provider_api_url": fake.url})]
    try:
        first = playbook(fleet, laptop, "teardown.yml", "-l", ",".join(HOSTS), "-e",
                         "teardown_approve=%s" % ",".join(HOSTS), *teardown, env=dict(RUNPOD_API_KEY=KEY))
        refused_pod = stops(fake)
        second = playbook(fleet, laptop, "teardown.yml", "-l", "lab-02", "-e", "teardown_approve=lab-02",
                          "-e", "teardown_pull_left_behind=true", *teardown, env=dict(RUNPOD_API_KEY=KEY))
    finally:
        fake.stop()

    # before the question, each box's manifest line says what it keeps that is not pulled: exp2's metrics and samples,
    # never the best checkpoint, the item's log or the pruned scratch checkpoint, and nothing of job train
    flat = " ".join(first.stdout.split())
    for host in HOSTS:
        line = re.search(r"ok: \[%s\].*?- 'manifest: (.*?)' - 'pull: " % host, flat)
        assert line, (host, flat[-5000:])
        parts = line.group(1).split("; train: ", 1)  # each job's manifest, in the order of the jobs' names
        assert len(parts) == 2 and parts[0].startswith("exp2: "), (host, line.group(1))
        exp2, train = parts
        assert "left on the box" not in train, train
        assert ("; left on the box, not pulled: item %s: 2 file(s), 18 bytes under " % ITEM[host]) in exp2, exp2
        assert exp2.endswith("/outputs/exp2/%s (metrics.json, samples/0.png)" % ITEM[host]), exp2
    # AutoDL's power off keeps the disk: it goes on; RunPod's terminate would delete them: refused, nothing called
    assert first.returncode != 0, shown(first)
    message = refusal_of(first, "lab-02")
    assert message.startswith("teardown refused for lab-02: outputs_left_behind: the meter stop is irreversible and "
                              "deletes files that teardown does not pull: job exp2 item 001: 2 file(s)"), message
    assert "(metrics.json, samples/0.png)" in message and "-e teardown_leave_behind=true" in message, message
    assert "-e teardown_pull_left_behind=true" in message, message
    assert refused_pod == []
    assert [line["argv"] for line in fleet.meter("lab-01")] == [["shutdown", "-h", "now"]]
    # told to pull them too: pulled, verified, and the pod is terminated, once
    assert second.returncode == 0, shown(second)
    assert stops(fake) == [("DELETE", "/v1/pods/%s" % pod_id)]
    assert [line["argv"] for line in fleet.meter("lab-02")] == [["provider-api", "runpod", "terminate", pod_id]]
    assert KEY not in first.stdout + first.stderr + second.stdout + second.stderr
    for host in HOSTS:
        receipt = json.loads((laptop / "pulls" / host / "TEARDOWN_RECEIPT.json").read_text())
        assert [(row["job"], row["item"], row["count"], row["files"]) for row in receipt["left_behind"]] == ([
            ("exp2", ITEM[host], 2, ["metrics.json", "samples/0.png"])] if host == "lab-01" else []), receipt
        assert sorted(receipt["jobs"]) == ["exp2", "train"]
        run = laptop / "pulls" / host / "exp2"
        best = run / "data" / "durable" / ITEM[host] / "best.safetensors"
        assert best.read_bytes() == checkpoint(QUEUES["exp2"][int(ITEM[host])])
        metrics = run / "data" / "unsynced" / ITEM[host] / "metrics.json"
        assert metrics.exists() is (host == "lab-02"), sorted(str(p.relative_to(run)) for p in run.rglob("*"))
        if host == "lab-02":
            assert metrics.read_text() == '{"loss": 0.1}\n'
            verified = json.loads((run / "PULL_VERIFIED.json").read_text())
            assert {"unsynced/001/metrics.json", "unsynced/001/samples/0.png"} <= {f["path"] for f in verified["files"]}


def test_a_box_never_launched_on_is_stopped_without_a_pull_only_on_the_persons_word(fleet, tmp_path):
    host = "lab-03"
    open(fleet.hosts[host]["lab_meter_log"], "w", encoding="utf-8").close()
    pod_id = fleet.ssh(host, "printf %s \"$RUNPOD_POD_ID\"").stdout.strip()
    pod = dict(fake_api.runpod_pod(3, fleet.hosts[host]["ansible_host"], int(fleet.hosts[host]["ansible_port"]),
                                   name=host), id=pod_id)
    fake = fake_api.FakeAPI("runpod", KEY, [pod]).start()
    fake.on_lifecycle = fake_api.meter_log_hook({pod_id: (host, fleet.hosts[host]["lab_meter_log"])})
    teardown = ["-l", host, "-e", "teardown_approve=%s" % host,
                "-e", json.dumps({"runpod_pod_id": pod_id, "provider_api_url": fake.url})]
    try:
        refused = playbook(fleet, tmp_path, "teardown.yml", *teardown, env=dict(RUNPOD_API_KEY=KEY))
        refused_calls = stops(fake)
        done = playbook(fleet, tmp_path, "teardown.yml", *teardown, "-e", "teardown_no_results=true",
                        env=dict(RUNPOD_API_KEY=KEY))
    finally:
        fake.stop()
    assert refused.returncode != 0, shown(refused)
    message = refusal_of(refused, host)
    assert "nothing_to_pull: no job under /root/.trainer/jobs recorded results to pull" in message, message
    assert "-e teardown_no_results=true" in message and refused_calls == []
    assert done.returncode == 0, shown(done)
    assert stops(fake) == [("DELETE", "/v1/pods/%s" % pod_id)]
    assert [line["argv"] for line in fleet.meter(host)] == [["provider-api", "runpod", "terminate", pod_id]]
    receipt = json.loads((tmp_path / "pulls" / host / "TEARDOWN_RECEIPT.json").read_text())
    assert (receipt["acted"], receipt["jobs"], receipt["runs"], receipt["jobs_on_host"]) == (True, [], [], [])
