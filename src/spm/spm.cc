/*
 * spm.cc - SentencePiece tokenizers (include/tgrad_spm.h): a C shim over SentencePiece's C++
 * API (Kudo & Richardson 2018; unigram: Kudo 2018), built into libtgrad_spm with the meson
 * feature `sentencepiece`.
 *
 * Three parts:
 * - a validator of serialized ModelProto bytes (protobuf wire format, walked here without
 *   SentencePiece) that runs before SentencePiece sees untrusted bytes: SentencePiece 0.1.97
 *   trusts the model (docs/io.md, "Tokenizers", has what it does with hostile bytes and what
 *   is checked here);
 * - the tg_tokenizer operations over a SentencePieceProcessor (EncodeAsIds / DecodeIds);
 * - training through SentencePieceTrainer::Train with a sentence iterator and the model
 *   returned in memory.
 *
 * Every extern "C" function catches every exception (std::bad_alloc above all): nothing
 * thrown crosses into C. Errors go to the context through tg_ctx_set_error() (this file uses
 * only the public headers, so the library links against libtgrad.so as well as libtgrad.a).
 */
#include "tgrad_spm.h"
#include "tgrad_io.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

/* Two functions libsentencepiece exports without installing their headers (common.h,
 * builder.h of 0.1.97): the process-wide log level, and the built-in normalization tables
 * (the validator compares a model's table with them). */
namespace sentencepiece {
namespace logging {
void SetMinLogLevel(int v);
} // namespace logging
namespace normalizer {
class Builder {
  public:
    static util::Status GetPrecompiledCharsMap(absl::string_view name, std::string *output);
};
} // namespace normalizer
} // namespace sentencepiece

namespace {

const char *const KIND = "sentencepiece";

/* tg_spm_save's bytes, for tg_file_write. */
struct SpmBytes {
    const void *p;
    size_t n;
};

tg_status spm_emit(tg_ctx *ctx, const tg_writer *w, void *user)
{
    const SpmBytes *b = static_cast<const SpmBytes *>(user);
    int e = w->write(w->user, b->p, b->n);
    if (e)
        return tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_IO, "tg_spm_save",
                                "cannot write the model: %s", std::strerror(e));
    return TG_OK;
}

/* SentencePiece logs through std::cerr unless its level is above the message's; 4 is above
 * LOG(FATAL) (3), so it logs nothing. Set once, before the first call into it. */
void quiet()
{
    static std::once_flag once;
    std::call_once(once, [] { sentencepiece::logging::SetMinLogLevel(4); });
}

/* ----- small helpers ------------------------------------------------------------------------ */

/* Strict UTF-8 (no overlongs, no surrogates, at most U+10FFFF) without NUL bytes; returns the
 * offset of the first bad byte, or n. */
size_t utf8_bad(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c == 0)
            return i;
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF)
            need = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            need = 3;
            if (c == 0xE0)
                lo = 0xA0;
            if (c == 0xED)
                hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 4;
            if (c == 0xF0)
                lo = 0x90;
            if (c == 0xF4)
                hi = 0x8F;
        } else
            return i;
        if (n - i < need || s[i + 1] < lo || s[i + 1] > hi)
            return i;
        for (size_t k = 2; k < need; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return i;
        i += need;
    }
    return n;
}

/* A message of SentencePiece's for the context: it may quote a piece of a hostile model, so
 * one clean line: printable ASCII only (other bytes become '?'), at most 200 bytes. */
