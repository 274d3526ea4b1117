#!/usr/bin/env bash
# One-time (and idempotent) project set-up: Debian packages for the lab, a virtualenv
# inside the repo with the pinned toolchain, and the collection linked where Ansible
# finds it (.collections/ansible_collections/remote_gpu/trainer -> this checkout).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

APT_PACKAGES=(openssh-server openssh-client rsync tmux tinyproxy iproute2 util-linux procps python3-venv curl cron)
# Installed as root (CI); without root only noted: the dashboard's browser test (tests/lab) skips without it.
OPTIONAL_APT_PACKAGES=(chromium)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
missing=()
for p in "${APT_PACKAGES[@]}"; do
  installed "$p" || missing+=("$p")
done
for p in "${OPTIONAL_APT_PACKAGES[@]}"; do
  if ! installed "$p"; then
    if [[ $(id -u) -eq 0 ]]; then
      missing+=("$p")
    else
      echo "setup: optional Debian package $p is missing (the dashboard's browser test will skip)" >&2
    fi
  fi
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: missing Debian packages: ${missing[*]}" >&2
    echo "setup: run 'sudo apt-get install -y ${missing[*]}' or run make setup as root" >&2
    exit 1
  fi
  echo "setup: installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  echo "setup: creating .venv with $($PY --version 2>&1)"
  "$PY" -m venv .venv
fi
stamp=.venv/.requirements.sha256
want=$(sha256sum requirements-dev.txt | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  echo "setup: installing the pinned toolchain into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements-dev.txt
  echo "$want" > "$stamp"
fi

mkdir -p .collections/ansible_collections/remote_gpu
link=.collections/ansible_collections/remote_gpu/trainer
if [[ ! -L $link ]]; then
  rm -rf "$link"
  ln -s ../../.. "$link"
fi
[[ -f $link/galaxy.yml ]] || { echo "setup: $link does not resolve to the checkout" >&2; exit 1; }
echo "setup: ready ($ROOT/.venv, collection linked at $link)"
