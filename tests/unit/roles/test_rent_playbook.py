"""playbooks/rent.yml and playbooks/tasks/rent_round.yml: the templates that decide what the rent records and prints,
rendered by Ansible's own templar over rows as rent_probe returns them (no play runs): a box given back UNPROBED (the
controller could not log in) is never recorded or excluded as a bad machine, a price the provider sets only at the
create is printed as unknown (never 0), and the tables print as one string of lines, which the callback shows as a
block and never folds in the middle of a figure."""

from __future__ import annotations

import functools
import json
import pathlib

import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.callback import _AnsibleCallbackDumper
from ansible.template import Templar, trust_as_template

PLAYBOOKS = pathlib.Path(__file__).resolve().parents[3] / "playbooks"


def tasks(items):
    for item in items or []:
        yield item
        for key in ("tasks", "block", "rescue", "always"):
            yield from tasks(item.get(key))


def task(path, name):
    (found,) = [t for t in tasks(yaml.safe_load((PLAYBOOKS / path).read_text())) if t.get("name") == name]
    return found


def render(template, **variables):
    play = yaml.safe_load((PLAYBOOKS / "rent.yml").read_text())[0]["vars"]
    variables.setdefault("rent_newline", play["rent_newline"])
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(template))


def shown(msg):
    """``msg`` as the collection's callback prints it (result_format yaml: ansible's own dumper)."""
    return yaml.dump({"msg": msg}, allow_unicode=True, default_flow_style=False, indent=4,
                     Dumper=functools.partial(_AnsibleCallbackDumper, lossy=False))


def row(host, verdict, outcome, machine, finding, price=2.1, cost=0.0035):
    return {"rent": "sweep-a", "provider": "vastai", "host": host, "id": host.rsplit("-", 1)[1], "offer": 7100001,
            "machine_id": machine, "price_per_hour": price, "verdict": verdict, "finding": finding,
            "outcome": outcome, "seconds_billed": 6.1, "cost": cost}


ROWS = [row("sweep-a-9000002", "FAIL", "given back", "20001", "throttle_active: HW slowdown"),
        row("sweep-a-9000003", "UNPROBED", "given back", "20002",
            "ssh_auth_failed: root@127.0.170.20: Permission denied (publickey)."),
        row("sweep-a-9000004", "PASS", "kept", "20003", None)]


def test_only_a_box_found_unfit_records_its_machine_as_bad_never_one_the_controller_could_not_log_in_to():
    record = task("tasks/rent_record.yml", "Record the machines found bad")
    earlier = [{"machine_id": "555", "provider": "vastai"}]
    written = json.loads(render(record["ansible.builtin.copy"]["content"], rent_bad_machines=earlier, rent_rows=ROWS))
    assert [r["machine_id"] for r in written] == ["555", "20001"]
    only_unprobed = [ROWS[1], ROWS[2]]
    assert render("{{ %s }}" % record["when"], rent_rows=only_unprobed) is False  # the file is not rewritten
    assert render("{{ %s }}" % record["when"], rent_rows=ROWS) is True


def test_the_next_round_excludes_the_machines_found_bad_not_the_unprobed_ones():
    rent = task("tasks/rent_round.yml", "Rent the missing boxes through the API, round {{ rent_round_no | int + 1 }}")
    excluded = render(rent["remote_gpu.trainer.instance"]["exclude_machines"], rent_provider="vastai",
                      rent_bad_machines=[{"machine_id": 555, "provider": "vastai"},
                                         {"machine_id": "fakemach1", "provider": "runpod"}], rent_rows=ROWS)
    assert excluded == ["555", "20001"]


def test_the_rent_stops_when_rent_probe_says_so():
    stop = task("tasks/rent_round.yml", "Stop renting when the controller could not probe a box for its own SSH "
                                        "settings (the message says what to check)")
    condition = "{{ %s }}" % stop["when"]
    assert render(condition, rent_judged={"stop_renting": "ssh_auth_failed: ...", "boxes": []}) is True
    assert render(condition, rent_judged={"stop_renting": None, "boxes": []}) is False
    assert stop["ansible.builtin.set_fact"] == {"rent_done": True, "rent_failure": "{{ rent_judged.stop_renting }}"}


def test_the_table_says_which_boxes_were_given_back_unprobed_and_why():
    table = task("rent.yml", "Print the rent's table")
    rows = ROWS + [row("sweep-a-9000005", "FAIL", "given back", None, "probe_failed: x", price=None, cost=None)]
    msg = render(table["ansible.builtin.debug"]["msg"], rent_rows=rows, rent_count=2, rent_spent_bad=0.0070)
    lines = msg.splitlines()
    assert lines[0].split() == ["INSTANCE", "OFFER", "$/H", "VERDICT", "OUTCOME", "BILLED_S"]
    assert lines[2].split() == ["sweep-a-9000003", "7100001", "2.1", "UNPROBED", "given", "back", "6.1"]
    assert lines[4].split()[2] == "unknown"
    assert lines[5] == ("UNPROBED: the controller could not log in (ssh_auth_failed); sweep-a-9000003 given back "
                        "unprobed, their machines not recorded as bad")
    assert lines[6] == "kept 1 of 2; spent on boxes given back: 0.0070 $ (and 1 box(es) of unknown price)"
    assert shown(msg).startswith("msg: |-\n")  # a block: no line is folded


def check_table(offers, provider="vastai", excluded=None):
    printed = task("tasks/rent_round.yml", "Print the offers that would be taken (check mode)")
    return render(printed["ansible.builtin.debug"]["msg"], rent_round_result={
        "offers": offers, "existing": [], "excluded": excluded or {}}, rent_name="sweep-a", rent_hours=1,
        rent_provider=provider)


def test_check_mode_prints_an_unknown_price_as_unknown_never_as_zero():
    runpod = [{"id": None, "machine_id": None, "gpu_name": "NVIDIA H100 80GB HBM3", "num_gpus": 1,
               "price_per_hour": None}] * 2
    lines = check_table(runpod, provider="runpod").splitlines()
    assert lines[1].split()[-1] == "unknown" and lines[2].split()[-1] == "unknown"
    assert lines[-1] == ("would rent 2 box(es), 0 already labelled sweep-a; expected total unknown: 2 box(es) of "
                         "unknown price (runpod sets it at the create: the rate of the GPU type it lands on)")
    assert "0.0000" not in lines[-1]


def test_check_mode_keeps_each_figure_whole():
    offers = [{"id": 7100001, "machine_id": 20001, "gpu_name": "H100_SXM", "num_gpus": 1, "price_per_hour": 2.1},
              {"id": 7100002, "machine_id": 20002, "gpu_name": "H100_SXM", "num_gpus": 1, "price_per_hour": 2.2}]
    msg = check_table(offers, excluded={"max_price": [{"id": 7100003}]})
    assert msg.splitlines()[-2:] == [
        "excluded by max_price: 7100003",
        "would rent 2 box(es), 0 already labelled sweep-a; expected total 4.3000 $/h, 4.30 $ for rent_hours 1"]
    # a block never folds; the list of lines printed before folded the summary ("4.30\n        $ for rent_hours 1")
    printed = shown(msg)
    assert printed.startswith("msg: |-\n") and "expected total 4.3000 $/h, 4.30 $ for rent_hours 1\n" in printed
    assert "4.30\n" in shown(msg.splitlines())
