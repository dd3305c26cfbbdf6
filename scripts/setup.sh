#!/usr/bin/env bash
# Set up a fresh machine: system packages, torch, the project with its dev extras. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v bwrap >/dev/null || need_apt+=(bubblewrap)
command -v g++ >/dev/null || need_apt+=(g++)
command -v redis-server >/dev/null || need_apt+=(redis-server)  # the selftest starts a private broker it can restart
# tests/dashboard drive the web dashboard in Debian's headless Chromium (playwright never downloads a browser).
command -v chromium >/dev/null || need_apt+=(chromium chromium-driver)
if ((${#need_apt[@]})); then
  if command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "setup: please install: ${need_apt[*]}" >&2
  fi
fi

PYTHON=${PYTHON:-python3}
# torch is pinned here, not in pyproject: the GPU host brings its own build (2.11) and must keep it.
"$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.__version__.startswith("2.14.1") else 1)' 2>/dev/null \
  || "$PYTHON" -m pip install -q "torch==2.14.1"
"$PYTHON" -m pip install -q -e '.[dev]'
echo "setup: done ($("$PYTHON" -c 'import torch; print("torch", torch.__version__)'))"
