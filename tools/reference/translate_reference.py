#!/usr/bin/python3
"""PyTorch reference for `tgrad train --arch seq2seq --pairs`: English->German translation with
torch.nn.Transformer on the same TSVs, the same SentencePiece model, the same sequences,
length-bucketed batches, label smoothing, schedule and greedy / beam decoding as tgrad
(the shared design in this script's comments), scored by sacreBLEU itself.

Usage (Debian 12: python3-torch 1.13, python3-sentencepiece; sacreBLEU from its source tree):

    git --git-dir=/path/to/sacrebleu.git archive HEAD | tar -x -C /tmp/sacrebleu
    nice /usr/bin/python3 tools/reference/translate_reference.py --train train.tsv --valid valid.tsv \\
        --test test.tsv --spm spm.model --sacrebleu-path /tmp/sacrebleu [--threads 2] \\
        [--out-prefix hyp] [--json summary.json]

  With no other option this is the job of `tgrad train --pairs train.tsv --valid valid.tsv
  --spm spm.model` followed by `tgrad translate --eval test.tsv` with --beam 1 and --beam 5
  (the defaults below are tgrad's --pairs defaults).

    ... --steps 40 --eval-every 0 --decode none           training speed only
    ... --load model.safetensors --decode greedy          decode the test set with the
                                                          weights of a tgrad export or
                                                          checkpoint, no training

  train.tsv, valid.tsv, test.tsv  one `English<TAB>German` pair per line (UTF-8; English is
                                  the source); a line without exactly one tab or with an empty
                                  side is an error naming the file and line
  --spm FILE.model                a SentencePiece model with bos and eos ids (the one `tgrad
                                  train` trains: unk 0, bos 1, eos 2, pad 3); pad -1: the unk
                                  id fills padded positions (they are always masked)
  --sacrebleu-path DIR            the directory holding the `sacrebleu` package (a
                                  sacrebleu/version.py is written there if missing); default
                                  $SACREBLEU_PATH, else an installed sacrebleu; needed only
                                  for BLEU/chrF (not with --eval-every 0 --decode none)
  --load FILE                     a `tgrad export` (.safetensors) or a `tgrad train --pairs`
                                  checkpoint: the model (its config replaces the model
                                  options) with its weights; no training (--steps ignored)
  --decode both|greedy|beam|none  which test-set decodings to run (both)
  --eval-every 0                  no evaluation at all, not even after the last step
  --keep-last N                   keep the parameters of the last N saves (each evaluation
                                  and the last step: the saves of `tgrad train --keep-last N`
                                  without --save-every), in memory, parameters only
  --average                       with --keep-last: after training, replace the model by the
                                  element-wise mean of the kept parameters (summed in float64
                                  in step order, divided by their number, rounded once to
                                  float32: `tgrad average` of the step files in step order),
                                  evaluate it and decode the test set with it
  --threads N                     torch.set_num_threads(N) (default: all CPUs, as tgrad);
                                  Debian's torch calls OpenBLAS, whose pthreads follow
                                  OPENBLAS_NUM_THREADS instead (default: all CPUs);
                                  tools/bench/bench_translate.py sets both

Prints a line per evaluation (validation loss per target token without smoothing, greedy
BLEU on the validation set) and a summary: training tokens/s (real target tokens, i.e. label
positions that are not padding; also source+target real tokens/s and padded positions/s),
wall time of training and of each decoding, peak RSS (getrusage), and the test set's BLEU and
chrF (sacreBLEU defaults: BLEU 13a, 4-grams, exp smoothing; chrF2) for greedy decoding and for
beam search; writes the detokenized hypotheses to <out-prefix>.greedy.txt and
<out-prefix>.beam<K>.txt (one line per test pair). The last line of standard output is the
summary as one JSON object (also written to --json FILE if given):
  {"tool": "translate_reference", "threads", "steps", "train_s", "tokens_per_s" (real target
   tokens: labels that are not padding, EOS included, per second of training steps: the
   epoch's batch plan when an epoch starts, collation, forward, backward, clipping, update;
   evaluations excluded, as tgrad counts), "src_tgt_tokens_per_s",
   "padded_per_s", "val_loss", "val_bleu" (last evaluation, or the average's with --average;
   null without), "averaged" (--average: the parameter sets averaged), "params", "peak_rss_mb",
   "test": {"greedy"|"beam5": {"bleu", "chrf", "seconds", "sentences", "sentences_per_s"}}}

Model (class Seq2Seq, also the loader of `tgrad export` files of encoder-decoder checkpoints,
see tools/reference/load_tgrad.py): a torch.nn.Transformer (batch_first, its encoder.* / decoder.*
state_dict names, final norms encoder.norm and decoder.norm as nn.Transformer has them for
post- and pre-norm alike) plus tok_emb (one nn.Embedding for source, target and, tied, the
output head), optional sqrt(d_model) embedding scale, pos_emb (learned) or the sinusoidal
encoding, dropout after the embeddings, and head (nn.Linear). Every layer keeps PyTorch's own
default initialisation (nn.Transformer's extra xavier re-initialisation is not applied, as in
tgrad); tok_emb is N(0, 1) as nn.Embedding unless --embed-std says otherwise.

Defaults (tgrad train --pairs's): d_model 256, 3 encoder + 3 decoder layers, 4 heads, d_ff
1024, relu, pre-norm, dropout 0.1, sinusoidal positions, tied embeddings multiplied by
sqrt(d_model) and initialised N(0, 1/d_model) (--no-scale-embedding: unscaled, N(0, 1)),
label smoothing 0.1, --batch-tokens 2048 (fairseq's --max-tokens), --max-len 128
(tgrad's --seq-len), Adam (0.9, 0.98) eps 1e-9 without weight decay, gradient clipping at
global norm 1.0, noam schedule with factor (--lr) 0.5 and --warmup 400 (peak lr 1.6e-3 at
step 400 for d_model 256), 1000 steps, evaluation every 500 steps and after the last, beam 5,
length penalty 1.0, max output a*S+b with a 1.5, b 10, 64 sentences per decoding batch, seed 0.

Sequences (per pair): source = spm(English)[:max_len-1] + EOS; decoder input = BOS +
spm(German)[:max_len-1]; labels = spm(German)[:max_len-1] + EOS. Padded source positions hold
pad and are masked (src_key_padding_mask, also the memory key padding mask); padded target
positions hold pad in the decoder input and -100 in the labels (no target key padding mask:
the causal mask keeps real positions from attending to later padding). With --spm-alpha A
(--spm-nbest L): every epoch e, each side s of training pair i takes one of its L best
segmentations (NBestEncodeAsImmutableProto), segmentation k with weight exp(A (s_k - s_1)),
drawn by u = (splitmix64(seed ^ G (e + 1) ^ 0xD1B54A32D192ED03 (2 i + s + 1)) >> 11) 2^-53
times the total (tgrad's tg_seq2seq_sample); the epoch's batches are planned on those lengths.
The same ids as tgrad need the same SentencePiece (Debian's 0.1.97: n-best scores are sums
whose order a version may change). --keep-best decodes with the parameters of the evaluation
with the highest validation BLEU (strictly higher than every earlier one).

Batches: splitmix64 (state seed ^ (0x9E3779B97F4A7C15 (e + 1)) for epoch e, mod 2^64);
Fisher-Yates permutation -> rank; examples sorted by (T, S, rank); packed greedily while
n * max(max S, max T) <= batch_tokens; the batch list shuffled by Fisher-Yates with the same
generator continuing. Loss: F.cross_entropy(label_smoothing=, ignore_index=-100), the mean over
real target tokens. Schedule: lr(step) = factor d_model^-0.5 min(step^-0.5, step warmup^-1.5),
step counted from 1 (LambdaLR).

Decoding (batched over sentences, no KV cache: the decoder runs on the whole prefix):
- maximum output length L = min(floor(a S + b), max_len - 1) tokens including EOS, S the
  source length including its EOS: at most L - 1 tokens precede the EOS.
- greedy: BOS, then the argmax of each step's logits (the lowest id on ties) until EOS or
  L - 1 tokens; the output excludes BOS and EOS.
- beam K (fairseq's sequence_generator algorithm): scores are sums of log_softmax in float64;
  step 0 expands the first beam only; each step takes per sentence the top 2K (beam, token)
  candidates by score (ties: lower beam, then lower token id); EOS candidates among the first
  K finish with normalized score score / len^alpha (len including EOS; alpha --lenpen), in
  candidate order while the sentence has fewer than K finished; the first K non-EOS
  candidates are the next beams; at step L - 1 every live beam can only take EOS (its
  log-probability added); a sentence is done with K finished hypotheses; the result is the
  finished hypothesis with the highest normalized score (ties: the earlier finished).
- --no-repeat-ngram N (fairseq's --no-repeat-ngram-size; greedy and beam): before each step's
  choice, a token that followed an earlier occurrence of the row's last N - 1 tokens in
  [BOS, its tokens] gets log-probability -inf (logit -inf for greedy's argmax).

Exit status: 0; 1 for a bad input file (one line on stderr); 2 for a usage error.
"""
import argparse
import copy
import json
import math
import os
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_reference import sinusoidal  # noqa: E402  (tgrad's tg_sinusoidal_encoding)

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


