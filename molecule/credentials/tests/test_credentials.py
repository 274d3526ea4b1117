"""credentials on the lab fleet: the file, what a job sees, the refusals, and no secret in any output."""

from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "resources"))
import labenv  # noqa: E402

SCENARIO = labenv.scenario(__file__)
CONVERGE = labenv.converge(__file__)
testinfra_hosts = labenv.hosts("lab")

# The lab-only secrets of converge.yml (HF_TOKEN is the plaintext of its vaulted value).
SECRETS = {"WANDB_API_KEY": "wandb-lab-secret-93f1c07a5e", "HF_TOKEN": "hf_labVaultToken_4c1d9e07b2"}
VAULT = {"ANSIBLE_VAULT_PASSWORD_FILE": str(SCENARIO / "vault-password.txt")}
RULE = "a shared FS is visible to other instances"


def no_secret(output, what):
    for key, value in SECRETS.items():
        # never print the output itself: it would carry the secret into this test's report
        assert value not in output, "the value of %s appears in the output of %s" % (key, what)


def test_secrets_file_is_private_and_on_the_own_disk(host):
    f = host.file("/root/.trainer/credentials.env")
    assert f.is_file and f.mode == 0o600 and f.user == "root"
    assert host.file("/root/.trainer").mode == 0o700
    durable = labenv.hostvars(labenv.name(host)).get("lab_durable_dir")
    if durable:
        assert host.run("find %s -name 'credentials*'" % durable).stdout == ""


def test_job_sees_exactly_the_secrets(host):
    assert labenv.env_changes(host) == set(SECRETS)
    for key, value in SECRETS.items():
        got = labenv.job(host, 'printf %%s "$%s" | sha256sum' % key)
        assert got.rc == 0 and got.stdout.split()[0] == labenv.sha256(value), key


def test_fragment_names_the_secrets_but_holds_none(host):
    fragment = host.file("/root/.trainer/env.d/50-credentials.sh")
    assert fragment.is_file and fragment.mode == 0o644
    no_secret(fragment.content_string, "50-credentials.sh")
    assert "HF_TOKEN WANDB_API_KEY" in fragment.content_string


def test_shells_do_not_see_the_secrets(host):
    # no rc file is touched: a login shell and an interactive shell have no secret
    for shell in ("bash -lc", "bash -ic"):
        got = host.run("%s 'printf %%s \"${WANDB_API_KEY-unset}${HF_TOKEN-unset}\"' 2>/dev/null" % shell)
        assert got.stdout.endswith("unsetunset"), shell
    rc_files = " ".join("/root/%s" % f for f in (".bashrc", ".profile", ".bash_profile"))
    assert "trainer" not in host.run("cat %s 2>/dev/null" % rc_files).stdout


@pytest.fixture(scope="module")
def fs_link():
    """On lab-01 (autodl), a symbolic link from the home directory onto the durable FS."""
    host = labenv.runner().get_host("lab-01")
    host.check_output("ln -sfn /root/autodl-fs /root/fs-link")
    yield "/root/fs-link"
    host.check_output("rm -f /root/fs-link")


def test_no_secret_in_any_output_and_refusals_state_the_rule(fs_link):
    runs = {
        "converge -vvv": ([], 0),
        "converge --check --diff -vvv": (["--check", "--diff"], 0),
        "durable FS on autodl": (["--limit", "lab-01", "-e", "credentials_file=/root/autodl-fs/.trainer/c.env"], 2),
        "link onto the durable FS": (["--limit", "lab-01", "-e", "credentials_file=%s/c.env" % fs_link], 2),
        "network volume on runpod": (["--limit", "lab-02", "-e", "credentials_file=/workspace/.creds.env"], 2),
        # a wrongly typed value fails the argument spec; the secret must not be echoed in the error
        "bad type": (["-e", '{"credentials_secrets": ["%s"]}' % SECRETS["WANDB_API_KEY"]], 2),
    }
    for what, (args, rc) in runs.items():
        proc = labenv.run_playbook(CONVERGE, "-vvv", *args, **VAULT)
        no_secret(proc.stdout, what)
        assert proc.returncode == rc, "%s: rc %s\n%s" % (what, proc.returncode, proc.stdout[-3000:])
        if what == "converge -vvv":
            assert labenv.recap_changed(proc.stdout) == 0
        if what in ("durable FS on autodl", "link onto the durable FS", "network volume on runpod"):
            assert "refusing to write the secrets file" in proc.stdout and RULE in proc.stdout, what
        if what == "durable FS on autodl":
            assert "/root/autodl-fs" in proc.stdout and "profile 'autodl'" in proc.stdout
        if what == "network volume on runpod":
            assert "profile 'runpod'" in proc.stdout
    lab01 = labenv.runner().get_host("lab-01")
    assert not lab01.file("/root/autodl-fs/.trainer").exists


def test_state_absent_removes_file_and_fragment():
    proc = labenv.run_playbook(CONVERGE, "--limit", "lab-02", "-e", "credentials_state=absent", **VAULT)
    no_secret(proc.stdout, "state=absent")
    assert proc.returncode == 0, proc.stdout[-3000:]
    lab02 = labenv.runner().get_host("lab-02")
    assert not lab02.file("/root/.trainer/credentials.env").exists
    assert not lab02.file("/root/.trainer/env.d/50-credentials.sh").exists
    assert labenv.env_changes(lab02) == set()
    proc = labenv.run_playbook(CONVERGE, "--limit", "lab-02", **VAULT)
    assert proc.returncode == 0 and labenv.recap_changed(proc.stdout) > 0
