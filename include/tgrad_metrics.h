/**
 * @file tgrad_metrics.h
 * @brief Machine-translation metrics: corpus BLEU and chrF, exactly as sacreBLEU 2.x computes
 *        them with its defaults (`BLEU()` and `CHRF()`), one reference per hypothesis.
 *
 * Sources:
 * - BLEU: K. Papineni, S. Roukos, T. Ward, W.-J. Zhu, "BLEU: a Method for Automatic Evaluation
 *   of Machine Translation", ACL 2002.
 * - chrF: M. Popović, "chrF: character n-gram F-score for automatic MT evaluation", WMT 2015.
 * - The exact definitions (tokenizer, smoothing, corpus aggregation, rounding of the text line):
 *   M. Post, "A Call for Clarity in Reporting BLEU Scores", WMT 2018, and its code, sacreBLEU
 *   (https://github.com/mjpost/sacrebleu, version 2.6.0: `sacrebleu/metrics/bleu.py`,
 *   `chrf.py`, `helpers.py`, `tokenizers/tokenizer_13a.py`, `tokenizer_re.py`). The
 *   signatures are `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp` (BLEU) and
 *   `nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no` (chrF). docs/metrics.md lists every rule.
 *
 * Conventions shared by every function here:
 * - Text is UTF-8 given with its byte length (it may contain NUL bytes; a NULL pointer is
 *   allowed with length 0). Text that is not valid UTF-8 (a stray continuation byte, an
 *   overlong form, a surrogate, a code point above U+10FFFF, a truncated sequence) is refused
 *   with ::TG_ERR_ARG and a message naming the side and byte offset, e.g.
 *   `tg_bleu_stats_add: the hypothesis is not valid UTF-8 at byte 3`; the statistics are then
 *   unchanged.
 * - "Whitespace" is Python's `str.isspace()` (what sacreBLEU's `split()` and `rstrip()` use):
 *   U+0009..U+000D, U+001C..U+001F, U+0020, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028,
 *   U+2029, U+202F, U+205F, U+3000.
 * - Failures are run-time errors (tgrad.h, "Errors come in two kinds"): the call returns the
 *   status, tg_ctx_status() / tg_ctx_message() describe it, and it never blocks later calls.
 *   A NULL context: ::TG_ERR_ARG, nothing else done.
 *   Scratch memory comes from the context's allocator and is released before the call
 *   returns (::TG_ERR_NOMEM if it cannot be had). Nothing is printed.
 * - Statistics are plain integer records (zero them to start, e.g. `tg_bleu_stats st = {0};`):
 *   sentence pairs can be added one at a time while translating (streaming), and records
 *   filled by separate workers can be summed field by field, since corpus scores are computed
 *   from the summed statistics.
 * - Where sacreBLEU raises an exception for an empty corpus, tgrad scores zero sentences as 0.
 */
#ifndef TGRAD_METRICS_H
#define TGRAD_METRICS_H

#include "tgrad.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------ */
/** @name BLEU */
/**@{*/

/** Largest n-gram order of BLEU (sacreBLEU's default `max_ngram_order`). */
#define TG_BLEU_ORDER 4

/**
 * Sufficient statistics of corpus BLEU, summed over sentence pairs (sacreBLEU's segment
 * statistics `[hyp_len, ref_len, correct..., total...]`). Zero-initialize before the first
 * tg_bleu_stats_add().
 */
typedef struct tg_bleu_stats {
    int64_t sys_len;                  /**< hypothesis tokens (13a), summed */
    int64_t ref_len;                  /**< reference tokens (13a), summed */
    int64_t counts[TG_BLEU_ORDER];    /**< clipped n-gram matches, n = 1..4 */
    int64_t totals[TG_BLEU_ORDER];    /**< hypothesis n-grams, n = 1..4 */
    int64_t n_sentences;              /**< sentence pairs added */
} tg_bleu_stats;

