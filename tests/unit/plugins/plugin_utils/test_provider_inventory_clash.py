"""Two inventory sources, one host name: when merging is safe, and the new name when it is not."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleParserError

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.provider_inventory import clash, free_name


def test_another_providers_id_is_a_clash_that_names_it():
    theirs = {"provider": "runpod", "runpod_pod_id": "fakepod0001", "provider_id": "fakepod0001"}
    assert clash(theirs, "vastai", "9000001") == "runpod instance fakepod0001 (runpod_pod_id)"


def test_the_same_instance_from_two_sources_merges():
    ours = {"provider": "runpod", "runpod_pod_id": "fakepod0001"}
    assert clash(ours, "runpod", "fakepod0001") is None


def test_the_same_provider_with_another_id_is_a_clash():
    assert clash({"provider": "runpod", "runpod_pod_id": "podA"}, "runpod", "podB") == "runpod instance podA (runpod_pod_id)"


def test_a_static_entry_without_an_id_is_filled_in():
    assert clash({"ansible_user": "root"}, "vastai", "9000001") is None
    assert clash(None, "vastai", "9000001") is None


def test_a_hand_typed_id_of_another_provider_is_a_clash():
    assert "runpod instance" in clash({"runpod_pod_id": "typed-by-hand"}, "lambda", "i-1")
    assert clash({"provider": "autodl"}, "vastai", "1") == "a autodl host (provider=autodl)"


def test_free_name_tries_the_provider_then_the_id():
    taken = {"train-1-vastai"}
    assert free_name("train-1", "vastai", "9000001", lambda n: False) == "train-1-vastai"
    assert free_name("train-1", "vastai", "9000001", taken.__contains__) == "train-1-vastai-9000001"
    with pytest.raises(AnsibleParserError):
        free_name("x", "vastai", "1", lambda n: True)
