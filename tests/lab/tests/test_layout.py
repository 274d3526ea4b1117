"""The fleet's layout and inventory writer (pure functions; no root needed)."""
from __future__ import annotations

import os

import pytest
import yaml

from labhelpers import NET
from fleetlib.instance import gpu_count
from fleetlib.inventory import inventory, layout, write_inventory


def _layout(size, **kw):
    return layout(size, kw.get("platforms", {}), kw.get("regions", {}), kw.get("scenarios", {}),
                  kw.get("variants", {}))


def test_default_three_two_autodl_same_region_and_runpod():
    insts = _layout(3)
    assert [(i["name"], i["platform"], i["region"]) for i in insts] == [
        ("lab-01", "autodl", "A"), ("lab-02", "autodl", "A"), ("lab-03", "runpod", "-")]
    assert [i["addr"] for i in insts] == [NET + ".11", NET + ".12", NET + ".13"]
    assert insts[0]["data_dir"] == "/root/autodl-tmp" and insts[0]["durable_dir"] == "/root/autodl-fs"
    assert insts[2]["data_dir"] == "/workspace" and insts[2]["durable_dir"] is None


def test_larger_fleets_add_region_b_and_generic_ssh():
    insts = _layout(32)
    assert insts[3]["platform"] == "autodl" and insts[3]["region"] == "B"
    assert insts[4]["platform"] == "generic_ssh" and insts[4]["data_dir"] == "/root/proj"
    assert insts[-1]["addr"] == NET + ".42"
    assert {i["platform"] for i in insts} == {"autodl", "runpod", "generic_ssh"}


def test_overrides_and_variants():
    insts = _layout(4, platforms={"lab-03": "vastai"}, regions={"lab-02": "B"}, scenarios={"all": "x"},
                    variants={"lab-01": ["non-root", "slow"], "all": ["no-tmux"]})
    assert insts[2]["platform"] == "vastai"
    assert insts[1]["region"] == "B"
    assert {i["scenario"] for i in insts} == {"x"}
    assert insts[0]["variants"] == ["no-tmux", "non-root", "slow"]
    assert insts[0]["user"] == "ubuntu" and insts[0]["home"] == "/home/ubuntu"


@pytest.mark.parametrize("kw", [{"variants": {"lab-01": ["bogus"]}}, {"platforms": {"lab-09": "autodl"}}])
def test_bad_overrides_fail_clearly(kw):
    with pytest.raises(ValueError):
        _layout(3, **kw)


def test_size_limits():
    big = _layout(128)      # a fleet of 128 hosts (the benchmarks' largest): lab-128 on LAB_NET.138
    assert big[-1]["name"] == "lab-128" and big[-1]["addr"].endswith(".138")
    assert len({inst["addr"] for inst in big}) == 128
    with pytest.raises(ValueError, match="between 1 and 128"):
        _layout(129)
    with pytest.raises(ValueError):
        _layout(0)


def test_inventory_yaml_round_trip(tmp_path):
    insts = _layout(5, variants={"lab-05": ["down"]})
    for i in insts:
        i.update(gpus=1, meter_log=f"/s/{i['name']}/meter.log", gpu_runtime=f"/s/{i['name']}/gpu")
    inv = inventory(str(tmp_path), insts, "/s/keys/id", "/s/known_hosts")
    path = tmp_path / "inventory.yml"
    write_inventory(str(path), inv, "header\nline two")
    data = yaml.safe_load(path.read_text())
    assert data == inv
    children = data["all"]["children"]
    assert sorted(children["autodl"]["hosts"]) == ["lab-01", "lab-02", "lab-04"]
    assert sorted(children["lab_region_autodl_a"]["hosts"]) == ["lab-01", "lab-02"]
    assert list(children["lab_variant_down"]["hosts"]) == ["lab-05"]
    assert "UserKnownHostsFile=/s/known_hosts" in data["all"]["vars"]["ansible_ssh_common_args"]


def test_gpu_count_from_scenarios(tmp_path):
    (tmp_path / "xml").mkdir()
    (tmp_path / "xml" / "nvidia-smi-q.xml").write_text('<nvidia_smi_log><gpu id="0"></gpu><gpu id="1"></gpu>')
    (tmp_path / "txt").mkdir()
    (tmp_path / "txt" / "nvidia-smi-q.txt").write_text("Attached GPUs                             : 4\n")
    assert gpu_count(str(tmp_path / "xml")) == 2
    assert gpu_count(str(tmp_path / "txt")) == 4
    assert gpu_count(str(tmp_path / "missing")) == 1
    assert os.path.isabs(str(tmp_path))
