"""The ansible-core matrix (docs/CONTRIBUTING.md, "Every supported ansible-core"), with nox.

Each core has its own venv, built once by ``make setup`` from its pinned requirements file (scripts/setup.sh):
``.venv`` (ansible-core 2.19, Python 3.11, requirements-dev.txt), ``.venv-2.20`` (Python 3.12) and ``.venv-2.21``
(Python 3.13). The sessions create no venv of their own: each runs a stage of scripts/test.sh with that core's venv
(TRAINER_VENV), so that ``nox`` and ``make test`` run the same commands.

    nox -l                  the sessions
    nox -t 2.21             every session of ansible-core 2.21: units, sanity, smoke
    nox -s "units(2.20)"    one session

``make test`` runs the 2.19 stages in its own lanes and, beside them, one lane per newer core: ``nox -t <core>``.
"""

from __future__ import annotations

import os

import nox

nox.options.error_on_missing_interpreters = True
nox.options.default_venv_backend = "none"

# ansible-core -> its venv (scripts/setup.sh builds the newer ones with pyenv's Python)
VENVS = {"2.19": ".venv", "2.20": ".venv-2.20", "2.21": ".venv-2.21"}
CORES = [nox.param(core, id=core, tags=[core]) for core in VENVS]
# the lab smoke lane: the newer cores (the 2.19 lab lanes of make test run every playbook on 2.19)
NEWER = [nox.param(core, id=core, tags=[core]) for core in VENVS if core != "2.19"]


def stage(session, core, *stages):
    """scripts/test.sh STAGES with the venv of ``core``; a venv that make setup did not build is an error."""
    venv = VENVS[core]
    if not os.access(os.path.join(venv, "bin", "python"), os.X_OK):
        session.error("%s (ansible-core %s) is missing: run `make setup` with pyenv's Python for that core "
                      "(scripts/setup.sh says which)" % (venv, core))
    session.run("bash", "scripts/test.sh", *stages, env={"TRAINER_VENV": venv}, external=True)


@nox.session
@nox.parametrize("core", CORES)
def units(session, core):
    """The unit and hostile-input tests, and the probes' direct run on localhost."""
    stage(session, core, "core_units")


@nox.session
@nox.parametrize("core", CORES)
def sanity(session, core):
    """ansible-test sanity of that core, with empty ignore files: every test on the oldest and the newest core, the
    core-dependent ones (module docs, imports, compile, runtime metadata) on the one between (scripts/test.sh)."""
    stage(session, core, "sanity_core" if core == "2.20" else "sanity")


@nox.session
@nox.parametrize("core", NEWER)
def smoke(session, core):
    """Preflight, launch, patrol and teardown over the lab, collections_on_ansible_version_mismatch=error."""
    stage(session, core, "core_smoke")