# ---- model ------------------------------------------------------------------------------------
class Seq2Seq(nn.Transformer):
    """tgrad's encoder-decoder tg_transformer (tg_transformer_forward_seq2seq) in PyTorch:

        x = dropout(tok_emb[src] (* sqrt(D)) + pos[:S])      (B, S, D)
        y = dropout(tok_emb[tgt] (* sqrt(D)) + pos[:T])      (B, T, D)
        memory = encoder(x, src_key_padding_mask)            encoder.layers.*, encoder.norm
        h = decoder(y, memory, causal mask, tgt_key_padding_mask,
                    memory_key_padding_mask = src_key_padding_mask)  decoder.layers.*, .norm
        logits = head(h)                                     (B, T, V)

    The keyword arguments are exactly the keys of the `config` metadata `tgrad export` writes
    for an encoder-decoder checkpoint, and the state_dict keys are tgrad's parameter names
    (nn.Transformer's encoder.* and decoder.*, plus tok_emb.weight, pos_emb.weight (learned
    positions only), head.weight, head.bias), so an export loads with strict=True.
    """

    def __init__(self, vocab_size, max_seq_len=64, n_layers=3, n_decoder_layers=3, d_model=256,
                 n_heads=4, d_ff=1024, activation="relu", norm_first=True, pos="sinusoidal",
                 tie_weights=True, scale_embedding=False, layer_norm_eps=1e-5, dropout=0.1,
                 attn_dropout=None, act_dropout=None):
        super().__init__(d_model=d_model, nhead=n_heads, num_encoder_layers=n_layers,
                         num_decoder_layers=n_decoder_layers, dim_feedforward=d_ff,
                         dropout=dropout, activation=activation, layer_norm_eps=layer_norm_eps,
                         batch_first=True, norm_first=norm_first)
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        if pos == "learned":
            self.pos_emb = nn.Embedding(max_seq_len, d_model)
        elif pos == "sinusoidal":
            self.pos_emb = None
            self.register_buffer("pe", sinusoidal(max_seq_len, d_model), persistent=False)
        else:
            raise ValueError(f"pos must be 'learned' or 'sinusoidal', not {pos!r}")
        self.drop = nn.Dropout(dropout)
        # fairseq's --attention-dropout, --activation-dropout (None: dropout, as nn.Transformer):
        # the attention weights' dropout and the FFN's inner one (a layer's self.dropout)
        for layer in list(self.encoder.layers) + list(self.decoder.layers):
            if attn_dropout is not None:
                layer.self_attn.dropout = attn_dropout
                if hasattr(layer, "multihead_attn"):
                    layer.multihead_attn.dropout = attn_dropout
            if act_dropout is not None:
                layer.dropout.p = act_dropout
        self.head = nn.Linear(d_model, vocab_size)
        if tie_weights:
            self.head.weight = self.tok_emb.weight
        self.scale = math.sqrt(d_model) if scale_embedding else 1.0
        self.max_seq_len = max_seq_len
        mask = torch.triu(torch.ones(max_seq_len, max_seq_len, dtype=torch.bool), 1)
        self.register_buffer("causal", mask, persistent=False)

    def _reset_parameters(self):
        """nn.Transformer re-initialises every matrix with xavier_uniform_; tgrad keeps each
        layer's PyTorch default, and so does this class."""

    @classmethod
    def from_config(cls, config):
        """A model from the `config` metadata of `tgrad export` (a dict; `dtype` is ignored)."""
        return cls(**{k: v for k, v in config.items() if k != "dtype"})

    def embed(self, ids):
        t = ids.shape[1]
        pos = self.pos_emb.weight[:t] if self.pos_emb is not None else self.pe[:t]
        x = self.tok_emb(ids)
        if self.scale != 1.0:
            x = x * self.scale
        return self.drop(x + pos.to(x.dtype))

    def encode(self, src, src_key_padding_mask=None):
        return self.encoder(self.embed(src), src_key_padding_mask=src_key_padding_mask)

    def decode(self, tgt, memory, memory_key_padding_mask=None, tgt_key_padding_mask=None,
               last_only=False):
        """Logits (B, T, V), or with last_only those of the last position (B, V)."""
        t = tgt.shape[1]
        h = self.decoder(self.embed(tgt), memory, tgt_mask=self.causal[:t, :t],
                         tgt_key_padding_mask=tgt_key_padding_mask,
                         memory_key_padding_mask=memory_key_padding_mask)
        return self.head(h[:, -1] if last_only else h)

    def forward(self, src, tgt, src_key_padding_mask=None, tgt_key_padding_mask=None):
        """src (B, S), tgt (B, T) long; masks bool (True = padding) or None -> (B, T, V)."""
        memory = self.encode(src, src_key_padding_mask)
        return self.decode(tgt, memory, src_key_padding_mask, tgt_key_padding_mask)