std::string clean(const std::string &m)
{
    std::string out;
    for (unsigned char c : m) {
        if (out.size() >= 200) {
            out += "...";
            break;
        }
        out += c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    return out;
}

/* A verdict: status + message (no context yet: the validator is also run without one). */
struct Verdict {
    tg_status status = TG_OK;
    std::string msg;
    bool fail(tg_status s, std::string m)
    {
        if (status == TG_OK) {
            status = s;
            msg = std::move(m);
        }
        return false;
    }
};

/* ----- the model validator --------------------------------------------------------------------
 * Protobuf wire format: a message is a sequence of (key, value); key = varint (field << 3 |
 * wire type); wire types 0 varint (at most 10 bytes), 1 fixed 8 bytes, 2 varint length then
 * that many bytes, 5 fixed 4 bytes; 3 and 4 (groups) are not used by ModelProto. */
struct Wire {
    const unsigned char *p, *end;
};

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

bool get_varint(Wire &w, uint64_t *v)
{
    uint64_t x = 0;
    for (int i = 0; i < 10; i++) {
        if (w.p >= w.end)
            return false;
        unsigned b = *w.p++;
        if (i == 9 && b > 1)
            return false; /* beyond 64 bits */
        x |= (uint64_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

/* One field: its number, wire type, and value (varint / fixed in num, bytes in [data, data+len)). */
struct Field {
    uint32_t number;
    int type;
    uint64_t num;
    const unsigned char *data;
    size_t len;
};

/* Next field of w into f; false at the end (ok) or on malformed bytes (then *bad is set). */
bool next_field(Wire &w, Field *f, bool *bad, const char **why)
{
    *bad = false;
    if (w.p >= w.end)
        return false;
    uint64_t key;
    if (!get_varint(w, &key)) {
        *bad = true, *why = "a field key is cut off or longer than 10 bytes";
        return false;
    }
    f->number = (uint32_t)(key >> 3);
    f->type = (int)(key & 7);
    if ((key >> 3) == 0 || (key >> 3) > 536870911u) {
        *bad = true, *why = "a field number is 0 or above 2^29 - 1";
        return false;
    }
    f->data = NULL, f->len = 0, f->num = 0;
    switch (f->type) {
    case WT_VARINT:
        if (!get_varint(w, &f->num)) {
            *bad = true, *why = "a varint is cut off or longer than 10 bytes";
            return false;
        }
        return true;
    case WT_I64:
    case WT_I32: {
        size_t k = f->type == WT_I64 ? 8 : 4;
        if ((size_t)(w.end - w.p) < k) {
            *bad = true, *why = "a fixed-size value is cut off";
            return false;
        }
        uint64_t x = 0;
        for (size_t i = 0; i < k; i++)
            x |= (uint64_t)w.p[i] << (8 * i);
        f->num = x;
        w.p += k;
        return true;
    }
    case WT_LEN: {
        uint64_t n;
        if (!get_varint(w, &n)) {
            *bad = true, *why = "a length is cut off or longer than 10 bytes";
            return false;
        }
        if (n > (uint64_t)(w.end - w.p)) {
            *bad = true, *why = "a length runs past the end of its message";
            return false;
        }
        f->data = w.p;
        f->len = (size_t)n;
        w.p += n;
        return true;
    }
    default:
        *bad = true, *why = "a field has wire type 3, 4, 6 or 7 (groups or invalid)";
        return false;
    }
}

/* The built-in normalization tables (precompiled_charsmap) of this SentencePiece: a model's
 * table must be empty or byte-identical to one of them (a table is a double-array trie whose
 * offsets SentencePiece follows unchecked). */
const std::vector<std::string> &builtin_charsmaps()
{
    static std::vector<std::string> maps;
    static std::once_flag once;
    std::call_once(once, [] {
        for (const char *name : {"nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf"}) {
            std::string blob;
            if (sentencepiece::normalizer::Builder::GetPrecompiledCharsMap(name, &blob).ok() &&
                !blob.empty())
                maps.push_back(std::move(blob));
        }
    });
    return maps;
}

struct ModelFacts {
    int64_t pieces = 0;
    int64_t unknown = 0;
    int64_t bytes = 0; /* BYTE pieces */
    int model_type = 1;
    bool byte_fallback = false;
};

std::string field_name(const char *msg, uint32_t number)
{
    return std::string(msg) + " field " + std::to_string(number);
}

bool want_type(Verdict &v, const Field &f, int type, const char *msg)
{
    if (f.type == type)
        return true;
    return v.fail(TG_ERR_FORMAT, field_name(msg, f.number) + " has wire type " +
                                     std::to_string(f.type) + ", expected " +
                                     std::to_string(type));
}

/* A text field: at most max bytes, UTF-8 without NUL. */
bool check_text(Verdict &v, const Field &f, size_t max, const char *what)
{
    if (f.len > max)
        return v.fail(TG_ERR_FORMAT, std::string(what) + " is " + std::to_string(f.len) +
                                         " bytes (at most " + std::to_string(max) + ")");
    size_t bad = utf8_bad(f.data, f.len);
    if (bad != f.len)
        return v.fail(TG_ERR_FORMAT, std::string(what) + " is not UTF-8 without NUL (byte " +
                                         std::to_string(bad) + ")");
    return true;
}

/* Walk a message, calling each(field) for every field; false on malformed bytes. */
template <class F> bool walk(Verdict &v, const unsigned char *p, size_t n, const char *msg, F each)
{
    Wire w{p, p + n};
    Field f;
    bool bad = false;
    const char *why = "";
    while (next_field(w, &f, &bad, &why))
        if (!each(f))
            return false;
    if (bad)
        return v.fail(TG_ERR_FORMAT, std::string(msg) + ": " + why);
    return true;
}

/* ModelProto.SentencePiece: 1 piece (string), 2 score (float), 3 type (enum 1..6). */
bool check_piece(Verdict &v, const Field &outer, int64_t index, ModelFacts &facts)
{
    std::string where = "piece " + std::to_string(index);
    bool have_piece = false;
    int64_t type = 1;
    bool ok = walk(v, outer.data, outer.len, where.c_str(), [&](const Field &f) {
        switch (f.number) {
        case 1:
            if (!want_type(v, f, WT_LEN, where.c_str()))
                return false;
            if (f.len == 0)
                return v.fail(TG_ERR_FORMAT, where + " is empty");
            if (!check_text(v, f, TG_SPM_MAX_PIECE_BYTES, where.c_str()))
                return false;
            have_piece = true;
            return true;
        case 2: {
            if (!want_type(v, f, WT_I32, where.c_str()))
                return false;
            uint32_t bits = (uint32_t)f.num;
            float score;
            std::memcpy(&score, &bits, sizeof score);
            if (!std::isfinite(score))
                return v.fail(TG_ERR_FORMAT, where + " has a score that is not finite");
            return true;
        }
        case 3:
            if (!want_type(v, f, WT_VARINT, where.c_str()))
                return false;
            if (f.num < 1 || f.num > 6)
                return v.fail(TG_ERR_FORMAT, where + " has type " + std::to_string(f.num) +
                                                 " (types are 1..6)");
            type = (int64_t)f.num;
            return true;
        default:
            return true; /* unknown fields: kept aside by protobuf, never used */
        }
    });
    if (!ok)
        return false;
    if (!have_piece)
        return v.fail(TG_ERR_FORMAT, where + " has no text");
    if (type == 2)
        facts.unknown++;
    if (type == 6)
        facts.bytes++;
    return true;
}

/* TrainerSpec: the fields the processor reads when loading and encoding. */
bool check_trainer(Verdict &v, const Field &outer, ModelFacts &facts)
{
    const char *msg = "trainer_spec";
    return walk(v, outer.data, outer.len, msg, [&](const Field &f) {
        switch (f.number) {
        case 3: /* model_type */
            if (!want_type(v, f, WT_VARINT, msg))
                return false;
            if (f.num == 3 || f.num == 4)
                return v.fail(TG_ERR_UNSUPPORTED,
                              std::string("model type ") + (f.num == 3 ? "word" : "char") +
                                  " (tgrad takes unigram and bpe models)");
            if (f.num != 1 && f.num != 2)
                return v.fail(TG_ERR_FORMAT, "unknown model type " + std::to_string(f.num));
            facts.model_type = (int)f.num;
            return true;
        case 35: /* byte_fallback */
            if (!want_type(v, f, WT_VARINT, msg))
                return false;
            facts.byte_fallback = f.num != 0;
            return true;
        case 21: case 22: case 23: case 24: case 25: case 26: /* split / whitespace flags */
            return want_type(v, f, WT_VARINT, msg);
        case 44: /* unk_surface */
        case 45: case 46: case 47: case 48: /* unk, bos, eos, pad piece */
            return want_type(v, f, WT_LEN, msg) &&
                   check_text(v, f, TG_SPM_MAX_PIECE_BYTES,
                              field_name(msg, f.number).c_str());
        default:
            return true; /* training-only settings */
        }
    });
}

/* NormalizerSpec: the table must be empty or a built-in one. */
bool check_normalizer(Verdict &v, const Field &outer, const char *msg)
{
    return walk(v, outer.data, outer.len, msg, [&](const Field &f) {
        switch (f.number) {
        case 1: /* name */
            return want_type(v, f, WT_LEN, msg) && check_text(v, f, 256, "normalizer name");
        case 2: { /* precompiled_charsmap */
            if (!want_type(v, f, WT_LEN, msg))
                return false;
            if (f.len == 0)
                return true;
            for (const std::string &m : builtin_charsmaps())
                if (m.size() == f.len && std::memcmp(m.data(), f.data, f.len) == 0)
                    return true;
            return v.fail(TG_ERR_UNSUPPORTED,
                          std::string(msg) +
                              " has a normalization table that is none of SentencePiece's "
                              "built-in ones (nmt_nfkc, nfkc, nmt_nfkc_cf, nfkc_cf)");
        }
        case 3: case 4: case 5: /* add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces */
            return want_type(v, f, WT_VARINT, msg);
        case 6: /* normalization_rule_tsv: read only when training */
            return want_type(v, f, WT_LEN, msg);
        default:
            return true;
        }
    });
}

bool validate(Verdict &v, const void *model, size_t size, ModelFacts &facts)
{
    if (size > TG_SPM_MAX_MODEL_BYTES)
        return v.fail(TG_ERR_HEADER_SIZE, "the model is " + std::to_string(size) +
                                              " bytes (at most " +
                                              std::to_string(TG_SPM_MAX_MODEL_BYTES) + ")");
    if (size == 0)
        return v.fail(TG_ERR_FORMAT, "the model is empty");
    int seen[6] = {0};
    bool ok = walk(v, (const unsigned char *)model, size, "model", [&](const Field &f) {
        switch (f.number) {
        case 1:
            if (!want_type(v, f, WT_LEN, "model"))
                return false;
            if (facts.pieces >= TG_SPM_MAX_VOCAB)
                return v.fail(TG_ERR_FORMAT, "more than " + std::to_string(TG_SPM_MAX_VOCAB) +
                                                 " pieces");
            return check_piece(v, f, facts.pieces++, facts);
        case 2: case 3: case 5:
            if (!want_type(v, f, WT_LEN, "model"))
                return false;
            if (seen[f.number]++)
                return v.fail(TG_ERR_FORMAT, field_name("model", f.number) +
                                                 " (a settings message) appears twice");
            if (f.number == 2)
                return check_trainer(v, f, facts);
            return check_normalizer(v, f, f.number == 3 ? "normalizer_spec"
                                                        : "denormalizer_spec");
        case 4:
            return v.fail(TG_ERR_UNSUPPORTED, "the model has self-test data (not taken: it "
                                              "would run on load)");
        default:
            return true;
        }
    });
    if (!ok)
        return false;
    if (facts.pieces < 1)
        return v.fail(TG_ERR_FORMAT, "the model has no pieces");
    if (facts.unknown != 1)
        return v.fail(TG_ERR_FORMAT, "the model has " + std::to_string(facts.unknown) +
                                         " unknown pieces (exactly 1 needed)");
    if (facts.bytes && !facts.byte_fallback)
        return v.fail(TG_ERR_FORMAT, "byte pieces without byte_fallback");
    return true;
}

/* ----- the tokenizer ---------------------------------------------------------------------------- */
struct Impl {
    sentencepiece::SentencePieceProcessor sp;
};

void put_err(char *err, size_t err_size, const std::string &m)
{
    if (err && err_size)
        std::snprintf(err, err_size, "%s", m.c_str());
}

int64_t spm_encode(void *impl, const char *text, size_t n, int32_t *ids, int64_t cap, char *err,
                   size_t err_size)
{
    try {
        std::vector<int> out;
        auto st = static_cast<Impl *>(impl)->sp.Encode(absl::string_view(text, n), &out);
        if (!st.ok()) {
            put_err(err, err_size, clean(st.ToString()));
            return -1;
        }
        int64_t k = (int64_t)out.size();
        for (int64_t i = 0; i < k && i < cap; i++)
            ids[i] = (int32_t)out[(size_t)i];
        return k;
    } catch (const std::bad_alloc &) {
        put_err(err, err_size, "out of memory");
    } catch (...) {
        put_err(err, err_size, "SentencePiece failed");
    }
    return -1;
}

int64_t spm_decode(void *impl, const int32_t *ids, int64_t n, char *out, size_t cap, char *err,
                   size_t err_size)
{
    try {
        std::vector<int> in(ids, ids + n);
        std::string text;
        auto st = static_cast<Impl *>(impl)->sp.Decode(in, &text);
        if (!st.ok()) {
            put_err(err, err_size, clean(st.ToString()));
            return -1;
        }
        std::memcpy(out, text.data(), text.size() < cap ? text.size() : cap);
        return (int64_t)text.size();
    } catch (const std::bad_alloc &) {
        put_err(err, err_size, "out of memory");
    } catch (...) {
        put_err(err, err_size, "SentencePiece failed");
    }
    return -1;
}

void spm_free(void *impl)
{
    delete static_cast<Impl *>(impl);
}

/* The unigram model's l best segmentations (tg_tokenizer_ops.nbest) with their
 * log-probabilities (the sums of their pieces' scores). */
int64_t spm_nbest(void *impl, const char *text, size_t n, int l, int32_t *ids, int64_t cap,
                  int64_t *ends, double *scores, int *count, char *err, size_t err_size)
{
    try {
        sentencepiece::ImmutableNBestSentencePieceText nb;
        auto st = static_cast<Impl *>(impl)->sp.NBestEncode(absl::string_view(text, n), l,
                                                            nb.mutable_proto());
        if (!st.ok()) {
            put_err(err, err_size, clean(st.ToString()));
            return -1;
        }
        int64_t k = 0;
        int m = (int)nb.nbests_size() < l ? (int)nb.nbests_size() : l;
        for (int i = 0; i < m; i++) {
            sentencepiece::ImmutableSentencePieceText seg = nb.nbests(i);
            for (size_t j = 0; j < seg.pieces_size(); j++, k++)
                if (k < cap)
                    ids[k] = (int32_t)seg.pieces((int)j).id();
            ends[i] = k;
            scores[i] = (double)seg.score();
        }
        *count = m;
        return k;
    } catch (const std::bad_alloc &) {
        put_err(err, err_size, "out of memory");
    } catch (...) {
        put_err(err, err_size, "SentencePiece failed");
    }
    return -1;
}

const tg_tokenizer_ops spm_ops = {KIND, spm_encode, spm_decode, spm_free, NULL};
/* Unigram models can sample segmentations (subword regularization). */
const tg_tokenizer_ops spm_unigram_ops = {KIND, spm_encode, spm_decode, spm_free, spm_nbest};

tg_tokenizer *load(tg_ctx *ctx, const char *fn, const void *model, size_t size)
{
    if (!ctx)
        return NULL;
    if (!model && size) {
        tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_ARG, fn, "model is NULL");
        return NULL;
    }
    Verdict v;
    ModelFacts facts;
    Impl *impl = NULL;
    try {
        quiet();
        if (!validate(v, model, size, facts)) {
            tg_ctx_set_error(ctx, TG_ERROR_RUN, v.status, fn, "%s", v.msg.c_str());
            return NULL;
        }
        impl = new Impl;
        auto st = impl->sp.LoadFromSerializedProto(
            absl::string_view(static_cast<const char *>(model), size));
        if (!st.ok()) {
            delete impl;
            tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_FORMAT, fn,
                             "SentencePiece refuses the model: %s", clean(st.ToString()).c_str());
            return NULL;
        }
        int64_t vocab = impl->sp.GetPieceSize();
        tg_token_ids sp = {impl->sp.unk_id(), impl->sp.bos_id(), impl->sp.eos_id(),
                           impl->sp.pad_id()};
        if (sp.bos < 0 || sp.eos < 0) {
            delete impl;
            tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_UNSUPPORTED, fn,
                             "the model has no %s control piece; tgrad needs bos and eos "
                             "(train with bos_id and eos_id >= 0)",
                             sp.bos < 0 ? "bos (<s>)" : "eos (</s>)");
            return NULL;
        }
        Impl *owned = impl;
        impl = NULL; /* tg_tokenizer_new owns it from here, also when it fails */
        return tg_tokenizer_new(ctx, facts.model_type == 1 ? &spm_unigram_ops : &spm_ops, owned,
                                vocab, sp, model, size);
    } catch (const std::bad_alloc &) {
        delete impl;
        tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_NOMEM, fn, "out of memory");
    } catch (...) {
        delete impl;
        tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_FORMAT, fn, "SentencePiece failed");
    }
    return NULL;
}

