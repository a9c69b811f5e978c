/**
 * @file tgrad_train.h
 * @brief Training: optimizers with PyTorch's update formulas, gradient clipping, learning-rate
 *        schedule, a transformer model (decoder-only LM or per-position encoder classifier),
 *        and checkpoints (safetensors with optimizer state and metadata, saved atomically).
 */
#ifndef TGRAD_TRAIN_H
#define TGRAD_TRAIN_H

#include "tgrad.h"
#include "tgrad_data.h"
#include "tgrad_io.h"
#include "tgrad_nn.h"

#include <signal.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------ */
/** @name Optimizers */
/**@{*/
/** Optimizer algorithm. */
typedef enum tg_optim_kind {
    TG_OPTIM_SGD = 0,   /**< torch.optim.SGD (momentum, dampening, nesterov, weight decay) */
    TG_OPTIM_ADAM = 1,  /**< torch.optim.Adam (L2 weight decay added to the gradient) */
    TG_OPTIM_ADAMW = 2  /**< torch.optim.AdamW (decoupled weight decay) */
} tg_optim_kind;

/** Hyperparameters; tg_optim_defaults() gives PyTorch's defaults. */
typedef struct tg_optim_config {
    tg_optim_kind kind;
    double lr;           /**< SGD 1e-2 (PyTorch requires one), Adam/AdamW 1e-3 */
    double momentum;     /**< SGD only, default 0 */
    double dampening;    /**< SGD only, default 0 */
    bool nesterov;       /**< SGD only, default false */
    double weight_decay; /**< SGD/Adam 0, AdamW 1e-2 */
    double beta1, beta2; /**< 0.9, 0.999 */
    double eps;          /**< 1e-8 */
} tg_optim_config;

/** PyTorch's defaults for @p kind. */
TG_API tg_optim_config tg_optim_defaults(tg_optim_kind kind);

typedef struct tg_optim tg_optim;

/**
 * Create an optimizer over @p n parameters (@p params NULL: every parameter of the context, in
 * creation order). State tensors (same shape and dtype as each parameter, zero) are created in
 * the context and named `sgd.momentum.<name>`, `adam.m.<name>`, `adam.v.<name>`.
 * Errors: ::TG_ERR_ARG (bad hyperparameters: lr < 0, betas outside [0, 1), eps <= 0, nesterov
 * without momentum or with dampening; an entry of @p params NULL, not a parameter, of another
 * context, or listed twice: `parameter 'w' is listed twice (entries 0 and 2)`),
 * ::TG_ERR_NOMEM. Owned by the context.
 */
TG_API tg_optim *tg_optim_new(tg_ctx *ctx, const tg_optim_config *cfg, int64_t n,
                              tg_tensor *const *params);

/**
 * One update with learning rate @p lr (< 0: the configured lr), from the parameters' current
 * gradients. Formulas are PyTorch's (single-tensor implementations):
 * - SGD: g = grad + wd p; b = momentum b + (1 - dampening) g (b = g at the first step);
 *   g = nesterov ? g + momentum b : b; p -= lr g.
 * - Adam: g = grad + wd p. AdamW: p *= 1 - lr wd. Both: m = b1 m + (1 - b1) g,
 *   v = b2 v + (1 - b2) g^2, p -= (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps).
 * A parameter without a gradient buffer (in no graph built for backward) is skipped, as PyTorch
 * skips `grad is None`. If any gradient is NaN or infinite nothing is changed (parameters,
 * state, step count) and ::TG_ERR_NONFINITE is returned with a message naming the parameter.
 * The same holds when the gradients are finite but the update is not: a new parameter value
 * or optimizer state would be NaN or infinite (a huge learning rate or gradient, a NaN
 * already in the state): `the update of 'w' is not finite at element 3 (...); parameters
 * left unchanged`. (The step computes every update once without writing, then applies them.)
 */
TG_API tg_status tg_optim_step(tg_optim *opt, double lr);
/** Number of successful steps taken (t). */
TG_API int64_t tg_optim_steps(const tg_optim *opt);
/** Set the step count (when restoring a checkpoint). */
TG_API void tg_optim_set_steps(tg_optim *opt, int64_t t);
/** Number of state tensors; the i-th one (names as in tg_optim_new()). */
TG_API int64_t tg_optim_n_state(const tg_optim *opt);
TG_API tg_tensor *tg_optim_state(const tg_optim *opt, int64_t i);
/** Bytes of optimizer state (Adam's two moments, SGD's momentum buffer; 0 for plain SGD).
 *  Not part of any graph's tg_graph_memory() report. */
TG_API size_t tg_optim_state_bytes(const tg_optim *opt);
/** The parameters the optimizer updates. */
TG_API int64_t tg_optim_n_params(const tg_optim *opt);
TG_API tg_tensor *tg_optim_param(const tg_optim *opt, int64_t i);

/**
 * Global L2 norm of the gradients of @p n parameters (NULL: all of the context's), summed in a
 * fixed order in double. Parameters without a gradient buffer (and NULL entries) count as zero.
 * Errors: NaN is returned with a run-time ::TG_ERR_ARG recorded for n < 0 or an entry of
 * another context (`entry 0 ('w') belongs to another context`).
 */
TG_API double tg_grad_norm(tg_ctx *ctx, int64_t n, tg_tensor *const *params);
/**
 * Clip gradients by global norm (torch.nn.utils.clip_grad_norm_): when
 * max_norm / (norm + 1e-6) < 1 (the norm exceeds max_norm, up to the 1e-6), scale every
 * gradient by that factor. Returns the norm before
 * clipping in @p norm_out. A non-finite norm leaves the gradients alone and returns
 * ::TG_ERR_NONFINITE. Errors (run-time): ::TG_ERR_ARG (max_norm <= 0, n < 0, an entry of
 * another context: nothing is scaled).
 */
TG_API tg_status tg_clip_grad_norm(tg_ctx *ctx, int64_t n, tg_tensor *const *params,
                                   double max_norm, double *norm_out);

/**
 * Learning rate at @p step (0-based) of @p total: linear warmup from 0 over @p warmup steps
 * (lr = base (step + 1) / warmup), then cosine decay from @p base to @p min_lr at step total.
 */
TG_API double tg_lr_warmup_cosine(int64_t step, int64_t total, int64_t warmup, double base,
                                  double min_lr);
/**
 * The Transformer's learning rate schedule (Vaswani et al. 2017, "Attention Is All You Need",
 * sec. 5.3, eq. 3; the "Noam" schedule of tensor2tensor and the Annotated Transformer):
 *   lr = factor * d_model^-0.5 * min(n^-0.5, n * warmup^-1.5),   n = step + 1,
 * a linear rise for the first @p warmup updates to factor * (d_model * warmup)^-0.5 at
 * n = warmup, then decay proportional to n^-0.5 (the paper: factor 1, warmup 4000).
 * @p step is the 0-based index of the update, as for tg_lr_warmup_cosine() (the two are
 * interchangeable in a loop `for (step = 0; ...) tg_optim_step(opt, lr(step))`); the paper's
 * step_num n counts from 1, so the first update (step 0) gets the value at n = 1, never 0 and
 * never a division by zero. In PyTorch terms: `LambdaLR(opt, lambda e: d_model**-0.5 *
 * min((e + 1)**-0.5, (e + 1) * warmup**-1.5))` with the optimizer's lr = factor, read before
 * each `optimizer.step()`. A negative @p step counts as 0; @p warmup <= 0 means no warmup
 * (lr = factor * (d_model n)^-0.5, the formula's limit). Computed with pow() in the order
 * written, so it matches Python's `factor * d_model ** -0.5 * min(n ** -0.5, n * warmup **
 * -1.5)` to the last bit on the same C library.
 * Errors (no context): NaN for d_model < 1 or factor negative, NaN or infinite (tg_optim_step()
 * refuses a NaN learning rate, where a negative one would mean "the configured lr").
 */
TG_API double tg_lr_noam(int64_t step, int64_t d_model, int64_t warmup, double factor);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name Gradient accumulation over micro-batches
 * An optimizer step over a global batch split into K micro-batches: run forward and backward on
 * each micro-batch (its loss scaled by its share of the global batch, 1/K for equal ones, so
 * the sum is the gradient of the global mean), pack its gradients with tg_grad_accum_push(),
 * and let tg_grad_accum_finish() write the sum into the parameters' gradients, then clip and
 * step as usual:
 * @code
 *   tg_grad_accum *acc = tg_grad_accum_new(ctx, 0, NULL, K, 0, K);
 *   for (int64_t i = 0; i < K; i++) {
 *       tg_graph_zero_grad(g);              // set micro-batch i's inputs first
 *       tg_graph_forward(g); tg_graph_backward(g, loss, NULL);
 *       tg_grad_accum_push(acc, tg_get(loss, 0));
 *   }
 *   double l; tg_grad_accum_finish(acc, &l); // gradients = the tree sum; l = the global loss
 *   tg_optim_step(opt, lr);
 * @endcode
 *
 * **Summation order.** The K gradients are summed in a fixed binary tree over the micro-batch
 * index, never in arrival order: node(a, n) (micro-batches a .. a+n-1) is a leaf for n = 1 and
 * otherwise node(a, s) + node(a+s, n-s), s the largest power of two below n. For K = 4:
 * (g0 + g1) + (g2 + g3); for K = 6: ((g0 + g1) + (g2 + g3)) + (g4 + g5); for K = 3:
 * (g0 + g1) + g2. Pairs (0,1), (2,3), ... are added first, then pairs of pairs, an odd last
 * node carried up. Each element is summed by one thread, so the result does not depend on the
 * thread count, and K = 1 leaves the gradients exactly as backward wrote them.
 * An accumulator keeps at most log2(K) + 2 packed copies of the gradients.
 *
 * **Several processes.** A process that holds micro-batches [first, first+count) of the K
 * (part p of P holds [p K/P, (p+1) K/P)) pushes only those and combines with the others through
 * tg_grad_accum_combine() and a ::tg_grad_transport (tgrad_dist.h gives one over MPI); the
 * result is bitwise the single-process tree sum for every P that divides K.
 */
/**@{*/
typedef struct tg_grad_accum tg_grad_accum;

/**
 * An accumulator over the gradients of @p n parameters (@p params NULL: every parameter of the
 * context, in creation order; all of one float dtype) for @p k micro-batches per step, of which
 * this process pushes micro-batches @p first .. @p first + @p count - 1 (one process: 0, k).
 * Errors (NULL, message on the context): ::TG_ERR_ARG (k < 1, a range outside [0, k), count < 1,
 * no parameters, NULL entries), ::TG_ERR_DTYPE (mixed or i32 parameters), ::TG_ERR_NOMEM.
 * Owned by the context; tg_grad_accum_free() releases its buffers early.
 */
TG_API tg_grad_accum *tg_grad_accum_new(tg_ctx *ctx, int64_t n, tg_tensor *const *params,
                                        int64_t k, int64_t first, int64_t count);
/**
 * Pack the parameters' current gradients (a parameter without a gradient buffer counts as
 * zero) and @p loss as the next micro-batch (first, first + 1, ...), and add every pair of
 * tree siblings now complete. Read-only on the gradients: zero them before the next backward.
 * Errors (run-time): ::TG_ERR_STATE if all @p count micro-batches of the step were pushed
 * (finish or combine first), ::TG_ERR_NOMEM (nothing pushed).
 */
TG_API tg_status tg_grad_accum_push(tg_grad_accum *acc, double loss);
/**
 * End a single-process step: write the tree sum of the K pushed gradients into the parameters'
 * gradient buffers (parameters without one are skipped) and the tree sum of the pushed losses
 * into @p loss (may be NULL); the accumulator is then empty for the next step.
 * Errors (run-time): ::TG_ERR_STATE unless this accumulator holds all K micro-batches and all
 * were pushed.
 */
TG_API tg_status tg_grad_accum_finish(tg_grad_accum *acc, double *loss);
/** Micro-batches per step (k), and the first and count of this process's. */
TG_API int64_t tg_grad_accum_k(const tg_grad_accum *acc);
TG_API int64_t tg_grad_accum_first(const tg_grad_accum *acc);
TG_API int64_t tg_grad_accum_count(const tg_grad_accum *acc);
/** Bytes of one packed copy: the gradients in their dtype, then the loss as a double. */
TG_API size_t tg_grad_accum_bytes(const tg_grad_accum *acc);
/** Release the accumulator's buffers (NULL: no-op). */
TG_API void tg_grad_accum_free(tg_grad_accum *acc);

