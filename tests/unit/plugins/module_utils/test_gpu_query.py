"""gpu_query.py: nvidia-smi run under a timeout with one wording for its failures, and its CSV rows read."""

from __future__ import annotations

import os

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import gpu_query as gq

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "nvidia", "compute-apps")


@pytest.mark.parametrize("name", sorted(n for n in os.listdir(FIXTURES) if n.startswith("query-compute-apps")))
def test_parse_compute_apps_on_the_real_captures(name):
    with open(os.path.join(FIXTURES, name), newline="") as handle:
        text = handle.read()
    rows = gq.parse_compute_apps(text)
    data_lines = [line for line in text.splitlines()[1:] if line.strip()]
    assert len(rows) == len(data_lines)
    for row in rows:
        assert row["pid"] > 0 and row["process_name"]


def test_parse_compute_apps_h200_load_values():
    with open(os.path.join(FIXTURES, "query-compute-apps__nvidia-h200__590.48.01__linux-x86_64.load.csv")) as handle:
        rows = gq.parse_compute_apps(handle.read())
    assert [(r["pid"], r["used_memory_mib"], r["process_name"]) for r in rows] == [
        (10291, 2566, "/root/tools/memhog"), (10293, 1542, "/root/tools/memhog"), (10309, 28234, "./gpu_burn")]


def test_parse_compute_apps_noheader_with_a_comma_in_the_name():
    # Our own query order (pid, used_memory, process_name), noheader, nounits; names may contain commas.
    rows = gq.parse_compute_apps("4123, 30512, python train.py --tags a,b\n77, [N/A], C:\\x\\app.exe\n")
    assert rows == [{"pid": 4123, "used_memory_mib": 30512, "process_name": "python train.py --tags a, b"},
                    {"pid": 77, "used_memory_mib": None, "process_name": "C:\\x\\app.exe"}]
    assert gq.parse_compute_apps("") == []


def test_usage_rows_of_job_status():
    gpus = gq.parse_rows("0, 97, 70211, 81559\n1, [N/A], 10, 81559\n", gq.USAGE_FIELDS)
    assert gpus[0] == {"index": 0, "utilization_pct": 97, "memory_used_mib": 70211, "memory_total_mib": 81559}
    assert gpus[1]["utilization_pct"] is None


def test_the_one_wording_of_failures(smi_script):
    with pytest.raises(gq.SmiError) as info:
        gq.run_smi(None, ["-L"], 5)
    assert (info.value.kind, str(info.value)) == ("not_installed", "nvidia-smi is not installed")
    hung = smi_script("time.sleep(30)")
    with pytest.raises(gq.SmiError) as info:
        gq.run_smi(hung, ["-L"], 1)
    assert (info.value.kind, str(info.value)) == ("timeout", "nvidia-smi timed out after 1 s")
    broken = smi_script("print('first'); sys.stderr.write(\"NVIDIA-SMI has failed because it couldn't "
                        "communicate with the NVIDIA driver.\\n\"); sys.exit(9)")
    with pytest.raises(gq.SmiError) as info:
        gq.run_smi(broken, ["-L"], 5)
    assert info.value.kind == "failed" and info.value.rc == 9
    assert str(info.value) == "nvidia-smi exited 9: NVIDIA-SMI has failed because it couldn't communicate with the " \
                              "NVIDIA driver."
    assert gq.run_smi(broken, ["-L"], 5, check=False)[0] == 9


def test_query_gpus_asks_the_fields_in_order_under_the_c_locale(smi_script):
    smi = smi_script("import os\nassert os.environ['LC_ALL'] == 'C'\n"
                     "assert args == ['--query-gpu=index,utilization.gpu,memory.used,memory.total', "
                     "'--format=csv,noheader,nounits'], args\nprint('0, 97, 70211, 81559')\n"
                     "print('1, [N/A], 10, 81559')")
    gpus = gq.query_gpus(smi, gq.USAGE_FIELDS, 5)
    assert gpus[0] == {"index": 0, "utilization_pct": 97, "memory_used_mib": 70211, "memory_total_mib": 81559}
    assert gpus[1]["utilization_pct"] is None


def test_unusable_rows_are_a_failure_not_a_traceback(smi_script):
    smi = smi_script("print('something else entirely')")
    with pytest.raises(gq.SmiError) as info:
        gq.query_gpus(smi, gq.USAGE_FIELDS, 5)
    assert info.value.kind == "failed" and "no usable rows" in str(info.value)


def test_compute_apps_runs_our_query(smi_script):
    smi = smi_script("assert args == %r, args\nprint('4123, 30512, python train.py')" % gq.COMPUTE_APPS_QUERY)
    assert gq.compute_apps(smi, 5) == [{"pid": 4123, "used_memory_mib": 30512, "process_name": "python train.py"}]
