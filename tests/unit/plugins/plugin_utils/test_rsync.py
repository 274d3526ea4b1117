"""The one owner of the rsync and ssh argv between the controller and a box."""

from __future__ import annotations

import re
from unittest.mock import MagicMock

import pytest

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import rsync

FLAGS = ["-a", "--partial"]


def connection(transport="ssh", **options):
    conn = MagicMock()
    conn.transport = transport
    conn.get_option.side_effect = options.get
    return conn


def remote():
    return rsync.Target(address="10.0.0.5", user="root", port=2222, private_key_file="/keys/box",
                        ssh_args=["-o", "StrictHostKeyChecking=yes"])


def test_ssh_argv_never_prompts_and_carries_port_key_and_extra_args():
    assert remote().ssh_argv() == ["ssh", "-o", "BatchMode=yes", "-p", "2222", "-i", "/keys/box",
                                   "-o", "StrictHostKeyChecking=yes"]
    assert rsync.Target(address="box").ssh_argv() == ["ssh", "-o", "BatchMode=yes"]


def test_spec_names_user_and_host_or_only_the_path_for_the_controller():
    assert remote().spec("/root/runs/exp42/") == "root@10.0.0.5:/root/runs/exp42/"
    assert rsync.Target(address="box").spec("/data") == "box:/data"
    local = rsync.Target()
    assert local.is_local and not remote().is_local
    assert local.spec("/data") == "/data"


def test_rsync_argv_for_a_pull_from_the_box():
    argv = rsync.rsync_argv(FLAGS, remote(), "/root/runs/exp42/", "/pulls/box/exp42/data/", pushing=False)
    assert argv == ["rsync", "-a", "--partial", "--protect-args",
                    "-e", "ssh -o BatchMode=yes -p 2222 -i /keys/box -o StrictHostKeyChecking=yes",
                    "--", "root@10.0.0.5:/root/runs/exp42/", "/pulls/box/exp42/data/"]


def test_rsync_argv_for_a_push_to_the_box_quotes_the_ssh_command():
    target = rsync.Target(address="box", port=22, private_key_file="/keys/my key",
                          ssh_args=["-o", "ProxyCommand=ssh -W %h:%p jump"])
    argv = rsync.rsync_argv(["-a"], target, "/src/code/", "/root/code/", pushing=True)
    assert argv[:3] == ["rsync", "-a", "--protect-args"]
    assert argv[3:5] == ["-e", "ssh -o BatchMode=yes -p 22 -i '/keys/my key' -o 'ProxyCommand=ssh -W %h:%p jump'"]
    assert argv[5:] == ["--", "/src/code/", "box:/root/code/"]


def test_rsync_argv_for_the_controller_itself_has_no_ssh():
    assert rsync.rsync_argv(FLAGS, rsync.Target(), "/a/", "/b/", pushing=False) == [
        "rsync", "-a", "--partial", "--protect-args", "--", "/a/", "/b/"]


def test_a_path_that_looks_like_an_option_stays_a_path():
    argv = rsync.rsync_argv(FLAGS, rsync.Target(), "--delete-everything", "/b/", pushing=True)
    assert argv.index("--") < argv.index("--delete-everything")


def test_target_from_an_ssh_connection(monkeypatch):
    monkeypatch.setenv("HOME", "/home/me")
    conn = connection(host="10.0.0.5", remote_user="ubuntu", port=2222, private_key_file="~/.ssh/box",
                      ssh_common_args="-o StrictHostKeyChecking=yes", ssh_extra_args="-o 'IdentitiesOnly yes'")
    target = rsync.Target.from_connection(conn, {"ansible_user": "ignored"})
    assert (target.address, target.user, target.port) == ("10.0.0.5", "ubuntu", 2222)
    assert target.private_key_file == "/home/me/.ssh/box"
    assert target.ssh_args == ["-o", "StrictHostKeyChecking=yes", "-o", "IdentitiesOnly yes"]


def test_target_from_a_connection_without_user_or_key_falls_back_to_ansible_user():
    target = rsync.Target.from_connection(connection(host="box"), {"ansible_user": "root"})
    assert target.user == "root" and target.private_key_file is None and target.port is None
    assert target.ssh_args == []


@pytest.mark.parametrize("transport", ["local", "ansible.builtin.local"])
def test_target_from_a_local_connection_is_the_controller(transport):
    conn = connection(transport, host="ignored")
    assert rsync.Target.from_connection(conn, {}).is_local
    conn.get_option.assert_not_called()


@pytest.mark.parametrize("outcome, message", [
    ((127, "", "rsync: No such file or directory"), "rsync is not installed on the controller"),
    ((None, "", "timed out"), "did not finish within 30 s; run again: --partial resumes"),
    ((23, "", "some files vanished\n"), "rsync of box:/x failed (exit 23): some files vanished. Run again"),
])
def test_run_rsync_failures_say_what_to_do(monkeypatch, outcome, message):
    monkeypatch.setattr(rsync, "run_with_timeout", lambda argv, timeout: outcome)
    with pytest.raises(rsync.RsyncError, match=re.escape(message)):
        rsync.run_rsync(["rsync"], 30, "box:/x")


def test_run_rsync_returns_stdout(monkeypatch):
    seen = []

    def ran(argv, timeout):
        seen.append((argv, timeout))
        return 0, "ok\n", ""
    monkeypatch.setattr(rsync, "run_with_timeout", ran)
    assert rsync.run_rsync(["rsync", "-a"], 30, "x") == "ok\n"
    assert seen == [(["rsync", "-a"], 30)]


