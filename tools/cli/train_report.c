/* train_report.c - what `tgrad train` says besides progress: the banner, the dry runs' memory
 * plans, the summary, the plot and the resume command (see trainer.h). */
#define _GNU_SOURCE /* program_invocation_name */
#include "trainer.h"
#include "climsg.h"
#include "train_plan.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* @p s quoted for a POSIX shell when it needs it. */
static void shell_quote(const char *s, char *buf, size_t n)
{
    bool plain = *s != 0;
    for (const char *p = s; *p && plain; p++)
        plain = strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-./=:,+@%",
                       *p) != NULL;
    if (plain) {
        snprintf(buf, n, "%s", s);
        return;
    }
    size_t w = 0;
    if (w + 1 < n)
        buf[w++] = '\'';
    for (const char *p = s; *p && w + 5 < n; p++) {
        if (*p == '\'') {
            memcpy(buf + w, "'\\''", 4);
            w += 4;
        } else {
            buf[w++] = *p;
        }
    }
    if (w + 1 < n)
        buf[w++] = '\'';
    buf[w] = 0;
}

/* The command that resumes this run: the same arguments without --resume, --checkpoint and
 * --force, plus --resume CHECKPOINT. */
static void resume_command(const trainer *t, char *buf, size_t n)
{
    char q[1100];
    const char *prog = program_invocation_name ? program_invocation_name : "tgrad";
    shell_quote(prog, q, sizeof q);
    char launcher[48] = ""; /* under mpirun: the same number of processes (any P dividing K) */
    if (t->mp.size > 1)
        snprintf(launcher, sizeof launcher, "mpirun -np %d ", t->mp.size);
    size_t w = (size_t)snprintf(buf, n, "%s%s train", launcher, q);
    for (int i = 1; i < t->argc && w < n; i++) {
        const char *s = t->argv[i];
        if (!strcmp(s, "--resume") || !strcmp(s, "--checkpoint")) {
            i++;
            continue;
        }
        if (!strncmp(s, "--resume=", 9) || !strncmp(s, "--checkpoint=", 13) ||
            !strcmp(s, "--force"))
            continue;
        shell_quote(s, q, sizeof q);
        w += (size_t)snprintf(buf + w, n - w, " %s", q);
    }
    shell_quote(t->a.checkpoint, q, sizeof q);
    if (w < n)
        snprintf(buf + w, n - w, " --resume %s", q);
}

/* The exit status of a run that trained: 130 interrupted, 3 accuracy target missed, else 0. */
int train_report_rc(const trainer *t)
{
    if (t->interrupted)
        return 130;
    if (t->pairs)
        return (t->a.target_bleu > 0 && !t->reached && t->step == t->a.steps) ? 3 : 0;
    return (!t->text && t->a.target_acc > 0 && !t->reached && t->step == t->a.steps) ? 3 : 0;
}

