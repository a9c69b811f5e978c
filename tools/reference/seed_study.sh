#!/bin/sh
# seed_study.sh - train the character LM with tgrad and with PyTorch (tools/reference/train_reference.py)
# on the same recipe for several seeds, one run at a time on one thread each, and print a
# Markdown table of the final and best validation losses (per seed, mean, std, min, max) with
# Welch's t-test of tgrad against PyTorch.
#
# A third row, "lockstep", is PyTorch started from tgrad's initialisation of the same seed and
# fed tgrad's batches (train_reference.py --tgrad-init): it differs from tgrad's run only by
# floating-point rounding, so it separates implementation differences from seed noise.
#
#     tools/reference/seed_study.sh [-o DIR] [-s "0 1 2"] [-n STEPS] [-w WHICH] [-t] [TEXT ...]
#
# The table in docs/training.md:  tools/reference/seed_study.sh -s "0 1 2" && tools/reference/seed_study.sh -s "3 4" -w both
#
#   -o DIR    where the logs and results.csv go (default: seed-study)
#   -s SEEDS  the seeds (default "0 1 2")
#   -n STEPS  training steps (default 1500, the recipe of docs/cli.md's first run)
#   -w WHICH  what to run: "all" (default: tgrad, torch, lockstep), "both" (tgrad, torch),
#             "tgrad", "torch" or "lockstep"; the table reads every result already in
#             DIR/results.csv, so one side can be rerun after a change
#   -t        print the table from DIR/results.csv without training
#   TEXT      the training files (default /usr/share/common-licenses/*)
#
# Every other hyperparameter is each program's default (the recipe of docs/cli.md's first run:
# 2 pre-norm layers, d_model 128, 4 heads, d_ff 512, seq 64, batch 32, AdamW lr 3e-3, 100 warmup
# steps, cosine to lr/10, weight decay 0.01, clip 1.0, the last 10% of the bytes for validation,
# evaluated every 100 steps on its non-overlapping windows). Needs build/tools/tgrad and Debian's python3-torch;
# with libopenblas0-pthread PyTorch runs ~5x faster than on the reference BLAS. TGRAD and
# PYTHON override the programs (default build/tools/tgrad, /usr/bin/python3).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
tgrad=${TGRAD:-$here/build/tools/tgrad}
py=${PYTHON:-/usr/bin/python3}
out=seed-study
seeds="0 1 2"
steps=1500
which=all
table_only=0
while getopts o:s:n:w:t opt; do
    case $opt in
    o) out=$OPTARG ;;
    s) seeds=$OPTARG ;;
    n) steps=$OPTARG ;;
    w) which=$OPTARG ;;
    t) table_only=1 ;;
    *) sed -n 2,30p "$0" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || set -- /usr/share/common-licenses/*
case $which in all|both|tgrad|torch|lockstep) ;;
*) echo "seed_study.sh: -w must be all, both, tgrad, torch or lockstep" >&2; exit 2 ;; esac
mkdir -p "$out"
csv=$out/results.csv
[ -f "$csv" ] || echo "impl,seed,steps,final_val,best_val,wall_s" > "$csv"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

# run LOG COMMAND...: COMMAND's output into LOG; a run stopped by a signal from outside (exit
# 130 or 143, or killed: 137) is started again, at most twice more
run() {
    log=$1
    shift
    for attempt in 1 2 3; do
        rc=0
        "$@" > "$log" 2>&1 || rc=$?
        case $rc in
        0) return 0 ;;
        130|137|143) echo "seed_study.sh: $log: stopped by a signal (exit $rc), running it again" >&2 ;;
        *) echo "seed_study.sh: $log: exit status $rc" >&2; exit 1 ;;
        esac
    done
    exit 1
}

# record IMPL SEED LOG: append the last evaluation's and the best validation loss to the CSV
record() {
    final=$(sed -n 's/.*step \([0-9]*\)\/\([0-9]*\) .*val \([0-9][0-9.]*\).*/\1 \2 \3/p' "$3" |
        awk '$1 == $2 { v = $3 } END { print v }')
    best=$(sed -n 's/.*val \([0-9][0-9.]*\).*/\1/p' "$3" | sort -g | head -n 1)
    wall=$(sed -n 's/.*wall \([0-9.]*\) s.*/\1/p' "$3" | tail -n 1)
    [ -n "$final" ] || { echo "seed_study.sh: no final validation loss in $3" >&2; exit 1; }
    # a rerun of the same implementation and seed replaces its row
    grep -v "^$1,$2,$steps," "$csv" > "$csv.tmp" || true
    echo "$1,$2,$steps,$final,$best,$wall" >> "$csv.tmp"
    mv "$csv.tmp" "$csv"
    echo "$1 seed $2: final $final best $best wall $wall s"
}