@pytest.mark.parametrize("path, absolute, message", [
    ("", True, "src is empty"),
    ("   ", False, "src is empty"),
    ("/", True, "root of the filesystem"),
    ("//", True, "root of the filesystem"),
    ("/./.", True, "root of the filesystem"),
    ("--log-file=/tmp/x", True, "is not an absolute path"),
    ("runs/exp42", True, "is not an absolute path"),
    ("~/runs", True, "is not an absolute path"),
    ("/root/runs/../..", True, "has a .. part"),
    ("../up", False, "has a .. part"),
    ("/root/a\nb", True, "holds a newline"),
    ("/root/a\rb", True, "holds a carriage return"),
    ("/root/a\0b", True, "holds a NUL byte"),
])
def test_check_path_refuses_what_must_not_reach_rsync(path, absolute, message):
    with pytest.raises(rsync.RsyncError, match=re.escape(message)):
        rsync.check_path(path, "src", absolute=absolute)


def test_check_path_passes_plain_paths_unchanged():
    assert rsync.check_path("/root/runs/exp 42/", "src") == "/root/runs/exp 42/"
    assert rsync.check_path("-rf", "src", absolute=False) == "-rf"  # a relative controller path stays after --


@pytest.mark.parametrize("timeout", [0, -1, -0.5, None, "10", True])
def test_check_timeout_refuses_what_would_kill_rsync_at_once(timeout):
    with pytest.raises(rsync.RsyncError, match="timeout must be a positive number of seconds"):
        rsync.check_timeout(timeout)
    assert rsync.check_timeout(1) == 1


def test_rsync_argv_checks_both_operands_first():
    with pytest.raises(rsync.RsyncError, match="the source is empty"):
        rsync.rsync_argv(FLAGS, remote(), "", "/pulls/x/", pushing=False)
    with pytest.raises(rsync.RsyncError, match="the destination '-e sh' is not an absolute path"):
        rsync.rsync_argv(FLAGS, remote(), "/src/", "-e sh", pushing=True)
    with pytest.raises(rsync.RsyncError, match="the source is '/', the root of the filesystem"):
        rsync.rsync_argv(FLAGS, remote(), "/", "/pulls/x/", pushing=False)


def test_run_rsync_refuses_a_timeout_of_zero_before_running(monkeypatch):
    monkeypatch.setattr(rsync, "run_with_timeout", lambda argv, timeout: pytest.fail("rsync ran"))
    with pytest.raises(rsync.RsyncError, match="timeout must be a positive"):
        rsync.run_rsync(["rsync"], 0, "x")


def ssh_connection(tmp_path, **variables):
    """ansible-core's own ssh connection plugin, its options set from ``variables`` as a task's host would (its
    ssh_args ansible-core's default unless given)."""
    from ansible.playbook.play_context import PlayContext
    from ansible.plugins.loader import connection_loader, init_plugin_loader
    from ansible.utils.collection_loader import AnsibleCollectionConfig
    if AnsibleCollectionConfig.collection_finder is None:
        init_plugin_loader()
    context = PlayContext()
    context.remote_addr = variables.get("ansible_host")
    conn = connection_loader.get("ansible.builtin.ssh", context, None)
    conn.set_options(var_options=dict({"ansible_control_path_dir": str(tmp_path / "cp"),
                                       "ansible_ssh_args": "-C -o ControlMaster=auto -o ControlPersist=60s"},
                                      **variables))
    return conn


def ansible_control_path(conn):
    """The ControlPath that ansible-core's ssh connection itself puts in its command line."""
    argv = [arg.decode() if isinstance(arg, bytes) else arg for arg in conn._build_command("ssh", "ssh", "box", "true")]
    found = [arg for arg in argv if arg.startswith("ControlPath=")]
    assert len(found) == 1, argv
    return found[0][len("ControlPath="):].strip('"')


@pytest.mark.parametrize("variables", [
    {"ansible_host": "10.0.0.5", "ansible_user": "root", "ansible_port": 2222},
    {"ansible_host": "box.example.org"},
    {"ansible_host": "10.0.0.5", "ansible_user": "ubuntu", "ansible_control_path": "%(directory)s/%%h-%%r"},
])
def test_rsync_runs_over_the_connection_ansible_keeps_open_to_the_box(tmp_path, variables):
    # ansible-core's default ssh_args ask for ControlMaster and ControlPersist; the ControlPath is the one it adds
    conn = ssh_connection(tmp_path, **variables)
    target = rsync.Target.from_connection(conn, {})
    assert "ControlMaster=auto" in target.ssh_args and "ControlPath=%s" % ansible_control_path(conn) in target.ssh_args
    assert target.ssh_argv().count("ControlPath=%s" % ansible_control_path(conn)) == 1


def test_a_controlpath_of_the_inventory_is_left_as_it_is_and_no_persistence_means_no_socket(tmp_path):
    conn = ssh_connection(tmp_path, ansible_host="box", ansible_ssh_common_args="-o ControlPath=/run/cp/%C")
    assert [arg for arg in rsync.Target.from_connection(conn, {}).ssh_args if "ControlPath" in arg] == [
        "ControlPath=/run/cp/%C"]
    conn = ssh_connection(tmp_path, ansible_host="box", ansible_ssh_args="-o ServerAliveInterval=15")
    assert rsync.Target.from_connection(conn, {}).ssh_args == ["-o", "ServerAliveInterval=15"]


def test_a_connection_whose_control_path_cannot_be_known_connects_on_its_own():
    conn = connection(host="box", ssh_args="-o ControlMaster=auto -o ControlPersist=60s")
    conn._create_control_path.side_effect = TypeError("a new signature")
    assert rsync.Target.from_connection(conn, {}).ssh_args == ["-o", "ControlMaster=auto", "-o", "ControlPersist=60s"]
