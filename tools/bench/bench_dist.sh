#!/bin/sh
# bench_dist.sh - data parallelism on one machine: `mpirun -np 2 tgrad train` with 1 thread per
# process against one process with 2 threads, on the default text model (`tgrad train --text`:
# 2 layers, d_model 128, 4 heads, seq_len 64, batch 32), same global batch. Samples are
# interleaved (one run of each setting per round) and every figure is the median of SAMPLES
# rounds with the min-max range. Prints a markdown table: tokens/s, the gradient exchange's
# wall time per step (waiting for the other process included) and the bytes each process sends
# per step, as `tgrad train` reports them.
#
#   tools/bench/bench_dist.sh [BUILD] > /tmp/dist.md      # ~15 minutes on 2 cores
#
# Environment: SAMPLES (default 7), STEPS per run (default 150), TEXT (default: README.md and
# docs/*.md). Needs a build with -Dmpi and mpirun on PATH. Nothing else may run meanwhile.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/../build}
samples=${SAMPLES:-7}
steps=${STEPS:-150}
tgrad=$build/tools/tgrad
[ -x "$tgrad" ] || { echo "bench_dist.sh: $tgrad not found: build first" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "bench_dist.sh: mpirun not found (openmpi-bin)" >&2; exit 1; }
if [ "$(id -u)" -eq 0 ]; then # containers: Open MPI's documented opt-in for root
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# shellcheck disable=SC2086
text=${TEXT:-$here/../README.md $(ls "$here"/../docs/*.md)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# every run: the same steps, no evaluation before the last step (it is not timed), no files
# shellcheck disable=SC2086
common="train --text $text --steps $steps --eval-every $steps --target-acc 0 --quiet"

# settings: name | launcher | extra options
run_one() { # $1 setting index, $2 round
    case $1 in
    1) set -- "$2" "1 process x 2 threads, K=1" "" "--threads 2" ;;
    2) set -- "$2" "1 process x 2 threads, K=2" "" "--threads 2 --grad-accum 2" ;;
    3) set -- "$2" "2 processes x 1 thread, K=2" "mpirun -np 2 --bind-to core" \
           "--threads 1 --grad-accum 2" ;;
    4) set -- "$2" "1 process x 1 thread, K=1" "" "--threads 1" ;;
    esac
    # shellcheck disable=SC2086
    $3 "$tgrad" $common $4 > "$tmp/out" 2> "$tmp/err" || {
        echo "bench_dist.sh: '$2' failed:" >&2; cat "$tmp/err" >&2; exit 1; }
    tok=$(sed -n 's/.*  \([0-9]*\) tokens\/s.*/\1/p' "$tmp/out")
    ms=$(sed -n 's/.*gradient exchange \([0-9.]*\) ms and \([0-9.]*\) MB.*/\1/p' "$tmp/out")
    mb=$(sed -n 's/.*gradient exchange \([0-9.]*\) ms and \([0-9.]*\) MB.*/\2/p' "$tmp/out")
    echo "$2|$tok|${ms:--}|${mb:--}" >> "$tmp/samples"
}

for r in $(seq "$samples"); do
    for s in 1 2 3 4; do run_one "$s" "$r"; done
    echo "bench_dist.sh: round $r of $samples" >&2
done

# median and range per setting and column
stat() { # $1 setting name, $2 column (2 tokens/s, 3 ms, 4 MB)
    grep -F "$1|" "$tmp/samples" | cut -d'|' -f"$2" | grep -v '^-$' | sort -g |
        awk '{v[NR] = $1} END {if (NR == 0) {print "-"; exit}
             m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
             printf "%s (%s-%s)", m, v[1], v[NR]}'
}
median() { grep -F "$1|" "$tmp/samples" | cut -d'|' -f2 | sort -g |
    awk '{v[NR] = $1} END {print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

cpu=$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)
echo "Default text model, batch 32 x 64 tokens, $steps steps per run, median (min-max) of"
echo "$samples interleaved rounds; $(getconf _NPROCESSORS_ONLN) CPUs: $cpu."
echo
echo "| setting | tokens/s | gradient exchange ms/step | MB sent per process per step |"
echo "|---|---|---|---|"
base=$(median "1 process x 2 threads, K=1")
for s in "1 process x 1 thread, K=1" "1 process x 2 threads, K=1" "1 process x 2 threads, K=2" \
         "2 processes x 1 thread, K=2"; do
    echo "| $s | $(stat "$s" 2) | $(stat "$s" 3) | $(stat "$s" 4) |"
done
dp=$(median "2 processes x 1 thread, K=2")
one=$(median "1 process x 1 thread, K=1")
echo
awk -v dp="$dp" -v base="$base" -v one="$one" 'BEGIN {
    printf "2 processes x 1 thread: %.2fx one process with 2 threads, %.2fx one process with 1 thread.\n",
        dp / base, dp / one }'
