"""``-q -x`` <-> ``-q`` text: one table of XML tags and the text labels they correspond to.

The table (xmlmap_gpu.spec, and xmlmap_mig.spec for the devices under ``<mig_devices>``; data files beside
this module) was written by laying real captures side by side: the v13 XML of
xml/q-x__nvidia-geforce-rtx-3090__590.44.01__telegraf.xml against the 590.48.01 ``-q`` texts, v12 XML
(535.54.03 A100, 535.86.05 RTX 4090, 525.147.05 RTX 3090) against the 535 texts. Element order is the order of
those captures. An element is emitted only when its text label exists in the model (nothing is invented);
tags with no ``-q`` counterpart (``supported_clocks``, ``power_state``, ``voltage``, ...) are therefore absent from
XML rendered from a text capture, and text labels with no known tag are absent from XML (README lists both).

Spec syntax: ``tag = Label`` (``Label`` may be a relative path ``A/B``), children indented by two spaces,
``| strip0x`` drops the ``0x`` of PCI numbers (text ``0x09`` = XML ``09``). ``New;Old@V`` names a label that
changed spelling: text -> XML accepts both; XML -> text prints ``New`` from driver V on and ``Old`` before
(``Gpu`` -> ``GPU`` is seen between 570 and 590; ``Ecc Mode`` -> ``ECC Mode`` between 470 and 535, the exact
driver of that change is not in the corpus, 535 is assumed).
"""
from __future__ import annotations

import os

from .model import Capture, Line, driver_tuple


def _spec_text(name):
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), name), encoding="utf-8") as handle:
        return handle.read()


SPEC = _spec_text("xmlmap_gpu.spec")
MIG_SPEC = _spec_text("xmlmap_mig.spec")

PROC_TAGS = [("gpu_instance_id", "gi"), ("compute_instance_id", "ci"), ("pid", "pid"), ("type", "type"),
             ("process_name", "name"), ("used_memory", "used")]


class Node:
    __slots__ = ("tag", "label", "labels", "since", "xform", "children")

    def __init__(self, tag, label, xform):
        self.tag, self.xform, self.children = tag, xform, []
        self.labels, self.since = [label], None
        if label and ";" in label:
            new, old = label.split(";", 1)
            old, _sep, since = old.partition("@")
            self.labels, self.since = [new, old], driver_tuple(since)
        self.label = self.labels[0]

    def text_label(self, driver):
        if self.since is None or driver_tuple(driver) >= self.since:
            return self.labels[0]
        return self.labels[1]


def _parse_spec(text):
    root = Node(None, None, None)
    stack = [(-1, root)]
    for raw in text.splitlines():
        if not raw.strip():
            continue
        depth = (len(raw) - len(raw.lstrip())) // 2
        body = raw.strip()
        if body.startswith("@"):
            node = Node(body, None, None)
        else:
            tag, rest = [x.strip() for x in body.split("=", 1)]
            label, _sep, xform = [x.strip() for x in rest.partition("|")]
            node = Node(tag, label, xform or None)
        while stack[-1][0] >= depth:
            stack.pop()
        stack[-1][1].children.append(node)
        stack.append((depth, node))
    return root.children


TREE = _parse_spec(SPEC)
MIG_TREE = _parse_spec(MIG_SPEC)


def dtd_version(driver):
    v = driver_tuple(driver)
    if v >= (590,):
        return "v13"
    if v >= (525,):
        return "v12"
    if v >= (470,):
        return "v11"
    return "v10"


