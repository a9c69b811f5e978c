/*
 * app_core.c - an embedder's smallest program, compiled against the installed headers and
 * linked with `pkg-config tgrad` (tests/link/install_link.sh): y = x W, its gradient, and an
 * error reported through the context.
 */
#include <stdio.h>
#include <string.h>

#include "tgrad.h"

int main(void)
{
    tg_ctx *ctx = tg_ctx_new();
    if (!ctx)
        return 1;
    tg_tensor *x = tg_input(ctx, TG_F32, TG_DIMS(2, 3), "x");
    tg_tensor *w = tg_param(ctx, TG_F32, TG_DIMS(3, 1), "w");
    tg_tensor *loss = tg_sum_all(ctx, tg_matmul(ctx, x, w, false, false));
    tg_graph *g = tg_graph_new(ctx, &loss, 1);
    if (!g) {
        fprintf(stderr, "%s\n", tg_ctx_message(ctx));
        return 1;
    }
    const float xv[6] = {1, 2, 3, 4, 5, 6}, wv[3] = {1, 1, 1};
    tg_tensor_set_data(x, xv, TG_F32, 6);
    tg_tensor_set_data(w, wv, TG_F32, 3);
    if (tg_graph_forward(g) != TG_OK || tg_graph_backward(g, loss, NULL) != TG_OK) {
        fprintf(stderr, "%s\n", tg_ctx_message(ctx));
        return 1;
    }
    float gw[3];
    tg_tensor_get_grad(w, gw, TG_F32, 3);
    double l = tg_get(loss, 0);
    /* a library's own error through the public reporting call */
    tg_status s = tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_IO, "app", "disk %d full", 1);
    int ok = l == 21 && gw[0] == 5 && gw[1] == 7 && gw[2] == 9 && s == TG_ERR_IO &&
             !strcmp(tg_ctx_message(ctx), "app: disk 1 full");
    printf("loss %g, grad (%g, %g, %g), message '%s': %s\n", l, gw[0], gw[1], gw[2],
           tg_ctx_message(ctx), ok ? "ok" : "WRONG");
    tg_ctx_free(ctx);
    return ok ? 0 : 1;
}
