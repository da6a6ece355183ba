#!/usr/bin/env bash
# Nightly-style fuzzing (not run in CI): builds every fuzz/fuzz_<name>.cpp with clang's libFuzzer,
# AddressSanitizer and UndefinedBehaviorSanitizer (CMake, -DMPTRAIN_FUZZ=ON: the targets link what the
# library is built from), then runs each target for a bounded time on its seed corpus
# fuzz/corpus/<name>/ (read-only; new inputs go to the build directory).
#
#   fuzz/run.sh [seconds per target, default 300] [target name ...]
#
# A target may add libFuzzer options on a "// fuzz-options:" line (paths are relative to the
# repository root). Crashes land in $MPTRAIN_FUZZ_DIR/artifacts/<name>/<run start>/; keep each one as
# fuzz/corpus/<name>/regress-<what>: ctest replays every corpus file (fuzz_corpus_<name>) in every
# build. Exits non-zero if any target found a crash or failed to build.
set -u -o pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-300}
shift || true
out=${MPTRAIN_FUZZ_DIR:-$root/build-fuzz}
cxx=${CXX_FUZZ:-clang++}
mkdir -p "$out"

if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for source in "$root"/fuzz/fuzz_*.cpp; do
    name=$(basename "$source" .cpp)
    targets+=("${name#fuzz_}")
  done
fi

field() {  # field <file> <name>: the text after "// <name>:" in the file's header comment
  sed -n "s|^// $2:[[:space:]]*||p" "$1" | head -n 1
}

if ! CC=${CC_FUZZ:-clang} CXX=$cxx cmake -S "$root" -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
     -DMPTRAIN_FUZZ=ON -DMPTRAIN_SANITIZE="address;undefined" -DMPTRAIN_CUDA=OFF \
     -DMPTRAIN_BUILD_TESTS=OFF -DMPTRAIN_BUILD_SAMPLES=OFF -DMPTRAIN_BUILD_BENCH=OFF >"$out/configure.log" 2>&1; then
  cat "$out/configure.log"
  echo "fuzz/run.sh: configuring $out failed" >&2
  exit 1
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
started=$(date +%Y%m%d-%H%M%S)
summary=()
for name in "${targets[@]}"; do
  source="$root/fuzz/fuzz_$name.cpp"
  if [ ! -f "$source" ]; then
    echo "fuzz/run.sh: no target $source" >&2
    status=1
    continue
  fi
  read -r -a options <<<"$(field "$source" fuzz-options)"
  binary="$out/bin/fuzz_$name"
  echo "== building $name"
  if ! nice cmake --build "$out" --target "fuzz_$name" >"$out/build-$name.log" 2>&1; then
    tail -n 30 "$out/build-$name.log"
    summary+=("$name: BUILD FAILED (log $out/build-$name.log)")
    status=1
    continue
  fi
  corpus="$out/corpus/$name"
  artifacts="$out/artifacts/$name/$started"  # per run: an earlier run's crashes are not this one's
  mkdir -p "$corpus" "$artifacts"
  seeds=()
  [ -d "$root/fuzz/corpus/$name" ] && seeds=("$root/fuzz/corpus/$name")
  echo "== fuzzing $name for ${seconds}s"
  if (cd "$root" && "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$artifacts/" "${options[@]}" \
        "$corpus" "${seeds[@]}") 2>&1 | tee "$out/$name.log" | grep -E "^#[0-9]+[[:space:]]+DONE|ERROR|SUMMARY|stat::" | tail -n 20; then
    :
  fi
  if grep -qE "ERROR: (libFuzzer|AddressSanitizer|UndefinedBehaviorSanitizer)|runtime error|==[0-9]+==ERROR" "$out/$name.log" ||
     [ -n "$(ls -A "$artifacts" 2>/dev/null)" ]; then
    summary+=("$name: CRASHES in $artifacts (log $out/$name.log)")
    status=1
  else
    summary+=("$name: clean, $(grep -oE 'stat::number_of_executed_units: [0-9]+' "$out/$name.log" | awk '{s+=$2} END {print s+0}') runs, corpus $(ls "$corpus" | wc -l) inputs")
  fi
done

echo "== summary"
printf '%s\n' "${summary[@]}"
exit $status
