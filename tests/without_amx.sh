#!/usr/bin/env bash
# Runs a test program with MPTRAIN_CPU_AMX=0, the way CPUs without AMX tiles multiply bf16 layers.
# Exits 77 (ctest: skipped) on a CPU without AMX, where the program's own entry already runs it so and
# this one would only repeat it.
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
if [[ $flags != *" amx_tile"* || $flags != *" amx_bf16"* ]]; then
    echo "SKIPPED: this CPU has no AMX tiles, so the program's own entry already ran it without them"
    exit 77
fi
MPTRAIN_CPU_AMX=0 exec "$@"