/** A corpus BLEU score and its parts, as sacreBLEU's `BLEUScore`. */
typedef struct tg_bleu {
    double score;                     /**< BLEU in [0, 100] */
    double precisions[TG_BLEU_ORDER]; /**< p_n in percent (smoothed as below; 0 if unused) */
    double bp;                        /**< brevity penalty in [0, 1] */
    double ratio;                     /**< sys_len / ref_len (0 if ref_len is 0) */
    int64_t sys_len, ref_len;         /**< token counts of hypotheses and references */
    int64_t counts[TG_BLEU_ORDER];    /**< clipped matches, as in ::tg_bleu_stats */
    int64_t totals[TG_BLEU_ORDER];    /**< hypothesis n-grams, as in ::tg_bleu_stats */
} tg_bleu;

/**
 * The 13a tokenization of one line (sacreBLEU's `Tokenizer13a`, the `mteval-v13a.pl` rules,
 * after the `rstrip()` BLEU applies to every segment), tokens joined by single spaces:
 * 1. remove trailing whitespace;
 * 2. replace, in this order, each left to right: `<skipped>` by nothing, `-` + LF by nothing,
 *    LF by a space, `&quot;` by `"`, `&amp;` by `&`, `&lt;` by `<`, `&gt;` by `>`;
 * 3. surround the line with spaces; put spaces around every ASCII character in
 *    `{|}~[\]^_` space `!"#$%&()*+:;<=>?@/` (not `'`, `,`, `-`, `.`);
 * 4. then, each a left-to-right scan of non-overlapping matches (Python `re.sub`):
 *    `([^0-9])([.,])` -> `\1 \2 `, `([.,])([^0-9])` -> ` \1 \2`, `([0-9])(-)` -> `\1 \2 `
 *    (digits are ASCII 0-9; any other code point is a non-digit);
 * 5. split at whitespace.
 *
 * E.g. `The cat's "3.14" & 1,000-2.` gives `The cat's " 3.14 " & 1,000 - 2 .`.
 *
 * @param text, len   one line of UTF-8 (see the conventions above)
 * @param out         receives the tokens, NUL-terminated; at most `2 * len` bytes plus the NUL
 *                    are ever needed (every token is a piece of the input, one space between)
 * @param cap         bytes available at @p out
 * @param out_len     if non-NULL, receives the length in bytes (without the NUL), also when
 *                    @p cap is too small
 * Errors: ::TG_ERR_ARG (invalid UTF-8, NULL @p out with @p cap > 0, @p cap below the length
 * plus one: `output buffer of 10 bytes, 23 needed`; @p out is then left unchanged),
 * ::TG_ERR_NOMEM.
 */
TG_API tg_status tg_bleu_tokenize(tg_ctx *ctx, const char *text, size_t len, char *out,
                                  size_t cap, size_t *out_len);

/**
 * The longest run of equal consecutive words in @p text: the tokens of tg_bleu_tokenize()
 * (sacreBLEU's 13a), a word being a token with an ASCII letter or digit or a code point from
 * U+00C0 on (letters of other scripts) other than U+00D7, U+00F7, U+2000..U+2BFF
 * (punctuation, currency, arrows, mathematical and other symbols), U+3000..U+303F, U+FFFD and
 * U+1F000..U+1FAFF (emoji). A translation that says "dritten dritten dritten." has a
 * run of 3; punctuation runs ("...") do not count; 0 when there is no word. The repetition
 * measure of `tgrad translate --eval` (a hypothesis with a run of 3 or more whose source has
 * none).
 * Errors: ::TG_ERR_ARG (NULL @p run, a NULL text with a nonzero length, invalid UTF-8),
 * ::TG_ERR_NOMEM.
 */
TG_API tg_status tg_word_run(tg_ctx *ctx, const char *text, size_t len, int64_t *run);

/**
 * Add one sentence pair to BLEU statistics (sacreBLEU's `_compute_segment_statistics` with one
 * reference). Both sides are tokenized as tg_bleu_tokenize(); then, with c_h(g) and c_r(g) the
 * counts of the n-gram g (a sequence of n tokens, compared code point by code point) in the
 * hypothesis and the reference:
 *   sys_len += hypothesis tokens,  ref_len += reference tokens,
 *   totals[n-1] += max(0, hypothesis tokens - n + 1),
 *   counts[n-1] += sum over g of min(c_h(g), c_r(g))     (clipping; n = 1..4).
 * Case is kept (sacreBLEU's `lowercase=False`).
 * @param st   statistics to add to (zeroed before the first pair)
 * Errors: ::TG_ERR_ARG (NULL @p st; a NULL text with a nonzero length; invalid UTF-8: `the
 * reference is not valid UTF-8 at byte 7`; a pair of more than 2^32 - 1 bytes; a count that
 * would overflow int64), ::TG_ERR_NOMEM. @p st is unchanged on failure.
 * Memory: O(len) scratch, freed before returning. Time: O(L log L) in the token count L.
 */
