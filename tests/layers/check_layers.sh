#!/bin/sh
# check_layers.sh - the layer rule of docs/layers.md, checked two ways:
#   includes  every #include "..." of src/, ops/, tools/ and examples/ resolved as the compiler
#             resolves it; a library file may include only its own layer or below (or a public
#             header), tools/ and examples/ only public headers and tools/ their own
#   symbols   every undefined symbol of every object in the library archive, found where it is
#             defined: an object may call only its own layer or below
# Layers, lowest first: 1 core (src/core), 2 ops (ops), 3 graph (src/graph), 4 nn (src/nn),
# 5 io (src/io), 6 data (src/data, src/metrics), 7 train (src/train), 8 model (src/model,
# src/decode), 9 run (src/run). src/spm and src/dist (optional libraries) use public headers
# only.
#
# Usage: check_layers.sh SRCROOT [ARCHIVE_OR_OBJECT...]   (exit 0: rule holds; 1: violations,
#        one line each; 2: usage)
#        check_layers.sh --self-test SRCROOT [ARCHIVE]    (shows the check fails on an upward
#        include and an upward call added to a copy of the tree)
set -u

usage() {
    echo "usage: check_layers.sh SRCROOT [ARCHIVE_OR_OBJECT...] | --self-test SRCROOT [ARCHIVE]" >&2
    exit 2
}

