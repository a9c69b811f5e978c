#!/usr/bin/python3
"""Round trip of `tgrad export` into PyTorch: load each exported model fixture into the
reference model class (tools/reference/train_reference.py's LM, or tools/reference/translate_reference.py's
Seq2Seq for an encoder-decoder) with load_state_dict(strict=True), compute its logits on fixed
token ids in float64 (and, for the encoder-decoder, in float32 too), and write them as a
fixture that the C test (tests/test_export.c) compares tgrad's own logits against.

Usage:
    /usr/bin/python3 tools/reference/check_export.py [--out tests/fixtures]     # write <case>_logits.safetensors
    /usr/bin/python3 tools/reference/check_export.py --check                    # verify the committed files
    /usr/bin/python3 tools/reference/check_export.py --tgrad build/tools/tgrad  # first re-create the
                                                                      # checkpoints and exports
    /usr/bin/python3 tools/reference/check_export.py --check --translate-with build/tools/tgrad
                    # also the translation models' greedy translations, PyTorch against tgrad
    (--cases export_pairs_bytes ... limits any of these to some cases)
Also run by tests/fixtures/gen/gen_fixtures.py (writing, or with --check). Needs Debian's python3-torch and
python3-numpy; needs tgrad only with --tgrad.

Fixtures per case (tests/fixtures/):
    <case>.ckpt                   a tiny checkpoint written by `tgrad train` (command below)
    <case>.safetensors            `tgrad export --checkpoint <case>.ckpt --out ...` of it
    <case>_logits.safetensors     written here: "ids" (B, T) and "logits" (B, T, V), both F64:
                                  the reference model's logits, in float64, for those ids.
                                  An encoder-decoder's instead: "src_ids" (B, S), "tgt_ids"
                                  (B, T) with T = S - 3, "src_key_padding_mask" (B, S) (1 =
                                  padding: row b's last 3 b positions), "logits" (B, T, V) in
                                  float64 and "logits_f32" (B, T, V): the model in float32
                                  (the export's values rounded to float32), all stored as F64
Cases: export_lm (text LM: causal, pre-norm, relu, learned positions, untied, f32),
export_task (the reverse task's encoder: not causal, post-norm, gelu, sinusoidal positions,
tied weights, f64), export_seq2seq (the reverse task's encoder-decoder, 1 encoder + 2 decoder
layers: pre-norm, relu, learned positions, untied, f32) and export_seq2seq_tied (2 + 1 layers:
post-norm, gelu, sinusoidal positions, tied weights, f64), export_pairs_bytes and
export_pairs_spm (translation models of `tgrad train --pairs` on export_pairs_train.tsv: the
byte tokenizer, and SentencePiece with the sqrt(d_model) embedding scale), so every option of
the exported configs is exercised.

Checks made here (each a failure if it does not hold): the export's metadata is format
tgrad-export-1 with a config and vocabulary; strict loading succeeds; strict loading of the
export minus one tensor, or plus a stray one, fails (so strict really checks every key); every
exported tensor equals the checkpoint's tensor of the same name bit for bit (head.weight equals
tok_emb.weight when tied) and no optimizer state is exported; a translation export has data
pairs, bos_id 1, no vocab, the checkpoint's tokenizer.kind and tokenizer.model (its tokenizer's
size is vocab_size) and scale_embedding; with --tgrad or --translate-with, load_tgrad.py's
greedy translations of SENTENCES (PyTorch) equal `tgrad translate --beam 1` of the export and
of the checkpoint; with --check, the recomputed
logits match the committed ones (max |diff| <= 1e-12 (1 + max |logit|)).
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import load_tgrad  # noqa: E402
import train_reference as ref  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

# The commands that made <case>.ckpt (run in the repository root; LICENSE is the text).
CASES = {
    "export_lm": ["train", "--text", "LICENSE", "--layers", "2", "--d-model", "8", "--heads",
                  "2", "--d-ff", "16", "--seq-len", "8", "--batch", "4", "--steps", "6",
                  "--eval-every", "3", "--warmup", "2", "--quiet"],
    "export_task": ["train", "--task", "reverse", "--layers", "1", "--d-model", "8", "--heads",
                    "2", "--d-ff", "16", "--post-norm", "--activation", "gelu", "--pos",
                    "sinusoidal", "--tie-weights", "--dtype", "f64", "--batch", "4", "--steps",
                    "4", "--eval-every", "2", "--warmup", "2", "--quiet"],
    "export_seq2seq": ["train", "--arch", "seq2seq", "--task", "reverse", "--layers", "1",
                       "--decoder-layers", "2", "--d-model", "8", "--heads", "2", "--d-ff", "16",
                       "--batch", "4", "--steps", "20", "--eval-every", "10", "--warmup", "2",
                       "--target-acc", "0", "--quiet"],
    "export_seq2seq_tied": ["train", "--arch", "seq2seq", "--task", "sort", "--layers", "2",
                            "--decoder-layers", "1", "--d-model", "8", "--heads", "2", "--d-ff",
                            "16", "--post-norm", "--activation", "gelu", "--pos", "sinusoidal",
                            "--tie-weights", "--dtype", "f64", "--batch", "4", "--steps", "20",
                            "--eval-every", "10", "--warmup", "2", "--target-acc", "0",
                            "--quiet"],
    # translation models (tgrad train --pairs): the byte tokenizer (no embedding scale,
    # pre-norm, relu, sinusoidal positions, 2 + 1 layers) and a SentencePiece one (the
    # committed 60-piece export_pairs_spm.model, trained by SentencePiece's Python trainer on
    # both sides of export_pairs_train.tsv with vocab_size=60, unk/bos/eos/pad ids 0-3,
    # normalization_rule_name=identity; sqrt(d_model) embedding scale, post-norm, gelu,
    # learned positions, 1 + 2 layers)
    "export_pairs_bytes": ["train", "--pairs", "tests/fixtures/export_pairs_train.tsv",
                           "--valid", "tests/fixtures/export_pairs_valid.tsv", "--tokenizer",
                           "bytes", "--d-model", "8", "--heads", "2", "--d-ff", "16", "--layers",
                           "2", "--decoder-layers", "1", "--seq-len", "24", "--steps", "200",
                           "--eval-every", "200", "--lr", "2", "--warmup", "30", "--dropout",
                           "0", "--emb-scale", "none", "--quiet"],
    "export_pairs_spm": ["train", "--pairs", "tests/fixtures/export_pairs_train.tsv", "--valid",
                         "tests/fixtures/export_pairs_valid.tsv", "--spm",
                         "tests/fixtures/export_pairs_spm.model", "--d-model", "8", "--heads",
                         "2", "--d-ff", "16", "--layers", "1", "--decoder-layers", "2",
                         "--seq-len", "16", "--steps", "200", "--eval-every", "200", "--lr", "2",
                         "--warmup", "30", "--dropout", "0", "--post-norm", "--activation",
                         "gelu", "--pos", "learned", "--quiet"],
}
B = 2
# Sentences the translation models translate (tools/reference/load_tgrad.py against tgrad translate)
SENTENCES = ["Hello.", "The dog is small.", "Where is the house?", "I see the book.",
             "Thank you very much.", "Gute Nacht, süßer Hund!"]


def fixed_ids(config):
    """(B, T) token ids, T = max_seq_len: ids[b, t] = (7 b + 3 t + 1) mod V."""
    v, t = config["vocab_size"], config["max_seq_len"]
    return torch.tensor([[(7 * b + 3 * i + 1) % v for i in range(t)] for b in range(B)],
                        dtype=torch.long)


def fixed_seq2seq_inputs(config):
    """src_ids (B, S), S = max_seq_len: (7 b + 3 s + 1) mod V; tgt_ids (B, S - 3): (5 b + 2 t
    + 3) mod V; src_key_padding_mask (B, S) bool: row b's last 3 b positions are padding."""
    v, s = config["vocab_size"], config["max_seq_len"]
    src = torch.tensor([[(7 * b + 3 * i + 1) % v for i in range(s)] for b in range(B)])
    tgt = torch.tensor([[(5 * b + 2 * i + 3) % v for i in range(s - 3)] for b in range(B)])
    mask = torch.tensor([[i >= s - 3 * b for i in range(s)] for b in range(B)])
    return src, tgt, mask


