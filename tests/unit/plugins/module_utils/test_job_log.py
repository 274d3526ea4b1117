"""job_log: every text of a job's log that a scan returns is redacted on the box, by redact.py's patterns.

At -vvv, ansible-core's ssh connection prints the module's raw stdout before any action plugin (and so the
controller's redaction) sees it: a job that printed ``WANDB_API_KEY=...`` showed the key in patrol's and teardown's
output. The box does not know the run's secrets, so only the patterns apply there (names such as ``*_API_KEY=``,
``Authorization: Bearer``, the shapes such as ``hf_...``)."""

from __future__ import annotations

import json

from ansible_collections.remote_gpu.trainer.plugins.module_utils import job_log
from ansible_collections.remote_gpu.trainer.plugins.modules import job_status

MARK = "<redacted>"
REGEX = job_log.compile_progress(None)
# what the jobs of these tests print; none of them may come back
SECRETS = {
    "wandb": "canary-wandb-fedcba9876543210",
    "bearer": "canaryBearer0a1b2c3d4e5f",
    "hf": "hf_CANARYjobLogToken0a1b2c3d4e",
    "crash": "canaryCrashTok9f8e7d6c",
    "earlier": "canaryEarlierItem5a4b3c2d",
    "command": "hf_CANARYnotFound0a1b2c3d4e5f",
    "progress": "canaryProgress1a2b3c4d",
}
START = "==== trainer: started 2026-07-03T10:00:00Z pid 4194311 ====\n"
LOG = START + "".join(line + "\n" for line in (
    "==== trainer: item 000 started 2026-07-03T10:00:01Z: bash train.sh 000 ====",
    "Traceback (most recent call last): while logging in with WANDB_API_KEY=%s" % SECRETS["earlier"],
    "==== trainer: item 001 started 2026-07-03T10:05:00Z: bash train.sh 001 ====",
    "bash: line 1: %s: command not found" % SECRETS["command"],
    "epoch 2/3 loss 0.25",
    "RuntimeError: CUDA error: the request with token=%s failed" % SECRETS["crash"],
    "debug: WANDB_API_KEY=%s" % SECRETS["wandb"],
    "GET /api/models -H 'Authorization: Bearer %s'" % SECRETS["bearer"],
    "huggingface_hub: using %s" % SECRETS["hf"],
    "step 7 done, api_key=%s" % SECRETS["progress"],
))


def leaked(data):
    """The names of the secrets in ``data`` (any JSON value)."""
    text = json.dumps(data)
    return sorted(name for name, value in SECRETS.items() if value in text)


def test_the_tail_crash_markers_not_found_and_progress_are_redacted():
    scan = job_log.scan_log(LOG.splitlines(True), job_log.compile_progress(r"(?P<unit>step) (?P<value>\d+).*"), 20)
    assert leaked(scan) == []
    # what is not a secret stays as the job wrote it, and the secrets' lines are still there
    assert scan["tail"][2:4] == ["epoch 2/3 loss 0.25",
                                 "RuntimeError: CUDA error: the request with token=%s failed" % MARK]
    assert "debug: WANDB_API_KEY=%s" % MARK in scan["tail"]
    assert "GET /api/models -H 'Authorization: Bearer %s'" % MARK in scan["tail"]
    assert "huggingface_hub: using %s" % MARK in scan["tail"]
    assert [(m["kind"], m["line_no"]) for m in scan["crash_markers"]] == [("cuda_error", 7)]
    assert scan["crash_markers"][0]["text"] == "RuntimeError: CUDA error: the request with token=%s failed" % MARK
    assert [(c["item"], c["first"]["line_no"]) for c in scan["earlier_crashes"]] == [("000", 3)]
    assert scan["earlier_crashes"][0]["first"]["text"].endswith("WANDB_API_KEY=%s" % MARK)
    assert [(n["command"], n["line_no"]) for n in scan["not_found"]] == [(MARK, 5)]
    assert scan["not_found"][0]["text"] == "bash: line 1: %s: command not found" % MARK
    assert (scan["progress"]["value"], scan["progress"]["text"]) == (7, "step 7 done, api_key=%s" % MARK)
    assert scan["current_item"] == "001"  # ids are the wrappers', kept as they are


def test_a_log_file_scan_returns_no_secret(tmp_path):
    log = tmp_path / "job.log"
    log.write_text(LOG)
    found = job_log.scan_log_file(str(log), REGEX, tail_lines=20, seconds=10)
    assert leaked(found) == []
    assert "debug: WANDB_API_KEY=%s" % MARK in found["scan"]["tail"]


