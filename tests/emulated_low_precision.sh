#!/usr/bin/env bash
# Runs a test program with MPTRAIN_CPU_AMX=0 and MPTRAIN_CPU_BF16_DOT=0, the way CPUs without native
# low-precision GEMMs multiply bf16 and fp16 layers (emulated in fp32 GEMMs). Exits 77 (ctest:
# skipped) on a CPU with neither AMX tiles nor AVX512-BF16, where the program's own entry already runs
# it so and this one would only repeat it.
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
if [[ ($flags != *" amx_tile"* || $flags != *" amx_bf16"*) && $flags != *" avx512_bf16"* ]]; then
    echo "SKIPPED: this CPU multiplies no low dtype natively, so the program's own entry already ran it emulated"
    exit 77
fi
MPTRAIN_CPU_AMX=0 MPTRAIN_CPU_BF16_DOT=0 exec "$@"
