/*
 * ctx.c - the context: allocator hook and allocation list, error state, RNG, thread count.
 * No mutable globals: two contexts on two threads are fully independent.
 */
#include "core.h"

#include <stdio.h>
#include <stdlib.h>

/* Every allocation carries this header; the context keeps a doubly linked list (newest first)
 * so that tg_ctx_free releases everything, tg__free one block early, and tg_ctx_rewind the
 * blocks made after a mark. The payload is 64-byte aligned: the header sits just below it and
 * records where the allocator's block really starts. */
typedef struct tg_block {
    struct tg_block *prev, *next;
    size_t size;             /* payload bytes */
    void *raw;               /* what the allocator returned */
    uint64_t seq;            /* allocation number (tg_ctx.alloc_seq) */
    uint64_t owner;          /* 0: none; TG__OWNER_CTX: the context; else a tensor's id + 1 */
    char pad_[64 - 3 * sizeof(void *) - sizeof(size_t) - 2 * sizeof(uint64_t)];
} tg_block;
_Static_assert(sizeof(tg_block) == 64, "block header is one cache line");

static void *default_alloc(void *user, size_t size)
{
    (void)user;
    return malloc(size);
}

static void default_free(void *user, void *p)
{
    (void)user;
    free(p);
}

const char *tg_status_str(tg_status s)
{
    static const char *const names[TG_STATUS_COUNT_] = {
        "TG_OK",           "TG_ERR_ARG",        "TG_ERR_SHAPE",         "TG_ERR_DTYPE",
        "TG_ERR_AXIS",     "TG_ERR_NOMEM",      "TG_ERR_STATE",         "TG_ERR_NOGRAD",
        "TG_ERR_NONFINITE", "TG_ERR_NOTFOUND",  "TG_ERR_GRADCHECK",     "TG_ERR_IO",
        "TG_ERR_FORMAT",   "TG_ERR_TRUNCATED",  "TG_ERR_HEADER_SIZE",   "TG_ERR_JSON",
        "TG_ERR_DUPLICATE", "TG_ERR_UNSUPPORTED", "TG_ERR_OVERFLOW",    "TG_ERR_SIZE_MISMATCH",
        "TG_ERR_OUT_OF_BOUNDS", "TG_ERR_OVERLAP", "TG_ERR_GAP",         "TG_ERR_TRAILING",
        "TG_ERR_MISMATCH",
    };
    if ((int)s < 0 || s >= TG_STATUS_COUNT_)
        return "TG_ERR_UNKNOWN";
    return names[s];
}

size_t tg_dtype_size(tg_dtype dt)
{
    return dt == TG_F32 ? 4 : dt == TG_F64 ? 8 : dt == TG_I32 ? 4 : 0;
}

const char *tg_dtype_str(tg_dtype dt)
{
    return dt == TG_F32 ? "f32" : dt == TG_F64 ? "f64" : dt == TG_I32 ? "i32" : "?";
}

bool tg_dtype_is_float(tg_dtype dt) { return dt == TG_F32 || dt == TG_F64; }

static int clamp_threads(int n)
{
    return n < 1 ? 1 : n > TG_MAX_THREADS ? TG_MAX_THREADS : n;
}

static int default_threads(void)
{
#ifdef TG_HAVE_OPENMP
    return clamp_threads(omp_get_max_threads());
#else
    return 1;
#endif
}

tg_ctx *tg_ctx_new_with(const tg_allocator *allocator)
{
    tg_allocator al = {default_alloc, default_free, NULL};
    if (allocator && allocator->alloc && allocator->free)
        al = *allocator;
    tg_ctx *ctx = al.alloc(al.user, sizeof *ctx);
    if (!ctx)
        return NULL;
    memset(ctx, 0, sizeof *ctx);
    ctx->al = al;
    ctx->n_threads = default_threads();
    ctx->training = true;
    ctx->eras = ctx->eras_inline;
    ctx->cap_eras = (int64_t)(sizeof ctx->eras_inline / sizeof ctx->eras_inline[0]);
    tg__govs_init(&ctx->govs);
    tg_ctx_seed(ctx, 0);
    return ctx;
}