def test_a_long_line_is_cut_then_redacted_at_both_ends_and_across_the_cuts(tmp_path, monkeypatch):
    """A tail line longer than MAX_TAIL_CHARS keeps its first 1 KiB and last 3 KiB, as before; each end is redacted
    with REDACT_MARGIN characters of the part cut away, so a secret across a cut goes by its name, and the cost is
    that of a few KiB, not of the line (the patterns take about a second over a 4 MiB line)."""
    head, end = job_log.MAX_TAIL_CHARS // 4, job_log.MAX_TAIL_CHARS - job_log.MAX_TAIL_CHARS // 4
    secrets = {"first": "canaryFirst0a1b2c3d4e", "head_cut": "canaryHeadCut0a1b2c3d4e5f6a7b8",
               "tail_cut": "canaryTailCut0a1b2c3d4e5f6a7b8", "last": "canaryLast0a1b2c3d4e"}
    # a value starts 10 characters before the head's cut, and one ends 10 characters after the tail's start
    line = ("WANDB_API_KEY=%s " % secrets["first"]).ljust(head - 25, "a") + " WANDB_API_KEY=" + secrets["head_cut"]
    line += "m" * (2 << 20) + " HF_TOKEN=" + secrets["tail_cut"]
    line += " " + "z" * (end - 11 - len(" token=" + secrets["last"])) + " token=" + secrets["last"]
    sizes = []
    redact = job_log.redact.redact

    def counted(text, *args, **kwargs):
        sizes.append(len(text))
        return redact(text, *args, **kwargs)

    monkeypatch.setattr(job_log.redact, "redact", counted)
    shown = job_log.scan_log([START, "epoch 1\n", line + "\n"], REGEX, 2)["tail"]
    assert max(sizes) <= job_log.MAX_TAIL_CHARS + job_log.REDACT_MARGIN
    monkeypatch.undo()
    assert shown[0] == "epoch 1"
    text = shown[1]
    assert [name for name, value in secrets.items() if value[:10] in text or value[-10:] in text] == []
    assert text.startswith("WANDB_API_KEY=%s aaa" % MARK) and text.endswith(" token=%s" % MARK)
    assert "characters cut" in text and len(text) < job_log.MAX_TAIL_CHARS + 100
    # the same through the file scan (in its child process)
    log = tmp_path / "job.log"
    log.write_text(START + "epoch 1\n" + line + "\n")
    assert job_log.scan_log_file(str(log), REGEX, tail_lines=2, seconds=30)["scan"]["tail"] == shown


def test_short_lines_without_a_pattern_word_come_back_as_they_are():
    lines = ["epoch %d/10 loss 0.%03d lr 3e-4 it/s 5.1 \u2588\u2588\u2588\u258c" % (i, i) for i in range(30)]
    scan = job_log.scan_log([START] + [line + "\n" for line in lines], REGEX, 20)
    assert scan["tail"] == lines[-20:] and scan["progress"]["text"] == "epoch 29/10"


def make_job(run_dir, name, log, final):
    """A job directory as detached_job and the run wrapper leave it, for a job that is no longer running."""
    job_dir = run_dir / name
    (job_dir / "items").mkdir(parents=True)
    (job_dir / "job.pid").write_text("%d\n" % (2 ** 22 + 7))  # a PID that cannot exist (above pid_max)
    (job_dir / "job.starttime").write_text("1\n")
    (job_dir / "job.log").write_text(log)
    (job_dir / "status.json").write_text(json.dumps(final))
    return job_dir


def test_job_status_returns_no_secret_a_job_printed(module_runner, tmp_path):
    """The module's whole result (jobs, their tail, crash markers, findings' messages), as the box prints it."""
    run_dir = tmp_path / "jobs"
    make_job(run_dir, "train", LOG, {"item": "001", "exit_code": 127, "started": "a", "finished": "b"})
    failed, result = module_runner(job_status, {"run_dir": str(run_dir), "fail_on": "never", "tail_lines": 20})
    assert not failed, result
    assert leaked(result) == []
    job = result["jobs"][0]
    assert "debug: WANDB_API_KEY=%s" % MARK in job["tail"]
    messages = dict((f["code"], f["message"]) for f in result["findings"])
    assert "token=%s" % MARK in messages["job_crashed"]
    assert "WANDB_API_KEY=%s" % MARK in messages["item_crashed"]
    assert MARK in messages["command_not_found"]
