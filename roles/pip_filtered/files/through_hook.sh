# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# sh -c "$(cat this file)" pip_filtered HOOK SECONDS RETRIES DELAY COMMAND... < requirements
# Runs COMMAND (pip install -r /dev/stdin) with the profile's proxy hook sourced (AutoDL: /etc/network_turbo;
# empty: none), each attempt killed after SECONDS (exit 124, as coreutils timeout does), and a failed attempt
# tried again RETRIES times, DELAY seconds apart, with the same requirements on its standard input.
hook=$1
limit=$2
retries=$3
delay=$4
shift 4
if [ -n "$hook" ]; then
  . "$hook" >/dev/null || echo "pip_filtered: the proxy hook $hook returned non-zero; installing anyway" >&2
fi
if command -v timeout >/dev/null 2>&1; then
  set -- timeout -k 10 "$limit" "$@"
else
  echo "pip_filtered: this box has no timeout command; pip runs without a time limit" >&2
fi
requirements=$(cat)
attempt=1
while :; do
  printf '%s\n' "$requirements" | "$@"
  rc=$?
  if [ "$rc" -eq 0 ]; then
    exit 0
  fi
  if [ "$attempt" -gt "$retries" ]; then
    echo "pip_filtered: attempt $attempt failed (exit $rc); no retry left" >&2
    exit "$rc"
  fi
  echo "pip_filtered: attempt $attempt failed (exit $rc); trying again in $delay s" >&2
  attempt=$((attempt + 1))
  sleep "$delay"
done
