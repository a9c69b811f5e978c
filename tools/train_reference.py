#!/usr/bin/python3
"""PyTorch reference for `tgrad train --text`: the same architecture, data pipeline and
hyperparameters, so learning curves and tokens/s can be compared on the same machine.

    /usr/bin/python3 tools/train_reference.py --text /usr/share/common-licenses/* [--steps 1500]

Needs Debian's python3-torch (1.13). Model: byte-level decoder-only transformer = token
embedding + learned position embedding -> N x nn.TransformerEncoderLayer (pre-norm, relu,
dropout 0, causal mask) -> final LayerNorm -> Linear head. AdamW (lr 3e-3, weight decay 0.01),
linear warmup (100 steps) then cosine decay to lr/10, gradient clipping at 1.0, batch 32,
seq_len 64; the last 10% of the bytes is the validation split, evaluated on non-overlapping
windows exactly as tgrad does. Prints a line per evaluation and a final summary with tokens/s.
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn as nn


def load(paths, val_fraction):
    seen, data = set(), bytearray()
    for p in paths:
        real = os.path.realpath(p)
        if os.path.isdir(real) or real in seen:
            continue
        seen.add(real)
        with open(real, "rb") as f:
            data += f.read()
    vocab = sorted(set(data))
    idx = {b: i for i, b in enumerate(vocab)}
    ids = torch.tensor([idx[b] for b in data], dtype=torch.long)
    n_train = len(ids) - int(len(ids) * val_fraction)
    return ids, n_train, len(vocab)


class LM(nn.Module):
    def __init__(self, vocab, d_model, heads, d_ff, layers, seq_len, norm_first=True):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(seq_len, d_model)
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(d_model, heads, d_ff, dropout=0.0, batch_first=True,
                                       norm_first=norm_first) for _ in range(layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)
        self.register_buffer("mask", torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), 1))

    def forward(self, x):
        t = x.shape[1]
        h = self.tok_emb(x) + self.pos_emb.weight[:t]
        for layer in self.layers:
            h = layer(h, src_mask=self.mask[:t, :t])
        return self.head(self.norm(h))


def lr_at(step, total, warmup, base, min_lr):
    if warmup > 0 and step < warmup:
        return base * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_lr + 0.5 * (base - min_lr) * (1 + math.cos(math.pi * p))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--text", nargs="+", required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d-ff", type=int, default=512)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    ids, n_train, vocab = load(a.text, 0.1)
    T, B = a.seq_len, a.batch
    model = LM(vocab, a.d_model, a.heads, a.d_ff, a.layers, T)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"reference: {len(ids)} bytes ({n_train} train), vocabulary {vocab}, "
          f"{n_params} parameters, {a.threads} threads", file=sys.stderr)
    windows = (len(ids) - n_train - 1) // T
    val_x = torch.stack([ids[n_train + w * T:n_train + w * T + T] for w in range(windows)])
    val_y = torch.stack([ids[n_train + w * T + 1:n_train + w * T + T + 1] for w in range(windows)])
    lossf = nn.CrossEntropyLoss()
    best, t0, trained = float("inf"), time.time(), 0
    for step in range(a.steps):
        lr = lr_at(step, a.steps, a.warmup, a.lr, a.lr / 10)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, n_train - T, (B,))
        x = torch.stack([ids[s:s + T] for s in starts])
        y = torch.stack([ids[s + 1:s + T + 1] for s in starts])
        model.train()
        loss = lossf(model(x).reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        trained += 1
        if (step + 1) % a.eval_every == 0 or step + 1 == a.steps:
            model.eval()
            with torch.no_grad():
                tot = 0.0
                for k in range(0, windows, B):
                    xb, yb = val_x[k:k + B], val_y[k:k + B]
                    tot += lossf(model(xb).reshape(-1, vocab), yb.reshape(-1)).item() * xb.numel()
                val = tot / (windows * T)
            best = min(best, val)
            el = time.time() - t0
            print(f"step {step + 1}/{a.steps}  loss {loss.item():.4f}  val {val:.4f}  "
                  f"{trained * B * T / el:.0f} tok/s", file=sys.stderr)
    el = time.time() - t0
    print(f"parameters {n_params}  steps {a.steps}  wall {el:.1f} s  "
          f"{a.steps * B * T / el:.0f} tokens/s  best validation loss {best:.4f} nats/char")


if __name__ == "__main__":
    main()
