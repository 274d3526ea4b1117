#!/usr/bin/env bash
# The test command (`make test`, called by .ci/run). With arguments, runs those stages only, in order.
# Stages: lint, sanity, changelog, pytest (every pytest test), units, lab, molecule. Any failure fails the run;
# pytest finding no test at all (exit 5) is a failure too.
# Without arguments, two lanes run at once, each stage as its own process (one core each on a 2-core machine;
# much of a lab test's time is waiting on SSH, tmux and the boxes):
#   checks: lint, sanity, changelog, units (with the playbook tests in CHECKS_PLAYBOOK_TESTS), molecule (on a lab
#           network of its own: LAB_NET_CHECKS, default 127.0.70)
#   lab:    the other playbook tests and the lab tests (LAB_NET as set, default 127.0.0)
# CHECKS_PLAYBOOK_TESTS also balances the two lanes (the lab lane is the longer one without them).
# Both lanes run to the end; the run fails if either failed. The checks lane's output is printed after the lab's.
# LAB_REQUIRE_FREE=1: a lab address already taken fails the lab tests instead of skipping them.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$PWD/ansible.cfg"
export ANSIBLE_NOCOLOR=1

stage() { printf '\n=== %s ===\n' "$*"; }

run_lint() {
  stage "ansible-lint (profile: production)"
  ansible-lint --offline -q
  stage "yamllint"
  yamllint -s .
}

run_sanity() {
  stage "ansible-test sanity"
  bash scripts/sanity.sh --test validate-modules --test pylint --test pep8 --test yamllint --test compile \
    --test ansible-doc --test import --test runtime-metadata --test shebang --test symlinks \
    --test empty-init --test line-endings --test no-smart-quotes --test action-plugin-docs
  local ignores
  ignores=$(cat tests/sanity/ignore-*.txt 2>/dev/null | grep -cv '^\s*\(#.*\)\?$' || true)
  if [[ $ignores -ne 0 ]]; then
    echo "tests/sanity/ignore-*.txt must be empty (found $ignores entries): fix the code instead" >&2
    return 1
  fi
}

run_changelog() {
  stage "changelog fragments"
  antsibull-changelog lint
}

pytest_stage() {
  local rc=0
  pytest -q --durations=15 "$@" || rc=$?
  if [[ $rc -eq 5 ]]; then
    echo "pytest collected no tests: that is a failure" >&2
    return 1
  fi
  return $rc
}

# Playbook tests (no lab fleet) of the checks lane. The autopilot timer test installs a cron entry for this user, as
# the molecule scenario autopilot_timer does: it must run there, never beside that scenario; the others balance lanes.
CHECKS_PLAYBOOK_TESTS=(tests/playbooks/test_autopilot_timer.py tests/playbooks/test_provider_inventory.py
  tests/playbooks/test_teardown_local.py tests/playbooks/test_profiles.py)

run_pytest() {
  stage "pytest (unit, hostile inputs, playbooks, lab)"
  pytest_stage tests/unit tests/hostile tests/playbooks $(ls -d tests/lab/gpu/tests tests/lab/tests 2>/dev/null)
}

run_units() {
  stage "pytest (unit, hostile inputs, ${CHECKS_PLAYBOOK_TESTS[*]})"
  pytest_stage tests/unit tests/hostile "${CHECKS_PLAYBOOK_TESTS[@]}"
}

run_lab() {
  stage "pytest (the other playbook tests, lab)"
  pytest_stage $(printf -- '--ignore %s ' "${CHECKS_PLAYBOOK_TESTS[@]}") tests/playbooks \
    $(ls -d tests/lab/gpu/tests tests/lab/tests 2>/dev/null)
}

run_molecule() {
  if [[ $(id -u) -ne 0 ]]; then
    echo "molecule: skipped, the lab fleet needs root"
    return 0
  fi
  local scenario
  for scenario in molecule/*/molecule.yml; do
    [[ -f $scenario ]] || continue
    scenario=$(basename "$(dirname "$scenario")")
    stage "molecule test -s $scenario"
    molecule test -s "$scenario"
  done
}

if [[ $# -gt 0 ]]; then
  for s in "$@"; do "run_$s"; done
  exit 0
fi

# lane NAME STAGE...: each stage in a process of its own (so that errexit holds inside it); stops at the first failure
lane() {
  local name=$1 s t
  shift
  for s in "$@"; do
    t=$(date +%s)
    if ! bash "$0" "$s"; then
      echo "$name lane: stage $s failed" | tee -a "$work/failed"
      return 1
    fi
    echo "$s $(( $(date +%s) - t )) s" >> "$work/times"
  done
}

export LAB_REQUIRE_FREE=1
start=$(date +%s)
work=$(mktemp -d)
molecule_state=$(mktemp -d)
trap 'rm -rf "$work" "$molecule_state"' EXIT
(LAB_NET=${LAB_NET_CHECKS:-127.0.70} LAB_STATE_DIR=$molecule_state lane checks lint sanity changelog units molecule) \
  > "$work/checks.log" 2>&1 &
checks=$!
lane lab lab || true
wait "$checks" || true
printf '\n=== checks lane (lint, sanity, changelog, units, molecule) ===\n'
cat "$work/checks.log"
echo
if [[ -s $work/failed ]]; then
  cat "$work/failed" >&2
  echo "make test: FAILED after $(( $(date +%s) - start )) s" >&2
  exit 1
fi
echo "make test: all stages passed in $(( $(date +%s) - start )) s ($(paste -sd, "$work/times" | sed 's/,/, /g'))"
