#!/usr/bin/env bash
# mptrain's CPU backend against PyTorch and JAX on the same CPU: the seed MLP, plain SGD, batches
# 32 and 256, fp32 and mixed precision, printed as one table (bench/peers/summary.py --backend cpu).
# A benchmark, not a test. The peers need a Python with torch and jax, which the project's own
# setup does not install; for example, once:
#   python3 -m venv /tmp/peers && /tmp/peers/bin/pip install torch jax
#   PYTHON=/tmp/peers/bin/python bash bench/cpu_compare.sh
# Environment: BUILD (default build), PYTHON (default python3), BATCHES (default 32,256),
# PEER_STEPS (timed steps per repeat for the peers, default 8: eager AMP on a CPU is slow).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
# An absolute path: the peers run from bench/peers.
PYTHON=$(command -v "${PYTHON:-python3}") || { echo "no Python at ${PYTHON:-python3}"; exit 2; }
BATCHES=${BATCHES:-32,256}
PEER_STEPS=${PEER_STEPS:-8}
WORK=$(mktemp -d /tmp/mptrain-cpu-compare.XXXXXX)

if [ ! -x "$BUILD/bin/mptrain-bench" ]; then
    echo "no $BUILD/bin/mptrain-bench: build with -DMPTRAIN_BUILD_BENCH=ON (the default) first"; exit 2
fi
echo "=== mptrain (CPU backend)"
"$BUILD/bin/mptrain-bench" --backend cpu --precision fp32,mixed-fp16,mixed-bf16 --batch "$BATCHES" \
    --json "$WORK/mptrain.json" || exit 3
echo "=== PyTorch (CPU)"
# (PyTorch warns once when NumPy is missing; nothing here needs NumPy.)
(cd bench/peers && PYTHONWARNINGS=ignore::UserWarning "$PYTHON" torch_peer.py --device cpu --batch "$BATCHES" \
    --steps "$PEER_STEPS" --repeats 3 --json "$WORK/torch.json") 2>&1 \
    || echo "pytorch peers failed (is torch installed for $PYTHON?)"
echo "=== JAX (CPU)"
(cd bench/peers && "$PYTHON" jax_peer.py --device cpu --batch "$BATCHES" --steps "$PEER_STEPS" --repeats 3 \
    --json "$WORK/jax.json") 2>&1 || echo "jax peer failed (is jax installed for $PYTHON?)"
python3 bench/peers/summary.py --backend cpu "$WORK/mptrain.json" "$WORK/torch.json" "$WORK/jax.json"
echo "records: $WORK"