/* ----- training -----------------------------------------------------------------------------------
 * SentencePiece's trainer stops the process on some inputs (CHECK failures call exit(), e.g.
 * when every sentence normalizes to nothing: a corpus of spaces) and prints as it does. So the
 * sentences are collected here, in the caller's process (the callback runs where the caller
 * expects it), and the trainer runs in a forked child with its stderr on a pipe: the child
 * sends the model bytes back on a second pipe; whatever it printed becomes the error message
 * if it fails, exits or dies. */

/* The collected sentences, fed to the trainer in order. */
class VecIter : public sentencepiece::SentenceIterator {
  public:
    explicit VecIter(const std::vector<std::string> &v) : v_(v) {}
    bool done() const override { return i_ >= v_.size(); }
    void Next() override { i_++; }
    const std::string &value() const override { return v_[i_]; }
    sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }

  private:
    const std::vector<std::string> &v_;
    size_t i_ = 0;
};

bool write_all(int fd, const void *p, size_t n)
{
    const char *c = static_cast<const char *>(p);
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        c += k, n -= (size_t)k;
    }
    return true;
}

/* In the child: train, send "8-byte length + model" on out, exit 0; on a refusal print the
 * message on stderr (the pipe) and exit 3. Never returns. */
[[noreturn]] void train_child(const std::unordered_map<std::string, std::string> &kw,
                              const std::vector<std::string> &sentences, int out)
{
    int code = 4;
    try {
        VecIter it(sentences);
        std::string model;
        auto st = sentencepiece::SentencePieceTrainer::Train(kw, &it, &model);
        if (st.ok()) {
            uint64_t n = model.size();
            code = write_all(out, &n, sizeof n) && write_all(out, model.data(), model.size())
                       ? 0
                       : 5;
        } else {
            std::string m = st.ToString();
            write_all(2, m.data(), m.size());
            code = 3;
        }
    } catch (const std::bad_alloc &) {
        write_all(2, "out of memory", 13);
    } catch (...) {
        write_all(2, "an exception", 12);
    }
    _exit(code);
}

