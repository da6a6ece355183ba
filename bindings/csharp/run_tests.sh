#!/usr/bin/env bash
# Builds the C# bindings, their tests and the example with Mono's mcs into $1 (default: bin/ here),
# then runs the test runner (closing line "N passed, N failed") and the example against the library
# in $MPTRAIN_LIB_DIR (set by ctest). Exits 77 (ctest: skipped) when mcs or mono is missing.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
MCS=${MCS:-mcs}
MONO=${MONO:-mono}
for tool in "$MCS" "$MONO"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "SKIPPED: C# bindings not tested: $tool is not installed (apt-get install mono-mcs mono-runtime)"
        exit 77
    fi
done
out=${1:-$here/bin}
mkdir -p "$out"
if [[ -n ${MPTRAIN_LIB_DIR:-} ]]; then
    export LD_LIBRARY_PATH=$MPTRAIN_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
"$MCS" -nologo -warnaserror -target:library -doc:"$out/Mptrain.xml" -nowarn:1591 -out:"$out/Mptrain.dll" "$here"/src/*.cs
"$MCS" -nologo -warnaserror -target:exe -r:"$out/Mptrain.dll" -out:"$out/Mptrain.Tests.exe" "$here"/tests/*.cs
"$MCS" -nologo -warnaserror -target:exe -r:"$out/Mptrain.dll" -out:"$out/TrainMlp.exe" "$here"/examples/TrainMlp.cs
# timeout: when native code aborts, Mono's crash reporter can hang instead of exiting.
timeout -k 10 120 "$MONO" "$out/TrainMlp.exe"
exec timeout -k 10 240 "$MONO" --debug "$out/Mptrain.Tests.exe" "${@:2}"
