#!/bin/sh
# train_library_same.sh PAIRS_EXAMPLE TEXT_EXAMPLE TGRAD - examples/train_library.c and
# examples/train_text_library.c write the checkpoints that `tgrad train --pairs` and
# `tgrad train --text` write for the same configuration, byte for byte.
set -eu
pairs=$1
text=$2
tgrad=$3
dir=$(mktemp -d "${TMPDIR:-/tmp}/tgrad_train_library.XXXXXX")
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/pairs" "$dir/text"
"$pairs" "$dir/pairs" > "$dir/pairs/example.txt"
"$text" "$dir/text" > "$dir/text/example.txt"
same() { # NAME: the example's checkpoint against the command's
    if cmp run.safetensors cli.safetensors; then
        echo "train_library_same: $1: the example's checkpoint is tgrad train's, byte for byte"
    else
        echo "train_library_same: $1: the example's checkpoint differs from tgrad train's" >&2
        exit 1
    fi
}
cd "$dir/pairs"
"$tgrad" train --pairs train.tsv --valid valid.tsv --tokenizer bytes --steps 200 --eval-every 100 \
    --layers 1 --d-model 32 --heads 4 --d-ff 64 --seq-len 32 --batch-tokens 256 --warmup 20 \
    --seed 3 --checkpoint cli.safetensors --quiet > cli.txt
same "--pairs"
cd "$dir/text"
"$tgrad" train --text corpus.txt --steps 120 --eval-every 40 --batch 8 --grad-accum 2 \
    --seq-len 16 --layers 1 --d-model 32 --heads 4 --d-ff 64 --schedule noam --warmup 20 \
    --beta2 0.98 --seed 3 --checkpoint cli.safetensors --quiet > cli.txt
same "--text"
