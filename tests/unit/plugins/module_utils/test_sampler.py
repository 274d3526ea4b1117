"""The sampler sidecar: one tick with injected readers, and short real runs next to a dummy runner process."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from ansible_collections.remote_gpu.trainer.plugins.module_utils import sampler

HEADER = ["time", "item", "cgroup_memory_bytes", "main_pid", "main_rss_kib", "gpu_util_pct", "gpu_mem_used_mib"]
EPOCH = 1783072800  # 2026-07-03T10:00:00Z


def readers(**changes):
    base = {
        "now": lambda: EPOCH,
        "item": lambda: "007",
        "cgroup_bytes": lambda: 1073741824,
        "main_pid": lambda: 4242,
        "rss_kib": lambda pid: 2048 if pid == 4242 else None,
        "gpus": lambda: [{"utilization_pct": 97, "memory_used_mib": 70211},
                         {"utilization_pct": None, "memory_used_mib": 10}],
    }
    base.update(changes)
    return base


def test_tick_writes_todays_columns():
    line = sampler.tick(readers())
    assert line.endswith("\n")
    assert line.rstrip("\n").split("\t") == ["2026-07-03T10:00:00Z", "007", "1073741824", "4242", "2048",
                                             "97;NA", "70211;10"]
    assert list(sampler.HEADER) == HEADER


def test_tick_unknowns_are_na_and_a_failing_reader_never_raises():
    def boom(*_args):
        raise OSError("unreadable")

    line = sampler.tick(readers(item=lambda: None, cgroup_bytes=boom, main_pid=lambda: None, gpus=lambda: None))
    assert line.rstrip("\n").split("\t") == ["2026-07-03T10:00:00Z", "-", "NA", "NA", "NA", "NA", "NA"]
    line = sampler.tick(readers(rss_kib=boom, gpus=boom, now=boom, item=lambda: "a\tb"))
    cells = line.rstrip("\n").split("\t")
    assert len(cells) == 7 and cells[1] == "a b" and cells[3:] == ["4242", "NA", "NA", "NA"]
    assert sampler.tick(readers(gpus=lambda: [])).rstrip("\n").split("\t")[5:] == ["NA", "NA"]


def test_item_and_main_pid_files(tmp_path):
    assert sampler.read_item(str(tmp_path)) is None and sampler.read_main_pid(str(tmp_path)) is None
    (tmp_path / "current.item").write_text("012\n")
    (tmp_path / "main.pid").write_text("4242\n")
    assert sampler.read_item(str(tmp_path)) == "012" and sampler.read_main_pid(str(tmp_path)) == 4242
    (tmp_path / "main.pid").write_text("not a pid\n")
    assert sampler.read_main_pid(str(tmp_path)) is None


def test_cgroup_memory_of_the_runner(tmp_path):
    proc = tmp_path / "proc"
    (proc / "77").mkdir(parents=True)
    (proc / "77" / "cgroup").write_text("0::/job.scope\n")
    root = tmp_path / "cg"
    (root / "job.scope").mkdir(parents=True)
    reader = sampler.CgroupMemory(77, str(proc), str(root))
    assert reader() is None  # nothing readable yet: NA, and looked for again next time
    (root / "job.scope" / "memory.current").write_text("5242880\n")
    assert reader() == 5242880 and reader.path == str(root / "job.scope" / "memory.current")


def test_run_stops_with_the_runner_and_appends(tmp_path):
    tsv = tmp_path / "samples.tsv"

    def alive_until(rows):
        return lambda: len(tsv.read_text().splitlines()) < rows

    sampler.run(str(tmp_path), 0.01, 1, readers=readers(), alive=alive_until(4))
    rows = tsv.read_text().splitlines()
    assert rows[0].split("\t") == HEADER and len(rows) == 4
    assert rows[1] == sampler.tick(readers()).rstrip("\n")
    sampler.run(str(tmp_path), 0.01, 1, readers=readers(), alive=alive_until(6))
    rows = tsv.read_text().splitlines()
    assert rows.count("\t".join(HEADER)) == 1 and len(rows) == 6  # a relaunch appends, no second header
    sampler.run(str(tmp_path), 0.01, 1, readers=readers(), alive=lambda: False)
    assert len(tsv.read_text().splitlines()) == 6


def run_sampler(job_dir, runner_pid, path_dirs, interval="0.2"):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), PATH=os.pathsep.join(path_dirs))
    module = "ansible_collections.remote_gpu.trainer.plugins.module_utils.sampler"
    argv = [sys.executable, "-m", module, "--job-dir", str(job_dir), "--interval", interval, "--runner-pid",
            str(runner_pid)]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_real_run_without_nvidia_smi_exits_with_the_runner(tmp_path):
    runner = subprocess.Popen(["sleep", "30"])
    main = subprocess.Popen(["sleep", "30"])
    try:
        (tmp_path / "main.pid").write_text("%d\n" % main.pid)
        (tmp_path / "current.item").write_text("003\n")
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()  # a PATH without nvidia-smi
        proc = run_sampler(tmp_path, runner.pid, [str(bin_dir)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            rows = (tmp_path / "samples.tsv").read_text().splitlines() if (tmp_path / "samples.tsv").exists() else []
            if len(rows) >= 3:
                break
            time.sleep(0.1)
        runner.kill()
        runner.wait()
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0 and err == b"" and out == b""
    finally:
        for child in (runner, main):
            if child.poll() is None:
                child.kill()
            child.wait()
    rows = [row.split("\t") for row in (tmp_path / "samples.tsv").read_text().splitlines()]
    assert rows[0] == HEADER and len(rows) >= 3 and all(len(row) == 7 for row in rows)
    for row in rows[1:]:
        assert row[1] == "003" and row[3] == str(main.pid)
        assert row[4].isdigit() and int(row[4]) > 0  # the sleep's VmRSS
        assert row[2] == "NA" or row[2].isdigit()
        assert row[5:] == ["NA", "NA"]


def test_real_run_reads_a_fake_nvidia_smi(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n[ \"$1\" = --query-gpu=utilization.gpu,memory.used ] || exit 2\n"
                   "printf '100, 70211\\n[N/A], 5\\n'\n")
    smi.chmod(0o755)
    runner = subprocess.Popen(["sleep", "30"])
    try:
        proc = run_sampler(tmp_path, runner.pid, [str(bin_dir), "/usr/bin", "/bin"], interval="5")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len((tmp_path / "samples.tsv").read_text().splitlines()
                                                  if (tmp_path / "samples.tsv").exists() else []) < 2:
            time.sleep(0.1)
        started = time.monotonic()
        runner.kill()
        runner.wait()
        proc.communicate(timeout=10)
        assert time.monotonic() - started < 3  # it notices the runner's end within the interval
    finally:
        if runner.poll() is None:
            runner.kill()
        runner.wait()
    row = (tmp_path / "samples.tsv").read_text().splitlines()[1].split("\t")
    assert row[1] == "-" and row[3:5] == ["NA", "NA"] and row[5:] == ["100;NA", "70211;5"]


def test_bad_arguments_are_a_usage_error_not_a_traceback(tmp_path):
    proc = run_sampler(tmp_path, 1, ["/usr/bin", "/bin"], interval="0")
    _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 2 and b"--interval must be more than 0" in err and b"Traceback" not in err
