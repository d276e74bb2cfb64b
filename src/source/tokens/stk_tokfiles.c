/*
 * stk_tokfiles.c: the token file formats without an index (docs/formats.md "Token corpora"),
 * parsed into a corpus, and their record-source tables:
 *
 *   nanogpt       headerless little-endian ids (uint16; token_bytes=4 for uint32): nanoGPT's
 *                 train.bin / val.bin written with np.memmap. Size a multiple of the width.
 *   llmc          llm.c's shards: 256 int32 header words (magic, version, token count), then the
 *                 ids: magic 20240520 version 1 uint16 (GPT-2), 20240801 version 7 uint32
 *                 (Llama 3). Size exactly 1024 + count * width.
 *   numpy-tokens  OLMo's token arrays: raw ids (a `.npy` name, no header; uint16 or token_bytes)
 *                 or a real `.npy` holding a 1-D integer array (u1, u2, u4, u8, i1, i2, i4, i8).
 *
 * Every failure names the file and what does not fit. Megatron's indexed dataset is
 * stk_megatron.c; what all of them share (documents, rows, reads) is stk_tokrows.c.
 */
#include "source/npy/stk_npy.h"
#include "source/tokens/stk_tokens.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define LLMC_HEADER 1024
#define LLMC_MAGIC_GPT2 20240520
#define LLMC_MAGIC_LLAMA3 20240801
#define NPY_HEADER_MAX (1u << 20) /* a .npy header longer than this is not a token array's */

static const char *const bin_suffixes[] = {".bin", NULL};
static const char *const npy_suffixes[] = {".npy", NULL};

/* Whether path ends with suffix. */
static bool ends_with(const char *path, const char *suffix)
{
    size_t n = strlen(path), k = strlen(suffix);
    return n > k && strcmp(path + n - k, suffix) == 0;
}

/* All files of a corpus hold tokens of one width. */
static stk_status same_width(stk__tokcorpus *c, const char *path, uint32_t width, char *err,
                             size_t err_size)
{
    if (c->width && c->width != width)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "%s holds %u-byte tokens but %s holds %u-byte ones: the files of "
                              "a corpus share their token width",
                              path, width, c->parts[0].f->path, c->width);
    c->width = width;
    return STK_OK;
}

/* A headerless file of `width`-byte ids from byte `offset`. */
static stk_status add_raw(stk__tokcorpus *c, stk__file *f, uint64_t offset, uint32_t width,
                          char *err, size_t err_size)
{
    stk_status rc = same_width(c, f->path, width, err, err_size);
    if (rc == STK_OK && (f->size - offset) % width)
        rc = stk__set_error(err, err_size, STK_EFORMAT,
                            "%s: %" PRIu64 " bytes of tokens is not a whole number of %u-byte "
                            "tokens (truncated, or not %s ids: token_bytes= says the width)",
                            f->path, f->size - offset, width, width == 2 ? "uint16" : "uint32");
    if (rc < 0) {
        stk__vfs_close(f);
        return rc;
    }
    return stk__tokcorpus_add(c, f, offset, (f->size - offset) / width, err, err_size);
}

/* ---- nanoGPT ---- */

static stk_status nanogpt_parse(stk__tokcorpus *c, const char *const *paths, size_t n,
                                uint32_t token_bytes, char *err, size_t err_size)
{
    for (size_t i = 0; i < n; i++) {
        stk__file *f;
        STK_TRY_RET(stk__vfs_open(paths[i], &f, err, err_size));
        STK_TRY_RET(add_raw(c, f, 0, token_bytes ? token_bytes : 2, err, err_size));
    }
    return STK_OK;
}

static int nanogpt_probe(const char *path, const stk__stat *st, const uint8_t *head, size_t n)
{
    (void)head;
    (void)n;
    if (st->is_dir)
        return 0; /* a directory of .bin files: name the format (format="nanogpt") */
    return ends_with(path, ".bin");
}

/* ---- llm.c ---- */

