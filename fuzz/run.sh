#!/usr/bin/env bash
# Nightly-style fuzzing (not run in CI): builds every fuzz/fuzz_<name>.cpp with clang's libFuzzer,
# AddressSanitizer and UndefinedBehaviorSanitizer, then runs each target for a bounded time on its
# seed corpus fuzz/corpus/<name>/ (read-only; new inputs go to the build directory).
#
#   fuzz/run.sh [seconds per target, default 300] [target name ...]
#
# A target names the sources it links on a "// fuzz-sources:" line and may add libFuzzer options on
# a "// fuzz-options:" line and compiler/linker flags on a "// fuzz-flags:" line (paths are relative
# to the repository root). Crashes land in $MPTRAIN_FUZZ_DIR/artifacts/<name>/; keep each one as
# fuzz/corpus/<name>/regress-<what> and as a test case once fixed. Exits non-zero if any target
# found a crash or failed to build.
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

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
summary=()
for name in "${targets[@]}"; do
  source="$root/fuzz/fuzz_$name.cpp"
  if [ ! -f "$source" ]; then
    echo "fuzz/run.sh: no target $source" >&2
    status=1
    continue
  fi
  read -r -a sources <<<"$(field "$source" fuzz-sources)"
  read -r -a options <<<"$(field "$source" fuzz-options)"
  read -r -a flags <<<"$(field "$source" fuzz-flags)"
  binary="$out/fuzz_$name"
  echo "== building $name"
  if ! (cd "$root" && nice "$cxx" -std=c++17 -O1 -g -fno-omit-frame-pointer \
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        -Iinclude -Isrc "fuzz/fuzz_$name.cpp" "${sources[@]}" "${flags[@]}" -o "$binary"); then
    summary+=("$name: BUILD FAILED")
    status=1
    continue
  fi
  corpus="$out/corpus/$name"
  artifacts="$out/artifacts/$name"
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