/**
 * Point-to-point byte transport between the P parts of a step (processes, hosts). Each call
 * blocks until its buffer may be reused (send) or is filled (recv, sendrecv) and returns 0, or
 * non-zero after a failure (a peer died, a network error), with a line in @p err of @p n bytes.
 * Messages between two parts arrive in the order they were sent.
 */
typedef struct tg_grad_transport {
    void *user;       /**< passed to the callbacks */
    int part;         /**< this process's part p, in [0, n_parts) */
    int n_parts;      /**< P, which must divide k */
    size_t bucket_bytes; /**< largest message; 0: 4 MiB. Buffers go out in buckets of this size */
    int (*send)(void *user, int to, const void *buf, size_t bytes, char *err, size_t n);
    int (*recv)(void *user, int from, void *buf, size_t bytes, char *err, size_t n);
    /** Send @p sbuf to @p peer and receive as many bytes from it into @p rbuf at once. */
    int (*sendrecv)(void *user, int peer, const void *sbuf, void *rbuf, size_t bytes, char *err,
                    size_t n);
} tg_grad_transport;

/**
 * End a step over P parts: every part calls this after pushing its count = k/P micro-batches;
 * on return every part holds, in its parameters' gradients and @p loss, the same bits as
 * tg_grad_accum_finish() of one process that pushed all k.
 * - P and k/P powers of two: recursive doubling. In round l part p exchanges its whole buffer
 *   with part p XOR 2^l and both add (lower part's sum on the left): log2(P) rounds, each
 *   sending tg_grad_accum_bytes() per part.
 * - otherwise: the tree nodes that span parts are added at the part holding their first
 *   micro-batch (the right child is sent there), and part 0 then broadcasts the root along a
 *   binomial tree. Every part walks the same schedule, so the blocking calls pair up.
 * @p bytes_sent (may be NULL): bytes this part sent.
 * Errors (run-time): ::TG_ERR_ARG (P does not divide k, or this part's range is not
 * [p k/P, (p+1) k/P)), ::TG_ERR_STATE (not all count pushed), ::TG_ERR_IO (a transport call
 * failed: its message; gradients unchanged), ::TG_ERR_NOMEM.
 */
TG_API tg_status tg_grad_accum_combine(tg_grad_accum *acc, const tg_grad_transport *tr,
                                       double *loss, size_t *bytes_sent);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name One training step and evaluation
 * The training loop's two library pieces: tg_train_step() (micro-batches, their gradients
 * summed in the fixed tree of tg_grad_accum, clipping, the optimizer update) and
 * tg_evaluate() (a validation loss per token over batches). The caller keeps its graph and
 * data: a callback fills micro-batch (or evaluation batch) i and runs it.
 * @code
 *   // K micro-batches of Bm rows; each loss a mean over its rows, seeded 1/K
 *   static tg_status micro(void *u, int64_t i, double *loss) {
 *       my_run *r = u;
 *       tg_graph_zero_grad(r->g);
 *       set_inputs(r, i);                               // rows i Bm .. (i+1) Bm - 1
 *       tg_status s = tg_graph_forward(r->g);
 *       if (s == TG_OK) s = tg_graph_backward(r->g, r->loss, r->K > 1 ? r->share : NULL);
 *       *loss = tg_get(r->loss, 0) / (double)r->K;      // its share of the global mean
 *       return s;
 *   }
 *   tg_train_step_opts o = {.clip = 1.0, .accum = K > 1 ? acc : NULL};
 *   tg_train_step_result res;
 *   tg_status s = tg_train_step(ctx, opt, &o, micro, &run, lr, &res);
 * @endcode
 */
/**@{*/

/**
 * Run micro-batch @p i (0-based, in [0, K)) of the step: fill its inputs, run forward and
 * backward, and leave in the parameters' gradients the gradient of its weighted loss (zero
 * them first, or use a backward that replaces them, e.g. tg_seq2seq_loss_backward()); write
 * that weighted loss to @p loss. The weights are the caller's: for K micro-batches of equal
 * size, each loss times 1/K (a backward seeded 1/K), so the step's loss and gradients are those
 * of the global batch's mean. Return ::TG_OK, or a status with the error on the context (the
 * step stops there).
 */
typedef tg_status (*tg_micro_batch_fn)(void *user, int64_t i, double *loss);

/**
 * Several processes (data parallelism): how a step that pushed this process's micro-batches
 * ends. tgrad's own program implements it over MPI (tgrad_dist.h: tg_dist_reduce() and
 * tg_dist_bcast()); NULL in ::tg_train_step_opts means one process.
 */
typedef struct tg_train_sync {
    void *user; /**< passed to both callbacks */
    /** End the step across processes: every process gets the tree sum of all K micro-batches'
     *  gradients in its parameters and of their losses in @p loss (e.g.
     *  tg_grad_accum_combine()). NULL: tg_grad_accum_finish(). */
    tg_status (*reduce)(void *user, tg_grad_accum *acc, double *loss);
    /** Copy @p bytes at @p buf from the process running micro-batch 0 to every process. NULL:
     *  nothing to do (one process). */
    tg_status (*broadcast)(void *user, void *buf, size_t bytes);
} tg_train_sync;

/** Options of tg_train_step(); zero-initialised: no accumulation, no clipping, one process. */
typedef struct tg_train_step_opts {
    /** > 0: clip the gradients to this global L2 norm first (tg_clip_grad_norm() over the
     *  optimizer's parameters); <= 0: no clipping. */
    double clip;
    /** NULL: one micro-batch (K = 1) run exactly as a plain forward and backward. Otherwise
     *  the accumulator (tg_grad_accum_new() over the optimizer's parameters) gives K and this
     *  process's micro-batches first .. first + count - 1. */
    tg_grad_accum *accum;
    /** Several processes (only with @c accum); NULL: one process. */
    const tg_train_sync *sync;
} tg_train_step_opts;

/** Which part of a step failed (::tg_train_step_result). */
typedef enum tg_train_stage {
    TG_TRAIN_STAGE_NONE = 0,   /**< the step succeeded */
    TG_TRAIN_STAGE_BATCH = 1,  /**< a micro-batch callback, the accumulation or the sync */
    TG_TRAIN_STAGE_UPDATE = 2  /**< a non-finite loss, clipping or the optimizer update
                                    (::TG_ERR_NONFINITE: the parameters are unchanged) */
} tg_train_stage;

/** What a step did. */
typedef struct tg_train_step_result {
    double loss;      /**< the step's loss: the micro-batches' weighted losses summed in the
                           tree order (NaN if the batch stage failed) */
    double grad_norm; /**< global gradient norm before clipping (NaN without clipping) */
    tg_train_stage failed; /**< where it failed */
} tg_train_step_result;

/**
 * One optimizer step at learning rate @p lr (< 0: the optimizer's configured lr):
 * 1. K = 1 (@c opts->accum NULL): @p fn(user, 0, &loss); the gradients are what it left.
 *    K > 1: for each of this process's micro-batches i, @p fn(user, i, &l_i), then
 *    tg_grad_accum_push(acc, l_i); then the reduction (tg_grad_accum_finish(), or the sync's
 *    reduce) writes the tree sum of the gradients into the parameters and of the l_i into the
 *    step's loss. **Random numbers** (dropout): with state S when the step begins, micro-batch
 *    i runs from S jumped i times (tg_rng_jump()), so its masks depend on i, never on which
 *    process runs it; afterwards the RNG continues from the state micro-batch 0 left (the
 *    sync's broadcast sends it from its process). K = 1 draws exactly as a plain
 *    forward/backward.
 * 2. A non-finite step loss stops here: ::TG_ERR_NONFINITE, "loss is not finite", parameters
 *    and optimizer unchanged.
 * 3. Clipping (@c opts->clip > 0): tg_clip_grad_norm() over the optimizer's parameters.
 * 4. tg_optim_step(opt, lr).
 * Bits: the result is the same as writing these calls out by hand, for any thread count (the
 * tree sum and every kernel are thread-count invariant).
 * @p opts may be NULL (the zero options). @p res (may be NULL) receives the loss, the norm and
 * the failing stage.
 * Errors (run-time): ::TG_ERR_ARG (NULL opt or fn; a sync without an accumulator), the
 * callback's or the reduction's status (stage BATCH: gradients partial, parameters
 * unchanged), ::TG_ERR_NONFINITE from steps 2-4 or the optimizer's other
 * errors (stage UPDATE: parameters unchanged).
 */
TG_API tg_status tg_train_step(tg_ctx *ctx, tg_optim *opt, const tg_train_step_opts *opts,
                               tg_micro_batch_fn fn, void *user, double lr,
                               tg_train_step_result *res);

/**
 * Run evaluation batch @p i (0-based, in [0, n)): fill its inputs, run forward, and write the
 * loss summed over its targets (nats; a graph's mean loss times its number of targets) to
 * @p loss_sum and that number of targets to @p tokens. Return ::TG_OK or a status with the
 * error on the context.
 */
typedef tg_status (*tg_eval_batch_fn)(void *user, int64_t i, double *loss_sum,
                                      int64_t *tokens);

/**
 * Validation loss per token over @p n batches:
 *   loss = (sum_i loss_sum_i) / (sum_i tokens_i)
 * summed in double in batch order (batches of different sizes weigh by their targets, so the
 * result is the mean over every target, whatever the batching). The callbacks run with the
 * context in evaluation mode (tg_ctx_set_training() false: no dropout); the previous mode is
 * restored afterwards. @p loss_per_token: NaN when no batch had a target (n = 0 included);
 * @p tokens (may be NULL): the targets counted.
 * Errors (run-time): ::TG_ERR_ARG (NULL ctx, fn or loss_per_token, n < 0, a batch reporting
 * tokens < 0), or the callback's status (the mode restored; loss NaN).
 */
TG_API tg_status tg_evaluate(tg_ctx *ctx, int64_t n, tg_eval_batch_fn fn, void *user,
                             double *loss_per_token, int64_t *tokens);

/**
 * The validation loss per byte of a byte-level language model on @p text's validation split
 * (tgrad_data.h): tg_evaluate() over the validation windows (tg_text_val_windows()) in batches
 * of Bm windows, Bm = the graph's batch rows. Batch i is tg_text_val_batch(text, i, Bm, T)
 * written into @p ids and @p targets, @p g run forward; @p loss must be the mean
 * cross-entropy of those targets with ignore_index -1 (tg_cross_entropy(logits, targets, -1):
 * the last batch's padding rows are ignored), so batch i counts loss * w_i T, w_i its real
 * windows, over w_i T targets:
 *   loss per byte = sum_i loss_i w_i T / sum_i w_i T.
 * `tgrad train --text` reports it (nats/char); the result is a function of the windows and
 * the parameters only, not of Bm beyond rounding.
 * Shapes: @p ids, @p targets (Bm, T) ::TG_I32 leaves of @p g; @p loss a scalar of @p g.
 * @p loss_per_token: NaN without validation windows; @p tokens (may be NULL): targets counted.
 * Errors (run-time): ::TG_ERR_ARG (NULL arguments), ::TG_ERR_SHAPE / ::TG_ERR_DTYPE (ids and
 * targets not (Bm, T) i32 alike, loss not one element), ::TG_ERR_NOMEM, those of the forward.
 */
TG_API tg_status tg_text_evaluate(tg_ctx *ctx, const tg_text *text, tg_graph *g,
                                  tg_tensor *ids, tg_tensor *targets, tg_tensor *loss,
                                  double *loss_per_token, int64_t *tokens);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name Transformer model */
/**@{*/
/** Positional information. */
typedef enum tg_pos_kind {
    TG_POS_LEARNED = 0,   /**< learned position embeddings `pos_emb.weight (max_seq_len, D)` */
    TG_POS_SINUSOIDAL = 1 /**< the paper's fixed encoding (sec. 3.5), no parameters */
} tg_pos_kind;

