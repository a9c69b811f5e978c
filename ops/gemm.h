/*
 * gemm.h - internal layer 2: the one entry point for matrix products (ops/gemm.c, the bf16 form
 * in ops/gemm_bf16.c), for the ops that multiply matrices (matmul, dense, flash attention) and
 * the white-box tests and GEMM benchmark.
 */
#ifndef TG_GEMM_H
#define TG_GEMM_H

#include "core.h"
#include "par.h"

/* C (M, N) = (acc ? C : 0) + op(A) op(B), op(A) (M, K), op(B) (K, N); lda/ldb/ldc are the row
 * strides of A, B, C as stored. Each C element is one chain over k in increasing order computed
 * by one thread (FMA where the CPU has it), so results do not depend on nt. ws (not NULL): nt
 * per-thread slices of at least tg__gemm_ws_bytes_nk(dt, 1, N, K) bytes, 64-byte aligned.
 * nt == 1 never opens an OpenMP region, so a caller's parallel loop may call it per item.
 * These entries run ungoverned (every thread they are given); a kernel calls the governed
 * forms below with its call record's table. */
void tg__gemm_f32(int nt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc, bool acc,
                  void *ws);
void tg__gemm_f64(int nt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double *A,
                  int64_t lda, const double *B, int64_t ldb, double *C, int64_t ldc, bool acc,
                  void *ws);
/* Epilogue on the finished C (dense forward): C = act(C + bias), bias (N) per column, added
 * first (the chain starts at bias[j]; needs acc false); pre (row stride ldc), if non-NULL,
 * receives C + bias before the activation. */
enum { TG__EPI_NONE, TG__EPI_RELU, TG__EPI_GELU };
typedef struct tg__gemm_epi {
    const void *bias;
    int act;
    void *pre;
} tg__gemm_epi;
void tg__gemm_ex_f32(int nt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A,
                     int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc, bool acc,
                     void *ws, const tg__gemm_epi *epi);
void tg__gemm_ex_f64(int nt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                     const double *A, int64_t lda, const double *B, int64_t ldb, double *C,
                     int64_t ldc, bool acc, void *ws, const tg__gemm_epi *epi);
/* The micro-kernel family: TG__ISA_BEST picks the best this CPU runs; the others cap the choice
 * (tests compare the kernels: AVX-512 and AVX2 give the same bits, both FMA chains in the same
 * order; the portable one rounds multiply and add separately). */
enum { TG__ISA_BEST, TG__ISA_PORTABLE, TG__ISA_AVX2, TG__ISA_AVX512 };
void tg__gemm_isa_f32(int isa, int nt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                      const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                      int64_t ldc, bool acc, void *ws, const tg__gemm_epi *epi);
void tg__gemm_isa_f64(int isa, int nt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                      const double *A, int64_t lda, const double *B, int64_t ldb, double *C,
                      int64_t ldc, bool acc, void *ws, const tg__gemm_epi *epi);
/* The family TG__ISA_BEST resolves to on this CPU. */
int tg__gemm_isa(void);
/* bf16 products with f32 accumulation (ops/gemm_bf16.c): tg__gemm_isa_f32's contract with
 * both operands rounded to bf16 (nearest, ties to even) as they are packed; each element one
 * chain over k pairs, the odd product of a pair added first (vdpbf16ps's order), so results do
 * not depend on nt. isa TG__ISA_BEST (or TG__ISA_AVX512) uses the AVX512_BF16 kernel where the
 * CPU has it, any other value the portable kernel: the two agree except on subnormal values
 * (which vdpbf16ps flushes). ws: tg__gemm_bf16_ws_bytes_nk(nt, N, K) bytes, 64-byte aligned. */
void tg__gemm_isa_bf16(int isa, int nt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                       const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                       int64_t ldc, bool acc, void *ws, const tg__gemm_epi *epi);
size_t tg__gemm_bf16_ws_bytes_nk(int nt, int64_t n, int64_t k);
/* 1 if this CPU runs the AVX512_BF16 kernel (vdpbf16ps), else 0. */
int tg__gemm_bf16_hw(void);
/* tg__gemm_ex_f32 / _f64 with the size class's governor record in table govs (core.h: site
 * "gemm", class tg__gemm_gov_class of the flops; NULL: ungoverned). */
