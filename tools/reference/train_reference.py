#!/usr/bin/python3
"""PyTorch reference for `tgrad train --text`: the same architecture, data pipeline and
hyperparameters, so learning curves and tokens/s can be compared on the same machine.

    /usr/bin/python3 tools/reference/train_reference.py --text /usr/share/common-licenses/* [--steps 1500]
        [--precision f32|bf16]

Needs Debian's python3-torch (1.13). Model (class LM, also the loader of `tgrad export` files:
see load_export()): byte-level decoder-only transformer = token embedding + learned position
embedding -> N x nn.TransformerEncoderLayer (pre-norm, relu, dropout 0, causal mask) -> final
LayerNorm -> Linear head. AdamW (lr 3e-3, weight decay 0.01),
linear warmup (100 steps) then cosine decay to lr/10, gradient clipping at 1.0, batch 32,
seq_len 64; the last 10% of the bytes is the validation split, evaluated on non-overlapping
windows exactly as tgrad does (all of them, or 4096 spread evenly over a larger split). Prints a line per evaluation and a final summary with tokens/s.

--precision bf16 trains with PyTorch's CPU autocast, the counterpart of tgrad's
TG_PRECISION_BF16: the forward pass and the loss of each step (and the evaluation passes) run
under torch.autocast("cpu", dtype=torch.bfloat16), so the matrix products take bf16 operands
and accumulate in f32, while the parameters (master weights), their gradients, AdamW's state
and the clipping stay f32; backward runs outside autocast, in the dtypes forward chose. The
summary names the precision.

Lockstep with tgrad (the same initialisation and the same batches, so the two runs differ only
by floating-point rounding):

    build/tools/tgrad train --text F... --seed S --steps 1 --lr 0 --checkpoint init.ckpt
    build/tools/tgrad train --text F... --seed S --log tgrad.csv
    /usr/bin/python3 tools/reference/train_reference.py --text F... --seed S --tgrad-init init.ckpt \
        --log torch.csv
"""
import argparse
import contextlib
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


def sinusoidal(max_seq_len, d_model):
    """Vaswani et al. 2017 sec. 3.5, computed exactly as tgrad's tg_sinusoidal_encoding:
    PE[t, i] = sin(t * 10000^(-(i - i % 2) / D)) for even i, cos(...) for odd i (in float64)."""
    pe = torch.empty(max_seq_len, d_model, dtype=torch.float64)
    for i in range(d_model):
        freq = math.pow(10000.0, -float(i - i % 2) / float(d_model))
        for t in range(max_seq_len):
            pe[t, i] = math.cos(t * freq) if i % 2 else math.sin(t * freq)
    return pe


class LM(nn.Module):
    """tgrad's tg_transformer in PyTorch: token embedding + positions (learned or sinusoidal)
    -> dropout -> n_layers x nn.TransformerEncoderLayer (batch_first) with the causal mask if
    `causal` -> final LayerNorm -> Linear head (optionally tied to the token embedding).

    The keyword arguments are exactly the keys of the `config` metadata that `tgrad export`
    writes, and the state_dict keys are tgrad's parameter names, so an exported model loads
    with `load_state_dict(..., strict=True)`; see load_export().
    """

    def __init__(self, vocab_size, d_model=128, n_heads=4, d_ff=512, n_layers=2, max_seq_len=64,
                 norm_first=True, activation="relu", pos="learned", causal=True,
                 tie_weights=False, layer_norm_eps=1e-5, dropout=0.0):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        if pos == "learned":
            self.pos_emb = nn.Embedding(max_seq_len, d_model)
        elif pos == "sinusoidal":
            self.pos_emb = None
            self.register_buffer("pe", sinusoidal(max_seq_len, d_model), persistent=False)
        else:
            raise ValueError(f"pos must be 'learned' or 'sinusoidal', not {pos!r}")
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=dropout,
                                       activation=activation, layer_norm_eps=layer_norm_eps,
                                       batch_first=True, norm_first=norm_first)
            for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.head = nn.Linear(d_model, vocab_size)
        if tie_weights:
            self.head.weight = self.tok_emb.weight
        # buffers that are not parameters stay out of the state_dict (persistent=False)
        mask = torch.triu(torch.ones(max_seq_len, max_seq_len, dtype=torch.bool), 1)
        self.register_buffer("mask", mask if causal else None, persistent=False)

    @classmethod
    def from_config(cls, config):
        """A model from the `config` metadata of `tgrad export` (a dict; `dtype` is ignored)."""
        return cls(**{k: v for k, v in config.items() if k != "dtype"})

    def forward(self, x):
        t = x.shape[1]
        pos = self.pos_emb.weight[:t] if self.pos_emb is not None else self.pe[:t]
        h = self.drop(self.tok_emb(x) + pos)
        mask = self.mask[:t, :t] if self.mask is not None else None
        for layer in self.layers:
            h = layer(h, src_mask=mask)
        return self.head(self.norm(h))