/** Model hyperparameters. */
typedef struct tg_transformer_config {
    int64_t vocab_size;   /**< V */
    int64_t max_seq_len;  /**< longest sequence (positions) */
    int64_t n_layers;
    tg_encoder_config layer; /**< d_model, n_heads, d_ff, activation, norm_first, eps, dropout */
    tg_pos_kind pos;
    bool causal;          /**< true: decoder-only LM (look-ahead mask); false: encoder */
    bool tie_weights;     /**< output projection shares tok_emb.weight */
    /** 0: the model above (n_layers encoder layers; causal: decoder-only LM). > 0: the
     *  encoder-decoder (sequence-to-sequence) model with n_layers encoder layers and this many
     *  decoder layers (Vaswani et al. 2017, sec. 3.1), run with
     *  tg_transformer_forward_seq2seq(); causal is then ignored (the target is always causal). */
    int64_t n_decoder_layers;
    /** Multiply the token embeddings by sqrt(d_model) before adding the positions (Vaswani
     *  et al. 2017, sec. 3.4: "we multiply those weights by sqrt(d_model)"); `tok_emb.weight`
     *  is then initialised N(0, 1/d_model), so the scaled embedding has unit variance like
     *  the positions (fairseq's transformer). false: no scaling, N(0, 1) as nn.Embedding. */
    bool scale_embeddings;
} tg_transformer_config;

/** A transformer: token (+ position) embeddings, n encoder layers, final layer norm, output
 *  projection; or (cfg.n_decoder_layers > 0) the encoder-decoder model: the same embeddings
 *  for source and target, an encoder and a decoder stack with nn.Transformer's names, the
 *  decoder's final norm, output projection. */
typedef struct tg_transformer {
    tg_transformer_config cfg;
    tg_tensor *tok_emb;   /**< (V, D) `tok_emb.weight` */
    tg_tensor *pos_emb;   /**< (max_seq_len, D) `pos_emb.weight`, NULL if sinusoidal */
    tg_encoder_layer *layers; /**< n_layers, parameters `layers.<i>.<PyTorch names>` */
    tg_tensor *norm_w, *norm_b; /**< (D) `norm.weight`, `norm.bias` (final layer norm) */
    tg_tensor *head_w;    /**< (V, D) `head.weight` (== tok_emb if tied) */
    tg_tensor *head_b;    /**< (V) `head.bias` */
    /** Encoder-decoder model only (cfg.n_decoder_layers > 0; else zeroed): `encoder.*`
     *  (n_layers layers, final norm) and `decoder.*` (n_decoder_layers, final norm) as
     *  nn.Transformer; layers is NULL and norm_w, norm_b are the decoder's `decoder.norm.*`. */
    tg_encoder_decoder seq2seq;
} tg_transformer;

/** Most encoder layers tg_transformer_init() accepts. */
#define TG_TRANSFORMER_MAX_LAYERS 65536
/** Longest max_seq_len tg_transformer_init() accepts: the one bound of every reader of a
 *  model's length (a checkpoint's `model.seq_len`, an export's `max_seq_len`:
 *  tg_transformer_meta_read(), tg_model_load(), the command line's checkpoint validation) and
 *  of `tgrad train --seq-len`. */
#define TG_TRANSFORMER_MAX_SEQ_LEN 65536

/** One parameter of a transformer config: its `state_dict` name and shape. */
typedef struct tg_param_info {
    char name[TG_NAME_MAX]; /**< e.g. "decoder.layers.5.multihead_attn.out_proj.weight" */
    int rank;               /**< 1 or 2 */
    int64_t shape[2];       /**< outermost first; shape[1] is 0 for rank 1 */
} tg_param_info;

/**
 * The parameters of a transformer config, in the order tg_transformer_init() creates them,
 * with the names and shapes tgrad's checkpoints and exports store (PyTorch `state_dict` keys;
 * nn.Transformer's for the encoder-decoder). V vocab_size, T max_seq_len, D d_model,
 * F d_ff, L n_layers, M n_decoder_layers:
 *
 *     tok_emb.weight (V, D)
 *     pos_emb.weight (T, D)                        learned positions only
 *     M = 0: layers.<i>.<encoder layer>, i < L     then norm.weight (D), norm.bias (D)
 *     M > 0: encoder.layers.<i>.<encoder layer>, i < L; encoder.norm.weight (D), .bias (D);
 *            decoder.layers.<j>.<decoder layer>, j < M; decoder.norm.weight (D), .bias (D)
 *     head.weight (V, D)                           unless tie_weights
 *     head.bias (V)
 *
 * An encoder layer (12, nn.TransformerEncoderLayer): self_attn.in_proj_weight (3D, D),
 * self_attn.in_proj_bias (3D), self_attn.out_proj.weight (D, D), self_attn.out_proj.bias (D),
 * linear1.weight (F, D), linear1.bias (F), linear2.weight (D, F), linear2.bias (D),
 * norm1.weight, norm1.bias, norm2.weight, norm2.bias (D). A decoder layer (18,
 * nn.TransformerDecoderLayer): self_attn.* (4), multihead_attn.* (the same 4), linear1.*,
 * linear2.*, norm1.*, norm2.*, norm3.* (weight, bias). So the count is 4 + 12 L (+ 2 + 18 M
 * when M > 0), + 1 with learned positions, + 1 unless tied.
 *
 * The list depends only on the config's sizes; it is the one definition checkpoint
 * validation (tg_checkpoint_check()), tg_model_load() and `tgrad export` use, and
 * tg_transformer_init() checks what it creates against it. No context, no allocation.
 * @param cfg  the config (nothing else is validated: a config tg_transformer_init() refuses
 *             still has a list)
 * @param out  receives the first min(count, @p cap) parameters; may be NULL (count only)
 * @param cap  room in @p out
 * @return the number of parameters, or -1 (nothing written) when @p cfg is NULL, n_layers or
 *         n_decoder_layers is < 0 or > ::TG_TRANSFORMER_MAX_LAYERS, or d_model > INT64_MAX / 3
 */
TG_API int64_t tg_transformer_params(const tg_transformer_config *cfg, tg_param_info *out,
                                     int64_t cap);

/**
 * Create the model's parameters (PyTorch default initialisation; embeddings N(0, 1) as
 * nn.Embedding). Every size is checked before anything is allocated: each parameter must hold
 * at most ::TG_MAX_NUMEL elements (e.g. `self_attn.in_proj_weight (3 d_model, d_model)`), their
 * total bytes must fit in size_t and, if tg_ctx_set_memory_limit() set one, within the limit,
 * so a huge configuration fails at once with one message naming the value. A failure stops the
 * build at once (nothing more is allocated). Errors: ::TG_ERR_ARG (bad config: vocab_size,
 * max_seq_len, d_model < 1, max_seq_len > ::TG_TRANSFORMER_MAX_SEQ_LEN, n_layers < 0 or > ::TG_TRANSFORMER_MAX_LAYERS, n_decoder_layers
 * < 0 or > ::TG_TRANSFORMER_MAX_LAYERS or > 0 with n_layers < 1, a layer config
 * tg_encoder_layer_init() refuses, sizes too large), ::TG_ERR_NOMEM (allocation failed or the
 * memory limit would be exceeded), or the pending build error.
 */
TG_API tg_status tg_transformer_init(tg_ctx *ctx, tg_transformer *m, tg_dtype dt,
                                     const tg_transformer_config *cfg);
/**
 * Logits of the encoder-decoder model (cfg.n_decoder_layers > 0) with teacher forcing:
 *   src = tok_emb[src_ids] + pos(S); memory = encoder(src, src_key_padding_mask)
 *   y = tok_emb[tgt_ids] + pos(T);  y = decoder(y, memory) with the causal target mask,
 *       tgt_key_padding_mask, and memory_key_padding_mask = src_key_padding_mask
 *   logits = decoder.norm(y) head_w^T + head_b     (the decoder's final norm, then the head)
 * (Vaswani et al. 2017, sec. 3.1, 3.4 (shared embeddings, times sqrt(d_model) if
 * cfg.scale_embeddings), 3.5; dropout after the embeddings as tg_transformer_forward()).
 * Shapes: src_ids (B, S), tgt_ids (B, T) ::TG_I32 with S, T <= max_seq_len, ids in [0, V);
 * the key padding masks (B, S), (B, T) (1 = padding) or NULL -> logits (B, T, V).
 * Errors: ::TG_ERR_ARG (a model without decoder layers: use tg_transformer_forward()),
 * ::TG_ERR_SHAPE (ranks, lengths, batch sizes differ, mask shapes), ::TG_ERR_DTYPE.
 */
TG_API tg_tensor *tg_transformer_forward_seq2seq(tg_ctx *ctx, const tg_transformer *m,
                                                 tg_tensor *src_ids, tg_tensor *tgt_ids,
                                                 tg_tensor *src_key_padding_mask,
                                                 tg_tensor *tgt_key_padding_mask);
/**
 * Logits for token ids. Shapes: ids (B, T) ::TG_I32 with T <= max_seq_len, ids in [0, V)
 * -> logits (B, T, V) in the model's dtype. x = tok_emb[ids] + pos(T); x = layers(x) with the causal mask if
 * cfg.causal and @p key_padding_mask (B, T) or NULL; logits = LN(x) head_w^T + head_b.
 * Errors: ::TG_ERR_SHAPE, ::TG_ERR_DTYPE (ids not i32, see tg_embedding()), ::TG_ERR_ARG (an
 * encoder-decoder model: use tg_transformer_forward_seq2seq()).
 */
TG_API tg_tensor *tg_transformer_forward(tg_ctx *ctx, const tg_transformer *m, tg_tensor *ids,
                                         tg_tensor *key_padding_mask);
/**
 * The sinusoidal encoding of Vaswani et al. 2017, sec. 3.5 as a constant:
 * PE[t, 2i] = sin(t / 10000^(2i/D)), PE[t, 2i+1] = cos(t / 10000^(2i/D)). Shapes: -> (T, D).
 * Errors: ::TG_ERR_SHAPE (t or d < 1, or t d more than ::TG_MAX_NUMEL), ::TG_ERR_NOMEM.
 */
TG_API tg_tensor *tg_sinusoidal_encoding(tg_ctx *ctx, tg_dtype dt, int64_t t, int64_t d);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name Incremental decoding (KV cache) */
/**@{*/
/**
 * A generator: incremental decoding of a decoder-only LM or of the encoder-decoder model
 * through a KV cache. Opaque; made by tg_generator_new(), owned by the context.
 */
typedef struct tg_generator tg_generator;

/**
 * Prepare incremental decoding of @p m (a decoder-only LM: cfg.causal, or the encoder-decoder
 * model: cfg.n_decoder_layers > 0) for @p batch sequences decoded side by side. Allocates per layer a key cache (B, H, Dh, max_seq_len) (keys stored
 * transposed, see tg_kv_attention()) and a value cache (B, H, max_seq_len, Dh) in the model's
 * dtype, and builds the step graph (1 new token per sequence: M = B rows through every dense
 * layer, attention O(current length)) and, for the decoder-only LM, the refill graph (max(1,
 * max_seq_len / 2) tokens, used at the wrap below); step graphs for fewer live rows are built
 * at their first use (tg_generator_select_rows()), all of them in one shared arena. Memory:
 * 2 n_layers B max_seq_len D elements of cache, plus the largest graph plan
 * (tg_graph_memory()).
 *
 * **Encoder-decoder.** The caches are the decoder layers' (masked self-attention). Each
 * decoder layer also gets a leaf holding its memory keys and values (B, max_seq_len, 2D) =
 * [memory W_k^T + b_k | memory W_v^T + b_v] (rows [D, 3D) of `multihead_attn.in_proj_*`),
 * written by tg_generator_set_source(), which must come before the first feed (it builds an
 * encode graph for its sources and releases it). A feed runs only the decoder:
 * per layer the cached self-attention, the cross-attention of the new positions over the
 * stored memory keys and values (never recomputed), the FFN; then decoder.norm and the head.
 * The logits are those of tg_transformer_forward_seq2seq() on (source, the target so far), to
 * rounding (tested as below). Memory: 4 n_decoder_layers B max_seq_len D elements. Step
 * graphs whose cross-attention reads only the first w = 16, 32, 64, ... (< max_seq_len)
 * memory positions are built here too; a feed uses the narrowest one that holds the longest
 * source the rows hold (short sources do not pay for max_seq_len).
 *
 * The model is borrowed: it must outlive the generator and keep its shapes; its parameter
 * values are read at each feed (load a checkpoint before or after this call, then
 * tg_generator_reset()). The logits are those of tg_transformer_forward() on the whole
 * sequence so far, to rounding (tested: 1e-5 relative in f32, 1e-12 in f64); dropout is never
 * applied. Results are bitwise identical for any thread count.
 *
 * Ownership: the generator and its tensors belong to @p ctx (released by tg_ctx_free(), or by
 * tg_ctx_rewind() to a mark taken before this call, after which it must not be used).
 * Errors (build errors, recorded on the context; NULL returned, nothing left allocated):
 * ::TG_ERR_ARG (model NULL or not initialised, an encoder classifier (neither causal nor
 * with decoder layers), batch not in [1, ::TG_MAX_NUMEL]), ::TG_ERR_OVERFLOW
 * (caches too large), ::TG_ERR_NOMEM, or the pending build error.
 * Source: the KV cache of autoregressive Transformer decoding (Pope et al. 2022, sec. 2).
 */
