/*
 * bench_work.h - the module and training workloads of `tgrad bench` (bench_work.c), also built
 * as the shared library libtgbench.so (linked to libtgrad.so) that tools/bench/bench_torch.py loads
 * with ctypes, so both tools time exactly the same graphs.
 *
 * A workload is a graph built once (and warmed up) at a given thread count and compute
 * precision (tg_graph_opts.precision: the data is f32 either way, TG_PRECISION_BF16 rounds the
 * operands of the matrix products to bf16); a sample runs it `reps` times and returns the
 * seconds per run. Workloads (names as accepted by bw_new()):
 *   sdpa-64x5x64-fwd, -fwdbwd     tg_sdpa on q, k, v (64, 5, 64): 64 = batch x heads, T 5,
 *                                 d_k 64 (tgrad's SDPA takes (..., T, d_k)), no mask
 *   mha-8x128-fwd, -fwdbwd        self-attention tg_mha_forward, (B 8, T 128, D 512), 8 heads
 *   mha-64x5-fwd, -fwdbwd         the same at (B 64, T 5)
 *   encoder-8x128-fwd, -fwdbwd    tg_encoder_layer_forward, D 512, 8 heads, d_ff 2048, ReLU,
 *                                 post-norm, dropout 0 (PyTorch's nn.TransformerEncoderLayer
 *                                 defaults with dropout 0), no mask, (B 8, T 128)
 *   encoder-64x5-fwd, -fwdbwd     the same at (B 64, T 5)
 *   encoder-8x128-jvp             the (8, 128) layer's output and its JVP along a random
 *                                 tangent of x (tg_jvp), forward only
 *   encoder-8x128-hvp             the HVP of mean(output) along random directions of x and
 *                                 every parameter (tg_hvp: reverse over reverse), forward only
 *   train                         one training step of `tgrad train --text`'s default model
 *                                 (2 pre-norm layers, D 128, 4 heads, d_ff 512, learned
 *                                 positions, causal, vocabulary 86 = the license texts', batch
 *                                 32, seq 64): zero grads, forward, cross-entropy, backward,
 *                                 clip at 1.0, AdamW (lr 3e-3, weight decay 0.01). The batch is
 *                                 fixed random tokens (data loading is not timed).
 * "fwdbwd" = forward, the mean of the output as the loss, backward (parameter and input
 * gradients). Loss reductions are part of both tools' graphs.
 */
#ifndef TG_BENCH_WORK_H
#define TG_BENCH_WORK_H

#include <stddef.h>
#include <stdint.h>

#include "tgrad_train.h"

typedef struct bw_work bw_work;

/* Number of workloads; the i-th one's name (NULL past the end). */
int bw_count(void);
const char *bw_name(int i);

/* Build and warm up workload @p name at @p threads threads (>= 1), with fused ops unless
 * @p unfused (tg_ctx_set_fusion), its graph built with compute precision @p precision
 * (TG_PRECISION_F32 or TG_PRECISION_BF16, tg_graph_opts.precision; for train the one graph of
 * the step: forward, loss and backward; clipping and AdamW are f32 either way). @p tiny
 * shrinks every shape (a smoke test: d_model 16, (B 2, T 4), ...). NULL on failure with a
 * message in @p err. */
bw_work *bw_new(const char *name, int threads, int unfused, int precision, int tiny, char *err,
                size_t n);

/* Change the thread count of a built workload. */
void bw_set_threads(bw_work *w, int threads);

/* Seconds per run over @p reps runs; NAN on failure (see bw_error()). */
double bw_sample(bw_work *w, int reps);

/* Runs per sample so that a sample lasts about @p target_s seconds (at least 1). */
int bw_reps(bw_work *w, double target_s);

/* Tokens (B T) per run; a short description of the shapes; the last error message. */
double bw_tokens(const bw_work *w);
const char *bw_label(const bw_work *w);
const char *bw_error(const bw_work *w);

void bw_free(bw_work *w);

/* The default text model of `tgrad train --text` with vocabulary @p vocab and seq_len @p seq_len
 * (2 pre-norm layers, d_model 128, 4 heads, d_ff 512, learned positions, causal); @p tiny
 * shrinks it (1 layer, d_model 16, 2 heads, d_ff 32). Used by the train and sample workloads. */
tg_transformer_config bw_text_model_config(int64_t vocab, int64_t seq_len, int tiny);

#endif