# ---- data -------------------------------------------------------------------------------------
class InputError(Exception):
    pass


def read_pairs(path):
    """[(english, german)] of a TSV: exactly one tab per line, no empty side, CRLF tolerated."""
    pairs = []
    try:
        with open(path, "rb") as f:
            for no, raw in enumerate(f, 1):
                line = raw.rstrip(b"\n").rstrip(b"\r")
                try:
                    text = line.decode("utf-8")
                except UnicodeDecodeError:
                    raise InputError(f"{path}:{no}: not valid UTF-8") from None
                parts = text.split("\t")
                if len(parts) != 2 or not parts[0] or not parts[1] or "\0" in text:
                    raise InputError(f"{path}:{no}: expected 'English<TAB>German' (one tab, "
                                     f"no empty side, no NUL)")
                pairs.append((parts[0], parts[1]))
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}") from None
    if not pairs:
        raise InputError(f"{path}: no pairs")
    return pairs


class Vocab:
    """The SentencePiece model and the special ids."""

    def __init__(self, path):
        import sentencepiece as spm
        try:
            self.sp = spm.SentencePieceProcessor(model_file=path)
        except (OSError, RuntimeError) as e:
            raise InputError(f"{path}: not a SentencePiece model ({e})") from None
        self.size = self.sp.get_piece_size()
        self.bos, self.eos = self.sp.bos_id(), self.sp.eos_id()
        if self.bos < 0 or self.eos < 0:
            raise InputError(f"{path}: the model has no bos or no eos id")
        self.pad = self.sp.pad_id() if self.sp.pad_id() >= 0 else self.sp.unk_id()

    def encode(self, texts):
        return self.sp.encode(texts, out_type=int)

    def decode(self, ids):
        return self.sp.decode(ids)


def make_sequences(vocab, pairs, max_len):
    """(src, dec_in, labels) lists per pair, exactly as the design says."""
    srcs = vocab.encode([e for e, _ in pairs])
    tgts = vocab.encode([d for _, d in pairs])
    out = []
    for s, t in zip(srcs, tgts):
        s, t = s[:max_len - 1], t[:max_len - 1]
        out.append((s + [vocab.eos], [vocab.bos] + t, t + [vocab.eos]))
    return out


def sampled_ids(vocab, text, nbest, alpha, key):
    """One of the `nbest` best segmentations of `text`, drawn as tgrad's
    tg_tokenizer_encode_sampled does: weights exp(alpha (s_k - s_1)) in f64, u the first
    splitmix64 output from state `key` times 2^-53 times their sum, the first k whose
    cumulative weight exceeds u."""
    segs = [([p.id for p in s.pieces], s.score)
            for s in vocab.sp.NBestEncodeAsImmutableProto(text, nbest).nbests][:nbest]
    if not segs:
        return []
    w = [math.exp(alpha * (sc - segs[0][1])) for _, sc in segs]
    total = 0.0
    for x in w:
        total += x
    u = (SplitMix64(key).next() >> 11) * 2.0 ** -53 * total
    c = 0.0
    for (ids, _), x in zip(segs, w):
        c += x
        if u < c:
            return ids
    return segs[-1][0]


def sampled_sequences(vocab, pairs, max_len, nbest, alpha, seed, epoch):
    """make_sequences with each side's segmentation drawn (tgrad's tg_seq2seq_sample): side s
    of pair i has key seed ^ (GOLDEN (epoch + 1)) ^ (0xD1B54A32D192ED03 (2 i + s + 1))."""
    base = (seed ^ (GOLDEN * (epoch + 1))) & M64
    out = []
    for i, (e, d) in enumerate(pairs):
        ks = base ^ ((0xD1B54A32D192ED03 * (2 * i + 1)) & M64)
        kt = base ^ ((0xD1B54A32D192ED03 * (2 * i + 2)) & M64)
        s = sampled_ids(vocab, e, nbest, alpha, ks)[:max_len - 1]
        t = sampled_ids(vocab, d, nbest, alpha, kt)[:max_len - 1]
        out.append((s + [vocab.eos], [vocab.bos] + t, t + [vocab.eos]))
    return out


