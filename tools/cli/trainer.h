/*
 * trainer.h - what one `tgrad train` holds, shared by cmd_train.c (the setup, the run's
 * callbacks) and train_report.c (the banner, the dry runs, the report).
 */
#ifndef TG_TRAINER_H
#define TG_TRAINER_H

#include "ckpt_config.h"
#include "cli.h"
#include "outpath.h"
#include "svgplot.h"
#include "tgrad_decode.h"
#include "tgrad_train.h"
#include "train_args.h"
#include "train_data.h"
#include "train_log.h"
#include "train_mpi.h"
#include "train_pairs.h"
#include "train_progress.h"

/* Everything one run holds; freed by trainer_free (cmd_train.c). */
typedef struct trainer {
    train_args a;
    cli_result r;
    int argc;
    char **argv;
    bool text;
    bool s2s; /* --arch seq2seq */
    bool pairs; /* --pairs: translation (train_pairs.c) */
    pairs_run pr;
    task_kind task;
    tg_ctx *ctx;
    tg_safetensors *ck; /* the --resume checkpoint, or NULL */
    ckpt_info info;
    tg_text *corp;     /* --text: the corpus (tgrad_data.h) */
    tg_text_info ci;   /* its counts */
    tg_transformer_config mc;
    tg_transformer model;
    /* text, task, seq2seq: the library's graph, batches and evaluation (tg_train_tokens) */
    tg_train_tokens *tok_run;
    tg_graph *g;
    tg_optim *opt;
    int64_t V, T, B, n_params, start;
    /* --grad-accum K: the graph runs Bm = B / K rows; this process runs micro-batches
     * first .. first+count-1 of each step (one process: 0 .. K-1) */
    int64_t K, Bm, first, count;
    tg_grad_accum *accum; /* K > 1: the tree sum of the micro-batches' gradients */
    train_mpi mp;         /* under mpirun: rank r of P runs micro-batches r K/P .. */
    bool interrupted;     /* a rank got SIGINT/SIGTERM (agreed by all ranks) */
    bool agreed_failure;  /* every rank stopped on the same error (rank 0 printed it) */
    bool comm_failed;     /* an MPI call failed: the ranks may disagree */
    train_log log;       /* --log (train_log.h) */
    bool saved;          /* a checkpoint was saved by this run */
    char *best_path;     /* --keep-best: the best checkpoint's file (train_plan), or NULL */
    double best_bleu;    /* --pairs --keep-best: the highest validation BLEU so far, or -1 */
    bool best_due;       /* this step's evaluation is the best: save it there too */
    int64_t kept[TRAIN_KEEP_LAST_MAX + 1]; /* --keep-last: the steps of the step files kept,
                                            * oldest first (train.kept) */
    int n_kept;
    outpath_lock lock;   /* --checkpoint's lock, held for the whole run */
    svg_series train_curve, val_curve;
    svg_series acc_curve; /* a task run: the held-out accuracy it stops on */
    /* progress and results */
    train_progress pg; /* the progress lines (train_progress.h) */
    int64_t step, end, trained;
    double tok_s, last_val, best_val, acc, last_draw;
    double tok_acc; /* seq2seq: held-out token accuracy of greedy decoding (acc: sequences) */
    bool reached;
    bool usage; /* the setup failed on the command line (exit 2), not on a file (exit 1) */
} trainer;

/* plan -> data -> build (train_setup.c), agreed by every rank under mpirun: true when the run
 * can start; otherwise @p rc is the exit status (1; 2: the command line; 130: a signal). */
bool train_setup(trainer *t, int *rc);
/* Save the checkpoint after @p steps_done steps (train_save.c); false with the error said. */
bool train_save(trainer *t, int64_t steps_done);
/* The same state into --keep-best's file (t->best_path). */
bool train_save_best(trainer *t, int64_t steps_done);
/* --keep-last N: is the save after @p steps_done steps one that keeps a step file (an
 * evaluation's, --save-every's, the last step's; not a stop's)? */
bool train_keep_due(const trainer *t, int64_t steps_done);
/* Before that save: the oldest step files beyond N removed, and the step recorded (train.kept
 * of the checkpoint lists it before its file exists, so no kill leaves a file unrecorded). */
void train_keep_begin(trainer *t, int64_t steps_done);
/* After it: the same state into CK.stepS.ckpt (train_plan_step_path), then the oldest step
 * files beyond N removed: only files of the run's own list, by exact name, each checked to be
 * still the checkpoint the run wrote there. */
bool train_keep_save(trainer *t, int64_t steps_done);
/* The run's two lines on stderr: the data and the model (train_report.c). */
void train_print_banner(const trainer *t);
/* --dry-run: the training graph's memory plan (--pairs: the model and its state). */
int train_dry_run(trainer *t);
int train_dry_run_pairs(trainer *t);
/* The exit status of a run that trained: 130 interrupted, 3 target missed, else 0. */
int train_report_rc(const trainer *t);
/* The summary on stdout, the plot, the resume command of an interrupted run; the exit
 * status (train_report_rc, or 1 when the plot cannot be written). */
int train_report(trainer *t);

#endif
