"""The inventory plugins' shared pieces have one owner each (plugin_utils/provider_inventory.py, the doc fragment,
provider_lifecycle.PROVIDERS); what stays in two places (the documented api_url default) must agree."""

from __future__ import annotations

import importlib

import pytest
import yaml

from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_http import ProviderAPIError
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_lifecycle import PROVIDERS

PLUGINS = ["runpod", "vastai", "lambda_cloud", "autodl"]


def plugin_module(name):
    return importlib.import_module("ansible_collections.remote_gpu.trainer.plugins.inventory.%s" % name)


@pytest.mark.parametrize("name", PLUGINS)
def test_provider_row_and_documented_default_agree(name):
    module = plugin_module(name)
    cls = module.InventoryModule
    row = PROVIDERS[cls.PROVIDER]
    assert (cls.ENV_VAR, cls.DEFAULT_URL, cls.AUTH_SCHEME) == (row["env_var"], row["url"], row["auth_scheme"])
    options = yaml.safe_load(module.DOCUMENTATION)["options"]
    assert options["api_url"]["default"] == row["url"]
    assert options["plugin"] == {"choices": [cls.NAME]}
    assert "E(%s)" % row["env_var"] in module.DOCUMENTATION


class Paged(plugin_module("vastai").InventoryModule):
    def __init__(self, most):  # pylint: disable=super-init-not-called
        self.most = most

    def get_option(self, option):
        assert option == "max_pages"
        return self.most


def test_pages_stop_when_the_fetch_breaks():
    seen = []
    for page in Paged(5).pages():
        seen.append(page)
        if page == 2:
            break
    assert seen == [1, 2]


def test_pages_past_max_pages_fail_the_source():
    seen = []
    with pytest.raises(ProviderAPIError, match=r"^vastai: more than max_pages=3 pages; nothing from this source") as err:
        for page in Paged(3).pages():
            seen.append(page)
    assert seen == [1, 2, 3] and err.value.kind == "too_many_pages"
