#!/bin/sh
# check_load_tgrad.sh SOURCE_DIR - tools/load_tgrad.py on Debian's python3-torch and numpy
# alone: a `safetensors` module that fails on import is put first on the path, then each
# committed export and checkpoint (tests/fixtures/export_*) is loaded with strict=True and its
# logits compared with the reference logits. Exit 77 (skipped) without python3-torch.
set -eu
src=$1
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
PYTHONPATH="$tmp:$src/tools" "$py" - "$src/tests/fixtures" <<'PY'
import sys
import load_tgrad
fx = sys.argv[1]
bad = 0
for case in ("export_lm", "export_task"):
    for ext in ("safetensors", "ckpt"):
        model, vocab, config = load_tgrad.load(f"{fx}/{case}.{ext}")
        diff, tol = load_tgrad._check(model, f"{fx}/{case}_logits.safetensors")
        print(f"{case}.{ext}: {diff:.3g} (tol {tol:g})")
        bad += not diff <= tol
assert "safetensors" not in sys.modules or not hasattr(sys.modules["safetensors"], "safe_open")
sys.exit(1 if bad else 0)
PY
