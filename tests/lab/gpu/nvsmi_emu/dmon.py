"""``nvidia-smi dmon``: the 590+ default column set, one identical sample per line from the -q state.

Layout copied from tests/fixtures/nvidia/dmon/dmon-c5__*.txt (590.48.01 .. 610.62): two ``#`` header lines,
a 5-wide gpu column, 7-wide value columns, a trailing space, ``-`` for a value the GPU does not report. The
corpus has no dmon capture for drivers 470-580, so every driver gets this layout (README).
"""
from __future__ import annotations

import re
import sys
import time

# -s letter -> columns: (header 1, header 2, -q path or callable)
GROUPS = {
    "p": [("pwr", "W", "power"), ("gtemp", "C", "Temperature/GPU Current Temp"),
          ("mtemp", "C", "Temperature/Memory Current Temp")],
    "u": [("sm", "%", "Utilization/GPU"), ("mem", "%", "Utilization/Memory"), ("enc", "%", "Utilization/Encoder"),
          ("dec", "%", "Utilization/Decoder"), ("jpg", "%", "Utilization/JPEG"), ("ofa", "%", "Utilization/OFA")],
    "c": [("mclk", "MHz", "Clocks/Memory"), ("pclk", "MHz", "Clocks/Graphics")],
}
DEFAULT = "puc"


class DmonError(Exception):
    pass


def _int(v):
    m = re.match(r"^\s*(\d+)", v or "")
    return m.group(1) if m else "-"


def _value(g, path):
    if path == "power":
        for p in ("GPU Power Readings/Average Power Draw", "GPU Power Readings/Instantaneous Power Draw",
                  "GPU Power Readings/Power Draw", "Power Readings/Power Draw"):
            v = _int(g.get(p))
            if v != "-":
                return v
        return "-"
    if path.startswith("Utilization/") and (g.get("MIG Mode/Current") or "").strip() == "Enabled":
        return "-"  # MIG: per-GPU utilisation is not reported (dmon-c5__nvidia-h100-mig__*)
    if path == "Utilization/GPU":
        return _int(g.get(path) or g.get("Utilization/Gpu"))
    return _int(g.get(path))


def columns(select):
    sel = select or DEFAULT
    bad = [c for c in sel if c not in GROUPS]
    if bad:
        raise DmonError(sel)
    return [col for letter in DEFAULT if letter in sel for col in GROUPS[letter]]


def sample(cap, sel, cols):
    rows = []
    for i, g in enumerate(cap.gpus):
        if sel is not None and i not in sel:
            continue
        rows.append("%5d " % i + "".join("%7s" % _value(g, c[2]) for c in cols)[1:] + " \n")
    return "".join(rows)


def render_dmon(cap, sel, count, select, delay=None):
    try:
        cols = columns(select)
    except DmonError:
        from .cli import Exit, UNKNOWN_FLAG
        raise Exit(2, "", UNKNOWN_FLAG % ("-s " + str(select)))
    head = "# gpu " + "".join("%7s" % c[0] for c in cols)[1:] + " \n" + \
           "# Idx " + "".join("%7s" % c[1] for c in cols)[1:] + " \n"
    body = sample(cap, sel, cols)
    if count is not None:
        try:
            n = int(count)
        except ValueError:
            from .cli import Exit, UNKNOWN_FLAG
            raise Exit(2, "", UNKNOWN_FLAG % ("-c " + str(count)))
        return head + body * n
    # no -c: like the real tool, sample until killed (one line per GPU per interval)
    sys.stdout.write(head)
    while True:
        sys.stdout.write(body)
        sys.stdout.flush()
        time.sleep(float(delay or 1))
