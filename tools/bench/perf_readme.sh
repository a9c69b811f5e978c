#!/bin/sh
# perf_readme.sh - regenerate the "Latest numbers" section of docs/performance.md from `tgrad bench` and
# tools/bench/bench_torch.py: runs both (a release build is expected in BUILD, default build/) and
# prints the section as markdown on stdout, with the machine named and the raw outputs quoted.
# Paste it over that section (from its heading to the next heading of the same level).
# Each tool runs once per precision: f32 (its output as it always was), then bf16 (`tgrad
# bench --precision bf16`: the bf16 GEMM against tgrad's f32 and the bf16 graphs;
# `bench_torch.py --precision bf16`: against PyTorch's CPU autocast), each with its own tables.
#
#   tools/bench/perf_readme.sh [BUILD] > /tmp/perf.md     # ~20-30 minutes on 2 cores
#
# Environment: SAMPLES (default 7), THREADS (default: all CPUs), PRECISIONS (default "f32
# bf16"; "f32" for the f32 part alone), TORCH=0 to skip PyTorch (e.g. without python3-torch),
# BENCH_ARGS / TORCH_ARGS: extra arguments (e.g. "--tiny" for a smoke test of this script).
# Nothing else should run on the machine meanwhile: bench_torch.py waits for quiet moments and
# retakes samples another process disturbed (it says how many, and marks rows with '*'),
# `tgrad bench` does not. On a machine others keep busy, as root: TORCH_ARGS="--nice -20"
# (docs/performance.md, "Two-thread samples on a shared machine").
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/../build}
samples=${SAMPLES:-7}
threads=${THREADS:-$(getconf _NPROCESSORS_ONLN)}
precisions=${PRECISIONS:-f32 bf16}
tgrad=$build/tools/tgrad
[ -x "$tgrad" ] || { echo "perf_readme.sh: $tgrad not found: build first" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# f32: bench.txt, torch.txt, torch.md; bf16: the same with _bf16
for p in $precisions; do
    case $p in
        f32) sfx= ;;
        bf16) sfx=_bf16 ;;
        *) echo "perf_readme.sh: PRECISIONS: '$p' is not f32 or bf16" >&2; exit 1 ;;
    esac
    # shellcheck disable=SC2086
    "$tgrad" bench --samples "$samples" --threads "$threads" --precision "$p" ${BENCH_ARGS:-} \
        > "$tmp/bench$sfx.txt"
    if [ "${TORCH:-1}" != 0 ]; then
        # shellcheck disable=SC2086
        /usr/bin/python3 "$here/bench/bench_torch.py" --build "$build" --samples "$samples" \
            --threads "$threads" --precision "$p" --markdown-file "$tmp/torch$sfx.md" \
            ${TORCH_ARGS:-} > "$tmp/torch$sfx.txt"
    fi
done
[ -f "$tmp/bench.txt" ] || { echo "perf_readme.sh: PRECISIONS must include f32" >&2; exit 1; }

# the GEMM summary: one markdown row per (dtype, threads) table from its "median ratio" line
gemm_rows() {
    awk '
    /^(s|d)gemm, [0-9]+ threads?, peak/ {
        name = $1; sub(",", "", name); thr = $2; peak = $5; min = ""; max = ""; n = 0; next }
    /^\([0-9]+, [0-9]+, [0-9]+\) +N[NT] / && name != "" {
        p = $0; sub(/.*\) +N[NT] +[0-9.]+ \([0-9.-]+\) +/, "", p); sub(/%.*/, "", p)
        if (min == "" || p + 0 < min) min = p + 0; if (max == "" || p + 0 > max) max = p + 0
        next }
    /^median ratio tgrad \/ OpenBLAS/ && name != "" {
        r = $NF
        printf "| %s | %s | %s | %s-%s%% | %s |\n", name, thr, peak, min, max, r; name = "" }
    ' "$1"
}

# the bf16 GEMM summary: one markdown row per thread count from its "median over shapes" line
bf16_rows() {
    awk '
    /^bf16 GEMM, [0-9]+ threads?, bf16 peak/ {
        thr = $3; peak = $7; min = ""; max = ""; next }
    /^\([0-9]+, [0-9]+, [0-9]+\) +N[NT] / && thr != "" {
        p = $0; sub(/.*\) +N[NT] +[0-9.]+ \([0-9.-]+\) +/, "", p); sub(/%.*/, "", p)
        if (p ~ /^[0-9]+$/) {
            if (min == "" || p + 0 < min) min = p + 0; if (max == "" || p + 0 > max) max = p + 0 }
        next }
    /^median over shapes \(bf16, / && thr != "" {
        g = $0; sub(/.*NN and NT\): /, "", g); sub(/ GFLOP\/s.*/, "", g)
        r = $0; sub(/.*, /, "", r); sub(/ tgrad.*/, "", r)
        range = min == "" ? "n/a" : min "-" max "%"
        printf "| bf16 | %s | %s | %s | %s | %s |\n", thr, peak, range, g, r; thr = "" }
    ' "$1"
}