/* Read the child's two pipes until both close (poll: the child may fill either first): the
 * model into *bytes, what it printed (the first 4 KiB or so) into *text. */
void read_child(int out_fd, int msg_fd, std::string *bytes, std::string *text)
{
    struct pollfd fds[2] = {{out_fd, POLLIN, 0}, {msg_fd, POLLIN, 0}};
    int open_fds = 2;
    char buf[65536];
    while (open_fds > 0) {
        int r = poll(fds, 2, -1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            break;
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t k = read(fds[i].fd, buf, sizeof buf);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
            } else if (i == 0) {
                bytes->append(buf, (size_t)k);
            } else if (text->size() < 4096) {
                text->append(buf, (size_t)k);
            }
        }
    }
    for (int i = 0; i < 2; i++)
        if (fds[i].fd >= 0)
            close(fds[i].fd);
}

/* The last non-empty line the child printed: SentencePiece's message. */
std::string last_line(std::string text)
{
    while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
        text.pop_back();
    size_t nl = text.find_last_of('\n');
    std::string last = nl == std::string::npos ? text : text.substr(nl + 1);
    if (last == "Program terminated with an unrecoverable error." && nl != std::string::npos) {
        text.resize(nl);
        nl = text.find_last_of('\n');
        last = nl == std::string::npos ? text : text.substr(nl + 1);
    }
    while (!last.empty() && (last.back() == ' ' || last.back() == '\r'))
        last.pop_back();
    return last;
}

