"""State model: parse ONE capture (``nvidia-smi -q`` text or ``-q -x`` XML) into a list of GPUs.

The text form is the canonical model. A capture is kept as its list of lines (so ``-q`` re-renders it byte
for byte); each GPU gets an index from label paths (``"PCI/GPU Link Info/Link Width/Max"``) to lines. An XML
capture is converted into the same line model through the tag<->label table in ``xmlmap``.
"""
from __future__ import annotations

import os


class Line:
    """One line of ``-q`` text. ``value`` is None for a section header (no colon)."""

    __slots__ = ("raw", "indent", "label", "value", "col")

    def __init__(self, raw):
        self.raw = raw
        stripped = raw.lstrip(" ")
        self.indent = len(raw) - len(stripped)
        col = raw.find(" : ", self.indent)
        if col < 0 and raw.rstrip(" ").endswith(" :"):
            col = raw.rstrip(" ").rfind(" :")
        if col >= 0:
            # the line is raw[:col] + " : " + value; raw[:col] is the indent plus the padded label
            self.col = col
            self.label = raw[self.indent:col].rstrip(" ")
            self.value = raw[col + 3:]
        else:
            self.label = stripped
            self.value = None
            self.col = None

    @classmethod
    def kv(cls, indent, label, value, col):
        """Build a key/value line in nvidia-smi's layout: label padded so ' : ' starts at ``col``."""
        line = cls.__new__(cls)
        line.indent, line.label, line.value, line.col = indent, label, value, col
        line.raw = (" " * indent + label).ljust(col) + " : " + value
        return line

    @classmethod
    def section(cls, indent, label):
        line = cls.__new__(cls)
        line.indent, line.label, line.value, line.col = indent, label, None, None
        line.raw = " " * indent + label
        return line


class Gpu:
    """A GPU section of the text model: its lines plus a path index."""

    def __init__(self, lines):
        self.lines = lines  # lines[0] is "GPU 00000000:xx:yy.z"
        self.paths = {}
        self.index_paths()

    def index_paths(self):
        self.paths = {}
        stack = []  # (indent, label)
        for ln in self.lines[1:]:
            if not ln.raw.strip():
                continue
            while stack and stack[-1][0] >= ln.indent:
                stack.pop()
            path = "/".join([s[1] for s in stack] + [ln.label.strip()])
            self.paths.setdefault(path, ln)
            stack.append((ln.indent, ln.label.strip()))  # key/value lines can have children (HW Slowdown)

    @property
    def bus_id(self):
        return self.lines[0].raw.split(" ", 1)[1].strip()

    def get(self, path, default=None):
        ln = self.paths.get(path)
        return ln.value if ln is not None and ln.value is not None else default

    def has(self, path):
        return path in self.paths

    def section_children(self, path):
        """Direct lines below section ``path`` (first occurrence)."""
        head = self.paths.get(path)
        if head is None:
            return []
        i = self.lines.index(head)
        out = []
        for ln in self.lines[i + 1:]:
            if ln.raw.strip() and ln.indent <= head.indent:
                break
            out.append(ln)
        return out

    def processes(self):
        """Captured processes: list of dicts with gi, ci, pid, type, name, used (strings as printed)."""
        procs = []
        cur = None
        for ln in self.section_children("Processes"):
            if ln.value is None:
                continue
            lab = ln.label
            if lab == "GPU instance ID":
                cur = {"gi": ln.value}
                procs.append(cur)
            elif cur is None:
                continue
            elif lab == "Compute instance ID":
                cur["ci"] = ln.value
            elif lab == "Process ID":
                cur["pid"] = ln.value
            elif lab == "Type":
                cur["type"] = ln.value
            elif lab == "Name":
                cur["name"] = ln.value
            elif lab == "Used GPU Memory":
                cur["used"] = ln.value
        return procs


class Capture:
    """The whole ``-q`` document: header lines, GPUs, and the source format."""

    def __init__(self, lines, source="txt", xml_bytes=None):
        self.source = source
        self.xml_bytes = xml_bytes
        self.head = []  # lines before the first GPU section
        self.gpus = []
        self.tail = []  # trailing lines after the last GPU (blank lines)
        cur = None
        for ln in lines:
            if ln.indent == 0 and ln.value is None and ln.label.startswith("GPU ") and ln.raw.strip():
                cur = [ln]
                self.gpus.append(cur)
            elif cur is None:
                self.head.append(ln)
            else:
                cur.append(ln)
        self.gpus = [Gpu(g) for g in self.gpus]
        # blank lines closing each GPU section belong to it (the real output has one blank line after each GPU)
        self.header = {}
        for ln in self.head:
            if ln.value is not None:
                self.header[ln.label] = ln.value

    @property
    def driver(self):
        return self.header.get("Driver Version", "").split(" ")[0]

    @property
    def col(self):
        """Column of ' : ' for top-level key/values (36/42/55 depending on the driver branch)."""
        for ln in self.head:
            if ln.col:
                return ln.col
        return 42

    def lines(self):
        out = list(self.head)
        for g in self.gpus:
            out.extend(g.lines)
        return out


def driver_tuple(version):
    out = []
    for part in version.split("."):
        try:
            out.append(int(part))
        except ValueError:
            break
    return tuple(out)


def parse_text(text):
    raw_lines = text.split("\n")
    lines = [Line(r) for r in raw_lines]
    cap = Capture(lines)
    if not cap.gpus or "Driver Version" not in cap.header:
        raise ValueError("not an nvidia-smi -q capture")
    return cap


def parse_xml(data):
    from . import xmlmap  # only XML scenarios pay for ElementTree
    return xmlmap.xml_to_capture(data)


def load_capture(scenario_dir):
    """Return the Capture of a scenario directory, or raise (ValueError/OSError) when absent or unparseable."""
    xml_path = os.path.join(scenario_dir, "nvidia-smi-q.xml")
    txt_path = os.path.join(scenario_dir, "nvidia-smi-q.txt")
    if os.path.isfile(xml_path):
        with open(xml_path, "rb") as fh:
            return parse_xml(fh.read())
    with open(txt_path, "r", encoding="utf-8", newline="") as fh:
        return parse_text(fh.read())