tg_ctx *tg_ctx_new(void) { return tg_ctx_new_with(NULL); }

int64_t tg_ctx_par_sites(const tg_ctx *ctx) { return ctx ? ctx->govs.n : 0; }

tg_status tg_ctx_par_site(const tg_ctx *ctx, int64_t i, tg_par_site *out)
{
    return ctx && tg__govs_entry(&ctx->govs, i, out) ? TG_OK : TG_ERR_ARG;
}

void tg_ctx_free(tg_ctx *ctx)
{
    if (!ctx)
        return;
    tg_block *b = ctx->blocks;
    tg_allocator al = ctx->al;
    while (b) {
        tg_block *next = b->next;
        al.free(al.user, b->raw);
        b = next;
    }
    al.free(al.user, ctx);
}

void *tg__alloc(tg_ctx *ctx, size_t size, const char *fn)
{
    return tg__alloc_owned(ctx, size, fn, 0);
}

void *tg__alloc_owned(tg_ctx *ctx, size_t size, const char *fn, uint64_t owner)
{
    if (size > SIZE_MAX - sizeof(tg_block) - 64) {
        tg__err(ctx, TG_ERR_NOMEM, fn, "allocation of %zu bytes is too large", size);
        return NULL;
    }
    if (ctx->mem_limit && (ctx->bytes > ctx->mem_limit || size > ctx->mem_limit - ctx->bytes)) {
        tg__err(ctx, TG_ERR_NOMEM, fn,
                "allocating %zu bytes would exceed the memory limit of %zu bytes (%zu in use)",
                size, ctx->mem_limit, ctx->bytes);
        return NULL;
    }
    void *raw = ctx->al.alloc(ctx->al.user, sizeof(tg_block) + 63 + size);
    if (!raw) {
        tg__err(ctx, TG_ERR_NOMEM, fn, "out of memory allocating %zu bytes", size);
        return NULL;
    }
    uintptr_t pay = ((uintptr_t)raw + sizeof(tg_block) + 63) & ~(uintptr_t)63;
    tg_block *b = (tg_block *)pay - 1;
    b->raw = raw;
    b->seq = ctx->alloc_seq++;
    b->owner = owner;
    b->prev = NULL;
    b->next = ctx->blocks;
    b->size = size;
    if (ctx->blocks)
        ctx->blocks->prev = b;
    ctx->blocks = b;
    ctx->bytes += size;
    void *p = b + 1;
    memset(p, 0, size);
    return p;
}

void tg__set_owner(void *p, uint64_t owner)
{
    if (p)
        ((tg_block *)p - 1)->owner = owner;
}

void tg__free(tg_ctx *ctx, void *p)
{
    if (!p)
        return;
    tg_block *b = (tg_block *)p - 1;
    if (b->prev)
        b->prev->next = b->next;
    else
        ctx->blocks = b->next;
    if (b->next)
        b->next->prev = b->prev;
    ctx->bytes -= b->size;
    ctx->al.free(ctx->al.user, b->raw);
}

/* ----- marks: give back everything made after a point -------------------------------------
 * A rewind frees the blocks numbered from the mark's allocation number on (except those owned
 * by the context or by a tensor made before the mark), then sets the numbering back to the
 * mark's, so a loop that marks and rewinds reuses the same numbers. A mark is stale once a
 * rewind went to a point before it: rewinding to it then would free half of objects made since
 * (a tensor made just before its number keeping a pointer to data made just after). The rewind
 * history (ctx->eras, see core.h) tells: a mark taken at number s in era G is valid iff number
 * s - 1 was last handed out in an era <= G, i.e. no rewind since the mark went below s. */
