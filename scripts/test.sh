#!/usr/bin/env bash
# Builds and runs every test suite, twice:
#   1. build-test: the release-like build (with the CUDA backend compiled for one architecture when
#      nvcc is present; GPU tests skip without a device), all suites including the bindings, the
#      packaging/ABI checks and the C99 header test;
#   2. build-asan: everything under AddressSanitizer + UndefinedBehaviorSanitizer, where any report
#      fails the test (the bindings' interpreters and the malloc-counting test are left out there).
# Usage: scripts/test.sh [--no-sanitizers]
#        scripts/test.sh --thread-sanitizer   only the C++ suites under ThreadSanitizer (build-tsan;
#                                             about 5 minutes on 2 cores, not part of CI's run)
#        scripts/test.sh --cpu-variants       build-test's suites once more as each other CPU this one
#                                             can play (below; about 4 minutes each, not in CI)
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=$(nproc 2>/dev/null || echo 2)
if [[ "${1:-}" == "--cpu-variants" ]]; then
  # Bits and allocations depend on the kernels a CPU takes: AMX tiles, AVX512-BF16's dot products,
  # the small-batch kernels (AVX-512, AVX512F, AVX2 or none) and OpenBLAS's own per-CPU kernels. Suites
  # that passed on one machine have failed on another for it (a batch size assumed not to change a sum,
  # AUTO assumed to be fp32 on the CPU, an allocation only CPUs without AVX2 made), so this runs them
  # as the CPUs this one can imitate: without AMX (a Zen 4 or Cooper Lake: bf16 on dot products); as
  # an Ice Lake or Skylake-SP (AVX512F, no bf16 instructions); as a Haswell or Zen 3 (OpenBLAS's
  # Haswell kernels, AVX2 small GEMMs); as a CPU without AVX2 or not x86-64 (OpenBLAS and the portable
  # GEMM only). Forcing pre-AVX2 OpenBLAS kernels is left out: mptrain warns about them, as a test checks.
  flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
  emulated="MPTRAIN_CPU_AMX=0 MPTRAIN_CPU_BF16_DOT=0"
  variants=("MPTRAIN_CPU_AMX=0" "$emulated MPTRAIN_CPU_SMALL_GEMM=0")
  if [[ $flags == *" avx512f"* ]]; then variants+=("$emulated MPTRAIN_CPU_SMALL_GEMM=avx512f"); fi
  if [[ $flags == *" avx2"* && $flags == *" fma"* ]]; then
    variants+=("OPENBLAS_CORETYPE=Haswell $emulated MPTRAIN_CPU_SMALL_GEMM=avx2"
               "OPENBLAS_CORETYPE=Haswell $emulated MPTRAIN_CPU_SMALL_GEMM=0")
  fi
  cmake -S . -B build-test -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMPTRAIN_CUDA_ARCHITECTURES=90
  cmake --build build-test -j "$jobs"
  failed=()
  for variant in "${variants[@]}"; do
    echo "=== as another CPU: $variant"
    # (Not the tests of the project's scripts, nor the race checks of the emulated GPU kernels, which
    # no CPU kind changes.)
    # shellcheck disable=SC2086  # the variant is words of NAME=value
    env $variant ctest --test-dir build-test --output-on-failure -j "$jobs" --label-exclude "scripts|race_check" \
      || failed+=("$variant")
  done
  if (( ${#failed[@]} )); then printf 'failed as: %s\n' "${failed[@]}"; exit 1; fi
  exit 0
fi
if [[ "${1:-}" == "--thread-sanitizer" ]]; then
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMPTRAIN_CUDA=OFF \
    -DMPTRAIN_SANITIZE=thread -DMPTRAIN_BUILD_SAMPLES=OFF -DMPTRAIN_BUILD_BENCH=OFF
  cmake --build build-tsan -j "$jobs"
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    ctest --test-dir build-tsan --output-on-failure --label-exclude "bindings|packaging"
  exit 0
fi
cmake -S . -B build-test -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMPTRAIN_CUDA_ARCHITECTURES=90
cmake --build build-test -j "$jobs"
# Side by side: no suite shares files or a port with another (--cpu-variants has run them so since it
# began), and the longest ones are split so that none holds the run up alone.
ctest --test-dir build-test --output-on-failure -j "$jobs"

if [[ "${1:-}" == "--no-sanitizers" ]]; then exit 0; fi

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMPTRAIN_CUDA=OFF \
  -DMPTRAIN_SANITIZE="address;undefined" -DMPTRAIN_BUILD_SAMPLES=OFF -DMPTRAIN_BUILD_BENCH=OFF
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" --label-exclude "bindings|packaging"
