#!/usr/bin/env bash
# Builds and tests the Rust bindings (cargo test --offline) against the library in $MPTRAIN_LIB_DIR
# (set by ctest), with cargo's target dir at $1 (default: target/ here), and builds the example.
# Exits 77 (ctest: skipped) when cargo is missing.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
CARGO=${CARGO:-cargo}
if ! command -v "$CARGO" >/dev/null 2>&1; then
    echo "SKIPPED: Rust bindings not tested: cargo is not installed"
    exit 77
fi
export CARGO_TARGET_DIR=${1:-${CARGO_TARGET_DIR:-$here/target}}
if [[ -n ${MPTRAIN_LIB_DIR:-} ]]; then
    export LD_LIBRARY_PATH=$MPTRAIN_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
cd "$here"
"$CARGO" test --offline --workspace --all-targets
"$CARGO" test --offline --workspace --doc
"$CARGO" run --offline --quiet --example train_mlp
