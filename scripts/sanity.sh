#!/usr/bin/env bash
# ansible-test sanity must run from an ansible_collections/<ns>/<name> path. Copy the tracked and
# untracked-but-not-ignored files there (no docker here: --local with the pinned tools in .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WORK=${SANITY_WORKDIR:-$ROOT/.cache/sanity}
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
export PATH="$ROOT/.venv/bin:$PATH"
# ansible-test keeps its caches and virtual environments under ~/.ansible/test: give it a home inside
# the checkout, with the pip bootstrap script it would otherwise download (see scripts/get_pip_bootstrap.py).
export HOME="$ROOT/.cache/sanity-home"
# 24.2 is the pip version ansible-core 2.19's ansible-test pins (python_requirements.py).
mkdir -p "$HOME/.ansible/test/cache"
sed "s|@OUTER_PYTHON@|$ROOT/.venv/bin/python|" "$ROOT/scripts/get_pip_bootstrap.py" > "$HOME/.ansible/test/cache/get_pip_24_2.py"
exec ansible-test sanity --local --python 3.11 --color no "$@"