def escape(text):
    """``xml.sax.saxutils.escape`` (``&``, ``<``, ``>``), without the ~40 ms that importing it costs each call
    (it pulls in ``urllib.request`` and ``http.client``)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _xval(node, value):
    v = value.strip()
    if node.xform == "strip0x" and v.lower().startswith("0x"):
        v = v[2:]
    return escape(v)


# ------------------------------------------------------------------------------------------------ text -> XML
def _emit(nodes, lookup, base, depth, out):
    """``lookup(path)`` returns the text Line at ``path`` (or None)."""
    tabs = "\t" * depth
    for node in nodes:
        if node.tag.startswith("@"):
            continue
        ln = None
        for label in node.labels:
            path = base + label
            ln = lookup(path)
            if ln is not None:
                break
        if ln is None:
            continue
        if node.children and ln.value is None:
            out.append("%s<%s>" % (tabs, node.tag))
            _emit(node.children, lookup, path + "/", depth + 1, out)
            out.append("%s</%s>" % (tabs, node.tag))
        else:
            out.append("%s<%s>%s</%s>" % (tabs, node.tag, _xval(node, ln.value or ""), node.tag))
        if node.tag in ("multiple_single_bit_retirement", "double_bit_retirement"):
            out[-1:] = ["%s<%s>" % (tabs, node.tag),
                        "%s\t<retired_count>%s</retired_count>" % (tabs, escape((ln.value or "").strip())),
                        "%s</%s>" % (tabs, node.tag)]


def _gpu_xml(gpu, procs, out):
    out.append('\t<gpu id="%s">' % escape(gpu.bus_id))
    for node in TREE:
        if node.tag == "@mig_devices":
            blocks = _mig_blocks(gpu)
            if blocks:
                out.append("\t\t<mig_devices>")
                for blk in blocks:
                    out.append("\t\t\t<mig_device>")
                    _emit(MIG_TREE, blk.paths.get, "", 4, out)
                    out.append("\t\t\t</mig_device>")
                out.append("\t\t</mig_devices>")
            elif gpu.has("MIG Mode"):
                out.extend(["\t\t<mig_devices>", "\t\t\tNone", "\t\t</mig_devices>"])
            continue
        if node.tag == "@processes":
            if not gpu.has("Processes"):
                continue
            out.append("\t\t<processes>")
            for p in procs:
                out.append("\t\t\t<process_info>")
                for tag, key in PROC_TAGS:
                    out.append("\t\t\t\t<%s>%s</%s>" % (tag, escape(p.get(key, "N/A")), tag))
                out.append("\t\t\t</process_info>")
            out.append("\t\t</processes>")
            continue
        if node.tag == "@accounted_processes":  # present and empty next to <processes> in every real XML capture
            if not gpu.has("Processes"):
                continue
            out.extend(["\t\t<accounted_processes>", "\t\t</accounted_processes>"])
            continue
        _emit([node], gpu.paths.get, "", 2, out)
    out.append("\t</gpu>")


class _Block:
    def __init__(self, paths):
        self.paths = paths


def _mig_blocks(gpu):
    """Each 'MIG Device' section of the text as a path index relative to the block."""
    blocks = []
    cur = None
    stack = []
    for ln in gpu.lines[1:]:
        if not ln.raw.strip():
            continue
        if ln.indent == 4:
            cur = None
            if ln.label == "MIG Device" and ln.value is None:
                cur = {}
                blocks.append(_Block(cur))
                stack = []
            continue
        if cur is None:
            continue
        while stack and stack[-1][0] >= ln.indent:
            stack.pop()
        cur.setdefault("/".join([s[1] for s in stack] + [ln.label]), ln)
        stack.append((ln.indent, ln.label))
    return blocks


def render_xml(cap, procs, select=None):
    """``-q -x``. An XML capture is served as captured (whole file); with ``-i`` it goes through the table."""
    if cap.source == "xml" and select is None:
        return _original_xml(cap, procs)
    out = ['<?xml version="1.0" ?>',
           '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_%s.dtd">' % dtd_version(cap.driver),
           "<nvidia_smi_log>"]
    for tag, label in (("timestamp", "Timestamp"), ("driver_version", "Driver Version"),
                       ("cuda_version", "CUDA Version"), ("attached_gpus", "Attached GPUs")):
        if label in cap.header:
            out.append("\t<%s>%s</%s>" % (tag, escape(cap.header[label]), tag))
    for i, g in enumerate(cap.gpus):
        if select is None or i in select:
            _gpu_xml(g, procs.get(i, []), out)
    out.append("")
    out.append("</nvidia_smi_log>")
    return "\n".join(out) + "\n"


def _original_xml(cap, procs):
    """An XML capture is served as captured; registered processes are spliced into each GPU's <processes>."""
    text = cap.xml_bytes.decode("utf-8")
    if not any(p.get("registered") for ps in procs.values() for p in ps):
        return text
    ind = "\t" if "\n\t<gpu" in text else "    "
    parts = text.split("<processes")
    out = [parts[0]]
    for i, part in enumerate(parts[1:]):
        extra = [p for p in procs.get(i, []) if p.get("registered")]
        if extra:
            blk = []
            for p in extra:
                blk.append(ind * 3 + "<process_info>")
                for tag, key in PROC_TAGS:
                    blk.append(ind * 4 + "<%s>%s</%s>" % (tag, escape(p.get(key, "N/A")), tag))
                blk.append(ind * 3 + "</process_info>")
            body = "\n".join(blk) + "\n" + ind * 2
            if part.startswith(" />") or part.startswith("/>"):
                part = ">\n" + body + "</processes>" + part.split("/>", 1)[1]
            else:
                head, rest = part.split("</processes>", 1)
                head = head.rstrip(" \t")
                part = head + ("" if head.endswith("\n") else "\n") + body + "</processes>" + rest
        out.append(part)
    return "<processes".join(out)


