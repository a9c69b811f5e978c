#!/bin/sh
# install_link.sh BUILD_DIR CC core|dist|spm - install the build into a temporary directory
# (meson install --destdir), check the programs are there (tgrad, ding-pairs), and compile and link a small program against the installed
# headers and libraries with pkg-config, both ways:
#   shared: cc app.c $(pkg-config --cflags --libs tgrad[-dist|-spm])
#   static: the same with --static and only the .a files of tgrad on the library path
# then run each. `dist` exits 77 (skipped) when the build has no MPI library, `spm` when it has
# no SentencePiece.
set -eu
build=$1 cc=$2 what=$3   # cc: the compiler command, words split
src=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tgrad-link.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/root" >"$tmp/install.log" 2>&1 || {
    cat "$tmp/install.log"; echo "install_link: meson install failed"; exit 1; }
# the programs: tgrad, and ding-pairs, which the translation quick start runs (standalone)
for prog in tgrad ding-pairs; do
    bin=$(find "$tmp/root" -name "$prog" -path '*/bin/*' -type f | head -n 1)
    [ -n "$bin" ] || { echo "install_link: no bin/$prog installed"; exit 1; }
done
"$bin" --help >/dev/null || { echo "install_link: the installed ding-pairs --help failed"; exit 1; }
pcdir=$(find "$tmp/root" -name tgrad.pc -path '*/pkgconfig/*' | head -n 1)
[ -n "$pcdir" ] || { echo "install_link: no tgrad.pc installed"; exit 1; }
pcdir=$(dirname "$pcdir")
if [ "$what" = dist ] && [ ! -f "$pcdir/tgrad-dist.pc" ]; then
    echo "install_link: built without MPI (no tgrad-dist.pc): skipped"
    exit 77
fi
if [ "$what" = spm ] && [ ! -f "$pcdir/tgrad-spm.pc" ]; then
    echo "install_link: built without SentencePiece (no tgrad-spm.pc): skipped"
    exit 77
fi
# The .pc files name the configured prefix; point them at the temporary root (as if installed
# there), leaving every other package's .pc (ompi-c) as it is.
mkdir "$tmp/pc"
for f in "$pcdir"/tgrad*.pc; do
    prefix=$(sed -n 's/^prefix=//p' "$f")
    sed "s|^prefix=.*|prefix=$tmp/root$prefix|" "$f" >"$tmp/pc/$(basename "$f")"
done
PKG_CONFIG_PATH="$tmp/pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export PKG_CONFIG_PATH
pkg=tgrad
[ "$what" = dist ] && pkg=tgrad-dist
[ "$what" = spm ] && pkg=tgrad-spm
libdir=$(pkg-config --variable=libdir $pkg)
# Only the static archives of tgrad, so -ltgrad, -ltgrad_dist and -ltgrad_spm cannot pick the .so files.
mkdir "$tmp/static"
ln -s "$libdir"/libtgrad*.a "$tmp/static/"

# Open MPI's MPI_Init/MPI_Finalize leak memory of their own (hwloc, opal argv): with MPI, leak
# detection (ASan builds) would report Open MPI, not tgrad; test_dist does the same.
if [ "$what" = dist ]; then
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
    export ASAN_OPTIONS
fi

cflags=$(pkg-config --cflags $pkg)
echo "pkg-config --cflags --libs $pkg: $cflags $(pkg-config --libs $pkg)"
# shared
$cc -std=c11 -Wall -Werror $cflags -o "$tmp/app_shared" "$src/app_$what.c" $(pkg-config --libs $pkg)
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$tmp/app_shared"
# static
echo "pkg-config --static --libs $pkg: $(pkg-config --static --libs $pkg)"
$cc -std=c11 -Wall -Werror $cflags -o "$tmp/app_static" "$src/app_$what.c" -L"$tmp/static" \
    $(pkg-config --static --libs $pkg)
if readelf -d "$tmp/app_static" | grep -q 'NEEDED.*libtgrad'; then
    echo "install_link: the static link still needs a shared libtgrad:"
    readelf -d "$tmp/app_static" | grep NEEDED
    exit 1
fi
"$tmp/app_static"
echo "install_link: $pkg links and runs shared and static"