/* Why the child (wait status wst, last line printed @p last) gave no model. */
std::string child_error(int wst, const std::string &last)
{
    std::string err;
    if (WIFEXITED(wst) && WEXITSTATUS(wst) == 3)
        err = "SentencePiece: " + clean(last);
    else if (WIFEXITED(wst))
        err = "SentencePiece's trainer stopped (exit status " +
              std::to_string(WEXITSTATUS(wst)) + ")" + (last.empty() ? "" : ": " + clean(last));
    else if (WIFSIGNALED(wst))
        err = "SentencePiece's trainer died (signal " + std::to_string(WTERMSIG(wst)) + ")" +
              (last.empty() ? "" : ": " + clean(last));
    else
        err = "SentencePiece's trainer failed";
    return err;
}

/* Run the trainer in a child; the model bytes in *model, or false with *err. */
bool train_forked(const std::unordered_map<std::string, std::string> &kw,
                  const std::vector<std::string> &sentences, std::string *model,
                  tg_status *status, std::string *err)
{
    int out[2], msg[2];
    if (pipe(out) != 0) {
        *status = TG_ERR_IO, *err = std::string("pipe failed: ") + std::strerror(errno);
        return false;
    }
    if (pipe(msg) != 0) {
        *status = TG_ERR_IO, *err = std::string("pipe failed: ") + std::strerror(errno);
        close(out[0]), close(out[1]);
        return false;
    }
    std::fflush(NULL); /* nothing buffered is written twice */
    pid_t pid = fork();
    if (pid < 0) {
        *status = TG_ERR_IO, *err = std::string("fork failed: ") + std::strerror(errno);
        close(out[0]), close(out[1]), close(msg[0]), close(msg[1]);
        return false;
    }
    if (pid == 0) {
        close(out[0]);
        close(msg[0]);
        dup2(msg[1], 2);
        dup2(msg[1], 1); /* nothing of SentencePiece's reaches the caller's terminal */
        close(msg[1]);
        train_child(kw, sentences, out[1]);
    }
    close(out[1]);
    close(msg[1]);
    std::string bytes, text;
    read_child(out[0], msg[0], &bytes, &text);
    int wst = 0;
    while (waitpid(pid, &wst, 0) < 0 && errno == EINTR) {
    }
    std::string last = last_line(text);
    uint64_t n = 0;
    if (WIFEXITED(wst) && WEXITSTATUS(wst) == 0 && bytes.size() >= sizeof n) {
        std::memcpy(&n, bytes.data(), sizeof n);
        if (n == bytes.size() - sizeof n) {
            model->assign(bytes, sizeof n, std::string::npos);
            return true;
        }
    }
    *status = TG_ERR_ARG;
    *err = child_error(wst, last);
    return false;
}