# ------------------------------------------------------------------------------------------------ XML -> text
def text_col(driver):
    """Column of ' : ' in -q text: 35 (440.x), 41 (470..570), 54 (590+); see PARSER_NOTES.md section 3."""
    v = driver_tuple(driver)
    if v >= (590,):
        return 54
    if v >= (470,):
        return 41
    return 35


def _elem_text(el):
    return (el.text or "").strip()


def _text_processes(g, col, out):
    from .render import PROC_COL
    procs = g.find("processes")
    if procs is None:  # old XML (v10) without a processes element: nothing to print
        return
    infos = procs.findall("process_info")
    if not infos:
        out.append(Line.kv(4, "Processes", "None", col))
        return
    out.append(Line.section(4, "Processes"))
    for pi in infos:
        v = {key: (pi.findtext(tag, "N/A") or "").strip() for tag, key in PROC_TAGS}
        out.extend([Line.kv(8, "GPU instance ID", v["gi"], PROC_COL),
                    Line.kv(8, "Compute instance ID", v["ci"], PROC_COL),
                    Line.kv(8, "Process ID", v["pid"], PROC_COL), Line.kv(12, "Type", v["type"], PROC_COL),
                    Line.kv(12, "Name", v["name"], PROC_COL), Line.kv(12, "Used GPU Memory", v["used"], PROC_COL)])


def _walk_xml(nodes, el, depth, col, out, driver=""):
    for node in nodes:
        if node.tag == "@processes" and depth == 1:
            _text_processes(el, col, out)
            continue
        if node.tag == "@mig_devices" and depth == 1:
            for md in el.findall("mig_devices/mig_device"):
                out.append(Line.section(4, "MIG Device"))
                _walk_xml(MIG_TREE, md, 2, col, out, driver)
            continue
        if node.tag.startswith("@"):
            continue
        child = el.find(node.tag)
        if child is None:
            continue
        indent = 4 * depth
        label = node.text_label(driver).split("/")[-1]
        if "/" in node.label:  # flat XML, nested text (HW Slowdown children)
            indent += 4 * node.label.count("/")
        if node.tag in ("multiple_single_bit_retirement", "double_bit_retirement"):
            out.append(Line.kv(indent, label, (child.findtext("retired_count") or "N/A").strip(), col))
        elif node.children and len(child):
            out.append(Line.section(indent, label))
            _walk_xml(node.children, child, depth + 1, col, out, driver)
        else:
            v = _elem_text(child)
            if node.xform == "strip0x" and v and v != "N/A":
                v = "0x" + v
            out.append(Line.kv(indent, label, v, col))


def xml_to_capture(data):
    import xml.etree.ElementTree as ET
    root = ET.fromstring(data)  # ElementTree never fetches the external DTD
    if root.tag != "nvidia_smi_log":
        raise ValueError("not an nvidia-smi -q -x capture")
    driver = (root.findtext("driver_version") or "").strip()
    col = text_col(driver)
    lines = [Line(""), Line("==============NVSMI LOG=============="), Line("")]
    for tag, label in (("timestamp", "Timestamp"), ("driver_version", "Driver Version"),
                       ("cuda_version", "CUDA Version")):
        if root.find(tag) is not None:
            lines.append(Line.kv(0, label, (root.findtext(tag) or "").strip(), col))
    lines.append(Line(""))
    lines.append(Line.kv(0, "Attached GPUs", (root.findtext("attached_gpus") or "").strip(), col))
    for g in root.findall("gpu"):
        lines.append(Line.section(0, "GPU " + g.get("id", "")))
        _walk_xml(TREE, g, 1, col, lines, driver)
        lines.append(Line(""))
    cap = Capture(lines, source="xml", xml_bytes=data)
    if not cap.gpus:
        raise ValueError("no <gpu> in the XML capture")
    return cap