TG_API tg_generator *tg_generator_new(tg_ctx *ctx, const tg_transformer *m, int64_t batch);
/**
 * tg_generator_new() with caches for @p max_len positions instead of max_seq_len (1 <=
 * @p max_len <= max_seq_len): every "max_seq_len" of tg_generator_new() and of the calls on
 * the generator (the caches, the memory keys and values, the wrap, the longest source) is then
 * @p max_len, so memory is 2 n_layers B max_len D elements of cache (4 n_decoder_layers B
 * max_len D for the encoder-decoder). For a caller that knows how long its sequences get: a
 * translation of sources of at most S tokens and outputs of at most M needs max(S, M) (as
 * tg_translator_new() does); a generation that never passes max_len gets the logits
 * tg_generator_new() would give (the positions are the same). Errors: those of
 * tg_generator_new(), and ::TG_ERR_ARG for @p max_len out of range.
 */
TG_API tg_generator *tg_generator_new_len(tg_ctx *ctx, const tg_transformer *m, int64_t batch,
                                          int64_t max_len);

/**
 * Feed @p n new tokens per sequence and compute the logits of the last one.
 * @p ids (B, n) ::TG_I32 ids in [0, vocab_size), row-major (sequence b's tokens at
 * ids[b n .. b n + n - 1]), copied; B is the live rows (tg_generator_rows(): the batch unless
 * tg_generator_select_rows() dropped rows). The first feed after tg_generator_new() or
 * tg_generator_reset() is the prompt (prefill, positions 0..n-1); later feeds append (usually
 * n = 1, the token just sampled). Afterwards tg_generator_logits() holds the logits (B, V) of
 * the last position, i.e. of the next token.
 *
 * **At max_seq_len.** When length + n would exceed max_seq_len, the generator keeps the last
 * h = max(1, max_seq_len / 2) tokens of the context followed by the new ones (of the new ones
 * alone if n > h: the last h of them), and prefills them again at positions 0..h-1, so the
 * length becomes h and decoding goes on (a prompt longer than max_seq_len keeps its last h
 * tokens). The logits are then those of tg_transformer_forward() on those h tokens. (A sliding
 * window of max_seq_len would recompute the whole window for every token; re-prefilling half
 * costs one h-token forward every max_seq_len - h tokens.)
 *
 * Cost: n = 1 runs the step graph of the live rows' bucket (built by tg_generator_new() for
 * the whole batch, on first use for fewer rows); n = h the decoder-only LM's refill graph; any
 * other n (a prompt, an encoder-decoder's re-prefill at the wrap) builds a graph for n, runs
 * it and releases it (tg_ctx_mark() / tg_ctx_rewind()), so feeding any number of tokens
 * leaves tg_ctx_bytes() unchanged (beyond a row bucket's first use).
 * Errors (run-time: they do not stick): ::TG_ERR_ARG (@p gen freed: `the generator was
 * freed`; @p ids NULL, n < 1, an id out of range: nothing changes, the message names the
 * element; @p gen NULL: returned only, there is no context to record it on), ::TG_ERR_STATE (an
 * encoder-decoder generator without a source: call tg_generator_set_source()), and those of
 * building or running a graph (e.g. ::TG_ERR_NOMEM for a new prompt length); after such a
 * failure the length is unchanged, or 0 if the feed was re-prefilling at the wrap.
 */
TG_API tg_status tg_generator_feed(tg_generator *gen, const int32_t *ids, int64_t n);

/**
 * Encoder-decoder generators: encode the source and start a new target (length 0).
 * @p src_ids (B, s) ::TG_I32 ids in [0, vocab_size), row-major, 1 <= s <= max_seq_len, copied.
 * Runs the encoder once (tok_emb + positions 0..s-1, `encoder.*` and its final norm, no
 * dropout) and stores, for every decoder layer, the memory's keys and values; a source
 * shorter than max_seq_len leaves the rows beyond it blocked for the cross-attention (every
 * source position is attended: for sources of different lengths see
 * tg_generator_set_sources()). The next feed is the
 * target's prompt, usually the BOS token. tg_generator_reset() keeps the source. s =
 * max_seq_len runs the encoder graph built by tg_generator_new(); another s builds one and
 * releases it (tg_ctx_mark() / tg_ctx_rewind()), so tg_ctx_bytes() does not grow.
 * Errors (run-time): ::TG_ERR_ARG (@p gen freed, or NULL: returned only; not an
 * encoder-decoder, @p src_ids NULL, s out of range, an id out of range: nothing changes, the
 * message names the element),
 * those of building or running the encoder (after which the generator has no source).
 * Source: Vaswani et al. 2017, sec. 3.2.3 ("encoder-decoder attention ... the memory keys and
 * values come from the output of the encoder").
 */
TG_API tg_status tg_generator_set_source(tg_generator *gen, const int32_t *src_ids, int64_t s);

/**
 * Encoder-decoder generators: encode @p B sources of different lengths, padded to a common
 * width @p s, and start a new target (length 0). Row b's source is src_ids[b s .. b s +
 * src_len[b] - 1] (::TG_I32 ids in [0, vocab_size)); its positions src_len[b]..s-1 are padding
 * (any value, read as id 0). The encoder runs with the source key padding mask (1 at row b's
 * positions >= src_len[b]) and each row's cross-attention blocks its padded positions: the
 * logits equal tg_transformer_forward_seq2seq() with `src_key_padding_mask` (tested to 1e-5
 * relative in f32, 1e-12 in f64). @p src_len NULL: every row has length s (this is
 * tg_generator_set_source()). A row whose source (length and real tokens) equals the row
 * before it shares that row's encoding: the encoder runs once per run of equal rows (a
 * sentence's beams), and those rows count as holding the same source (see
 * tg_generator_select()). The encode graph is built for the call's distinct sources and
 * released after it (tg_ctx_bytes() does not grow).
 * **Shapes:** src_ids (B, s), 1 <= s <= max_seq_len; src_len (B), 1 <= src_len[b] <= s.
 * Errors (run-time; nothing changes): ::TG_ERR_ARG (as tg_generator_set_source(), and
 * `src_len[b] = x is not in [1, s = ...]`; only the real tokens' ids are checked), those of
 * building or running the encoder (after which the generator has no source).
 * Source: PyTorch `nn.Transformer` (`src_key_padding_mask`, `memory_key_padding_mask`).
 */
TG_API tg_status tg_generator_set_sources(tg_generator *gen, const int32_t *src_ids, int64_t s,
                                          const int64_t *src_len);

/**
 * Reorder the generator's live rows (beam search's reordering of hypotheses; all B rows
 * unless tg_generator_select_rows() dropped some): afterwards row b holds the state row
 * @p rows[b] held before: its self-attention keys and values at positions
 * 0..length-1, its token history and, for an encoder-decoder generator, its source (memory
 * keys and values, padding mask, length). Rows may repeat or be dropped. Each row remembers
 * which encoded source it holds, so a row that takes the state of a row with the same source
 * (the usual case: the beams of one sentence) copies only its cache, never the memory.
 * **Shapes:** rows (live rows) ::TG_I32 in [0, live rows). The length is unchanged. Decoding on equals
 * decoding the selected rows from scratch (tested).
 * Cost: copies 2 n_layers length D elements per changed row (plus 2 n_layers max_seq_len D
 * for a row whose source changes); a gather buffer is grown on demand (owned by the
 * generator).
 * Errors (run-time; nothing changes): ::TG_ERR_ARG (@p gen NULL (returned only) or freed,
 * @p rows NULL, `rows[b] = x is not a row in [0, B)`), ::TG_ERR_NOMEM (the gather buffer).
 */
TG_API tg_status tg_generator_select(tg_generator *gen, const int32_t *rows);

/**
 * tg_generator_select() that also changes how many rows stay live: afterwards rows b <
 * @p n_rows hold the state rows @p rows[b] held before (every state as tg_generator_select()
 * describes), and only they are decoded: feeds take @p n_rows rows of ids, tg_generator_logits()
 * holds their logits in its first @p n_rows rows (the rest unspecified), and a one-token feed
 * runs the step graph built for the smallest row bucket that holds them (1, 2, ..., 8, then
 * four sizes per doubling: 10, 12, 14, 16, 20, 24, ...; at most B; see
 * tg_generator_graph_rows()), so a search whose sentences finish stops paying for their rows.
 * A bucket's step graphs are built on first use (once per bucket and memory width; they share
 * the generator's arena). tg_generator_set_source() and tg_generator_set_sources() make every
 * row live again; tg_generator_reset() keeps the live rows.
 * Results: a row's logits may differ in the last bits between buckets (the matrix products'
 * row blocking); any thread count gives the same bits.
 * **Shapes:** rows (n_rows) ::TG_I32 in [0, live rows); 1 <= n_rows <= B (more rows than are
 * live is allowed: the extra ones copy live rows).
 * Errors (run-time; nothing changes): ::TG_ERR_ARG (@p gen NULL (returned only) or freed,
 * @p rows NULL, `n_rows = x is not in [1, batch B]`, `rows[b] = x is not a live row in [0,
 * n)`), ::TG_ERR_NOMEM (the gather buffer).
 */
TG_API tg_status tg_generator_select_rows(tg_generator *gen, const int32_t *rows,
                                          int64_t n_rows);

/** The live rows (B after tg_generator_new() and each tg_generator_set_sources(); changed by
 *  tg_generator_select_rows()); 0 if @p gen is NULL or freed. */
TG_API int64_t tg_generator_rows(const tg_generator *gen);

/** The rows a one-token feed computes when @p n rows are live: the smallest row bucket >= n
 *  (1..8, then 10, 12, 14, 16, 20, 24, 28, 32, 40, ...), at most B. A search compacts its rows
 *  when this number falls. 0 if @p gen is NULL or freed or n is not in [1, B]. */
TG_API int64_t tg_generator_graph_rows(const tg_generator *gen, int64_t n);

/** The last-position logits (B, V) of the last successful feed, in the model's dtype (zeros
 *  before the first). A leaf owned by the generator, overwritten by each feed; read it with
 *  tg_get() or tg_tensor_get_data(). NULL if @p gen is NULL or freed. */
TG_API tg_tensor *tg_generator_logits(const tg_generator *gen);

/** Positions the cache holds (the current context length, <= max_seq_len); 0 if NULL. */
TG_API int64_t tg_generator_length(const tg_generator *gen);

/** Forget the context (length 0); the next feed is a new prompt (an encoder-decoder generator
 *  keeps its source). NULL is a no-op. */
TG_API void tg_generator_reset(tg_generator *gen);

/** Release the generator's graphs (their arenas), caches and buffers at once; the small
 *  tensor records stay in the context until tg_ctx_free() (or a rewind past the generator).
 *  The generator must not be fed again. NULL or a second call is a no-op. */
TG_API void tg_generator_free(tg_generator *gen);
/**
 * Set the compute precision of the generator's graphs (::tg_precision; the default is
 * ::TG_PRECISION_F32): with ::TG_PRECISION_BF16 the dense layers' products take bf16 operands
 * with f32 accumulation (tg_graph_opts::precision), as a model trained with bf16 products
 * saw them. The attention over the KV cache (tg_kv_attention()) stays f32. The graphs are
 * built again now (the B-row ones; smaller row counts at their first use); the caches and the
 * sequences fed so far are kept. A translator's generator (tg_translator_generator()) takes
 * it the same way. Errors (run-time): ::TG_ERR_ARG (an unknown value), ::TG_ERR_DTYPE (bf16
 * for an f64 model), ::TG_ERR_NOMEM (the graphs could not be rebuilt: set it again before
 * using the generator).
 */
