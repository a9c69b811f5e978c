#!/usr/bin/python3
"""Generate PyTorch reference fixtures for tgrad's attention / FFN / encoder tests.

Usage:
    /usr/bin/python3 tools/gen_fixtures.py [--out tests/fixtures]          # (re)write all files
    /usr/bin/python3 tools/gen_fixtures.py [--out tests/fixtures] --check  # verify existing files
    /usr/bin/python3 tools/gen_fixtures.py --list                          # print the cases

Without a subset of cases it also runs the `tgrad export` round trip (tools/check_export.py):
the committed exports of tiny tgrad checkpoints are loaded into tools/train_reference.py's LM
with load_state_dict(strict=True) and their float64 logits on fixed ids are written (or, with
--check, verified) as tests/fixtures/export_*_logits.safetensors, which tests/test_export.c
compares tgrad's logits against. tgrad itself is not needed here.

Needs only PyTorch (tested with Debian's python3-torch 1.13) and NumPy; the safetensors
writer and reader are implemented here (there is no `safetensors` package dependency).
Everything is float64 with fixed per-case seeds, single-threaded, so every run writes the
same bytes.

File format (one file per case, ``<out>/<case>.safetensors``; standard safetensors):
    bytes 0..7   : N, little-endian u64, length of the JSON header
    bytes 8..8+N : UTF-8 JSON, right-padded with spaces so that N % 8 == 0:
                   {"<name>": {"dtype": "F64", "shape": [...], "data_offsets": [begin, end]},
                    ...,
                    "__metadata__": {"<key>": "<string value>", ...}}
    rest         : data section; tensors stored contiguously in header order, each
                   little-endian row-major float64; offsets are relative to the start of the
                   data section and cover it exactly.
Every tensor is F64. Boolean masks are stored as 0.0 / 1.0 (1.0 = true = blocked / padding);
metadata ``mask_kind`` = "block" says so ("additive" = float mask added to the scores).

Tensor names:
    inputs      x (self-attention MHA, ffn, encoder) or q, k, v (sdpa, cross-attention MHA)
    masks       attn_mask, key_padding_mask (B, T_k)
    parameters  exact PyTorch state_dict names (in_proj_weight, out_proj.weight, linear1.weight,
                self_attn.in_proj_weight, norm1.weight, ...)
    grad_out    upstream gradient, same shape as out
    expected    out; attn_weights (SDPA only: the softmax weights, shape (..., T_q, T_k))
    gradients   grad.<name> for every input and parameter, from out.backward(grad_out)
                (masks get no gradient). For self-attention grad.x is the total gradient.

Metadata (all strings, every key present in every file; "n/a" when not applicable):
    module        sdpa | mha | ffn | encoder
    heads         number of heads (mha, encoder)
    causal        "1" if positions j > i are blocked (the stored attn_mask, if any, is then
                  exactly that causal mask, so applying both is idempotent)
    mask_kind     block | additive | none (kind of attn_mask / key_padding_mask present)
    norm_first    "0" / "1" (encoder)
    activation    relu | gelu (ffn, encoder)
    eps           layer-norm eps, Python repr (encoder)
    self_attention"1" if MHA/encoder used x as query, key and value
    scale         SDPA only: the score scale used, Python repr
    description   one line

SDPA is computed manually (torch 1.13 has no F.scaled_dot_product_attention):
    w = softmax(q @ k^T * scale + mask); out = w @ v, bool masks -> -inf where true,
    causal: j > i blocked (top-left aligned, only used with T_q == T_k).
MHA uses nn.MultiheadAttention(batch_first=True, dropout=0) with need_weights=False; the
encoder uses nn.TransformerEncoderLayer(dropout=0, batch_first=True). Modules run in
training mode so the inference-only fast path is never taken. All parameters (biases and
layer-norm affine parameters included) are overwritten with seeded random values.
A 3-D MHA attn_mask is stored as (B, T_q, T_k) and broadcast over heads; PyTorch receives
mask.repeat_interleave(H, dim=0), i.e. its (B*H, T_q, T_k) layout.

--check re-reads every file with the reader below, validates the layout, recomputes the
forward outputs and gradients with independent hand-written torch implementations (not
nn.MultiheadAttention / nn.TransformerEncoderLayer) and checks that regenerating gives
byte-identical files.
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)

NA = "n/a"

# --------------------------------------------------------------------------------------------
# safetensors writer / reader
# --------------------------------------------------------------------------------------------


def _to_f64(t):
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu().to(torch.float64).numpy()
    a = np.ascontiguousarray(np.asarray(t, dtype="<f8"))
    return a


def encode_safetensors(tensors, metadata):
    """tensors: list of (name, array-like); metadata: dict str->str. Returns bytes."""
    header = {}
    blobs = []
    off = 0
    names = set()
    for name, t in tensors:
        if name in names or name == "__metadata__":
            raise ValueError(f"duplicate/reserved tensor name {name}")
        names.add(name)
        a = _to_f64(t)
        b = a.tobytes(order="C")
        header[name] = {"dtype": "F64", "shape": [int(s) for s in a.shape],
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    for k, v in metadata.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ValueError(f"metadata must be str->str: {k!r}: {v!r}")
    header["__metadata__"] = dict(metadata)
    hb = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    return struct.pack("<Q", len(hb)) + hb + b"".join(blobs)


def decode_safetensors(buf):
    """Returns (dict name -> np.ndarray float64 in header order, metadata dict)."""
    if len(buf) < 8:
        raise ValueError("file too short")
    (n,) = struct.unpack("<Q", buf[:8])
    if n % 8 != 0 or 8 + n > len(buf):
        raise ValueError(f"bad header length {n}")
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    data = buf[8 + n:]
    meta = header.pop("__metadata__", {})
    out = {}
    expect = 0
    for name, info in header.items():
        if info["dtype"] != "F64":
            raise ValueError(f"{name}: dtype {info['dtype']}")
        b, e = info["data_offsets"]
        shape = tuple(info["shape"])
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if b != expect or e - b != 8 * count:
            raise ValueError(f"{name}: bad data_offsets {b},{e} for shape {shape}")
        out[name] = np.frombuffer(data[b:e], dtype="<f8").reshape(shape).copy()
        expect = e
    if expect != len(data):
        raise ValueError(f"data section is {len(data)} bytes, tensors cover {expect}")
    return out, meta


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


class Rng:
    """Seeded CPU generator; randn/rand are stable across runs."""

    def __init__(self, seed):
        self.g = torch.Generator().manual_seed(seed)

    def randn(self, *shape):
        return torch.randn(*shape, generator=self.g, dtype=torch.float64)

    def rand(self, *shape):
        return torch.rand(*shape, generator=self.g, dtype=torch.float64)

    def randint(self, lo, hi):
        return int(torch.randint(lo, hi, (1,), generator=self.g).item())


def causal_mask(tq, tk):
    """bool, True where j > i (blocked)."""
    i = torch.arange(tq).unsqueeze(1)
    j = torch.arange(tk).unsqueeze(0)
    return j > i


def random_block_mask(rng, shape, p=0.35):
    """bool mask (True = blocked) with at least one False in every last-axis row."""
    m = rng.rand(*shape) < p
    rows = m.reshape(-1, shape[-1])
    for r in range(rows.shape[0]):
        if bool(rows[r].all()):
            rows[r, rng.randint(0, shape[-1])] = False
    m = rows.reshape(shape)
    assert not bool(m.all(dim=-1).any())
    return m


def random_padding_mask(rng, b, t, keep_first=False, p=0.35):
    """(B, T) bool, True = padding; never a fully padded row; optionally key 0 kept."""
    m = random_block_mask(rng, (b, t), p)
    if keep_first:
        m[:, 0] = False
    # make sure padding is actually exercised
    if not bool(m.any()):
        m[0, t - 1] = True
    return m


def bool_to_additive(m):
    return torch.zeros(m.shape, dtype=torch.float64).masked_fill(m, float("-inf"))


def set_params(module, rng, bias_scale=0.1, ln=False):
    """Overwrite every parameter with seeded random values (weights ~ N(0, 1/fan_in))."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            is_norm = name.startswith("norm") or ".norm" in name
            if is_norm and leaf == "weight":
                p.copy_(1.0 + 0.1 * rng.randn(*p.shape))
            elif is_norm and leaf == "bias":
                p.copy_(0.1 * rng.randn(*p.shape))
            elif "bias" in leaf:
                p.copy_(bias_scale * rng.randn(*p.shape))
            else:
                fan_in = p.shape[-1]
                p.copy_(rng.randn(*p.shape) / math.sqrt(fan_in))


