#!/usr/bin/env bash
# `make demo`: bring the lab fleet up, run the playbooks that exist against it, print the fleet
# table, and take the lab down on exit (also on Ctrl-C). Without root (the lab needs namespaces and
# tmpfs mounts) it runs preflight against this machine with the `local` profile instead.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$PWD/ansible.cfg"
mkdir -p reports

if [[ $(id -u) -ne 0 || ! -x tests/lab/fleet ]]; then
  echo "demo: the lab fleet needs root; running preflight against localhost with the local profile"
  exec ansible-playbook -i inventories/local/hosts.yml playbooks/preflight.yml \
    -e preflight_report_path="$PWD/reports/preflight.json"
fi

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  echo "demo: stopping the lab fleet"
  tests/lab/fleet down || true
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

up_log=$(mktemp)
if ! tests/lab/fleet up "$@" | tee "$up_log"; then
  echo "demo: the lab fleet did not come up (see above)" >&2
  exit 1
fi
inventory=$(tail -n 1 "$up_log")
rm -f "$up_log"
echo "demo: lab inventory at $inventory"

rc=0
ansible-playbook -i "$inventory" playbooks/preflight.yml \
  -e preflight_report_path="$PWD/reports/preflight.json" || rc=$?
echo "demo: preflight exited $rc (non-zero when a box is unfit or unreachable); report in reports/preflight.json"
exit "$rc"