TG_API tg_status tg_bleu_stats_add(tg_ctx *ctx, tg_bleu_stats *st, const char *hyp,
                                   size_t hyp_len, const char *ref, size_t ref_len);

/**
 * Corpus BLEU from summed statistics (sacreBLEU's `BLEU.compute_bleu` with its defaults:
 * `smooth_method='exp'`, `effective_order=False`, 4-grams). With c_n = counts[n-1],
 * t_n = totals[n-1], h = sys_len, r = ref_len:
 * - brevity penalty BP = 1 if h >= r, exp(1 - r / h) if 0 < h < r, 0 if h = 0 < r;
 * - if every c_n is 0: score 0, every precision 0 (sacreBLEU's early exit);
 * - otherwise for n = 1..4, stopping at the first t_n = 0 (later p_n stay 0):
 *   p_n = 100 c_n / t_n if c_n > 0, else p_n = 100 / (2^k t_n) where k counts the orders so
 *   far with c_n = 0 ("exp" smoothing, NIST's mteval-v13a method, Chen and Cherry 2014 m. 3);
 * - score = BP * exp((1/4) sum_n log p_n), log 0 taken as -9999999999 (so a stop before n = 4
 *   gives 0).
 * The floating-point operations are sacreBLEU's, in its order (with Python <= 3.11's
 * left-to-right `sum`; Python >= 3.12's compensated `sum` may differ in the last bits).
 * ratio = h / r (0 when r = 0).
 * Errors (run-time; @p out is written only on success): ::TG_ERR_ARG for NULL @p st or
 * @p out and for statistics tg_bleu_stats_add() cannot sum (a negative field, or counts[n] >
 * totals[n]), the message naming the field (`counts[1] = -3 is negative ...`); @p ctx NULL:
 * ::TG_ERR_ARG returned only.
 */
TG_API tg_status tg_bleu_stats_score(tg_ctx *ctx, const tg_bleu_stats *st, tg_bleu *out);

/**
 * Corpus BLEU of @p n hypotheses against their references: tg_bleu_stats_add() over the pairs
 * in order, then tg_bleu_stats_score().
 * @param hyps, refs          arrays of @p n strings
 * @param hyp_lens, ref_lens  their byte lengths, or NULL when the strings are NUL-terminated
 * @param out                 receives the score
 * Errors: as tg_bleu_stats_add() (the message names the pair by its index from 0: `pair 12:
 * the hypothesis is not valid UTF-8 at byte 3`), ::TG_ERR_ARG for NULL arrays with @p n > 0, a
 * NULL string where no length is given, or NULL @p out. @p out is written only on success.
 */
TG_API tg_status tg_bleu_corpus(tg_ctx *ctx, size_t n, const char *const *hyps,
                                const size_t *hyp_lens, const char *const *refs,
                                const size_t *ref_lens, tg_bleu *out);

/**
 * sacreBLEU's text line for a BLEU score (`str(BLEUScore)` without a signature):
 * `BLEU = 23.45 55.1/30.2/18.0/11.2 (BP = 1.000 ratio = 1.012 hyp_len = 9876 ref_len = 9760)`
 * i.e. the score with 2 decimals, the precisions with 1, BP and ratio with 3 (correctly
 * rounded, as Python's format and glibc's printf both round). Writes at most @p size bytes
 * including the NUL, like snprintf(); @p buf may be NULL when @p size is 0.
 * @return the length of the whole line (without the NUL): the line was cut if >= @p size.
 */
TG_API size_t tg_bleu_format(const tg_bleu *b, char *buf, size_t size);
/**@}*/

/* ------------------------------------------------------------------------------------------ */
/** @name chrF */
/**@{*/

/** Character n-gram order of chrF (sacreBLEU's `CHRF.CHAR_ORDER`). */
#define TG_CHRF_ORDER 6
/** chrF's beta (recall weighted beta times as much as precision; `CHRF.BETA`). */
#define TG_CHRF_BETA 2