date=$(date -u +%Y-%m-%d)
cpu=$(sed -n 's/^Machine: //p' "$tmp/bench.txt" | head -n 1)
blas=$(sed -n 's/^OpenBLAS: //p' "$tmp/bench.txt" | head -n 1)
# "Peak (used for %peak below), the best sample of each: FORM:" then the figures on the next
# line; the bf16 peak on its own line where the CPU has AVX512_BF16
peak=$(awk '/^Peak \(used for %peak below\)/ { sub(/^Peak \(used for %peak below\)[^:]*: /, "");
                                               form = $0; getline; sub(/^ +/, ""); print form " " $0; exit }' \
       "$tmp/bench.txt")
bf16=$(sed -n 's/^  bf16 products (vdpbf16ps, 2 products per f32 lane): //p' "$tmp/bench.txt" | head -n 1)
[ -n "$bf16" ] && peak="$peak; bf16 (vdpbf16ps): $bf16"
clock=$(sed -n 's/^Core clock under load: //p' "$tmp/bench.txt" | head -n 1)
rev=$(git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo "?")
prec_note=
[ -f "$tmp/bench_bf16.txt" ] && prec_note=" (f32, then with \`--precision bf16\`)"

cat <<EOF
## Latest numbers

Generated by \`tools/bench/perf_readme.sh\` on $date (tgrad $rev; $samples samples per number, 1 and
$threads threads) from the output of \`tgrad bench\` and \`tools/bench/bench_torch.py\`$prec_note, quoted
in full below; do not edit the numbers by hand, run the script again.

- Machine: $cpu; OpenBLAS: $blas.
- FMA peak (the probe of \`tgrad bench --only peak\`): $peak. Core clock: $clock.

GEMM through \`tg_matmul\` against OpenBLAS in the same process, samples interleaved; ratio =
median over the listed shapes (NN and NT) of each shape's median per-sample ratio (> 1: tgrad
faster):

| GEMM | threads | peak GFLOP/s | tgrad % of peak (range over shapes) | tgrad / OpenBLAS |
|---|---|---|---|---|
EOF
gemm_rows "$tmp/bench.txt"
if [ -f "$tmp/bench_bf16.txt" ]; then
    cat <<EOF

The bf16 GEMM (\`tgrad bench --precision bf16\`: the products of \`TG_PRECISION_BF16\`, bf16
operands and f32 accumulation) on the same shapes against tgrad's f32 GEMM, samples
interleaved (OpenBLAS has no bf16 GEMM); % of the bf16 peak (vdpbf16ps), the median GFLOP/s
over the shapes and the median ratio bf16 / f32 (> 1: bf16 faster):

| GEMM | threads | bf16 peak GFLOP/s | % of bf16 peak (range over shapes) | median GFLOP/s | bf16 / tgrad f32 |
|---|---|---|---|---|---|
EOF
    bf16_rows "$tmp/bench_bf16.txt"
fi
if [ -f "$tmp/torch.md" ]; then
    cat <<EOF

Modules and a training step against PyTorch in its faster setting (ATen threads x BLAS
threads, see \`tools/bench/bench_torch.py\`), samples interleaved; speedup = PyTorch time / tgrad
time:

EOF
    sed -n '/^| workload/,$p' "$tmp/torch.md"
fi
if [ -f "$tmp/torch_bf16.md" ]; then
    cat <<EOF

The same in bf16: tgrad's graphs with \`TG_PRECISION_BF16\` against PyTorch under CPU
autocast bf16 (forward and loss under \`torch.autocast("cpu", dtype=torch.bfloat16)\`,
backward and AdamW outside it), each in its faster setting:

EOF
    sed -n '/^| workload/,$p' "$tmp/torch_bf16.md"
fi
# the full output of command NAME, in FILE (if there is one)
details() {
    [ -f "$2" ] || return 0
    cat <<EOF

<details><summary>Full output of <code>$1</code></summary>

\`\`\`
EOF
    cat "$2"
    echo '```'
    echo '</details>'
}
details "tgrad bench" "$tmp/bench.txt"
details "tools/bench/bench_torch.py" "$tmp/torch.txt"
details "tgrad bench --precision bf16" "$tmp/bench_bf16.txt"
details "tools/bench/bench_torch.py --precision bf16" "$tmp/torch_bf16.txt"
