#!/bin/sh
# bootstrap.sh - install missing build dependencies (Debian/Ubuntu; clang and libclang-rt-14-dev
# are for the libFuzzer harnesses that tools/check.sh runs, graphviz for the tests that draw
# DOT files with `dot`, Open MPI for data-parallel training and its tests) and configure ./build.
# Idempotent: installs only what is missing, configures only if ./build is not configured.
# Usage: tools/bootstrap.sh [extra meson setup options]
set -eu
cd "$(dirname "$0")/.."

need=""
for pkg in gcc meson ninja-build pkg-config check valgrind clang libclang-rt-14-dev graphviz \
    libopenmpi-dev openmpi-bin; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need="$need $pkg"
done
if [ -n "$need" ]; then
    echo "bootstrap: installing:$need" >&2
    if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -q
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q $need
fi

if [ ! -f build/build.ninja ]; then
    meson setup build --buildtype=release "$@"
fi