struct Strings {
    const char *const *texts;
    const size_t *lens;
    int64_t n, i;
};

int strings_next(void *user, const char **text, size_t *n)
{
    Strings *s = static_cast<Strings *>(user);
    if (s->i >= s->n)
        return 0;
    *text = s->texts[s->i];
    *n = s->lens ? s->lens[s->i] : (s->texts[s->i] ? std::strlen(s->texts[s->i]) : 0);
    s->i++;
    return 1;
}

/* SentencePiece's trainer options for @p o (type as an int). */
std::unordered_map<std::string, std::string> trainer_options(const tg_spm_train_opts &o, int type)
{
    char cov[64];
    std::snprintf(cov, sizeof cov, "%.17g", o.character_coverage);
    return {
        {"model_type", type == TG_SPM_BPE ? "bpe" : "unigram"},
        {"vocab_size", std::to_string(o.vocab_size)},
        {"character_coverage", cov},
        {"max_sentence_length", std::to_string(o.max_sentence_bytes)},
        {"hard_vocab_limit", o.hard_vocab_limit ? "true" : "false"},
        {"unk_id", "0"},
        {"bos_id", "1"},
        {"eos_id", "2"},
        {"pad_id", "3"},
        {"normalization_rule_name", "nmt_nfkc"},
        /* determinism: every sentence, in order; one thread (the unigram E-step sums
         * per-thread partial floats, so the thread count would change the model) */
        {"input_sentence_size", "0"},
        {"shuffle_input_sentence", "false"},
        {"num_threads", "1"},
        {"minloglevel", "4"},
    };
}

