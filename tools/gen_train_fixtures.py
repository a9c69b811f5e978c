#!/usr/bin/python3
"""Generate PyTorch reference values for label-smoothed cross-entropy and the Noam schedule.

Usage:
    /usr/bin/python3 tools/gen_train_fixtures.py [--out tests/fixtures]          # write all
    /usr/bin/python3 tools/gen_train_fixtures.py [--out tests/fixtures] --check  # verify
    /usr/bin/python3 tools/gen_train_fixtures.py --list                          # case names

Needs PyTorch (tested with Debian's python3-torch 1.13) and NumPy; the safetensors writer and
reader are the ones in tools/gen_fixtures.py (imported). Everything is float64 with a fixed
seed per case, single-threaded, so every run writes the same bytes.

Cross-entropy (``<out>/xent_<case>.safetensors``, read by tests/test_loss.c): logits
(..., V) N(0, s^2), targets (...) random classes with some set to ignore_index, and

    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1),
                           ignore_index=ignore_index, label_smoothing=eps)
    loss.backward(grad_out)

Tensors (all F64; targets hold integers): logits, targets, grad_out (a scalar, shape ()),
out (the loss, shape ()), grad.logits. Metadata: ignore_index, label_smoothing (Python repr),
n_valid (rows not ignored), description.

Noam schedule (``<out>/sched_noam_<case>.safetensors``, read by tests/test_optim.c): for the
0-based update indices `step` (F64 holding integers), with n = step + 1,

    lr         factor * d_model ** -0.5 * min(n ** -0.5, n * warmup ** -1.5)  (Python floats,
               the formula of Vaswani et al. 2017, eq. 3, evaluated as written)
    lr_torch   torch.optim.lr_scheduler.LambdaLR over SGD(lr=factor) with
               lambda e: d_model ** -0.5 * min((e + 1) ** -0.5, (e + 1) * warmup ** -1.5),
               the optimizer's lr read before the step-th optimizer.step() (scheduler.step()
               after each one, as PyTorch's training loops do)

Metadata: d_model, warmup, factor, description.

--check re-reads every file, recomputes cross-entropy with an independent NumPy formula
(not F.cross_entropy: -sum_c q_c log_softmax(x)_c with q = (1 - eps) onehot + eps / V, mean
over the rows not ignored; gradient (softmax - q) / N_valid) and the schedule with NumPy, and
checks that regenerating gives byte-identical files.
"""

import argparse
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_fixtures import Rng, decode_safetensors, encode_safetensors  # noqa: E402

torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)

# ---- cross-entropy -------------------------------------------------------------------------
# name: (seed, shape of logits, ignore_index, label_smoothing, n ignored rows, logit scale,
#        description)
XENT = {
    "ls01_2d": (601, (4, 5), -100, 0.1, 0, 1.0,
                "logits (4, 5), label_smoothing 0.1, nothing ignored"),
    "ls03_3d_ignore": (602, (2, 3, 7), -100, 0.3, 2, 1.0,
                       "logits (2, 3, 7), label_smoothing 0.3, 2 rows ignore_index -100"),
    "ls01_ignore_class": (603, (6, 11), 2, 0.1, 2, 2.0,
                          "logits (6, 11) scale 2, label_smoothing 0.1, ignore_index 2 (a "
                          "class), 2 rows with target 2"),
    "ls03_wide": (604, (3, 4, 50), -100, 0.3, 3, 3.0,
                  "logits (3, 4, 50) scale 3, label_smoothing 0.3, 3 rows ignored"),
    "ls01_1d": (605, (9,), -100, 0.1, 0, 1.0,
                "logits (9) (one row, target rank 0), label_smoothing 0.1"),
    "ls1_full": (606, (5, 6), -1, 1.0, 1, 1.0,
                 "logits (5, 6), label_smoothing 1 (the uniform target), 1 row ignored"),
    "ls0_ignore": (607, (4, 6), -100, 0.0, 1, 1.0,
                   "logits (4, 6), label_smoothing 0 (plain cross-entropy), 1 row ignored"),
    "ls01_large": (608, (3, 8), -100, 0.1, 1, 1e4,
                   "logits (3, 8) scale 1e4, label_smoothing 0.1, 1 row ignored"),
    "ls03_one_class": (609, (3, 1), -100, 0.3, 0, 1.0,
                       "logits (3, 1) (V = 1: loss 0), label_smoothing 0.3"),
}


def gen_xent(case):
    seed, shape, ign, eps, n_ign, scale, desc = XENT[case]
    rng = Rng(seed)
    V = shape[-1]
    lead = shape[:-1]
    R = int(np.prod(lead)) if lead else 1
    logits = rng.randn(*shape) * scale
    targets = torch.tensor([rng.randint(0, V) for _ in range(R)], dtype=torch.long)
    rows = list(range(R))
    for k in range(n_ign):  # distinct rows, spread out
        targets[rows[(k * 5 + 1) % R]] = ign
    x = logits.clone().requires_grad_()
    loss = F.cross_entropy(x.reshape(-1, V), targets, ignore_index=ign, label_smoothing=eps)
    grad_out = torch.tensor(0.5 + rng.rand(1).item())
    loss.backward(grad_out)
    n_valid = int((targets != ign).sum())
    tensors = [("logits", logits), ("targets", targets.reshape(lead).double()),
               ("grad_out", grad_out), ("out", loss.detach()), ("grad.logits", x.grad)]
    md = {"ignore_index": str(ign), "label_smoothing": repr(eps), "n_valid": str(n_valid),
          "description": desc}
    return tensors, md