TG_API tg_status tg_generator_set_precision(tg_generator *gen, int precision);
/** The generator's compute precision (::TG_PRECISION_F32 for NULL). */
TG_API int tg_generator_precision(const tg_generator *gen);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name Sequence-to-sequence batches of any shape */
/**@{*/
/**
 * One padded batch of sentence pairs (the arrays are borrowed for the call):
 * @c src (n, S) source ids, row i's real tokens at positions < src_len[i] (the rest padding:
 * any id in range, masked by the source key padding mask, which also masks the memory);
 * @c tgt_in (n, T) decoder inputs (BOS, then the target; padding: any id in range);
 * @c labels (n, T) the target followed by EOS, and the loss's ignore_index at padding (no
 * target key padding mask is needed: the causal mask keeps real positions from attending to
 * the later, padded ones). tgrad_data.h's batches fill exactly this.
 */
typedef struct tg_seq2seq_batch {
    int64_t n, S, T;         /**< sentences, source length, target length (both padded) */
    const int32_t *src;      /**< (n, S) */
    const int64_t *src_len;  /**< (n) real source lengths, each in [1, S] */
    const int32_t *tgt_in;   /**< (n, T) */
    const int32_t *labels;   /**< (n, T) */
} tg_seq2seq_batch;

/**
 * The padded batch of examples @p examples[0 .. n) of @p d (e.g. a tg_batch's, tgrad_data.h)
 * into the caller's arrays, by the rule of tg_seq2seq_fill():
 * - @p src (n, S): source ids (their EOS included), then the pad id; @p src_len (n) the
 *   source lengths S_i;
 * - @p tgt_in (n, T): ::TG_TOKEN_BOS, the target ids, then the pad id (the labels shifted
 *   right);
 * - @p labels (n, T): the target ids, ::TG_TOKEN_EOS, then @p ignore_index.
 * @p out (may be NULL) receives the batch over the arrays. S >= every S_i, T >= every T_i
 * (tgrad_data.h's lengths: T_i = the target's ids + 1).
 * @return the target tokens the batch trains on, the sum of T_i (EOS counted); -1 (nothing
 *         written) for NULL arguments, n < 1, an example out of range or longer than S or T.
 */
TG_API int64_t tg_seq2seq_batch_fill(const tg_seq2seq_data *d, const int64_t *examples, int64_t n,
                                     int64_t S, int64_t T, int32_t ignore_index, int32_t *src,
                                     int64_t *src_len, int32_t *tgt_in, int32_t *labels,
                                     tg_seq2seq_batch *out);

/** Options of tg_seq2seq_loss_new(). */
typedef struct tg_seq2seq_loss_opts {
    /** Label smoothing of the training loss, in [0, 1] (tg_cross_entropy_smoothed());
     *  evaluation never smooths. */
    double label_smoothing;
    /** The label value of padded positions: outside [0, vocab_size) (PyTorch's -100). */
    int64_t ignore_index;
    /** Compute precision of the graphs' matrix products (tg_graph_opts::precision; 0, the
     *  default, is ::TG_PRECISION_F32). */
    int precision;
} tg_seq2seq_loss_opts;

/** The defaults: no label smoothing, ignore_index -100. */
TG_API tg_seq2seq_loss_opts tg_seq2seq_loss_defaults(void);

/**
 * The loss of an encoder-decoder model (cfg.n_decoder_layers > 0) on batches of any shape.
 * Opaque; made by tg_seq2seq_loss_new(), released by tg_seq2seq_loss_free().
 *
 * Graphs have static shapes; this object builds a graph the first time a batch shape
 * (n, S, T) is seen (one for training: gradients, the smoothed loss; one for evaluation:
 * no_grad, unsmoothed) and keeps it: length-bucketed batches (tgrad_data.h) come in a fixed
 * set of shapes, the same every epoch, so after the first epoch nothing is built. Per graph:
 * logits = tg_transformer_forward_seq2seq(src, tgt_in, src_key_padding_mask from src_len),
 * loss = mean over the non-ignored labels of the (smoothed) cross-entropy.
 * Memory: each graph's records and arena (tg_graph_memory()); the model is borrowed and must
 * outlive the object; the graphs belong to the context.
 */
typedef struct tg_seq2seq_loss tg_seq2seq_loss;

/** Make the loss object. Errors (run-time, NULL returned): ::TG_ERR_ARG (not an initialised
 *  encoder-decoder model, label_smoothing outside [0, 1], ignore_index a token id, an unknown
 *  precision), ::TG_ERR_DTYPE (bf16 precision for an f64 model), ::TG_ERR_NOMEM. */
TG_API tg_seq2seq_loss *tg_seq2seq_loss_new(tg_ctx *ctx, const tg_transformer *m,
                                            const tg_seq2seq_loss_opts *opts);
/**
 * Training: forward (in the context's training mode, so dropout applies if enabled) and
 * backward of the batch's mean loss; the parameters' gradients are replaced by this batch's
 * (zeroed first). @p loss (may be NULL): the smoothed mean loss.
 * Errors (run-time): ::TG_ERR_ARG (NULL arrays, a src_len out of range), ::TG_ERR_SHAPE (n,
 * S, T < 1 or S, T > max_seq_len), those of building the graph (named with the shape) and of
 * forward/backward (e.g. an id out of range).
 */
TG_API tg_status tg_seq2seq_loss_backward(tg_seq2seq_loss *L, const tg_seq2seq_batch *b,
                                          double *loss);
/**
 * Evaluation: forward only (no_grad graph; set tg_ctx_set_training(ctx, false) for no
 * dropout), unsmoothed. @p sum: the summed cross-entropy over the batch's non-ignored labels
 * (nats); @p tokens: their number (validation loss per token = sum of sums / sum of tokens).
 * Errors as tg_seq2seq_loss_backward().
 */
TG_API tg_status tg_seq2seq_loss_eval(tg_seq2seq_loss *L, const tg_seq2seq_batch *b,
                                      double *sum, int64_t *tokens);
/**
 * The validation loss per target token of @p d (unsmoothed, dropout off): tg_evaluate() over
 * the batches of epoch 0 of tg_seq2seq_batches(d, batch_tokens, seed, 0), each filled by the
 * rule of tgrad_data.h (source + EOS, BOS + target, target + EOS; padding masked, labels at
 * padding = the loss's ignore_index) and scored by tg_seq2seq_loss_eval():
 *   loss = sum over the batches of their summed cross-entropy / their non-ignored labels.
 * The batching does not change the value beyond rounding (each target counts once); the
 * fixed plan makes it the same bits at every call. `tgrad train --pairs` reports it as the
 * validation loss. @p tokens (may be NULL): the target tokens (labels, EOS included).
 * Errors (run-time, on L's context): ::TG_ERR_ARG (NULL L, d or loss_per_token), those of
 * tg_seq2seq_batches() (e.g. batch_tokens below the longest example) and of
 * tg_seq2seq_loss_eval(), ::TG_ERR_NOMEM.
 */
TG_API tg_status tg_seq2seq_evaluate(tg_seq2seq_loss *L, const tg_seq2seq_data *d,
                                     int64_t batch_tokens, uint64_t seed,
                                     double *loss_per_token, int64_t *tokens);
/**
 * The graph of batch @p b's shape (n, S, T): the training graph (@p train: gradients, the
 * smoothed loss) or the evaluation graph, built now if that shape was not seen yet, without
 * running it; e.g. to write it with tg_graph_write_dot(). The graph belongs to @p L (released
 * by tg_seq2seq_loss_free()). Errors (run-time, NULL returned): those of
 * tg_seq2seq_loss_backward() before it runs.
 */
TG_API const tg_graph *tg_seq2seq_loss_graph(tg_seq2seq_loss *L, const tg_seq2seq_batch *b,
                                             bool train);
/** Graphs built so far (0 for NULL). */
TG_API int64_t tg_seq2seq_loss_graphs(const tg_seq2seq_loss *L);
/** Release the graphs (their arenas) and the object; NULL is a no-op. */
TG_API void tg_seq2seq_loss_free(tg_seq2seq_loss *L);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name Checkpoints */
/**@{*/
/**
 * Save a checkpoint atomically and crash-safely, leaving no temporary file behind (see the
 * writers' guarantees in tgrad_io.h; a path that is not a regular file is refused): every
 * parameter of the context under its name, the optimizer state (`adam.m.*`, `adam.v.*` or
 * `sgd.momentum.*`) if @p opt is not NULL, and metadata: the caller's key/value pairs plus
 * `optim.step` and `rng` (the context RNG state, hex). A failure leaves @p path as it was.
 * @p opts: NULL, or write options (fault injection for tests).
 * Errors (run-time, like every file call): those of tg_safetensors_write_items();
 * ::TG_ERR_ARG for an optimizer of another context (`the optimizer belongs to another
 * context`).
 */
TG_API tg_status tg_checkpoint_save(tg_ctx *ctx, const char *path, const tg_optim *opt,
                                    int64_t n_meta, const char *const *keys,
                                    const char *const *values, const tg_write_opts *opts);
/**
 * Restore parameters (strictly by name), optimizer state and step, and the context RNG from a
 * parsed checkpoint. Nothing is modified unless every tensor matches and the metadata is valid.
 * The metadata is checked strictly, as written by tg_checkpoint_save(): `optim.step` is decimal
 * digits only (no sign, space, leading zero or trailing text), 0 to 2^53; `rng` is exactly 64
 * hex digits, not all zero (the generator's fixed point). The optimizer state's values are
 * checked too: every element finite, and Adam's second moments (`adam.v.*`) >= 0, since one
 * NaN there would silently turn every later update of that parameter into NaN.
 * @p st may have been read in any context (it is only data); @p opt must belong to @p ctx.
 * Errors (run-time, like every file call): ::TG_ERR_MISMATCH (names or shapes differ: a
 * different config), ::TG_ERR_FORMAT (missing or malformed `optim.step` / `rng`, e.g.
 * `tg_checkpoint_restore: metadata 'optim.step' is '-1' (expected a step count: decimal
 * digits, 0 to 9007199254740992)`; optimizer state out of range: `optimizer state
 * 'adam.v.w' element 5 is -1 (expected a finite value >= 0, as a second moment is); nothing
 * was restored`; a finite f64 value beyond an f32 tensor's range), ::TG_ERR_ARG (NULL @p st,
 * an optimizer of another context).
 */
TG_API tg_status tg_checkpoint_restore(tg_ctx *ctx, const tg_safetensors *st, tg_optim *opt);
/** Most entries tg_transformer_meta() writes. */
#define TG_TRANSFORMER_META_MAX 18

/** One metadata entry (a safetensors `__metadata__` key and its string value). */
typedef struct tg_meta_kv {
    char key[32];
    char value[32];
} tg_meta_kv;

/**
 * The `model.*` metadata of a tgrad checkpoint for config @p cfg with parameter dtype @p dt:
 * the one writer of these keys (`tgrad train` saves them; `tgrad train --resume`, `sample`,
 * `export`, `info` and tg_model_load() read them). In this order:
 *
 *     model.arch              encoder | lm (causal) | seq2seq (n_decoder_layers > 0)
 *     model.layers            n_layers
 *     model.decoder_layers    n_decoder_layers (seq2seq only)
 *     model.d_model, model.heads, model.d_ff, model.seq_len (max_seq_len), model.vocab_size
 *     model.norm_first        0 | 1
 *     model.activation        relu | gelu
 *     model.pos               learned | sinusoidal
 *     model.causal            0 | 1 (0 for seq2seq)
 *     model.tie_weights       0 | 1
 *     model.dropout           the shortest decimal that reads back as the same double
 *     model.attn_dropout, model.act_dropout  only when set apart (layer.attn_dropout,
 *                             act_dropout not 0): the probability, 0 for TG_DROPOUT_OFF
 *     model.dtype             f32 | f64
 *     model.scale_embeddings  1, only when set (absent is 0 for every reader)
 *
 * Pass them, with the caller's other fields, to tg_checkpoint_save().
 * @param out  room for ::TG_TRANSFORMER_META_MAX entries
 * @return the number of entries written, or -1 (nothing written) for NULL arguments, a config
 *         tg_transformer_params() has no list for, @p dt not ::TG_F32 or ::TG_F64, or an
 *         unknown activation or position kind
 */