def meta(module, description, heads=NA, causal=False, mask_kind="none", norm_first=NA,
         activation=NA, eps=NA, self_attention=NA, scale=None):
    m = {
        "module": module,
        "heads": str(heads),
        "causal": "1" if causal else "0",
        "mask_kind": mask_kind,
        "norm_first": norm_first,
        "activation": activation,
        "eps": eps,
        "self_attention": self_attention,
    }
    if scale is not None:
        m["scale"] = repr(float(scale))
    m["description"] = description
    return m


def check_relu_margin(pre, what):
    """Keep ReLU inputs away from 0 so 1-ulp differences cannot flip the derivative."""
    mn = float(pre.detach().abs().min())
    if mn < 1e-6:
        raise RuntimeError(f"{what}: ReLU input {mn:g} too close to 0; change the seed")


# --------------------------------------------------------------------------------------------
# SDPA
# --------------------------------------------------------------------------------------------


def sdpa_ref(q, k, v, scale, mask=None, mask_kind="none", causal=False):
    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    if mask is not None:
        if mask_kind == "block":
            s = s + bool_to_additive(mask.bool() if mask.dtype == torch.bool else mask != 0)
        else:
            s = s + mask
    if causal:
        s = s + bool_to_additive(causal_mask(q.shape[-2], k.shape[-2]))
    w = torch.softmax(s, dim=-1)
    return torch.matmul(w, v), w


def gen_sdpa(seed, qshape, kshape, vshape, description, mask_kind="none", mask_shape=None,
             causal=False, scale=None):
    rng = Rng(seed)
    q, k, v = rng.randn(*qshape), rng.randn(*kshape), rng.randn(*vshape)
    if scale is None:
        scale = 1.0 / math.sqrt(qshape[-1])
    mask = None
    if mask_kind == "block":
        mask = causal_mask(qshape[-2], kshape[-2]) if causal else random_block_mask(rng, mask_shape)
    elif mask_kind == "additive":
        mask = rng.randn(*mask_shape)
    inputs = {"q": q.clone().requires_grad_(), "k": k.clone().requires_grad_(),
              "v": v.clone().requires_grad_()}
    out, w = sdpa_ref(inputs["q"], inputs["k"], inputs["v"], scale, mask, mask_kind, causal)
    grad_out = rng.randn(*out.shape)
    out.backward(grad_out)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    tensors = [("q", q), ("k", k), ("v", v)]
    if mask is not None:
        tensors.append(("attn_mask", mask.to(torch.float64)))
    tensors += [("grad_out", grad_out), ("out", out), ("attn_weights", w)]
    tensors += [(f"grad.{n}", inputs[n].grad) for n in ("q", "k", "v")]
    return tensors, meta("sdpa", description, causal=causal, mask_kind=mask_kind, scale=scale)


# --------------------------------------------------------------------------------------------
# MHA
# --------------------------------------------------------------------------------------------