class SplitMix64:
    def __init__(self, state):
        self.s = state & M64

    def next(self):
        self.s = (self.s + GOLDEN) & M64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)


def epoch_batches(lengths, batch_tokens, seed, epoch):
    """The batches (lists of example indices) of epoch `epoch`, in training order."""
    n = len(lengths)
    rng = SplitMix64(seed ^ ((GOLDEN * (epoch + 1)) & M64))
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        j = rng.next() % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    rank = [0] * n
    for k, p in enumerate(perm):
        rank[p] = k
    order = sorted(range(n), key=lambda i: (lengths[i][1], lengths[i][0], rank[i]))
    batches, cur, longest = [], [], 0
    for i in order:
        need = max(lengths[i])
        if need > batch_tokens:
            raise InputError(f"example {i} alone ({need} tokens) exceeds --batch-tokens "
                             f"{batch_tokens}")
        if cur and (len(cur) + 1) * max(longest, need) > batch_tokens:
            batches.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, need)
    if cur:
        batches.append(cur)
    for i in range(len(batches) - 1, 0, -1):
        j = rng.next() % (i + 1)
        batches[i], batches[j] = batches[j], batches[i]
    return batches


def collate(seqs, idx, pad):
    """Padded tensors of the examples idx: src (B, S), src mask (B, S) bool, dec_in (B, T),
    labels (B, T) with -100 at padding."""
    S = max(len(seqs[i][0]) for i in idx)
    T = max(len(seqs[i][1]) for i in idx)
    src = torch.full((len(idx), S), pad, dtype=torch.long)
    mask = torch.ones((len(idx), S), dtype=torch.bool)
    dec = torch.full((len(idx), T), pad, dtype=torch.long)
    lab = torch.full((len(idx), T), -100, dtype=torch.long)
    for r, i in enumerate(idx):
        s, d, y = seqs[i]
        src[r, :len(s)] = torch.tensor(s)
        mask[r, :len(s)] = False
        dec[r, :len(d)] = torch.tensor(d)
        lab[r, :len(y)] = torch.tensor(y)
    return src, mask, dec, lab


def source_batch(srcs, idx, pad):
    S = max(len(srcs[i]) for i in idx)
    src = torch.full((len(idx), S), pad, dtype=torch.long)
    mask = torch.ones((len(idx), S), dtype=torch.bool)
    for r, i in enumerate(idx):
        src[r, :len(srcs[i])] = torch.tensor(srcs[i])
        mask[r, :len(srcs[i])] = False
    return src, mask


# ---- decoding ---------------------------------------------------------------------------------
def max_out_len(s, a, b, max_len):
    """L: the most output tokens, EOS included, for a source of s tokens (EOS included)."""
    return min(int(math.floor(a * s + b)), max_len - 1)


def block_ngrams(seqs, scores, n):
    """fairseq's NGramRepeatBlock: for each row i, seqs[i] its tokens with BOS first, set
    scores[i, w] = -inf for every w that would repeat an n-gram of seqs[i]."""
    if n <= 0:
        return
    for i, s in enumerate(seqs):
        t = len(s) - 1
        suffix = s[t + 2 - n:] if n > 1 else []
        for j in range(0, t + 2 - n):
            if s[j:j + n - 1] == suffix:
                scores[i, s[j + n - 1]] = -math.inf


@torch.no_grad()
def greedy(model, vocab, src, mask, limits, no_repeat=0):
    """src (B, S), mask (B, S), limits[b] = L -> list of B id lists (no BOS, no EOS)."""
    B = src.shape[0]
    memory = model.encode(src, mask)
    dec = torch.full((B, 1), vocab.bos, dtype=torch.long)
    out = [[] for _ in range(B)]
    live = list(range(B))
    step = 0
    while live:
        # rows still decoding that may take another token (at most L - 1 before the EOS)
        live = [b for b in live if step < limits[b] - 1]
        if not live:
            break
        rows = torch.tensor(live)
        logits = model.decode(dec[rows], memory[rows], mask[rows], last_only=True)
        block_ngrams([dec[b, :step + 1].tolist() for b in live], logits, no_repeat)
        nxt = logits.argmax(-1)  # the first (lowest) id among equal maxima
        new = torch.full((B, 1), vocab.pad, dtype=torch.long)
        new[rows, 0] = nxt
        dec = torch.cat([dec, new], 1)
        still = []
        for k, b in enumerate(live):
            t = int(nxt[k])
            if t == vocab.eos:
                continue
            out[b].append(t)
            still.append(b)
        live = still
        step += 1
    return out


def top_candidates(flat, n):
    """Per row of flat (A, N): the n largest (value, index) pairs, by value descending and, among
    equal values, index ascending (exact: a tie at the boundary is resolved by index)."""
    vals, idx = flat.topk(n, dim=1)
    o = idx.argsort(dim=1)                                      # index ascending ...
    vals, idx = vals.gather(1, o), idx.gather(1, o)
    o = torch.sort(-vals, dim=1, stable=True).indices           # ... then value descending
    vals, idx = vals.gather(1, o), idx.gather(1, o)
    thr = vals[:, -1:]
    # rows where a value equal to the n-th is left out: topk may have kept a higher index
    redo = ((flat == thr).sum(1) > (vals == thr).sum(1)).nonzero().flatten().tolist()
    out = [list(zip(v, i)) for v, i in zip(vals.tolist(), idx.tolist())]
    for a in redo:
        row, t = flat[a], thr[a, 0]
        above = torch.nonzero(row > t).flatten()
        keep = torch.cat([above, torch.nonzero(row == t).flatten()[:n - above.numel()]])
        out[a] = sorted(zip(row[keep].tolist(), keep.tolist()), key=lambda p: (-p[0], p[1]))
    return out