void tg__gemm_gov_f32(tg__govs *govs, int nt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                      const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                      int64_t ldc, bool acc, void *ws, const tg__gemm_epi *epi);
void tg__gemm_gov_f64(tg__govs *govs, int nt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                      const double *A, int64_t lda, const double *B, int64_t ldb, double *C,
                      int64_t ldc, bool acc, void *ws, const tg__gemm_epi *epi);
/* The f32 product at a graph's compute precision (tg_graph_opts.precision), governed by table
 * govs: TG_PRECISION_F32 is tg__gemm_gov_f32, TG_PRECISION_BF16 tg__gemm_isa_bf16 with the
 * best kernel of this CPU. ws: tg__gemm_ws_bytes_prec(TG_F32, prec, nt, N, K) bytes
 * (ops/gemm_bf16.c). */
void tg__gemm_prec_f32(tg__govs *govs, int prec, int nt, bool ta, bool tb, int64_t M, int64_t N,
                       int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                       float *C, int64_t ldc, bool acc, void *ws, const tg__gemm_epi *epi);
/* Workspace of tg__gemm_prec_f32 (dt TG_F32) or of the f64 GEMM (dt TG_F64, prec ignored). */
size_t tg__gemm_ws_bytes_prec(tg_dtype dt, int prec, int nt, int64_t n, int64_t k);
/* Workspace of nt threads for products of any shape (the largest blocks) ... */
size_t tg__gemm_ws_bytes(tg_dtype dt, int nt);
/* ... or for products with at most n columns (of C) and k inner steps: small shapes take
 * little (a 64-wide attention block ~25 KiB instead of ~530 KiB). */
size_t tg__gemm_ws_bytes_nk(tg_dtype dt, int nt, int64_t n, int64_t k);

/* The thread schedule of a blocked product, shared by ops/gemm.c and ops/gemm_bf16.c; it
 * depends on the shapes, the thread count and the site's governor only, never on the data.
 * Threads: min(nt, flops / per_thread), fewer for few row strips (one column group each), 1
 * while the governor of products of about gov_flops (its record in table govs, looked up only
 * when more than one thread would run; NULL: ungoverned) backs off. Then one of three forms:
 *   - nth == 1: the whole product on the calling thread;
 *   - columns (fewer than 8 row strips of mr rows): `groups` tasks, each `cw` panels of nr
 *     columns over every row and all of K (tg__gemm_run_columns);
 *   - otherwise the shared-B task schedule (src/core/par.h) over column blocks of nc columns
 *     and K chunks of kc: `sched` has its counts (blocks, pack tasks of `ppt` panels, row tasks
 *     of `rows` rows); the caller sets pack, rows and arg and runs it with tg__sched_run. */
/* Panels of op(B) per pack task of the shared-B form. */
#define TG__GEMM_PANELS_PER_PACK 4
typedef struct tg__gemm_plan {
    int nth;          /* threads */
    bool columns;     /* the column-group form */
    int64_t n, nr;    /* columns of C; panel width */
    int64_t cw;       /* column form: panels per group */
    int64_t groups;   /* column form: groups */
    int64_t nkb;      /* shared-B form: K chunks per column block */
    int64_t rows;     /* shared-B form: rows per row task (whole strips) */
    int64_t ppt;      /* shared-B form: panels per pack task */
    tg__sched sched;  /* shared-B form: nb, np, nr and gov filled */
    tg__par_gov *gov; /* the governor the region reports to (NULL: none) */
} tg__gemm_plan;
void tg__gemm_plan_make(tg__gemm_plan *p, tg__govs *govs, int nt, int64_t M, int64_t N, int64_t K,
                        int mr, int nr, int64_t kc, int64_t nc, double flops, double per_thread,
                        double gov_flops);
/* Runs the column form: part(arg, n0, n1, thread) for each group's columns [n0, n1), on
 * p->nth threads (thread: the caller's index for its private workspace). Race-free: a group
 * owns its columns of C. */
void tg__gemm_run_columns(const tg__gemm_plan *p,
                          void (*part)(void *arg, int64_t n0, int64_t n1, int thread), void *arg);

#endif /* TG_GEMM_H */