tg_mark tg_ctx_mark(tg_ctx *ctx)
{
    tg_mark m = {0, 0, 0, 0};
    if (!ctx)
        return m;
    m.alloc_seq_ = ctx->alloc_seq;
    m.tensor_id_ = ctx->next_id;
    m.n_params_ = ctx->n_params;
    m.era_ = ctx->n_rewinds;
    return m;
}

/* The era in which allocation number seq was last handed out. */
static uint64_t era_of(const tg_ctx *ctx, uint64_t seq)
{
    for (int64_t k = ctx->n_eras - 1; k >= 0; k--)
        if (ctx->eras[k].seq <= seq)
            return ctx->eras[k].gen;
    return 0;
}

/* Entries left after a rewind to number seq drops the steps it overwrites. */
static int64_t eras_kept(const tg_ctx *ctx, uint64_t seq)
{
    int64_t n = ctx->n_eras;
    while (n > 0 && ctx->eras[n - 1].seq >= seq)
        n--;
    return n;
}

/* Room for one more entry. The history grows only with rewind points that stay in use (a
 * loop rewinding to one mark keeps one entry); past the inline array it moves to a block the
 * context owns (never released by a rewind). If that allocation fails, the two oldest steps
 * are merged under the newer era: marks that step covered may then be refused although
 * valid (never the reverse), and the error state is left as it was. */
static void eras_room(tg_ctx *ctx, int64_t keep)
{
    if (keep < ctx->cap_eras)
        return;
    tg_status st = ctx->status;
    bool sticky = ctx->sticky;
    char msg[sizeof ctx->msg];
    memcpy(msg, ctx->msg, sizeof msg);
    int64_t nc = 2 * ctx->cap_eras;
    struct tg__era *e = tg__alloc_owned(ctx, sizeof *e * (size_t)nc, "tg_ctx_rewind",
                                        TG__OWNER_CTX);
    if (e) {
        memcpy(e, ctx->eras, sizeof *e * (size_t)ctx->n_eras);
        if (ctx->eras != ctx->eras_inline)
            tg__free(ctx, ctx->eras);
        ctx->eras = e;
        ctx->cap_eras = nc;
        return;
    }
    ctx->status = st;
    ctx->sticky = sticky;
    memcpy(ctx->msg, msg, sizeof msg);
    ctx->eras[1].seq = ctx->eras[0].seq;
    memmove(&ctx->eras[0], &ctx->eras[1], sizeof *ctx->eras * (size_t)(ctx->n_eras - 1));
    ctx->n_eras--;
}

bool tg__mark_valid(const tg_ctx *ctx, tg_mark mark)
{
    return mark.alloc_seq_ <= ctx->alloc_seq && mark.tensor_id_ <= ctx->next_id &&
           mark.n_params_ <= ctx->n_params && mark.era_ <= ctx->n_rewinds &&
           (mark.alloc_seq_ == 0 || era_of(ctx, mark.alloc_seq_ - 1) <= mark.era_);
}

tg_status tg_ctx_rewind(tg_ctx *ctx, tg_mark mark)
{
    if (!ctx)
        return TG_ERR_ARG;
    if (!tg__mark_valid(ctx, mark)) {
        tg__run_err(ctx, TG_ERR_ARG, "tg_ctx_rewind",
                    "the mark is not from this context, or was already rewound past");
        return TG_ERR_ARG;
    }
    eras_room(ctx, eras_kept(ctx, mark.alloc_seq_));
    /* Graphs and shared arenas made after the mark (src/graph/order.c). */
    if (ctx->forget_after)
        ctx->forget_after(ctx, mark.alloc_seq_);
    ctx->n_params = mark.n_params_;
    tg_block *b = ctx->blocks;
    while (b && b->seq >= mark.alloc_seq_) {
        tg_block *next = b->next;
        /* kept: the context's own arrays, and what belongs to a tensor made before the mark
           (a parameter's gradient allocated by a later graph) */
        bool keep = b->owner == TG__OWNER_CTX || (b->owner != 0 && b->owner - 1 < mark.tensor_id_);
        if (!keep)
            tg__free(ctx, b + 1);
        b = next;
    }
    /* Back to the mark's numbering; from here numbers >= the mark's belong to a new era. */
    ctx->alloc_seq = mark.alloc_seq_;
    ctx->next_id = mark.tensor_id_;
    ctx->n_rewinds++;
    ctx->n_eras = eras_kept(ctx, mark.alloc_seq_);
    ctx->eras[ctx->n_eras++] = (struct tg__era){mark.alloc_seq_, ctx->n_rewinds};
    return TG_OK;
}