@torch.no_grad()
def beam_search(model, vocab, src, mask, limits, K, alpha, no_repeat=0):
    """fairseq's beam search (see the module docstring), batched over B sentences x K rows."""
    B = src.shape[0]
    memory = model.encode(src, mask).repeat_interleave(K, 0)      # (B K, S, D)
    mmask = mask.repeat_interleave(K, 0)
    tokens = torch.full((B * K, 1), vocab.bos, dtype=torch.long)  # (B K, 1 + step)
    scores = torch.zeros(B, K, dtype=torch.float64)
    finished = [[] for _ in range(B)]  # (normalized score, ids)
    active = list(range(B))
    step = 0
    while active:
        rows = torch.tensor([b * K + k for b in active for k in range(K)])
        logits = model.decode(tokens[rows], memory[rows], mmask[rows], last_only=True)
        lp = logits.double().log_softmax(-1)
        block_ngrams([tokens[r].tolist() for r in rows.tolist()], lp, no_repeat)
        lp = lp.view(len(active), K, -1)  # (A, K, V)
        V = lp.shape[-1]
        L = torch.tensor([limits[b] for b in active])
        force_eos = (step >= L - 1)
        if force_eos.any():  # at the maximum length only EOS can follow
            eos_lp = lp[force_eos, :, vocab.eos].clone()
            lp[force_eos] = -math.inf
            lp[force_eos, :, vocab.eos] = eos_lp
        cand = scores[active].unsqueeze(-1) + lp                        # (A, K, V)
        if step == 0:
            cand[:, 1:, :] = -math.inf  # all K rows are identical: expand the first only
        flat = cand.view(len(active), K * V)
        top = top_candidates(flat, 2 * K)
        src_rows = list(range(B * K))  # row r of the next tokens continues row src_rows[r]
        new_col = torch.full((B * K, 1), vocab.pad, dtype=torch.long)
        still = []
        for a, b in enumerate(active):
            picks = []
            for r, (sc, c) in enumerate(top[a]):
                if sc == -math.inf:
                    break
                beam, tok = divmod(c, V)
                if tok == vocab.eos:
                    if r < K and len(finished[b]) < K:
                        hyp = tokens[b * K + beam, 1:].tolist()
                        finished[b].append((sc / (step + 1) ** alpha, hyp))
                elif len(picks) < K:
                    picks.append((beam, tok, sc))
            if len(finished[b]) >= K or not picks:
                continue
            still.append(b)
            while len(picks) < K:  # fewer than K live candidates: repeat the last, never chosen
                picks.append((picks[-1][0], picks[-1][1], -math.inf))
            for k, (beam, tok, sc) in enumerate(picks):
                src_rows[b * K + k] = b * K + beam
                new_col[b * K + k, 0] = tok
                scores[b, k] = sc
        tokens = torch.cat([tokens[torch.tensor(src_rows)], new_col], 1)
        active = still
        step += 1
    out = []
    for b in range(B):
        best = None
        for sc, hyp in finished[b]:  # the earlier finished wins ties
            if best is None or sc > best[0]:
                best = (sc, hyp)
        out.append(best[1] if best else [])
    return out


def translate(model, vocab, srcs, a, b, max_len, beam, alpha, batch, no_repeat=0):
    """Hypotheses (id lists) of every source, batched by length; beam 0/1 = greedy."""
    model.eval()
    order = sorted(range(len(srcs)), key=lambda i: (len(srcs[i]), i))
    hyps = [None] * len(srcs)
    for k in range(0, len(order), batch):
        idx = order[k:k + batch]
        src, mask = source_batch(srcs, idx, vocab.pad)
        limits = [max_out_len(len(srcs[i]), a, b, max_len) for i in idx]
        res = (beam_search(model, vocab, src, mask, limits, beam, alpha, no_repeat) if beam > 1
               else greedy(model, vocab, src, mask, limits, no_repeat))
        for i, h in zip(idx, res):
            hyps[i] = h
    return hyps


def import_sacrebleu(path):
    """sacreBLEU's BLEU and CHRF classes from the source tree at `path` (None: an installed
    sacrebleu); InputError if it cannot be imported."""
    if path:
        vp = os.path.join(path, "sacrebleu", "version.py")
        if os.path.isdir(os.path.dirname(vp)) and not os.path.exists(vp):
            with open(vp, "w") as f:
                f.write('__version__ = "2.5.1"\n')
        sys.path.insert(0, path)
    try:
        from sacrebleu.metrics import BLEU, CHRF
    except ImportError as e:
        raise InputError(f"cannot import sacrebleu ({e}): give --sacrebleu-path DIR (the "
                         f"directory holding sacrebleu/, e.g. `git archive` of its "
                         f"repository) or set SACREBLEU_PATH") from None
    return BLEU, CHRF


def load_model(path):
    """(Seq2Seq in eval mode, config) from a `tgrad export` of a translation model or a
    `tgrad train --pairs` checkpoint (the same parameter names; a checkpoint's optimizer state
    is left out). InputError if the file cannot be read or is not an encoder-decoder."""
    import load_tgrad  # imports this module: only here, not at the top
    try:
        tensors, meta = load_tgrad.read_safetensors(path)
    except (OSError, ValueError) as e:
        msg = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise InputError(msg if msg.startswith(path) else f"{path}: {msg}") from None
    try:
        if meta.get("format") == "tgrad-export-1":
            config = json.loads(meta["config"])
        elif meta.get("format") == "tgrad-checkpoint-1" and meta.get("model.arch") == "seq2seq":
            b = lambda k, d="0": meta.get(k, d) == "1"  # noqa: E731
            config = {
                "vocab_size": int(meta["model.vocab_size"]),
                "max_seq_len": int(meta["model.seq_len"]),
                "n_layers": int(meta["model.layers"]),
                "n_decoder_layers": int(meta["model.decoder_layers"]),
                "d_model": int(meta["model.d_model"]), "n_heads": int(meta["model.heads"]),
                "d_ff": int(meta["model.d_ff"]), "activation": meta["model.activation"],
                "norm_first": b("model.norm_first", "1"), "pos": meta["model.pos"],
                "tie_weights": b("model.tie_weights"),
                "scale_embedding": b("model.scale_embeddings"), "layer_norm_eps": 1e-5,
                "dropout": float(meta.get("model.dropout", "0"))}
        else:
            raise InputError(f"{path}: not a tgrad export or translation checkpoint")
    except (KeyError, ValueError) as e:
        raise InputError(f"{path}: malformed metadata ({e})") from None
    if "n_decoder_layers" not in config:
        raise InputError(f"{path}: not an encoder-decoder model")
    config = {k: v for k, v in config.items() if k not in ("dtype", "bos_id")}
    state = {k: v for k, v in tensors.items() if not k.startswith(("adam.", "sgd."))}
    if config.get("tie_weights") and "head.weight" not in state and "tok_emb.weight" in state:
        state["head.weight"] = state["tok_emb.weight"]
    try:
        model = Seq2Seq(**config).float()
    except (TypeError, ValueError) as e:
        raise InputError(f"{path}: config {config} does not fit Seq2Seq ({e})") from None
    try:
        model.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    except RuntimeError as e:
        raise InputError(f"{path}: the parameters do not fit the model ({e})") from None
    model.eval()
    return model, config


