#!/usr/bin/env bash
# `make bench`: every benchmark in bench/, each printing ratios against its baseline measured in the same run.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
rc=0
for b in bench/*.py; do
  echo "=== $b"
  python "$b" || rc=1
done
exit $rc
