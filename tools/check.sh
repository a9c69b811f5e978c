#!/bin/sh
# check.sh - the test stages, fast first:
#   fast     the suite without the slow tests, with the examples and the fuzz regression
#            replay, on ./build: meson test -C build --no-suite slow (a few minutes on 2 cores,
#            builds included; meson builds only what these tests need)
#   slow     the slow tests on ./build (suite 'slow': train_cli's whole training runs, dist's
#            mpirun runs, threads and plan_random on the library built with every parallel
#            loop engaged): meson test -C build --suite slow
#   valgrind the whole suite under valgrind: meson test -C build --setup=valgrind
#   asan     the whole suite built with ASan+UBSan: meson test -C build-asan --setup=asan
#            (configures ./build-asan with -Db_sanitize=address,undefined if needed)
#   fuzz     every libFuzzer harness for 60 s: tests/fuzz/ci.sh 60
#   mutation every backward rule broken in turn, each caught by `tgrad gradcheck`:
#            tools/mutation_check.sh (a copy of the tree built once; 1-4 min on 2 cores)
#   clang    the library and the whole suite built with clang (./build-clang), run once
#   plain    fast and slow in one run: the whole suite on ./build (meson test -C build)
# `all` is fast slow mutation valgrind asan fuzz clang (what CI runs, .ci/run). Every stage named
# runs even if an earlier one failed; a summary with each stage's result and duration is printed
# at the end, and the exit status is 1 if any stage failed.
# Usage: tools/check.sh [STAGE...]   (default: fast; tools/bootstrap.sh --tests installs what
#        fast needs, tools/bootstrap.sh --ci what every stage needs)
set -u
cd "$(dirname "$0")/.." || exit 2

stages=${*:-fast}
[ "$stages" = all ] && stages="fast slow mutation valgrind asan fuzz clang"
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

# ./build with the test suite (configured by tools/bootstrap.sh; switched on here if needed).
build_dir() {
    if [ ! -f build/build.ninja ]; then
        meson setup build --buildtype=release
    elif ! meson introspect build --buildoptions | grep -q '"name": "tests", "value": true'; then
        meson setup --reconfigure build -Dtests=true
    fi
}

fast() { build_dir && meson test -C build --no-suite slow --print-errorlogs; }

slow() { build_dir && meson test -C build --suite slow --print-errorlogs; }

plain() { build_dir && meson test -C build --print-errorlogs; }

valgrind_suite() { build_dir && meson test -C build --setup=valgrind --print-errorlogs; }

asan() {
    { [ -f build-asan/build.ninja ] ||
        meson setup build-asan --buildtype=debugoptimized -Db_sanitize=address,undefined \
            -Db_lundef=false; } &&
        meson test -C build-asan --setup=asan --print-errorlogs
}

# clang: the SIMD kernels are compiled by clang too (target attributes), so this runs them
# LLVM's OpenMP runtime (libomp, which clang links) registers each process in
# /dev/shm/__KMP_REGISTERED_LIB_<pid>_<uid> and removes the file at exit. A process killed
# between creating the file and sizing it leaves it empty, and libomp 14 then dies of SIGBUS in
# the next process given that pid. The kill tests clean up after the processes they kill
# (tu_wait_killed); empty files of dead processes left from before are removed here, each named.
clear_stale_omp_registrations() {
    for f in /dev/shm/__KMP_REGISTERED_LIB_*_"$(id -u)"; do
        { [ -f "$f" ] && [ ! -s "$f" ]; } || continue
        pid=${f#/dev/shm/__KMP_REGISTERED_LIB_}
        pid=${pid%_*}
        kill -0 "$pid" 2>/dev/null && continue
        echo "check: removing $f: empty and its process $pid is gone (libomp would crash" \
            "the next process given that pid)"
        rm -f "$f"
    done
}

clang_suite() {
    clear_stale_omp_registrations
    { [ -f build-clang/build.ninja ] ||
        CC=clang CXX=clang++ meson setup build-clang --buildtype=release; } &&
        meson test -C build-clang --print-errorlogs
}

for s in $stages; do
    case $s in
    fast) run_stage fast fast ;;
    slow) run_stage slow slow ;;
    plain) run_stage plain plain ;;
    valgrind) run_stage valgrind valgrind_suite ;;
    asan) run_stage asan asan ;;
    fuzz) run_stage fuzz bash tests/fuzz/ci.sh 60 ;;
    mutation) run_stage mutation bash tools/mutation_check.sh ;;
    clang) run_stage clang clang_suite ;;
    *)
        echo "check: unknown stage '$s' (stages: fast slow plain mutation valgrind asan fuzz" \
            "clang, or all)" >&2
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