TG_API int tg_transformer_meta(const tg_transformer_config *cfg, tg_dtype dt, tg_meta_kv *out);
/**
 * Read a model config back from a tgrad checkpoint's metadata (the keys tg_transformer_meta()
 * writes): the reader tg_model_load() uses, with its messages. Every field is validated, an
 * integer by tg_meta_parse_int()'s rule (digits only, no sign or leading zero):
 * model.layers 1 to ::TG_TRANSFORMER_MAX_LAYERS; d_model, heads (dividing d_model), d_ff 1 to
 * INT32_MAX; seq_len 1 to ::TG_TRANSFORMER_MAX_SEQ_LEN; vocab_size 1 to 2^20; norm_first, tie_weights, scale_embeddings,
 * causal 0 or 1; activation relu|gelu; pos learned|sinusoidal; dtype f32|f64 (absent: f32);
 * model.arch encoder|lm|seq2seq (absent, as in older checkpoints: data.mode's own, or without
 * data.mode lm when model.causal is 1, else encoder), which data.mode (text|task|pairs, when
 * present) and model.causal must agree with; model.decoder_layers required by seq2seq;
 * model.dropout a number in [0, 1) (absent: 0); model.attn_dropout and model.act_dropout the
 * same (absent: 0, as dropout; "0": ::TG_DROPOUT_OFF). layer_norm_eps is tg_encoder_config_default()'s.
 * The vocabulary itself (data.vocab, data.task, tokenizer.*) is not read: tg_model_load() does.
 * @p label names the file in messages (NULL: "<memory>"), e.g.
 * `tg_transformer_meta_read: ck.safetensors: metadata 'model.layers' is '0' (expected an
 * integer from 1 to 65536)`.
 * @param cfg  receives the config (untouched on error)
 * @param dt   receives the parameter dtype (may be NULL)
 * Errors: ::TG_ERR_FORMAT (a field missing or malformed, fields that disagree), ::TG_ERR_ARG
 * (NULL @p st or @p cfg).
 */
TG_API tg_status tg_transformer_meta_read(tg_ctx *ctx, const tg_safetensors *st,
                                          const char *label, tg_transformer_config *cfg,
                                          tg_dtype *dt);

/**
 * Validate a training checkpoint's tensors against the model config @p cfg it claims, before
 * anything is built (the config typically read from the file's `model.*` metadata):
 * 1. every parameter of tg_transformer_params(@p cfg) is present with its shape;
 * 2. every other tensor is optimizer state of one of them (`adam.m.<p>`, `adam.v.<p>`,
 *    `sgd.momentum.<p>`) shaped like it: no layer beyond n_layers, no `pos_emb.weight` with
 *    sinusoidal positions, no `head.weight` when tied, nothing else;
 * 3. every tensor is stored in the parameter dtype @p dt (F32 or F64 in the file);
 * 4. with @p optim (NULL: not checked), the optimizer state is exactly what that optimizer
 *    keeps: `adam.m.*` and `adam.v.*` of every parameter (Adam, AdamW), `sgd.momentum.*` of
 *    every parameter (SGD with momentum != 0), none (SGD without momentum); so a file that
 *    passes can be restored by tg_checkpoint_restore() into the model and optimizer built
 *    from the same config;
 * 5. every optimizer state value is finite and Adam's second moments (`adam.v.*`) are >= 0
 *    (what tg_checkpoint_restore() would refuse, refused before anything is built).
 * The first failure is reported, naming the tensor and the metadata fields its expected shape
 * follows from, e.g. `tg_checkpoint_check: tensor 'layers.0.linear1.weight' is (32, 16) in the
 * file, but model.layers 2, model.d_model 16 and model.d_ff 64 need (64, 16)` or `the file has
 * tensor 'layers.2.norm1.bias' but model.layers is 2`; tensor names from the file are shown on
 * one line (control characters as '?', cut after 60 bytes).
 * @p st may have been read in any context and is only read (it may be arbitrary bytes parsed by
 * tg_safetensors_read_mem()); nothing is allocated in @p ctx (a temporary copy of the
 * parameter list, ~150 bytes per parameter, is malloc'd and freed).
 * Errors (run-time): ::TG_ERR_MISMATCH (the file does not fit the config), ::TG_ERR_FORMAT
 * (optimizer state that is not finite, a negative second moment), ::TG_ERR_ARG (NULL
 * @p st, a config tg_transformer_params() has no list for, @p dt not ::TG_F32 or ::TG_F64, an
 * unknown optimizer kind), ::TG_ERR_NOMEM.
 */
TG_API tg_status tg_checkpoint_check(tg_ctx *ctx, const tg_safetensors *st,
                                     const tg_transformer_config *cfg, tg_dtype dt,
                                     const tg_optim_config *optim);

/** The `format` metadata value of a tgrad training checkpoint. */
#define TG_CHECKPOINT_FORMAT "tgrad-checkpoint-1"

/**
 * Where a training run is, beyond its parameters and optimizer state: what a checkpoint needs
 * for a resumed run to continue exactly (bit for bit) where the saved one stopped. The
 * optimizer's step count (`optim.step`) and the context RNG (`rng`) are saved from the
 * optimizer and the context (tg_checkpoint_save()); this struct holds the rest. An integer
 * field of -1 is "not written" (a checkpoint without the key).
 */
typedef struct tg_train_state {
    int64_t steps;    /**< `train.steps`: the run's planned length in optimizer steps, >= 1 */
    int64_t position; /**< `data.position`: training examples drawn so far (text, task), >= 0 */
    int64_t epoch;    /**< `data.epoch`: the epoch of the next batch (sentence pairs), >= 0 */
    int64_t batch;    /**< `data.batch`: the next batch's index in that epoch's plan, >= 0 */
    double best_val;  /**< `train.best_val`: the lowest validation loss so far (INFINITY: none
                           yet; always written, as the shortest decimal that reads back as the
                           same double, or `inf`) */
    int64_t step;     /**< `optim.step`, filled by tg_train_state_read() (saving writes the
                           optimizer's count, not this field) */
    double best_bleu; /**< `train.best_bleu`: the highest validation BLEU so far of a run that
                           keeps its best checkpoint (`tgrad train --keep-best`), in [0, 100];
                           -1: not written */
} tg_train_state;

/** A state with nothing written: the integer fields -1, best_val INFINITY, best_bleu -1. */
TG_API tg_train_state tg_train_state_init(void);

/** Most entries tg_train_state_meta() writes. */
#define TG_TRAIN_STATE_META_MAX 6

/**
 * The training-state metadata of @p s: the one writer of these keys. In this order, each only
 * when set (>= 0): `data.position`, `train.steps`, `train.best_val` (always), `data.epoch`,
 * `data.batch`, `train.best_bleu`; integers in decimal. Pass them, with the caller's other fields, to
 * tg_checkpoint_save(), or let tg_train_checkpoint_save() place them.
 * @param out  room for ::TG_TRAIN_STATE_META_MAX entries
 * @return the number of entries written (1 to 6), or -1 (nothing written) for NULL arguments,
 *         `steps` 0 or below -1, another field below -1, only one of `epoch` and `batch` set,
 *         a negative or NaN `best_val`, or a `best_bleu` neither -1 nor in [0, 100]
 */
TG_API int tg_train_state_meta(const tg_train_state *s, tg_meta_kv *out);

/**
 * Read and validate the training state of a parsed checkpoint (untrusted input): the reader of
 * the keys tg_train_state_meta() and tg_checkpoint_save() write.
 * - `optim.step` (required): decimal digits only (no sign, space, leading zero), 0 to 2^53;
 * - `rng` (required): exactly 64 hex digits, not all zero (checked here, restored by
 *   tg_checkpoint_restore());
 * - `train.steps` (optional): 1 to 2^53, the same digits rule; `data.position`, `data.epoch`,
 *   `data.batch` (optional): 0 to 2^53 (epoch and batch: 0 to INT32_MAX), the same rule;
 *   `data.epoch` and `data.batch` both or neither;
 * - `train.best_val` (optional, INFINITY when absent): `inf` or a finite decimal number >= 0;
 * - `train.best_bleu` (optional, -1 when absent): a decimal number in [0, 100].
 * @p label names the file in messages (NULL: "<memory>"), e.g. `tg_train_state_read:
 * ck.safetensors: metadata 'train.best_val' is '-1' (expected a loss >= 0 or inf)`.
 * @param s  receives the state (untouched on error)
 * Errors (run-time): ::TG_ERR_FORMAT (a field missing or malformed), ::TG_ERR_ARG (NULL @p st
 * or @p s).
 */
TG_API tg_status tg_train_state_read(tg_ctx *ctx, const tg_safetensors *st, const char *label,
                                     tg_train_state *s);

/**
 * Save a training checkpoint by config, atomically through tg_checkpoint_save() (every
 * parameter of the context, the optimizer state of @p opt). The metadata, in this order:
 * 1. `format` = ::TG_CHECKPOINT_FORMAT;
 * 2. the model config's keys, tg_transformer_meta(@p cfg, @p dt);
 * 3. the caller's extra entries @p keys / @p values in their order (the tokenizer, hashes of
 *    the data, the program's options); an entry with a NULL value must name a key of the
 *    training state that @p state sets, and places that key (with @p state's value) there;
 * 4. the keys of tg_train_state_meta(@p state) not placed by step 3, in its order;
 * 5. `optim.step` (the optimizer's count) and `rng` (the context RNG state).
 * So a program keeps the layout of its files while the library writes every value it owns.
 * The extra keys may not be `format`, `model.*`, `optim.step`, `rng` or (with a value) a
 * training-state key. A failure leaves @p path as it was.
 * @p opts: NULL, or write options (fault injection for tests).
 * Errors (run-time): ::TG_ERR_ARG (NULL @p cfg or @p state, a config or state that
 * tg_transformer_meta() / tg_train_state_meta() refuse, an extra key the library writes,
 * a NULL value for a key that is not a set state key, NULL @p keys or @p values with
 * @p n_extra > 0), those of tg_checkpoint_save() (a key twice: ::TG_ERR_DUPLICATE).
 */
TG_API tg_status tg_train_checkpoint_save(tg_ctx *ctx, const char *path, const tg_optim *opt,
                                          const tg_transformer_config *cfg, tg_dtype dt,
                                          const tg_train_state *state, int64_t n_extra,
                                          const char *const *keys, const char *const *values,
                                          const tg_write_opts *opts);

/**
 * Restore a training checkpoint by config into the model built from @p cfg (typically read
 * from the same file by tg_transformer_meta_read()) and the optimizer @p opt: the state's
 * metadata is validated (tg_train_state_read()), the tensors against the config and
 * @p optim (tg_checkpoint_check(); @p optim NULL: the optimizer state is not compared with
 * an optimizer config), then tg_checkpoint_restore() restores the parameters, the optimizer
 * state and step, and the context RNG. Nothing is modified (parameters, optimizer, RNG,
 * @p state) unless every step succeeds; the error is the first failing step's, with its
 * message (`tg_train_state_read: ...`, `tg_checkpoint_check: ...`, `tg_checkpoint_restore:
 * ...`). @p label names the file in the state's messages (NULL: "<memory>").
 * @param state  receives the training state (may be NULL)
 * Errors (run-time): those of the three calls; ::TG_ERR_ARG (NULL @p st or @p cfg).
 */
