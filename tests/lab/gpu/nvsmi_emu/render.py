"""Views rendered from the ``-q`` model. One small function per view; all return the exact stdout text."""
from __future__ import annotations

import os
import re
import time

from . import fields as F
from .model import Line, driver_tuple

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
PROC_COL = 41  # index of " : " in -q process entries; the same in every capture (535..610) that lists processes


# ----------------------------------------------------------------------------------------------------- timestamp
def csv_timestamp(cap):
    """``YYYY/MM/DD HH:MM:SS.mmm`` from the capture's Timestamp line (milliseconds are not in -q: ``.000``)."""
    ts = cap.header.get("Timestamp", "")
    try:
        t = time.strptime(" ".join(ts.split()), "%a %b %d %H:%M:%S %Y")
        return time.strftime("%Y/%m/%d %H:%M:%S", t) + ".000"
    except ValueError:
        return time.strftime("%Y/%m/%d %H:%M:%S") + ".000"


# ----------------------------------------------------------------------------------------------------- processes
def all_processes(cap, apps, mode):
    """Per GPU index: captured processes (as printed) followed by registered runtime apps."""
    out = {}
    for i, g in enumerate(cap.gpus):
        out[i] = [dict(p) for p in g.processes()]
    for a in apps:
        if 0 <= a.gpu < len(cap.gpus):
            out[a.gpu].append({"gi": "N/A", "ci": "N/A", "pid": a.shown_pid(mode), "type": "C", "name": a.name,
                               "used": "%s MiB" % a.used_mib, "registered": True})
    return out


def _proc_lines(p):
    c = PROC_COL
    return [Line.kv(8, "GPU instance ID", p["gi"], c), Line.kv(8, "Compute instance ID", p["ci"], c),
            Line.kv(8, "Process ID", p["pid"], c), Line.kv(12, "Type", p["type"], c),
            Line.kv(12, "Name", p["name"], c), Line.kv(12, "Used GPU Memory", p["used"], c)]


def gpu_lines_with_apps(gpu, extra):
    """The GPU's -q lines with registered processes appended to its Processes section."""
    if not extra:
        return gpu.lines
    lines = list(gpu.lines)
    head = gpu.paths.get("Processes")
    new = []
    for p in extra:
        new.extend(_proc_lines(p))
    if head is None:
        return lines
    i = lines.index(head)
    if head.value is not None:  # "Processes : None" -> a section with entries
        lines[i] = Line.section(head.indent, "Processes")
        lines[i + 1:i + 1] = new
        return lines
    j = i + 1
    while j < len(lines) and (not lines[j].raw.strip() or lines[j].indent > head.indent):
        if not lines[j].raw.strip():
            break
        j += 1
    lines[j:j] = new
    return lines


# ----------------------------------------------------------------------------------------------------- -q text
def render_q(cap, procs, select=None):
    out = list(cap.head)
    for i, g in enumerate(cap.gpus):
        if select is not None and i not in select:
            continue
        extra = [p for p in procs[i] if p.get("registered")]
        out.extend(gpu_lines_with_apps(g, extra))
    text = "\n".join(ln.raw for ln in out)
    return text if text.endswith("\n") else text + "\n"


def render_q_performance(cap, select=None):
    """``-q -d PERFORMANCE``: the header, then per GPU the Performance State and the clock reason blocks."""
    out = [ln.raw for ln in cap.head]
    keep = ("Performance State", F.R, F.RO, F.RC)
    for i, g in enumerate(cap.gpus):
        if select is not None and i not in select:
            continue
        out.append(g.lines[0].raw)
        taking = False
        for ln in g.lines[1:]:
            if not ln.raw.strip():
                continue
            if ln.indent == 4:
                taking = ln.label in keep
            if taking:
                out.append(ln.raw)
        out.append("")
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------------------------------- -L
def render_list(cap):
    rows = []
    for i, g in enumerate(cap.gpus):
        rows.append("GPU %d: %s (UUID: %s)" % (i, g.get("Product Name", ""), g.get("GPU UUID", "")))
    return "".join(r + "\n" for r in rows)


# ----------------------------------------------------------------------------------------------------- help data
def _help_file(prefix, driver):
    """The real ``--help-query-*`` capture closest to ``driver`` (smallest version >= driver, else the newest)."""
    best = None
    cands = []
    for name in os.listdir(DATA):
        if name.startswith(prefix + "__"):
            ver = name.split("__")[2]
            if driver_tuple(ver):
                cands.append((driver_tuple(ver), "linux" not in name, name))
    cands.sort()
    want = driver_tuple(driver)
    for c in cands:
        if c[0] >= want:
            best = c
            break
    if best is None and cands:
        best = cands[-1]
    return os.path.join(DATA, best[2]) if best else None


def valid_names(prefix, driver):
    """{accepted name: canonical name} from the real help text (lines like '"name" or "gpu_name"')."""
    path = _help_file(prefix, driver)
    names = {}
    if not path:
        return names
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.startswith('"'):
                found = re.findall(r'"([^"]+)"', line)
                for n in found:
                    names[n] = found[0]
    return names


# ----------------------------------------------------------------------------------------------------- CSV
def parse_format(spec):
    opts = set(spec.split(",")) if spec else set()
    return "noheader" in opts, "nounits" in opts


def csv_lines(header, rows, noheader):
    out = [] if noheader else [", ".join(header)]
    out.extend(", ".join(r) for r in rows)
    return "".join(x + "\n" for x in out)


def render_query_gpu(cap, requested, noheader, nounits, select=None):
    """``requested``: list of (name as asked, canonical name)."""
    ts = csv_timestamp(cap)
    header = []
    for asked, canon in requested:
        unit = F.header_unit(canon)
        header.append("%s [%s]" % (asked, unit) if unit else asked)
    rows = []
    for i, g in enumerate(cap.gpus):
        if select is not None and i not in select:
            continue
        rows.append([F.value(canon, g, i, cap, nounits, ts) for _asked, canon in requested])
    return csv_lines(header, rows, noheader)


APP_UNITS = {"used_gpu_memory": "MiB", "used_memory": "MiB"}


def render_compute_apps(cap, procs, requested, noheader, nounits):
    ts = csv_timestamp(cap)
    header = ["%s [%s]" % (a, APP_UNITS[c]) if c in APP_UNITS else a for a, c in requested]
    rows = []
    for i, g in enumerate(cap.gpus):
        for p in procs[i]:
            if "C" not in p.get("type", ""):
                continue
            used = p.get("used", "N/A")
            if not re.match(r"^\d+ MiB$", used):
                used = "[N/A]"
            elif nounits:
                used = used.split(" ")[0]
            vals = {"timestamp": ts, "gpu_name": g.get("Product Name"), "gpu_bus_id": g.get("PCI/Bus Id"),
                    "gpu_serial": F.fmt("str", None, g.get("Serial Number"), nounits),
                    "gpu_uuid": g.get("GPU UUID"), "pid": p.get("pid"), "process_name": p.get("name"),
                    "used_gpu_memory": used}
            rows.append([vals.get(c, "[N/A]") for _a, c in requested])
    return csv_lines(header, rows, noheader)