# Layer rank of a path relative to the root (0: public header, anyone may include it;
# 10: optional libraries, 11: tools and examples, each checked by its own rule; empty: not ours).
rank_of() {
    case $1 in
    include/*) echo 0 ;;
    src/core/*) echo 1 ;;
    ops/*) echo 2 ;;
    src/graph/*) echo 3 ;;
    src/nn/*) echo 4 ;;
    src/io/*) echo 5 ;;
    src/data/* | src/metrics/*) echo 6 ;;
    src/train/*) echo 7 ;;
    src/model/* | src/decode/*) echo 8 ;;
    src/run/*) echo 9 ;;
    src/spm/* | src/dist/*) echo 10 ;;
    tools/* | examples/*) echo 11 ;;
    *) echo "" ;;
    esac
}

layer_name() {
    case $1 in
    0) echo "public" ;; 1) echo "core" ;; 2) echo "ops" ;; 3) echo "graph" ;; 4) echo "nn" ;;
    5) echo "io" ;; 6) echo "data" ;; 7) echo "train" ;; 8) echo "model" ;;
    9) echo "run" ;; 10) echo "optional library" ;; *) echo "tools" ;;
    esac
}

# Files outside the rule, with the reason (white-box code that measures a private kernel).
exempt() {
    case $1 in
    tools/bench/bench_gemm.c) return 0 ;; # the GEMM micro-benchmark times the private bf16 GEMM
    esac
    return 1
}

check_includes() {
    root=$1
    bad=0
    for f in $(cd "$root" && find src ops tools examples -type f \
        \( -name '*.c' -o -name '*.cc' -o -name '*.h' -o -name '*.def' \) | sort); do
        exempt "$f" && continue
        fr=$(rank_of "$f")
        [ -n "$fr" ] || continue
        fdir=$(dirname "$f")
        for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' \
            "$root/$f"); do
            # the compiler's order: the including file's folder, then -I include, src,
            # src/core, ops (the library's), tools/cli and tools/bench (the command line's)
            hit=""
            for d in "$fdir" include src src/core ops tools/cli tools/bench; do
                if [ -f "$root/$d/$inc" ]; then
                    hit=$(cd "$root" && realpath -m --relative-to=. "$d/$inc")
                    break
                fi
            done
            [ -n "$hit" ] || continue
            ir=$(rank_of "$hit")
            [ -n "$ir" ] || continue
            ok=1
            if [ "$fr" -ge 10 ]; then
                # optional libraries: public headers only; tools: public and tools' own;
                # examples: public only
                case $f in
                tools/*) [ "$ir" -eq 0 ] || [ "$ir" -eq 11 ] || ok=0 ;;
                *) [ "$ir" -eq 0 ] || ok=0 ;;
                esac
            elif [ "$ir" -gt "$fr" ]; then
                ok=0
            fi
            if [ $ok -eq 0 ]; then
                echo "layers: $f ($(layer_name "$fr")) includes $hit ($(layer_name "$ir"))"
                bad=1
            fi
        done
    done
    return $bad
}

# Layer rank of an object file named as meson names them (src_core_ctx.c.o, ops_gemm.c.o).
obj_rank() {
    case $1 in
    src_core_*) echo 1 ;; ops_*) echo 2 ;; src_graph_*) echo 3 ;; src_nn_*) echo 4 ;;
    src_io_*) echo 5 ;; src_data_* | src_metrics_*) echo 6 ;; src_train_*) echo 7 ;;
    src_model_* | src_decode_*) echo 8 ;; src_run_*) echo 9 ;;
    *) echo "" ;;
    esac
}

check_symbols() {
    tmp=$1
    shift
    : >"$tmp/defs"
    : >"$tmp/uses"
    for a in "$@"; do
        # nm -A: "archive:member:value type name" or "object:value type name"
        nm -A "$a" 2>/dev/null | awk '{
            n = split($1, p, ":"); obj = p[n - 1]; if (n == 2) obj = p[1];
            sub(/.*\//, "", obj);
            if ($NF == "") next;
            type = (NF == 3) ? $2 : $1;
            sym = $NF;
            print obj, type, sym }' >"$tmp/nm.txt"
        while read -r obj type sym; do
            r=$(obj_rank "$obj")
            [ -n "$r" ] || continue
            case $type in
            U) echo "$sym $r $obj" >>"$tmp/uses" ;;
            T | D | B | R | C | W | V | G | S) echo "$sym $r $obj" >>"$tmp/defs" ;;
            esac
        done <"$tmp/nm.txt"
    done
    awk 'NR == FNR { r[$1] = $2; o[$1] = $3; next }
        ($1 in r) && r[$1] > $2 {
            printf "layers: %s (layer %d) calls %s, defined in %s (layer %d)\n", $3, $2, $1, o[$1], r[$1];
            bad = 1 }
        END { exit bad }' "$tmp/defs" "$tmp/uses"
}

run() {
    root=$1
    shift
    [ -d "$root/src" ] && [ -d "$root/ops" ] || usage
    tmp=$(mktemp -d) || exit 2
    status=0
    check_includes "$root" || status=1
    if [ $# -gt 0 ]; then
        check_symbols "$tmp" "$@" || status=1
    fi
    rm -rf "$tmp"
    [ $status -eq 0 ] && echo "layers: the rule holds ($(cd "$root" && find src ops -name '*.[ch]' | wc -l) library files${1:+, $# object file(s)})"
    return $status
}

self_test() {
    root=$1
    shift
    work=$(mktemp -d) || exit 2
    trap 'rm -rf "$work"' EXIT
    cp -r "$root/src" "$root/ops" "$root/include" "$work/" && mkdir "$work/tools" "$work/examples" ||
        exit 2
    # 1. an upward include in core
    printf '#include "graph/values.h"\n' >>"$work/src/core/ctx.c"
    out=$(run "$work")
    if [ $? -eq 0 ] || ! printf '%s\n' "$out" | grep -q 'src/core/ctx.c (core) includes src/graph/values.h (graph)'; then
        echo "layers self-test: an upward include was not reported: $out" >&2
        exit 1
    fi
    echo "layers self-test: upward include reported: $out"
    # 2. an upward call: an object of core's that calls the graph layer
    if [ $# -gt 0 ]; then
        cp "$root/src/core/ctx.c" "$work/src/core/ctx.c"
        printf 'void tg__graph_forget_after(void *ctx, unsigned long seq);\nvoid tg__zz(void);\nvoid tg__zz(void) { tg__graph_forget_after(0, 0); }\n' \
            >"$work/zz.c"
        ${CC:-cc} -c "$work/zz.c" -o "$work/src_core_zz.c.o" || exit 2
        out=$(run "$work" "$@" "$work/src_core_zz.c.o")
        if [ $? -eq 0 ] || ! printf '%s\n' "$out" | grep -q 'src_core_zz.c.o (layer 1) calls tg__graph_forget_after'; then
            echo "layers self-test: an upward call was not reported: $out" >&2
            exit 1
        fi
        echo "layers self-test: upward call reported: $out"
    fi
    echo "layers self-test: passed"
}

[ $# -ge 1 ] || usage
if [ "$1" = --self-test ]; then
    shift
    [ $# -ge 1 ] || usage
    self_test "$@"
else
    run "$@"
fi
