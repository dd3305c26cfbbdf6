#!/usr/bin/env bash
# Run ON the lent GPU host (device tool), in one call, from the repository root:
#   run(command="bash scripts/device_gpu_tests.sh", carry=[".whl"])
# after `bash scripts/fetch_device_wheels.sh` here. Installs the carried wheels into /tmp/site, unpacks
# bubblewrap, runs every `gpu`-marked test and the GPU benchmarks, and prints a summary. Logs go to $OUT.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export CUDA_HOME=/usr/local/cuda PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD
mkdir -p /tmp/bwrap && dpkg -x .whl/bubblewrap_*.deb /tmp/bwrap && export PATH=/tmp/bwrap/usr/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
python3 -m cuda_agent.cli doctor || true

status=0
python3 -m pytest -m gpu -p no:cacheprovider -q -rA --junitxml="$OUT/gpu-tests.xml" tests 2>&1 | tee "$OUT/gpu-tests.log"
status=${PIPESTATUS[0]}
for bench in scripts/bench_compile.py scripts/bench_eval.py; do
  [ -f "$bench" ] || continue
  echo "== $bench"
  timeout 300 python3 "$bench" 2>&1 | tee -a "$OUT/benchmarks.log"
done

echo "== summary"
grep -E "^(PASSED|FAILED|ERROR|SKIPPED)" "$OUT/gpu-tests.log" | awk '{print $1}' | sort | uniq -c
tail -n 1 "$OUT/gpu-tests.log"
exit "$status"
