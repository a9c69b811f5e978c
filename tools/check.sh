#!/bin/sh
# check.sh - every check CI runs, in order:
#   1. plain    the test suite on ./build          meson test -C build
#   2. valgrind the same suite under valgrind      meson test -C build --setup=valgrind
#   3. asan     the suite built with ASan+UBSan    meson test -C build-asan --setup=asan
#               (configures ./build-asan with -Db_sanitize=address,undefined if needed)
#   4. fuzz     every libFuzzer harness for 60 s   tests/fuzz/ci.sh 60 (when that file exists)
# Every stage runs even if an earlier one failed; a summary with each stage's result and
# duration is printed at the end, and the exit status is 1 if any stage failed.
# Usage: tools/check.sh [STAGE...]   (default: all four, in the order above)
set -u
cd "$(dirname "$0")/.." || exit 2

stages=${*:-plain valgrind asan fuzz}
summary=""
failed=0
t_all=$(date +%s)

run_stage() {
    name=$1
    shift
    echo "==== check: $name"
    t0=$(date +%s)
    if "$@"; then
        result=ok
    else
        result=FAILED
        failed=1
    fi
    t1=$(date +%s)
    summary="$summary$(printf '%-9s %-7s %4d s' "$name" "$result" $((t1 - t0)))
"
}

plain() {
    { [ -f build/build.ninja ] || meson setup build --buildtype=release; } &&
        meson test -C build --print-errorlogs
}

valgrind_suite() {
    { [ -f build/build.ninja ] || meson setup build --buildtype=release; } &&
        meson test -C build --setup=valgrind --print-errorlogs
}

asan() {
    { [ -f build-asan/build.ninja ] ||
        meson setup build-asan --buildtype=debugoptimized -Db_sanitize=address,undefined \
            -Db_lundef=false; } &&
        meson test -C build-asan --setup=asan --print-errorlogs
}

for s in $stages; do
    case $s in
    plain) run_stage plain plain ;;
    valgrind) run_stage valgrind valgrind_suite ;;
    asan) run_stage asan asan ;;
    fuzz)
        if [ -f tests/fuzz/ci.sh ]; then
            run_stage fuzz bash tests/fuzz/ci.sh 60
        else
            summary="$summary$(printf '%-9s %-7s' fuzz skipped) (no tests/fuzz/ci.sh)
"
        fi ;;
    *)
        echo "check: unknown stage '$s' (stages: plain valgrind asan fuzz)" >&2
        exit 2 ;;
    esac
done

echo "==== check: summary"
printf '%s' "$summary"
echo "total     $(($(date +%s) - t_all)) s"
if [ "$failed" -ne 0 ]; then
    echo "check: FAILED" >&2
    exit 1
fi
echo "check: all passed"
