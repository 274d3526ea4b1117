"""preflight_probe main() end to end: the same results as inode_check, gpu_health and env_audit run one by one (the
lab's GPU emulator replays real captures), the GPU sampling overlapping the other checks, wrong parameters named by
check, fail_on and check mode."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ansible_collections.remote_gpu.trainer.plugins.modules import env_audit, gpu_health, inode_check, preflight_probe

REPO = Path(__file__).resolve().parents[4]
EMULATOR = REPO / "tests" / "lab" / "gpu" / "bin" / "nvidia-smi"
SCENARIOS = REPO / "tests" / "lab" / "gpu" / "scenarios"
QUIET_LOG = (REPO / "tests" / "fixtures" / "nvidia" / "xid-logs" /
             "dmesg__no-nvidia-adapter-probed-nouveau-conflict__mattshma-bigdata-133.log")
HINT = "shutdown (power off in the AutoDL console)"
sys.path.insert(0, str(REPO / "tests" / "lab" / "gpu" / "tools"))
from fake_torch import NO_HOPPER, write_fake_torch  # noqa: E402  (the stand-in torch, shared with the playbook tests)


@pytest.fixture
def slow_torch(tmp_path, monkeypatch):
    """A stand-in torch whose import takes ``seconds`` (a real one takes seconds too) and that knows no sm_90."""

    def make(seconds=0.0):
        write_fake_torch(tmp_path / "site", NO_HOPPER, import_seconds=seconds)
        monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    return make


def box(tmp_path, monkeypatch, scenario):
    """A box: the emulator replaying ``scenario``, its kernel log, a home with a data and a durable directory."""
    monkeypatch.setenv("FAKE_GPU_SCENARIO", str(SCENARIOS / scenario))
    home = tmp_path / "home"
    for name in ("data", "durable", ".cache/huggingface"):
        (home / name).mkdir(parents=True, exist_ok=True)
    for number in range(3):
        (home / "data" / ("f%d" % number)).write_text("x")
    monkeypatch.setenv("HOME", str(home))
    log = SCENARIOS / scenario / "kern.log"
    return home, str(log if log.exists() else QUIET_LOG)


def storage_args(home):
    return {"paths": [str(home / "data"), str(home / "durable"), str(home)],
            "budgets": [{"path": str(home / "data"), "label": "checkpoints x keep + scratch", "bytes": 1024},
                        {"path": str(home / "durable"), "label": "exported files", "inodes": 10}],
            "hf_cache": str(home / ".cache/huggingface"), "hf_home": str(home / "data" / "hf"),
            "durable_dir": str(home / "durable"),
            "storage_tiers": [{"name": "system disk", "path": str(home), "lost_on": ["release"]}]}


def gpu_args(log, **extra):
    args = {"nvidia_smi_path": str(EMULATOR), "kernel_log": log, "sample_seconds": 0, "platform_stop_hint": HINT}
    args.update(extra)
    return args


def without_volatile(result):
    """A check's result without what differs from one run to the next: the sampled values, the bytes and inodes used of a
    shared /tmp."""
    result = dict(result)
    for key in ("changed", "failed", "msg", "invocation"):
        result.pop(key, None)
    if "paths" in result:
        result["paths"] = [dict((key, value) for key, value in usage.items() if not key.startswith(("bytes_", "inodes_")))
                           for usage in result["paths"]]
    if "gpus" in result:
        sampled = ("temperature_c", "sm_clock_mhz", "power_draw_w", "utilization_gpu_pct", "memory_used_mib")
        result["gpus"] = [dict(gpu, **dict.fromkeys(sampled)) for gpu in result["gpus"]]
    return result


@pytest.mark.parametrize("scenario", ["8xh100-hwslowdown", "xid13-gr-exception", "h100-idle", "no-driver"])
def test_the_same_results_as_the_three_modules_one_by_one(module_runner, tmp_path, monkeypatch, cgroup_root,
                                                          slow_torch, scenario):
    slow_torch()
    home, log = box(tmp_path, monkeypatch, scenario)
    env = {"cgroup_root": str(cgroup_root), "proxy_hook": str(tmp_path / "network_turbo")}  # a missing hook
    _failed, storage = module_runner(inode_check, dict(storage_args(home), fail_on="never"))
    _failed, gpu = module_runner(gpu_health, dict(gpu_args(log), fail_on="never"))
    # what preflight.yml passed to env_audit when the checks were three tasks
    names = [g["name"] for g in gpu["gpus"]]
    env_alone = dict(env, driver_cuda_version=gpu["cuda_version"], gpus_expected=bool(gpu["gpus"]), gpu_names=names,
                     fail_on="never")
    if not gpu["cuda_version"]:
        del env_alone["driver_cuda_version"]
    _failed, audit = module_runner(env_audit, env_alone)

    failed, probe = module_runner(preflight_probe, {"storage": storage_args(home), "gpu": gpu_args(log), "env": env,
                                                    "fail_on": "never"})
    assert not failed and probe["changed"] is False, probe
    assert without_volatile(probe["inode_check"]) == without_volatile(storage)
    assert without_volatile(probe["gpu_health"]) == without_volatile(gpu)
    assert without_volatile(probe["env_audit"]) == without_volatile(audit)
    statuses = {storage["status"], gpu["status"], audit["status"]}
    assert probe["status"] == ("FAIL" if "FAIL" in statuses else "WARN" if "WARN" in statuses else "PASS")
    assert set(probe["seconds"]) == {"storage", "gpu", "env", "total"}


def test_the_gpu_sampling_overlaps_the_other_checks(module_runner, tmp_path, monkeypatch, cgroup_root, slow_torch):
    """GPU sampling of 3 s and a torch import of 2 s take about 3 s together, not 5."""
    slow_torch(2.0)
    home, log = box(tmp_path, monkeypatch, "h100-idle")
    failed, probe = module_runner(preflight_probe, {"storage": storage_args(home),
                                                    "gpu": gpu_args(log, sample_seconds=3),
                                                    "env": {"cgroup_root": str(cgroup_root)}, "fail_on": "never"})
    assert not failed, probe
    seconds = probe["seconds"]
    assert probe["gpu_health"]["samples"] == 5 and seconds["gpu"] >= 3 and seconds["env"] >= 2
    assert seconds["total"] < seconds["gpu"] + seconds["env"] - 1.5, seconds  # sequential, it would be their sum


def test_the_gpu_facts_reach_the_environment_audit(module_runner, tmp_path, monkeypatch, cgroup_root, slow_torch):
    """The H100's name reaches the arch check (a build without sm_90 is torch_arch_unsupported), the driver's CUDA
    version the torch check; given explicitly, they win."""
    slow_torch()
    home, log = box(tmp_path, monkeypatch, "h100-idle")
    args = {"storage": storage_args(home), "gpu": gpu_args(log), "env": {"cgroup_root": str(cgroup_root)},
            "fail_on": "never"}
    _failed, probe = module_runner(preflight_probe, args)
    codes = [f["code"] for f in probe["env_audit"]["findings"]]
    assert "torch_arch_unsupported" in codes, probe["env_audit"]["findings"]
    assert probe["gpu_health"]["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"
    args["env"].update(gpu_names=["NVIDIA GeForce RTX 3090"], gpus_expected=True)
    _failed, probe = module_runner(preflight_probe, args)
    assert "torch_arch_unsupported" not in [f["code"] for f in probe["env_audit"]["findings"]]


@pytest.mark.parametrize("check, args, message", [
    ("storage", {"paths": [""]}, "storage: paths entry 1 is empty"),
    ("storage", {"paths": ["/"], "warn_pct": 96, "fail_pct": 95}, "storage: warn_pct (96) and fail_pct (95)"),
    ("gpu", {"sample_seconds": -1}, "gpu: sample_seconds must be a number from 0 to 600"),
    ("gpu", {"expected_name": "H100("}, "gpu: expected_name is not a valid regular expression"),
    ("env", {"torch_timeout": 0}, "env: torch_timeout must be a positive number"),
    # typed by the check's own module spec: a wrong type or an unknown key is refused the same way
    ("storage", {"warn_pct": "lots"}, "storage: argument 'warn_pct' is of type str and we were unable to convert"),
    ("gpu", {"sample_second": 1}, "gpu: unsupported parameters: sample_second. Supported parameters include"),
    ("env", {"gpus_expected": "perhaps"}, "env: argument 'gpus_expected' is of type str"),
])
def test_a_wrong_parameter_names_its_check_and_nothing_runs(module_runner, tmp_path, check, args, message):
    params = {"storage": {"paths": [str(tmp_path)]}, "gpu": {"nvidia_smi_path": str(tmp_path / "absent")},
              "env": {"torch": False}}
    params[check] = dict(params[check], **args)
    failed, result = module_runner(preflight_probe, params)
    assert failed and result["msg"].startswith(message), result["msg"]
    assert result["status"] == "FAIL" and result["inode_check"] is None and result["gpu_health"] is None
    assert result["env_audit"] is None and result["changed"] is False


def test_a_check_that_fails_while_it_runs_fails_the_probe_with_the_others_results(module_runner, tmp_path,
                                                                                  cgroup_root):
    """A kernel log that is a directory is a wrong parameter found when the GPU check reads it."""
    failed, result = module_runner(preflight_probe, {
        "storage": {"paths": [str(tmp_path)]},
        "gpu": {"nvidia_smi_path": str(tmp_path / "absent"), "kernel_log": str(tmp_path)},
        "env": {"torch": False, "cgroup_root": str(cgroup_root)}})
    assert failed and result["msg"].startswith("gpu: kernel_log %s is a directory" % tmp_path), result["msg"]
    assert result["gpu_health"] is None and result["status"] == "FAIL"
    assert result["inode_check"]["paths"][0]["path"] == str(tmp_path)
    assert result["env_audit"]["cgroup"]["memory_max"] == 1073741824


def test_fail_on_fails_with_the_worst_finding_gpu_first(module_runner, tmp_path, monkeypatch, cgroup_root):
    home, log = box(tmp_path, monkeypatch, "8xh100-hwslowdown")
    args = {"storage": storage_args(home), "gpu": gpu_args(log), "env": {"torch": False, "cgroup_root": str(cgroup_root)}}
    failed, result = module_runner(preflight_probe, args)
    assert failed and result["msg"].startswith("throttle_active: GPU 0 (NVIDIA H100 80GB HBM3"), result["msg"]
    assert result["status"] == "FAIL" and result["gpu_health"]["status"] == "FAIL"
    failed, result = module_runner(preflight_probe, dict(args, fail_on="never"))
    assert not failed and result["status"] == "FAIL"


def test_check_mode_runs_the_read_only_checks(module_runner, tmp_path, monkeypatch, cgroup_root):
    home, log = box(tmp_path, monkeypatch, "h100-idle")
    failed, result = module_runner(preflight_probe, {
        "storage": storage_args(home), "gpu": gpu_args(log), "env": {"torch": False, "cgroup_root": str(cgroup_root)},
        "fail_on": "never", "_ansible_check_mode": True})
    assert not failed and result["changed"] is False
    assert result["gpu_health"]["gpus"] and result["inode_check"]["paths"] and result["env_audit"]["cgroup"]


def test_omitted_gpu_and_env_take_every_default(module_runner, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi, no journalctl, no dmesg
    failed, result = module_runner(preflight_probe, {"storage": {"paths": [str(tmp_path)]}, "fail_on": "never"})
    assert not failed, result
    assert [f["code"] for f in result["gpu_health"]["findings"]][:1] == ["driver_unavailable"]
    assert result["env_audit"]["proxy_hook"] == {"path": None, "present": None}


def test_stat_answers_as_ansible_stat_without_following_links(module_runner, tmp_path, monkeypatch):
    """The option stat against ansible.builtin.stat (follow=false) itself, on a file, a directory, a link (dangling),
    a link to a directory, an absent path, a path under a file, and ~ (the answer keyed by the path as given)."""
    from ansible.modules import stat as ansible_stat
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "hook").write_text("export http_proxy=http://127.0.0.1:1\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "to-logs").symlink_to(tmp_path / "logs")
    paths = [str(tmp_path / name) for name in ("hook", "logs", "dangling", "to-logs", "absent", "hook/under")]
    failed, result = module_runner(preflight_probe, {"storage": {"paths": [str(tmp_path)]}, "gpu": gpu_args(str(QUIET_LOG)),
                                                     "env": {"torch": False}, "stat": paths + ["~/hook"],
                                                     "fail_on": "never"})
    assert not failed, result
    assert list(result["stat"]) == paths + ["~/hook"]
    for path in paths[:-1]:
        stat_failed, theirs = module_runner(ansible_stat, {"path": path, "follow": False, "get_checksum": False})
        assert not stat_failed, theirs
        ours = result["stat"][path]
        assert ours["exists"] == theirs["stat"]["exists"], path
        for key in ("isreg", "isdir", "islnk", "lnk_target"):
            assert ours[key] == theirs["stat"].get(key, ours[key] if not ours["exists"] else None), (path, key)
    # under a file: ansible.builtin.stat fails the task ("Not a directory"); here it does not exist, and launch says
    # what is missing instead
    stat_failed, theirs = module_runner(ansible_stat, {"path": paths[-1], "follow": False})
    assert stat_failed and theirs["msg"] == "Not a directory" and result["stat"][paths[-1]]["exists"] is False
    assert result["stat"]["~/hook"] == result["stat"][paths[0]] and result["stat"][paths[0]]["isreg"]
    assert result["stat"][paths[3]]["lnk_target"] == str(tmp_path / "logs") and not result["stat"][paths[3]]["isdir"]


def test_stat_refuses_relative_or_too_many_paths_and_names_one_it_cannot_look_at(module_runner, tmp_path):
    base = {"storage": {"paths": [str(tmp_path)]}, "gpu": {"nvidia_smi_path": str(tmp_path / "absent")},
            "env": {"torch": False}, "fail_on": "never"}
    failed, result = module_runner(preflight_probe, dict(base, stat=["etc/network_turbo"]))
    assert failed and result["msg"].startswith("stat: 'etc/network_turbo' is not an absolute path"), result["msg"]
    assert result["inode_check"] is None and result["stat"] == {}
    failed, result = module_runner(preflight_probe, dict(base, stat=["/x%d" % n for n in range(65)]))
    assert failed and result["msg"].startswith("stat: at most 64 paths, got 65"), result["msg"]
    long_name = str(tmp_path / ("x" * 300))  # past NAME_MAX: lstat fails with ENAMETOOLONG, for root too
    failed, result = module_runner(preflight_probe, dict(base, stat=[long_name]))
    assert failed and result["msg"] == "stat: cannot look at %s: File name too long" % long_name, result["msg"]
    assert result["inode_check"]["paths"]  # the other checks' results are kept


def jobs_python(tmp_path, packages):
    """A Python for the jobs (a wrapper around this one) that finds ``packages`` on its own path only."""
    site = tmp_path / "jobs-site"
    for package in packages:
        (site / package.replace(".", "/")).mkdir(parents=True, exist_ok=True)
        (site / package.replace(".", "/") / "__init__.py").write_text("")
    wrapper = tmp_path / "jobs-python"
    wrapper.write_text('#!/bin/sh\nPYTHONPATH=%s exec %s "$@"\n' % (site, sys.executable))
    wrapper.chmod(0o755)
    return str(wrapper)


def test_python_modules_are_looked_for_in_the_jobs_python_in_the_same_run(module_runner, tmp_path):
    base = {"storage": {"paths": [str(tmp_path)]}, "gpu": {"nvidia_smi_path": str(tmp_path / "absent")},
            "env": {"torch": False}, "fail_on": "never"}
    python = jobs_python(tmp_path, ["hf_transfer", "vendor.fast"])
    failed, result = module_runner(preflight_probe, dict(base, python_modules=["hf_transfer", "vendor.fast", "absent_mod",
                                                                               "json"],
                                                         python_modules_interpreter=python))
    assert not failed, result
    assert result["python_modules"] == {"hf_transfer": True, "vendor.fast": True, "absent_mod": False, "json": True}
    # this module's own Python does not have the jobs' package
    failed, result = module_runner(preflight_probe, dict(base, python_modules=["hf_transfer"]))
    assert not failed and result["python_modules"] == {"hf_transfer": False}, result
    failed, result = module_runner(preflight_probe, base)
    assert not failed and result["python_modules"] == {}


@pytest.mark.parametrize("options, message", [
    ({"python_modules": ["hf-transfer"]}, "python_modules: 'hf-transfer' is not a Python module's dotted name"),
    ({"python_modules": ["m%d" % n for n in range(17)]}, "python_modules: at most 16 names, got 17"),
    ({"python_modules": ["x"], "python_modules_interpreter": "-c"}, "python_modules_interpreter: '-c' is not"),
])
def test_python_modules_refuses_what_is_not_a_module_name_before_anything_runs(module_runner, tmp_path, options,
                                                                               message):
    base = {"storage": {"paths": [str(tmp_path)]}, "env": {"torch": False}, "fail_on": "never"}
    failed, result = module_runner(preflight_probe, dict(base, **options))
    assert failed and result["msg"].startswith(message), result["msg"]
    assert result["inode_check"] is None


def test_a_jobs_python_that_cannot_run_fails_the_probe_naming_it(module_runner, tmp_path):
    base = {"storage": {"paths": [str(tmp_path)]}, "gpu": {"nvidia_smi_path": str(tmp_path / "absent")},
            "env": {"torch": False}, "fail_on": "never"}
    missing = str(tmp_path / "envs" / "train" / "bin" / "python")
    failed, result = module_runner(preflight_probe, dict(base, python_modules=["hf_transfer"],
                                                         python_modules_interpreter=missing))
    assert failed and result["msg"].startswith("python_modules: %s could not be asked (rc 127)" % missing), result
    assert result["inode_check"]["paths"] and result["python_modules"] == {}
