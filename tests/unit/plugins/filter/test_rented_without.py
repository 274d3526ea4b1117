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
