#!/usr/bin/env bash
# `make demo`: bring the lab fleet up, run the playbooks that exist against it, print the fleet
# table and the commands to try next, and leave the lab up for them (DEMO_KEEP_LAB=0 takes it down at the end; a
# failed demo and Ctrl-C always do; `make test` stops a demo fleet still up before its lab tests). Without root (the lab needs namespaces and
# tmpfs mounts) it runs preflight on this machine with the `local` profile, twice, through the lab's GPU
# emulator (tests/lab/gpu): as a healthy H100 box and as a box whose H100s are throttled (real captures).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$PWD/ansible.cfg"
mkdir -p reports

# One emulated box: preflight on localhost with FAKE_GPU_SCENARIO=$1. Succeeds when its verdict is one of $2 (a
# regex), the playbook's exit code is $3 and, if given, the top finding's code is $4.
emulated_preflight() {
  local scenario=$1 verdicts=$2 want_rc=$3 want_code=${4:-} report="$PWD/reports/preflight-$1.json" rc=0 seen
  rm -f "$report"
  echo "demo: localhost as the emulated box '$scenario' (tests/lab/gpu/scenarios/$scenario)"
  PATH="$PWD/tests/lab/gpu/bin:$PATH" FAKE_GPU_SCENARIO="$PWD/tests/lab/gpu/scenarios/$scenario" \
    ansible-playbook -i inventories/local/hosts.yml playbooks/preflight.yml -e preflight_report_path="$report" \
    -e preflight_sample_seconds=1 -e preflight_check_torch=false || rc=$?
  seen=$(python3 -c '
import json, sys
row = json.load(open(sys.argv[1]))["hosts"][0]
print(row["verdict"], row["top_finding"].split(":")[0])' "$report" 2>/dev/null || echo "none -")
  if [[ $rc -eq $want_rc && ${seen%% *} =~ ^($verdicts)$ && ( -z $want_code || ${seen#* } == "$want_code" ) ]]; then
    echo "demo: '$scenario': ${seen%% *} ${want_code:+($want_code) }as expected, exit $rc; report in $report"
    return 0
  fi
  echo "demo: '$scenario': expected ${verdicts//|/ or } ${want_code:+($want_code) }with exit $want_rc, got $seen with exit $rc" >&2
  return 1
}

if [[ $(id -u) -ne 0 || ! -x tests/lab/fleet ]]; then
  echo "demo: the lab fleet needs root; running preflight on localhost through the GPU emulator instead"
  echo "demo: (torch cannot see an emulated GPU, so the torch probe is left out, as in the lab)"
  echo "demo: the second box is meant to FAIL: preflight prints its finding and exits 2, as it would for a real one"
  ok=0
  emulated_preflight h100-idle 'PASS|WARN' 0 || ok=1
  emulated_preflight 8xh100-hwslowdown FAIL 2 throttle_active || ok=1
  if [[ $ok -eq 0 ]]; then
    echo "demo: preflight passed the healthy box and named the throttled one with its evidence (tables above)"
    echo "demo: as root, 'make demo' starts the lab fleet and prints the commands to try on its boxes"
  fi
  exit "$ok"
fi

# The lab fleet stays up at the end, to try the commands printed there (make demo DEMO_KEEP_LAB=0 stops it).
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ ${DEMO_KEEP_LAB:-1} == 1 && $rc -eq 0 ]]; then
    echo "demo: the lab fleet is still up for the commands below; 'tests/lab/fleet down' stops it (make test does too)"
  else
    echo "demo: stopping the lab fleet"
    tests/lab/fleet down || true
  fi
  next_steps "$rc"
  exit "$rc"
}

# What to try next, as exact commands: the quick start's playbooks by FQCN on the lab's boxes, from the checkout
# (whose ansible.cfg finds the collection in .collections).
next_steps() {
  [[ $1 -eq 0 && -n ${inventory:-} ]] || return 0
  local inv=${inventory#"$PWD"/} up=""
  if [[ ${DEMO_KEEP_LAB:-1} != 1 ]]; then
    up="  tests/lab/fleet up $(printf '%q ' "${up_args[@]}")  # the same lab fleet again"$'\n'
  fi
  cat <<NEXT

demo: try the playbooks yourself on the lab's boxes (from this directory; the quick start in README.md runs the
demo: same commands on your own fleet, with the collection installed):
  . .venv/bin/activate
${up}  ansible-playbook -i $inv remote_gpu.trainer.preflight -l lab-01
  ansible-playbook -i $inv remote_gpu.trainer.launch -l lab-01 -e launch_src=\$PWD/examples/quickstart \\
    -e 'launch_command="python train.py --config"' -e '{"launch_queue": ["configs/a.yaml", "configs/b.yaml"]}'
  ansible-playbook -i $inv remote_gpu.trainer.patrol -l lab-01      # the job's progress; again until DONE
  ansible-playbook -i $inv remote_gpu.trainer.teardown -l lab-01 -e teardown_approve=lab-01   # refuses while it runs
  tests/lab/fleet down
NEXT
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Default demo fleet: two AutoDL boxes in one region (one of them an AutoDL image without python3), a
# RunPod box, and a fourth AutoDL box in another region whose H100s are throttled (a real capture).
if [[ $# -eq 0 ]]; then
  set -- --size 4 --variant lab-02=autodl-image --scenario lab-04=8xh100-hwslowdown
fi
up_args=("$@")
up_log=$(mktemp)
if ! tests/lab/fleet up "$@" | tee "$up_log"; then
  echo "demo: the lab fleet did not come up (see above)" >&2
  exit 1
fi
inventory=$(tail -n 1 "$up_log")
rm -f "$up_log"
echo "demo: lab inventory at $inventory"

rm -f reports/preflight.json
echo "demo: preflight over the lab fleet. lab-04's H100s are throttled (a real capture): that box is meant to FAIL,"
echo "demo: with an [ERROR]/fatal block for it below and exit 2; the demo then checks that only unfit boxes failed."
rc=0
ansible-playbook -i "$inventory" playbooks/preflight.yml \
  -e preflight_report_path="$PWD/reports/preflight.json" || rc=$?
# Exit 2 with a fresh report whose failing hosts all have a FAIL verdict means preflight did its job: it
# found unfit boxes (the default demo fleet has one). Anything else is a demo that did not run.
if [[ $rc -eq 2 && -f reports/preflight.json ]] && python3 -c '
import json, sys
report = json.load(open("reports/preflight.json"))
rows = {row["host"]: row for row in report["hosts"]}
sys.exit(0 if report["failing"] and all(rows[h]["verdict"] == "FAIL" for h in report["failing"]) else 1)'; then
  echo "demo: preflight named unfit boxes with their evidence (table above); report in reports/preflight.json"
  rc=0
elif [[ $rc -eq 0 ]]; then
  echo "demo: preflight passed every box; report in reports/preflight.json"
else
  echo "demo: preflight did not complete (exit $rc); see the output above" >&2
fi
exit "$rc"
