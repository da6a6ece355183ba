# Sourced by the sample's command-line tests (test_cli.sh, test_cli_checkpoints.sh): the program
# under test ($1), a scratch folder removed on exit, and the checks' helpers. finish_checks ends the
# script, failing if any check failed.
set -u
program=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

refused() {  # the flags, then a phrase the error must hold: the run exits 2 and says it
    local phrase=${*: -1}
    "$program" "${@:1:$#-1}" >"$work/out" 2>"$work/err"
    local status=$?
    [ "$status" -eq 2 ] || fail "'${*:1:$#-1}' exited $status, not 2"
    grep -q -- "$phrase" "$work/err" || fail "'${*:1:$#-1}' did not say '$phrase': $(head -1 "$work/err")"
}

json_value() { sed -n "s/^ *\"$2\": \(.*\),\$/\1/p" "$work/$1.json"; }  # run, field

finish_checks() {  # the script's name for the last line
    if [ "$failures" -ne 0 ]; then
        echo "$failures failure(s)"
        exit 1
    fi
    echo "$1: all checks passed"
}
