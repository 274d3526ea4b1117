"""The rented_without filter: a rented inventory, as playbooks/rent.yml writes it, without the boxes that are gone."""

from __future__ import annotations

import pytest
import yaml

from ansible.errors import AnsibleFilterError
from ansible.plugins.filter.core import to_nice_yaml

from ansible_collections.remote_gpu.trainer.plugins.filter.rented_without import FilterModule

rented_without = FilterModule().filters()["rented_without"]
HEAD = "# The boxes kept by remote_gpu.trainer.rent for rent sweep-a (vastai); give it to the playbooks with -i."


def box(index):
    return {"ansible_host": "203.0.113.%d" % index, "ansible_port": 41000 + index, "ansible_user": "root",
            "vastai_instance_id": "90000%02d" % index, "provider_api_url": "https://console.vast.ai",
            "ansible_ssh_common_args": "-o UserKnownHostsFile=/p/inventories/rented/sweep-a.known_hosts"}


def rented(*indexes):
    """The text rent.yml's "Write the rented inventory" task writes (its first line, then to_nice_yaml)."""
    hosts = dict(("sweep-a-90000%02d" % index, box(index)) for index in indexes)
    inventory = {"all": {"children": {"vastai": {"hosts": hosts}, "rent_sweep_a": {"hosts": hosts}}}}
    return "%s\n%s" % (HEAD, to_nice_yaml(inventory, indent=2))


def test_the_gone_box_leaves_every_group_and_the_rest_stays_as_it_was():
    text = rented_without(rented(20, 21, 22), ["sweep-a-9000021"])
    assert text.splitlines()[0] == HEAD
    assert yaml.safe_load(text) == yaml.safe_load(rented(20, 22))
    # the last box gone: groups with no host, still an inventory
    empty = yaml.safe_load(rented_without(text, ["sweep-a-9000020", "sweep-a-9000022"]))
    assert empty == {"all": {"children": {"vastai": {"hosts": {}}, "rent_sweep_a": {"hosts": {}}}}}


def test_a_host_it_does_not_list_changes_nothing():
    assert yaml.safe_load(rented_without(rented(20), ["other"])) == yaml.safe_load(rented(20))


@pytest.mark.parametrize("text, words", [
    ("all:\n  hosts:\n    autodl-4090: {ansible_host: x}\n", "not an inventory that rent wrote"),
    ("# my fleet\nall:\n  hosts: {}\n", "not an inventory that rent wrote"),
    (HEAD + "\nall: [1, 2]\n", "does not have rent's layout"),
    (HEAD + "\nall: {children: {vastai: {hosts: {a: {}}}}\n", "does not have rent's layout"),
    (None, "not an inventory that rent wrote"),
])
def test_anything_else_is_refused_and_left_alone(text, words):
    with pytest.raises(AnsibleFilterError, match=words):
        rented_without(text, ["a"])


def test_hosts_must_be_names():
    with pytest.raises(AnsibleFilterError, match="a list of host names"):
        rented_without(rented(20), "sweep-a-9000020")


rented_with = FilterModule().filters()["rented_with"]


def test_a_replacement_joins_every_group_and_a_retired_box_leaves_them_all():
    """The autopilot's replacement of sweep-a-9000021 joins the rent's groups; once the old box is destroyed it leaves
    them: what is left is the inventory rent would have written for the two boxes that run."""
    new = dict(box(31), ansible_ssh_common_args="-o UserKnownHostsFile=/p/inventories/rented/sweep-a-r1.known_hosts")
    text = rented_with(rented(20, 21), {"sweep-a-r1-9000031": new})
    assert text.splitlines()[0] == HEAD
    groups = yaml.safe_load(text)["all"]["children"]
    assert {name: sorted(group["hosts"]) for name, group in groups.items()} == {
        "vastai": ["sweep-a-9000020", "sweep-a-9000021", "sweep-a-r1-9000031"],
        "rent_sweep_a": ["sweep-a-9000020", "sweep-a-9000021", "sweep-a-r1-9000031"]}
    assert groups["vastai"]["hosts"]["sweep-a-r1-9000031"] == new
    left = yaml.safe_load(rented_without(text, ["sweep-a-9000021"]))["all"]["children"]
    assert {name: sorted(group["hosts"]) for name, group in left.items()} == {
        "vastai": ["sweep-a-9000020", "sweep-a-r1-9000031"], "rent_sweep_a": ["sweep-a-9000020", "sweep-a-r1-9000031"]}


def test_a_host_already_listed_takes_the_new_variables_and_ansibles_own_types_are_written_plain():
    # a template's result carries ansible-core's tags (its origin): YAML's safe dumper refuses such a str
    from ansible._internal._datatag._tags import Origin
    tagged = Origin(path="/p/inventories/rented/sweep-a.yml", line_num=3).tag("203.0.113.20")
    text = rented_with(rented(20), {"sweep-a-9000020": dict(box(20), ansible_host=tagged, ansible_port=42000)})
    assert "!!python" not in text
    assert yaml.safe_load(text)["all"]["children"]["vastai"]["hosts"]["sweep-a-9000020"]["ansible_port"] == 42000


@pytest.mark.parametrize("hosts, words", [
    (["sweep-a-9000031"], "a dict of host names"),
    ({"sweep-a-9000031": "203.0.113.31"}, "a dict of host names"),
    ({"": {}}, "a dict of host names"),
    ({"x": {"when": object()}}, "not plain data"),
])
def test_rented_with_refuses_what_is_not_hosts_with_their_variables(hosts, words):
    with pytest.raises(AnsibleFilterError, match=words):
        rented_with(rented(20), hosts)


def test_rented_with_leaves_a_users_own_inventory_alone():
    with pytest.raises(AnsibleFilterError, match="not an inventory that rent wrote"):
        rented_with("all:\n  hosts: {}\n", {"a": {}})
