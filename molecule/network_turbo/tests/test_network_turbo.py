"""network_turbo on the lab fleet: jobs reach the outside through the real proxy and modelscope.cn directly."""

from __future__ import annotations

import pathlib
import sys
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "resources"))
import labenv  # noqa: E402

CONVERGE = labenv.converge(__file__)
testinfra_hosts = labenv.hosts("autodl")
HOOK_VARS = {"http_proxy", "https_proxy", "no_proxy"}


class Handler(labenv.QuietHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        body = ("stand-in answered %s\n" % self.path).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def outside():
    """A small HTTP server on 127.0.0.2 (not in the hook's no_proxy) standing in for an outside host."""
    with labenv.serve(Handler) as port:
        yield port


def proxy_log():
    return pathlib.Path(labenv.fleet()["proxy"]["log"])


def wait_for_log(needle, start):
    for _attempt in range(50):
        text = proxy_log().read_text(errors="replace")[start:]
        if needle in text:
            return text
        time.sleep(0.1)
    return proxy_log().read_text(errors="replace")[start:]


def test_outside_host_through_the_proxy(host, outside):
    start = proxy_log().stat().st_size
    url = "http://127.0.0.2:%d/outside-%s" % (outside, labenv.name(host))
    got = labenv.job(host, "curl -sS -m 10 %s" % url)
    assert got.rc == 0 and got.stdout.strip() == "stand-in answered /outside-%s" % labenv.name(host), got.stderr
    assert url in wait_for_log(url, start)


def test_modelscope_cn_bypasses_the_proxy(host, outside):
    start = proxy_log().stat().st_size
    url = "http://modelscope.cn:%d/domestic-%s" % (outside, labenv.name(host))
    got = labenv.job(host, "curl -sS -m 10 %s" % url)
    assert got.rc == 0 and got.stdout.strip() == "stand-in answered /domestic-%s" % labenv.name(host), got.stderr
    # a marker request through the proxy afterwards, so the log has certainly caught up
    marker = "http://127.0.0.2:%d/marker-%s" % (outside, labenv.name(host))
    assert labenv.job(host, "curl -sS -m 10 %s" % marker).rc == 0
    assert "modelscope.cn" not in wait_for_log(marker, start)


def test_the_hook_alone_sends_modelscope_cn_through_the_proxy(host, outside):
    # the AutoDL trap the role fixes: the hook's own no_proxy misses modelscope.cn
    start = proxy_log().stat().st_size
    url = "http://modelscope.cn:%d/trap-%s" % (outside, labenv.name(host))
    host.run("bash -c '. /etc/network_turbo; curl -sS -m 10 %s'" % url)
    assert "modelscope.cn:%d/trap-" % outside in wait_for_log("trap-", start)


def test_job_sees_exactly_the_hook_variables(host):
    assert labenv.env_changes(host) == HOOK_VARS
    env = labenv.job_env(host, ["no_proxy", "http_proxy"])
    assert env["no_proxy"].split(",")[-1] == "modelscope.cn"
    assert env["no_proxy"].split(",").count("modelscope.cn") == 1
    assert env["http_proxy"].startswith("http://127.0.0.1:")
    # sourcing the loader twice adds nothing twice
    twice = labenv.job(host, '. ~/.trainer/jobenv.sh; printf %s "$no_proxy"').stdout
    assert twice == env["no_proxy"]


def test_shells_stay_direct(host):
    got = host.run("bash -lc 'printf %s \"${http_proxy-unset}\"'")
    assert got.stdout == "unset"


def test_runpod_is_a_noop_with_reason():
    proc = labenv.run_playbook(CONVERGE, "--limit", "runpod")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "network_turbo: nothing to do on lab-02: profile 'runpod' has no proxy hook" in proc.stdout
    lab02 = labenv.runner().get_host("lab-02")
    assert not lab02.file("/root/.trainer/env.d/10-network_turbo.sh").exists
    assert labenv.env_changes(lab02) == set()


def test_missing_hook_fails_with_path_and_profile():
    proc = labenv.run_playbook(CONVERGE, "--limit", "autodl", "-e", "trainer_proxy_hook=/etc/network_turbo_gone")
    assert proc.returncode == 2
    assert "the proxy hook /etc/network_turbo_gone that profile 'autodl' asks for (trainer_proxy_hook) is missing" in proc.stdout


def test_command_string_is_refused_not_evaluated():
    proc = labenv.run_playbook(CONVERGE, "--limit", "autodl", "-e", "trainer_proxy_hook='source /etc/network_turbo; touch /tmp/pwned'")
    assert proc.returncode == 2
    assert "a command string is never evaluated" in proc.stdout
    assert not labenv.runner().get_host("lab-01").file("/tmp/pwned").exists


def test_check_mode_changes_nothing():
    proc = labenv.run_playbook(CONVERGE, "--check")
    assert proc.returncode == 0 and labenv.recap_changed(proc.stdout) == 0, proc.stdout[-3000:]
