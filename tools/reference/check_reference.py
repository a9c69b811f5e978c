#!/usr/bin/python3
"""Lockstep check of `tgrad train --text` against its PyTorch reference (tools/reference/train_reference.py).

Both start from tgrad's initialisation and draw tgrad's batches (train_reference.py
--tgrad-init), so every per-step training loss and every validation loss must agree up to
float32 rounding. A failure means the two trainings differ in a definition: the model, the
loss, AdamW, the schedule, clipping, the batches or the validation windows.

Usage:
    /usr/bin/python3 tools/reference/check_reference.py [--tgrad build/tools/tgrad]

Two texts (generated here, deterministic): a small one, whose validation split has fewer than
4096 windows (all are evaluated), and a larger one, whose split has more (4096 spread evenly
over it, tools/cli/train_data.c). A small model (1 layer, d_model 32, seq 16, batch 8) trains 12 steps
with warmup 3 and an evaluation every 4 steps, one thread each. Needs Debian's python3-torch
and python3-numpy; takes well under a minute.
"""
import argparse
import csv
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

RECIPE = ["--layers", "1", "--d-model", "32", "--heads", "2", "--d-ff", "64", "--seq-len", "16",
          "--batch", "8", "--warmup", "3", "--eval-every", "4", "--seed", "7", "--threads", "1"]
STEPS = 12
RTOL = 3e-5  # float32 rounding over a dozen steps (measured: ~2e-6)


def write_text(path, n_bytes, seed):
    """Pseudo-English: words from a fixed list with punctuation and line breaks."""
    words = ("the of and to in is that for it as with was on be by this are or not from at an "
             "which have but they all one their has more software license program free work "
             "copy source code terms under may any you distribute modify").split()
    r, out, n = random.Random(seed), [], 0
    while n < n_bytes:
        w = r.choice(words) + r.choice(" " * 12 + ",.\n")
        out.append(w)
        n += len(w)
    with open(path, "w") as f:
        f.write("".join(out)[:n_bytes])


def read_log(path):
    with open(path) as f:
        return {int(r["step"]): r for r in csv.DictReader(f)}


def close(a, b):
    return abs(a - b) <= RTOL * max(1.0, abs(a), abs(b))


def run(cmd, log):
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT,
                           env=dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1"))
    if p.returncode != 0:
        sys.exit(f"check_reference: {' '.join(cmd)} failed (exit {p.returncode}); see {log}")


def check_case(tgrad, d, name, n_bytes):
    text = os.path.join(d, name + ".txt")
    write_text(text, n_bytes, n_bytes)
    n_train = n_bytes - int(n_bytes * 0.1)
    windows = (n_bytes - n_train - 1) // 16  # all of them, or 4096 every stride-th
    stride = windows // 4096 if windows > 4096 else 1
    windows = min(windows, 4096)
    ck, tlog, plog = (os.path.join(d, name + s) for s in (".ckpt", "-tgrad.csv", "-torch.csv"))
    run([tgrad, "train", "--text", text, *RECIPE, "--steps", "1", "--lr", "0", "--checkpoint",
         ck], os.path.join(d, name + "-init.out"))
    run([tgrad, "train", "--text", text, *RECIPE, "--steps", str(STEPS), "--log", tlog],
        os.path.join(d, name + "-tgrad.out"))
    run([sys.executable, os.path.join(HERE, "train_reference.py"), "--text", text, *RECIPE,
         "--steps", str(STEPS), "--tgrad-init", ck, "--log", plog],
        os.path.join(d, name + "-torch.out"))
    a, b = read_log(tlog), read_log(plog)
    bad, worst = [], 0.0
    for step in range(1, STEPS + 1):
        for key in ("train_loss", "val_loss"):
            x, y = a[step][key], b[step][key]
            if (x == "") != (y == ""):
                bad.append(f"step {step}: {key} tgrad {x!r}, PyTorch {y!r}")
            elif x:
                worst = max(worst, abs(float(x) - float(y)))
                if not close(float(x), float(y)):
                    bad.append(f"step {step}: {key} tgrad {x}, PyTorch {y}")
    print(f"{name}: {n_bytes} bytes, {windows} validation windows (stride {stride}), "
          f"{STEPS} steps: max |tgrad - PyTorch| = {worst:.2e}" + (" FAIL" if bad else " ok"))
    for line in bad:
        print("  " + line)
    return not bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tgrad", default=os.path.join(HERE, "..", "..", "build", "tools", "tgrad"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        ok = check_case(a.tgrad, d, "small", 40000)
        # > 4096 windows of 16 bytes in the last 10%: evaluation takes every 2nd window
        ok = check_case(a.tgrad, d, "large", 1500000) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
