#!/bin/sh
# bootstrap.sh - install missing dependencies (Debian/Ubuntu, via sudo when not root) and
# configure ./build. Idempotent: installs only what is missing, configures ./build only if it is
# not configured yet (else just switches the test suite on when --tests asks for it).
#
# Usage: tools/bootstrap.sh [--tests | --ci | --bench] [extra meson setup options]
#   (none)   what the library and the `tgrad` program need: gcc, meson, ninja, pkg-config,
#            and for SentencePiece subword tokenizers (meson feature `sentencepiece`, on when
#            found) g++ and libsentencepiece-dev, and the English-German dictionary
#            trans-de-en (the translation data, tools/cli/ding_pairs.c); ./build is configured
#            without the test
#            suite (-Dtests=false), so
#            `ninja -C build tools/tgrad` compiles the library and the program only
#   --tests  also what the fast test suite (tools/check.sh) needs: Check, graphviz (tests that
#            draw DOT files with `dot`); ./build gets -Dtests=true
#   --ci     also what the slow stages of tools/check.sh need: valgrind, clang with libFuzzer
#            (libclang-rt-14-dev) and OpenMP (libomp-dev), Open MPI (data-parallel training
#            and its tests)
#   --bench  what the library needs and the PyTorch side of the benchmarks
#            (tools/bench/bench_torch.py, tools/bench/perf_readme.sh, tools/reference/train_reference.py): Debian's
#            python3-torch and python3-numpy, and OpenBLAS (libopenblas0-pthread), which the
#            alternatives system then gives torch's libblas.so.3 (without it torch runs on the
#            reference BLAS, 26-62x slower in f32, and bench_torch.py refuses to compare);
#            ./build is configured as with no option (the benchmarks need no test suite).
#            Not needed by the tests or CI
set -eu
cd "$(dirname "$0")/.."

level=main
case ${1:-} in
--tests) level=tests; shift ;;
--ci) level=ci; shift ;;
--bench) level=bench; shift ;;
esac

pkgs="gcc meson ninja-build pkg-config g++ libsentencepiece-dev trans-de-en"
if [ "$level" = tests ] || [ "$level" = ci ]; then
    pkgs="$pkgs check graphviz"
fi
if [ "$level" = bench ]; then
    pkgs="$pkgs python3-torch python3-numpy libopenblas0-pthread"
fi
if [ "$level" = ci ]; then
    pkgs="$pkgs valgrind clang libclang-rt-14-dev libomp-dev libopenmpi-dev openmpi-bin"
fi

need=""
for pkg in $pkgs; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need="$need $pkg"
done
if [ -n "$need" ]; then
    echo "bootstrap: installing:$need" >&2
    if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -q
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q $need
fi

if [ "$level" = main ] || [ "$level" = bench ]; then tests=false; else tests=true; fi
if [ ! -f build/build.ninja ]; then
    meson setup build --buildtype=release -Dtests=$tests "$@"
elif [ "$tests" = true ] &&
    ! meson introspect build --buildoptions | grep -q '"name": "tests", "value": true'; then
    meson setup --reconfigure build -Dtests=true
fi