# ---- training ---------------------------------------------------------------------------------
@torch.no_grad()
def valid_loss(model, seqs, pad, batch_tokens):
    model.eval()
    lengths = [(len(s), len(d)) for s, d, _ in seqs]
    total, count = 0.0, 0
    for idx in epoch_batches(lengths, batch_tokens, 0, 0):
        src, mask, dec, lab = collate(seqs, idx, pad)
        logits = model(src, dec, mask)
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), lab.reshape(-1),
                                 ignore_index=-100, reduction="sum").item()
        count += int((lab != -100).sum())
    return total / count


def kept_parameters(model):
    """A copy of the model's parameters (each tied tensor once, buffers left out): what a
    step file of `tgrad train --keep-last` holds besides the optimizer state."""
    return {k: p.detach().clone() for k, p in model.named_parameters()}


@torch.no_grad()
def average_parameters(model, kept):
    """Load into @p model the element-wise mean of the kept parameter sets (oldest first):
    summed in float64 in that order, divided by their number, rounded once to the parameter
    dtype, as `tgrad average` computes it."""
    for k, p in model.named_parameters():
        acc = torch.zeros(p.shape, dtype=torch.float64)
        for state in kept:
            acc += state[k].double()
        p.copy_((acc / len(kept)).to(p.dtype))


