#!/bin/bash
# Run every libFuzzer harness for a while; fail on any finding.
#
#   tests/fuzz/ci.sh [SECONDS [HARNESS...]]      (default: 60 s each, every harness)
#
# Configures build-fuzz/ with clang if it is not there yet (CC=clang, -Dfuzz=enabled,
# -Dtests=false; FUZZ_BUILD_DIR overrides the directory), builds the harnesses listed in
# tests/fuzz/meson.build, and runs each for SECONDS (-max_total_time) with -rss_limit_mb=2048
# -timeout=10 and its dictionary, FUZZ_JOBS (default 2) at a time under nice. Each runs on a
# scratch copy of corpus/<harness>/ plus regress/<harness>/ in a temporary directory, so
# nothing in the repository is written (except the build dir). Prints executions, exec/s and
# coverage per harness. Exit status 0 if every harness ran clean; 1 on a finding, with the
# reproducer's path, the sanitizer report and the commands to reproduce it (the scratch
# directory is then kept); 2 if the fuzzers cannot be built.
set -euo pipefail

if ((BASH_VERSINFO[0] < 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] < 1))); then
    echo "fuzz/ci.sh: needs bash >= 5.1 (wait -n -p)" >&2
    exit 2
fi

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
secs=${1:-60}
shift $(($# > 0 ? 1 : 0))
if ! [[ $secs =~ ^[1-9][0-9]*$ ]]; then
    echo "fuzz/ci.sh: SECONDS must be a positive integer, not '$secs'" >&2
    exit 2
fi
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
jobs=${FUZZ_JOBS:-2}

# The harness list is the one in tests/fuzz/meson.build (lines "  ['fuzz_x', ...],").
mapfile -t all < <(grep -oE "^[[:space:]]*\['fuzz_[a-z0-9_]+'" "$here/meson.build" |
    grep -oE "fuzz_[a-z0-9_]+")
if (($# > 0)); then harnesses=("$@"); else harnesses=("${all[@]}"); fi
for h in "${harnesses[@]}"; do
    if ! printf '%s\n' "${all[@]}" | grep -qxF "$h"; then
        echo "fuzz/ci.sh: unknown harness '$h' (tests/fuzz/meson.build lists: ${all[*]})" >&2
        exit 2
    fi
done

# ----- build ------------------------------------------------------------------------------------
if [ ! -f "$build/build.ninja" ]; then
    if ! command -v "${CC:-clang}" >/dev/null; then
        echo "fuzz/ci.sh: '${CC:-clang}' not found; the fuzzers need clang with libFuzzer" >&2
        exit 2
    fi
    echo "fuzz/ci.sh: configuring $build with ${CC:-clang} and ${CXX:-clang++}"
    CC=${CC:-clang} CXX=${CXX:-clang++} meson setup "$build" "$root" -Dfuzz=enabled -Dtests=false \
        --buildtype=debugoptimized >"$build.setup.log" 2>&1 || {
        cat "$build.setup.log" >&2
        exit 2
    }
    rm -f "$build.setup.log"
else
    meson configure "$build" -Dfuzz=enabled >/dev/null || exit 2
fi
# A harness whose feature is off in this build (fuzz_spm without SentencePiece) is skipped.
mapfile -t have < <(meson introspect "$build" --targets | grep -oE '"name": "fuzz_[a-z0-9_]+"' |
    grep -oE 'fuzz_[a-z0-9_]+')
kept=()
for h in "${harnesses[@]}"; do
    if printf '%s\n' "${have[@]}" | grep -qxF "$h"; then
        kept+=("$h")
    else
        echo "fuzz/ci.sh: $h is not built in $build (its meson feature is off): skipped"
    fi
done
harnesses=("${kept[@]}")
nice meson compile -C "$build" "${harnesses[@]}" >/dev/null || {
    echo "fuzz/ci.sh: building the fuzzers failed:" >&2
    nice meson compile -C "$build" "${harnesses[@]}" >&2
    exit 2
}

# ----- run ----------------------------------------------------------------------------------------
scratch=$(mktemp -d "${TMPDIR:-/tmp}/tgrad-fuzz.XXXXXX")
declare -A harness_of=() rc_of=()
# On interrupt, stop the fuzzers this script started (by pid) and keep nothing running.
trap 'for p in "${!harness_of[@]}"; do kill "$p" 2>/dev/null || true; done; exit 130' INT TERM

launch() {
    local h=$1 d=$scratch/$1
    mkdir -p "$d/corpus" "$d/artifacts"
    cp -p "$here/corpus/$h/." "$d/corpus/" -r 2>/dev/null || true
    if [ -d "$here/regress/$h" ]; then
        find "$here/regress/$h" -maxdepth 1 -type f ! -name '.*' -exec cp -p {} "$d/corpus/" \;
    fi
    local dict=()
    [ -f "$here/dict/$h.dict" ] && dict=("-dict=$here/dict/$h.dict")
    echo "fuzz/ci.sh: $h for ${secs}s ($(find "$d/corpus" -type f | wc -l) inputs)"
    nice "$build/tests/fuzz/$h" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 \
        -print_final_stats=1 -artifact_prefix="$d/artifacts/" "${dict[@]}" "$d/corpus" \
        >"$d/log" 2>&1 &
    harness_of[$!]=$h
}

reap() {
    local pid rc=0
    wait -n -p pid || rc=$?
    rc_of[${harness_of[$pid]}]=$rc
    unset "harness_of[$pid]"
}

for h in "${harnesses[@]}"; do
    while ((${#harness_of[@]} >= jobs)); do reap; done
    launch "$h"
done
while ((${#harness_of[@]} > 0)); do reap; done
trap - INT TERM

# ----- report -------------------------------------------------------------------------------------
failed=0
printf '%-20s %-6s %12s %9s %7s %7s %s\n' harness result execs exec/s cov ft corpus
for h in "${harnesses[@]}"; do
    d=$scratch/$h
    last=$(grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$d/log" | tail -1 || true)
    execs=$(grep -oE 'number_of_executed_units: [0-9]+' "$d/log" | grep -oE '[0-9]+$' || echo '?')
    eps=$(grep -oE 'average_exec_per_sec: +[0-9]+' "$d/log" | grep -oE '[0-9]+$' || echo '?')
    cov=$(grep -oE 'cov: [0-9]+' <<<"$last" | grep -oE '[0-9]+' || echo '?')
    ft=$(grep -oE 'ft: [0-9]+' <<<"$last" | grep -oE '[0-9]+' || echo '?')
    corp=$(grep -oE 'corp: [0-9]+/[0-9a-zA-Z]+' <<<"$last" | cut -d' ' -f2 || echo '?')
    result=ok
    if [ "${rc_of[$h]}" != 0 ]; then
        result="FAIL(${rc_of[$h]})"
        failed=1
    fi
    printf '%-20s %-6s %12s %9s %7s %7s %s\n' "$h" "$result" "$execs" "$eps" "$cov" "$ft" "$corp"
done
for h in "${harnesses[@]}"; do
    [ "${rc_of[$h]}" = 0 ] && continue
    d=$scratch/$h
    echo
    echo "==== $h: finding (exit ${rc_of[$h]}); log: $d/log"
    grep -E '^(fuzz: |==[0-9]+==ERROR|SUMMARY|.*runtime error)' "$d/log" | head -20 || true
    for a in "$d"/artifacts/*; do
        [ -e "$a" ] || continue
        echo "reproducer: $a"
        echo "  reproduce: $build/tests/fuzz/$h $a"
        echo "  keep it:   cp $a $here/regress/$h/  (then meson test -C build --suite fuzz)"
    done
done
if ((failed)); then
    echo "fuzz/ci.sh: FAILED; scratch directory kept: $scratch" >&2
    exit 1
fi
rm -rf "$scratch"
echo "fuzz/ci.sh: every harness ran ${secs}s clean"