size_t tg_ctx_bytes(const tg_ctx *ctx) { return ctx ? ctx->bytes : 0; }

void tg_ctx_set_memory_limit(tg_ctx *ctx, size_t bytes)
{
    if (ctx)
        ctx->mem_limit = bytes;
}

size_t tg_ctx_memory_limit(const tg_ctx *ctx) { return ctx ? ctx->mem_limit : 0; }

/* Record "fn: message" as the context's error. A pending build error is never replaced. */
static void record(tg_ctx *ctx, bool sticky, tg_status s, const char *fn, const char *fmt,
                   va_list ap)
{
    if (!ctx || (ctx->status != TG_OK && (ctx->sticky || ctx->io_depth > 0)))
        return; /* a pending build error, or the first error of an I/O call, stays */
    ctx->status = s;
    ctx->sticky = sticky && ctx->io_depth == 0;
    int n = snprintf(ctx->msg, sizeof ctx->msg, "%s: ", fn ? fn : "tgrad");
    if (n < 0 || (size_t)n >= sizeof ctx->msg)
        return;
    vsnprintf(ctx->msg + n, sizeof ctx->msg - (size_t)n, fmt, ap);
}

void *tg__err(tg_ctx *ctx, tg_status s, const char *fn, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(ctx, true, s, fn, fmt, ap);
    va_end(ap);
    return NULL;
}

void *tg__run_err(tg_ctx *ctx, tg_status s, const char *fn, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(ctx, false, s, fn, fmt, ap);
    va_end(ap);
    return NULL;
}

void tg__err_replace(tg_ctx *ctx, tg_status s, const char *fn, const char *fmt, ...)
{
    if (!ctx)
        return;
    if (!ctx->sticky)
        ctx->status = TG_OK; /* a run error of this call (a tokenizer's): this one replaces it */
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tg__run_err(ctx, s, fn, "%s", msg);
}

tg_status tg_ctx_set_error(tg_ctx *ctx, tg_error_kind kind, tg_status status, const char *fn,
                           const char *fmt, ...)
{
    if (!ctx)
        return TG_ERR_ARG;
    if (status == TG_OK)
        status = TG_ERR_ARG; /* a failure is never OK */
    va_list ap;
    va_start(ap, fmt);
    record(ctx, kind != TG_ERROR_RUN, status, fn, fmt ? fmt : "", ap);
    va_end(ap);
    return status;
}

tg_status tg__kernel_fail(tg_ctx *ctx, tg_status s, const char *fn, const char *fmt, ...)
{
    if (s == TG_OK)
        s = TG_ERR_ARG; /* a failure is never OK */
    if (!ctx)
        return s;
    va_list ap;
    va_start(ap, fmt);
    record(ctx, false, s, fn, fmt, ap);
    va_end(ap);
    return s;
}

bool tg__build_failed(const tg_ctx *ctx) { return ctx->status != TG_OK && ctx->sticky; }

void tg__begin(tg_ctx *ctx)
{
    if (ctx && ctx->status != TG_OK && !ctx->sticky) {
        ctx->status = TG_OK;
        ctx->msg[0] = '\0';
    }
}

void tg__io_enter(tg_ctx *ctx)
{
    if (!ctx)
        return;
    if (ctx->io_depth == 0)
        tg__begin(ctx);
    ctx->io_depth++;
}