/**
 * Sufficient statistics of corpus chrF, summed over sentence pairs (sacreBLEU's segment
 * statistics `[hyp, ref, match]` per order). Zero-initialize before the first
 * tg_chrf_stats_add().
 */
typedef struct tg_chrf_stats {
    int64_t hyp[TG_CHRF_ORDER];   /**< hypothesis character n-grams, n = 1..6 (see below) */
    int64_t ref[TG_CHRF_ORDER];   /**< reference character n-grams */
    int64_t match[TG_CHRF_ORDER]; /**< clipped matches */
    int64_t n_sentences;          /**< sentence pairs added */
} tg_chrf_stats;

/** A corpus chrF score (sacreBLEU's `CHRFScore`) and the averages it is made of. */
typedef struct tg_chrf {
    double score;        /**< chrF2 in [0, 100] */
    double precision;    /**< mean character n-gram precision over the effective orders, [0, 1] */
    double recall;       /**< mean recall over the effective orders, [0, 1] */
    int effective_order; /**< orders n with hyp and ref statistics both > 0 */
    tg_chrf_stats stats; /**< the statistics scored */
} tg_chrf;

/**
 * Add one sentence pair to chrF statistics (sacreBLEU's `extract_all_char_ngrams` and
 * `_get_match_statistics`, whitespace excluded, case kept). Each side is decoded to code points
 * and every whitespace code point removed; character n-grams are runs of n consecutive code
 * points of what remains. For n = 1..6, with c_h, c_r the n-gram counts:
 *   ref[n-1]   += number of reference n-grams,
 *   hyp[n-1]   += number of hypothesis n-grams if the reference has at least one n-gram,
 *                 else 0 (sacreBLEU: `hyp_count if ref_ngrams else 0`),
 *   match[n-1] += sum over g of min(c_h(g), c_r(g)).
 * Errors: ::TG_ERR_ARG (NULL @p st, invalid UTF-8, int64 overflow), ::TG_ERR_NOMEM; @p st is
 * unchanged on failure. Memory: O(len) scratch. Time: O(L log L) in the character count L.
 */
TG_API tg_status tg_chrf_stats_add(tg_ctx *ctx, tg_chrf_stats *st, const char *hyp,
                                   size_t hyp_len, const char *ref, size_t ref_len);

/**
 * Corpus chrF from summed statistics (sacreBLEU's `CHRF._compute_f_score` with
 * `eps_smoothing=False`, beta = 2): the effective orders are those n with hyp[n-1] > 0 and
 * ref[n-1] > 0; over them (k of them)
 *   P = (1/k) sum_n match/hyp,   R = (1/k) sum_n match/ref,
 *   chrF = 100 (1 + beta^2) P R / (beta^2 P + R),
 * and 0 when k = 0 or P + R = 0. (The average is taken before the F-score: this is sacreBLEU's
 * "effective order" definition, not the mean of per-order F-scores of chrF++.py.) Floating-point
 * operations in sacreBLEU's order.
 * Errors (run-time; @p out is written only on success): ::TG_ERR_ARG for NULL @p st or
 * @p out and for statistics tg_chrf_stats_add() cannot sum (a negative field, or match[n] >
 * hyp[n] or ref[n]), the message naming the field; @p ctx NULL: ::TG_ERR_ARG returned only.
 */
TG_API tg_status tg_chrf_stats_score(tg_ctx *ctx, const tg_chrf_stats *st, tg_chrf *out);

/**
 * Corpus chrF of @p n pairs: tg_chrf_stats_add() over them in order, then
 * tg_chrf_stats_score(). Arguments and errors as tg_bleu_corpus().
 */
TG_API tg_status tg_chrf_corpus(tg_ctx *ctx, size_t n, const char *const *hyps,
                                const size_t *hyp_lens, const char *const *refs,
                                const size_t *ref_lens, tg_chrf *out);

/**
 * sacreBLEU's text line for a chrF score: `chrF2 = 50.12` (2 decimals, correctly rounded).
 * snprintf() conventions as tg_bleu_format().
 */
TG_API size_t tg_chrf_format(const tg_chrf *c, char *buf, size_t size);
/**@}*/

#ifdef __cplusplus
}
#endif

#endif /* TGRAD_METRICS_H */