static stk_status llmc_parse(stk__tokcorpus *c, const char *const *paths, size_t n,
                             uint32_t token_bytes, char *err, size_t err_size)
{
    (void)token_bytes; /* the header says */
    for (size_t i = 0; i < n; i++) {
        stk__file *f;
        int32_t h[3];
        STK_TRY_RET(stk__vfs_open(paths[i], &f, err, err_size));
        stk_status rc = STK_OK;
        if (f->size < LLMC_HEADER)
            rc = stk__set_error(err, err_size, STK_EFORMAT,
                                "%s: truncated llm.c shard (%" PRIu64
                                " bytes; its header alone is 1024)",
                                f->path, f->size);
        if (rc == STK_OK)
            rc = stk__vfs_read(f, 0, h, sizeof(h), err, err_size);
        uint32_t width = 0;
        if (rc == STK_OK) {
            if (h[0] == LLMC_MAGIC_GPT2 && h[1] == 1)
                width = 2;
            else if (h[0] == LLMC_MAGIC_LLAMA3 && h[1] == 7)
                width = 4;
            else if (h[0] == LLMC_MAGIC_GPT2 || h[0] == LLMC_MAGIC_LLAMA3)
                rc = stk__set_error(err, err_size, STK_ENOTSUP,
                                    "%s: llm.c shard version %d with magic %d (this reads "
                                    "version 1 with 20240520, 7 with 20240801)",
                                    f->path, h[1], h[0]);
            else
                rc = stk__set_error(err, err_size, STK_EFORMAT,
                                    "%s: bad magic %d (not an llm.c token shard: its first int32 "
                                    "is 20240520 or 20240801)",
                                    f->path, h[0]);
        }
        if (rc == STK_OK && h[2] < 0)
            rc = stk__set_error(err, err_size, STK_EFORMAT,
                                "%s: corrupt llm.c header (token count %d)", f->path, h[2]);
        if (rc == STK_OK) {
            uint64_t want = (uint64_t)h[2] * width, have = f->size - LLMC_HEADER;
            if (have != want)
                rc = stk__set_error(
                    err, err_size, STK_EFORMAT,
                    have < want ? "%s: truncated llm.c shard: its header says %d tokens "
                                  "(%" PRIu64 " bytes) but %" PRIu64 " bytes follow the header"
                                : "%s: its header says %d tokens (%" PRIu64 " bytes) but %" PRIu64
                                  " bytes follow the header (the count does not match "
                                  "the file size)",
                    f->path, h[2], want, have);
        }
        if (rc == STK_OK)
            rc = same_width(c, f->path, width, err, err_size);
        if (rc < 0) {
            stk__vfs_close(f);
            return rc;
        }
        STK_TRY_RET(stk__tokcorpus_add(c, f, LLMC_HEADER, (uint64_t)h[2], err, err_size));
    }
    return STK_OK;
}

static int llmc_probe(const char *path, const stk__stat *st, const uint8_t *head, size_t n)
{
    (void)path;
    if (st->is_dir || n < 4)
        return 0;
    int32_t magic;
    memcpy(&magic, head, sizeof(magic)); /* the version is checked at open, by name */
    return magic == LLMC_MAGIC_GPT2 || magic == LLMC_MAGIC_LLAMA3 ? 2 : 0;
}

/* ---- numpy token arrays ---- */

/* The text after `'key':` in a .npy header dict (NULL when absent). */
static const char *dict_value(const char *h, const char *key)
{
    char k[32];
    snprintf(k, sizeof(k), "'%s'", key);
    const char *p = strstr(h, k);
    if (!p)
        return NULL;
    p += strlen(k);
    while (*p == ' ' || *p == ':')
        p++;
    return p;
}

/* A .npy file of token ids: the header's dtype (integers only) and 1-D shape. */
static stk_status npy_tokens(const stk__file *f, const char *h, uint64_t *count, uint32_t *width,
                             char *err, size_t err_size)
{
    const char *d = dict_value(h, "descr"), *s = dict_value(h, "shape");
    if (!d || !s || d[0] != '\'' || s[0] != '(' || strnlen(d, 5) < 5) /* descr: '<u2' */
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "%s: corrupt .npy header (no descr or shape)", f->path);
    bool little = d[1] == '<' || d[1] == '|';
    char kind = d[2];
    int size = d[3] - '0';
    if (!little || (kind != 'u' && kind != 'i') || d[4] != '\'' ||
        (size != 1 && size != 2 && size != 4 && size != 8))
        return stk__set_error(err, err_size, STK_ENOTSUP,
                              "%s: a .npy of dtype %.6s, not token ids (little-endian integers: "
                              "<u2, <u4, <i4, ...)",
                              f->path, d);
    char *end;
    unsigned long long v = strtoull(s + 1, &end, 10);
    while (*end == ' ')
        end++;
    if (end == s + 1 || *end != ',' || end[1 + strspn(end + 1, " ")] != ')')
        return stk__set_error(err, err_size, STK_ENOTSUP,
                              "%s: a .npy of shape %.40s, not a 1-D token array", f->path, s);
    *count = v;
    *width = (uint32_t)size;
    return STK_OK;
}

