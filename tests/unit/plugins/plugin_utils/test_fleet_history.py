"""fleet_history: the compact record of a row, safe file names, append and bounded read, a torn last line, symlinks,
compaction within a few tens of MB for a year, and the sampled read of the dashboard."""

from __future__ import annotations

import json
import os

import pytest

from fleet_samples import finding_of, job, patrol_record, probe

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import fleet_history, fleet_patrol, fleet_preflight

NOW = 1796000000


def patrol_row(host="lab-01", findings=(), **job_kw):
    return fleet_patrol.patrol_row(host, patrol_record(probe([job(**job_kw)], list(findings))))


def test_record_of_a_patrol_row_is_compact_and_complete():
    row = patrol_row(findings=[finding_of("FAIL", "job_crashed", "RuntimeError: <b>boom</b>")])
    record = fleet_history.history_record(row, "patrol", NOW + 0.7, price=2.4, currency="EUR")
    assert record == {"t": NOW, "v": 1, "kind": "patrol", "host": "lab-01", "platform": "autodl", "verdict": "FAIL",
                      "top": "job_crashed", "msg": "RuntimeError: <b>boom</b>", "action": "act",
                      "data_b": 3, "data_i": 1, "dur_b": 40, "dur_i": 91,
                      "by_job": {"train": {"st": "ALIVE", "done": 3, "total": 7, "log_age": 20, "prog": 12,
                                           "prog_total": 20, "unit": "epoch"}},
                      "gpu_util": 97, "gpu_mem": 86.1, "gpu_count": 1, "price": 2.4, "cur": "EUR"}
    assert len(json.dumps(record, separators=(",", ":"))) < 400


def test_every_job_of_the_host_is_recorded_by_name_and_a_box_without_jobs_as_none():
    jobs = [job(name="train", alive=False, last_exit_code=0, items_done=1, items_total=1, items_too_fast=1,
                progress={"unit": "epoch", "value": 2, "total": 2}),
            job(name="exp2", items_done=0, items_total=1, progress={"unit": "step", "value": 500})]
    row = fleet_patrol.patrol_row("lab-01", patrol_record(probe(jobs)))
    record = fleet_history.history_record(row, "patrol", NOW)
    assert record["by_job"] == {
        "train": {"st": "DONE", "done": 1, "total": 1, "fast": 1, "log_age": 20, "prog": 2, "prog_total": 2,
                  "unit": "epoch"},
        "exp2": {"st": "ALIVE", "done": 0, "total": 1, "log_age": 20, "prog": 500, "unit": "step"}}
    assert "prog" not in record and "done" not in record  # no host-level progress that would mix the two
    no_jobs = dict(probe([], [dict(finding_of("INFO", "no_jobs", "No job under /root/.trainer/jobs"), job=None)]))
    record = fleet_history.history_record(fleet_patrol.patrol_row("lab-02", patrol_record(no_jobs)), "patrol", NOW)
    assert record["by_job"] == {} and record["verdict"] == "PASS"
    down = fleet_patrol.patrol_row("lab-03", patrol_record({"unreachable": True, "msg": "ssh: connect"}))
    assert "by_job" not in fleet_history.history_record(down, "patrol", NOW)  # unknown, not "no jobs"
    # compaction keeps what each job's chart draws
    old = dict(record, t=NOW - 30 * 86400, by_job={"a": {"st": "ALIVE", "done": 1, "log_age": 3, "prog": 4}})
    (slim,) = fleet_history.compact([old], NOW)
    assert slim["by_job"] == {"a": {"done": 1, "prog": 4}}


def test_record_of_idle_billing_and_of_preflight_and_no_answer_rows():
    idle = dict(finding_of("WARN", "idle_billing", "the queue finished 2.0 h ago"), hours_idle=2.0, cost=4.8)
    record = fleet_history.history_record(patrol_row(findings=[idle], alive=False, last_exit_code=0, items_done=7),
                                          "patrol", NOW)
    assert (record["top"], record["idle_h"], record["idle_cost"]) == ("idle_billing", 2.0, 4.8)
    assert "price" not in record  # no price: the box does not bill, or its price is unknown
    row = fleet_preflight.preflight_row("lab-02", {"platform": "runpod", "data_dir": "/workspace", "storage": {
        "unreachable": True, "msg": "ssh: connect"}})
    record = fleet_history.history_record(row, "preflight", NOW)
    assert record["verdict"] == "UNREACHABLE" and record["top"] == "unreachable" and record["msg"] == "ssh: connect"
    record = fleet_history.history_record(fleet_preflight.preflight_row("lab-03", {}), "preflight", NOW)
    assert record["verdict"] == "NO_RESULT" and "top" not in record and record["msg"].startswith("no result: ")