def gen_mha(seed, B, Tq, D, H, description, Tk=None, self_attention=True, attn_mask=None,
            key_padding=False, causal=False):
    """attn_mask: None | 'block2d' | 'block3d' | 'additive' ('block2d' + causal = causal mask)."""
    rng = Rng(seed)
    torch.manual_seed(seed)
    mha = nn.MultiheadAttention(D, H, dropout=0.0, batch_first=True)
    set_params(mha, rng)
    mha.train()
    Tk = Tq if self_attention else Tk
    if self_attention:
        x = rng.randn(B, Tq, D)
        inputs = {"x": x.clone().requires_grad_()}
        qi = ki = vi = inputs["x"]
        in_list = [("x", x)]
    else:
        q, k, v = rng.randn(B, Tq, D), rng.randn(B, Tk, D), rng.randn(B, Tk, D)
        inputs = {n: t.clone().requires_grad_() for n, t in (("q", q), ("k", k), ("v", v))}
        qi, ki, vi = inputs["q"], inputs["k"], inputs["v"]
        in_list = [("q", q), ("k", k), ("v", v)]

    mask_kind = "none"
    am_store = am_torch = None
    if attn_mask == "block2d":
        mask_kind = "block"
        am_store = causal_mask(Tq, Tk) if causal else random_block_mask(rng, (Tq, Tk))
        am_torch = am_store
    elif attn_mask == "block3d":
        mask_kind = "block"
        am_store = random_block_mask(rng, (B, Tq, Tk))
        am_torch = am_store.repeat_interleave(H, dim=0)
    elif attn_mask == "additive":
        mask_kind = "additive"
        am_store = rng.randn(Tq, Tk)
        am_torch = am_store
    kpm = None
    if key_padding:
        if mask_kind == "none":
            mask_kind = "block"
        assert mask_kind == "block"
        kpm = random_padding_mask(rng, B, Tk, keep_first=causal)
    # no fully masked row anywhere
    full = torch.zeros(B, Tq, Tk, dtype=torch.bool)
    if am_store is not None and mask_kind == "block":
        full = full | am_store
    if kpm is not None:
        full = full | kpm[:, None, :]
    assert not bool(full.all(dim=-1).any()), "fully masked row"

    out, _ = mha(qi, ki, vi, key_padding_mask=kpm, need_weights=False, attn_mask=am_torch)
    grad_out = rng.randn(*out.shape)
    out.backward(grad_out)
    assert torch.isfinite(out).all()

    sd = list(mha.state_dict().items())
    params = dict(mha.named_parameters())
    tensors = list(in_list)
    if am_store is not None:
        tensors.append(("attn_mask", am_store.to(torch.float64)))
    if kpm is not None:
        tensors.append(("key_padding_mask", kpm.to(torch.float64)))
    tensors += [(n, t) for n, t in sd]
    tensors += [("grad_out", grad_out), ("out", out)]
    tensors += [(f"grad.{n}", inputs[n].grad) for n, _ in in_list]
    tensors += [(f"grad.{n}", params[n].grad) for n, _ in sd]
    return tensors, meta("mha", description, heads=H, causal=causal, mask_kind=mask_kind,
                         self_attention="1" if self_attention else "0")


# --------------------------------------------------------------------------------------------
# FFN
# --------------------------------------------------------------------------------------------


class FFN(nn.Module):
    def __init__(self, d, f, activation):
        super().__init__()
        self.linear1 = nn.Linear(d, f)
        self.linear2 = nn.Linear(f, d)
        self.activation = activation

    def forward(self, x):
        h = self.linear1(x)
        if self.activation == "relu":
            check_relu_margin(h, "ffn")
            h = F.relu(h)
        else:
            h = F.gelu(h)  # exact erf GELU (approximate='none')
        return self.linear2(h)


def gen_ffn(seed, B, T, D, Fdim, activation, description):
    rng = Rng(seed)
    torch.manual_seed(seed)
    ffn = FFN(D, Fdim, activation)
    set_params(ffn, rng)
    x = rng.randn(B, T, D)
    xi = x.clone().requires_grad_()
    out = ffn(xi)
    grad_out = rng.randn(*out.shape)
    out.backward(grad_out)
    sd = list(ffn.state_dict().items())
    params = dict(ffn.named_parameters())
    tensors = [("x", x)] + [(n, t) for n, t in sd]
    tensors += [("grad_out", grad_out), ("out", out), ("grad.x", xi.grad)]
    tensors += [(f"grad.{n}", params[n].grad) for n, _ in sd]
    return tensors, meta("ffn", description, activation=activation)


# --------------------------------------------------------------------------------------------
# Encoder layer
# --------------------------------------------------------------------------------------------


def gen_encoder(seed, B, T, D, H, Fdim, description, norm_first=False, activation="relu",
                eps=1e-5, key_padding=False, causal=False):
    rng = Rng(seed)
    torch.manual_seed(seed)
    enc = nn.TransformerEncoderLayer(D, H, dim_feedforward=Fdim, dropout=0.0,
                                     activation=activation, layer_norm_eps=eps,
                                     batch_first=True, norm_first=norm_first)
    set_params(enc, rng)
    enc.train()
    x = rng.randn(B, T, D)
    xi = x.clone().requires_grad_()
    src_mask = causal_mask(T, T) if causal else None
    kpm = random_padding_mask(rng, B, T, keep_first=causal) if key_padding else None
    mask_kind = "block" if (src_mask is not None or kpm is not None) else "none"

    if activation == "relu":  # probe the ReLU inputs via a hook on linear1
        hook = enc.linear1.register_forward_hook(
            lambda mod, inp, outp: check_relu_margin(outp, "encoder"))
    out = enc(xi, src_mask=src_mask, src_key_padding_mask=kpm)
    if activation == "relu":
        hook.remove()
    grad_out = rng.randn(*out.shape)
    out.backward(grad_out)
    assert torch.isfinite(out).all()

    sd = list(enc.state_dict().items())
    params = dict(enc.named_parameters())
    tensors = [("x", x)]
    if src_mask is not None:
        tensors.append(("attn_mask", src_mask.to(torch.float64)))
    if kpm is not None:
        tensors.append(("key_padding_mask", kpm.to(torch.float64)))
    tensors += [(n, t) for n, t in sd]
    tensors += [("grad_out", grad_out), ("out", out), ("grad.x", xi.grad)]
    tensors += [(f"grad.{n}", params[n].grad) for n, _ in sd]
    return tensors, meta("encoder", description, heads=H, causal=causal, mask_kind=mask_kind,
                         norm_first="1" if norm_first else "0", activation=activation,
                         eps=repr(float(eps)), self_attention="1")


# --------------------------------------------------------------------------------------------
# Decoder layer, stacks and nn.Transformer
# --------------------------------------------------------------------------------------------


