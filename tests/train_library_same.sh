#!/bin/sh
# train_library_same.sh EXAMPLE TGRAD - examples/train_library.c writes the checkpoint that
# `tgrad train` writes for the same configuration, byte for byte.
set -eu
example=$1
tgrad=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/tgrad_train_library.XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$example" "$dir" > "$dir/example.txt"
cd "$dir"
"$tgrad" train --text corpus.txt --steps 120 --eval-every 40 --batch 8 --grad-accum 2 \
    --seq-len 16 --layers 1 --d-model 32 --heads 4 --d-ff 64 --schedule noam --warmup 20 \
    --beta2 0.98 --seed 3 --checkpoint cli.safetensors --quiet > cli.txt
if cmp run.safetensors cli.safetensors; then
    echo "train_library_same: the example's checkpoint is tgrad train's, byte for byte"
else
    echo "train_library_same: the example's checkpoint differs from tgrad train's" >&2
    exit 1
fi