int train_report(trainer *t)
{
    const train_args *a = &t->a;
    double wall = tprog_now() - t->pg.t0;
    tprog_end_live(&t->pg);
    svg_plot sp = {.train = &t->train_curve, .val = &t->val_curve,
                   .val_label = t->text ? "validation loss" : "held-out loss",
                   .log_y = a->plot_log, .metric = t->text ? NULL : &t->acc_curve,
                   .metric_label = t->pairs ? "validation BLEU (greedy)"
                                   : t->s2s ? "held-out exact-sequence accuracy"
                                            : "held-out token accuracy",
                   .metric_axis = t->pairs ? "BLEU" : NULL,
                   .metric_target = t->pairs ? a->target_bleu / 100 : a->target_acc};
    char perr[1600];
    if (a->plot && !svg_training_plot("--plot", a->plot, &sp, perr, sizeof perr)) {
        train_errf("%s", perr);
        return 1;
    }
    char line[400];
    snprintf(line, sizeof line, "parameters %" PRId64 "  steps %" PRId64 "  wall %.1f s  %.0f "
             "tokens/s", t->n_params, t->step, wall, t->tok_s);
    cli_say(stdout, "", line);
    if (t->pairs)
        snprintf(line, sizeof line, "validation loss %.4f nats/token (best %.4f); greedy %s, "
                 "chrF2 = %.2f%s", t->last_val, t->best_val, t->pr.bleu_line, t->pr.chrf,
                 t->reached || !(a->target_bleu > 0) ? "" : " (target BLEU not reached)");
    else if (t->text && !isfinite(t->last_val)) /* --val-fraction 0: nothing to validate on */
        snprintf(line, sizeof line, "no validation loss (--val-fraction 0)");
    else if (t->text)
        snprintf(line, sizeof line, "validation loss %.4f nats/char (best %.4f)", t->last_val,
                 t->best_val);
    else if (t->s2s)
        snprintf(line, sizeof line, "held-out exact-sequence accuracy %.2f%% (token accuracy "
                 "%.2f%%, greedy decoding)%s", 100 * t->acc, 100 * t->tok_acc,
                 t->reached || !(a->target_acc > 0) ? "" : ", target not reached");
    else
        snprintf(line, sizeof line, "held-out token accuracy %.2f%%%s", 100 * t->acc,
                 t->reached || !(a->target_acc > 0) ? "" : " (target not reached)");
    cli_say(stdout, "", line);
    if (a->checkpoint)
        printf("checkpoint %s\n", a->checkpoint);
    fflush(stdout);
    int rc = train_report_rc(t);
    if (t->mp.size > 1) {
        double bytes, sec;
        tmpi_stats(&t->mp, &bytes, &sec);
        snprintf(line, sizeof line, "%d processes x %d thread%s, %" PRId64 " micro-batches of %"
                 PRId64 " sequences per step", t->mp.size, tg_ctx_threads(t->ctx),
                 tg_ctx_threads(t->ctx) == 1 ? "" : "s", t->K, t->Bm);
        cli_say(stdout, "data parallel: ", line);
        snprintf(line, sizeof line, "%.2f ms and %.2f MB sent per process per step", 1e3 * sec,
                 bytes / 1e6);
        cli_say(stdout, "data parallel: gradient exchange ", line);
    }
    if (t->interrupted) {
        if (a->checkpoint) {
            char cmd[8192];
            resume_command(t, cmd, sizeof cmd);
            train_errf("interrupted at step %" PRId64 "; resume with: %s", t->step, cmd);
        } else {
            train_errf("interrupted at step %" PRId64 " (no --checkpoint: this run cannot be resumed)",
                 t->step);
        }
    }
    if (rc == 3 && t->pairs)
        train_errf("BLEU target %.2f not reached in %" PRId64 " steps", a->target_bleu, a->steps);
    else if (rc == 3)
        train_errf("accuracy target %.2f%% not reached in %" PRId64 " steps", 100 * a->target_acc,
             a->steps);
    return rc;
}

/* --dry-run: the training graph's memory plan, then exit (nothing is trained or written). */
int train_dry_run(trainer *t)
{
    tg_memory_report r;
    if (tg_graph_memory(t->g, &r) != TG_OK)
        return 1;
    size_t opt = tg_optim_state_bytes(t->opt);
    const struct {
        const char *name;
        size_t bytes;
    } rows[] = {
        {"parameters", r.parameters},   {"parameter gradients", r.parameter_grads},
        {"optimizer state", opt},       {"inputs", r.inputs},
        {"activations", r.activations}, {"saved for backward", r.saved},
        {"gradients", r.gradients},     {"workspace", r.workspace},
    };
    printf("memory plan of the training graph (batch %" PRId64 ", seq_len %" PRId64 ", %d "
           "thread%s, %" PRId64 " nodes%s)\n", t->B, t->T, tg_ctx_threads(t->ctx),
           tg_ctx_threads(t->ctx) == 1 ? "" : "s", tg_graph_size(t->g),
           t->a.precision == TG_PRECISION_BF16 ? ", bf16 products" : "");
    /* every line within 80 columns: what a row holds is said below the table */
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        printf("  %-22s %12zu bytes  %8.2f MiB%s\n", rows[i].name, rows[i].bytes,
               (double)rows[i].bytes / 1048576.0, i >= 4 ? " (planned)" : "");
    printf("  %-22s %12zu bytes  %8.2f MiB (shared)\n", "arena", r.arena,
           (double)r.arena / 1048576.0);
    /* --grad-accum K > 1: at most log2(K) + 2 packed gradient copies live at once */
    size_t copies = 0;
    int64_t depth = 1;
    if (t->accum) {
        for (int64_t k = 1; k < t->count; k *= 2)
            depth++;
        copies = (size_t)(depth + 1) * tg_grad_accum_bytes(t->accum);
        printf("  %-22s %12zu bytes  %8.2f MiB (--grad-accum %" PRId64 ")\n", "accumulation",
               copies, (double)copies / 1048576.0, t->K);
    }
    size_t peak = r.peak + opt + copies;
    printf("  %-22s %12zu bytes  %8.2f MiB\n", "peak", peak, (double)peak / 1048576.0);
    printf("planned: before sharing; the arena holds all of them, shared\n"
           "peak: parameters and gradients, optimizer state, inputs, arena%s\n",
           copies ? ", accumulation" : "");
    if (copies)
        printf("accumulation: at most %" PRId64 " packed copies of the gradients (micro-batches"
               " of %" PRId64 ")\n", depth + 1, t->Bm);
    return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}