TG_API tg_status tg_train_checkpoint_restore(tg_ctx *ctx, const tg_safetensors *st,
                                             const char *label, const tg_transformer_config *cfg,
                                             tg_dtype dt, const tg_optim_config *optim,
                                             tg_optim *opt, tg_train_state *state);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name The training run
 * The loop of a training run as one call: tg_train_run() steps from @c cfg->start to the end,
 * choosing each step's learning rate by the schedule, evaluating every @c eval_every steps and
 * at the end, keeping the best validation loss, stopping at a metric target or on a stop
 * request, and saving at every evaluation, every @c save_every steps and at the end. What a
 * step trains on and how a model is evaluated are the caller's: callbacks fill a step's batch,
 * run micro-batch i (tg_train_step()'s ::tg_micro_batch_fn) and evaluate. Log rows, progress and
 * the checkpoint go out through callbacks too, so the caller keeps its files and messages.
 * `tgrad train` runs every mode (text, task, seq2seq, pairs) through it. See docs/training.md,
 * "The training run".
 * @code
 *   tg_train_config cfg = tg_train_config_default();
 *   cfg.steps = 1000; cfg.eval_every = 100; cfg.lr = 1.0; cfg.warmup = 100;
 *   cfg.schedule = TG_LR_NOAM; cfg.d_model = 64; cfg.tokens_per_step = B * T;
 *   tg_train_callbacks cb = {.user = &my, .batch = draw, .micro = micro, .evaluate = eval,
 *                            .row = write_row, .save = save};
 *   tg_train_result res;
 *   tg_status s = tg_train_run(ctx, opt, &cfg, &cb, &res);
 * @endcode
 */
/**@{*/

/** The learning rate schedule of a run (tg_lr_warmup_cosine(), tg_lr_noam()). */
typedef enum tg_lr_schedule {
    TG_LR_WARMUP_COSINE = 0, /**< linear warmup, then cosine decay to min_lr */
    TG_LR_NOAM = 1           /**< lr * d_model^-1/2 * min(s^-1/2, s warmup^-3/2), s = step+1 */
} tg_lr_schedule;

/** What a run does; tg_train_config_default() gives the zero-risk defaults. */
typedef struct tg_train_config {
    int64_t steps;      /**< the run's planned length in optimizer steps (the schedule's
                             horizon), >= 1 */
    int64_t start;      /**< steps already done (a resumed run: the checkpoint's optim.step),
                             0 <= start < steps */
    int64_t stop_after; /**< > start and < steps: stop after this step (the schedule still
                             plans @c steps); 0: run to @c steps */
    int64_t eval_every; /**< evaluate after every this many steps (and after the last), >= 1 */
    int64_t save_every; /**< > 0: save after every this many steps too; 0: only after an
                             evaluation and the last step */
    tg_lr_schedule schedule; /**< the learning rate of step s (0-based) */
    double lr;          /**< peak rate (cosine) or the noam factor */
    double min_lr;      /**< the cosine decay's final rate */
    int64_t warmup;     /**< warmup steps, >= 0 */
    int64_t d_model;    /**< noam: the model width, >= 1 */
    double clip;        /**< > 0: clip the gradients to this global norm (tg_train_step()) */
    tg_grad_accum *accum;      /**< K > 1 micro-batches (tg_train_step_opts), or NULL */
    const tg_train_sync *sync; /**< several processes (with @c accum), or NULL */
    int64_t tokens_per_step;   /**< tokens a step trains on, for tokens/s (0: tokens/s is
                                    measured by the @c tokens callback) */
    double best_val;    /**< the best validation loss so far (a resumed run: its
                             checkpoint's; INFINITY: none) */
    double last_val;    /**< the validation loss shown until the first evaluation (NaN) */
    /** The run stops after the current step once this flag is non-zero (a signal handler may
     *  set it: a `volatile sig_atomic_t` the caller owns); NULL: no flag. */
    const volatile sig_atomic_t *stop;
} tg_train_config;

/** The defaults: 1 step, evaluate every step, cosine at lr 1e-3, no clipping, best_val
 *  INFINITY, last_val NaN, every pointer NULL. */
TG_API tg_train_config tg_train_config_default(void);

/** One step's row, given to ::tg_train_callbacks row and progress. */
typedef struct tg_train_row {
    int64_t step;        /**< 1-based */
    double loss;         /**< the step's training loss (tg_train_step_result) */
    double lr;           /**< its learning rate */
    double tokens_per_s; /**< tokens trained per second so far in this call */
    bool eval;           /**< this step evaluated */
    double val_loss;     /**< the evaluation's loss (NaN when not evaluated or none) */
    double metric;       /**< the evaluation's metric (accuracy, BLEU; NaN: none) */
    double best_val;     /**< the best validation loss so far */
    bool last;           /**< the last step of the call (its end, or a stop request) */
    bool stop;           /**< the run ends after this step (last, or a target reached) */
} tg_train_row;

/** Which part of a run failed (::tg_train_result). */
typedef enum tg_train_fail {
    TG_TRAIN_FAIL_NONE = 0,   /**< the run ended normally */
    TG_TRAIN_FAIL_BATCH = 1,  /**< the batch callback, or tg_train_step()'s batch stage */
    TG_TRAIN_FAIL_UPDATE = 2, /**< tg_train_step()'s update stage (a non-finite loss or
                                   update: every process holds the same failure) */
    TG_TRAIN_FAIL_AFTER = 3,  /**< the after_step callback */
    TG_TRAIN_FAIL_EVAL = 4,   /**< the evaluate callback */
    TG_TRAIN_FAIL_ROW = 5,    /**< the row callback (the log) */
    TG_TRAIN_FAIL_SAVE = 6,   /**< the save callback (the checkpoint) */
    TG_TRAIN_FAIL_PROGRESS = 7, /**< the progress callback */
    TG_TRAIN_FAIL_SYNC = 8    /**< sending an evaluation's outcome to the other processes
                                   (sync->broadcast): the processes may disagree */
} tg_train_fail;

/** How a run ended. */
typedef struct tg_train_result {
    int64_t step;     /**< steps done (the run's position) */
    int64_t trained;  /**< steps this call ran */
    double loss;      /**< the last step's loss (the failing step's, NaN if it had none) */
    double last_val;  /**< the last evaluation's loss (cfg->last_val before one) */
    double best_val;  /**< the best validation loss */
    double metric;    /**< the last evaluation's metric (NaN: none) */
    double tokens_per_s; /**< as in the last row */
    bool reached;     /**< an evaluation reached its target */
    bool stopped;     /**< the stop flag or after_step ended the run early */
    bool before_first; /**< the first callback stopped the run before its first step */
    tg_train_fail failed; /**< where it failed; @c step + 1 is the failing step */
} tg_train_result;

/**
 * The caller's side of a run. Each callback returns ::TG_OK or a status with the error on the
 * context (or its own message already given); the run stops there and reports which
 * (::tg_train_result failed). @c micro is required; the others may be NULL.
 */
typedef struct tg_train_callbacks {
    void *user; /**< passed to every callback (but see @c model_user) */
    /** Non-NULL: passed to batch, micro, tokens and evaluate instead of @c user, so a
     *  built-in model (tg_train_tokens_bind()) and the caller's own callbacks (row, save, ...)
     *  each keep their state. */
    void *model_user;
    /** Before the first step (@p step: its 0-based index): return true to stop at once
     *  (nothing trained; result before_first). */
    bool (*first)(void *user, int64_t step);
    /** Fill step @p step's (0-based) batch, before its micro-batches run. */
    tg_status (*batch)(void *user, int64_t step);
    /** Micro-batch i of the step (tg_train_step()). */
    tg_micro_batch_fn micro;
    /** Real tokens the step just run trained on; with it, tokens/s counts them per second
     *  spent in steps (not evaluating); without it, tokens_per_step per wall second. */
    int64_t (*tokens)(void *user);
    /** After step @p step (0-based) ran, before its evaluation: set @p *stop to end the run
     *  after this step (a stop request; several processes agree on it here). @p last: the
     *  step is the last one planned. */
    tg_status (*after_step)(void *user, int64_t step, bool last, bool *stop);
    /** Evaluate after step @p step (0-based) into @p val_loss (NaN: none) and @p metric
     *  (NaN: none); set @p reached when the metric meets the caller's target. With several
     *  processes (cfg->sync and cfg->accum), only the process running micro-batch 0 calls it;
     *  the run sends its outcome to the others (sync->broadcast), and on a failure there
     *  every process ends with ::TG_TRAIN_FAIL_EVAL. */
    tg_status (*evaluate)(void *user, int64_t step, double *val_loss, double *metric,
                          bool *reached);
    /** The step's row (a log line), after its evaluation and before its save. */
    tg_status (*row)(void *user, const tg_train_row *r);
    /** Save the run after @p steps_done steps (best_val: @p best_val). */
    tg_status (*save)(void *user, int64_t steps_done, double best_val);
    /** The step's row again, after its save (progress on a terminal). */
    tg_status (*progress)(void *user, const tg_train_row *r);
} tg_train_callbacks;

/**
 * Run training steps cfg->start .. end - 1, end = cfg->stop_after when in (start, steps), else
 * cfg->steps. Each step s (0-based):
 * 1. lr = tg_lr_noam(s, d_model, warmup, lr) or tg_lr_warmup_cosine(s, steps, warmup, lr,
 *    min_lr); before the first step, @c first may stop the run;
 * 2. @c batch (s), then tg_train_step() with @c micro, clip, accum and sync;
 * 3. tokens/s; @c after_step (s, s + 1 == end) may ask to stop (the step is then the last);
 * 4. evaluate when (s + 1) % eval_every == 0 or the step is the last: the validation loss
 *    (best_val = min(best_val, val_loss); NaN never replaces it), the metric, and reached
 *    (several processes: evaluated by the process of micro-batch 0 and broadcast);
 * 5. @c row; @c save when a checkpoint is due: after an evaluation, at the end, when reached,
 *    or when (s + 1) % save_every == 0; @c progress;
 * 6. the run ends after the last step or once reached.
 * Bits: the run draws and computes exactly as these calls written out by hand; a run resumed
 * from a checkpoint saved after step k (cfg->start = k, its best_val, the state restored)
 * continues bit for bit.
 * @param res  receives how the run ended (may be NULL)
 * Errors (run-time): ::TG_ERR_ARG (NULL ctx, opt, cfg, cb or cb->micro; steps < 1, start out
 * of [0, steps), eval_every < 1, save_every < 0, warmup < 0, noam with d_model < 1), the
 * status of the failing callback or step (res->failed says which).
 */
TG_API tg_status tg_train_run(tg_ctx *ctx, tg_optim *opt, const tg_train_config *cfg,
                              const tg_train_callbacks *cb, tg_train_result *res);

/**
 * What a run records of itself in its checkpoint beside the model and the training state: the
 * data it trained on (`data.*`) and its options (`train.*`), so a resumed run continues with
 * exactly the same ones and a reader can tell what produced the file. The one writer of these
 * keys is tg_train_record_meta().
 */
typedef struct tg_train_record {
    const char *mode;       /**< `data.mode`: "text", "task" or "pairs" */
    const tg_text *text;    /**< mode "text": the corpus (`data.vocab` as hex bytes,
                                 `data.bytes`, `data.files`, `data.text_hash` fnv1a64:HEX16) */
    tg_task_kind task;      /**< mode "task": `data.task` (tg_task_name()) */
    int64_t seed;           /**< `train.seed` */
    tg_optim_kind optimizer; /**< `train.optimizer`: adamw, adam or sgd */
    int64_t batch;          /**< `train.batch` (B: sequences per step) */
    int64_t grad_accum;     /**< `train.grad_accum` (K) */
    int64_t warmup;         /**< `train.warmup` */
    int64_t eval_every;     /**< `train.eval_every` */
    int64_t save_every;     /**< `train.save_every` (written when > 0) */
    double lr, min_lr, weight_decay, clip, momentum; /**< `train.lr` ... `train.momentum` */
    double val_fraction;    /**< `data.val_fraction` */
    double target_acc;      /**< `train.target_acc` */
    double target_bleu;     /**< `train.target_bleu` (mode "pairs" only) */
    tg_lr_schedule schedule; /**< `train.schedule`: cosine or noam */
    tg_precision precision; /**< `train.precision`: f32 or bf16 */
    double beta2, eps, label_smoothing; /**< `train.beta2`, `train.eps`,
                                             `train.label_smoothing` */
    int64_t keep_best;      /**< `train.keep_best`: 1 when the run keeps its best checkpoint
                                 beside the last (`tgrad train --keep-best`; written when 1) */
    /* The data as tg_train_record_read() reads it back (@c text is NULL then); the writer
     * takes them when @c text is NULL. */
    int vocab_size;           /**< mode "text": `data.vocab`'s length, 1..256 */
    unsigned char vocab[256]; /**< its bytes, strictly increasing */
    int64_t bytes;            /**< `data.bytes` */
    int64_t files;            /**< `data.files` */
    uint64_t text_hash;       /**< `data.text_hash` */
    uint64_t pairs_hash;      /**< mode "pairs": `data.pairs_hash` (fnv1a64:HEX16) */
    uint64_t valid_hash;      /**< mode "pairs": `data.valid_hash` */
    uint64_t has;             /**< the keys held, as tg_train_record_has() tells (set by
                                   tg_train_record_read(), tg_train_record_mark()) */
} tg_train_record;

/** Most entries tg_train_record_meta() writes. */
#define TG_TRAIN_RECORD_META_MAX 40

/** The entries of tg_train_record_meta(): @c keys[i] = @c values[i] for i < n, in order; a NULL
 *  value places a training-state key (tg_train_checkpoint_save()). The values point into
 *  @c store. */
typedef struct tg_train_meta_list {
    int n;
    const char *keys[TG_TRAIN_RECORD_META_MAX];
    const char *values[TG_TRAIN_RECORD_META_MAX];
    char store[TG_TRAIN_RECORD_META_MAX][520];
} tg_train_meta_list;

/**
 * The `data.*` and `train.*` metadata of record @p r, ready as the extra entries of
 * tg_train_checkpoint_save() (more may follow, e.g. a tokenizer's). In this order:
 * `data.mode`; mode pairs: `train.target_bleu`; mode text: `data.vocab`, `data.bytes`,
 * `data.files`, `data.text_hash`; mode task: `data.task`; the places of the training state's
 * `data.position`, `train.steps`, `train.best_val`; `train.seed`, `train.optimizer`,
 * `train.batch`, `train.grad_accum`, `train.warmup`, `train.eval_every`, `train.save_every`
 * (when > 0), `train.lr`, `train.min_lr`, `train.weight_decay`, `train.clip`,
 * `train.momentum`, `data.val_fraction`, `train.target_acc`, `train.schedule`,
 * `train.precision`, `train.beta2`, `train.eps`, `train.label_smoothing`; mode pairs:
 * `data.pairs_hash`, `data.valid_hash` when the record holds them (tg_train_record_mark()).
 * Integers in decimal; numbers as the shortest decimal that reads back as the same double.
 * Mode text without a corpus (@c text NULL: a record tg_train_record_read() gave): the
 * record's own `vocab`, and `bytes`, `files`, `text_hash` when it holds them, so a record
 * read back is written as the same entries.
 * Errors (run-time): ::TG_ERR_ARG (NULL arguments, an unknown mode, mode text without a
 * corpus or a vocabulary, an unknown optimizer, schedule, precision or task).
 */
TG_API tg_status tg_train_record_meta(tg_ctx *ctx, const tg_train_record *r,
                                      tg_train_meta_list *m);

/**
 * Whether record @p r holds key @p key (`data.vocab`, `train.lr`, ...): set by
 * tg_train_record_read() for each key the file has; a record given to tg_train_record_meta()
 * without a corpus writes `data.bytes`, `data.files`, `data.text_hash`, `data.pairs_hash` and
 * `data.valid_hash` only when it holds them.
 */
TG_API bool tg_train_record_has(const tg_train_record *r, const char *key);
/** Mark record @p r as holding key @p key (for tg_train_record_meta() without a corpus, or the
 *  pairs' hashes); false for a key that is not the record's. */
TG_API bool tg_train_record_mark(tg_train_record *r, const char *key);

/**
 * The reader of tg_train_record_meta()'s keys (untrusted input), from checkpoint @p st into
 * @p out (zeroed first; a key the file lacks stays 0 and tg_train_record_has() false).
 * `data.mode` is required: text, task or pairs. Mode text: `data.vocab` required (1 to 256
 * distinct bytes, increasing, as lowercase or uppercase hex), `data.bytes` (1 to
 * ::TG_TEXT_MAX_BYTES), `data.files` (1 to 2^31 - 1) and `data.text_hash` optional; mode task:
 * `data.task` required (tg_task_name()); mode pairs: `data.pairs_hash` and `data.valid_hash`
 * required; a data key of another mode is refused. Hashes are "fnv1a64:" and 16 lowercase hex
 * digits. The `train.*` keys and `data.val_fraction` are optional (older files lack some):
 * integers by tg_meta_parse_int()'s rule (`train.seed` 0 to 2^63 - 1; `train.batch`,
 * `train.grad_accum`, `train.eval_every`, `train.save_every` 1 to 2^53; `train.warmup` 0 to
 * 2^53), numbers plain finite decimals (no sign but '-', no inf, nan or hex) in range
 * (`train.lr`, `train.min_lr`, `train.weight_decay`, `train.clip` >= 0; `train.momentum`,
 * `train.target_acc`, `train.label_smoothing` in [0, 1]; `data.val_fraction`, `train.beta2`
 * in [0, 1); `train.eps` in (0, 1]; `train.target_bleu` in [0, 100]), names
 * (`train.optimizer` sgd, adam or adamw; `train.schedule` cosine or noam; `train.precision`
 * f32 or bf16). Messages name the key and its value: "tg_train_record_read: LABEL: checkpoint
 * field 'train.lr' 'abc': expected a number >= 0" (@p label NULL: "<memory>").
 * @param bad  receives the key at fault on ::TG_ERR_FORMAT, NULL otherwise (may be NULL)
 * Errors (run-time): ::TG_ERR_ARG (NULL ctx, st or out), ::TG_ERR_FORMAT (the first key at
 * fault, in the order tg_train_record_meta() writes them; @p out then holds what was read
 * before it, `mode` included unless the fault is `data.mode`).
 */
TG_API tg_status tg_train_record_read(tg_ctx *ctx, const tg_safetensors *st, const char *label,
                                      tg_train_record *out, const char **bad);

/**
 * Record @p r (read back by tg_train_record_read()) against the data a resumed run loaded,
 * given as a record @p data the way tg_train_record_meta() takes it (the mode and its corpus
 * or task): the same mode; mode text: `data.bytes`, `data.files`, `data.text_hash` (each when
 * @p r holds it) and `data.vocab` the corpus's, in that order; mode task: `data.task`. Mode
 * pairs checks nothing here (the sentence pairs' hashes are their loader's).
 * @param bad  receives the key that differs (`data.mode`, `data.bytes`, ...), else NULL (may be
 *             NULL); the message names it and both values
 * Errors (run-time): ::TG_ERR_ARG (NULL ctx, r or data; mode text without a corpus; the data
 * differs).
 */
TG_API tg_status tg_train_record_check_data(tg_ctx *ctx, const tg_train_record *r,
                                            const tg_train_record *data, const char **bad);

/** The CSV header of a training log: `step,train_loss,val_loss,lr,tokens_per_s,METRIC\n`
 *  with METRIC @p metric ("val_acc", "val_bleu"), or the five columns without it (NULL).
 *  Returns the bytes written (without the NUL), or -1 when @p n is too small. */
TG_API int tg_train_log_header(const char *metric, char *buf, size_t n);

/** Row @p r of a training log, as tg_train_log_header() names its columns: `step,train_loss
 *  (%.6f),val_loss (%.6f, empty unless evaluated and finite),lr (%.6g),tokens_per_s
 *  (%.1f)`, then with @p metric `,METRIC` (%.6f, empty unless evaluated and finite), and a
 *  newline. Returns the bytes written (without the NUL), or -1 when @p n is too small. */
TG_API int tg_train_log_row(const tg_train_row *r, bool metric, char *buf, size_t n);
/**@}*/

/**
 * @name The built-in run of a per-position model (text and task)
 * A language model on a byte-level corpus (`tgrad train --text`) or an encoder on an
 * algorithmic task (`tgrad train`): one graph over micro-batches of Bm = B / K rows, ids and
 * targets (Bm, T) ::TG_I32, logits (Bm, T, V), the loss the mean cross-entropy over the Bm T
 * targets (with label smoothing the training loss is tg_cross_entropy_smoothed() and the
 * validation reads the plain loss, a second output). tg_train_tokens_bind() gives
 * tg_train_run() its batch (tg_text_train_batch() or tg_task_train_batch() from the context
 * RNG), its micro-batch (forward, backward seeded 1/K, the loss counted 1/K) and its
 * evaluation:
 * - text: tg_text_evaluate() over the validation windows (metric NaN);
 * - task: the loss and the token accuracy (argmax of the logits against the targets) over 8
 *   fixed batches of held-out sequences from tg_task_batch() with the state
 *   `eval_seed ^ 0x5eed5eed`; reached when the accuracy >= target_acc > 0.
 */
/**@{*/
/** Options of tg_train_tokens_new(). */
typedef struct tg_train_tokens_opts {
    const tg_text *text;    /**< text mode: the corpus (borrowed); NULL: a task */
    tg_task_kind task;      /**< task mode: the task */
    uint64_t eval_seed;     /**< task mode: the held-out batches' seed */
    int64_t batch, seq_len; /**< B (sequences per step), T */
    int64_t grad_accum;     /**< K >= 1 micro-batches per step; K divides B */
    int64_t first, count;   /**< this process's micro-batches (one process: 0, K) */
    double label_smoothing; /**< the training loss's smoothing in [0, 1) */
    tg_precision precision; /**< the graph's products */
    bool detect_anomaly;    /**< tg_graph_opts.detect_anomaly */
    double target_acc;      /**< task mode: reached at this accuracy (0: never) */
    /** task mode with an encoder-decoder model (cfg.n_decoder_layers > 0): teacher forcing,
     *  the decoder input (Bm, T) the targets shifted right after @c bos (tg_shift_right());
     *  the evaluation's metric is the exact-sequence accuracy of greedy decoding
     *  (tg_greedy_decode() of a tg_greedy over the model at @c precision, made at the first
     *  evaluation; or the caller's, tg_train_tokens_set_decoder()) */
    bool seq2seq;
    int32_t bos;            /**< seq2seq: the decoder's first input */
    bool no_cache;          /**< seq2seq: the greedy decoder recomputes the whole target
                                 prefix each step instead of using the KV cache (tg_greedy_new()) */
} tg_train_tokens_opts;

typedef struct tg_train_tokens tg_train_tokens;

/**
 * Build the training graph of @p model (tg_transformer_forward(); a causal model for text)
 * for @p o, with K > 1 the accumulator (tg_grad_accum_new() over every parameter) and the
 * backward seed 1/K. The model and the corpus stay the caller's and must outlive the run.
 * Errors (NULL returned, the error on the context): ::TG_ERR_ARG (NULL arguments, B, T or K
 * below 1, K not dividing B, first/count outside [0, K)), those of the builders.
 */
TG_API tg_train_tokens *tg_train_tokens_new(tg_ctx *ctx, const tg_transformer *model,
                                            const tg_train_tokens_opts *o);

/** Fill @p cb's model_user, batch, micro and evaluate, and @p cfg's accum and
 *  tokens_per_step (B T), for tg_train_run(); @p cb's user and other callbacks stay the
 *  caller's. */
TG_API void tg_train_tokens_bind(tg_train_tokens *m, tg_train_callbacks *cb,
                                 tg_train_config *cfg);

/** The evaluation tg_train_tokens_bind() gives the run (for a caller that wraps it, e.g. to
 *  evaluate on one process and broadcast): the validation loss, the accuracy (text: NaN) and
 *  whether the target is reached. Leaves the context in training mode on success. */
TG_API tg_status tg_train_tokens_evaluate(tg_train_tokens *m, double *val_loss,
                                          double *accuracy, bool *reached);

/**
 * seq2seq: the greedy decoder the evaluation uses instead of the library's own (a tg_greedy
 * over the model, tgrad_decode.h), B sources (B, T) -> B outputs (B, T). Evaluation measures
 * over 8 fixed held-out batches the teacher-forced loss, the exact-sequence accuracy (the
 * metric; reached at target_acc) and the token accuracy (tg_train_tokens_token_accuracy()); a
 * decoder returning ::TG_ERR_NONFINITE makes the loss NaN and both accuracies 0 (the error
 * cleared). @p decode NULL: the library's own again.
 */
TG_API void tg_train_tokens_set_decoder(tg_train_tokens *m,
                                        tg_status (*decode)(void *user, const int32_t *src,
                                                            int32_t *out),
                                        void *user);

/** seq2seq: the token accuracy of the last evaluation (NaN before one, or for text and task). */
TG_API double tg_train_tokens_token_accuracy(const tg_train_tokens *m);

/** The training graph (for DOT files and memory reports), the accumulator (NULL when K = 1). */
TG_API tg_graph *tg_train_tokens_graph(const tg_train_tokens *m);
TG_API tg_grad_accum *tg_train_tokens_accum(const tg_train_tokens *m);

/** Release the run's buffers (the graph and tensors belong to the context); NULL: no-op. */
TG_API void tg_train_tokens_free(tg_train_tokens *m);
/**@}*/

#ifdef __cplusplus
}
#endif
#endif /* TGRAD_TRAIN_H */
