#!/usr/bin/python3
"""Generate PyTorch reference trajectories for tgrad's optimizers (tests/test_optim.c).

Usage:
    /usr/bin/python3 tools/gen_optim_fixtures.py [--out tests/fixtures]          # write all
    /usr/bin/python3 tools/gen_optim_fixtures.py [--out tests/fixtures] --check  # verify
    /usr/bin/python3 tools/gen_optim_fixtures.py --list                          # case names

Needs PyTorch (tested with Debian's python3-torch 1.13) and NumPy; the safetensors writer and
reader are the ones in tools/gen_fixtures.py (imported). Everything is float64 with a fixed
seed per case, single-threaded, so every run writes the same bytes.

Each case (``<out>/optim_<case>.safetensors``) runs one torch.optim optimizer
(``foreach=False``: the single-tensor implementation tgrad follows) for N_STEPS = 5 steps over
two parameters of shapes (3, 4) and (5,), initialised N(0, 1). The gradients are a fixed
sequence of N(0, 1) tensors (they do not depend on the parameters), and the learning rate
changes every step, lr_t = base_lr * (1 + 0.1 t) for t = 0..4, set in the param group before
each step (so a C replay must pass lr_t to tg_optim_step()).

Tensor names (steps are 1-based; i is the parameter index, 0 or 1):
    p0.<i>        initial parameter values
    g<s>.<i>      gradient used at step s (1..5)
    p<s>.<i>      parameter values after step s

Metadata (all strings; floats as Python repr, which C strtod reads back exactly):
    kind          sgd | adam | adamw
    n_params      "2"
    n_steps       "5"
    lr            comma-separated lr_t of the 5 steps
    momentum, dampening, weight_decay, beta1, beta2, eps   the hyperparameters
    nesterov      "0" / "1"
    description   one line

--check re-reads every file, replays the update with an independent NumPy implementation of
the formulas documented in include/tgrad_train.h (not torch.optim) and checks that
regenerating gives byte-identical files.
"""

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_fixtures import Rng, decode_safetensors, encode_safetensors  # noqa: E402

torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)

N_STEPS = 5
SHAPES = [(3, 4), (5,)]

# name: (seed, kind, base_lr, hyperparameters, description)
CASES = {
    "sgd_plain": (201, "sgd", 0.1, {},
                  "SGD, no momentum, no weight decay"),
    "sgd_momentum_wd": (202, "sgd", 0.1, {"momentum": 0.9, "weight_decay": 0.1},
                        "SGD momentum 0.9, weight_decay 0.1"),
    "sgd_dampening": (203, "sgd", 0.1, {"momentum": 0.9, "dampening": 0.5},
                      "SGD momentum 0.9, dampening 0.5"),
    "sgd_nesterov": (204, "sgd", 0.1, {"momentum": 0.9, "nesterov": True},
                     "SGD Nesterov momentum 0.9"),
    "adam_default": (205, "adam", 0.05, {},
                     "Adam defaults (betas 0.9/0.999, eps 1e-8, no weight decay)"),
    "adam_wd": (206, "adam", 0.05, {"weight_decay": 0.1},
                "Adam with L2 weight_decay 0.1 (added to the gradient)"),
    "adamw_default": (207, "adamw", 0.05, {},
                      "AdamW defaults (decoupled weight_decay 0.01)"),
    "adamw_custom": (208, "adamw", 0.05,
                     {"weight_decay": 0.1, "betas": (0.8, 0.99), "eps": 1e-6},
                     "AdamW weight_decay 0.1, betas (0.8, 0.99), eps 1e-6"),
}


def hyper(kind, h):
    """Full hyperparameter set with PyTorch's defaults filled in."""
    return {
        "momentum": float(h.get("momentum", 0.0)),
        "dampening": float(h.get("dampening", 0.0)),
        "nesterov": bool(h.get("nesterov", False)),
        "weight_decay": float(h.get("weight_decay", 0.01 if kind == "adamw" else 0.0)),
        "beta1": float(h.get("betas", (0.9, 0.999))[0]),
        "beta2": float(h.get("betas", (0.9, 0.999))[1]),
        "eps": float(h.get("eps", 1e-8)),
    }


def make_optimizer(kind, params, lr, hp):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=hp["momentum"],
                               dampening=hp["dampening"], weight_decay=hp["weight_decay"],
                               nesterov=hp["nesterov"], foreach=False)
    cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
    return cls(params, lr=lr, betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"],
               weight_decay=hp["weight_decay"], foreach=False)


def lr_schedule(base):
    return [base * (1.0 + 0.1 * t) for t in range(N_STEPS)]


