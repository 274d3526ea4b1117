"""fleet_prom: patrol rows as a Prometheus textfile, checked by a strict reader of the exposition format."""

from __future__ import annotations

import re

import pytest

from fleet_samples import finding_of, job, patrol_record, probe

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import fleet_patrol, fleet_prom


# A strict reader of the Prometheus text exposition format (version 0.0.4), enough for what patrol writes.
PROM_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
PROM_SAMPLE = re.compile(r'^(?P<name>%s)(?:\{(?P<labels>[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
                         r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")*)\})? (?P<value>-?(?:\d+(?:\.\d*)?'
                         r'(?:[eE][+-]?\d+)?|NaN|[+-]Inf))$' % PROM_NAME)


def parse_exposition(text):
    """{(name, labels text): value}; asserts the format rules node_exporter's textfile collector enforces."""
    assert text.endswith("\n") and "\r" not in text
    families, current, samples = {}, None, {}
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            kind, name = line.split(" ", 3)[1:3]
            assert re.match("^%s$" % PROM_NAME, name)
            assert kind not in families.setdefault(name, set()), "duplicate %s for %s" % (kind, name)
            families[name].add(kind)
            if kind == "TYPE":
                assert line.split(" ", 3)[3] in ("gauge", "counter", "untyped")
                assert not any(key[0] == name for key in samples), "TYPE after samples of %s" % name
            current = name
            continue
        match = PROM_SAMPLE.match(line)
        assert match, "not a valid sample line: %r" % line
        assert match.group("name") == current, "sample of %s outside its family" % match.group("name")
        key = (match.group("name"), match.group("labels"))
        assert key not in samples, "duplicate series %r" % (key,)
        samples[key] = float(match.group("value"))
    assert all(kinds == {"HELP", "TYPE"} for kinds in families.values())
    return samples


def exposition_samples():
    gone = job(name='we"ird\\name', alive=False, last_exit_code=137, items_done=2)
    rows = [fleet_patrol.patrol_row("lab-01", patrol_record(probe([job()]))),
            fleet_patrol.patrol_row("lab-02", patrol_record(probe([gone], [
                finding_of("FAIL", "job_gone_incomplete")]))),
            fleet_patrol.patrol_row("lab-05", patrol_record({"unreachable": True, "msg": "x\ny"}))]
    return parse_exposition(fleet_prom.prometheus_text(rows, 1790000000.5))


@pytest.mark.parametrize("name,labels,value", [
    ("trainer_job_alive", 'host="lab-01",job="train"', 1),
    ("trainer_job_alive", 'host="lab-02",job="we\\"ird\\\\name"', 0),
    ("trainer_job_items_done", 'host="lab-01",job="train"', 3),
    ("trainer_job_progress", 'host="lab-01",job="train",unit="epoch"', 12),
    ("trainer_job_last_exit_code", 'host="lab-02",job="we\\"ird\\\\name"', 137),
    ("trainer_disk_inodes_pct", 'host="lab-01",tier="durable"', 91),
    ("trainer_gpu_memory_used_mib", 'host="lab-01",gpu="0"', 70211),
    ("trainer_cgroup_oom_kills", 'host="lab-01"', 2),
    ("trainer_patrol_verdict", 'host="lab-02",verdict="FAIL"', 1),
    ("trainer_patrol_verdict", 'host="lab-05",verdict="UNREACHABLE"', 1),
    ("trainer_patrol_verdict", 'host="lab-05",verdict="PASS"', 0),
    ("trainer_patrol_timestamp_seconds", 'host="lab-05"', 1790000000),
])
def test_prometheus_textfile_is_valid_exposition_format(name, labels, value):
    assert exposition_samples()[(name, labels)] == value


def test_prometheus_textfile_has_no_job_series_for_an_unreachable_host():
    samples = exposition_samples()
    assert not any(key[1] and "lab-05" in key[1] and key[0].startswith("trainer_job") for key in samples)


def test_every_job_of_a_host_is_its_own_series():
    jobs = [job(name="train", alive=False, last_exit_code=0, items_done=1, items_total=1, items_too_fast=1),
            job(name="exp2", items_done=0, items_total=1, progress={"unit": "step", "value": 500})]
    samples = parse_exposition(fleet_prom.prometheus_text(
        [fleet_patrol.patrol_row("lab-01", patrol_record(probe(jobs)))], 1790000000))
    assert samples[("trainer_job_alive", 'host="lab-01",job="train"')] == 0
    assert samples[("trainer_job_alive", 'host="lab-01",job="exp2"')] == 1
    assert samples[("trainer_job_items_too_fast", 'host="lab-01",job="train"')] == 1
    assert samples[("trainer_job_items_too_fast", 'host="lab-01",job="exp2"')] == 0
    assert samples[("trainer_job_progress", 'host="lab-01",job="exp2",unit="step"')] == 500


def test_exposition_reader_rejects_bad_lines():
    for bad in ('x{a="1"} 1\n', "# TYPE x gauge\nx{a=1} 1\n", "# HELP x h\n# TYPE x gauge\nx 1\nx 2\n",
                "# HELP x h\n# TYPE x gauge\nx one\n"):
        with pytest.raises(AssertionError):
            parse_exposition(bad)


def test_values_that_are_not_numbers_are_left_out():
    odd = job(progress={"unit": "epoch", "value": "four"}, items_done="x", log_age_seconds=float("nan"))
    row = fleet_patrol.patrol_row("lab-01", patrol_record(probe([odd])))
    row.update(gpus=["GPU0", {"index": 0, "utilization_pct": "high", "memory_used_mib": 10}], oom_kills="none")
    text = fleet_prom.prometheus_text([row], 1700000000)
    assert "trainer_job_progress" not in text and "trainer_job_items_done" not in text
    assert "trainer_job_log_age_seconds" not in text and "trainer_gpu_utilization_pct" not in text
    assert 'trainer_gpu_memory_used_mib{host="lab-01",gpu="0"} 10' in text