/* --dry-run --pairs: graphs are built per batch shape, so report the model and state. */
int train_dry_run_pairs(trainer *t)
{
    size_t params = 0;
    for (int64_t i = 0; i < tg_ctx_n_params(t->ctx); i++) {
        tg_tensor *p = tg_ctx_param(t->ctx, i);
        params += (size_t)tg_tensor_numel(p) * tg_dtype_size(tg_tensor_dtype(p));
    }
    size_t opt = tg_optim_state_bytes(t->opt);
    printf("memory of the translation model\n");
    printf("  %-22s %12zu bytes  %8.2f MiB\n", "parameters", params, (double)params / 1048576.0);
    printf("  %-22s %12zu bytes  %8.2f MiB\n", "parameter gradients", params,
           (double)params / 1048576.0);
    printf("  %-22s %12zu bytes  %8.2f MiB\n", "optimizer state", opt, (double)opt / 1048576.0);
    printf("graphs: one per batch shape, built when first seen, sharing one arena\n"
           "(the largest batch's plan); each batch holds at most %" PRId64 " tokens\n",
           t->a.batch_tokens);
    return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}

/* The run's two lines on stderr: the data and the model. */
void train_print_banner(const trainer *t)
{
    char line[600];
    if (t->pairs) {
        tg_seq2seq_info ti = tg_seq2seq_get_info(t->pr.train);
        tg_seq2seq_info vi = tg_seq2seq_get_info(t->pr.valid);
        snprintf(line, sizeof line, "translation: %" PRId64 " training pairs (%"
                 PRId64 " target tokens), %" PRId64 " validation; %s tokenizer, "
                 "vocabulary %" PRId64, ti.pairs, ti.tgt_tokens, vi.pairs,
                 tg_tokenizer_kind(t->pr.tok), t->V);
    } else if (t->text)
        snprintf(line, sizeof line, "byte-level LM on %d file%s, %" PRId64
                 " bytes (%" PRId64 " train, %" PRId64 " validation), vocabulary %d",
                 t->ci.files, t->ci.files == 1 ? "" : "s", t->ci.bytes,
                 t->ci.train_bytes, t->ci.bytes - t->ci.train_bytes,
                 t->ci.vocab_size);
    else
        snprintf(line, sizeof line, "task '%s' on %" PRId64 "-digit sequences%s",
                 task_name(t->task), t->T, t->s2s ? ", encoder-decoder (teacher "
                 "forcing; greedy decoding evaluated)" : "");
    cli_say(stderr, "tgrad train: ", line);
    char dl[48] = "";
    if (t->s2s)
        snprintf(dl, sizeof dl, " + %" PRId64 " decoder", t->a.decoder_layers);
    char par[96] = "";
    if (t->K > 1)
        snprintf(par, sizeof par, " (%" PRId64 " micro-batches of %" PRId64 ")",
                 t->K, t->Bm);
    char procs[64] = "";
    if (t->mp.size > 1)
        snprintf(procs, sizeof procs, " per process, %d processes", t->mp.size);
    char bs[64];
    snprintf(bs, sizeof bs, t->pairs ? "batches of %" PRId64 " tokens"
                                     : "batch %" PRId64,
             t->pairs ? t->a.batch_tokens : t->B);
    snprintf(line, sizeof line, "%" PRId64 "%s layer%s, d_model %" PRId64 ", %"
            PRId64 " head%s, d_ff %" PRId64 ", %s, %" PRId64 " parameters, %s"
            "%s%s, %d thread%s%s%s", t->a.layers, dl,
            t->a.layers == 1 && !t->s2s ? "" : "s",
            t->a.d_model, t->a.heads, t->a.heads == 1 ? "" : "s", t->a.d_ff,
            t->a.post_norm ? "post-norm" : "pre-norm", t->n_params, bs, par,
            t->a.precision == TG_PRECISION_BF16 ? ", bf16 products" : "",
            tg_ctx_threads(t->ctx), tg_ctx_threads(t->ctx) == 1 ? "" : "s", procs,
            t->ck ? ", resumed" : "");
    cli_say(stderr, "tgrad train: ", line);
}