/* The sentences from @p next, in the caller's process, into *sentences (the empty ones
 * skipped). False with the error recorded: the source failed, a sentence is NULL or not
 * UTF-8, none is left, or none of at most max_sentence_bytes has a letter or digit. */
bool collect_sentences(tg_ctx *ctx, const char *fn, const tg_spm_train_opts &o,
                       tg_spm_next_fn next, void *user, std::vector<std::string> *sentences)
{
    int64_t index = 0;
    bool letter = false; /* an ASCII letter or digit, or any non-ASCII character */
    for (;; index++) {
        const char *text = NULL;
        size_t n = 0;
        int r = next(user, &text, &n);
        if (r == 0)
            break;
        if (r != 1) {
            tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_ARG, fn,
                             "the sentence source failed (returned %d) at sentence %lld", r,
                             (long long)index);
            return false;
        }
        if (!text && n) {
            tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_ARG, fn, "sentence %lld is NULL",
                             (long long)index);
            return false;
        }
        size_t bad = utf8_bad((const unsigned char *)text, n);
        if (bad != n) {
            tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_ARG, fn,
                             "sentence %lld is not UTF-8 without NUL (byte %zu)",
                             (long long)index, bad);
            return false;
        }
        if (n == 0)
            continue;
        for (size_t i = 0; i < n && !letter && (int64_t)n <= o.max_sentence_bytes; i++) {
            unsigned char c = (unsigned char)text[i];
            letter = c >= 0x80 || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
        }
        sentences->emplace_back(text, n);
    }
    if (sentences->empty()) {
        tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_ARG, fn, "no sentences to train on");
        return false;
    }
    if (!letter) {
        tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_ARG, fn,
                         "no sentence of at most %lld bytes has a letter or digit",
                         (long long)o.max_sentence_bytes);
        return false;
    }
    return true;
}

} // namespace

extern "C" {

tg_spm_train_opts tg_spm_train_defaults(void)
{
    tg_spm_train_opts o;
    o.vocab_size = 8000;
    o.type = TG_SPM_UNIGRAM;
    o.character_coverage = 1.0;
    o.max_sentence_bytes = 4192;
    o.hard_vocab_limit = 1;
    return o;
}

tg_tokenizer *tg_spm_train(tg_ctx *ctx, const tg_spm_train_opts *opts, tg_spm_next_fn next,
                           void *user)
{
    static const char *fn = "tg_spm_train";
    if (!ctx)
        return NULL;
    tg_spm_train_opts o = opts ? *opts : tg_spm_train_defaults();
    /* The type as an int: a C caller may pass any int, which C++ must not load as the enum. */
    int type;
    static_assert(sizeof type == sizeof o.type, "tg_spm_type is int-sized");
    std::memcpy(&type, &o.type, sizeof type);
    const char *why = NULL;
    if (!next)
        why = "the sentence source is NULL";
    else if (o.vocab_size < 8 || o.vocab_size > TG_SPM_MAX_VOCAB)
        why = "vocab_size must be in [8, 2^20]";
    else if (type != TG_SPM_UNIGRAM && type != TG_SPM_BPE)
        why = "type must be TG_SPM_UNIGRAM or TG_SPM_BPE";
    else if (!(o.character_coverage >= 0.98 && o.character_coverage <= 1.0))
        why = "character_coverage must be in [0.98, 1] (SentencePiece's range)";
    else if (o.max_sentence_bytes < 10 || o.max_sentence_bytes > ((int64_t)1 << 30))
        why = "max_sentence_bytes must be in [10, 2^30]";
    if (why) {
        tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_ARG, fn, "%s", why);
        return NULL;
    }
    try {
        quiet();
        const std::unordered_map<std::string, std::string> kw = trainer_options(o, type);
        std::vector<std::string> sentences;
        if (!collect_sentences(ctx, fn, o, next, user, &sentences))
            return NULL;
        std::string model, err;
        tg_status status = TG_OK;
        if (!train_forked(kw, sentences, &model, &status, &err)) {
            tg_ctx_set_error(ctx, TG_ERROR_RUN, status, fn, "%s", err.c_str());
            return NULL;
        }
        return load(ctx, fn, model.data(), model.size());
    } catch (const std::bad_alloc &) {
        tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_NOMEM, fn, "out of memory");
    } catch (...) {
        tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_ARG, fn, "SentencePiece failed");
    }
    return NULL;
}

