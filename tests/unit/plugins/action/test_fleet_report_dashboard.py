"""fleet_report's history and dashboard: each run appends one record per host, the page and its JSON index are drawn
from every host's history, a host name that cannot be a file is a warning, bad paths are refused, and the page holds
no secret and no controller path."""

from __future__ import annotations

import json
import os

import pytest

from test_fleet_report import PATROL_VARS, PREFLIGHT_VARS, action, profile, run_action, task_vars


@pytest.fixture(name="screen")
def screen_fixture(monkeypatch):
    printed = []
    monkeypatch.setattr(action.display, "display", printed.append)
    return printed


def job(items_done):
    return {"name": "train", "exists": True, "alive": True, "items_done": items_done, "items_total": 7,
            "progress": {"text": "epoch 12", "unit": "epoch", "value": 12}, "log_age_seconds": 20, "tail": []}


def probe(jobs):
    return {"changed": False, "jobs": jobs, "findings": [],
            "paths": [{"path": "/root/autodl-tmp", "bytes_pct": 3, "inodes_pct": 1}],
            "gpus": [{"index": 0, "utilization_pct": 97, "memory_used_mib": 70211, "memory_total_mib": 81559}]}


def patrol_vars(host_names):
    hostvars = {}
    for i, host in enumerate(host_names):
        hostvars[host] = dict(profile(), patrol_probe=probe([job(items_done=i)]), trainer_billed=True,
                              trainer_price_per_hour="2.5", trainer_price_currency="EUR",
                              ansible_ssh_private_key_file="/root/.ssh/secret_key", ansible_password="hunter2")
    return task_vars(list(host_names), hostvars)


def dashboard_args(tmp_path, **extra):
    args = {"result_vars": PATROL_VARS, "kind": "patrol", "report_path": str(tmp_path / "reports" / "patrol.json"),
            "history_dir": str(tmp_path / "reports" / "history"), "html_path": str(tmp_path / "reports" / "fleet.html"),
            "title": "patrol"}
    args.update(extra)
    return args


def test_each_run_appends_a_record_per_host_and_draws_the_page_and_index(tmp_path, screen):
    for _tick in range(3):
        result = run_action(dashboard_args(tmp_path), patrol_vars(["lab-01", "lab-02"]))
        assert not result.get("failed"), result
    history = tmp_path / "reports" / "history"
    assert sorted(os.listdir(str(history))) == [".lock", "lab-01.jsonl", "lab-02.jsonl"]
    lines = (history / "lab-02.jsonl").read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[-1])["by_job"]["train"]["done"] == 1 and json.loads(lines[-1])["price"] == 2.5
    assert result["html_path"].endswith("fleet.html") and result["index_path"].endswith("fleet.json")
    assert result["history_warnings"] == []
    page = (tmp_path / "reports" / "fleet.html").read_text()
    assert page.count("<article") == 2 and page.count('data-points="3"') == 2 * 5
    index = json.loads((tmp_path / "reports" / "fleet.json").read_text())
    assert [h["host"] for h in index["hosts"]] == ["lab-01", "lab-02"]
    assert index["hosts"][0]["history_file"] == "history/lab-01.jsonl"
    # no secret and no controller path (the report directory's own path included) in the page or the index
    for text in (page, json.dumps(index)):
        for secret in ("hunter2", "secret_key", str(tmp_path), "/root/.ssh"):
            assert secret not in text


def test_without_html_path_only_the_history_is_written(tmp_path, screen):
    result = run_action(dashboard_args(tmp_path, html_path=None), patrol_vars(["lab-01"]))
    assert not result.get("failed") and result["html_path"] is None and result["index_path"] is None
    assert (tmp_path / "reports" / "history" / "lab-01.jsonl").exists()
    assert not (tmp_path / "reports" / "fleet.html").exists()


def test_without_history_dir_nothing_is_written(tmp_path, screen):
    result = run_action(dashboard_args(tmp_path, history_dir=None, html_path=None), patrol_vars(["lab-01"]))
    assert not result.get("failed") and sorted(os.listdir(str(tmp_path / "reports"))) == ["patrol.json"]


