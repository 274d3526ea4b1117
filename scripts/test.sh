#!/usr/bin/env bash
# The test command (`make test`, called by .ci/run). With arguments, runs those stages only, in order.
# Stages: demo_down, lint, sanity, sanity_core, changelog, pytest (every pytest test), unit, playbook_checks, lab, lab2,
# lab3, lab_checks, timer, molecule (every scenario), molecule_lane, molecule_checks, core_units, core_smoke, nox:CORE
# (TRAINER_VENV picks the core, see below).
# Any failure fails the run; pytest finding no test at all (exit 5) is a failure too.
# Without arguments, seven lanes run at once, each stage as its own process. The suite is mostly CPU (Ansible runs
# and module runs on the lab boxes), with waits on SSH, tmux and the boxes in between; five lanes keep both cores
# of a 2-core machine busy through those waits, and two more run the newer ansible-cores. Each lane that starts
# lab fleets has a lab network of its own:
#   checks:   lint, sanity, changelog, unit (the unit and hostile-input tests)
#   molecule: timer (TIMER_TESTS), then molecule_lane, the other scenarios (LAB_NET_CHECKS, default 127.0.70)
#   lab:      the playbook and lab tests that no other lane runs (LAB_NET as set, default 127.0.0)
#   lab2:     the playbook and lab tests in LAB2_TESTS (LAB_NET_LAB2, default 127.0.80)
#   lab3:     the lab tests in LAB3_TESTS (LAB_NET_LAB3, default 127.0.120)
#   core-2.20, core-2.21: the newer ansible-core lanes, `nox -t <core>` (noxfile.py: units, sanity, lab smoke with
#             that core's venv; LAB_NET_CORE220 and LAB_NET_CORE221, default 127.0.100 and 127.0.110). The 2.20 lane,
#             which runs only the core-dependent part of sanity, then runs two 2.19 stages: playbook_checks (the
#             playbook tests in CHECKS_PLAYBOOK_TESTS) and molecule_checks (the scenarios in CHECKS_SCENARIOS).
# The lists balance the lanes, so that they end together (`make test` prints each stage's time); a new test file
# runs in the lab lane unless a list names it.
# Every lane runs to the end; the run fails if any failed. The other lanes' output is printed after the lab's.
# LAB_REQUIRE_FREE=1: a lab address already taken fails the lab tests instead of skipping them.
set -euo pipefail
cd "$(dirname "$0")/.."
# TRAINER_VENV (default .venv, ansible-core 2.19) picks the core of a newer-core lane: .venv-2.20, .venv-2.21
export TRAINER_VENV=${TRAINER_VENV:-.venv}
export PATH="$PWD/$TRAINER_VENV/bin:$PATH"
export ANSIBLE_CONFIG="$PWD/ansible.cfg"
export ANSIBLE_NOCOLOR=1

stage() { printf '\n=== %s ===\n' "$*"; }

# `make demo` leaves its lab fleet up (DEMO_LAB_STATE, default tests/lab/state, on the lab lane's addresses): the
# full run stops it first, through its own record (tests/lab/fleet down ends what that fleet started, by PID).
run_demo_down() {
  local state=${DEMO_LAB_STATE:-tests/lab/state}
  [[ $(id -u) -eq 0 && -f $state/fleet.json ]] || return 0
  if LAB_STATE_DIR=$state tests/lab/fleet status --json \
      | python3 -c 'import json, sys; sys.exit(0 if json.load(sys.stdin).get("status") == "up" else 1)'; then
    echo "make test: stopping the lab fleet that make demo left up ($state)"
    LAB_STATE_DIR=$state tests/lab/fleet down
  fi
}

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

