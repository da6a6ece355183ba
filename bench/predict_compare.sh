#!/usr/bin/env bash
# Prediction latency on the CPU, mptrain against PyTorch on the same CPU: the seed MLP on a few rows
# (mptrain-bench --predict and bench/peers/torch_predict.py, the same table), then the ratios. A
# benchmark, not a test. The peer needs a Python with torch (see bench/cpu_compare.sh), e.g.
#   PYTHON=/tmp/peers/bin/python bash bench/predict_compare.sh
# Environment: BUILD (default build), PYTHON (default python3), ROWS (default 1,2,4,8), REPEATS (3).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PYTHON=$(command -v "${PYTHON:-python3}") || { echo "no Python at ${PYTHON:-python3}"; exit 2; }
ROWS=${ROWS:-1,2,4,8}
REPEATS=${REPEATS:-3}
WORK=$(mktemp -d /tmp/mptrain-predict-compare.XXXXXX)
[ -x "$BUILD/bin/mptrain-bench" ] || { echo "no $BUILD/bin/mptrain-bench: build first"; exit 2; }

echo "=== mptrain (CPU backend)"
"$BUILD/bin/mptrain-bench" --predict "$ROWS" --precision fp32,mixed-bf16 --repeats "$REPEATS" | tee "$WORK/mptrain.txt" \
    || exit 3
echo "=== PyTorch (CPU)"
(cd bench/peers && "$PYTHON" torch_predict.py --rows "$ROWS" --repeats "$REPEATS") 2>&1 | tee "$WORK/torch.txt" \
    || echo "pytorch peer failed (is torch installed for $PYTHON?)"
# Both print: backend precision runs-as rows us/predict best-us.
python3 - "$WORK/mptrain.txt" "$WORK/torch.txt" <<'PY'
import sys
times = {}
for path in sys.argv[1:]:
    for line in open(path):
        fields = line.split()
        if len(fields) == 6 and fields[0] in ("cpu", "torch") and fields[3].isdigit():
            times[(fields[0], fields[1], int(fields[3]))] = float(fields[4])
rows = sorted({key[2] for key in times})
print("\nmedian us per prediction, seed MLP; peer / mptrain > 1: mptrain faster")
print(f"{'rows':>5} {'mptrain fp32':>13} {'mptrain bf16':>13} {'torch fp32':>11} {'torch bf16':>11} {'best peer / mptrain bf16':>25}")
for r in rows:
    get = lambda backend, precision: times.get((backend, precision, r))
    ours, peers = get("cpu", "mixed-bf16"), [t for t in (get("torch", "fp32"), get("torch", "bf16")) if t]
    cell = lambda t: f"{t:,.0f}" if t else "-"
    ratio = f"{min(peers) / ours:.2f}x" if ours and peers else "-"
    print(f"{r:>5} {cell(get('cpu', 'fp32')):>13} {cell(ours):>13} {cell(get('torch', 'fp32')):>11} "
          f"{cell(get('torch', 'bf16')):>11} {ratio:>25}")
PY
echo "records: $WORK"
