"""job_status and preflight_probe through their actions on localhost: without AnsiballZ where Ansible pipelines
them, through AnsiballZ otherwise, with the same result either way (plugin_utils/direct). The job is a real
detached job."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from pbhelpers import LOCAL_INVENTORY, REPO, VENV_BIN, ansible_env

DIRECT = "job_status runs without AnsiballZ"
ANSIBALLZ = "job_status runs through AnsiballZ: "
# what changes between two probes a moment apart: the disks' counters, the log's age
VOLATILE = ("bytes_free", "bytes_used", "inodes_free", "inodes_used", "bytes_pct", "inodes_pct", "log_age_seconds")


def adhoc(inventory, module, args, *options, pipelining=True, **env):
    """(rc, result, -vvv output) of one ad-hoc run of ``module`` on localhost; pipelining as an extra variable, as a
    user turns it off for a run (the profiles' group_vars/all.yml turns it on for every host, over ansible.cfg)."""
    proc = subprocess.run([str(VENV_BIN / "ansible"), "-i", str(inventory), "localhost", "-vvv", "-o",
                           "-m", module, "-a", json.dumps(args), "-e", "ansible_pipelining=%s" % pipelining, *options],
                          capture_output=True, text=True, env=ansible_env(**env), timeout=120, check=False)
    line = next((line for line in proc.stdout.splitlines() if line.startswith("localhost | ")), "")
    assert " => " in line, proc.stdout + proc.stderr
    return proc.returncode, json.loads(line.split(" => ", 1)[1]), proc.stdout


def stable(value):
    """``value`` without the keys that change from one probe to the next, nor the module's invocation echo, nor
    the findings' messages (they quote the disks' counters)."""
    if isinstance(value, dict):
        return {key: stable(item) for key, item in value.items()
                if key not in VOLATILE + ("invocation",) and not (key == "message" and "code" in value)}
    if isinstance(value, list):
        return [stable(item) for item in value]
    return value


def codes(check):
    return [finding["code"] for finding in check["findings"]]


@pytest.fixture(scope="module")
def finished_job(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("direct") / "jobs"
    command = ('mkdir -p "$TRAINER_ITEMS_DIR/001" && echo \'{"item": "001", "exit_code": 0}\' > '
               '"$TRAINER_ITEMS_DIR/001/status.json"; echo "epoch 1"; echo "epoch 2"')
    args = {"name": "train", "run_dir": str(run_dir), "command": command, "detach": "nohup"}
    proc = subprocess.run([str(VENV_BIN / "ansible"), "-i", str(LOCAL_INVENTORY), "localhost", "-m",
                           "remote_gpu.trainer.detached_job", "-a", json.dumps(args)],
                          capture_output=True, text=True, env=ansible_env(), timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    deadline = time.monotonic() + 20
    while not (run_dir / "train" / "status.json").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    return run_dir


def probe_args(run_dir, **extra):
    return dict({"name": "train", "queue_length": 1, "run_dir": str(run_dir), "paths": [str(run_dir), "~"],
                 "fail_on": "never"}, **extra)


def test_both_ways_give_the_same_result(local_inventory, finished_job):
    rc, direct, out = adhoc(local_inventory, "remote_gpu.trainer.job_status", probe_args(finished_job))
    assert rc == 0 and DIRECT in out, out
    rc, zipped, out = adhoc(local_inventory, "remote_gpu.trainer.job_status", probe_args(finished_job),
                            pipelining=False)
    assert rc == 0 and ANSIBALLZ + "pipelining is off" in out, out
    assert stable(direct) == stable(zipped)
    assert direct["jobs"][0]["final_status"] is not None and direct["jobs"][0]["items_done"] == 1
    assert direct["paths"][1]["path"] not in ("~", "") and not direct["paths"][1]["path"].startswith("~")


def test_check_mode_runs_without_ansiballz_too(local_inventory, finished_job):
    rc, result, out = adhoc(local_inventory, "remote_gpu.trainer.job_status", probe_args(finished_job), "--check")
    assert rc == 0 and DIRECT in out and result["jobs"][0]["items_done"] == 1, out


def test_arguments_that_do_not_validate_are_reported_by_the_module_itself(local_inventory, finished_job):
    bad = probe_args(finished_job, jobs=[{"name": "other"}], stale_minutes="soon")
    rc, direct, out = adhoc(local_inventory, "remote_gpu.trainer.job_status", bad)
    assert rc != 0 and ANSIBALLZ + "the arguments do not validate" in out, out
    rc, zipped, _out = adhoc(local_inventory, "remote_gpu.trainer.job_status", bad, pipelining=False)
    assert direct["msg"] == zipped["msg"] and "mutually exclusive" in direct["msg"]


def test_a_host_whose_python_is_not_known_yet_is_discovered_through_ansiballz(tmp_path, finished_job):
    inventory = tmp_path / "hosts.yml"
    # no ansible_python_interpreter: discovery, here limited to this Python (a machine may have broken shims)
    inventory.write_text("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
                         "      ansible_interpreter_python_fallback: [%s]\n" % json.dumps(sys.executable))
    rc, result, out = adhoc(inventory, "remote_gpu.trainer.job_status", probe_args(finished_job))
    assert rc == 0 and ANSIBALLZ + "the host's Python is discovered first" in out, out
    assert result["jobs"][0]["items_done"] == 1


def test_preflight_probe_both_ways_gives_the_same_checks(local_inventory, tmp_path):
    # `~` is a home of the test's own, and Ansible's temporary files live outside it: the AnsiballZ run writes
    # ~/.ansible/tmp by default, which would change the home's largest inode consumers between the two probes
    home, data = tmp_path / "home", tmp_path / "data"
    (home / ".cache").mkdir(parents=True)
    (data / "ckpt").mkdir(parents=True)
    (data / "ckpt" / "a.pt").write_bytes(b"x" * 10)
    env = {"HOME": str(home), "ANSIBLE_REMOTE_TMP": str(tmp_path / "remote-tmp"),
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "local-tmp")}
    args = {"storage": {"paths": [str(data), "~"], "budgets": [{"path": "~", "bytes": "1024", "label": "x"}]},
            "gpu": {"sample_seconds": 0}, "env": {"torch": False}, "fail_on": "never"}
    rc, direct, out = adhoc(local_inventory, "remote_gpu.trainer.preflight_probe", args, **env)
    assert rc == 0 and "preflight_probe runs without AnsiballZ" in out, out
    rc, zipped, out = adhoc(local_inventory, "remote_gpu.trainer.preflight_probe", args, pipelining=False, **env)
    assert rc == 0 and "preflight_probe runs through AnsiballZ: pipelining is off" in out, out
    assert stable(direct["inode_check"]) == stable(zipped["inode_check"])
    assert direct["inode_check"]["paths"][1]["path"] == zipped["inode_check"]["paths"][1]["path"] == str(home)
    assert direct["inode_check"]["paths"][0]["top"] == [{"path": str(data / "ckpt"), "inodes": 2}]
    assert codes(direct["gpu_health"]) == codes(zipped["gpu_health"])
    assert direct["env_audit"]["status"] == zipped["env_audit"]["status"] and direct["status"] == zipped["status"]


def test_preflight_probe_arguments_that_do_not_validate_are_reported_by_the_module_itself(local_inventory):
    args = {"storage": {"paths": ["/tmp"], "warn_pct": "many"}, "fail_on": "never"}
    rc, direct, out = adhoc(local_inventory, "remote_gpu.trainer.preflight_probe", args)
    assert rc != 0 and "preflight_probe runs through AnsiballZ: the arguments do not validate" in out, out
    assert direct["msg"].startswith("storage: ")


# A probe's action with one step of its direct run broken as a change of ansible-core's private API would break it:
# run as the legacy action of a legacy module job_status (the collection's own module, linked), so that the
# collection's action stays as it is.
SABOTAGE = {
    "preparation": ("    def shebang(self, task_vars):\n"
                    "        raise KeyError('_get_shebang is gone')\n",
                    "preparing its direct run failed (KeyError: '_get_shebang is gone')"),
    "the command": ("    def _compute_environment_string(self, *args, **kwargs):\n"
                    "        if not self.broken:\n"
                    "            self.broken = True\n"
                    "            raise TypeError('a new signature')\n"
                    "        return super()._compute_environment_string(*args, **kwargs)\n",
                    "preparing its direct run failed (TypeError: a new signature)"),
    "the parser raises": ("    def _parse_returned_data(self, *args, **kwargs):\n"
                          "        if not self.broken:\n"
                          "            self.broken = True\n"
                          "            raise RuntimeError('a new parser')\n"
                          "        return super()._parse_returned_data(*args, **kwargs)\n",
                          "parsing its direct run's result failed (RuntimeError: a new parser)"),
    "the parser gives something unknown": ("    def _parse_returned_data(self, *args, **kwargs):\n"
                                           "        if not self.broken:\n"
                                           "            self.broken = True\n"
                                           "            return object()\n"
                                           "        return super()._parse_returned_data(*args, **kwargs)\n",
                                           "parsing its direct run's result failed (AttributeError: "),
    "the host prints no module result": ("    def direct_command(self, task_vars):\n"
                                         "        command, _text = super().direct_command(task_vars)\n"
                                         "        return command, 'print(\"Traceback: a runner that broke\")'\n",
                                         "its output is not a module result (Module result deserialization "
                                         "failed"),
}


@pytest.mark.parametrize("case", sorted(SABOTAGE))
def test_a_broken_private_api_step_falls_back_to_ansiballz_without_a_failed_task(case, tmp_path, local_inventory,
                                                                                 finished_job):
    code, why = SABOTAGE[case]
    (tmp_path / "action").mkdir()
    (tmp_path / "library").mkdir()
    (tmp_path / "action" / "job_status.py").write_text(
        "from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.direct import DirectAction\n\n\n"
        "class ActionModule(DirectAction):\n    MODULE = 'job_status'\n    broken = False\n\n" + code)
    (tmp_path / "library" / "job_status.py").symlink_to(REPO / "plugins" / "modules" / "job_status.py")
    rc, result, out = adhoc(local_inventory, "job_status", probe_args(finished_job),
                            ANSIBLE_ACTION_PLUGINS=str(tmp_path / "action"), ANSIBLE_LIBRARY=str(tmp_path / "library"))
    assert rc == 0 and ANSIBALLZ + why in out, out
    assert out.count("job_status runs through AnsiballZ") == 1, out
    assert not result.get("failed") and result["jobs"][0]["items_done"] == 1, result
    assert result["jobs"][0]["final_status"] is not None


# launch's writers: write_files (the job environment, the scripts) and detached_job (the queue runner's start)
def written(root):
    """{relative path: (mode, content or link target)} of everything under ``root``."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            what = str(path.readlink())
        else:
            what = None if path.is_dir() else path.read_text()
        found[str(path.relative_to(root))] = (oct(path.lstat().st_mode & 0o7777), what)
    return found


def write_args(root):
    return {"directories": [str(root / "env"), {"path": str(root / "env" / "jobenv.d"), "mode": "0750"}],
            "files": [{"path": str(root / "env" / "jobenv.d" / "10-proxy.sh"), "content": "export A=1\n"},
                      {"path": str(root / "run.sh"), "content": "#!/bin/bash\necho run\n", "mode": "0700",
                       "force": False}],
            "links": [{"path": str(root / "tb"), "src": str(root / "env")}]}


@pytest.mark.parametrize("pipelining", [True, False])
def test_write_files_both_ways_writes_the_same_and_says_the_same(pipelining, tmp_path, local_inventory):
    root = tmp_path / "box"
    way = "write_files runs without AnsiballZ" if pipelining else "write_files runs through AnsiballZ: pipelining is off"
    rc, checked, out = adhoc(local_inventory, "remote_gpu.trainer.write_files", write_args(root), "--check", "--diff",
                             pipelining=pipelining)
    assert rc == 0 and way in out and checked["changed"] and not root.exists(), out
    rc, first, out = adhoc(local_inventory, "remote_gpu.trainer.write_files", write_args(root), pipelining=pipelining)
    assert rc == 0 and way in out and first["changed"], out
    rc, again, out = adhoc(local_inventory, "remote_gpu.trainer.write_files", write_args(root), pipelining=pipelining)
    assert rc == 0 and way in out and not again["changed"], out
    assert written(root) == {"env": ("0o700", None), "env/jobenv.d": ("0o750", None),
                             "env/jobenv.d/10-proxy.sh": ("0o644", "export A=1\n"),
                             "run.sh": ("0o700", "#!/bin/bash\necho run\n"), "tb": ("0o777", str(root / "env"))}
    # what the check said it would do is what the run did; --diff shows the files' contents
    assert [entry["after"] for entry in checked.pop("diff")] == ["export A=1\n", "#!/bin/bash\necho run\n"]
    assert stable(checked) == stable(first)


def test_detached_job_both_ways_starts_a_job_whose_wrapper_records_its_end(tmp_path, local_inventory):
    run_dir = tmp_path / "jobs"
    for name, pipelining in (("direct", True), ("zipped", False)):
        args = {"name": name, "run_dir": str(run_dir), "command": "echo $GREETING", "env": {"GREETING": "hi"},
                "detach": "nohup", "state": "restarted"}
        rc, result, out = adhoc(local_inventory, "remote_gpu.trainer.detached_job", args, pipelining=pipelining)
        assert rc == 0 and result["changed"], out
        assert ("detached_job runs without AnsiballZ" in out) is pipelining, out
    deadline = time.monotonic() + 20
    while not all((run_dir / name / "status.json").exists() for name in ("direct", "zipped")):
        assert time.monotonic() < deadline, "a job's wrapper wrote no status.json"
        time.sleep(0.2)
    for name in ("direct", "zipped"):
        assert json.loads((run_dir / name / "status.json").read_text())["exit_code"] == 0
        assert "hi" in (run_dir / name / "job.log").read_text()
    # the job's library, copied from the modules that ran: the direct run's is the same code without its comments
    direct_lib, zipped_lib = (written(run_dir / name / "lib") for name in ("direct", "zipped"))
    assert sorted(direct_lib) == sorted(zipped_lib) and direct_lib != zipped_lib


def test_a_writer_whose_result_cannot_be_read_fails_and_is_not_run_twice(tmp_path, local_inventory):
    (tmp_path / "action").mkdir()
    (tmp_path / "library").mkdir()
    (tmp_path / "action" / "write_files.py").write_text(
        "from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.direct import DirectAction\n\n\n"
        "class ActionModule(DirectAction):\n    MODULE = 'write_files'\n    READ_ONLY = False\n\n"
        "    def _parse_returned_data(self, *args, **kwargs):\n        raise RuntimeError('a new parser')\n")
    (tmp_path / "library" / "write_files.py").symlink_to(REPO / "plugins" / "modules" / "write_files.py")
    target = tmp_path / "box" / "once.txt"
    args = {"directories": [str(target.parent)], "files": [{"path": str(target), "content": "once\n"}]}
    rc, result, out = adhoc(local_inventory, "write_files", args, ANSIBLE_ACTION_PLUGINS=str(tmp_path / "action"),
                            ANSIBLE_LIBRARY=str(tmp_path / "library"))
    assert rc != 0 and "FAILED!" in out and "runs through AnsiballZ" not in out, out
    assert result["msg"].startswith("write_files ran on the host without AnsiballZ, but its result cannot be read "
                                    "(parsing its direct run's result failed (RuntimeError: a new parser))")
    assert "it is not run a second time" in result["msg"]
    assert target.read_text() == "once\n"