def relu_hooks(model, activation, what):
    """Probe every ReLU input (the linear1 outputs) for a safe margin from 0."""
    if activation != "relu":
        return []
    return [m.register_forward_hook(lambda mod, inp, outp: check_relu_margin(outp, what))
            for n, m in model.named_modules() if n.endswith("linear1")]


def finish(model, inputs, out, grad_out, tensors_in, masks, md):
    """Common tail: backward, then inputs, masks, state_dict, grad_out, out, gradients."""
    out.backward(grad_out)
    assert torch.isfinite(out).all()
    sd = list(model.state_dict().items())
    params = dict(model.named_parameters())
    tensors = list(tensors_in)
    tensors += [(n, m.to(torch.float64)) for n, m in masks if m is not None]
    tensors += [(n, t) for n, t in sd]
    tensors += [("grad_out", grad_out), ("out", out)]
    tensors += [(f"grad.{n}", inputs[n].grad) for n, _ in tensors_in]
    tensors += [(f"grad.{n}", params[n].grad) for n, _ in sd]
    return tensors, md


def meta_v2(module, description, H, norm_first, activation, eps, causal=False, **extra):
    """meta() plus the decoder keys: layers, tgt/memory mask kinds, masked_row."""
    md = meta(module, description, heads=H, causal=causal, mask_kind="block",
              norm_first="1" if norm_first else "0", activation=activation,
              eps=repr(float(eps)), self_attention="1")
    desc = md.pop("description")
    for k in ("layers", "encoder_layers", "decoder_layers", "final_norm", "tgt_mask_kind",
              "memory_mask_kind", "masked_row"):
        md[k] = str(extra.get(k, NA))
    md["description"] = desc
    return md


def gen_decoder(seed, B, T, S, D, H, Fdim, description, norm_first=False, activation="relu",
                eps=1e-5, causal=False, tgt_mask=None, memory_mask=None, tgt_kpm=False,
                mem_kpm=False, masked_row=None, layers=None):
    """nn.TransformerDecoderLayer (layers None) or nn.TransformerDecoder with a final norm.
    tgt_mask: None | 'additive' | 'block' (T, T); memory_mask: None | 'block' (T, S).
    masked_row = t: memory_mask row t fully blocked (PyTorch gives NaN in out[:, t]); the
    stored out is PyTorch's with the cross-attention of that row replaced by its
    out_proj.bias (tgrad's convention, via a forward hook), and the stored gradients are
    PyTorch's with that row unblocked and grad_out[:, t] = 0 (the row then contributes
    nothing, in either convention)."""
    rng = Rng(seed)
    torch.manual_seed(seed)
    layer = nn.TransformerDecoderLayer(D, H, dim_feedforward=Fdim, dropout=0.0,
                                       activation=activation, layer_norm_eps=eps,
                                       batch_first=True, norm_first=norm_first)
    if layers is None:
        model = layer
    else:
        model = nn.TransformerDecoder(layer, layers, norm=nn.LayerNorm(D, eps=eps))
    set_params(model, rng)
    model.train()
    x, mem = rng.randn(B, T, D), rng.randn(B, S, D)
    inputs = {"x": x.clone().requires_grad_(), "memory": mem.clone().requires_grad_()}
    tm = tm_torch = None
    if tgt_mask == "additive":
        tm = tm_torch = rng.randn(T, T)
    elif tgt_mask == "block":
        tm = tm_torch = random_block_mask(rng, (T, T))
    if causal:
        assert tm is None
        tm_torch = causal_mask(T, T)
    mm = random_block_mask(rng, (T, S)) if memory_mask == "block" else None
    tk = random_padding_mask(rng, B, T, keep_first=True) if tgt_kpm else None
    mk = random_padding_mask(rng, B, S) if mem_kpm else None
    grad_out = rng.randn(B, T, D)
    hooks = relu_hooks(model, activation, "decoder")

    def run(mm_used, hook=False):
        ins = {n: t.detach().clone().requires_grad_() for n, t in (("x", x), ("memory", mem))}
        hs = []
        if hook:
            for n, m in model.named_modules():
                if n.endswith("multihead_attn"):
                    bias = m.out_proj.bias
                    hs.append(m.register_forward_hook(
                        lambda mod, inp, outp, b=bias: (torch.where(torch.isnan(outp[0]),
                                                                    b.expand_as(outp[0]),
                                                                    outp[0]), outp[1])))
        out = model(ins["x"], ins["memory"], tgt_mask=tm_torch, memory_mask=mm_used,
                    tgt_key_padding_mask=tk, memory_key_padding_mask=mk)
        for h in hs:
            h.remove()
        return ins, out

    if masked_row is not None:
        assert mm is not None and layers is None
        mm[masked_row, :] = True
        _, out_nan = run(mm)  # PyTorch itself: NaN exactly in row masked_row
        nan_rows = torch.isnan(out_nan).any(-1)
        expect = torch.zeros(B, T, dtype=torch.bool)
        expect[:, masked_row] = True
        assert bool((nan_rows == expect).all()), "NaN rows"
        _, out = run(mm, hook=True)
        assert torch.isfinite(out).all()
        ok = ~expect
        assert float((out[ok] - out_nan[ok]).abs().max()) == 0.0
        grad_out[:, masked_row, :] = 0.0
        mm_open = mm.clone()
        mm_open[masked_row, :] = False
        for p in model.parameters():
            p.grad = None
        for p in model.parameters():
            p.grad = None
        inputs, out_g = run(mm_open)  # gradients: the row unblocked, grad_out[:, t] = 0
        out_g.backward(grad_out)
        out = out.detach()
        for h in hooks:
            h.remove()
        sd = list(model.state_dict().items())
        params = dict(model.named_parameters())
        tensors = [("x", x), ("memory", mem)]
        tensors += [(n, m.to(torch.float64)) for n, m in
                    (("memory_mask", mm), ("tgt_key_padding_mask", tk),
                     ("memory_key_padding_mask", mk)) if m is not None]
        tensors += [(n, t) for n, t in sd]
        tensors += [("grad_out", grad_out), ("out", out)]
        tensors += [(f"grad.{n}", inputs[n].grad) for n in ("x", "memory")]
        tensors += [(f"grad.{n}", params[n].grad) for n, _ in sd]
        md = meta_v2("decoder", description, H, norm_first, activation, eps, causal,
                     memory_mask_kind="block", masked_row=masked_row)
        return tensors, md
    inputs, out = run(mm)
    for h in hooks:
        h.remove()
    md = meta_v2("decoder" if layers is None else "decoder_stack", description, H, norm_first,
                 activation, eps, causal, layers=layers if layers else NA,
                 final_norm="1" if layers else NA,
                 tgt_mask_kind=("additive" if tgt_mask == "additive" else "block")
                 if tm is not None else "none",
                 memory_mask_kind="block" if mm is not None else "none")
    return finish(model, inputs, out, grad_out, [("x", x), ("memory", mem)],
                  [("tgt_mask", tm), ("memory_mask", mm), ("tgt_key_padding_mask", tk),
                   ("memory_key_padding_mask", mk)], md)


