"""The tables the emulator is built from are themselves backed by the corpus (nothing invented)."""
from __future__ import annotations

import glob
import os
import re
import xml.etree.ElementTree as ET

import pytest

from gpu_emu_helpers import FIX, GPU_DIR, fixture_text
from nvsmi_emu import fields, model, render, xmlmap

XMLS = sorted(glob.glob(os.path.join(FIX, "xml", "*.xml")))
TEXTS = sorted(p for p in glob.glob(os.path.join(FIX, "q-text", "*.txt")) if "TRUNCATED-invalid" not in p)


def _paths(el, prefix=""):
    out = set()
    for child in el:
        p = prefix + "/" + child.tag
        out.add(p)
        out |= _paths(child, p)
    return out


REAL_XML_PATHS = set()
for _f in XMLS:
    REAL_XML_PATHS |= _paths(ET.parse(_f).getroot())


def _norm(p):
    return re.sub(r"/gpu/", "/gpu/", p)


@pytest.mark.parametrize("path", TEXTS, ids=[os.path.basename(p)[3:60] for p in TEXTS])
def test_xml_rendered_from_text_uses_only_real_element_paths(path):
    cap = model.parse_text(fixture_text(os.path.relpath(path, FIX)))
    out = xmlmap.render_xml(cap, render.all_processes(cap, [], "namespace"))
    root = ET.fromstring(out)
    invented = sorted(_paths(root) - REAL_XML_PATHS)
    assert invented == []


@pytest.mark.parametrize("path", XMLS, ids=[os.path.basename(p)[5:60] for p in XMLS])
def test_real_xml_values_survive_xml_text_xml(path):
    """real XML -> text model -> XML: every element the table maps keeps its value."""
    with open(path, "rb") as fh:
        data = fh.read()
    cap = model.parse_xml(data)
    cap.source = "txt"  # force the text -> XML renderer
    again = ET.fromstring(xmlmap.render_xml(cap, render.all_processes(cap, [], "namespace")))
    orig = ET.fromstring(data)
    checked = 0
    for g_orig, g_new in zip(orig.findall("gpu"), again.findall("gpu")):
        def procs(g):
            return [[(c.tag, (c.text or "").strip()) for c in pi] for pi in g.iter("process_info")]
        assert procs(g_new) == procs(g_orig)

        def migs(g):
            return [[(c.tag, (c.text or "").strip()) for c in md.iter()] for md in g.iter("mig_device")]
        mig_new, mig_orig = migs(g_new), migs(g_orig)
        assert len(mig_new) == len(mig_orig)
        for a, b in zip(mig_new, mig_orig):
            assert [x for x in a if x[1]] == [x for x in b if x[1] and x[0] in {t for t, _v in a}]
        for el in g_new.iter():
            if len(el) or el.tag in ("gpu", "retired_count", "process_info") or el in list(g_new.iter("process_info")):
                continue
            if any(el in list(pi) for pi in g_new.iter("process_info")) or any(
                    el in list(md) or el in list(md.iter()) for md in g_new.iter("mig_device")):
                continue
            # find the same path in the original
            path_parts = []
            node = el
            parents = {c: p for p in g_new.iter() for c in p}
            while node is not g_new:
                path_parts.insert(0, node.tag)
                node = parents[node]
            o = g_orig.find("/".join(path_parts))
            assert o is not None, "/".join(path_parts)
            assert (o.text or "").strip() == (el.text or "").strip(), "/".join(path_parts)
            checked += 1
    assert checked > 20


def test_spec_tags_and_labels_exist_in_the_corpus():
    tags = {p.rsplit("/", 1)[1] for p in REAL_XML_PATHS}
    labels = set()
    for p in TEXTS:
        for line in fixture_text(os.path.relpath(p, FIX)).split("\n"):
            labels.add(model.Line(line).label.strip())

    def walk(nodes):
        for n in nodes:
            if n.tag.startswith("@"):
                continue
            assert n.tag in tags, n.tag
            for label in n.labels:
                for part in label.split("/"):
                    assert part in labels, part
            walk(n.children)
    walk(xmlmap.TREE)
    walk(xmlmap.MIG_TREE)


def test_field_paths_exist_in_the_corpus():
    labels = set()
    for p in TEXTS:
        cap = model.parse_text(fixture_text(os.path.relpath(p, FIX)))
        for g in cap.gpus:
            labels |= set(g.paths)
    for name, (paths, kind, _unit) in fields.FIELDS.items():
        if kind == "ecc":
            continue
        assert any(p.startswith("@") or p in labels for p in paths), name


def test_data_files_are_corpus_copies():
    data = os.path.join(GPU_DIR, "nvsmi_emu", "data")
    for name in os.listdir(data):
        if name.endswith(".DERIVED.tsv"):
            continue
        sub = "errors" if name.startswith(("no-driver", "driver-library")) else "help"
        with open(os.path.join(data, name), encoding="utf-8", newline="") as fh:
            assert fh.read() == fixture_text(sub + "/" + name), name


def test_header_units_are_derived_from_real_headers():
    units = {}
    for f in glob.glob(os.path.join(FIX, "query-gpu", "query-gpu-all-fields__*.csv")):
        for cell in fixture_text(os.path.relpath(f, FIX)).split("\n")[0].split(", "):
            m = re.match(r"^(\S+) \[(.+)\]$", cell)
            if m:
                units[m.group(1)] = m.group(2)
    assert units == fields.UNITS
