#!/usr/bin/env bash
# Builds and runs every test suite, twice:
#   1. build-test: the release-like build (with the CUDA backend compiled for one architecture when
#      nvcc is present; GPU tests skip without a device), all suites including the bindings, the
#      packaging/ABI checks and the C99 header test;
#   2. build-asan: everything under AddressSanitizer + UndefinedBehaviorSanitizer, where any report
#      fails the test (the bindings' interpreters and the malloc-counting test are left out there).
# Usage: scripts/test.sh [--no-sanitizers]
#        scripts/test.sh --thread-sanitizer   only the C++ suites under ThreadSanitizer (build-tsan;
#                                             about 4 minutes on 2 cores, not part of CI's run)
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=$(nproc 2>/dev/null || echo 2)
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
ctest --test-dir build-test --output-on-failure

if [[ "${1:-}" == "--no-sanitizers" ]]; then exit 0; fi

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMPTRAIN_CUDA=OFF \
  -DMPTRAIN_SANITIZE="address;undefined" -DMPTRAIN_BUILD_SAMPLES=OFF -DMPTRAIN_BUILD_BENCH=OFF
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure --label-exclude "bindings|packaging"