@pytest.mark.parametrize("host, name", [
    ("lab-01", "lab-01.jsonl"),
    ("gpu.example.org", "gpu.example.org.jsonl"),
])
def test_file_name_keeps_safe_names(host, name):
    assert fleet_history.file_name(host) == name


def test_file_name_replaces_unsafe_characters_and_keeps_hosts_apart():
    names = [fleet_history.file_name(h) for h in ("a b", "a_b", "a:b", "..", ".hidden", "<img src=x>", "é" * 300)]
    assert len(set(names)) == len(names)
    assert names[1] == "a_b.jsonl" and names[0].startswith("a_b-") and names[0].endswith(".jsonl")
    for name in names:
        assert not name.startswith(".") and "/" not in name and len(name) < 100
        assert set(name) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


@pytest.mark.parametrize("host", ["../../etc/passwd", "a/b", "a\\b", "a\0b", "", "  ", None, 5])
def test_file_name_refuses_separators_and_non_names(host):
    with pytest.raises(fleet_history.HistoryError):
        fleet_history.file_name(host)


def test_append_and_read_back(tmp_path):
    for i in range(3):
        fleet_history.append_record(str(tmp_path), {"t": NOW + i, "host": "lab-01", "verdict": "PASS"})
    records, warnings, _size = fleet_history.read_history(str(tmp_path), "lab-01.jsonl")
    assert [r["t"] for r in records] == [NOW, NOW + 1, NOW + 2] and warnings == []
    assert fleet_history.history_files(str(tmp_path)) == ["lab-01.jsonl"]  # the lock file is not a history


def test_torn_last_line_is_skipped_with_a_warning_and_the_next_record_stays_readable(tmp_path):
    fleet_history.append_record(str(tmp_path), {"t": NOW, "host": "lab-01", "verdict": "PASS"})
    with open(tmp_path / "lab-01.jsonl", "a") as handle:
        handle.write('{"t":%d,"host":"lab-01","verd' % (NOW + 1))  # a tick killed mid-write
    records, warnings, _size = fleet_history.read_history(str(tmp_path), "lab-01.jsonl")
    assert [r["t"] for r in records] == [NOW]
    assert warnings == ["lab-01.jsonl: line 2 is torn (a run killed mid-write?), skipped"]
    fleet_history.append_record(str(tmp_path), {"t": NOW + 2, "host": "lab-01", "verdict": "WARN"})
    records, warnings, _size = fleet_history.read_history(str(tmp_path), "lab-01.jsonl")
    assert [r["t"] for r in records] == [NOW, NOW + 2] and "line 2 is not a history record" in warnings[0]
    # the dashboard's read rewrites the file without the bad line, and says so once
    fleet, warnings = fleet_history.load_fleet(str(tmp_path), NOW + 3, window=86400, points=10, recent=3600)
    assert [r["t"] for r in fleet["lab-01"]] == [NOW, NOW + 2] and len(warnings) == 1
    assert fleet_history.load_fleet(str(tmp_path), NOW + 3, window=86400, points=10, recent=3600)[1] == []


@pytest.mark.parametrize("garbage", [b"\xff\xfe not utf-8\n", b"[1, 2]\n", b'{"t": "yesterday"}\n', b"x" * 70000])
def test_foreign_lines_are_warnings_never_a_traceback(tmp_path, garbage):
    (tmp_path / "lab-01.jsonl").write_bytes(b'{"t":%d,"host":"lab-01"}\n' % NOW + garbage + b"\n")
    records, warnings, _size = fleet_history.read_history(str(tmp_path), "lab-01.jsonl")
    assert [r["t"] for r in records] == [NOW] and len(warnings) == 1 and "line 2" in warnings[0]


