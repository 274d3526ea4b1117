"""The job-environment contract: fragment names, their order, and exactly the variables of the applied roles."""

from __future__ import annotations

import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "resources"))
import labenv  # noqa: E402

CONVERGE = labenv.converge(__file__)
testinfra_hosts = labenv.hosts("lab")
PROXY = {"http_proxy", "https_proxy", "no_proxy"}
HF_AUTODL = {"HF_ENDPOINT", "HF_HUB_DISABLE_XET", "HF_HOME"}
EXPECT = {
    "lab-01": (["10-network_turbo.sh", "20-hf_mirror.sh", "50-credentials.sh"], PROXY | HF_AUTODL | {"WANDB_API_KEY"}),
    "lab-02": (["20-hf_mirror.sh"], HF_AUTODL),
    "lab-03": (["50-credentials.sh"], {"HF_TOKEN"}),
}


def sourced(host, locale):
    """The fragments the loader sources, in order, from bash's own trace."""
    trace = host.run("LC_ALL=%s bash -c 'set -x; . ~/.trainer/jobenv.sh' 2>&1 >/dev/null" % locale).stdout
    return re.findall(r"^\++ \. /root/\.trainer/env\.d/(\S+)$", trace, re.M)


def test_fragments_are_named_nn_role(host):
    fragments = EXPECT[labenv.name(host)][0]
    assert host.check_output("ls /root/.trainer/env.d").split() == fragments
    assert host.file("/root/.trainer/env.d").mode == 0o700
    assert host.file("/root/.trainer/jobenv.sh").mode == 0o644


def test_loader_sources_in_lexical_order_in_any_locale(host):
    fragments = EXPECT[labenv.name(host)][0]
    for locale in ("C", "C.UTF-8"):
        assert sourced(host, locale) == fragments, locale


def test_job_sees_exactly_the_variables_of_its_roles(host):
    names = EXPECT[labenv.name(host)][1]
    assert labenv.env_changes(host) == names


def test_the_loader_works_from_sh_too(host):
    got = host.run("sh -c '. ~/.trainer/jobenv.sh; printf %s \"${HF_HOME-unset}\"'")
    assert got.rc == 0
    assert got.stdout == ("unset" if labenv.name(host) == "lab-03" else "/root/autodl-tmp/huggingface_cache")


def test_removing_a_role_takes_exactly_its_variables_away():
    lab01 = labenv.runner().get_host("lab-01")
    proc = labenv.run_playbook(CONVERGE, "--limit", "lab-01", "-e", "hf_mirror_state=absent")
    try:
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert labenv.env_changes(lab01) == PROXY | {"WANDB_API_KEY"}
        assert sourced(lab01, "C") == ["10-network_turbo.sh", "50-credentials.sh"]
    finally:
        proc = labenv.run_playbook(CONVERGE, "--limit", "lab-01")
    assert proc.returncode == 0 and labenv.env_changes(lab01) == EXPECT["lab-01"][1]


def test_job_env_dir_moves_every_fragment_and_a_role_dir_moves_its_own():
    """job_env_dir is the one setting for every environment role; <role>_env_dir overrides it for that role."""
    lab01 = labenv.runner().get_host("lab-01")
    try:
        proc = labenv.run_playbook(CONVERGE, "--limit", "lab-01", "-e", "job_env_dir=/root/.moved/env.d",
                                   "-e", "credentials_env_dir=/root/.own/env.d")
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert lab01.check_output("ls /root/.moved/env.d").split() == ["10-network_turbo.sh", "20-hf_mirror.sh"]
        assert lab01.check_output("ls /root/.own/env.d").split() == ["50-credentials.sh"]
        assert lab01.file("/root/.moved/jobenv.sh").is_file and lab01.file("/root/.own/jobenv.sh").is_file
        # the default directory is left as it was
        assert lab01.check_output("ls /root/.trainer/env.d").split() == EXPECT["lab-01"][0]
    finally:
        lab01.check_output("rm -rf /root/.moved /root/.own")