# The middle core's sanity (ansible-core 2.20, between the oldest and the newest, which run every test above): the
# tests that read the collection through that core's own loader, schemas and Python (module docs and argument specs,
# imports, compilation, the runtime metadata). pylint, pep8 and yamllint check our source, not the core: they run on
# 2.19 and 2.21, and skipping them here keeps about 8 CPU minutes out of make test on a 2-core machine.
run_sanity_core() {
  stage "ansible-test sanity (the core-dependent tests)"
  bash scripts/sanity.sh --test validate-modules --test compile --test ansible-doc --test import \
    --test runtime-metadata --test action-plugin-docs
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

# Playbook tests with no lab fleet, run after the 2.20 lane's nox sessions.
CHECKS_PLAYBOOK_TESTS=(tests/playbooks/test_provider_inventory.py tests/playbooks/test_teardown_local.py
  tests/playbooks/test_profiles.py tests/playbooks/test_play_variables.py)
# The autopilot timer test installs a cron entry for this user, as the molecule scenario autopilot_timer does: it
# runs in the molecule lane, before the scenarios, never beside them.
TIMER_TESTS=(tests/playbooks/test_autopilot_timer.py)
# The second lab lane (any order: test modules import their helpers by name, never from a conftest.py).
LAB2_TESTS=(tests/playbooks/test_pip_filtered_local.py tests/playbooks/test_notify.py
  tests/playbooks/test_patrol_local.py tests/playbooks/test_credentials_local.py
  tests/playbooks/test_preflight_local.py tests/playbooks/test_inode_check_real.py
  tests/playbooks/test_collection_build.py tests/lab/tests/test_teardown_lab.py tests/lab/tests/test_reaper_lab.py
  tests/lab/tests/test_sync_failed_lab.py tests/lab/tests/test_preflight_lab.py tests/lab/tests/test_patrol_lab.py
  tests/lab/tests/test_provider_inventory_lab.py tests/lab/tests/test_power_lab.py tests/lab/tests/test_sync_lab.py
  tests/lab/tests/test_fleet_lifecycle.py tests/lab/tests/test_no_gpu_lab.py tests/lab/tests/test_record_lab.py)
# The third lab lane: the autopilot's lab tests, the ones that run the README's commands end to end, renting and
# the download helper.
LAB3_TESTS=(tests/lab/tests/test_autopilot_lab.py tests/lab/tests/test_autopilot_preempted_lab.py
  tests/lab/tests/test_autopilot_replace_lab.py tests/lab/tests/test_autopilot_replace_rented_lab.py
  tests/lab/tests/test_installed_collection_lab.py tests/lab/tests/test_secret_canary_lab.py
  tests/lab/tests/test_ansible_runner_lab.py tests/lab/tests/test_demo_lab.py tests/lab/tests/test_rent_lab.py
  tests/lab/tests/test_hf_download_lab.py)

run_pytest() {
  stage "pytest (unit, hostile inputs, playbooks, lab)"
  pytest_stage tests/unit tests/hostile tests/playbooks $(ls -d tests/lab/gpu/tests tests/lab/tests 2>/dev/null)
}

# `make unit`: the unit and hostile-input tests alone (no ansible-playbook run, no lab fleet).
run_unit() {
  stage "pytest (unit, hostile inputs)"
  pytest_stage tests/unit tests/hostile
}

run_playbook_checks() {
  stage "pytest (${CHECKS_PLAYBOOK_TESTS[*]})"
  pytest_stage "${CHECKS_PLAYBOOK_TESTS[@]}"
}

# The stages of a newer-core lane (noxfile.py runs them with that core's venv as TRAINER_VENV): the unit and
# hostile-input tests with the probes' direct run on localhost, and the lab smoke test (CORE_SMOKE_TESTS, which the
# lab lane leaves to these lanes).
CORE_UNIT_TESTS=(tests/unit tests/hostile tests/playbooks/test_direct_run_local.py)
CORE_SMOKE_TESTS=(tests/lab/tests/test_cores_smoke_lab.py)

run_core_units() {
  stage "pytest on $(ansible --version 2>/dev/null | sed -n 1p) (${CORE_UNIT_TESTS[*]})"
  pytest_stage "${CORE_UNIT_TESTS[@]}"
}

run_core_smoke() {
  stage "pytest on $(ansible --version 2>/dev/null | sed -n 1p) (${CORE_SMOKE_TESTS[*]})"
  pytest_stage "${CORE_SMOKE_TESTS[@]}"
}

# nox:CORE, the sessions of that ansible-core's lane (noxfile.py): units, sanity and, for a newer core, smoke
run_nox() {
  stage "nox -t $1"
  nox --no-color --tags "$1"
}

run_timer() {
  stage "pytest (${TIMER_TESTS[*]})"
  pytest_stage "${TIMER_TESTS[@]}"
}

run_lab() {
  stage "pytest (the playbook and lab tests of the lab lane)"
  pytest_stage $(printf -- '--ignore %s ' "${CHECKS_PLAYBOOK_TESTS[@]}" "${TIMER_TESTS[@]}" "${LAB2_TESTS[@]}" \
    "${LAB3_TESTS[@]}" "${CORE_SMOKE_TESTS[@]}") \
    tests/playbooks $(ls -d tests/lab/gpu/tests tests/lab/tests 2>/dev/null)
}

# `make lab` runs lab, lab2, lab3 and this: the playbook tests that make test runs in its checks and molecule lanes
run_lab_checks() {
  stage "pytest (${CHECKS_PLAYBOOK_TESTS[*]} ${TIMER_TESTS[*]})"
  pytest_stage "${CHECKS_PLAYBOOK_TESTS[@]}" "${TIMER_TESTS[@]}"
}

run_lab2() {
  stage "pytest (${LAB2_TESTS[*]})"
  pytest_stage "${LAB2_TESTS[@]}"
}

run_lab3() {
  stage "pytest (${LAB3_TESTS[*]})"
  pytest_stage "${LAB3_TESTS[@]}"
}

# Molecule scenarios run after the 2.20 lane's nox sessions; the molecule lane runs the others.
CHECKS_SCENARIOS=(preflight)

run_molecule() {
  molecule_scenarios molecule/*/molecule.yml
}

run_molecule_lane() {
  molecule_scenarios $(ls molecule/*/molecule.yml | grep -v -F -x "$(printf 'molecule/%s/molecule.yml\n' \
    "${CHECKS_SCENARIOS[@]}")")
}

