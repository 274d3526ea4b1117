"""The compute-capability table against every GPU product name in the real captures, and torch's arch lists."""

from __future__ import annotations

import csv
import io
import pathlib
import re

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import cuda_arch

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures" / "nvidia"
# Names a capture prints that are no product: an engineering sample's placeholder.
NOT_PRODUCTS = {"Graphics Device"}
# NVIDIA's published capability (https://developer.nvidia.com/cuda-gpus) of every product named in the captures.
EXPECTED = {
    "NVIDIA GeForce RTX 5090": (12, 0),
    "NVIDIA H100 80GB HBM3": (9, 0), "NVIDIA H100 NVL": (9, 0), "NVIDIA H200": (9, 0),
    "NVIDIA GeForce RTX 4090": (8, 9), "NVIDIA GeForce RTX 4080 SUPER": (8, 9), "NVIDIA GeForce RTX 4060 Ti": (8, 9),
    "NVIDIA RTX 6000 Ada Generation": (8, 9), "NVIDIA RTX 4000 SFF Ada Generation": (8, 9),
    "NVIDIA RTX 4000 Ada Generation": (8, 9), "NVIDIA RTX 2000 Ada Generation": (8, 9),
    "NVIDIA L40S": (8, 9), "NVIDIA L4": (8, 9),
    "NVIDIA A100-SXM4-80GB": (8, 0), "NVIDIA A100-SXM4-40GB": (8, 0),
    "NVIDIA A40": (8, 6), "NVIDIA A10": (8, 6), "NVIDIA A10G": (8, 6), "NVIDIA RTX A6000": (8, 6),
    "NVIDIA RTX A5000": (8, 6), "NVIDIA GeForce RTX 3090": (8, 6), "NVIDIA GeForce RTX 3080": (8, 6),
    "NVIDIA GeForce RTX 3070": (8, 6), "NVIDIA GeForce RTX 3060": (8, 6), "NVIDIA GeForce RTX 3060 Laptop GPU": (8, 6),
    "Tesla T4": (7, 5), "NVIDIA GeForce RTX 2080 SUPER": (7, 5), "NVIDIA GeForce RTX 2080": (7, 5),
    "NVIDIA GeForce RTX 2070": (7, 5),
    "Tesla V100-SXM2-16GB": (7, 0), "NVIDIA TITAN V": (7, 0),
    "Tesla P100-PCIE-16GB": (6, 0),
    "NVIDIA GeForce GTX 1050 Ti": (6, 1), "NVIDIA GeForce GT 1030": (6, 1), "GeForce GTX 1070 Ti": (6, 1),
    "Quadro P400": (6, 1), "Quadro P2000": (6, 1), "GRID P4-1Q": (6, 1),
    "NVIDIA GeForce GTX 680": (3, 0),
}


def capture_names():
    """Every GPU name printed in the captures: -q -x product_name, -q 'Product Name', -L lines, CSV name columns."""
    names = set()
    for path in FIXTURES.rglob("*"):
        if not path.is_file() or path.suffix == ".md" or path.name == "manifest.json":
            continue
        text = path.read_text(errors="replace")
        names.update(re.findall(r"<product_name>([^<]*)</product_name>", text))
        names.update(m.strip() for m in re.findall(r"^\s*Product Name\s*:\s*(.+)$", text, re.M))
        names.update(m.strip() for m in re.findall(r"^GPU \d+: (.+?) \(UUID", text, re.M))
        if path.suffix == ".csv" and text.startswith("name") or ", name," in text.split("\n", 1)[0]:
            rows = list(csv.reader(io.StringIO(text), skipinitialspace=True))
            column = [h.strip() for h in rows[0]].index("name")
            names.update(row[column].strip() for row in rows[1:] if len(row) > column)
    return sorted(n for n in names if n)


def real_compute_caps():
    """(name, 'X.Y') from the all-fields CSV captures, whose drivers print compute_cap."""
    pairs = set()
    for path in (FIXTURES / "query-gpu").glob("query-gpu-all-fields__*.csv"):
        rows = list(csv.reader(io.StringIO(path.read_text(errors="replace")), skipinitialspace=True))
        header = [h.strip() for h in rows[0]]
        if "compute_cap" in header:
            pairs.update((row[header.index("name")].strip(), row[header.index("compute_cap")].strip())
                         for row in rows[1:])
    return sorted(pairs)


def test_the_captures_name_products():
    names = capture_names()
    assert "NVIDIA GeForce RTX 5090" in names and "Tesla V100-SXM2-16GB" in names and len(names) >= 30


@pytest.mark.parametrize("name", capture_names())
def test_every_product_name_in_the_captures_has_its_published_capability(name):
    if name in NOT_PRODUCTS:
        assert cuda_arch.capability(name) is None
    else:
        assert name in EXPECTED, "a new product name in the captures: add its capability to EXPECTED"
        assert cuda_arch.capability(name) == EXPECTED[name]


@pytest.mark.parametrize("name,cap", real_compute_caps())
def test_table_agrees_with_the_compute_cap_the_driver_printed(name, cap):
    assert "%d.%d" % cuda_arch.capability(name) == cap


@pytest.mark.parametrize("name,cap", [
    ("Quadro RTX 4000", (7, 5)),        # Turing, not Ada
    ("NVIDIA RTX 5000 Ada Generation", (8, 9)),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", (12, 0)),
    ("NVIDIA B200", (10, 0)),
    ("NVIDIA GeForce RTX 5070 Ti", (12, 0)),
    ("NVIDIA TITAN X (Pascal)", (6, 1)),
    ("GeForce GTX TITAN X", (5, 2)),
    ("Tesla K80", (3, 7)),
    ("NVIDIA H20", (9, 0)),
    ("NVIDIA A800 80GB PCIe", (8, 0)),
    ("", None),
    (None, None),
])
def test_names_outside_the_captures(name, cap):
    assert cuda_arch.capability(name) == cap


# torch 2.5.1+cu124's arch list, as torch.cuda.get_arch_list() prints it
CU124 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
CU128 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]


@pytest.mark.parametrize("cap,arch_list,supported", [
    ((12, 0), CU124, False),            # an RTX 5090 with a cu124 build: no kernel image
    ((12, 0), CU128, True),
    ((8, 9), CU124, True),              # sm_86 cubins run on 8.9 (same major, higher minor)
    ((8, 0), ["sm_86"], False),         # ... but not on a lower minor
    ((12, 0), ["sm_90", "compute_90"], True),   # PTX is compiled by the driver for newer GPUs
    ((8, 6), ["compute_90"], False),    # ... never for older ones
    ((9, 0), ["sm_90a"], True),         # architecture-specific: exactly 9.0
    ((10, 0), ["sm_90a", "compute_90a"], False),
    ((6, 1), CU128, False),             # Pascal dropped from a newer build
    ((9, 0), ["garbage", ""], False),
])
def test_arch_supported(cap, arch_list, supported):
    assert cuda_arch.arch_supported(cap, arch_list) is supported


def test_install_hint_names_the_build():
    assert "cu128" in cuda_arch.install_hint((12, 0)) and "2.7" in cuda_arch.install_hint((12, 0))
    assert "sm_61" in cuda_arch.install_hint((6, 1))