void tg__io_leave(tg_ctx *ctx)
{
    if (ctx && ctx->io_depth > 0)
        ctx->io_depth--;
}

tg_status tg_ctx_status(const tg_ctx *ctx) { return ctx ? ctx->status : TG_ERR_ARG; }

const char *tg_ctx_message(const tg_ctx *ctx) { return ctx ? ctx->msg : "tgrad: NULL context"; }

void tg_ctx_clear_error(tg_ctx *ctx)
{
    if (!ctx)
        return;
    ctx->status = TG_OK;
    ctx->sticky = false;
    ctx->msg[0] = '\0';
}

void tg_ctx_set_threads(tg_ctx *ctx, int n)
{
    if (ctx)
        ctx->n_threads = n > 0 ? clamp_threads(n) : default_threads();
}

int tg_ctx_threads(const tg_ctx *ctx) { return ctx ? ctx->n_threads : 1; }

int tg__threads(const tg_ctx *ctx)
{
    return ctx->n_threads > 0 ? ctx->n_threads : 1;
}

void tg_ctx_set_training(tg_ctx *ctx, bool training)
{
    if (ctx)
        ctx->training = training;
}

bool tg_ctx_training(const tg_ctx *ctx) { return ctx ? ctx->training : false; }

void tg_ctx_set_fusion(tg_ctx *ctx, bool enabled)
{
    if (ctx)
        ctx->unfused = !enabled;
}

bool tg_ctx_fusion(const tg_ctx *ctx) { return ctx ? !ctx->unfused : false; }

/* ----- RNG: xoshiro256** (Blackman & Vigna 2018), seeded with splitmix64 ------------------- */
uint64_t tg__splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void tg_ctx_seed(tg_ctx *ctx, uint64_t seed)
{
    if (!ctx)
        return;
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        ctx->rng[i] = tg__splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t tg_rng_u64(tg_ctx *ctx) { return ctx ? tg__rng_next(ctx->rng) : 0; }

uint64_t tg__rng_next(uint64_t *s)
{
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double tg_rng_uniform(tg_ctx *ctx) { return (double)(tg_rng_u64(ctx) >> 11) * 0x1.0p-53; }

double tg_rng_normal(tg_ctx *ctx)
{
    double u1 = tg_rng_uniform(ctx), u2 = tg_rng_uniform(ctx);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
}

void tg_rng_jump(tg_ctx *ctx)
{
    /* the reference implementation's polynomial for 2^128 steps */
    static const uint64_t jump[4] = {0x180ec6d33cfd0abaULL, 0xd5a61266f0c9392cULL,
                                     0xa9582618e03fc9aaULL, 0x39abdc4529b1661cULL};
    if (!ctx)
        return;
    uint64_t s[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++)
        for (int b = 0; b < 64; b++) {
            if (jump[i] & (UINT64_C(1) << b))
                for (int w = 0; w < 4; w++)
                    s[w] ^= ctx->rng[w];
            (void)tg_rng_u64(ctx);
        }
    memcpy(ctx->rng, s, sizeof s);
}

void tg_rng_get_state(const tg_ctx *ctx, uint64_t state[4])
{
    if (!ctx || !state)
        return;
    memcpy(state, ctx->rng, sizeof ctx->rng);
}

tg_status tg_rng_set_state(tg_ctx *ctx, const uint64_t state[4])
{
    if (!ctx)
        return TG_ERR_ARG;
    if (!state || (state[0] | state[1] | state[2] | state[3]) == 0) {
        /* all zero: a fixed point of xoshiro256** (it would return 0 for ever) */
        tg__run_err(ctx, TG_ERR_ARG, "tg_rng_set_state", "%s; the state is unchanged",
                    state ? "the all-zero state is not a valid xoshiro256** state"
                          : "state is NULL");
        return TG_ERR_ARG;
    }
    memcpy(ctx->rng, state, sizeof ctx->rng);
    return TG_OK;
}
