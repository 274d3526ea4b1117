"""Plain ``nvidia-smi``: the default table.

Every fixed string (borders, column titles) is copied from the real tables in tests/fixtures/nvidia/table/;
cell widths were measured on them. Layouts by driver, as the corpus shows them:
- 91 wide (550.54 .. 610): ``+`` border under the banner from 590, ``|`` before; the Processes box header
  changed at 570 (550/560/565 captures show only "No running processes found" with the older header, so a
  pre-570 box that lists processes uses the 570+ header and rows: README);
- 89 wide (535.161.07, and assumed for 530..549): a 22-wide Bus-Id cell;
- the 79-wide narrow layout (470, 525) is not rendered: drivers before 530 get the 89-wide one (README).
"""
from __future__ import annotations

import re

from .model import driver_tuple

BORDER = "+-----------------------------------------------------------------------------------------+"
GPU_SEP = "+-----------------------------------------+------------------------+----------------------+"
GPU_HEAD_LINUX = "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |"
GPU_HEAD_WIN = "| GPU  Name                  Driver-Model | Bus-Id          Disp.A | Volatile Uncorr. ECC |"
GPU_HEAD2 = "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |"
GPU_HEAD3 = "|                                         |                        |               MIG M. |"
GPU_HEAD_END = "|=========================================+========================+======================|"
OLD_BANNER_SEP = "|-----------------------------------------+------------------------+----------------------+"
MIG_HEAD = [
    "| MIG devices:                                                                            |",
    "+------------------+----------------------------------+-----------+-----------------------+",
    "| GPU  GI  CI  MIG |              Shared Memory-Usage |        Vol|        Shared         |",
    "|      ID  ID  Dev |                Shared BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |",
    "|                  |                                  |        ECC|                       |",
    "|==================+==================================+===========+=======================|",
]
MIG_SEP = "+------------------+----------------------------------+-----------+-----------------------+"
PROC_HEAD = [
    "| Processes:                                                                              |",
    "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
    "|        ID   ID                                                               Usage      |",
    "|=========================================================================================|",
]
NO_PROCS = "|  No running processes found                                                             |"
PROC_HEAD_PRE570 = [
    "| Processes:                                                                              |",
    "|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |",
    "|        ID   ID                                                               Usage      |",
    "|=========================================================================================|",
]
# 89-wide layout (table__1x-geforce-gtx-1050-ti__535.161.07__thamada-gls.txt)
BORDER_89 = "+---------------------------------------------------------------------------------------+"
BANNER_SEP_89 = "|-----------------------------------------+----------------------+----------------------+"
GPU_SEP_89 = "+-----------------------------------------+----------------------+----------------------+"
GPU_HEAD_89 = [
    "| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |",
    "| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |",
    "|                                         |                      |               MIG M. |",
    "|=========================================+======================+======================|",
]
PROC_HEAD_89 = [
    "| Processes:                                                                            |",
    "|  GPU   GI   CI        PID   Type   Process name                            GPU Memory |",
    "|        ID   ID                                                             Usage      |",
    "|=======================================================================================|",
]
NO_PROCS_89 = "|  No running processes found                                                           |"


def _num(v):
    m = re.match(r"^\s*(-?\d+)", v or "")
    return m.group(1) if m else None


def _mib(v):
    n = _num(v)
    return n if n is not None else "N/A"


def _banner(cap, narrow=False):
    driver = cap.driver
    if narrow:
        return "| NVIDIA-SMI %-23sDriver Version: %-13sCUDA Version: %-9s|" % (
            driver, driver, cap.header.get("CUDA Version", "N/A"))
    if "KMD Version" in cap.header:  # 610+: "KMD Version" / "CUDA UMD Version"
        mid = "KMD Version: %-14sCUDA UMD Version: %-9s" % (cap.header["KMD Version"],
                                                            cap.header.get("CUDA UMD Version", "N/A"))
    else:
        mid = "Driver Version: %-15sCUDA Version: %-9s" % (driver, cap.header.get("CUDA Version", "N/A"))
    return "| NVIDIA-SMI %-23s%s|" % (driver, mid)


def _power(g, narrow=False):
    draw = None
    for p in ("GPU Power Readings/Average Power Draw", "GPU Power Readings/Instantaneous Power Draw",
              "GPU Power Readings/Power Draw", "Power Readings/Power Draw"):
        draw = _num(g.get(p))
        if draw is not None:
            break
    cap = None
    for p in ("GPU Power Readings/Current Power Limit",
              "GPU Power Readings/GPU Ceiling Power Limit/Current Power Limit", "Power Readings/Power Limit"):
        cap = _num(g.get(p))
        if cap is not None:
            break
    draw = draw + "W" if draw else "N/A"
    cap = cap + "W" if cap else "N/A"
    return ("%16s / %4s" if narrow else "%15s / %5s") % (draw, cap)


