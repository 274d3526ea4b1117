#!/usr/bin/env bash
# ansible-test sanity must run from an ansible_collections/<ns>/<name> path. Copy the tracked and
# untracked-but-not-ignored files there (no docker here: --local with the pinned tools in .venv).
# TRAINER_VENV (default .venv) picks the ansible-core: .venv-2.20 or .venv-2.21 run that core's ansible-test with
# its Python, in a work folder and a home of their own, so that the cores' lanes can run at once.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=$ROOT/${TRAINER_VENV:-.venv}
SUFFIX=${VENV##*/.venv}  # "" for .venv, "-2.20" for .venv-2.20
WORK=${SANITY_WORKDIR:-$ROOT/.cache/sanity$SUFFIX}
DEST=$WORK/ansible_collections/remote_gpu/trainer
rm -rf "$DEST"
mkdir -p "$DEST"
# Captured tool output under tests/fixtures/ is data, byte for byte as the real tools printed it (CRLF
# from Windows drivers included), not collection code: it is left out of the copy.
git ls-files -z --cached --others --exclude-standard -- . ':!tests/fixtures' | \
  rsync -a --from0 --files-from=- ./ "$DEST/"
cd "$DEST"
# ansible-test wants a git repo to know which files belong to the collection.
git init -q . && git add -A >/dev/null && git -c user.email=s@l -c user.name=sanity commit -qm sanity >/dev/null
export PATH="$VENV/bin:$PATH"
# ansible-test keeps its caches and virtual environments under ~/.ansible/test: give it a home inside
# the checkout, with the pip bootstrap script it would otherwise download (see scripts/get_pip_bootstrap.py).
export HOME="$ROOT/.cache/sanity-home$SUFFIX"
# the pip version this core's ansible-test pins (python_requirements.py: 24.2 in 2.19, 25.2 in 2.20 and 2.21)
PY=$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
PIP=$(grep -o "pip='[0-9.]*'" "$VENV"/lib/python"$PY"/site-packages/ansible_test/_internal/python_requirements.py | cut -d"'" -f2)
[[ -n $PIP ]] || { echo "sanity: cannot tell which pip $VENV's ansible-test pins" >&2; exit 1; }
mkdir -p "$HOME/.ansible/test/cache"
sed "s|@OUTER_PYTHON@|$VENV/bin/python|" "$ROOT/scripts/get_pip_bootstrap.py" > "$HOME/.ansible/test/cache/get_pip_${PIP//./_}.py"
exec ansible-test sanity --local --python "$PY" --color no "$@"
