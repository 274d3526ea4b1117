"""scripts/suite_cpu.py: acct v3 records -> CPU by program (a real capture, and records packed in the kernel's layout)."""
from __future__ import annotations

import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(REPO, "scripts"))

import suite_cpu  # noqa: E402  pylint: disable=wrong-import-position

# Real records: suite_cpu.accounting() around `sh -c "/usr/bin/python3 -c 'sum(range(3 * 10 ** 7))'; true"`, as
# root on the development machine (Linux 6.18, x86_64), nothing else running; three processes.
CAPTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "acct-v3-python-under-sh.bin")


def record(pid, ppid, begin, utime, stime, comm, version=3):
    return suite_cpu.RECORD.pack(b"\0", version, 0, 0, 0, 0, pid, ppid, begin, 0.0, utime, stime, 0, 0, 0, 0, 0, 0,
                                 comm.encode())


@pytest.mark.parametrize("raw, ticks", [(0, 0), (250, 250), (0x1FFF, 8191), ((1 << 13) | 100, 800),
                                        ((2 << 13) | 3, 192)])
def test_comp_t_is_mantissa_times_eight_to_the_exponent(raw, ticks):
    assert suite_cpu.comp_t(raw) == ticks


def test_real_capture_finds_the_busy_python_and_its_shell():
    with open(CAPTURE, "rb") as fh:
        rows = suite_cpu.parse(fh.read())
    busy = [row for row in rows if row[4] == "python3" and row[3] >= 0.1]
    assert len(busy) == 1, rows
    _total, _cpu, pairs, _count = suite_cpu.summarize(rows)
    assert pairs[("python3", "sh")] == busy[0][3]


def test_ansible_playbook_is_split_into_main_and_workers_and_pids_reused_find_the_right_parent():
    data = b"".join([
        record(100, 1, 1000, 90, 10, "ansible-playboo"),    # main: 1.0 s
        record(101, 100, 1001, 5, 1, "ansible-playboo"),    # its worker: 0.06 s
        record(102, 100, 1001, 4, 0, "ssh"),
        record(100, 1, 2000, 20, 0, "bash"),                # pid 100 reused later by bash
        record(103, 100, 2001, 30, 0, "python"),            # started by that bash, not by ansible-playbook
        record(104, 1, 2002, 7, 0, "old", version=2),       # other versions are skipped
    ])
    rows = suite_cpu.parse(data)
    assert len(rows) == 5
    total, cpu, pairs, count = suite_cpu.summarize(rows)
    assert total == pytest.approx(1.0 + 0.06 + 0.04 + 0.2 + 0.3)
    assert cpu["ansible-playbook (main)"] == pytest.approx(1.0) and count["ansible-playbook (forked worker)"] == 1
    assert pairs[("ssh", "ansible-playbook")] == pytest.approx(0.04)
    assert pairs[("python", "bash")] == pytest.approx(0.3)
    text = suite_cpu.report(rows, 3)
    assert text.startswith("5 processes, 1.6 CPU s") and "python  (started by bash)" in text


def test_a_truncated_tail_is_ignored():
    data = record(1, 0, 0, 100, 0, "x") + b"\0" * 10
    assert [row[3] for row in suite_cpu.parse(data)] == [1.0]