def gen_encoder_stack(seed, B, T, D, H, Fdim, layers, description, norm_first=False,
                      activation="relu", eps=1e-5, key_padding=False, causal=False):
    """nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(D, eps))."""
    rng = Rng(seed)
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(D, H, dim_feedforward=Fdim, dropout=0.0,
                                       activation=activation, layer_norm_eps=eps,
                                       batch_first=True, norm_first=norm_first)
    model = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(D, eps=eps),
                                  enable_nested_tensor=False)
    set_params(model, rng)
    model.train()
    x = rng.randn(B, T, D)
    inputs = {"x": x.clone().requires_grad_()}
    kpm = random_padding_mask(rng, B, T, keep_first=causal) if key_padding else None
    hooks = relu_hooks(model, activation, "encoder stack")
    out = model(inputs["x"], mask=causal_mask(T, T) if causal else None,
                src_key_padding_mask=kpm)
    for h in hooks:
        h.remove()
    grad_out = rng.randn(*out.shape)
    md = meta_v2("encoder_stack", description, H, norm_first, activation, eps, causal,
                 layers=layers, final_norm="1")
    return finish(model, inputs, out, grad_out, [("x", x)], [("key_padding_mask", kpm)], md)


def gen_transformer(seed, B, S, T, D, H, Fdim, n_enc, n_dec, description, norm_first=False,
                    activation="relu", eps=1e-5, causal=True, src_kpm=True, tgt_kpm=True,
                    mem_kpm=True):
    """nn.Transformer(batch_first=True); memory_key_padding_mask = src_key_padding_mask."""
    rng = Rng(seed)
    torch.manual_seed(seed)
    model = nn.Transformer(D, H, n_enc, n_dec, dim_feedforward=Fdim, dropout=0.0,
                           activation=activation, layer_norm_eps=eps, batch_first=True,
                           norm_first=norm_first)
    set_params(model, rng)
    model.train()
    src, tgt = rng.randn(B, S, D), rng.randn(B, T, D)
    inputs = {"src": src.clone().requires_grad_(), "tgt": tgt.clone().requires_grad_()}
    sk = random_padding_mask(rng, B, S) if src_kpm else None
    tk = random_padding_mask(rng, B, T, keep_first=True) if tgt_kpm else None
    mk = sk if mem_kpm else None
    hooks = relu_hooks(model, activation, "transformer")
    out = model(inputs["src"], inputs["tgt"], tgt_mask=causal_mask(T, T) if causal else None,
                src_key_padding_mask=sk, tgt_key_padding_mask=tk,
                memory_key_padding_mask=mk)
    for h in hooks:
        h.remove()
    grad_out = rng.randn(*out.shape)
    md = meta_v2("transformer", description, H, norm_first, activation, eps, causal,
                 encoder_layers=n_enc, decoder_layers=n_dec, final_norm="1")
    return finish(model, inputs, out, grad_out, [("src", src), ("tgt", tgt)],
                  [("src_key_padding_mask", sk), ("tgt_key_padding_mask", tk),
                   ("memory_key_padding_mask", mk)], md)


# --------------------------------------------------------------------------------------------
# Case table
# --------------------------------------------------------------------------------------------