_ST_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
              "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}


def read_safetensors(path):
    """A safetensors file as ({name: tensor}, {metadata key: value}); no dependency beyond
    torch and numpy. (With the `safetensors` package: safetensors.torch.load_file(path) and
    safetensors.safe_open(path, "pt").metadata() give the same.)"""
    import json
    import struct

    import numpy as np
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    tensors = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        a = np.frombuffer(body[b:end], dtype=_ST_DTYPES[e["dtype"]]).reshape(e["shape"])
        tensors[name] = torch.from_numpy(a.copy())
    return tensors, meta


def load_export(path, dtype=None):
    """Load a file written by `tgrad export` into LM with strict=True (every key must match:
    no missing and no unexpected parameters). Returns (model in eval mode, vocab, config):
    vocab[i] is the byte that token id i stands for. dtype: None keeps the file's
    (config["dtype"]), or e.g. torch.float64."""
    import json
    tensors, meta = read_safetensors(path)
    if meta.get("format") != "tgrad-export-1":
        raise ValueError(f"{path}: not a tgrad export (format {meta.get('format')!r})")
    config = json.loads(meta["config"])
    vocab = json.loads(meta["vocab"])
    model = LM.from_config(config)
    model.to(dtype or getattr(torch, config["dtype"]))
    model.load_state_dict(tensors, strict=True)
    model.eval()
    return model, vocab, config


MAX_VAL_WINDOWS = 4096  # tools/cli/train_data.c, CORPUS_MAX_VAL_WINDOWS


def val_windows(n, n_train, seq_len):
    """tgrad's validation windows (tools/cli/train_data.c, val_windows): the non-overlapping windows of
    seq_len bytes of the split [n_train, n), or, when there are more than 4096 of them, 4096
    spread evenly over it: window w starts at byte n_train + w * stride * seq_len. Returns
    (windows, stride)."""
    all_windows = (n - n_train - 1) // seq_len
    if all_windows > MAX_VAL_WINDOWS:
        return MAX_VAL_WINDOWS, all_windows // MAX_VAL_WINDOWS
    return all_windows, 1


class TgradRng:
    """tgrad's generator (tg_ctx_seed, tg_rng_u64): xoshiro256** seeded by four splitmix64
    outputs of the seed, so --tgrad-init can draw the very batches `tgrad train` draws."""
    M = (1 << 64) - 1

    def __init__(self, seed):
        x, self.s = seed & self.M, []
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & self.M
            z = x
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & self.M
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & self.M
            self.s.append(z ^ (z >> 31))

    @staticmethod
    def _rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & TgradRng.M

    def u64(self):
        s, M = self.s, self.M
        result = (self._rotl((s[1] * 5) & M, 7) * 9) & M
        t = (s[1] << 17) & M
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = self._rotl(s[3], 45)
        return result

    def state_hex(self):
        return "".join(f"{w:016x}" for w in self.s)