def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", help="training pairs (English<TAB>German); not with --load")
    ap.add_argument("--valid", help="validation pairs; not with --load")
    ap.add_argument("--test", required=True, help="test pairs")
    ap.add_argument("--spm", required=True, help="SentencePiece .model file")
    ap.add_argument("--sacrebleu-path", default=os.environ.get("SACREBLEU_PATH"),
                    help="directory holding sacrebleu/ ($SACREBLEU_PATH, else installed)")
    ap.add_argument("--load", help="decode with the model of a tgrad export or --pairs "
                    "checkpoint (no training)")
    ap.add_argument("--decode", choices=["both", "greedy", "beam", "none"], default="both",
                    help="test-set decodings (both: greedy, then --beam)")
    ap.add_argument("--out-prefix", default="hyp", help="hypothesis files prefix (hyp)")
    ap.add_argument("--json", help="also write the JSON summary to this file")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads")
    ap.add_argument("--steps", type=int, default=1000, help="training steps (1000)")
    ap.add_argument("--spm-alpha", type=float, default=None,
                    help="subword regularization: sample each training sentence's "
                         "segmentation every epoch (tgrad train --spm-alpha)")
    ap.add_argument("--spm-nbest", type=int, default=64,
                    help="--spm-alpha: among the L best segmentations (64)")
    ap.add_argument("--keep-best", action="store_true",
                    help="decode the test set with the evaluation of the highest validation "
                         "BLEU (tgrad train --keep-best), not the last")
    ap.add_argument("--batch-tokens", type=int, default=2048,
                    help="padded positions per batch, n * max(S, T) (2048)")
    ap.add_argument("--max-len", type=int, default=128,
                    help="longest sequence, tgrad's --seq-len (128)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d-ff", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=3, help="encoder layers (3)")
    ap.add_argument("--decoder-layers", type=int, default=3, help="decoder layers (3)")
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--attn-dropout", type=float, default=None,
                    help="dropout on the attention weights (default: --dropout's)")
    ap.add_argument("--act-dropout", type=float, default=None,
                    help="dropout inside the FFN after the activation (default: --dropout's)")
    ap.add_argument("--post-norm", action="store_true", help="post-norm (default pre-norm)")
    ap.add_argument("--activation", choices=["relu", "gelu"], default="relu")
    ap.add_argument("--pos", choices=["learned", "sinusoidal"], default="sinusoidal")
    ap.add_argument("--no-tie", action="store_true", help="separate output head weights")
    ap.add_argument("--no-scale-embedding", dest="scale_embedding", action="store_false",
                    help="embeddings not multiplied by sqrt(D) (default: multiplied)")
    ap.add_argument("--embed-std", type=float, default=None,
                    help="tok_emb initialised N(0, std^2) (default: d_model^-0.5 with the "
                         "embedding scale, as tgrad --pairs and fairseq; 1 without it)")
    ap.add_argument("--label-smoothing", type=float, default=0.1)
    ap.add_argument("--lr", type=float, default=0.5,
                    help="noam: the factor (0.5); cosine: the peak learning rate")
    ap.add_argument("--schedule", choices=["noam", "cosine"], default="noam",
                    help="noam (the paper's) or cosine: linear warmup to --lr, then cosine "
                         "decay to --min-lr at the last step (tg_lr_warmup_cosine)")
    ap.add_argument("--min-lr", type=float, default=None,
                    help="cosine: the final learning rate (--lr / 10)")
    ap.add_argument("--warmup", type=int, default=400)
    ap.add_argument("--beta2", type=float, default=0.98)
    ap.add_argument("--eps", type=float, default=1e-9)
    ap.add_argument("--clip", type=float, default=1.0, help="max grad norm (1.0; 0: none)")
    ap.add_argument("--eval-every", type=int, default=500,
                    help="evaluate every N steps and after the last (500; 0: never)")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--lenpen", type=float, default=1.0)
    ap.add_argument("--no-repeat-ngram", type=int, default=0,
                    help="no output repeats an n-gram of N tokens (0: off)")
    ap.add_argument("--max-len-a", type=float, default=1.5)
    ap.add_argument("--max-len-b", type=float, default=10)
    ap.add_argument("--decode-batch", type=int, default=64, help="sentences per decoding batch")
    ap.add_argument("--log", help="CSV: step,train_loss,val_loss,val_bleu,lr")
    ap.add_argument("--keep-last", type=int, default=0,
                    help="keep the parameters of the last N saves (each evaluation and the "
                    "last step), as tgrad train --keep-last N (0: none)")
    ap.add_argument("--average", action="store_true",
                    help="with --keep-last: evaluate and decode with the mean of the kept "
                    "parameters, as tgrad average")
    a = ap.parse_args(argv)
    if not 0 <= a.keep_last <= 20:
        ap.error("--keep-last must be from 0 to 20 (tgrad's bound)")
    if a.average and (a.keep_last == 0 or a.load):
        ap.error("--average needs --keep-last N (and training: not with --load)")
    if a.spm_alpha is not None and not (0 <= a.spm_alpha <= 100 and 1 <= a.spm_nbest <= 1024):
        ap.error("--spm-alpha must be in [0, 100] and --spm-nbest in [1, 1024] (tgrad's bounds)")
    if a.average and a.keep_best:
        ap.error("--average and --keep-best each choose the weights to decode with: give one")
    if a.load is None and (a.train is None or a.valid is None):
        ap.error("--train and --valid are required (unless --load)")
    if a.batch_tokens < a.max_len:
        ap.error("--batch-tokens must be >= --max-len")
    if a.steps < 0 or a.eval_every < 0 or a.threads < 1:
        ap.error("--steps, --eval-every must be >= 0 and --threads >= 1")
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    need_bleu = a.decode != "none" or (a.load is None and a.eval_every > 0 and a.steps > 0)
    summary = {"tool": "translate_reference", "threads": a.threads,
               "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
               "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
               "torch": torch.__version__, "steps": 0, "train_s": 0.0, "tokens_per_s": None,
               "src_tgt_tokens_per_s": None, "padded_per_s": None, "val_loss": None,
               "val_bleu": None, "params": None, "peak_rss_mb": None, "test": {}}
    try:
        BLEU, CHRF = import_sacrebleu(a.sacrebleu_path) if need_bleu else (None, None)
        vocab = Vocab(a.spm)
        if a.load:
            model, config = load_model(a.load)
            if config["vocab_size"] != vocab.size:
                raise InputError(f"{a.load}: vocabulary {config['vocab_size']}, but --spm has "
                                 f"{vocab.size} pieces")
            a.max_len = config["max_seq_len"]
            a.steps = 0
        test_pairs = read_pairs(a.test)
        test = make_sequences(vocab, test_pairs, a.max_len)
        if not a.load:
            train_pairs = read_pairs(a.train)
            train = make_sequences(vocab, train_pairs, a.max_len)
            if a.spm_alpha is not None:
                try:  # a BPE model gives no n-best list (or raises, by version)
                    ok = len(vocab.sp.NBestEncodeAsImmutableProto("a", 2).nbests) > 0
                except RuntimeError:
                    ok = False
                if not ok:
                    raise InputError(f"{a.spm}: --spm-alpha samples the segmentations of a "
                                     "unigram model; this one has one per sentence")
            if a.spm_alpha is not None and a.batch_tokens < a.max_len:
                raise InputError(f"--batch-tokens {a.batch_tokens} is smaller than --max-len "
                                 f"{a.max_len}, which a sampled segmentation can reach")
            valid_pairs = read_pairs(a.valid)
            valid = make_sequences(vocab, valid_pairs, a.max_len)
            lengths = [(len(s), len(d)) for s, d, _ in train]
            epoch_batches(lengths[:1], a.batch_tokens, a.seed, 0)  # the budget check
    except InputError as e:
        print(f"translate_reference: {e}", file=sys.stderr)
        return 1

    if not a.load:
        model = Seq2Seq(vocab.size, max_seq_len=a.max_len, n_layers=a.layers,
                        n_decoder_layers=a.decoder_layers, d_model=a.d_model, n_heads=a.heads,
                        d_ff=a.d_ff, activation=a.activation, norm_first=not a.post_norm,
                        pos=a.pos, tie_weights=not a.no_tie,
                        scale_embedding=a.scale_embedding, dropout=a.dropout,
                        attn_dropout=a.attn_dropout, act_dropout=a.act_dropout)
        std = a.embed_std if a.embed_std is not None else (
            a.d_model ** -0.5 if a.scale_embedding else 1.0)
        if std != 1.0:
            nn.init.normal_(model.tok_emb.weight, std=std)
    n_params = sum(p.numel() for p in model.parameters())
    summary["params"] = n_params
    if a.load:
        print(f"model {a.load}: parameters {n_params}; test {len(test)}; threads {a.threads}")
    else:
        opt = torch.optim.Adam(model.parameters(), lr=a.lr, betas=(0.9, a.beta2), eps=a.eps)
        d_inv = a.d_model ** -0.5

        def noam(k):  # LambdaLR's k = 0 is the first update: step 1
            s = k + 1
            return d_inv * min(s ** -0.5, s * a.warmup ** -1.5)

        min_lr = a.lr / 10 if a.min_lr is None else a.min_lr

        def cosine(k):  # tg_lr_warmup_cosine(k, steps, warmup, lr, min_lr) / lr
            if a.warmup > 0 and k < a.warmup:
                return (k + 1.0) / a.warmup
            if a.steps <= a.warmup:
                return 1.0
            progress = min(1.0, (k - a.warmup) / (a.steps - a.warmup))
            lr = min_lr + 0.5 * (a.lr - min_lr) * (1 + math.cos(math.pi * progress))
            return lr / a.lr if a.lr else 0.0

        sched = torch.optim.lr_scheduler.LambdaLR(opt, noam if a.schedule == "noam" else cosine)
        print(f"train {len(train)} pairs, valid {len(valid)}, test {len(test)}; vocabulary "
              f"{vocab.size}; parameters {n_params}; threads {a.threads}")
    log = open(a.log, "w") if a.log and not a.load else None
    if log:
        log.write("step,train_loss,val_loss,val_bleu,lr\n")

    def valid_bleu():
        hyps = translate(model, vocab, [s for s, _, _ in valid], a.max_len_a, a.max_len_b,
                         a.max_len, 1, a.lenpen, a.decode_batch)
        return BLEU().corpus_score([vocab.decode(h) for h in hyps],
                                   [[d for _, d in valid_pairs]]).score

    epoch, batches, bi = 0, None, 0
    best = (-1.0, 0, None)  # --keep-best: (val BLEU, step, state)
    kept = []  # --keep-last: the parameters of the last saves, oldest first
    real_tgt = real_all = padded = 0
    train_time = 0.0
    for step in range(1, a.steps + 1):
        t0 = time.perf_counter()  # a step: the epoch's plan when it starts, as tgrad's
        if batches is None or bi == len(batches):
            if batches is not None:
                epoch, bi = epoch + 1, 0
            if a.spm_alpha is not None:  # this epoch's segmentations, then its plan
                train = sampled_sequences(vocab, train_pairs, a.max_len, a.spm_nbest,
                                          a.spm_alpha, a.seed, epoch)
                lengths = [(len(s), len(d)) for s, d, _ in train]
            batches = epoch_batches(lengths, a.batch_tokens, a.seed, epoch)
        idx = batches[bi]
        bi += 1
        model.train()
        src, mask, dec, lab = collate(train, idx, vocab.pad)
        logits = model(src, dec, mask)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), lab.reshape(-1),
                               ignore_index=-100, label_smoothing=a.label_smoothing)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        lr = opt.param_groups[0]["lr"]
        opt.step()
        sched.step()
        train_time += time.perf_counter() - t0
        nt = int((lab != -100).sum())
        real_tgt += nt
        real_all += nt + int((~mask).sum())
        padded += src.numel() + dec.numel()
        if a.eval_every > 0 and (step % a.eval_every == 0 or step == a.steps):
            vl = valid_loss(model, valid, vocab.pad, a.batch_tokens)
            vb = valid_bleu()
            summary["val_loss"], summary["val_bleu"] = vl, vb
            if a.keep_best and vb > best[0]:  # strictly higher, as tgrad's --keep-best
                best = (vb, step, copy.deepcopy(model.state_dict()))
            print(f"step {step:6d}  epoch {epoch + 1} ({bi}/{len(batches)})  loss "
                  f"{loss.item():.4f}  val loss {vl:.4f}  val BLEU {vb:.2f}  lr {lr:.3g}  "
                  f"{real_tgt / train_time:.0f} tgt tok/s", flush=True)
            if log:
                log.write(f"{step},{loss.item():.6f},{vl:.6f},{vb:.4f},{lr:.6g}\n")
                log.flush()
        elif log:
            log.write(f"{step},{loss.item():.6f},,,{lr:.6g}\n")
            log.flush()
        # tgrad's saves: every evaluation (every --eval-every steps) and the last step
        if a.keep_last and ((a.eval_every > 0 and step % a.eval_every == 0) or
                            step == a.steps):
            kept = (kept + [kept_parameters(model)])[-a.keep_last:]
    if log:
        log.close()
    if a.average and kept:
        average_parameters(model, kept)
        summary["averaged"] = len(kept)
        if a.eval_every > 0:
            vl, vb = valid_loss(model, valid, vocab.pad, a.batch_tokens), valid_bleu()
            summary["val_loss"], summary["val_bleu"] = vl, vb
            print(f"average of the last {len(kept)} saves: val loss {vl:.4f}  val BLEU "
                  f"{vb:.2f}", flush=True)
    if a.steps > 0:
        print(f"training: {a.steps} steps in {train_time:.1f} s (batch plan, collation, forward, "
              f"backward, update; evaluations excluded): {real_tgt / train_time:.0f} target tokens/s "
              f"(real, no padding), {real_all / train_time:.0f} source+target tokens/s (real), "
              f"{padded / train_time:.0f} padded positions/s")
        summary.update(steps=a.steps, train_s=train_time, tokens_per_s=real_tgt / train_time,
                       src_tgt_tokens_per_s=real_all / train_time,
                       padded_per_s=padded / train_time)

    if a.keep_best and best[2] is not None:
        model.load_state_dict(best[2])
        summary["best_step"], summary["best_val_bleu"] = best[1], best[0]
        print(f"best: step {best[1]}, val BLEU {best[0]:.2f} (decoding with it)")
    refs = [d for _, d in test_pairs]
    srcs = [s for s, _, _ in test]
    beams = {"both": (1, a.beam), "greedy": (1,), "beam": (a.beam,), "none": ()}[a.decode]
    for beam in beams:
        t0 = time.perf_counter()
        hyps = translate(model, vocab, srcs, a.max_len_a, a.max_len_b, a.max_len, beam,
                         a.lenpen, a.decode_batch, a.no_repeat_ngram)
        dt = time.perf_counter() - t0
        text = [vocab.decode(h) for h in hyps]
        name = "greedy" if beam == 1 else f"beam{beam}"
        with open(f"{a.out_prefix}.{name}.txt", "w", encoding="utf-8") as f:
            f.writelines(t + "\n" for t in text)
        bleu = BLEU().corpus_score(text, [refs])
        chrf = CHRF().corpus_score(text, [refs])
        print(f"test {name}: {bleu}  {chrf}  ({len(srcs)} sentences in {dt:.1f} s, "
              f"{len(srcs) / dt:.1f} sentences/s)")
        summary["test"][name] = {"bleu": bleu.score, "chrf": chrf.score, "seconds": dt,
                                 "sentences": len(srcs), "sentences_per_s": len(srcs) / dt}
    summary["peak_rss_mb"] = rss_mb()
    print(f"peak RSS {summary['peak_rss_mb']:.0f} MB")
    line = json.dumps(summary)
    if a.json:
        with open(a.json, "w") as f:
            f.write(line + "\n")
    print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