def _gpu_rows(i, g, narrow=False):
    name = g.get("Product Name", "")
    if len(name) > 27:
        name = name[:24] + "..."
    dm = (g.get("Driver Model/Current") or "N/A").strip()
    if dm in ("WDDM", "TCC", "MCDM"):
        tail = dm + "  "
    else:
        tail = ("On" if g.get("Persistence Mode", "").strip() == "Enabled" else "Off").ljust(4)
    left = ("%4d  %s" % (i, name)).ljust(41 - len(tail)) + tail
    disp = "On" if (g.get("Display Active") or "").strip() == "Enabled" else "Off"
    mig_on = (g.get("MIG Mode/Current") or "").strip() == "Enabled"
    ecc = "On" if mig_on else _ecc_cell(g)
    row1 = ("|%s| %s %3s |%21s |" if narrow else "|%s|   %s %3s |%21s |") % (left, g.bus_id, disp, ecc)
    fan = (g.get("Fan Speed") or "N/A").replace(" ", "")
    temp = _num(g.get("Temperature/GPU Current Temp"))
    perf = (g.get("Performance State") or "N/A").strip()
    used = _mib(g.get("FB Memory Usage/Used"))
    total = _mib(g.get("FB Memory Usage/Total"))
    util = (g.get("Utilization/GPU") or g.get("Utilization/Gpu") or "N/A").replace(" ", "")
    compute = (g.get("Compute Mode") or "N/A").strip()
    row2 = ("|%4s %5s %5s %s |%7sMiB / %5sMiB |%8s %12s |" if narrow else
            "|%4s %5s %5s %s |%8sMiB / %6sMiB |%8s %12s |") % (
        fan, (temp + "C") if temp else "N/A", perf, _power(g, narrow), used, total, util, compute)
    mig = (g.get("MIG Mode/Current") or "N/A").strip()
    row3 = "|%41s|%*s|%21s |" % ("", 22 if narrow else 24, "", mig)
    return [row1, row2, row3, GPU_SEP_89 if narrow else GPU_SEP]


def _ecc_cell(g):
    if (g.get("ECC Mode/Current") or g.get("Ecc Mode/Current") or "").strip() == "Disabled":
        return "Off"
    old = g.get("ECC Errors/Volatile/Double Bit/Total")  # pre-Ampere ECC block (V100)
    if old is not None:
        return old.strip() if old.strip().isdigit() else "N/A"
    vals = []
    for label in ("SRAM Uncorrectable Parity", "SRAM Uncorrectable SEC-DED", "DRAM Uncorrectable",
                  "SRAM Uncorrectable"):
        v = g.get("ECC Errors/Volatile/" + label)
        if v is not None:
            vals.append(v.strip())
    if not vals or any(not v.isdigit() for v in vals):
        return "N/A"
    return str(sum(int(v) for v in vals))


def _mig_rows(i, g):
    rows = []
    from .xmlmap import _mig_blocks
    for blk in _mig_blocks(g):
        p = blk.paths

        def v(path):
            ln = p.get(path)
            return (ln.value or "").strip() if ln is not None else "N/A"
        sh = "Device Attributes/Shared/"
        rows.append("|%3d%5s%4s%4s  |%16sMiB / %5sMiB    |%3s%7s |%3s%4s%5s%5s%5s |" % (
            i, v("GPU Instance ID"), v("Compute Instance ID"), v("Index"),
            _mib(v("Shared FB Memory Usage/Used")), _mib(v("Shared FB Memory Usage/Total")),
            v(sh + "Multiprocessor count"), v("ECC Errors/Volatile/SRAM Uncorrectable"),
            v(sh + "Copy Engine count"), v(sh + "Encoder count"), v(sh + "Decoder count"), v(sh + "OFA count"),
            v(sh + "JPG count")))
        rows.append("|%18s|%16sMiB / %5sMiB    |%11s|%23s|" % (
            "", _mib(v("Shared BAR1 Memory/Used")), _mib(v("Shared BAR1 Memory/Total")), "", ""))
        rows.append(MIG_SEP)
    return rows


def _proc_row(i, p):
    gi, ci = p.get("gi", "N/A").strip(), p.get("ci", "N/A").strip()
    head = "|%5d" % i + ("   N/A  N/A" if gi == "N/A" else "%5s%5s" % (gi, ci))
    head += p.get("pid", "").rjust(33 - len(head))
    name = p.get("name", "")
    if len(name) > 32:
        name = "..." + name[-29:]
    used = _num(p.get("used"))
    mem = ("%6sMiB" % used).rjust(9) if used is not None and "MiB" in p.get("used", "") else " N/A     "
    return "%s%7s   %s%s |" % (head, p.get("type", "C"), name.ljust(37), mem)


def render_table(cap, procs):
    win = any((g.get("Driver Model/Current") or "").strip() in ("WDDM", "TCC", "MCDM") for g in cap.gpus)
    ver = driver_tuple(cap.driver)
    narrow = ver < (550,)
    out = [" ".join(cap.header.get("Timestamp", "").split(" ")) + "       "]
    if narrow:
        out += [BORDER_89, _banner(cap, True), BANNER_SEP_89] + GPU_HEAD_89
    else:
        out += [BORDER, _banner(cap), GPU_SEP if ver >= (590,) else OLD_BANNER_SEP,
                GPU_HEAD_WIN if win else GPU_HEAD_LINUX, GPU_HEAD2, GPU_HEAD3, GPU_HEAD_END]
    for i, g in enumerate(cap.gpus):
        out.extend(_gpu_rows(i, g, narrow))
    mig = []
    for i, g in enumerate(cap.gpus):
        mig.extend(_mig_rows(i, g))
    if mig:
        out += ["", BORDER] + MIG_HEAD + mig
    rows = [_proc_row(i, p) for i in sorted(procs) for p in procs[i]]
    if narrow and not rows:
        out += ["", BORDER_89] + PROC_HEAD_89 + [NO_PROCS_89, BORDER_89]
    else:
        head = PROC_HEAD_PRE570 if ver < (570,) and not rows else PROC_HEAD
        out += ["", BORDER] + head + (rows or [NO_PROCS]) + [BORDER]
    return "\n".join(out) + "\n"