static stk_status numpy_parse(stk__tokcorpus *c, const char *const *paths, size_t n,
                              uint32_t token_bytes, char *err, size_t err_size)
{
    for (size_t i = 0; i < n; i++) {
        stk__file *f;
        uint8_t pre[12];
        STK_TRY_RET(stk__vfs_open(paths[i], &f, err, err_size));
        size_t k = (size_t)STK_MIN(f->size, sizeof(pre));
        stk_status rc = stk__vfs_read(f, 0, pre, k, err, err_size);
        if (rc == STK_OK && (k < 6 || memcmp(pre, "\x93NUMPY", 6) != 0)) /* raw ids (OLMo) */
            STK_TRY_RET(add_raw(c, f, 0, token_bytes ? token_bytes : 2, err, err_size));
        if (rc == STK_OK && k >= 6 && memcmp(pre, "\x93NUMPY", 6) == 0) {
            uint64_t hsize = 0, count = 0;
            uint32_t width = 0;
            char *h = NULL;
            rc = stk__npy_header_size(pre, k, f->path, &hsize, err, err_size);
            if (rc == STK_OK && (hsize > NPY_HEADER_MAX || hsize > f->size))
                rc = stk__set_error(err, err_size, STK_EFORMAT,
                                    "%s: truncated .npy (its header says %" PRIu64
                                    " bytes; the file has %" PRIu64 ")",
                                    f->path, hsize, f->size);
            if (rc == STK_OK && !(h = stk__calloc(1, (size_t)hsize + 1)))
                rc = stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", f->path);
            if (rc == STK_OK)
                rc = stk__vfs_read(f, 0, h, (size_t)hsize, err, err_size);
            if (rc == STK_OK) {
                for (uint64_t j = 0; j < hsize; j++)
                    if (!h[j])
                        h[j] = ' '; /* the dict is text; a stray NUL must not end it early */
                rc = npy_tokens(f, h, &count, &width, err, err_size);
            }
            stk__free(h);
            if (rc == STK_OK && f->size - hsize != count * width)
                rc = stk__set_error(err, err_size, STK_EFORMAT,
                                    f->size - hsize < count * width
                                        ? "%s: truncated .npy: its header says %" PRIu64
                                          " tokens (%" PRIu64 " bytes) but %" PRIu64
                                          " bytes follow it"
                                        : "%s: its header says %" PRIu64 " tokens (%" PRIu64
                                          " bytes) but %" PRIu64 " bytes follow it",
                                    f->path, count, count * width, f->size - hsize);
            if (rc == STK_OK)
                rc = same_width(c, f->path, width, err, err_size);
            if (rc == STK_OK) {
                STK_TRY_RET(stk__tokcorpus_add(c, f, hsize, count, err, err_size));
                continue;
            }
        }
        if (rc < 0) {
            stk__vfs_close(f);
            return rc;
        }
    }
    return STK_OK;
}

static int numpy_probe(const char *path, const stk__stat *st, const uint8_t *head, size_t n)
{
    if (st->is_dir || !ends_with(path, ".npy"))
        return 0;
    /* A `.npy` name without the NumPy magic is raw ids (OLMo's memmaps); with it the npy format
     * takes it unless stk_tokens_open asks for tokens. */
    return n >= 6 && memcmp(head, "\x93NUMPY", 6) == 0 ? 1 : 2;
}

/* ---- the record-source tables ---- */

static stk_status nanogpt_open(stk_dataset *ds, const char *const *paths, size_t n, char *err,
                               size_t err_size)
{
    return stk__tokds_open(ds, paths, n, bin_suffixes, ".bin files", "nanogpt", nanogpt_parse, err,
                           err_size);
}

static stk_status llmc_open(stk_dataset *ds, const char *const *paths, size_t n, char *err,
                            size_t err_size)
{
    return stk__tokds_open(ds, paths, n, bin_suffixes, ".bin shards", "llmc", llmc_parse, err,
                           err_size);
}

static stk_status numpy_open(stk_dataset *ds, const char *const *paths, size_t n, char *err,
                             size_t err_size)
{
    return stk__tokds_open(ds, paths, n, npy_suffixes, ".npy files", "numpy-tokens", numpy_parse,
                           err, err_size);
}

const stk__source_methods stk__src_nanogpt = {
    .name = "nanogpt",
    .summary = "nanoGPT token files: raw uint16 ids (.bin; token_bytes=4 for uint32)",
    .probe = nanogpt_probe,
    .open = nanogpt_open,
    STK__TOKEN_METHODS,
};

const stk__source_methods stk__src_llmc = {
    .name = "llmc",
    .summary = "llm.c token shards (.bin: 1024-byte header, uint16 or uint32 ids)",
    .probe = llmc_probe,
    .open = llmc_open,
    STK__TOKEN_METHODS,
};

const stk__source_methods stk__src_numpy_tokens = {
    .name = "numpy-tokens",
    .summary = "numpy token arrays (OLMo): raw ids named .npy, or a 1-D integer .npy",
    .probe = numpy_probe,
    .open = numpy_open,
    STK__TOKEN_METHODS,
};