tg_tokenizer *tg_spm_train_strings(tg_ctx *ctx, const tg_spm_train_opts *opts,
                                   const char *const *texts, const size_t *lens, int64_t n)
{
    if (!ctx)
        return NULL;
    if (n < 0 || (!texts && n)) {
        tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_ARG, "tg_spm_train_strings",
                         "NULL texts or a negative count");
        return NULL;
    }
    Strings s = {texts, lens, n, 0};
    return tg_spm_train(ctx, opts, strings_next, &s);
}

tg_status tg_spm_validate(tg_ctx *ctx, const void *model, size_t size)
{
    static const char *fn = "tg_spm_validate";
    if (!ctx)
        return TG_ERR_ARG;
    if (!model && size)
        return tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_ARG, fn, "model is NULL");
    try {
        quiet();
        Verdict v;
        ModelFacts facts;
        if (!validate(v, model, size, facts))
            return tg_ctx_set_error(ctx, TG_ERROR_RUN, v.status, fn, "%s", v.msg.c_str());
        return TG_OK;
    } catch (...) {
        return tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_NOMEM, fn, "out of memory");
    }
}

tg_status tg_spm_model_type(tg_ctx *ctx, const void *model, size_t size, tg_spm_type *type)
{
    static const char *fn = "tg_spm_model_type";
    if (!ctx)
        return TG_ERR_ARG;
    if ((!model && size) || !type)
        return tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_ARG, fn, "%s is NULL",
                                !type ? "type" : "model");
    try {
        quiet();
        Verdict v;
        ModelFacts facts;
        if (!validate(v, model, size, facts))
            return tg_ctx_set_error(ctx, TG_ERROR_RUN, v.status, fn, "%s", v.msg.c_str());
        *type = facts.model_type == 2 ? TG_SPM_BPE : TG_SPM_UNIGRAM;
        return TG_OK;
    } catch (...) {
        return tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_NOMEM, fn, "out of memory");
    }
}

tg_tokenizer *tg_spm_load(tg_ctx *ctx, const void *model, size_t size)
{
    return load(ctx, "tg_spm_load", model, size);
}

tg_tokenizer *tg_spm_load_file(tg_ctx *ctx, const char *path)
{
    static const char *fn = "tg_spm_load_file";
    if (!ctx)
        return NULL;
    if (!path) {
        tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_ARG, fn, "path is NULL");
        return NULL;
    }
    FILE *f = std::fopen(path, "rb");
    if (!f) {
        tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_IO, fn, "cannot open '%s': %s", path,
                         std::strerror(errno));
        return NULL;
    }
    try {
        std::string buf;
        char chunk[65536];
        size_t k;
        while ((k = std::fread(chunk, 1, sizeof chunk, f)) > 0) {
            buf.append(chunk, k);
            if (buf.size() > TG_SPM_MAX_MODEL_BYTES)
                break;
        }
        bool err = std::ferror(f) != 0;
        int e = errno;
        std::fclose(f);
        if (err) {
            tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_IO, fn, "reading '%s' failed: %s", path,
                             std::strerror(e));
            return NULL;
        }
        if (buf.size() > TG_SPM_MAX_MODEL_BYTES) {
            tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_HEADER_SIZE, fn,
                             "'%s' is larger than %zu bytes", path, TG_SPM_MAX_MODEL_BYTES);
            return NULL;
        }
        tg_tokenizer *t = load(ctx, fn, buf.data(), buf.size());
        return t;
    } catch (...) {
        std::fclose(f);
        tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_NOMEM, fn, "out of memory");
        return NULL;
    }
}

tg_status tg_spm_save(const tg_tokenizer *tok, const char *path)
{
    static const char *fn = "tg_spm_save";
    tg_ctx *ctx = tg_tokenizer_ctx(tok);
    if (!ctx)
        return TG_ERR_ARG;
    size_t size = 0;
    const void *model = tg_tokenizer_model(tok, &size);
    if (!path || !model || !size || std::strcmp(tg_tokenizer_kind(tok), KIND) != 0)
        return tg_ctx_set_error(ctx, TG_ERROR_RUN, TG_ERR_ARG, fn,
                                "%s", !path ? "path is NULL"
                                            : "the tokenizer is not a SentencePiece model");
    /* the library's one writer: a regular file only, a temporary renamed into place, nothing
     * removed or truncated that this call did not create */
    SpmBytes b = {model, size};
    tg_status st = tg_file_write(ctx, path, spm_emit, &b, NULL);
    static const char wfn[] = "tg_file_write: ";
    const char *m = tg_ctx_message(ctx);
    if (st != TG_OK && tg_ctx_status(ctx) == st && std::strncmp(m, wfn, sizeof wfn - 1) == 0) {
        try { /* the message names this call, not the writer under it */
            std::string rest(m + sizeof wfn - 1);
            tg_ctx_clear_error(ctx);
            tg_ctx_set_error(ctx, TG_ERROR_RUN, st, fn, "%s", rest.c_str());
        } catch (...) {
        }
    }
    return st;
}

} // extern "C"