def test_html_path_must_end_in_html_and_needs_the_history(tmp_path, screen):
    result = run_action(dashboard_args(tmp_path, html_path=str(tmp_path / "fleet.htm")), patrol_vars(["lab-01"]))
    assert result["failed"] and "must end in .html" in result["msg"]
    result = run_action(dashboard_args(tmp_path, history_dir=None), patrol_vars(["lab-01"]))
    assert result["failed"] and "needs history_dir" in result["msg"]


def test_a_host_name_with_a_path_separator_is_a_warning_not_a_file(tmp_path, screen, monkeypatch):
    warned = []
    monkeypatch.setattr(action.display, "warning", warned.append)
    result = run_action(dashboard_args(tmp_path), patrol_vars(["../../evil", "lab-01"]))
    assert not result.get("failed"), result
    assert sorted(os.listdir(str(tmp_path / "reports" / "history"))) == [".lock", "lab-01.jsonl"]
    assert len(result["history_warnings"]) == 1 and "path separator" in result["history_warnings"][0]
    assert warned == ["fleet history: " + result["history_warnings"][0]]
    assert not os.path.exists(str(tmp_path / "evil.jsonl"))


def test_an_unwritable_history_dir_is_a_message(tmp_path, screen):
    blocker = tmp_path / "reports"
    blocker.mkdir()
    (blocker / "history").write_text("a file, not a directory")
    result = run_action(dashboard_args(tmp_path), patrol_vars(["lab-01"]))
    assert result["failed"] and "history" in result["msg"], result


def test_preflight_writes_history_too(tmp_path, screen):
    result = run_action({"result_vars": PREFLIGHT_VARS, "history_dir": str(tmp_path / "history"),
                         "html_path": str(tmp_path / "fleet.html"), "fail_run": False}, task_vars())
    assert not result.get("failed"), result
    record = json.loads((tmp_path / "history" / "lab-02.jsonl").read_text())
    assert record["kind"] == "preflight" and record["top"] == "throttle_active" and "8x" in record["gpus"]
    assert (tmp_path / "fleet.html").read_text().count("<article") == 7


def test_the_page_shows_the_inventorys_hosts_and_is_titled_after_the_inventory(tmp_path, screen):
    # a tick over lab-01..lab-03, then the inventory holds lab-01 and lab-02 only (groups.all), named by its file
    run_action(dashboard_args(tmp_path), patrol_vars(["lab-01", "lab-02", "lab-03"]))
    variables = patrol_vars(["lab-01", "lab-02"])
    variables.update(groups={"all": ["lab-01", "lab-02"]}, ansible_inventory_sources=[str(tmp_path / "my_fleet.yml")])
    result = run_action(dashboard_args(tmp_path), variables)
    assert not result.get("failed"), result
    page = (tmp_path / "reports" / "fleet.html").read_text()
    assert page.count("<article") == 2 and 'data-host="lab-03"' not in page and 'data-gone="lab-03"' in page
    assert "<title>my_fleet: 2 host(s)</title>" in page and "by patrol" in page
    assert json.loads((tmp_path / "reports" / "fleet.json").read_text())["gone"] == ["lab-03"]
    # the fleet_name option wins
    run_action(dashboard_args(tmp_path, fleet_name="prod 训练"), variables)
    assert "<h1>prod 训练</h1>" in (tmp_path / "reports" / "fleet.html").read_text()


@pytest.mark.parametrize("sources, name", [
    (["/home/me/my_fleet.yml"], "my_fleet"), (["inventories/autodl/hosts.yml"], "autodl"),
    (["/srv/prod.remote_gpu.yml", "other.yml"], "prod"), (["/tmp/lab/inventory.yml"], "lab"),
    (["inventories/example/"], "example"), ([], "fleet"), (None, "fleet")])
def test_the_fleet_is_named_after_its_first_inventory_source(sources, name):
    assert action.fleet_name(None, sources) == name
    assert action.fleet_name("given", sources) == "given"
