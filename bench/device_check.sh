#!/usr/bin/env bash
# The CUDA backend's device check (issue 3), for one H200 in about 6 minutes: builds for sm_90
# with CMake + Ninja, runs the GPU tests (ctest -R cuda), mptrain-bench --backend cuda (fp32,
# mixed-fp16, mixed-bf16 at batch 32, 256, 4096) and the PyTorch and JAX peers (bench/peers/),
# and prints a short table last. Logs go to a work folder; what the device tool should bring back
# (summary, test log, bench logs, merged JSON records: at most 8 files) is copied to $OUT.
#
# The device machine has no Debian packages: carry doctest's and nlohmann-json's headers in the
# git-ignored .deps/. Once, on the development machine, in the repository root:
#   mkdir -p .deps/include && cp -r /usr/include/doctest /usr/include/nlohmann .deps/include/
# Then through the device tool:
#   run(command="bash bench/device_check.sh", carry=[".deps"], timeout_s=540)
# Environment: FULL_CTEST=1 also runs every other test; SKIP_PEERS=1 skips the peers.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mptrain-device-check}
BUILD=${BUILD:-build-device}
WORK=$(mktemp -d /tmp/mptrain-check.XXXXXX)
mkdir -p "$OUT"
status=0
started=$SECONDS
stage() { echo; echo "=== $* ($((SECONDS - started)) s)"; }

# CMake finds nvcc on PATH (or through CUDACXX).
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi

stage "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
nvcc --version | tail -1 || true

if [ ! -f .deps/include/doctest/doctest.h ] && [ ! -f /usr/include/doctest/doctest.h ]; then
    echo "doctest headers missing: carry .deps (see the header of this script)"; exit 2
fi

stage "configure and build (sm_90)"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMPTRAIN_CUDA=ON -DMPTRAIN_CUDA_ARCHITECTURES=90 \
    -DMPTRAIN_BUILD_SAMPLES=OFF -DMPTRAIN_BUILD_BENCH=ON >"$WORK/configure.log" 2>&1 \
    || { tail -30 "$WORK/configure.log"; cp "$WORK/configure.log" "$OUT/"; exit 3; }
grep -E "mptrain:" "$WORK/configure.log" || true
if ! timeout 240 ninja -C "$BUILD" -j "$(nproc)" >"$WORK/build.log" 2>&1; then
    grep -E "error|FAILED" "$WORK/build.log" | head -40; tail -20 "$WORK/build.log"; cp "$WORK/build.log" "$OUT/"; exit 4
fi
echo "built"

stage "GPU tests"
timeout 150 ctest --test-dir "$BUILD" -R cuda --output-on-failure --timeout 140 2>&1 | tee "$WORK/ctest_cuda.log" \
    || status=5
if [ "${FULL_CTEST:-0}" = 1 ]; then
    stage "all other tests"
    timeout 240 ctest --test-dir "$BUILD" -E cuda -j 8 --output-on-failure --timeout 200 2>&1 | tee "$WORK/ctest_all.log" \
        || status=5
fi

stage "mptrain-bench --backend cuda"
bench="$BUILD/bin/mptrain-bench"
if [ -x "$bench" ]; then
    # 200 steps per timed epoch at small batches; 50 at 4096 keeps the generated data set small.
    timeout 120 "$bench" --backend cuda --precision fp32,mixed-fp16,mixed-bf16 --batch 32,256 \
        --json "$WORK/mptrain_small.json" 2>&1 | tee "$WORK/bench_small.log" || status=6
    timeout 120 "$bench" --backend cuda --precision fp32,mixed-fp16,mixed-bf16 --batch 4096 --steps 50 \
        --json "$WORK/mptrain_large.json" 2>&1 | tee "$WORK/bench_large.log" || status=6
    # The same step with the data set left in host memory: batches staged through pinned buffers.
    timeout 60 "$bench" --backend cuda --precision mixed-bf16 --batch 32,256 --streamed \
        --json "$WORK/mptrain_streamed.json" 2>&1 | tee "$WORK/bench_streamed.log" || status=6
else
    echo "no $bench (MPTRAIN_BUILD_BENCH off or bench/ missing)"
fi

if [ "${SKIP_PEERS:-0}" != 1 ]; then
    stage "PyTorch peers"
    (cd bench/peers && PYTHONUNBUFFERED=1 timeout 150 python3 torch_peer.py --json "$WORK/torch.json") 2>&1 \
        | tee "$WORK/torch.log" || echo "pytorch peers failed or timed out"
    stage "JAX peer"
    (cd bench/peers && PYTHONUNBUFFERED=1 timeout 90 python3 jax_peer.py --json "$WORK/jax.json") 2>&1 \
        | tee "$WORK/jax.log" || echo "jax peer failed or timed out"
fi

stage "summary"
python3 bench/peers/summary.py "$WORK"/mptrain_small.json "$WORK"/mptrain_large.json "$WORK"/mptrain_streamed.json \
    "$WORK"/torch.json "$WORK"/jax.json \
    | tee "$WORK/summary.txt"
echo "GPU tests: $(grep -E 'tests passed|tests failed' "$WORK/ctest_cuda.log" | tail -1)"
python3 - "$WORK" "$OUT/records.json" <<'PY'
import glob, json, sys
records = []
for path in sorted(glob.glob(sys.argv[1] + "/*.json")):
    try:
        records.extend(json.load(open(path)))
    except ValueError:
        pass
json.dump(records, open(sys.argv[2], "w"), indent=1)
PY
cat "$WORK"/bench_*.log > "$OUT/bench.log" 2>/dev/null
cat "$WORK"/torch.log "$WORK"/jax.log > "$OUT/peers.log" 2>/dev/null
cp "$WORK"/summary.txt "$WORK"/ctest_cuda.log "$OUT/" 2>/dev/null
[ -f "$WORK/ctest_all.log" ] && cp "$WORK/ctest_all.log" "$OUT/"
echo "exit status $status after $((SECONDS - started)) s"
exit $status
