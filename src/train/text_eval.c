/*
 * text_eval.c - tg_text_evaluate (include/tgrad_train.h): the validation loss of a byte-level
 * text corpus, its windows in batches through the caller's graph and tg_evaluate. Apart from
 * step.c because it needs the text corpora (src/data/), which the minimal runtime build leaves
 * out.
 */
#include "tgrad_train.h"
#include "tgrad_data.h"
#include "core.h"

#include <math.h>
#include <stdlib.h>

/* tg_text_evaluate's batches: Bm validation windows at a time through the caller's graph. */
typedef struct {
    const tg_text *text;
    tg_graph *g;
    tg_tensor *ids, *targets, *loss;
    int64_t rows, T;
    int32_t *x, *y; /* (rows, T) */
} text_eval;

static tg_status text_eval_batch(void *user, int64_t i, double *sum, int64_t *tokens)
{
    text_eval *e = user;
    int64_t w = tg_text_val_batch(e->text, i, e->rows, e->T, e->x, e->y);
    size_t n = (size_t)(e->rows * e->T);
    tg_status s = tg_tensor_set_data(e->ids, e->x, TG_I32, n);
    if (s == TG_OK)
        s = tg_tensor_set_data(e->targets, e->y, TG_I32, n);
    if (s == TG_OK)
        s = tg_graph_forward(e->g);
    if (s != TG_OK)
        return s;
    *sum = tg_get(e->loss, 0) * (double)(w * e->T);
    *tokens = w * e->T;
    return TG_OK;
}

tg_status tg_text_evaluate(tg_ctx *ctx, const tg_text *text, tg_graph *g, tg_tensor *ids,
                           tg_tensor *targets, tg_tensor *loss, double *loss_per_token,
                           int64_t *tokens)
{
    static const char *fn = "tg_text_evaluate";
    if (loss_per_token)
        *loss_per_token = NAN;
    if (tokens)
        *tokens = 0;
    if (!ctx)
        return TG_ERR_ARG;
    tg__begin(ctx);
    if (!text || !g || !ids || !targets || !loss || !loss_per_token) {
        tg__run_err(ctx, TG_ERR_ARG, fn, "NULL argument");
        return TG_ERR_ARG;
    }
    if (tg_tensor_dtype(ids) != TG_I32 || tg_tensor_dtype(targets) != TG_I32) {
        tg__run_err(ctx, TG_ERR_DTYPE, fn, "ids and targets must be i32");
        return TG_ERR_DTYPE;
    }
    if (tg_tensor_rank(ids) != 2 || tg_tensor_rank(targets) != 2 ||
        tg_tensor_dim(ids, 0) != tg_tensor_dim(targets, 0) ||
        tg_tensor_dim(ids, 1) != tg_tensor_dim(targets, 1) || tg_tensor_numel(loss) != 1) {
        tg__run_err(ctx, TG_ERR_SHAPE, fn, "ids and targets must be (Bm, T) alike and loss a "
                    "scalar");
        return TG_ERR_SHAPE;
    }
    text_eval e = {text, g, ids, targets, loss, tg_tensor_dim(ids, 0), tg_tensor_dim(ids, 1),
                   NULL, NULL};
    size_t n = (size_t)(e.rows * e.T);
    e.x = malloc(sizeof *e.x * n);
    e.y = malloc(sizeof *e.y * n);
    tg_status s;
    if (!e.x || !e.y) {
        tg__run_err(ctx, TG_ERR_NOMEM, fn, "out of memory");
        s = TG_ERR_NOMEM;
    } else {
        int64_t windows = tg_text_val_windows(text, e.T);
        s = tg_evaluate(ctx, (windows + e.rows - 1) / e.rows, text_eval_batch, &e,
                        loss_per_token, tokens);
    }
    free(e.x);
    free(e.y);
    return s;
}
