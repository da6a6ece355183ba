#!/usr/bin/env bash
# ABI guard of libmptrain.so. Checks that
#  1. every exported dynamic symbol is an mpt_* function (nothing of the C++ core leaks),
#  2. the header's functions and the exported symbols are the same set,
#  3. the soname's major version equals MPT_VERSION_MAJOR,
#  4. nothing recorded in abi.txt (symbols with their version node, function prototypes with the
#     parameter names dropped, callback typedefs, enum values) disappeared or changed, unless the
#     major version was bumped; new entries only print a note asking to record them,
#  5. no CUDA library is a load-time dependency (the runtime is static, cuBLASLt is opened with
#     dlopen), so a build with the CUDA backend still loads, and runs on the CPU, without them.
# C symbols carry no types, so prototypes are read from the header (through the C preprocessor) to
# catch a changed signature as well as a removed symbol.
#
# usage: test_abi.sh LIBRARY HEADER ABI_FILE            check
#        test_abi.sh LIBRARY HEADER ABI_FILE --update   rewrite ABI_FILE from LIBRARY and HEADER
# env:   CC (the C compiler used to preprocess the header; default cc), NM (default nm)
set -euo pipefail

if [[ $# -lt 3 ]]; then
    echo "usage: $0 LIBRARY HEADER ABI_FILE [--update]" >&2
    exit 2
fi
library=$1 header=$2 abi_file=$3 mode=${4:-check}
CC=${CC:-cc}
NM=${NM:-nm}
for tool in "$NM" readelf "$CC" awk sort comm; do
    command -v "$tool" >/dev/null || { echo "test_abi: '$tool' is required" >&2; exit 2; }
done
[[ -f $library ]] || { echo "test_abi: no library at $library" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
fail() { echo "ABI FAIL: $*" >&2; failed=1; }

# ---- what the library exports ---------------------------------------------------------------------
# Defined dynamic symbols, with their version (name@@NODE). The version node itself appears as an
# absolute symbol named like the node: skip it.
"$NM" -D --defined-only --format=posix "$library" | awk '$2 != "A" { print $1 }' | sort -u >"$work/exported"
if [[ ! -s $work/exported ]]; then
    fail "$library exports no symbols"
fi
grep -v '^mpt_' "$work/exported" >"$work/foreign" || true
if [[ -s $work/foreign ]]; then
    fail "symbols outside mpt_* are exported (check capi/mptrain.map and -fvisibility=hidden):"
    sed 's/^/    /' "$work/foreign" >&2
fi
sed 's/@.*//' "$work/exported" | sort -u >"$work/exported_names"

soname=$(readelf -d "$library" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
soname_major=${soname##*.so.}
header_major=$(sed -n 's/^#define MPT_VERSION_MAJOR \([0-9][0-9]*\).*/\1/p' "$header")
if [[ -z $soname || -z $header_major || $soname_major != "$header_major" ]]; then
    fail "soname '$soname' does not carry MPT_VERSION_MAJOR ($header_major)"
fi

readelf -d "$library" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' >"$work/needed"
if grep -E '^lib(cuda|cudart|cublas|cublasLt|nvrtc|nccl)[.-]' "$work/needed" >"$work/needed_cuda"; then
    fail "CUDA libraries are load-time dependencies: $(tr '\n' ' ' <"$work/needed_cuda")"
fi

# ---- what the header declares ---------------------------------------------------------------------
# One statement per line after preprocessing; then functions (marked by the visibility attribute),
# callback typedefs and enum constants, each normalised (parameter names dropped, '*' bound to the type).
"$CC" -E -P -x c "$header" | tr '\n' ' ' | sed 's/;/;\n/g' | awk '
function squash(text) { gsub(/[ \t]+/, " ", text); sub(/^ /, "", text); sub(/ $/, "", text); return text }
function type_of(decl,    n, tokens, i, out) {          # "const char * message" -> "const char*"
    gsub(/\*/, " * ", decl); decl = squash(decl)
    if (decl == "void" || decl == "") return decl
    n = split(decl, tokens, " ")
    if (n > 1 && tokens[n] ~ /^[A-Za-z_][A-Za-z0-9_]*$/) n--
    out = tokens[1]
    for (i = 2; i <= n; i++) out = out (tokens[i] == "*" ? "*" : " " tokens[i])
    return out
}
function params_of(list,    n, parts, i, out) {
    n = split(list, parts, ",")
    out = ""
    for (i = 1; i <= n; i++) out = out (i > 1 ? ", " : "") type_of(parts[i])
    return out
}
{
    statement = squash($0)
    if (statement ~ /^typedef enum/) {
        body = statement; sub(/^[^{]*\{/, "", body); sub(/\}.*/, "", body)
        n = split(body, items, ",")
        for (i = 1; i <= n; i++) {
            item = squash(items[i])
            if (item == "") continue
            split(item, kv, "=")
            printf "enum %s = %s\n", squash(kv[1]), squash(kv[2])
        }
        next
    }
    open = 0
    for (i = length(statement); i > 0; i--) if (substr(statement, i, 1) == "(") { open = i; break }
    if (!open) next
    close_at = length(statement); while (substr(statement, close_at, 1) != ")" && close_at > open) close_at--
    params = params_of(substr(statement, open + 1, close_at - open - 1))
    head = squash(substr(statement, 1, open - 1))
    if (statement ~ /^typedef .*\( *\* *[A-Za-z_][A-Za-z0-9_]* *\) *\(/) {
        name = head; sub(/^.*\( *\* */, "", name); sub(/ *\).*$/, "", name)
        result = head; sub(/^typedef /, "", result); sub(/ *\(.*$/, "", result)
        printf "callback %s: %s (%s)\n", name, type_of(result), params
    } else if (head ~ /visibility/) {
        gsub(/__attribute__ *\(\(visibility\("default"\)\)\)/, "", head)
        name = head; sub(/^.*[^A-Za-z0-9_]/, "", name)
        result = head; sub(/[A-Za-z_][A-Za-z0-9_]* *$/, "", result)
        printf "function %s: %s (%s)\n", name, type_of(result), params
    }
}' | sort -u >"$work/declared"
if ! grep -q '^function ' "$work/declared"; then
    fail "no function declarations found in $header (did the MPT_API marker change?)"
fi
sed -n 's/^function \([^:]*\):.*/\1/p' "$work/declared" | sort -u >"$work/declared_names"
comm -23 "$work/declared_names" "$work/exported_names" >"$work/unexported"
comm -13 "$work/declared_names" "$work/exported_names" >"$work/undeclared"
if [[ -s $work/unexported ]]; then
    fail "declared in $header but not exported by the library:"
    sed 's/^/    /' "$work/unexported" >&2
fi
if [[ -s $work/undeclared ]]; then
    fail "exported by the library but not declared in $header:"
    sed 's/^/    /' "$work/undeclared" >&2
fi

{
    echo "major $soname_major"
    sed 's/^/symbol /' "$work/exported"
    cat "$work/declared"
} | sort -u >"$work/current"

if [[ $mode == --update ]]; then
    {
        echo "# The ABI of libmptrain.so as released: exported symbols (with their version node), C prototypes"
        echo "# without parameter names, callback types and enum values. Checked by tests/test_abi.sh: an entry"
        echo "# may disappear or change only with a major version bump. Regenerate after an intended change:"
        echo "#   bash tests/test_abi.sh build/lib/libmptrain.so include/mptrain/mptrain.h abi.txt --update"
        grep '^major ' "$work/current"
        grep -v '^major ' "$work/current"
    } >"$abi_file"
    echo "test_abi: wrote $(grep -vc '^#' "$abi_file") entries to $abi_file"
    exit $failed
fi

[[ -f $abi_file ]] || { fail "no $abi_file; create it with: $0 $library $header $abi_file --update"; exit 1; }
grep -v '^#' "$abi_file" | sed '/^[[:space:]]*$/d' | sort -u >"$work/recorded"
recorded_major=$(sed -n 's/^major //p' "$work/recorded")
comm -23 "$work/recorded" "$work/current" | grep -v '^major ' >"$work/removed" || true
comm -13 "$work/recorded" "$work/current" | grep -v '^major ' >"$work/added" || true

if [[ -s $work/removed ]]; then
    # A changed prototype shows up as one removed and one added line for the same name.
    while IFS= read -r line; do
        key=${line%%:*}
        if [[ $line == function* || $line == callback* ]] && grep -q "^${key}:" "$work/added"; then
            echo "    changed: $line" >&2
            echo "         now: $(grep "^${key}:" "$work/added")" >&2
        else
            echo "    removed: $line" >&2
        fi
    done <"$work/removed" >"$work/removed_report" 2>&1
    if [[ $recorded_major == "$soname_major" ]]; then
        fail "these ABI entries of major version $recorded_major disappeared or changed; that needs a major version bump (MPT_VERSION_MAJOR, project VERSION, soname):"
        cat "$work/removed_report" >&2
    else
        fail "major version went from $recorded_major to $soname_major, so these ABI breaks are allowed; record the new ABI with: bash $0 $library $header $abi_file --update"
        cat "$work/removed_report" >&2
    fi
elif [[ $recorded_major != "$soname_major" ]]; then
    fail "major version went from $recorded_major to $soname_major; record the new ABI with: bash $0 $library $header $abi_file --update"
fi

if [[ -s $work/added ]]; then
    echo "test_abi: NOTE: $(wc -l <"$work/added") new ABI entries are not recorded in $abi_file yet:"
    sed 's/^/    added: /' "$work/added"
    echo "test_abi: record them (additions are compatible) with:"
    echo "    bash tests/test_abi.sh $library $header $abi_file --update"
fi

if [[ $failed -ne 0 ]]; then
    exit 1
fi
echo "test_abi: OK: $(wc -l <"$work/exported_names") exported mpt_* functions, all declared; nothing recorded in $(basename "$abi_file") was removed or changed"
