#!/usr/bin/env python
"""Where a command's CPU goes, by program: ``sudo python3 scripts/suite_cpu.py [--top N] [COMMAND...]``.

Runs COMMAND (default: ``make test``) under the kernel's BSD process accounting (acct(2)), which writes one record
for every process that exits, and prints the CPU seconds (user plus system) by program name and by the program that
started it. Unlike a timer, this counts the short-lived processes too: each forked ``ansible-playbook`` worker,
each module run on a lab box, each ``ssh``. ``ansible-playbook`` is split into the main processes and their forked
workers. Needs root and a kernel with process accounting (``/proc/sys/kernel/acct``).

Accounting is system-wide: run it on a machine doing nothing else. A process still alive when COMMAND ends (a
daemon it left behind) has no record and is not counted.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import os
import struct
import subprocess
import sys
import tempfile

# struct acct_v3 of <linux/acct.h>: flag, version, tty, exitcode, uid, gid, pid, ppid, btime, etime,
# utime, stime, mem, io, rw, minflt, majflt, swaps (comp_t), comm
RECORD = struct.Struct("<cBHIIIIIIf8H16s")
AHZ = 100  # the unit of ac_utime and ac_stime: 1/AHZ seconds
PLAYBOOK = "ansible-playboo"  # the kernel keeps the first 15 characters of a program's name


def comp_t(value):
    """Decode a comp_t: a 13-bit mantissa and a 3-bit base-8 exponent."""
    return (value & 0x1FFF) << (3 * (value >> 13))


def parse(data):
    """acct v3 records -> [(pid, ppid, begin time, cpu seconds, program)]; records of other versions are skipped."""
    rows = []
    for offset in range(0, len(data) - RECORD.size + 1, RECORD.size):
        fields = RECORD.unpack_from(data, offset)
        if fields[1] != 3:
            continue
        comm = fields[-1].split(b"\0", 1)[0].decode("utf-8", "replace")
        rows.append((fields[6], fields[7], fields[8], (comp_t(fields[10]) + comp_t(fields[11])) / AHZ, comm))
    return rows


def summarize(rows):
    """-> (total seconds, Counter of program, Counter of (program, parent's program), process counts of both)."""
    # the parent of a record: the last process with that pid that began no later than the child (pids are reused)
    by_pid = collections.defaultdict(list)
    for pid, _ppid, begin, _cpu, comm in rows:
        by_pid[pid].append((begin, comm))
    for starts in by_pid.values():
        starts.sort()

    def parent(ppid, begin):
        names = [comm for start, comm in by_pid.get(ppid, ()) if start <= begin]
        return names[-1] if names else "?"

    cpu, pairs, count = collections.Counter(), collections.Counter(), collections.Counter()
    for _pid, ppid, begin, seconds, comm in rows:
        up = parent(ppid, begin)
        if comm == PLAYBOOK:
            comm = "ansible-playbook (forked worker)" if up == PLAYBOOK else "ansible-playbook (main)"
        up = "ansible-playbook" if up == PLAYBOOK else up
        cpu[comm] += seconds
        pairs[(comm, up)] += seconds
        count[comm] += 1
        count[(comm, up)] += 1
    return sum(cpu.values()), cpu, pairs, count


def report(rows, top):
    total, cpu, pairs, count = summarize(rows)
    lines = ["%d processes, %.1f CPU s" % (len(rows), total), "", "by program:"]
    for comm, seconds in cpu.most_common(top):
        share = 100 * seconds / total if total else 0
        lines.append("  %8.1f s  %5.1f%%  %6d processes  %s" % (seconds, share, count[comm], comm))
    lines += ["", "by program and the program that started it:"]
    for (comm, up), seconds in pairs.most_common(top):
        lines.append("  %8.1f s  %6d processes  %s  (started by %s)" % (seconds, count[(comm, up)], comm, up))
    return "\n".join(lines)


def accounting(path):
    """Turn process accounting on into ``path`` (``None``: off); raises SystemExit with the reason."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.acct(path.encode() if path else None) != 0:
        err = ctypes.get_errno()
        raise SystemExit("suite_cpu: acct(2) failed: %s (it needs root and a kernel with BSD process accounting)"
                         % os.strerror(err))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--top", type=int, default=20, help="lines per table (default 20)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to measure (default: make test)")
    args = parser.parse_args(argv)
    command = [word for word in args.command if word != "--"] or ["make", "test"]
    with tempfile.TemporaryDirectory(prefix="suite-cpu-") as tmp:
        log = os.path.join(tmp, "acct")
        open(log, "wb").close()
        accounting(log)
        try:
            rc = subprocess.run(command, check=False).returncode
        except OSError as exc:
            rc = 127
            print("suite_cpu: cannot run %s: %s" % (command[0], exc.strerror), file=sys.stderr)
        except KeyboardInterrupt:
            rc = 130  # the report of what ran so far still follows
        finally:
            accounting(None)
        with open(log, "rb") as fh:
            print(report(parse(fh.read()), args.top))
    return rc


if __name__ == "__main__":
    sys.exit(main())