run_molecule_checks() {
  molecule_scenarios $(printf 'molecule/%s/molecule.yml ' "${CHECKS_SCENARIOS[@]}")
}

# molecule_scenarios molecule/NAME/molecule.yml...: molecule test each scenario, in order
molecule_scenarios() {
  if [[ $(id -u) -ne 0 ]]; then
    echo "molecule: skipped, the lab fleet needs root"
    return 0
  fi
  local scenario
  for scenario in "$@"; do
    [[ -f $scenario ]] || continue
    scenario=$(basename "$(dirname "$scenario")")
    stage "molecule test -s $scenario"
    molecule test -s "$scenario"
  done
}

if [[ $# -gt 0 ]]; then
  for s in "$@"; do
    case $s in
      nox:*) run_nox "${s#nox:}" ;;
      *) "run_$s" ;;
    esac
  done
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

bash "$0" demo_down
export LAB_REQUIRE_FREE=1
start=$(date +%s)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# background_lane NET PROXY_PORT NAME STAGE...: lane NAME in the background, its output in $work/NAME.log, its lab
# fleets on network NET with a state directory and a proxy port of their own
pids=() names=()
background_lane() {
  local net=$1 port=$2 name=$3
  shift 3
  mkdir "$work/$name-state"
  (LAB_NET=$net LAB_STATE_DIR=$work/$name-state LAB_PROXY_PORT=$port lane "$name" "$@") > "$work/$name.log" 2>&1 &
  pids+=($!) names+=("$name")
}
background_lane "${LAB_NET_CHECKS:-127.0.70}" 18870 molecule timer molecule_lane
background_lane "${LAB_NET_LAB2:-127.0.80}" 18880 lab2 lab2
background_lane "${LAB_NET_LAB3:-127.0.120}" 18920 lab3 lab3
background_lane "${LAB_NET_CHECKS2:-127.0.90}" 18890 checks lint sanity changelog unit
# the newer ansible-core lanes (noxfile.py; the other lanes run 2.19): unit tests, sanity and a lab smoke test each;
# the 2.20 lane's sanity is the shortest, so it goes on with two stages of 2.19
background_lane "${LAB_NET_CORE220:-127.0.100}" 18900 core-2.20 nox:2.20 playbook_checks molecule_checks
background_lane "${LAB_NET_CORE221:-127.0.110}" 18910 core-2.21 nox:2.21
lane lab lab || true
for pid in "${pids[@]}"; do wait "$pid" || true; done
for name in "${names[@]}"; do
  printf '\n=== %s lane ===\n' "$name"
  cat "$work/$name.log"
done
echo
if [[ -s $work/failed ]]; then
  cat "$work/failed" >&2
  echo "make test: FAILED after $(( $(date +%s) - start )) s" >&2
  exit 1
fi
echo "make test: all stages passed in $(( $(date +%s) - start )) s ($(paste -sd, "$work/times" | sed 's/,/, /g'))"
