#!/usr/bin/python3
"""Load a tgrad model into PyTorch with nothing but torch and numpy (Debian 12's python3-torch
and python3-numpy; the `safetensors` package is not needed).

Reads any file tgrad writes:
  - an export of `tgrad export` (format tgrad-export-1: metadata `config`, `vocab`), or
  - a training checkpoint of `tgrad train --checkpoint` (format tgrad-checkpoint-1: metadata
    model.*, data.*; its optimizer state adam.* / sgd.momentum.* is left out),
into the reference model class with load_state_dict(strict=True): every parameter key must
match, none missing or extra. A decoder-only LM or a task encoder becomes an LM
(tools/reference/train_reference.py); an encoder-decoder (config key n_decoder_layers) a Seq2Seq
(tools/reference/translate_reference.py): a torch.nn.Transformer (its own encoder.* / decoder.* keys)
with tok_emb, pos_emb and head, whose forward(src, tgt, src_key_padding_mask) is tgrad's
tg_transformer_forward_seq2seq.

As a module (put tools/ on sys.path):

    import torch, load_tgrad
    model, vocab, config = load_tgrad.load("lic.safetensors")     # eval mode, file's dtype
    ids = torch.tensor([load_tgrad.encode(vocab, b"This program is ")])
    next_byte = vocab[model(ids)[0, -1].argmax().item()]
    s2s, vocab, config = load_tgrad.load("reverse_s2s.safetensors")  # an encoder-decoder
    src = torch.tensor([load_tgrad.encode(vocab, b"1234")])
    logits = s2s(src, torch.tensor([[config["bos_id"]]]))          # (1, 1, V): first token
    tensors, meta = load_tgrad.read_safetensors("any.safetensors")  # {name: tensor}, {key: str}
    mt, tok, config = load_tgrad.load_translator("en_de.safetensors")  # a translation model
    load_tgrad.translate(mt, tok, config, ["Good morning."])        # ["Guten Morgen."]
    sp = load_tgrad.spm_processor(meta)     # its sentencepiece.SentencePieceProcessor

As a program:

    /usr/bin/python3 tools/reference/load_tgrad.py MODEL [--prompt TEXT] [--tokens N]
        describe the model, load it strictly, continue TEXT greedily for N bytes
    /usr/bin/python3 tools/reference/load_tgrad.py MODEL --source TEXT
        an encoder-decoder on a built-in task: decode TEXT's digits greedily (as many
        output digits as input digits, as `tgrad sample --source`)
    /usr/bin/python3 tools/reference/load_tgrad.py MODEL --translate TEXT [--translate TEXT2 ...]
        a translation model (`tgrad train --pairs`): translate each TEXT greedily (or with
        --beam K) as `tgrad translate --beam 1`, one line each
    /usr/bin/python3 tools/reference/load_tgrad.py MODEL --spm-out FILE.model
        a translation model with a SentencePiece tokenizer: write its model (the bytes of
        metadata tokenizer.model), which Python's sentencepiece loads
    /usr/bin/python3 tools/reference/load_tgrad.py MODEL --check LOGITS.safetensors
        compare the model's logits on LOGITS' "ids" (an encoder-decoder: "src_ids",
        "tgt_ids", "src_key_padding_mask") with its "logits" (the files tools/reference/check_export.py
        writes, tests/fixtures/export_*_logits.safetensors); exit 1 if
        max |diff| > 1e-4 (1 + max |logit|) (1e-10 in float64)

Exit status: 0, 1 for a failed check or a file that cannot be loaded (one line on stderr), 2
for a usage error.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_reference import LM  # noqa: E402
import translate_reference  # noqa: E402
from translate_reference import Seq2Seq  # noqa: E402

__all__ = ["read_safetensors", "load", "config_of", "encode", "decode", "LM", "Seq2Seq",
           "tokenizer_of", "spm_model_bytes", "spm_processor", "translate", "load_translator"]

# The encoder-decoder task models' begin-of-sequence id (after the digits 0-9).
TASK_BOS = 10
# A translation model's special ids (both tokenizers); the byte tokenizer's byte b is 4 + b.
UNK, BOS, EOS, PAD = 0, 1, 2, 3
# The longest model length any reader accepts (TG_TRANSFORMER_MAX_SEQ_LEN, tgrad_train.h).
MAX_SEQ_LEN = 65536

# safetensors dtype -> numpy dtype (little-endian, as the format stores every value)
_NP = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
       "I8": "i1", "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?"}
_MAX_HEADER = 100 * 1024 * 1024


def read_safetensors(path):
    """The file at `path` as ({name: tensor}, {metadata key: value}), with the checks of the
    reference reader: header length, JSON object, known dtypes, offsets in order, inside the
    data section, covering it exactly, and sized for each tensor's shape. BF16 is read as
    torch.bfloat16. Raises ValueError naming the file and the problem."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: not a safetensors file (shorter than 8 bytes)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > min(_MAX_HEADER, len(data) - 8):
        raise ValueError(f"{path}: not a safetensors file (header length {n} does not fit "
                         f"the file of {len(data)} bytes)")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path}: not a safetensors file (header is not JSON: {e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: not a safetensors file (header is not a JSON object)")
    meta = header.pop("__metadata__", None) or {}
    body = memoryview(data)[8 + n:]
    tensors, end_prev = {}, 0
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        dt, shape, (b, end) = e["dtype"], e["shape"], e["data_offsets"]
        if dt not in _NP and dt != "BF16":
            raise ValueError(f"{path}: tensor {name!r}: unsupported dtype {dt}")
        size = 2 if dt == "BF16" else np.dtype(_NP[dt]).itemsize
        numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if b != end_prev or end < b or end > len(body) or end - b != numel * size:
            raise ValueError(f"{path}: tensor {name!r}: data_offsets [{b}, {end}] do not hold "
                             f"{dt} {shape}")
        end_prev = end
        raw = body[b:end]
        if dt == "BF16":  # numpy has no bfloat16: the bits as int16, viewed by torch
            t = torch.from_numpy(np.frombuffer(raw, dtype="<i2").copy()).view(torch.bfloat16)
        else:
            t = torch.from_numpy(np.frombuffer(raw, dtype=_NP[dt]).copy())
        tensors[name] = t.reshape(shape)
    if end_prev != len(body):
        raise ValueError(f"{path}: {len(body) - end_prev} bytes after the last tensor")
    return tensors, meta


def _bool01(meta, key, default=None):
    v = meta.get(key)
    if v is None and default is not None:
        return default
    if v not in ("0", "1"):
        raise ValueError(f"metadata {key!r} is {v!r} (expected 0 or 1)")
    return v == "1"


def _int(meta, key, lo, hi):
    """Metadata integer @key as the library reads one (tg_meta_parse_int): decimal digits only,
    no sign, space, '_' or leading zero, in [lo, hi]."""
    v = meta[key]
    if not (v.isascii() and v.isdigit() and (v == "0" or v[0] != "0")) or not lo <= int(v) <= hi:
        raise ValueError(f"metadata {key!r} is {v!r} (expected an integer from {lo} to {hi})")
    return int(v)


def is_seq2seq(config):
    """Is this config (of config_of) an encoder-decoder's (class Seq2Seq)?"""
    return "n_decoder_layers" in config


def is_translation(meta):
    """Is this file (its metadata) a translation model's (`tgrad train --pairs`): token ids
    of its tokenizer (tokenizer.kind) rather than of a byte vocabulary?"""
    return meta.get("data") == "pairs" or meta.get("data.mode") == "pairs"


def config_of(meta):
    """(config, vocab) of a tgrad export or training checkpoint's metadata: config holds the
    model class's keyword arguments plus "dtype" (and "bos_id" for an encoder-decoder: the id
    the decoder input starts with); vocab[i] is the byte token id i stands for (None for BOS).
    A translation model's vocab is None: its ids are its tokenizer's (tokenizer_of)."""
    fmt = meta.get("format")
    if fmt == "tgrad-export-1":
        config = json.loads(meta["config"])
        msl = config.get("max_seq_len")
        if type(msl) is not int or not 1 <= msl <= MAX_SEQ_LEN:
            raise ValueError(f"config max_seq_len {msl!r} is not an integer from 1 to "
                             f"{MAX_SEQ_LEN}")
        vocab = None if is_translation(meta) else json.loads(meta["vocab"])
        if is_seq2seq(config):
            config["bos_id"] = int(meta["bos_id"])
        return config, vocab
    if fmt != "tgrad-checkpoint-1":
        raise ValueError(f"not a tgrad export or checkpoint (metadata 'format' is {fmt!r})")
    pairs = is_translation(meta)
    arch = meta.get("model.arch", "lm" if meta.get("data.mode") == "text" else
                    "seq2seq" if pairs else "encoder")
    text = meta["data.mode"] == "text"
    vocab = list(bytes.fromhex(meta["data.vocab"])) if text else list(b"0123456789")
    config = {
        "vocab_size": _int(meta, "model.vocab_size", 1, 1 << 20),
        "max_seq_len": _int(meta, "model.seq_len", 1, MAX_SEQ_LEN),
        "n_layers": _int(meta, "model.layers", 1, 65536),
        "d_model": _int(meta, "model.d_model", 1, 2**31 - 1),
        "n_heads": _int(meta, "model.heads", 1, 2**31 - 1),
        "d_ff": _int(meta, "model.d_ff", 1, 2**31 - 1),
        "activation": meta["model.activation"], "norm_first": _bool01(meta, "model.norm_first"),
        "pos": meta["model.pos"], "causal": text,
        "tie_weights": _bool01(meta, "model.tie_weights", False),
        "layer_norm_eps": 1e-5, "dropout": float(meta.get("model.dropout", "0")),
        "dtype": "float64" if meta.get("model.dtype") == "f64" else "float32"}
    if arch == "seq2seq":  # the export's Seq2Seq keyword arguments
        del config["causal"]
        config["n_decoder_layers"] = _int(meta, "model.decoder_layers", 1, 65536)
        config["scale_embedding"] = _bool01(meta, "model.scale_embeddings", False)
        config["bos_id"] = TASK_BOS
        vocab.append(None)
    if pairs:
        config["bos_id"] = BOS
        return config, None
    if len(vocab) != config["vocab_size"]:
        raise ValueError(f"metadata disagrees: model.vocab_size {config['vocab_size']} but the "
                         f"vocabulary has {len(vocab)}")
    return config, vocab


_OPTIM_PREFIXES = ("adam.m.", "adam.v.", "sgd.momentum.")


def model_class(config):
    """Seq2Seq for an encoder-decoder's config, LM otherwise."""
    return Seq2Seq if is_seq2seq(config) else LM


def load(path, dtype=None):
    """Load a tgrad export or checkpoint into LM or Seq2Seq with strict=True. Returns (model in
    eval mode, vocab, config): vocab[i] is the byte token id i stands for (None: BOS of an
    encoder-decoder, config["bos_id"]). dtype: None keeps the file's (config["dtype"]), or
    e.g. torch.float64. A checkpoint's optimizer state is left out; a tied model's
    head.weight is tok_emb.weight (PyTorch's state_dict lists both keys). A translation
    model's vocab is None: tokenizer_of(read_safetensors(path)[1]) is its tokenizer."""
    tensors, meta = read_safetensors(path)
    config, vocab = config_of(meta)
    state = {k: v for k, v in tensors.items() if not k.startswith(_OPTIM_PREFIXES)}
    if config["tie_weights"] and "head.weight" not in state and "tok_emb.weight" in state:
        state["head.weight"] = state["tok_emb.weight"]
    model = model_class(config).from_config({k: v for k, v in config.items() if k != "bos_id"})
    model.to(dtype or getattr(torch, config["dtype"]))
    model.load_state_dict(state, strict=True)
    model.eval()
    return model, vocab, config


def load_translator(path, dtype=None):
    """A translation model (`tgrad train --pairs`, its export or checkpoint): (Seq2Seq in eval
    mode, Tokenizer, config), as load()."""
    model, _, config = load(path, dtype)
    _, meta = read_safetensors(path)
    if not is_translation(meta):
        raise ValueError("not a translation model (data pairs, from tgrad train --pairs)")
    return model, tokenizer_of(meta), config


def encode(vocab, data):
    """Token ids of the bytes `data`; ValueError naming a byte the vocabulary lacks."""
    index = {b: i for i, b in enumerate(vocab) if b is not None}
    try:
        return [index[b] for b in data]
    except KeyError as e:
        raise ValueError(f"byte {e.args[0]} is not in the model's vocabulary of "
                         f"{len(vocab)} bytes") from None


def decode(vocab, ids):
    """The bytes token ids `ids` stand for (BOS stands for none)."""
    return bytes(vocab[i] for i in ids if vocab[i] is not None)


# ---- translation models: the tokenizer ---------------------------------------------------------
def spm_model_bytes(meta):
    """The serialized SentencePiece model of a translation model's metadata (tokenizer.model,
    strict base64), or None for the byte tokenizer. Write it to a .model file, or give it to
    spm_processor()."""
    import base64
    import binascii
    kind = meta.get("tokenizer.kind")
    if kind == "bytes":
        return None
    if kind != "sentencepiece":
        raise ValueError(f"metadata 'tokenizer.kind' is {kind!r} (expected bytes or "
                         f"sentencepiece)")
    try:
        return base64.b64decode(meta["tokenizer.model"], validate=True)
    except (KeyError, binascii.Error) as e:
        raise ValueError(f"metadata 'tokenizer.model' is not base64 ({e!r})") from None


def spm_processor(meta):
    """A sentencepiece.SentencePieceProcessor of the model's tokenizer.model (Debian's
    python3-sentencepiece)."""
    import sentencepiece
    return sentencepiece.SentencePieceProcessor(model_proto=spm_model_bytes(meta))


class Tokenizer:
    """A translation model's tokenizer, as tgrad's (tgrad_data.h): encode(text) -> ids,
    decode(ids) -> text (the special ids dropped, invalid UTF-8 as U+FFFD), and the special ids
    unk 0, bos 1, eos 2, pad 3 as attributes. kind "bytes": byte b is id 4 + b (vocabulary
    260); "sentencepiece": sp, the SentencePieceProcessor."""

    def __init__(self, meta):
        self.kind = meta.get("tokenizer.kind")
        self.sp = spm_processor(meta) if spm_model_bytes(meta) is not None else None
        self.unk, self.bos, self.eos, self.pad = UNK, BOS, EOS, PAD
        if self.sp is not None:
            ids = (self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id(), self.sp.pad_id())
            if ids[:3] != (UNK, BOS, EOS) or ids[3] not in (PAD, -1):
                raise ValueError(f"tokenizer.model's special ids unk/bos/eos/pad are {ids}, "
                                 f"expected {UNK}, {BOS}, {EOS}, {PAD}")
            if ids[3] < 0:
                self.pad = UNK  # padding is masked anyway
        self.size = self.sp.get_piece_size() if self.sp is not None else 260

    def encode(self, text):
        if self.sp is not None:
            return self.sp.encode(text, out_type=int)
        return [4 + b for b in text.encode("utf-8")]

    def decode(self, ids):
        special = {UNK, BOS, EOS, PAD}
        kept = [i for i in ids if i not in special]
        if self.sp is not None:
            raw = self.sp.decode(kept).encode("utf-8")
        else:
            raw = bytes(i - 4 for i in kept)
        return raw.decode("utf-8", errors="replace").replace("\0", "\ufffd")


def tokenizer_of(meta):
    """The Tokenizer of a translation model's metadata (an export's or a checkpoint's)."""
    return Tokenizer(meta)


@torch.no_grad()
def translate(model, tok, config, texts, max_len_a=1.5, max_len_b=10, beam=1, lenpen=1.0,
              batch=64):
    """Translations of the strings `texts` as `tgrad translate` makes them: source = the
    tokens (at most max_seq_len - 1) then EOS; greedy (beam 1) or beam search from BOS, at most
    min(floor(a S + b), max_seq_len - 1) tokens with the EOS; batched, padded sources masked
    (tools/reference/translate_reference.py's greedy and beam_search)."""
    import warnings
    # PyTorch 1.13's encoder fast path (eval, a padding mask) warns that nested tensors are
    # a prototype; the results are the same
    warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")
    L = config["max_seq_len"]
    srcs = [tok.encode(t)[:L - 1] + [tok.eos] for t in texts]
    hyps = translate_reference.translate(model, tok, srcs, max_len_a, max_len_b, L, beam, lenpen,
                                         batch)
    return [tok.decode(h) for h in hyps]


def _greedy_seq2seq(model, vocab, config, source):
    """A task encoder-decoder: as many output digits as source digits, greedily."""
    src = torch.tensor([encode(vocab, source)])
    dec = [config["bos_id"]]
    with torch.no_grad():
        memory = model.encode(src)
        for _ in range(src.shape[1]):
            dec.append(int(model.decode(torch.tensor([dec]), memory, last_only=True)[0].argmax()))
    return decode(vocab, dec[1:])


def _greedy(model, vocab, config, prompt, n):
    ids = encode(vocab, prompt) or [0]
    with torch.no_grad():
        for _ in range(n):
            window = ids[-config["max_seq_len"]:]
            ids.append(int(model(torch.tensor([window]))[0, -1].argmax()))
    return decode(vocab, ids[len(encode(vocab, prompt)):])


def _check(model, path):
    ref, _ = read_safetensors(path)
    want = ref["logits"]
    # grad enabled: the layers take their ordinary (not the inference fast) path
    with torch.enable_grad():
        if isinstance(model, Seq2Seq):
            got = model(ref["src_ids"].long(), ref["tgt_ids"].long(),
                        ref["src_key_padding_mask"] != 0).detach().double()
        else:
            got = model(ref["ids"].long()).detach().double()
    diff = (got - want).abs().max().item() / (1 + want.abs().max().item())
    tol = 1e-10 if next(model.parameters()).dtype == torch.float64 else 1e-4
    return diff, tol


def count_parameters(model):
    """The model's parameter values, each tensor once: a tied output layer shares its storage
    with the embedding (head.weight is tok_emb.weight), as tgrad counts it."""
    seen = {}
    for t in model.state_dict().values():
        seen[(t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage")
              else t.storage().data_ptr(), t.storage_offset(), tuple(t.shape))] = t.numel()
    return sum(seen.values())


def main(argv=None):
    p = argparse.ArgumentParser(description="Load a tgrad export or checkpoint into PyTorch "
                                "(torch + numpy only).")
    p.add_argument("model", help="a file of `tgrad export` or `tgrad train --checkpoint`")
    p.add_argument("--prompt", default="", help="text to continue greedily")
    p.add_argument("--tokens", type=int, default=0, help="bytes to generate (default 0)")
    p.add_argument("--source", help="encoder-decoder: the source digits to decode greedily")
    p.add_argument("--check", metavar="LOGITS", help="compare with this file's ids and logits")
    p.add_argument("--translate", metavar="TEXT", action="append", default=[],
                   help="translation model: translate TEXT (greedy unless --beam; repeatable, "
                   "one output line each)")
    p.add_argument("--beam", type=int, default=1, help="--translate: beam size (1: greedy)")
    p.add_argument("--spm-out", metavar="FILE.model",
                   help="translation model with a SentencePiece tokenizer: write its model")
    a = p.parse_args(argv)
    try:
        model, vocab, config = load(a.model)
        meta = read_safetensors(a.model)[1] if (a.translate or a.spm_out) else {}
        if (a.translate or a.spm_out) and not is_translation(meta):
            raise ValueError("--translate and --spm-out need a translation model (tgrad train "
                             "--pairs)")
        n = count_parameters(model)
        kind = ("encoder-decoder" if is_seq2seq(config) else
                "LM" if config["causal"] else "encoder")
        layers = (f"{config['n_layers']}+{config['n_decoder_layers']}" if is_seq2seq(config)
                  else str(config["n_layers"]))
        print(f"{a.model}: {kind}, {layers} layer(s), d_model {config['d_model']}, "
              f"{config['n_heads']} heads, vocabulary {config['vocab_size']}, {config['dtype']}; "
              f"{n} parameters (a tied tensor counted once) loaded with strict=True")
        if a.spm_out:
            blob = spm_model_bytes(meta)
            if blob is None:
                raise ValueError("--spm-out: the model's tokenizer is bytes, not sentencepiece")
            with open(a.spm_out, "wb") as f:
                f.write(blob)
            print(f"wrote {a.spm_out} ({len(blob)} bytes)")
        if a.translate:
            tok = tokenizer_of(meta)
            for line in translate(model, tok, config, a.translate, beam=a.beam):
                print(line)
        if a.source is not None:
            if not is_seq2seq(config):
                raise ValueError("--source needs an encoder-decoder model")
            if vocab is None:
                raise ValueError("--source decodes digits; a translation model takes "
                                 "--translate TEXT")
            print(_greedy_seq2seq(model, vocab, config, a.source.encode()).decode("latin-1"))
        if a.tokens > 0:
            if is_seq2seq(config):
                raise ValueError("--tokens continues an LM; an encoder-decoder takes --source")
            out = _greedy(model, vocab, config, a.prompt.encode(), a.tokens)
            print(json.dumps(a.prompt + out.decode("latin-1")))
        if a.check:
            diff, tol = _check(model, a.check)
            ok = diff <= tol
            print(f"{a.check}: max |diff| / (1 + max |logit|) = {diff:.3g} (tol {tol:g}): "
                  f"{'ok' if ok else 'FAILED'}")
            return 0 if ok else 1
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        print(f"load_tgrad: {a.model}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