if [ $table_only = 0 ]; then
    for s in $seeds; do
        if [ $which = all ] || [ $which = both ] || [ $which = tgrad ]; then
            log=$out/tgrad-seed$s.log
            run "$log" "$tgrad" train --text "$@" --steps "$steps" --seed "$s" --threads 1
            record tgrad "$s" "$log"
        fi
        if [ $which = all ] || [ $which = both ] || [ $which = torch ]; then
            log=$out/torch-seed$s.log
            run "$log" "$py" "$here/tools/reference/train_reference.py" --text "$@" --steps "$steps" \
                --seed "$s" --threads 1
            record torch "$s" "$log"
        fi
        if [ $which = all ] || [ $which = lockstep ]; then
            # tgrad's initialisation of seed s: one step at learning rate 0 changes nothing
            ck=$out/init-seed$s.ckpt
            run "$out/init-seed$s.log" "$tgrad" train --text "$@" --steps 1 --lr 0 --seed "$s" \
                --threads 1 --checkpoint "$ck" --force
            log=$out/lockstep-seed$s.log
            run "$log" "$py" "$here/tools/reference/train_reference.py" --text "$@" --steps "$steps" \
                --seed "$s" --threads 1 --tgrad-init "$ck"
            rm -f "$ck"
            record lockstep "$s" "$log"
        fi
    done
fi

"$py" - "$csv" "$steps" <<'EOF'
import csv, math, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["steps"] == sys.argv[2]]
def stats(v):
    n = len(v); m = sum(v) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / (n - 1)) if n > 1 else float("nan")
    return n, m, sd, min(v), max(v)
def t_sf(t, df):
    """P(T > t) for Student's t with df degrees of freedom (Simpson's rule on the density)."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    f = lambda x: c * (1 + x * x / df) ** (-(df + 1) / 2)
    a, n = abs(t), 2000
    h = a / n
    s = f(0) + f(a) + sum((4 if i % 2 else 2) * f(i * h) for i in range(1, n))
    p = 0.5 - s * h / 3
    return p if t >= 0 else 1 - p
impls = [i for i in ("tgrad", "torch", "lockstep") if any(r["impl"] == i for r in rows)]
name = {"tgrad": "tgrad (f32)", "torch": "PyTorch 1.13 (`tools/reference/train_reference.py`)",
        "lockstep": "PyTorch from tgrad's init and batches"}
seeds = sorted({int(r["seed"]) for r in rows})
print(f"| {sys.argv[2]} steps, 1 thread | " + " | ".join(f"seed {s}" for s in seeds) +
      " | mean | std | min | max |")
print("|---" * (len(seeds) + 5) + "|")
res = {}
for key, label in (("final_val", "final"), ("best_val", "best")):
    for i in impls:
        by = {int(r["seed"]): float(r[key]) for r in rows if r["impl"] == i}
        n, m, sd, lo, hi = stats(list(by.values()))
        res[(i, key)] = by
        cells = [f"{by[s]:.4f}" if s in by else "-" for s in seeds]
        print(f"| {name[i]}, {label} validation | " + " | ".join(cells) +
              f" | {m:.4f} | {sd:.4f} | {lo:.4f} | {hi:.4f} |")
for key in ("final_val", "best_val"):
    what = key.split("_")[0]
    if "tgrad" in impls and "torch" in impls:
        a, b = res[("tgrad", key)], res[("torch", key)]
        if len(a) >= 2 and len(b) >= 2:
            _, ma, sa, _, _ = stats(list(a.values()))
            _, mb, sb, _, _ = stats(list(b.values()))
            va, vb = sa * sa / len(a), sb * sb / len(b)
            if va + vb > 0:
                t = (ma - mb) / math.sqrt(va + vb)
                df = (va + vb) ** 2 / (va * va / (len(a) - 1) + vb * vb / (len(b) - 1))
                print(f"\n{what} validation, tgrad - PyTorch: {ma - mb:+.4f} nats/char; "
                      f"Welch's t = {t:.2f}, df = {df:.1f}, two-sided p = {2 * t_sf(abs(t), df):.2f}")
    if "tgrad" in impls and "lockstep" in impls:
        a, b = res[("tgrad", key)], res[("lockstep", key)]
        d = [a[s] - b[s] for s in seeds if s in a and s in b]
        if d:
            print(f"\n{what} validation, tgrad - lockstep PyTorch (same seed): " +
                  ", ".join(f"{x:+.4f}" for x in d) + f" (mean {sum(d) / len(d):+.4f})")
EOF