def tgrad_init(model, path, seed, batch, limit=1 << 24):
    """Load the parameters of a tgrad checkpoint saved after one step at learning rate 0
    (`tgrad train --text ... --seed S --steps 1 --lr 0 --checkpoint CK`: its parameters are the
    initialisation of seed S) and return tgrad's generator positioned where a fresh `tgrad train
    --seed S` draws its first batch: after the initialisation's draws, found as the position
    whose state, `batch` draws later, is the checkpoint's `rng`."""
    tensors, meta = read_safetensors(path)
    params = {k: v for k, v in tensors.items() if not k.startswith(("adam.", "sgd."))}
    model.load_state_dict(params, strict=True)
    if meta.get("optim.step") != "1" or float(meta.get("train.lr", "nan")) != 0:
        raise ValueError(f"{path}: not saved after one step at lr 0 (step "
                         f"{meta.get('optim.step')}, lr {meta.get('train.lr')})")
    target, rng, n = meta["rng"], TgradRng(seed), 0
    ahead = TgradRng(seed)
    for _ in range(batch):
        ahead.u64()
    while ahead.state_hex() != target:
        if n == limit:
            raise ValueError(f"{path}: its rng state is not {limit} draws from seed {seed}")
        rng.u64()
        ahead.u64()
        n += 1
    return rng


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
    ap.add_argument("--precision", choices=("f32", "bf16"), default="f32",
                    help="f32 (default), or bf16: forward and loss under torch.autocast('cpu', "
                         "dtype=torch.bfloat16), parameters, gradients and AdamW in f32")
    ap.add_argument("--log", help="CSV of every step: step,train_loss,val_loss,lr (as tgrad's)")
    ap.add_argument("--tgrad-init", metavar="CK",
                    help="start from tgrad's initialisation and draw tgrad's batches: CK from "
                         "`tgrad train --text ... --seed S --steps 1 --lr 0 --checkpoint CK`, "
                         "with the same --seed S")
    a = ap.parse_args()
    amp = ((lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if a.precision == "bf16"
           else contextlib.nullcontext)
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    ids, n_train, vocab = load(a.text, 0.1)
    T, B = a.seq_len, a.batch
    model = LM(vocab, d_model=a.d_model, n_heads=a.heads, d_ff=a.d_ff, n_layers=a.layers,
               max_seq_len=T)
    trng = tgrad_init(model, a.tgrad_init, a.seed, a.batch) if a.tgrad_init else None
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    logf = open(a.log, "w") if a.log else None
    if logf:
        logf.write("step,train_loss,val_loss,lr\n")
    n_params = sum(p.numel() for p in model.parameters())
    print(f"reference: {len(ids)} bytes ({n_train} train), vocabulary {vocab}, "
          f"{n_params} parameters, {a.threads} threads, {a.precision}", file=sys.stderr)
    windows, stride = val_windows(len(ids), n_train, T)
    val_x = torch.stack([ids[n_train + w * stride * T:][:T] for w in range(windows)])
    val_y = torch.stack([ids[n_train + w * stride * T + 1:][:T] for w in range(windows)])
    lossf = nn.CrossEntropyLoss()
    best, t0, trained = float("inf"), time.time(), 0
    for step in range(a.steps):
        lr = lr_at(step, a.steps, a.warmup, a.lr, a.lr / 10)
        for g in opt.param_groups:
            g["lr"] = lr
        if trng:  # tgrad's corpus_train_batch: starts in [0, n_train - T - 1]
            starts = [trng.u64() % (n_train - T) for _ in range(B)]
        else:
            starts = torch.randint(0, n_train - T, (B,))
        x = torch.stack([ids[s:s + T] for s in starts])
        y = torch.stack([ids[s + 1:s + T + 1] for s in starts])
        model.train()
        with amp():
            loss = lossf(model(x).reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        trained += 1
        val = None
        if (step + 1) % a.eval_every == 0 or step + 1 == a.steps:
            model.eval()
            with torch.no_grad(), amp():
                tot = 0.0
                for k in range(0, windows, B):
                    xb, yb = val_x[k:k + B], val_y[k:k + B]
                    tot += lossf(model(xb).reshape(-1, vocab), yb.reshape(-1)).item() * xb.numel()
                val = tot / (windows * T)
            best = min(best, val)
            el = time.time() - t0
            print(f"step {step + 1}/{a.steps}  loss {loss.item():.4f}  val {val:.4f}  "
                  f"{trained * B * T / el:.0f} tok/s", file=sys.stderr)
        if logf:
            logf.write(f"{step + 1},{loss.item():.6f},{'' if val is None else f'{val:.6f}'},"
                       f"{lr:.6g}\n")
    if logf:
        logf.close()
    el = time.time() - t0
    print(f"parameters {n_params}  steps {a.steps}  wall {el:.1f} s  "
          f"{a.steps * B * T / el:.0f} tokens/s  best validation loss {best:.4f} nats/char"
          + ("  (bf16 autocast)" if a.precision == "bf16" else ""))


if __name__ == "__main__":
    main()
