"""pip_filtered on localhost: pip goes through the profile's proxy hook, under a time limit, with retries.

A stand-in proxy on the loopback (a thread of this test) is named only in the hook file, never in the controller's
environment, so a request that reaches it proves that pip ran with the hook sourced. The index it serves
(http://pypi.invalid/simple) exists only behind it. pip installs with --target into a temporary directory."""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import subprocess
import sys
import threading
import time
import zipfile

import pytest

from pbhelpers import REPO, VENV_BIN, ansible_env

INDEX = "http://pypi.invalid/simple"
PROXY_VARS = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "no_proxy", "NO_PROXY", "all_proxy",
              "ALL_PROXY", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_PROXY")


def tiny_wheel():
    """A minimal pure-Python wheel: tinypkg 1.0."""
    files = {"tinypkg/__init__.py": b"VALUE = 42\n",
             "tinypkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
             "tinypkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                            b"Tag: py3-none-any\n"}
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
    record.append("tinypkg-1.0.dist-info/RECORD,,")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr("tinypkg-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return buf.getvalue()


class Proxy:
    """An HTTP proxy stand-in: logs every requested URL; ``mode`` is serve, 404 or hang."""

    def __init__(self, mode):
        self.mode, self.urls = mode, []
        wheel = tiny_wheel()
        sha = hashlib.sha256(wheel).hexdigest()
        pages = {INDEX + "/tinypkg/": ('<html><body><a href="http://pypi.invalid/files/tinypkg-1.0-py3-none-any.whl'
                                       '#sha256=%s">tinypkg-1.0-py3-none-any.whl</a></body></html>' % sha).encode(),
                 "http://pypi.invalid/files/tinypkg-1.0-py3-none-any.whl": wheel}
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the http.server name
                owner.urls.append(self.path)
                if owner.mode == "hang":
                    time.sleep(60)
                    return
                body = pages.get(self.path) if owner.mode == "serve" else None
                self.send_response(200 if body else 404)
                self.send_header("Content-Type", "text/html" if self.path.endswith("/") else "application/octet-stream")
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy():
    made = []

    def make(mode):
        made.append(Proxy(mode))
        return made[-1]
    yield make
    for p in made:
        p.close()


def run_role(tmp_path, hook, *extra):
    """Apply the role to localhost with ``hook`` as the profile's trainer_proxy_hook (the role's default)."""
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("tinypkg==1.0\n")
    playbook = tmp_path / "pip.yml"
    playbook.write_text(
        "- name: Install a requirements file through the proxy hook\n"
        "  hosts: localhost\n  gather_facts: false\n"
        "  roles:\n    - role: remote_gpu.trainer.pip_filtered\n")
    target = tmp_path / "site"
    env = ansible_env()
    for name in PROXY_VARS:
        env.pop(name, None)
    cmd = [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook),
           "-e", "ansible_python_interpreter=%s" % sys.executable, "-e", "trainer_interpreter=%s" % sys.executable,
           "-e", "pip_filtered_requirements=%s" % requirements, "-e", "trainer_proxy_hook=%s" % hook,
           "-e", '{"pip_filtered_extra_args": ["--index-url", "%s", "--trusted-host", "pypi.invalid", '
                 '"--no-cache-dir", "--target", "%s"]}' % (INDEX, target), "-e", "pip_filtered_retry_delay=0", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=300, check=False), target


def hook_file(tmp_path, proxy_url):
    hook = tmp_path / "network_turbo"
    hook.write_text("export http_proxy={0} https_proxy={0}\nunset no_proxy NO_PROXY\necho set up\n".format(proxy_url))
    return hook


def test_pip_installs_through_the_proxy_hook(tmp_path, proxy):
    stub = proxy("serve")
    proc, target = run_role(tmp_path, hook_file(tmp_path, stub.url))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert INDEX + "/tinypkg/" in stub.urls
    assert (target / "tinypkg" / "__init__.py").read_text() == "VALUE = 42\n"
    assert "changed=1" in proc.stdout[proc.stdout.index("PLAY RECAP"):]


def test_a_failed_install_is_retried_and_named(tmp_path, proxy):
    stub = proxy("404")
    proc, _target = run_role(tmp_path, hook_file(tmp_path, stub.url), "-e", "pip_filtered_retries=1")
    assert proc.returncode == 2
    assert stub.urls.count(INDEX + "/tinypkg/") == 2  # the first attempt and one retry, both through the hook
    assert "pip_filtered: pip install of requirements.txt on localhost exited 1 after 2 attempt(s)" in proc.stdout
    assert "(proxy hook: %s)" % (tmp_path / "network_turbo") in proc.stdout
    assert "tinypkg" in proc.stdout  # pip's own last lines
    assert "pip_filtered: attempt 1 failed (exit 1); trying again in 0 s" in proc.stdout


def test_a_stalled_download_is_killed_at_the_timeout(tmp_path, proxy):
    stub = proxy("hang")
    started = time.monotonic()
    # 10 s: pip must start and reach the stalled proxy before it is killed, which took more than 3 s on a loaded CI
    # machine (the proxy then saw no request)
    proc, _target = run_role(tmp_path, hook_file(tmp_path, stub.url), "-e", "pip_filtered_retries=0",
                             "-e", "pip_filtered_timeout=10")
    assert proc.returncode == 2 and stub.urls, proc.stdout[-3000:]
    assert "did not finish within 10 s and was killed after 1 attempt(s)" in proc.stdout
    assert time.monotonic() - started < 60


def test_a_missing_proxy_hook_fails_naming_it(tmp_path):
    proc, _target = run_role(tmp_path, str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert "pip_filtered: the proxy hook %s (pip_filtered_proxy_hook" % (tmp_path / "nope") in proc.stdout