CASES = {
    # ---- SDPA ----
    "sdpa_nomask": lambda: gen_sdpa(
        101, (2, 3, 6), (2, 5, 6), (2, 5, 4),
        "SDPA 3-D (B,T,d) no mask, T_q=3 != T_k=5, d_k=6 != d_v=4, scale 1/sqrt(d_k)"),
    "sdpa_nomask_4d": lambda: gen_sdpa(
        102, (2, 3, 4, 4), (2, 3, 5, 4), (2, 3, 5, 3),
        "SDPA 4-D (B,H,T,d) no mask, T_q=4, T_k=5, d_k=4, d_v=3"),
    "sdpa_2d": lambda: gen_sdpa(
        103, (4, 6), (5, 6), (5, 3),
        "SDPA without batch dims: q (T_q,d_k), k (T_k,d_k), v (T_k,d_v)"),
    "sdpa_bool_mask": lambda: gen_sdpa(
        104, (2, 4, 6), (2, 5, 6), (2, 5, 6),
        "SDPA 3-D with a bool (T_q,T_k) mask broadcast over batch, 1 = blocked, no row "
        "fully blocked", mask_kind="block", mask_shape=(4, 5)),
    "sdpa_additive_mask": lambda: gen_sdpa(
        105, (2, 2, 4, 4), (2, 2, 5, 4), (2, 2, 5, 4),
        "SDPA 4-D with a finite random float additive mask of shape (B,1,T_q,T_k) "
        "(broadcast over heads)", mask_kind="additive", mask_shape=(2, 1, 4, 5)),
    "sdpa_causal": lambda: gen_sdpa(
        106, (2, 5, 4), (2, 5, 4), (2, 5, 4),
        "SDPA 3-D causal (j > i blocked), T_q = T_k = 5; attn_mask holds the same causal "
        "mask", mask_kind="block", causal=True),
    "sdpa_custom_scale": lambda: gen_sdpa(
        107, (2, 3, 4), (2, 4, 4), (2, 4, 5),
        "SDPA 3-D no mask with a custom scale 0.3 instead of 1/sqrt(d_k)", scale=0.3),
    # ---- MHA ----
    "mha_self": lambda: gen_mha(
        201, 2, 4, 8, 2, "nn.MultiheadAttention self-attention (x as q,k,v), no mask"),
    "mha_cross": lambda: gen_mha(
        202, 2, 3, 12, 3,
        "nn.MultiheadAttention cross-attention, q (B,3,D), distinct k and v (B,5,D), 3 heads",
        Tk=5, self_attention=False),
    "mha_causal": lambda: gen_mha(
        203, 2, 5, 8, 2, "MHA self-attention with bool causal attn_mask (T,T)",
        attn_mask="block2d", causal=True),
    "mha_key_padding": lambda: gen_mha(
        204, 3, 5, 8, 4, "MHA self-attention with bool key_padding_mask (B,T), 1 = padding",
        key_padding=True),
    "mha_attn_mask_3d": lambda: gen_mha(
        205, 2, 4, 8, 2,
        "MHA self-attention with bool per-batch attn_mask (B,T_q,T_k) broadcast over heads "
        "(PyTorch got repeat_interleave(H, 0))", attn_mask="block3d"),
    "mha_combined": lambda: gen_mha(
        206, 3, 5, 12, 3, "MHA self-attention with bool causal attn_mask and bool "
        "key_padding_mask (key 0 never padded)", attn_mask="block2d", key_padding=True,
        causal=True),
    "mha_additive_mask": lambda: gen_mha(
        207, 2, 4, 8, 2, "MHA self-attention with a finite random float (T,T) attn_mask",
        attn_mask="additive"),
    # ---- FFN ----
    "ffn_relu": lambda: gen_ffn(301, 2, 3, 8, 16, "relu",
                                "FFN linear2(relu(linear1(x))), D=8, F=16"),
    "ffn_gelu": lambda: gen_ffn(302, 2, 4, 8, 24, "gelu",
                                "FFN linear2(gelu(linear1(x))) with exact erf GELU, D=8, F=24"),
    # ---- Encoder layer ----
    "enc_post_relu": lambda: gen_encoder(
        401, 2, 4, 8, 2, 16, "TransformerEncoderLayer post-norm, relu, eps 1e-5"),
    "enc_pre_relu": lambda: gen_encoder(
        402, 2, 4, 8, 2, 16, "TransformerEncoderLayer pre-norm (norm_first), relu, eps 1e-5",
        norm_first=True),
    "enc_post_gelu": lambda: gen_encoder(
        403, 2, 3, 12, 3, 24, "TransformerEncoderLayer post-norm, gelu, D=12, 3 heads",
        activation="gelu"),
    "enc_pre_gelu_eps": lambda: gen_encoder(
        404, 2, 4, 8, 4, 16, "TransformerEncoderLayer pre-norm, gelu, layer_norm_eps 1e-6",
        norm_first=True, activation="gelu", eps=1e-6),
    "enc_key_padding": lambda: gen_encoder(
        405, 3, 5, 8, 2, 16, "TransformerEncoderLayer post-norm, relu, bool "
        "src_key_padding_mask (B,T)", key_padding=True),
    "enc_causal": lambda: gen_encoder(
        406, 2, 5, 8, 2, 16, "TransformerEncoderLayer pre-norm, relu, bool causal src_mask "
        "(T,T)", norm_first=True, causal=True),
    # ---- Decoder layer, stacks, nn.Transformer ----
    "dec_post_relu": lambda: gen_decoder(
        501, 2, 4, 5, 8, 2, 16, "TransformerDecoderLayer post-norm, relu, T 4, S 5, no masks"),
    "dec_pre_gelu_eps": lambda: gen_decoder(
        502, 2, 3, 4, 12, 3, 24, "TransformerDecoderLayer pre-norm, gelu, eps 1e-6, D 12, "
        "3 heads", norm_first=True, activation="gelu", eps=1e-6),
    "dec_causal_tgt_kpm": lambda: gen_decoder(
        503, 3, 5, 4, 8, 2, 16, "TransformerDecoderLayer post-norm, causal tgt_mask and bool "
        "tgt_key_padding_mask (B, T) (key 0 never padded)", causal=True, tgt_kpm=True),
    "dec_memory_kpm": lambda: gen_decoder(
        504, 3, 4, 6, 8, 4, 16, "TransformerDecoderLayer pre-norm, relu, bool "
        "memory_key_padding_mask (B, S)", norm_first=True, mem_kpm=True),
    "dec_masks": lambda: gen_decoder(
        505, 2, 4, 5, 8, 2, 16, "TransformerDecoderLayer post-norm, gelu, float additive "
        "tgt_mask (T, T) and bool memory_mask (T, S)", activation="gelu",
        tgt_mask="additive", memory_mask="block"),
    "dec_masked_memory_row": lambda: gen_decoder(
        506, 2, 4, 5, 8, 2, 16, "TransformerDecoderLayer pre-norm, causal, bool memory_mask "
        "(T, S) with row 2 fully blocked (PyTorch: NaN in out[:, 2]; out here: that row's "
        "cross-attention = out_proj.bias; gradients with grad_out[:, 2] = 0)",
        norm_first=True, causal=True, memory_mask="block", masked_row=2),
    "dec_stack2": lambda: gen_decoder(
        507, 2, 4, 5, 8, 2, 16, "TransformerDecoder, 2 post-norm relu layers + final norm, "
        "causal, memory_key_padding_mask", causal=True, mem_kpm=True, layers=2),
    "enc_stack2_norm": lambda: gen_encoder_stack(
        508, 2, 5, 8, 2, 16, 2, "TransformerEncoder, 2 post-norm relu layers + final norm, "
        "src_key_padding_mask", key_padding=True),
    "transformer_2_2": lambda: gen_transformer(
        509, 2, 5, 4, 8, 2, 16, 2, 2, "nn.Transformer 2+2 layers post-norm relu, causal tgt, "
        "src/tgt/memory key padding (memory = src's)"),
    "transformer_pre_gelu": lambda: gen_transformer(
        510, 3, 4, 5, 8, 2, 12, 2, 2, "nn.Transformer 2+2 layers pre-norm gelu eps 1e-6, "
        "causal tgt, tgt key padding only", norm_first=True, activation="gelu", eps=1e-6,
        src_kpm=False, mem_kpm=False),
}


