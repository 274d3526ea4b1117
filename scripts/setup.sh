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

# build_venv VENV PYTHON REQUIREMENTS: VENV with PYTHON, the pinned REQUIREMENTS, and every package they pull in at
# the version of its lock (constraints-*.txt beside it: pip freeze of a venv that passed make test, so that a new
# release of an unpinned dependency cannot change a fresh clone's tests), installed once and again only when either
# file changes (their sha256 is kept in the venv, with the interpreter's path and version); a venv of another
# interpreter is made anew. Where the lock is missing it is written from the venv just built: to take newer
# dependencies, delete it, run make setup and make test, and commit the new lock.
# digest REQUIREMENTS LOCK: the sha256 of the requirements file and of its lock where there is one.
digest() { { cat "$1"; [[ ! -f $2 ]] || cat "$2"; } | sha256sum | cut -d' ' -f1; }

build_venv() {
  local venv=$1 interp=$2 requirements=$3 lock=${3/requirements/constraints} stamp=$1/.requirements.sha256
  local python want constraint=()
  python=$("$interp" -c 'import os, sys; print(os.path.realpath(sys.executable), sys.version.split()[0])')
  want="$(digest "$requirements" "$lock") $python"
  [[ -f $lock && -f $stamp && $(cat "$stamp") == "$want" && -x $venv/bin/python ]] && return 0
  if [[ ! -x $venv/bin/python || ! -f $stamp || $(cut -d' ' -f2- "$stamp") != "$python" ]]; then
    echo "setup: creating $venv with Python ${python#* } ($interp)"
    rm -rf "$venv"
    "$interp" -m venv "$venv"
  fi
  [[ -f $lock ]] && constraint=(-c "$lock")
  echo "setup: installing $requirements${constraint[*]:+ (locked by $lock)} into $venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -r "$requirements" "${constraint[@]}"
  if [[ ! -f $lock ]]; then
    { echo "# The lock of $requirements (scripts/setup.sh's build_venv): pip freeze of its venv, Python ${python#* }."
      "$venv/bin/python" -m pip freeze --exclude-editable; } > "$lock"
    echo "setup: wrote $lock from $venv: commit it once make test passes"
  fi
  echo "$(digest "$requirements" "$lock") $python" > "$stamp"
}

# .venv's Python (ansible-core 2.19, the controller of make demo and of most of make test): PYTHON if set, else the
# system's /usr/bin/python3 where it is 3.11 or newer (python3-venv above gives it venv and pip), else python3 on
# PATH. The distribution builds its Python with profile-guided and link-time optimization, which pyenv's default
# build leaves out: each Ansible run costs about a quarter less CPU on it (docs/development.md).
controller_python() {
  if [[ -n ${PYTHON:-} ]]; then
    echo "$PYTHON"
  elif [[ -x /usr/bin/python3 ]] &&
    /usr/bin/python3 -c 'import sys, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo /usr/bin/python3
  else
    echo python3
  fi
}

# The venvs are built at once (each mostly waits on pip's downloads and unpacking): .venv, then the newer
# ansible-core lanes of make test (docs/CONTRIBUTING.md, "Every supported ansible-core"): one venv per core,
# .venv-<core>, with the pinned requirements-<core>.txt and the Python that core needs, from pyenv. A missing
# interpreter fails under CI; elsewhere it is said here, and that core's lanes of make test fail saying the same.
builds=(".venv $(controller_python) requirements-dev.txt")
CORE_LANES=("2.20 3.12" "2.21 3.13")
for lane in "${CORE_LANES[@]}"; do
  read -r core pyver <<<"$lane"
  interp=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$pyver".*/bin/python"$pyver" 2>/dev/null | sort -V | tail -1 || true)
  if [[ -z $interp ]]; then
    echo "setup: make test's ansible-core $core lane needs Python $pyver, which pyenv does not have" \
      "(${PYENV_ROOT:-$HOME/.pyenv}/versions/$pyver.*): run 'pyenv install $pyver' (make demo does not need it)" >&2
    if [[ -n ${CI:-} ]]; then exit 1; fi
    continue
  fi
  builds+=(".venv-$core $interp requirements-$core.txt")
done
pids=()
for build in "${builds[@]}"; do
  read -r venv interp requirements <<<"$build"
  build_venv "$venv" "$interp" "$requirements" &
  pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
[[ $failed -eq 0 ]] || { echo "setup: a venv could not be built (pip's message is above): fix it and run make setup again" >&2; exit 1; }

mkdir -p .collections/ansible_collections/remote_gpu
link=.collections/ansible_collections/remote_gpu/trainer
if [[ ! -L $link ]]; then
  rm -rf "$link"
  ln -s ../../.. "$link"
fi
[[ -f $link/galaxy.yml ]] || { echo "setup: $link does not resolve to the checkout" >&2; exit 1; }
echo "setup: ready ($ROOT/.venv, $(ls -d .venv-* 2>/dev/null | paste -sd, -), collection linked at $link)"
