#!/bin/sh
# check_load_tgrad.sh SOURCE_DIR [TGRAD] - tools/reference/load_tgrad.py on Debian's python3-torch and
# numpy alone: a `safetensors` module that fails on import is put first on the path, then each
# committed export and checkpoint (tests/fixtures/export_*) is loaded with strict=True and its
# logits compared with the reference logits, and the parameters it counts (each tied tensor
# once) with the checkpoint's. The translation models (export_pairs_*): also
# their tokenizer (the SentencePiece model given back byte for byte, with python3-sentencepiece)
# and, given the tgrad program, load_tgrad.translate's greedy translations equal to `tgrad
# translate --beam 1` of the export and the checkpoint (SentencePiece: when both sides have
# it). Exit 77 (skipped) without python3-torch.
set -eu
src=$1
tgrad=${2:-}
py=${PYTHON3:-/usr/bin/python3}
if ! "$py" -c 'import torch, numpy' 2>/dev/null; then
    echo "check_load_tgrad: no python3-torch / python3-numpy: skipped"
    exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tgrad-py.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/safetensors"
echo 'raise ImportError("load_tgrad must not need the safetensors package")' \
    >"$tmp/safetensors/__init__.py"
PYTHONPATH="$tmp:$src/tools/reference" "$py" - "$src/tests/fixtures" "$tgrad" <<'PY'
import subprocess
import sys
import load_tgrad
fx, tgrad = sys.argv[1], sys.argv[2]
bad = 0
for case in ("export_lm", "export_task", "export_pairs_bytes", "export_pairs_spm"):
    for ext in ("safetensors", "ckpt"):
        model, vocab, config = load_tgrad.load(f"{fx}/{case}.{ext}")
        diff, tol = load_tgrad._check(model, f"{fx}/{case}_logits.safetensors")
        print(f"{case}.{ext}: {diff:.3g} (tol {tol:g})")
        bad += not diff <= tol
# the parameter count it prints: each tensor once (a tied head is the embedding; an export
# stores it under both names for strict loading), as tgrad counts them: the values of the
# checkpoint's parameters (a tied head stored once, optimizer state left out)
for case in ("export_lm", "export_task", "export_seq2seq", "export_seq2seq_tied",
             "export_pairs_bytes", "export_pairs_spm"):
    tensors = load_tgrad.read_safetensors(f"{fx}/{case}.ckpt")[0]
    want = sum(t.numel() for k, t in tensors.items()
               if not k.startswith(("adam.", "sgd.momentum.")))
    for ext in ("safetensors", "ckpt"):
        got = load_tgrad.count_parameters(load_tgrad.load(f"{fx}/{case}.{ext}")[0])
        print(f"{case}.{ext}: {got} parameters, the checkpoint holds {want}")
        bad += got != want
try:
    import sentencepiece  # noqa: F401
    have_spm = True
except ImportError:
    have_spm = False
sentences = ["Hello.", "The dog is small.", "Where is the house?", "Gute Nacht, süßer Hund!"]
for case in ("export_pairs_bytes", "export_pairs_spm"):
    meta = load_tgrad.read_safetensors(f"{fx}/{case}.safetensors")[1]
    blob = load_tgrad.spm_model_bytes(meta)
    if case.endswith("spm"):
        with open(f"{fx}/export_pairs_spm.model", "rb") as f:
            if blob != f.read():
                print(f"{case}: spm_model_bytes differs from export_pairs_spm.model")
                bad += 1
        if not have_spm:
            print(f"{case}: no python3-sentencepiece: translations skipped")
            continue
    elif blob is not None:
        print(f"{case}: a byte tokenizer with model bytes")
        bad += 1
    hyps = {}
    for ext in ("safetensors", "ckpt"):
        model, tok, config = load_tgrad.load_translator(f"{fx}/{case}.{ext}")
        hyps[ext] = load_tgrad.translate(model, tok, config, sentences)
    if hyps["safetensors"] != hyps["ckpt"] or not any(hyps["ckpt"]):
        print(f"{case}: translations {hyps}")
        bad += 1
    if not tgrad:
        continue
    res = subprocess.run([tgrad, "translate", "--checkpoint", f"{fx}/{case}.safetensors",
                          "--beam", "1"], input="".join(s + "\n" for s in sentences).encode(),
                         capture_output=True)
    if res.returncode != 0 and case.endswith("spm"):
        print(f"{case}: tgrad translate failed (built without SentencePiece?): skipped")
        continue
    got = res.stdout.decode("utf-8").split("\n")[:-1]
    print(f"{case}: tgrad {got}, PyTorch {hyps['ckpt']}")
    bad += got != hyps["ckpt"]
assert "safetensors" not in sys.modules or not hasattr(sys.modules["safetensors"], "safe_open")
sys.exit(1 if bad else 0)
PY