def build(case):
    tensors, md = CASES[case]()
    return encode_safetensors(tensors, md)


# --------------------------------------------------------------------------------------------
# --check: independent re-implementation from the stored tensors
# --------------------------------------------------------------------------------------------


def _t(a, grad=False):
    t = torch.from_numpy(np.array(a, dtype=np.float64))
    return t.requires_grad_() if grad else t


def _mask_add(m, kind):
    """stored mask -> additive float."""
    return bool_to_additive(m != 0) if kind == "block" else m


def ref_mha(x_q, x_k, x_v, p, pre, H, attn_mask, kpm, kind):
    W, b = p[pre + "in_proj_weight"], p[pre + "in_proj_bias"]
    D = W.shape[1]
    hd = D // H
    q = x_q @ W[:D].T + b[:D]
    k = x_k @ W[D:2 * D].T + b[D:2 * D]
    v = x_v @ W[2 * D:].T + b[2 * D:]
    B, Tq, Tk = q.shape[0], q.shape[1], k.shape[1]
    split = lambda t, T: t.reshape(B, T, H, hd).transpose(1, 2)  # (B,H,T,hd)
    s = split(q, Tq) @ split(k, Tk).transpose(-2, -1) / math.sqrt(hd)
    if attn_mask is not None:
        am = _mask_add(attn_mask, kind)
        s = s + (am.unsqueeze(1) if am.dim() == 3 else am)
    if kpm is not None:
        s = s + bool_to_additive(kpm != 0)[:, None, None, :]
    w = torch.softmax(s, dim=-1)
    o = (w @ split(v, Tk)).transpose(1, 2).reshape(B, Tq, D)
    return o @ p[pre + "out_proj.weight"].T + p[pre + "out_proj.bias"]


def ref_ffn(x, p, act):
    h = x @ p["linear1.weight"].T + p["linear1.bias"]
    h = torch.relu(h) if act == "relu" else 0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0)))
    return h @ p["linear2.weight"].T + p["linear2.bias"]


