#!/usr/bin/env bash
# The test command (`make test`, called by .ci/run). With an argument, runs one stage only.
# Stages: lint, sanity, changelog, pytest, molecule. Any failure fails the run; pytest finding
# no test at all (exit 5) is a failure too.
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

run_pytest() {
  stage "pytest (unit, hostile inputs, playbooks, lab)"
  local rc=0
  pytest -q --durations=15 tests/unit tests/hostile tests/playbooks $(ls -d tests/lab/gpu/tests tests/lab/tests 2>/dev/null) || rc=$?
  if [[ $rc -eq 5 ]]; then
    echo "pytest collected no tests: that is a failure" >&2
    return 1
  fi
  return $rc
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
start=$(date +%s)
times=()
for s in lint sanity changelog pytest molecule; do
  t=$(date +%s)
  "run_$s"
  times+=("$s $(( $(date +%s) - t )) s")
done
echo
echo "make test: all stages passed in $(( $(date +%s) - start )) s ($(IFS=,; echo "${times[*]}" | sed 's/,/, /g'))"
