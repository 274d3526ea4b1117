#!/usr/bin/env python
"""Benchmark: the fleet dashboard (read every host's history, draw the page and its index) from 20 hosts x 30 days
of five-minute history, against reading the same JSONL with json.loads per line.

Prints the seconds of each step and the ratio (dashboard / json.loads per line). The history files are written
once to a temp dir (by fleet_history.append_record's record format, uncompacted: the worst case the charts read).
Usage: bench/fleet_dashboard.py [--hosts 20] [--days 30] [--repeat 3] [--dir PATH]
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / ".collections"))

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import fleet_history, fleet_html  # noqa: E402
from lab_common import arguments, timed  # noqa: E402

TICK = 300


def synthetic_records(host, now, days, tick=TICK):
    """A host's records every ``tick`` seconds over ``days`` days: a queue of 500 items, GPU utilisation, a data disk
    that fills, an hourly price; the words of a top finding on every record (the longest realistic line)."""
    count = int(days * 86400 // tick)
    records = []
    for i in range(count):
        t = now - (count - i) * tick
        record = {"t": t, "v": 1, "kind": "patrol", "host": host, "platform": "autodl",
                  "verdict": "PASS" if i % 97 else "WARN", "top": "log_stale" if i % 97 == 0 else None,
                  "msg": "train's log has been silent for 31 minutes while the job is alive" if i % 97 == 0 else None,
                  "action": "Look at the job: a hung DataLoader or NCCL wait" if i % 97 == 0 else None,
                  "data_b": round(20 + 60.0 * i / count, 1), "data_i": round(10 + 80.0 * i / count, 1),
                  "dur_b": 41, "dur_i": 63,
                  "by_job": {"train": {"st": "ALIVE", "done": 500 * i // count, "total": 500, "prog": i % 100,
                                       "prog_total": 100, "unit": "epoch", "log_age": 12}},
                  "gpu_util": (i * 37) % 101, "gpu_mem": 71.3, "gpu_count": 8, "price": 2.4, "cur": "EUR"}
        records.append(dict((k, v) for k, v in record.items() if v is not None))
    return records


def write_fleet(directory, hosts, days, now):
    os.makedirs(directory, exist_ok=True)
    for n in range(hosts):
        host = "gpu-%02d" % (n + 1)
        with open(os.path.join(directory, fleet_history.file_name(host)), "w") as handle:
            for record in synthetic_records(host, now, days):
                handle.write(json.dumps(record, separators=(",", ":")) + "\n")


def json_loads_per_line(directory):
    records = 0
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name)) as handle:
            for line in handle:
                json.loads(line)
                records += 1
    return records


def dashboard(directory, now):
    fleet, warnings = fleet_history.load_fleet(directory, now, compact_files=False, window=30 * 86400,
                                               points=fleet_html.SAMPLE_POINTS, recent=fleet_html.RATE_WINDOW)
    page = fleet_html.render(fleet, now, window=30 * 86400)
    fleet_html.index(fleet, now, window=30 * 86400)
    assert not warnings, warnings
    return fleet, page


def main():
    args = arguments(__doc__, hosts=20, days=30.0, repeat=3, dir=(None, "where to write the history (default: a temp dir)"))
    root = tempfile.mkdtemp(prefix="fleet-bench-", dir=args.dir)
    now = int(time.time())
    try:
        write_fleet(root, args.hosts, args.days, now)
        size = sum(os.path.getsize(os.path.join(root, name)) for name in os.listdir(root))
        baseline, ours, render_only = [], [], []
        for _run in range(args.repeat):  # interleaved, so both see the same cache state
            seconds, records = timed(lambda: json_loads_per_line(root))
            baseline.append(seconds)
            seconds, (fleet, page) = timed(lambda: dashboard(root, now))
            ours.append(seconds)
            seconds, _page = timed(lambda: fleet_html.render(fleet, now, window=30 * 86400))
            render_only.append(seconds)
        assert len(fleet) == args.hosts and all(r[-1]["t"] == now - TICK for r in fleet.values())
        drawn = page.count("<polyline")
        assert drawn == args.hosts * 5, drawn
        print("history: %d hosts x %g days = %d records, %.1f MB" % (args.hosts, args.days, records, size / 1e6))
        print("json.loads per line:       %.3f s (median of %d)" % (statistics.median(baseline), args.repeat))
        print("dashboard (read + render): %.3f s" % statistics.median(ours))
        print("  of which render only:    %.3f s, page %.0f kB" % (statistics.median(render_only), len(page) / 1e3))
        print("ratio dashboard / json.loads per line: %.2f" % (statistics.median(ours) / statistics.median(baseline)))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