def ref_ln(x, g, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * g + b


def ref_forward(T, md):
    """T: dict of torch tensors (inputs/params with requires_grad). Returns (out, weights)."""
    mod, kind = md["module"], md["mask_kind"]
    am, kpm = T.get("attn_mask"), T.get("key_padding_mask")
    if mod == "sdpa":
        s = T["q"] @ T["k"].transpose(-2, -1) * float(md["scale"])
        if am is not None:
            s = s + _mask_add(am, kind)
        if md["causal"] == "1":
            s = s + bool_to_additive(causal_mask(s.shape[-2], s.shape[-1]))
        w = torch.softmax(s, dim=-1)
        return w @ T["v"], w
    if mod == "mha":
        H = int(md["heads"])
        if md["self_attention"] == "1":
            xq = xk = xv = T["x"]
        else:
            xq, xk, xv = T["q"], T["k"], T["v"]
        return ref_mha(xq, xk, xv, T, "", H, am, kpm, kind), None
    if mod == "ffn":
        return ref_ffn(T["x"], T, md["activation"]), None
    if mod == "encoder":
        H, eps, act = int(md["heads"]), float(md["eps"]), md["activation"]
        x = T["x"]
        ln1 = lambda t: ref_ln(t, T["norm1.weight"], T["norm1.bias"], eps)
        ln2 = lambda t: ref_ln(t, T["norm2.weight"], T["norm2.bias"], eps)
        sa = lambda t: ref_mha(t, t, t, T, "self_attn.", H, am, kpm, kind)
        ff = lambda t: ref_ffn(t, T, act)
        if md["norm_first"] == "1":
            x = x + sa(ln1(x))
            x = x + ff(ln2(x))
        else:
            x = ln1(x + sa(x))
            x = ln2(x + ff(x))
        return x, None
    return ref_forward_v2(T, md), None


def ref_attn_safe(xq, xkv, p, pre, H, masks):
    """MHA with tgrad's convention for fully blocked rows (zero weights): blocked scores get
    -1e300 (exp underflows to exactly 0) and fully blocked rows are multiplied by 0.
    masks: list of (mask, kind) with mask broadcastable to (B, H, T_q, T_k)."""
    W, b = p[pre + "in_proj_weight"], p[pre + "in_proj_bias"]
    D = W.shape[1]
    hd = D // H
    q = xq @ W[:D].T + b[:D]
    k = xkv @ W[D:2 * D].T + b[D:2 * D]
    v = xkv @ W[2 * D:].T + b[2 * D:]
    B, Tq, Tk = q.shape[0], q.shape[1], k.shape[1]
    split = lambda t, T: t.reshape(B, T, H, hd).transpose(1, 2)
    s = split(q, Tq) @ split(k, Tk).transpose(-2, -1) / math.sqrt(hd)
    blocked = torch.zeros(B, 1, Tq, Tk, dtype=torch.bool)
    for m, kind in masks:
        if kind == "additive":
            s = s + m
        else:
            blocked = blocked | (m != 0)
    s = s.masked_fill(blocked, -1e300)
    w = torch.softmax(s, dim=-1) * (~blocked.all(-1, keepdim=True))
    o = (w @ split(v, Tk)).transpose(1, 2).reshape(B, Tq, D)
    return o @ p[pre + "out_proj.weight"].T + p[pre + "out_proj.bias"]


def _attn_masks(T, md, attn_key, kind_key, pad_key, tq, tk, causal):
    """The (mask, kind) list of one attention from the stored tensors (broadcast shapes)."""
    out = []
    am = T.get(attn_key)
    if am is not None:
        am = am[:, None] if am.dim() == 3 else am
        out.append((am, md.get(kind_key, "block")))
    kp = T.get(pad_key)
    if kp is not None:
        out.append((kp[:, None, None, :], "block"))
    if causal:
        out.append((causal_mask(tq, tk), "block"))
    return out


def ref_layer(T, md, pre, x, mem, enc_masks, tgt_masks, mem_masks):
    """One encoder (mem None) or decoder layer under prefix pre, tgrad's mask convention."""
    H, eps, act = int(md["heads"]), float(md["eps"]), md["activation"]
    P = {k[len(pre):]: v for k, v in T.items() if k.startswith(pre)}
    ln = lambda t, i: ref_ln(t, P[f"norm{i}.weight"], P[f"norm{i}.bias"], eps)
    blocks = [lambda t: ref_attn_safe(t, t, P, "self_attn.", H,
                                      enc_masks if mem is None else tgt_masks)]
    if mem is not None:
        blocks.append(lambda t: ref_attn_safe(t, mem, P, "multihead_attn.", H, mem_masks))
    blocks.append(lambda t: ref_ffn(t, P, act))
    for i, f in enumerate(blocks, 1):
        x = x + f(ln(x, i)) if md["norm_first"] == "1" else ln(x + f(x), i)
    return x


def ref_stack(T, md, pre, x, mem, n, masks3):
    for i in range(n):
        x = ref_layer(T, md, f"{pre}layers.{i}.", x, mem, *masks3)
    return ref_ln(x, T[pre + "norm.weight"], T[pre + "norm.bias"], float(md["eps"]))


def ref_forward_v2(T, md):
    mod = md["module"]
    causal = md["causal"] == "1"
    if mod == "encoder_stack":
        x = T["x"]
        em = _attn_masks(T, md, "attn_mask", "mask_kind", "key_padding_mask", x.shape[1],
                         x.shape[1], causal)
        return ref_stack(T, md, "", x, None, int(md["layers"]), (em, None, None))
    if mod in ("decoder", "decoder_stack"):
        x, mem = T["x"], T["memory"]
        tm = _attn_masks(T, md, "tgt_mask", "tgt_mask_kind", "tgt_key_padding_mask",
                         x.shape[1], x.shape[1], causal)
        mm = _attn_masks(T, md, "memory_mask", "memory_mask_kind", "memory_key_padding_mask",
                         x.shape[1], mem.shape[1], False)
        if mod == "decoder":
            return ref_layer(T, md, "", x, mem, None, tm, mm)
        return ref_stack(T, md, "", x, mem, int(md["layers"]), (None, tm, mm))
    if mod == "transformer":
        src, tgt = T["src"], T["tgt"]
        sm = _attn_masks(T, md, "-", "-", "src_key_padding_mask", src.shape[1], src.shape[1],
                         False)
        tm = _attn_masks(T, md, "-", "-", "tgt_key_padding_mask", tgt.shape[1], tgt.shape[1],
                         causal)
        mm = _attn_masks(T, md, "-", "-", "memory_key_padding_mask", tgt.shape[1],
                         src.shape[1], False)
        mem = ref_stack(T, md, "encoder.", src, None, int(md["encoder_layers"]),
                        (sm, None, None))
        return ref_stack(T, md, "decoder.", tgt, mem, int(md["decoder_layers"]),
                         (None, tm, mm))
    raise ValueError(f"unknown module {mod}")


def rel_err(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return float("inf")
    return float(np.max(np.abs(a - b)) / (1.0 + np.max(np.abs(b)))) if a.size else 0.0


def check_file(path, case, tol=1e-12):
    with open(path, "rb") as f:
        buf = f.read()
    arrays, md = decode_safetensors(buf)
    problems = []
    for key in ("module", "heads", "causal", "mask_kind", "norm_first", "activation", "eps",
                "self_attention", "description"):
        if key not in md:
            problems.append(f"metadata {key} missing")
    if (md.get("module") == "sdpa") != ("scale" in md):
        problems.append("scale metadata must be present exactly for sdpa")
    for k, a in arrays.items():
        if not np.all(np.isfinite(a)) and not k.endswith("_mask"):
            problems.append(f"{k} not finite")
    T = {}
    for name, a in arrays.items():
        if name.startswith("grad") or name in ("out", "attn_weights"):
            continue
        T[name] = _t(a, grad=not name.endswith("_mask"))
    out, w = ref_forward(T, md)
    e = rel_err(out.detach().numpy(), arrays["out"])
    if e > tol:
        problems.append(f"out mismatch {e:.3g}")
    if md["module"] == "sdpa":
        e = rel_err(w.detach().numpy(), arrays["attn_weights"])
        if e > tol:
            problems.append(f"attn_weights mismatch {e:.3g}")
    out.backward(_t(arrays["grad_out"]))
    worst = 0.0
    for name, t in T.items():
        if not t.requires_grad:
            continue
        g = arrays.get(f"grad.{name}")
        if g is None:
            problems.append(f"grad.{name} missing")
            continue
        worst = max(worst, rel_err(t.grad.numpy(), g))
    if worst > tol:
        problems.append(f"gradient mismatch {worst:.3g}")
    if build(case) != buf:
        problems.append("regenerated bytes differ (non-deterministic or stale file)")
    return problems, arrays, md, len(buf)


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
        bad = 0
        total = 0
        for c in cases:
            path = os.path.join(out_dir, c + ".safetensors")
            if not os.path.exists(path):
                print(f"FAIL {c}: {path} missing")
                bad += 1
                continue
            problems, arrays, md, size = check_file(path, c)
            total += size
            status = "ok  " if not problems else "FAIL"
            print(f"{status} {c:20s} {size:6d} B  " + "; ".join(problems))
            bad += bool(problems)
        print(f"{len(cases) - bad}/{len(cases)} ok, {total} bytes")
        if not args.cases:
            bad += export_round_trip(out_dir, check=True)
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
    if not args.cases:
        return 1 if export_round_trip(out_dir, check=False) else 0
    return 0


def export_round_trip(out_dir, check):
    """tools/check_export.py on out_dir; returns the number of failed cases."""
    import check_export  # (tools/ is on sys.path: it holds this script)
    return check_export.run(out_dir, check=check)


if __name__ == "__main__":
    sys.exit(main())