def ref_xent(logits, targets, ign, eps, grad_out):
    V = logits.shape[-1]
    x = logits.reshape(-1, V)
    t = targets.reshape(-1).astype(np.int64)
    valid = t != ign
    m = x.max(axis=1, keepdims=True)
    lse = m + np.log(np.exp(x - m).sum(axis=1, keepdims=True))
    logp = x - lse
    q = np.full(x.shape, eps / V)
    q[np.arange(len(t))[valid], t[valid]] += 1 - eps
    rows = -(q * logp).sum(axis=1)
    nv = valid.sum()
    loss = rows[valid].sum() / nv
    g = (np.exp(logp) - q) * valid[:, None] * grad_out / nv
    return loss, g.reshape(logits.shape)


# ---- Noam schedule -------------------------------------------------------------------------
# name: (d_model, warmup, factor, last update index, description)
NOAM = {
    "paper": (512, 4000, 1.0, 20000,
              "the paper's d_model 512, warmup 4000, factor 1"),
    "small": (256, 400, 2.0, 3000, "d_model 256, warmup 400, factor 2"),
    "warmup1": (64, 1, 0.7, 500, "d_model 64, warmup 1 (decay from the first update), "
                "factor 0.7"),
}


def noam_steps(warmup, last):
    """Update indices: the first 64, around the peak, then a geometric sweep, and the last."""
    s = set(range(min(64, last + 1)))
    for d in (-2, -1, 0, 1, 2):
        if 0 <= warmup - 1 + d <= last:
            s.add(warmup - 1 + d)
    v = 64.0
    while v < last:
        s.add(int(v))
        v *= 1.37
    s.add(last)
    return sorted(s)


def noam_formula(n, d_model, warmup, factor):
    return factor * d_model ** -0.5 * min(n ** -0.5, n * warmup ** -1.5)


def gen_noam(case):
    d_model, warmup, factor, last, desc = NOAM[case]
    steps = noam_steps(warmup, last)
    lr = [noam_formula(s + 1, d_model, warmup, factor) for s in steps]
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=factor)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda e: d_model ** -0.5 * min((e + 1) ** -0.5, (e + 1) * warmup ** -1.5))
    want = set(steps)
    lr_torch = []
    for s in range(last + 1):
        if s in want:
            lr_torch.append(opt.param_groups[0]["lr"])
        p.grad = torch.zeros(1)
        opt.step()
        sched.step()
    tensors = [("step", np.array(steps, dtype=np.float64)), ("lr", np.array(lr)),
               ("lr_torch", np.array(lr_torch))]
    md = {"d_model": str(d_model), "warmup": str(warmup), "factor": repr(factor),
          "description": desc}
    return tensors, md


CASES = {**{"xent_" + k: (lambda k=k: gen_xent(k)) for k in XENT},
         **{"sched_noam_" + k: (lambda k=k: gen_noam(k)) for k in NOAM}}


def build(case):
    tensors, md = CASES[case]()
    return encode_safetensors(tensors, md)


def check_file(path, case):
    with open(path, "rb") as f:
        buf = f.read()
    arrays, md = decode_safetensors(buf)
    problems = []
    if case.startswith("xent_"):
        ign, eps = int(md["ignore_index"]), float(md["label_smoothing"])
        loss, g = ref_xent(arrays["logits"], arrays["targets"], ign, eps,
                           float(arrays["grad_out"]))
        scale = 1 + abs(float(arrays["out"]))
        if abs(loss - float(arrays["out"])) / scale > 1e-12:
            problems.append(f"loss {float(arrays['out'])!r} vs NumPy {loss!r}")
        e = np.max(np.abs(g - arrays["grad.logits"])) / (1 + np.max(np.abs(g)))
        if e > 1e-12:
            problems.append(f"grad.logits mismatch {e:.3g}")
        if int(md["n_valid"]) != int((arrays["targets"] != ign).sum()):
            problems.append("n_valid wrong")
    else:
        d, w, fac = int(md["d_model"]), int(md["warmup"]), float(md["factor"])
        n = arrays["step"] + 1
        ref = fac * float(d) ** -0.5 * np.minimum(n ** -0.5, n * float(w) ** -1.5)
        for key in ("lr", "lr_torch"):
            e = np.max(np.abs(arrays[key] - ref) / ref)
            if e > 1e-15:
                problems.append(f"{key}: relative error {e:.3g} against NumPy")
    if build(case) != buf:
        problems.append("regenerated bytes differ (non-deterministic or stale file)")
    return problems, len(buf)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures"),
                    help="output directory (default: tests/fixtures)")
    ap.add_argument("--check", action="store_true",
                    help="verify existing files instead of writing them")
    ap.add_argument("--list", action="store_true", help="print the case names")
    ap.add_argument("cases", nargs="*", help="subset of cases (default: all)")
    args = ap.parse_args()
    cases = args.cases or list(CASES)
    for c in cases:
        if c not in CASES:
            ap.error(f"unknown case {c}")
    if args.list:
        print("\n".join(cases))
        return 0
    out_dir = os.path.normpath(args.out)
    if args.check:
        bad = 0
        for c in cases:
            path = os.path.join(out_dir, c + ".safetensors")
            if not os.path.exists(path):
                print(f"FAIL {c}: {path} missing")
                bad += 1
                continue
            problems, size = check_file(path, c)
            print(f"{'ok  ' if not problems else 'FAIL'} {c:24s} {size:6d} B  "
                  + "; ".join(problems))
            bad += bool(problems)
        print(f"{len(cases) - bad}/{len(cases)} ok")
        return 1 if bad else 0
    os.makedirs(out_dir, exist_ok=True)
    total = 0
    for c in cases:
        data = build(c)
        path = os.path.join(out_dir, c + ".safetensors")
        with open(path, "wb") as f:
            f.write(data)
        total += len(data)
        print(f"wrote {path} ({len(data)} bytes)")
    print(f"{len(cases)} files, {total} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