def write_safetensors(path, tensors, meta):
    """F64 tensors in the given order, metadata first, header space-padded to 8 bytes."""
    header, offset, blobs = {"__metadata__": meta}, 0, []
    for name, t in tensors:
        b = np.ascontiguousarray(t.detach().numpy(), dtype="<f8").tobytes()
        header[name] = {"dtype": "F64", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def logits_of(export_path):
    """{name: F64 tensor} of the logits fixture: the inputs and the reference's logits."""
    _, meta = ref.read_safetensors(export_path)
    if "n_decoder_layers" not in json.loads(meta["config"]):
        model, vocab, config = ref.load_export(export_path, dtype=torch.float64)
        ids = fixed_ids(config)
        # grad enabled in eval mode: the layers take their ordinary (not the inference fast)
        # path
        with torch.enable_grad():
            logits = model(ids)
        return {"ids": ids.double(), "logits": logits.detach()}
    out = {}
    for dt, key in ((torch.float64, "logits"), (torch.float32, "logits_f32")):
        model, vocab, config = load_tgrad.load(export_path, dtype=dt)
        src, tgt, mask = fixed_seq2seq_inputs(config)
        with torch.enable_grad():
            out[key] = model(src, tgt, mask).detach().double()
    out["src_ids"], out["tgt_ids"] = src.double(), tgt.double()
    out["src_key_padding_mask"] = mask.double()
    return {k: out[k] for k in ("src_ids", "tgt_ids", "src_key_padding_mask", "logits",
                                "logits_f32")}


def check_case(out_dir, case):
    """The structural checks; returns a list of problems."""
    problems = []
    ck_path = os.path.join(out_dir, case + ".ckpt")
    ex_path = os.path.join(out_dir, case + ".safetensors")
    tensors, meta = ref.read_safetensors(ex_path)
    ck, ck_meta = ref.read_safetensors(ck_path)
    if meta.get("format") != "tgrad-export-1":
        problems.append(f"format {meta.get('format')!r}")
    config = json.loads(meta["config"])
    s2s = "n_decoder_layers" in config
    if ck_meta.get("data.mode") == "pairs":  # a translation model: its tokenizer
        if "vocab" in meta or meta.get("data") != "pairs" or meta.get("bos_id") != "1":
            problems.append("a translation export needs data pairs, bos_id 1 and no vocab")
        for key in ("tokenizer.kind", "tokenizer.model"):
            if meta.get(key) != ck_meta.get(key):
                problems.append(f"{key} differs from the checkpoint's")
        if config.get("scale_embedding") != (ck_meta.get("model.scale_embeddings") == "1"):
            problems.append("scale_embedding differs from the checkpoint's")
        tok = load_tgrad.tokenizer_of(meta)
        if tok.size != config["vocab_size"]:
            problems.append(f"the tokenizer has {tok.size} ids, the config {config['vocab_size']}")
    else:
        vocab = json.loads(meta["vocab"])
        byte_ids = [v for v in vocab if v is not None]
        if len(vocab) != config["vocab_size"] or sorted(set(byte_ids)) != sorted(byte_ids):
            problems.append("vocab is not vocab_size distinct bytes")
        if s2s and (vocab[-1] is not None or len(byte_ids) != len(vocab) - 1 or
                    meta.get("bos_id") != str(len(vocab) - 1)):
            problems.append("an encoder-decoder's vocab must end with null for BOS = bos_id")
    if s2s:  # nn.Transformer's own names, plus the embeddings and the head
        want = set(torch.nn.Transformer(
            d_model=config["d_model"], nhead=config["n_heads"],
            num_encoder_layers=config["n_layers"],
            num_decoder_layers=config["n_decoder_layers"], dim_feedforward=config["d_ff"],
            batch_first=True).state_dict())
        want |= {"tok_emb.weight", "head.weight", "head.bias"}
        want |= {"pos_emb.weight"} if config["pos"] == "learned" else set()
        if set(tensors) != want:
            problems.append(f"names differ from nn.Transformer's: "
                            f"{sorted(set(tensors) ^ want)[:4]}")
    if ck_meta.get("data.mode") == "text":
        if bytes(vocab).hex() != ck_meta.get("data.vocab"):
            problems.append("vocab differs from the checkpoint's data.vocab")
    for name, t in tensors.items():
        if name.startswith(("adam.", "sgd.")):
            problems.append(f"optimizer state {name} exported")
        src = "tok_emb.weight" if (name == "head.weight" and config["tie_weights"]) else name
        if src not in ck or not torch.equal(ck[src], t):
            problems.append(f"{name} differs from the checkpoint's {src}")
    # strict loading must really check: one tensor missing, or one extra, is refused
    for label, broken in (("missing", dict(list(tensors.items())[1:])),
                          ("unexpected", dict(tensors, stray=torch.zeros(1)))):
        model = load_tgrad.model_class(config).from_config(config).double()
        try:
            model.load_state_dict(broken, strict=True)
            problems.append(f"strict load accepted a {label} key")
        except RuntimeError:
            pass
    return problems


def check_translations(ex_path, tgrad):
    """A translation export: load_tgrad.py's greedy translations of SENTENCES (PyTorch, the
    sources in one padded batch) against `tgrad translate --beam 1` of the export and of the
    checkpoint. Returns (problems, the translations)."""
    model, tok, config = load_tgrad.load_translator(ex_path)
    py = load_tgrad.translate(model, tok, config, SENTENCES)
    problems = []
    inp = "".join(t + "\n" for t in SENTENCES)
    for path in (ex_path, ex_path[:-len(".safetensors")] + ".ckpt"):
        res = subprocess.run([tgrad, "translate", "--checkpoint", path, "--beam", "1"],
                             input=inp.encode(), capture_output=True, check=True)
        got = res.stdout.decode("utf-8").split("\n")[:-1]
        if got != py:
            problems.append(f"tgrad translate {os.path.basename(path)}: {got} but PyTorch {py}")
    return problems, py


def run(out_dir, check=False, tgrad=None, cases=None, translate_with=None):
    """Write (or with check=True verify) every case's logits; returns the number of failures."""
    bad = 0
    for case, train in CASES.items():
        if cases and case not in cases:
            continue
        ck_path = os.path.join(out_dir, case + ".ckpt")
        ex_path = os.path.join(out_dir, case + ".safetensors")
        lg_path = os.path.join(out_dir, case + "_logits.safetensors")
        if tgrad:
            with tempfile.TemporaryDirectory() as tmp:
                ck_tmp = os.path.join(tmp, "ck")
                res = subprocess.run([tgrad] + train + ["--checkpoint", ck_tmp], cwd=ROOT)
                if not os.path.exists(ck_tmp):  # a task run that misses its target exits 3
                    sys.exit(f"{case}: tgrad train failed ({res.returncode})")
                os.replace(ck_tmp, ck_path)
            subprocess.run([tgrad, "export", "--checkpoint", ck_path, "--out", ex_path,
                            "--force"], check=True)
        problems = check_case(out_dir, case)
        prog = tgrad or translate_with
        if case.startswith("export_pairs") and prog:
            more, hyps = check_translations(ex_path, prog)
            problems += more
            print(f"     {case}: greedy translations {hyps}")
        got = logits_of(ex_path)
        logits = got["logits"]
        if check:
            want, meta = ref.read_safetensors(lg_path)
            inputs = [k for k in got if not k.startswith("logits")]
            if sorted(want) != sorted(got):
                problems.append(f"tensors {sorted(want)}, expected {sorted(got)}")
            elif not all(torch.equal(want[k], got[k]) for k in inputs):
                problems.append("ids differ")
            else:
                for k in (k for k in got if k.startswith("logits")):
                    err = (want[k] - got[k]).abs().max().item()
                    tol = (1e-12 if k == "logits" else 1e-5) * (1 + want[k].abs().max().item())
                    if not err <= tol:
                        problems.append(f"{k} differ by {err:.3g} > {tol:.3g}")
        else:
            if "ids" in got:
                meta = {"description": "logits of tools/reference/train_reference.py LM loaded from the "
                                       "export with strict=True, float64, eval mode",
                        "ids": "ids[b, t] = (7 b + 3 t + 1) mod vocab_size"}
            else:
                meta = {"description": "logits of tools/reference/translate_reference.py Seq2Seq loaded "
                                       "from the export with strict=True, eval mode: logits in "
                                       "float64, logits_f32 in float32",
                        "src_ids": "src_ids[b, s] = (7 b + 3 s + 1) mod vocab_size",
                        "tgt_ids": "tgt_ids[b, t] = (5 b + 2 t + 3) mod vocab_size",
                        "src_key_padding_mask": "1 = padding: the last 3 b positions of row b"}
            write_safetensors(lg_path, list(got.items()),
                              dict({"export": case + ".safetensors"}, **meta))
            print(f"wrote {lg_path}")
        status = "ok  " if not problems else "FAIL"
        print(f"{status} {case:20s} {tuple(logits.shape)}  " + "; ".join(problems))
        bad += bool(problems)
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures"),
                    help="fixture directory (default: tests/fixtures)")
    ap.add_argument("--check", action="store_true", help="verify instead of writing")
    ap.add_argument("--tgrad", help="tgrad program: re-create the checkpoints and exports first")
    ap.add_argument("--translate-with", metavar="TGRAD",
                    help="tgrad program: compare the translation models' greedy translations "
                    "(PyTorch against tgrad translate --beam 1; also done with --tgrad)")
    ap.add_argument("--cases", nargs="+", choices=list(CASES), help="only these cases")
    a = ap.parse_args()
    torch.set_num_threads(1)
    return 1 if run(os.path.normpath(a.out), a.check, a.tgrad, a.cases, a.translate_with) else 0


if __name__ == "__main__":
    sys.exit(main())
