#!/usr/bin/python3
"""PyTorch reference for examples/sharpness.c: the top Hessian eigenvalue of the same
transformer on the same batch, by the same power iteration, with torch.autograd's double
backward (float64).

    build/examples/sharpness --save sharp.safetensors [its size flags]
    /usr/bin/python3 tools/reference/sharpness.py sharp.safetensors [--rtol 1e-8]

Needs Debian's python3-torch (1.13) and python3-numpy. Reads the file `sharpness --save`
writes: the parameters under tgrad's names (the state_dict keys of train_reference.LM), the
batch (`ids`, `targets`, int32), the start vector (`v0.<name>`) and tgrad's results in the
metadata (`loss`, `lambda`, `lambda_first`, `iterations`, `tol`, `max_iters`). It rebuilds the
model with torch.nn modules (train_reference.LM: nn.Embedding, nn.TransformerEncoderLayer with
norm_first, GELU and the causal mask, nn.LayerNorm, nn.Linear), loads the weights with
load_state_dict(strict=True), and iterates

    lambda_{k+1} = |H v_k|,  v_{k+1} = H v_k / |H v_k|

from v0 until |lambda_{k+1} - lambda_k| <= tol lambda_{k+1} or max_iters products, each H v
being torch.autograd.grad(g, w, grad_outputs=v) of the gradient g = dL/dw built with
create_graph=True (L the mean cross-entropy). Prints the loss, the first and the last
eigenvalue estimate of both and their relative differences, and PyTorch's Rayleigh quotient.

Exit status: 0 when the losses agree to 1e-12 and both the first and the last estimates to
--rtol (relative); 1 otherwise; 2 for a usage error.
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from load_tgrad import read_safetensors  # noqa: E402
from train_reference import LM  # noqa: E402


def load(path):
    """(model, ids, targets, v0 as a list in the order of model.parameters(), metadata)."""
    tensors, meta = read_safetensors(path)
    size = {k: int(meta[k]) for k in ("vocab_size", "max_seq_len", "n_layers", "d_model",
                                      "n_heads", "d_ff")}
    model = LM(**size, norm_first=True, activation="gelu", pos="learned", causal=True,
               tie_weights=False, layer_norm_eps=1e-5, dropout=0.0).double()
    ids = tensors.pop("ids").long()
    targets = tensors.pop("targets").long()
    v0 = {k[3:]: tensors.pop(k) for k in list(tensors) if k.startswith("v0.")}
    model.load_state_dict(tensors, strict=True)
    names = [n for n, _ in model.named_parameters()]
    if sorted(names) != sorted(v0):
        raise ValueError(f"{path}: the start vector's tensors are not the parameters")
    return model, ids, targets, [v0[n] for n in names], meta


def hvp(grads, params, v):
    """H v: the gradient of <g, v> (g built with create_graph=True)."""
    return torch.autograd.grad(grads, params, grad_outputs=v, retain_graph=True)


def norm(vs):
    return math.sqrt(sum(float((x * x).sum()) for x in vs))


def power(model, ids, targets, v, tol, max_iters):
    """The power iteration of examples/sharpness.c from v (unit); returns the loss, the first and
    the last estimate, the number of products, whether it converged, the Rayleigh quotient."""
    params = list(model.parameters())
    logits = model(ids)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    grads = torch.autograd.grad(loss, params, create_graph=True)
    lam, first, iters, converged = 0.0, None, 0, False
    while iters < max_iters and not converged:
        u = hvp(grads, params, v)
        n = norm(u)
        v = [x / n for x in u]
        converged = iters > 0 and abs(n - lam) <= tol * n
        lam = n
        iters += 1
        if first is None:
            first = n
    u = hvp(grads, params, v)
    rayleigh = sum(float((a * b).sum()) for a, b in zip(v, u))
    return float(loss), first, lam, iters, converged, rayleigh


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file", help="the file `sharpness --save FILE` wrote")
    ap.add_argument("--rtol", type=float, default=1e-8,
                    help="largest relative difference of the eigenvalues (default 1e-8)")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    model, ids, targets, v0, meta = load(args.file)
    t0 = time.perf_counter()
    loss, first, lam, iters, converged, rayleigh = power(
        model, ids, targets, v0, float(meta["tol"]), int(meta["max_iters"]))
    seconds = time.perf_counter() - t0
    tg = {k: float(meta[k]) for k in ("loss", "lambda", "lambda_first")}
    d_loss = abs(loss - tg["loss"]) / abs(tg["loss"])
    d_first = abs(first - tg["lambda_first"]) / tg["lambda_first"]
    d_lam = abs(lam - tg["lambda"]) / tg["lambda"]
    count = sum(p.numel() for p in model.parameters())
    print(f"{args.file}: {count} parameters, batch {tuple(ids.shape)}, torch {torch.__version__}")
    print(f"loss            torch {loss:.17g}  tgrad {tg['loss']:.17g}  relative {d_loss:.1e}")
    print(f"first estimate  torch {first:.17g}  tgrad {tg['lambda_first']:.17g}  "
          f"relative {d_first:.1e}")
    print(f"top eigenvalue  torch {lam:.17g}  tgrad {tg['lambda']:.17g}  relative {d_lam:.1e}")
    print(f"products        torch {iters} ({'converged' if converged else 'NOT converged'}), "
          f"tgrad {meta['iterations']}; torch's Rayleigh quotient {rayleigh:.17g}; "
          f"{seconds:.1f} s")
    ok = d_loss <= 1e-12 and d_first <= args.rtol and d_lam <= args.rtol
    print("agree" if ok else f"DIFFER (more than {args.rtol:g} relative)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