def test_a_symlink_in_the_history_directory_is_never_followed(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    history = tmp_path / "history"
    history.mkdir()
    os.symlink(str(outside), str(history / "lab-01.jsonl"))
    with pytest.raises(fleet_history.HistoryError, match="symlink"):
        fleet_history.append_record(str(history), {"t": NOW, "host": "lab-01"})
    assert outside.read_text() == "precious\n"
    assert fleet_history.history_files(str(history)) == []
    records, warnings, _size = fleet_history.read_history(str(history), "lab-01.jsonl")
    assert records == [] and "symlink" in warnings[0]
    with pytest.raises(fleet_history.HistoryError):
        fleet_history.rewrite_history(str(history), "lab-01.jsonl", [{"t": NOW}])
    assert outside.read_text() == "precious\n"


def test_read_is_bounded_to_the_last_bytes(tmp_path):
    for i in range(100):
        fleet_history.append_record(str(tmp_path), {"t": NOW + i, "host": "lab-01"})
    records, warnings, _size = fleet_history.read_history(str(tmp_path), "lab-01.jsonl", max_bytes=300)
    assert 5 < len(records) < 15 and records[-1]["t"] == NOW + 99 and "larger than 300 bytes" in warnings[0]


def tick_records(days, tick=300, end=NOW, host="lab-01"):
    count = int(days * 86400 // tick)
    row = patrol_row(host=host, findings=[finding_of("WARN", "log_stale", "train's log has been silent for 31 min")])
    base = fleet_history.history_record(row, "patrol", end, price=2.4, currency="EUR")
    return [dict(base, t=end - (count - i) * tick) for i in range(count)]


def test_a_year_of_five_minute_ticks_over_20_hosts_compacts_to_a_few_tens_of_mb():
    records = tick_records(365)
    compacted = fleet_history.compact(records, NOW)
    size = sum(len(json.dumps(r, separators=(",", ":"))) + 1 for r in compacted)
    assert size * 20 < 30e6, size * 20
    full = [r for r in compacted if "b" not in r]
    assert len(full) == 7 * 288 and full == records[-7 * 288:]  # the last week, every tick, words included
    hourly = [r for r in compacted if r.get("b") == 3600]
    daily = [r for r in compacted if r.get("b") == 86400]
    assert 83 * 24 <= len(hourly) <= 83 * 24 + 2 and 274 <= len(daily) <= 276
    assert all("msg" not in r and r["n"] >= 1 for r in hourly + daily)
    assert sum(r.get("n", 1) for r in compacted) == len(records)
    # compaction is stable: compacting again changes nothing
    assert fleet_history.compact(compacted, NOW) == compacted
    # beyond 730 days: dropped
    assert fleet_history.compact([{"t": NOW - 731 * 86400}], NOW) == []


def test_load_fleet_compacts_a_file_once_enough_old_ticks_pile_up(tmp_path):
    path = tmp_path / "lab-01.jsonl"
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in tick_records(10)))
    before = path.stat().st_size
    fleet, warnings = fleet_history.load_fleet(str(tmp_path), NOW, window=7 * 86400, points=144, recent=6 * 3600)
    assert warnings == [] and path.stat().st_size < before * 0.8
    records, _warnings, _size = fleet_history.read_history(str(tmp_path), "lab-01.jsonl")
    assert records == fleet["lab-01"] and len([r for r in records if r.get("b") == 3600]) in (72, 73)
    # nothing more to compact: the file is left alone
    mtime = path.stat().st_mtime_ns
    fleet_history.load_fleet(str(tmp_path), NOW + 300, window=7 * 86400, points=144, recent=6 * 3600)
    assert path.stat().st_mtime_ns == mtime


def test_rewrite_leaves_a_file_that_grew_since_it_was_read(tmp_path):
    fleet_history.append_record(str(tmp_path), {"t": NOW, "host": "lab-01"})
    size = (tmp_path / "lab-01.jsonl").stat().st_size
    fleet_history.append_record(str(tmp_path), {"t": NOW + 1, "host": "lab-01"})
    assert fleet_history.rewrite_history(str(tmp_path), "lab-01.jsonl", [], expected_size=size) is False
    assert len((tmp_path / "lab-01.jsonl").read_text().splitlines()) == 2


def test_sampled_read_parses_about_the_points_drawn_and_every_recent_line(tmp_path):
    records = tick_records(30)
    text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
    kept = fleet_history.sample_lines(text, NOW, 30 * 86400, 144, 6 * 3600)
    assert 144 + 72 - 5 <= len(kept) <= 144 + 72 + 5
    parsed, warnings = fleet_history.parse_numbered(kept, kept[-1][0])
    assert warnings == [] and parsed[-1] == records[-1]
    recent = [r for r in parsed if r["t"] >= NOW - 6 * 3600]
    assert len(recent) == 72 + 1 or len(recent) == 72
    # a record that stands for the lines left out before it carries their span
    assert parsed[1]["b"] == parsed[1]["t"] - parsed[0]["t"] > 300
    few = fleet_history.sample_lines(text[:2000], NOW, 30 * 86400, 144, 6 * 3600)
    assert len(few) == text[:2000].count("\n") + (0 if text[:2000].endswith("\n") else 1)


def test_compaction_of_hand_edited_records_is_no_traceback():
    old = [{"t": NOW - 10 * 86400 + i, "n": value, "b": value} for i, value in enumerate([[1], "x", None, 2.5, -1])]
    compacted = fleet_history.compact(old, NOW)
    assert len(compacted) == 1 and compacted[0]["b"] == 3600


def test_a_patrol_row_with_gpu_names_records_the_model_for_the_card():
    row = patrol_row()
    row["gpus"] = [dict(gpu, name="NVIDIA H100 80GB HBM3") for gpu in row["gpus"]] * 2
    record = fleet_history.history_record(row, "patrol", NOW)
    assert (record["gpus"], record["gpu_count"]) == ("2x NVIDIA H100 80GB HBM3", 2)
