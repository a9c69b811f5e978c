#!/bin/sh
# check_sharpness.sh SOURCE_DIR SHARPNESS - examples/sharpness.c against PyTorch: the example at
# its test-suite size writes its weights, batch and start vector (--save), then
# tools/reference/sharpness.py runs the same power iteration with torch.autograd's double
# backward and requires the loss to 1e-12 and the first and last eigenvalue estimates to 1e-8
# (relative). Exit 77 (skipped) without python3-torch.
set -eu
src=$1
sharpness=$2
py=${PYTHON3:-/usr/bin/python3}
if ! "$py" -c 'import torch, numpy' 2>/dev/null; then
    echo "check_sharpness: no python3-torch / python3-numpy: skipped"
    exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tgrad-sharpness.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$sharpness" --save "$tmp/sharp.safetensors"
"$py" "$src/tools/reference/sharpness.py" "$tmp/sharp.safetensors"
