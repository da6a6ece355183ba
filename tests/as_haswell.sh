#!/usr/bin/env bash
# Runs a test program twice with OpenBLAS's Haswell kernels, which round a sum by the batch's size,
# and without AMX or AVX512-BF16: with the AVX2 small-batch kernels (a Haswell or Zen), then with none (every GEMM
# through OpenBLAS, as on CPUs whose OpenBLAS kernels round by size and which have no small-batch
# kernels, such as ARM's). Exits 77 (ctest: skipped) on CPUs without AVX2 and FMA, which cannot
# run those kernels.
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
if [[ $flags != *" avx2"* || $flags != *" fma"* ]]; then
    echo "SKIPPED: this CPU lacks AVX2 or FMA, so it cannot run as a Haswell"
    exit 77
fi
status=0
for small_gemm in avx2 0; do
    echo "=== OPENBLAS_CORETYPE=Haswell MPTRAIN_CPU_AMX=0 MPTRAIN_CPU_BF16_DOT=0 MPTRAIN_CPU_SMALL_GEMM=$small_gemm"
    OPENBLAS_CORETYPE=Haswell MPTRAIN_CPU_AMX=0 MPTRAIN_CPU_BF16_DOT=0 MPTRAIN_CPU_SMALL_GEMM=$small_gemm "$@"
    result=$?
    [ "$result" -eq 77 ] && exit 77  # the program skipped itself (a binding's missing toolchain)
    [ "$result" -eq 0 ] || status=1
done
exit $status
