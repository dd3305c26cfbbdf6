#!/usr/bin/env bash
# Run ON the lent GPU host (device tool), in one call, from the repository root:
#   run(command="bash scripts/device_gpu_tests.sh", carry=[".whl"])
# after `bash scripts/fetch_device_wheels.sh` here. Installs the carried wheels into /tmp/site, unpacks
# bubblewrap, runs every `gpu`-marked test and the GPU benchmarks, and prints a summary. Logs go to $OUT.
# An argument picks a part: `tests`, `bench`, or `all` (default); extra arguments go to pytest.
set -u
part=${1:-all}; shift || true
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export CUDA_HOME=/usr/local/cuda PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD
mkdir -p /tmp/bwrap && dpkg -x .whl/bubblewrap_*.deb /tmp/bwrap && export PATH=/tmp/bwrap/usr/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
python3 -m cuda_agent.cli doctor || true

status=0
if [ "$part" != bench ]; then
timeout "${GPU_TEST_TIMEOUT:-480}" python3 -m pytest -m gpu -p no:cacheprovider -q -rA --junitxml="$OUT/gpu-tests.xml" --ignore=tests/deploy "$@" tests 2>&1 | tee "$OUT/gpu-tests.log"
status=${PIPESTATUS[0]}
fi
if [ "$part" != tests ]; then
echo "== compile benchmark"
timeout 300 python3 scripts/bench_compile.py 2>&1 | tee "$OUT/bench_compile.log"
echo "== eval benchmark"
timeout 300 python3 scripts/bench_eval.py --repeats 5 --json "$OUT/bench_eval.json" 2>&1 | tee "$OUT/bench_eval.log"
fi

echo "== summary"
if [ -f "$OUT/gpu-tests.log" ]; then
  grep -E "^(PASSED|FAILED|ERROR|SKIPPED)" "$OUT/gpu-tests.log" | awk '{print $1}' | sort | uniq -c
  grep -E "^(FAILED|ERROR)" "$OUT/gpu-tests.log"
  tail -n 1 "$OUT/gpu-tests.log"
fi
exit "$status"
