#!/usr/bin/env bash
# mutation_check.sh - prove end to end that a wrong backward rule is caught: "making any
# backward rule wrong makes `tgrad gradcheck` exit non-zero".
#
# The source tree is copied to a temporary directory and built there once (meson,
# -Dtests=false). Then, for each mutation listed below, the pristine file is restored, one
# backward rule is broken with sed (a sign flip, a factor 1.1, a dropped term or a
# skipped gradient), tgrad is rebuilt, and `tgrad gradcheck --op <op>` must exit non-zero (in f64;
# the f32 run and the run over all cases are reported too). A baseline run of the unmutated copy
# must pass first. Every registered op (ops/ops.def) must have at least one mutation here, and
# every sed script must actually change its file, so the table cannot silently go stale.
#
# Usage: tools/mutation_check.sh [--op NAME] [--keep]
#   --op NAME   only the mutations of this op (repeatable)
#   --keep      keep the temporary tree and logs (printed at the end)
# Exit status: 0 if every mutation was applied, built and caught; 1 otherwise.
# Not part of `meson test`: the `mutation` stage of tools/check.sh (CI) runs it (it rebuilds an
# op file and relinks tgrad once per mutation; 1-4 min on 2 cores).
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
KEEP=0
ONLY=()
while [ $# -gt 0 ]; do
    case "$1" in
    --op) [ $# -ge 2 ] || { echo "mutation_check: --op needs a name" >&2; exit 2; }
          ONLY+=("$2"); shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "mutation_check: unknown option '$1' (try --help)" >&2; exit 2 ;;
    esac
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tgrad_mutation.XXXXXX") || exit 1
if [ "$KEEP" = 0 ]; then
    trap 'rm -rf "$WORK"' EXIT
fi

# ---- the mutations: op, file, sed script, description ----------------------------------------
# Each script touches backward code only (forward kernels are left intact), so the forward pass
# and hence the numeric gradient stay right while the analytic one goes wrong.
M_OP=(); M_FILE=(); M_SED=(); M_DESC=()
mut() { M_OP+=("$1"); M_FILE+=("$2"); M_SED+=("$3"); M_DESC+=("$4"); }

mut matmul     ops/matmul_kernel.h 's/if (mp.amap\[o\] != ia)/if (mp.amap[o] == ia)/'      'dA: every batch skipped'
mut matmul     ops/matmul_kernel.h 's/if (mp.bmap\[o\] != ib)/if (mp.bmap[o] == ib)/'      'dB: every batch skipped'
mut transpose  ops/shape_kernel.h 's/dr\[j\] += src\[so + j \* sl\];/dr[j] += (T)1.1 * src[so + j * sl];/' 'dx scaled by 1.1'
mut permute    ops/shape_kernel.h 's/dr\[j\] += src\[so + j \* sl\];/dr[j] += (T)1.1 * src[so + j * sl];/' 'dx scaled by 1.1'
mut permute    ops/shape_kernel.h '/^tg_status FN(tg__permute_backward)/,/^}/s/c->dx\[0\], true, true);$/c->dx[0], false, true);/' 'dx permuted forward, not inverse'
mut reshape    ops/shape_kernel.h '/^tg_status FN(tg__reshape_backward)/,/^}/s/dx\[i\] += dy\[i\];/dx[i] -= dy[i];/' 'dx sign flipped'
mut narrow     ops/shape_kernel.h '/^static void FN(narrow)/,/^}/s/dx\[i\] += dy\[i\];/dx[i] += (T)1.1 * dy[i];/' 'dx scaled by 1.1'
mut contiguous ops/shape_kernel.h '/^static void FN(add_into)/,/^}/s/dx\[i\] += dy\[i\];/dx[i] -= dy[i];/' 'dx sign flipped'
mut scale      ops/elementwise_kernel.h 's/y\[i\] = (T)0 + s \* y\[i\];/y[i] = (T)0 + (T)1.1 * s * y[i];/;s/y\[i\] += s \* x\[i\];/y[i] += (T)1.1 * s * x[i];/' 'dx scaled by 1.1'
mut add        ops/elementwise_kernel.h '/^tg_status FN(tg__add_backward)/,/^}/s/s < 2/s < 1/' 'db never accumulated'
mut mul        ops/elementwise_kernel.h 's/dx\[i\] += G\[i\] \* O\[i\];/dx[i] -= G[i] * O[i];/' 'same-shape da, db sign flipped'
mut mul        ops/elementwise_kernel.h 's/FN(mul_expand)(c, 1 - s, c->ws);/FN(mul_expand)(c, s, c->ws);/' 'broadcast path multiplies by its own operand'
mut relu       ops/elementwise_kernel.h 's/dx\[i\] = (T)0 + (y\[i\] > 0 ? g : (T)0);/dx[i] = (T)0 + g;/;s/dx\[i\] += y\[i\] > 0 ? g : (T)0;/dx[i] += g;/' 'dx = dy everywhere'
mut relu_gate  ops/elementwise_kernel.h 's/FN(relu_bwd)(c, c->numel, c->in\[1\], c->dy, c->dx\[0\]);/FN(relu_bwd)(c, c->numel, c->in[0], c->dy, c->dx[0]);/' 'gated by t, not r'
mut gelu       ops/elementwise_kernel.h 's/(cdf + v \* pdf)/(cdf)/'                                'x phi(x) term dropped'
mut sum        ops/reduce_kernel.h 's/T g = mean ? dy\[o\] \/ (T)A : dy\[o\];/T g = mean ? dy[o] \/ (T)A : (T)1.1 * dy[o];/;s/d\[k\] += g\[k\];/d[k] += (T)1.1 * g[k];/' 'dx scaled by 1.1'
mut mean       ops/reduce_kernel.h 's/T g = mean ? dy\[o\] \/ (T)A : dy\[o\];/T g = mean ? dy[o] \/ (T)(A + 1) : dy[o];/;s/d\[k\] += g\[k\] \/ (T)A;/d[k] += g[k] \/ (T)(A + 1);/' 'divides by N + 1'
mut add_mask   ops/attention_kernel.h 's/dS\[o + j\] += G\[o + j\];/dS[o + j] -= G[o + j];/' 'dscores sign flipped'
mut add_mask   ops/attention_kernel.h '/^tg_status FN(tg__add_mask_backward)/,/^}/s/TG_MASK_ADDITIVE \&\& c->dx\[1\]/TG_MASK_BLOCK \&\& c->dx[1]/' 'additive mask gets no gradient'
mut softmax    ops/attention_kernel.h 's/dx\[j\] += o\[j\] \* (g\[j\] - dot);/dx[j] += o[j] * g[j];/' 'dot term dropped'
mut dense      ops/dense_kernel.h 's/if (c->dx\[0\]) \/\* dx (R, I)/if (c->dx[0] \&\& 0) \/* dx (R, I)/' 'dx skipped'
mut dense      ops/dense_kernel.h 's/if (c->dx\[1\]) \/\* dW (O, I)/if (c->dx[1] \&\& 0) \/* dW (O, I)/' 'dW skipped'
mut dense      ops/dense_kernel.h 's/if (b \&\& c->dx\[2\])/if (b \&\& c->dx[2] \&\& 0)/'      'db skipped'
mut dense_act  ops/dense_kernel.h 's/dz\[i\] = (T)0 + (out\[i\] > 0 ? g : (T)0);/dz[i] = (T)0 + g;/' 'relu: dz = dy everywhere'
mut dense_act  ops/dense_kernel.h 's/dz\[i\] = (T)((double)dy\[i\] \* (cdf + v \* pdf));/dz[i] = (T)((double)dy[i] * cdf);/' 'gelu: x phi(x) term dropped'
mut layer_norm ops/layer_norm_kernel.h 's/dx\[j\] += rs \* (g - sg - h \* sgh);/dx[j] += rs * (g - sg);/' 'dx: xhat term dropped'
mut layer_norm ops/layer_norm_kernel.h 's/DG\[c0 + c\] += ag\[c\];/DG[c0 + c] -= ag[c];/' 'dgamma sign flipped'
mut layer_norm ops/layer_norm_kernel.h 's/DB\[c0 + c\] += ab\[c\];/DB[c0 + c] += (T)1.1 * ab[c];/' 'dbeta scaled by 1.1'
mut dropout    ops/dropout_kernel.h 's/out\[i\] = (T)0 + (keep\[i\] ? in\[i\] \* s : (T)0);/out[i] = (T)0 + (keep[i] ? (T)1.1 * in[i] * s : (T)0);/;s/out\[i\] += keep\[i\] ? in\[i\] \* s : (T)0;/out[i] += keep[i] ? (T)1.1 * in[i] * s : (T)0;/' 'dx scaled by 1.1 (training and eval)'
mut embedding  ops/embedding_kernel.h 's/row\[d\] += g\[d\];/row[d] += (T)1.1 * g[d];/'          'dW rows scaled by 1.1'
mut cross_entropy ops/cross_entropy_kernel.h 's/(EXP(x\[j\] - lse) - (j == t ? hit : off))/EXP(x[j] - lse)/' 'target distribution dropped'
# more elementwise ops, reductions and losses
mut sub        ops/arith_kernel.h 's/db\[i\] -= v\[i\];/db[i] += v[i];/'                    'db sign flipped'
mut sub        ops/arith_kernel.h '/^tg_status FN(tg__sub_backward)/,/^}/s/if (c->dx\[0\])/if (c->dx[0] \&\& 0)/' 'da skipped'
mut div        ops/arith_kernel.h 's/T v = s == 0 ? g \/ vb : -(g \* (va \/ vb)) \/ vb;/T v = s == 0 ? g \/ vb : (g * (va \/ vb)) \/ vb;/' 'db sign flipped'
mut div        ops/arith_kernel.h 's/T v = s == 0 ? g \/ vb :/T v = s == 0 ? g * vb :/'     'da multiplies by b'
mut neg        ops/unary_kernel.h '/^#define UN_NAME neg$/,/^#include/s/^#define UN_DX (-g)$/#define UN_DX (g)/' 'dx sign flipped'
mut exp        ops/unary_kernel.h '/^#define UN_NAME exp$/,/^#include/s/^#define UN_DX (g \* v)$/#define UN_DX (g)/' 'dx = dy (y dropped)'
mut log        ops/unary_kernel.h '/^#define UN_NAME log$/,/^#include/s/^#define UN_DX (g \/ v)$/#define UN_DX (-g \/ v)/' 'dx sign flipped'
mut sqrt       ops/unary_kernel.h '/^#define UN_NAME sqrt$/,/^#include/s/^#define UN_DX (g \/ ((T)2 \* v))$/#define UN_DX (g \/ v)/' 'factor 1/2 dropped'
mut tanh       ops/unary_kernel.h '/^#define UN_NAME tanh$/,/^#include/s/^#define UN_DX (g \* ((T)1 - v \* v))$/#define UN_DX (g * ((T)1 + v * v))/' '1 + y^2 for 1 - y^2'
mut sigmoid    ops/unary_kernel.h '/^#define UN_NAME sigmoid$/,/^#include/s/^#define UN_DX (g \* ((T)1 - v) \* v)$/#define UN_DX (g * v)/' '(1 - y) factor dropped'
mut silu       ops/unary_kernel.h 's/return s \* ((T)1 + v \* ((T)1 - s));/return s;/'    'x s (1 - s) term dropped'
mut gelu_tanh  ops/unary_kernel.h 's/return dleft + dright;/return dleft;/'                 'tanh-derivative term dropped'
mut erf        ops/unary_kernel.h 's/EXP(-(v \* v))/EXP(-v)/'                                'e^{-x^2} as e^{-x}'
mut log_softmax ops/log_softmax_kernel.h 's/dx\[j\] += g\[j\] - EXP(o\[j\]) \* sum;/dx[j] += g[j];/' 'softmax term dropped'
mut max        ops/max_kernel.h  's/dx\[(o \* A + K\[oi\]) \* inner + i\] += dy\[oi\];/dx[(o * A) * inner + i] += dy[oi];/' 'gradient to the first element, not the max'
mut concat     ops/concat_kernel.h 's/dx\[j\] += g\[j\];/dx[j] += (T)1.1 * g[j];/'           'dx scaled by 1.1'
mut mse_loss   ops/loss_kernel.h 's/dst\[i\] += negate ? -v : v;/dst[i] += v;/'            'dtarget sign flipped'
mut mse_loss   ops/loss_kernel.h 's/2.0 \/ (double)n : 2.0)/1.0 \/ (double)n : 2.0)/'      'mean: 1/N for 2/N'
mut flash_attention ops/flash_attention_kernel.h 's/ds\[j\] = p\[j\] \* (ds\[j\] - Di);/ds[j] = p[j] * ds[j];/' 'dS: the D_i = dO . O term dropped'
mut custom     ops/custom.c      's/u->grad_input\[i\] = k->backward ? k->dx\[i\] : NULL;/u->grad_input[i] = NULL;/' 'input gradients never handed to the callback'
mut custom     ops/custom.c      's/u->grad_output = k->backward ? k->dy : NULL;/u->grad_output = k->backward ? k->out : NULL;/' 'callback gets y, not the upstream gradient'

# ---- checks on the table itself --------------------------------------------------------------
selected() {
    [ ${#ONLY[@]} -eq 0 ] && return 0
    local o
    for o in "${ONLY[@]}"; do [ "$o" = "$1" ] && return 0; done
    return 1
}

FAILED=0
# (inference-only ops, TG_OPF_NO_BACKWARD, have no backward rule to break)
OPS=$(grep -v TG_OPF_NO_BACKWARD "$ROOT/ops/ops.def" |
      sed -n 's/^TG_OP([A-Z_0-9]*, *"\([a-z_0-9]*\)".*/\1/p')
for op in $OPS; do
    selected "$op" || continue
    found=0
    for i in "${!M_OP[@]}"; do [ "${M_OP[$i]}" = "$op" ] && found=1; done
    if [ $found = 0 ]; then
        echo "mutation_check: op '$op' (ops/ops.def) has no mutation in $0" >&2
        FAILED=1
    fi
done

# ---- run ------------------------------------------------------------------------------------
copy_tree() { # copy_tree DEST: the working tree without build directories and .git
    mkdir -p "$1"
    (cd "$ROOT" && tar --exclude=./.git --exclude='./build*' -cf - .) | (cd "$1" && tar -xf -)
}

printf '%-14s %-22s %-44s %-6s %4s %4s %4s  %s\n' op file mutation build f64 f32 all result
printf '%s\n' "$(printf '%.0s-' {1..120})"

n_run=0; n_caught=0
# one copy of the tree, built once; each mutation rebuilds only what its file changes
want=0
for i in "${!M_OP[@]}"; do selected "${M_OP[$i]}" && want=1; done
tree="$WORK/tree"
if [ $want = 1 ]; then
    copy_tree "$tree"
    if ! (cd "$tree" && meson setup b -Dtests=false >"$WORK/setup.log" 2>&1 &&
          ninja -C b tools/tgrad >"$WORK/build.log" 2>&1); then
        echo "mutation_check: the unmutated tree does not build (see $WORK/build.log)" >&2
        KEEP=1; trap - EXIT
        exit 1
    fi
    # baseline: the unmutated copy passes
    for dt in f64 f32; do
        if ! "$tree/b/tools/tgrad" gradcheck --dtype $dt >"$WORK/base.$dt.log" 2>&1; then
            echo "mutation_check: baseline 'tgrad gradcheck --dtype $dt' fails before any" \
                 "mutation (see $WORK/base.$dt.log)" >&2
            KEEP=1; trap - EXIT
            exit 1
        fi
    done
fi
for i in "${!M_OP[@]}"; do
    op=${M_OP[$i]}
    file=${M_FILE[$i]}
    selected "$op" || continue
    n_run=$((n_run + 1))
    log="$WORK/mut$i"
    cp "$ROOT/$file" "$tree/$file"
    sed -i -e "${M_SED[$i]}" "$tree/$file"
    build=ok; f64=-; f32=-; all=-
    if cmp -s "$ROOT/$file" "$tree/$file"; then
        result="NOT APPLIED (sed matched nothing: update the script)"
        build=-
        FAILED=1
    elif ! ninja -C "$tree/b" tools/tgrad >"$log.build.log" 2>&1; then
        result="BUILD FAILED (see $log.build.log)"
        build=fail
        FAILED=1
    else
        "$tree/b/tools/tgrad" gradcheck --op "$op" >"$log.f64.log" 2>&1; f64=$?
        "$tree/b/tools/tgrad" gradcheck --op "$op" --dtype f32 >"$log.f32.log" 2>&1; f32=$?
        "$tree/b/tools/tgrad" gradcheck >"$log.all.log" 2>&1; all=$?
        if [ $f64 -ne 0 ] && [ $all -ne 0 ]; then
            n_caught=$((n_caught + 1))
            if [ $f64 -gt 128 ] || [ $all -gt 128 ]; then
                result="CAUGHT (crashed: signal $(( (f64 > 128 ? f64 : all) - 128 )))"
            else
                nfail=$(grep -c -E ' (FAIL|ERROR)$' "$log.f64.log")
                ncase=$(grep -c -E ' (PASS|FAIL|ERROR)$' "$log.f64.log")
                result="CAUGHT ($nfail/$ncase cases fail)"
            fi
        else
            result="MISSED (see $log.f64.log)"
            FAILED=1
        fi
    fi
    printf '%-14s %-22s %-44s %-6s %4s %4s %4s  %s\n' "$op" "$file" "${M_DESC[$i]}" \
        "$build" "$f64" "$f32" "$all" "$result"
    cp "$ROOT/$file" "$tree/$file" # restored (a newer copy: the next build recompiles it)
done

echo
echo "$n_caught of $n_run mutations caught by 'tgrad gradcheck --op <op>' (exit status shown per dtype; 'all' = every case)"
if [ "$KEEP" = 1 ]; then
    echo "tree and logs kept in $WORK"
fi
exit $FAILED