def gen_case(case):
    seed, kind, base, h, description = CASES[case]
    rng = Rng(seed)
    hp = hyper(kind, h)
    p0 = [rng.randn(*s) for s in SHAPES]
    grads = [[rng.randn(*s) for s in SHAPES] for _ in range(N_STEPS)]
    lrs = lr_schedule(base)
    params = [torch.nn.Parameter(p.clone()) for p in p0]
    opt = make_optimizer(kind, params, lrs[0], hp)
    tensors = [(f"p0.{i}", p) for i, p in enumerate(p0)]
    for s in range(N_STEPS):
        for group in opt.param_groups:
            group["lr"] = lrs[s]
        for p, g in zip(params, grads[s]):
            p.grad = g.clone()
        opt.step()
        tensors += [(f"g{s + 1}.{i}", g) for i, g in enumerate(grads[s])]
        tensors += [(f"p{s + 1}.{i}", p.detach().clone()) for i, p in enumerate(params)]
    md = {
        "kind": kind,
        "n_params": str(len(SHAPES)),
        "n_steps": str(N_STEPS),
        "lr": ",".join(repr(x) for x in lrs),
        "momentum": repr(hp["momentum"]),
        "dampening": repr(hp["dampening"]),
        "nesterov": "1" if hp["nesterov"] else "0",
        "weight_decay": repr(hp["weight_decay"]),
        "beta1": repr(hp["beta1"]),
        "beta2": repr(hp["beta2"]),
        "eps": repr(hp["eps"]),
        "description": description,
    }
    return tensors, md


def build(case):
    tensors, md = gen_case(case)
    return encode_safetensors(tensors, md)


# --------------------------------------------------------------------------------------------
# --check: independent NumPy replay of the documented formulas
# --------------------------------------------------------------------------------------------


def replay(arrays, md):
    kind = md["kind"]
    n, steps = int(md["n_params"]), int(md["n_steps"])
    lrs = [float(x) for x in md["lr"].split(",")]
    mom, damp = float(md["momentum"]), float(md["dampening"])
    nest, wd = md["nesterov"] == "1", float(md["weight_decay"])
    b1, b2, eps = float(md["beta1"]), float(md["beta2"]), float(md["eps"])
    p = [arrays[f"p0.{i}"].copy() for i in range(n)]
    m = [np.zeros_like(x) for x in p]
    v = [np.zeros_like(x) for x in p]
    worst = 0.0
    for t in range(1, steps + 1):
        lr = lrs[t - 1]
        for i in range(n):
            g = arrays[f"g{t}.{i}"].copy()
            if kind == "sgd":
                g = g + wd * p[i]
                if mom != 0:
                    m[i] = g.copy() if t == 1 else mom * m[i] + (1 - damp) * g
                    g = g + mom * m[i] if nest else m[i]
                p[i] = p[i] - lr * g
            else:
                if kind == "adamw":
                    p[i] = p[i] * (1 - lr * wd)
                else:
                    g = g + wd * p[i]
                m[i] = b1 * m[i] + (1 - b1) * g
                v[i] = b2 * v[i] + (1 - b2) * g * g
                bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
                p[i] = p[i] - (lr / bc1) * m[i] / (np.sqrt(v[i]) / np.sqrt(bc2) + eps)
            ref = arrays[f"p{t}.{i}"]
            worst = max(worst, float(np.max(np.abs(p[i] - ref)) / (1 + np.max(np.abs(ref)))))
    return worst


def check_file(path, case, tol=1e-13):
    with open(path, "rb") as f:
        buf = f.read()
    arrays, md = decode_safetensors(buf)
    problems = []
    for key in ("kind", "n_params", "n_steps", "lr", "momentum", "dampening", "nesterov",
                "weight_decay", "beta1", "beta2", "eps", "description"):
        if key not in md:
            problems.append(f"metadata {key} missing")
    if problems:
        return problems, len(buf)
    n, steps = int(md["n_params"]), int(md["n_steps"])
    want = [f"p0.{i}" for i in range(n)]
    for s in range(1, steps + 1):
        want += [f"g{s}.{i}" for i in range(n)] + [f"p{s}.{i}" for i in range(n)]
    if list(arrays) != want:
        problems.append(f"tensor names/order differ: {list(arrays)}")
        return problems, len(buf)
    for k, a in arrays.items():
        if not np.all(np.isfinite(a)):
            problems.append(f"{k} not finite")
    worst = replay(arrays, md)
    if worst > tol:
        problems.append(f"replay mismatch {worst:.3g}")
    # the parameters must actually move every step
    for s in range(1, steps + 1):
        for i in range(n):
            if np.array_equal(arrays[f"p{s}.{i}"], arrays[f"p{s - 1}.{i}"]):
                problems.append(f"p{s}.{i} did not change")
    if build(case) != buf:
        problems.append("regenerated bytes differ (non-deterministic or stale file)")
    return problems, len(buf)


# --------------------------------------------------------------------------------------------


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
        bad = total = 0
        for c in cases:
            path = os.path.join(out_dir, f"optim_{c}.safetensors")
            if not os.path.exists(path):
                print(f"FAIL {c}: {path} missing")
                bad += 1
                continue
            problems, size = check_file(path, c)
            total += size
            print(f"{'ok  ' if not problems else 'FAIL'} {c:16s} {size:6d} B  "
                  + "; ".join(problems))
            bad += bool(problems)
        print(f"{len(cases) - bad}/{len(cases)} ok, {total} bytes")
        return 1 if bad else 0
    os.makedirs(out_dir, exist_ok=True)
    total = 0
    for c in cases:
        data = build(c)
        path = os.path.join(out_dir, f"optim_{c}.safetensors")
        with open(path, "wb") as f:
            f.write(data)
        total += len(data)
        print(f"wrote {path} ({len(data)} bytes)")
    print(f"{len(cases)} files, {total} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
