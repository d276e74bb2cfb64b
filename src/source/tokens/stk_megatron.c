/*
 * stk_megatron.c: Megatron-LM's indexed dataset (megatron/core/datasets/indexed_dataset.py) as a
 * token corpus. A corpus is `PREFIX.idx` + `PREFIX.bin`; the index, little-endian:
 *
 *   9 bytes  "MMIDIDX\0\0"
 *   u64      version (1)
 *   u8       dtype code of the .bin: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64,
 *            7 float32, 8 uint16
 *   u64      S, sequences
 *   u64      D, document index entries (documents + 1)
 *   i32[S]   sequence lengths (tokens)
 *   i64[S]   sequence pointers (byte offsets into the .bin)
 *   i64[D]   document index: document d is sequences [idx[d], idx[d + 1]); idx[0] = 0, idx[D-1] = S
 *   i8[S]    (multimodal indexes only) sequence modes, ignored
 *
 * The .bin is the sequences' ids back to back. stoker reads it as one stream and needs the
 * sequences in order without gaps (every builder, merge included, writes them so): pointer[0] = 0,
 * pointer[s + 1] = pointer[s] + length[s] * width, and the .bin exactly as long as the sum. The
 * index is streamed in 1 MiB pieces, never held whole: memory is the documents' starts only
 * (8 bytes each). Several prefixes are one corpus, in order.
 */
#include "source/tokens/stk_tokens.h"

#include <inttypes.h>
#include <string.h>

#define IDX_FIXED 34 /* magic, version, dtype, S, D */
#define PIECE 131072 /* array entries per read */

char *stk__megatron_path(const char *path, const char *ext)
{
    size_t n = strlen(path);
    if (n > 4 && (strcmp(path + n - 4, ".idx") == 0 || strcmp(path + n - 4, ".bin") == 0))
        n -= 4;
    char *p = stk__malloc(n + 5);
    if (p) {
        memcpy(p, path, n);
        memcpy(p + n, ext, 5);
    }
    return p;
}

/* Bytes of one token for a dtype code; 0 when the code is not token ids (*name says what). */
static uint32_t code_width(uint8_t code, const char **name)
{
    static const char *const names[] = {"?",     "uint8",   "int8",    "int16", "int32",
                                        "int64", "float64", "float32", "uint16"};
    static const uint32_t widths[] = {0, 1, 1, 2, 4, 8, 0, 0, 2};
    *name = code < 9 ? names[code] : "?";
    return code < 9 ? widths[code] : 0;
}

/* Append documents from one index to c->doc (token starts, offset by `base`), validating it
 * against the .bin's size. */
static stk_status parse_index(stk__tokcorpus *c, stk__file *idx, uint64_t bin_size, uint64_t base,
                              uint64_t *tokens, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    const char *p = idx->path;
    uint8_t h[IDX_FIXED];
    int32_t *len = NULL;
    int64_t *ptr = NULL;
    if (idx->size < IDX_FIXED)
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "%s: truncated Megatron index (%" PRIu64
                              " bytes; its header alone is 34)",
                              p, idx->size);
    STK_TRY(stk__vfs_read(idx, 0, h, sizeof(h), err, err_size));
    if (memcmp(h, "MMIDIDX\0\0", 9) != 0)
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "%s: bad header (not a Megatron index: no MMIDIDX magic)", p);
    uint64_t version, S, D;
    memcpy(&version, h + 9, 8);
    memcpy(&S, h + 18, 8);
    memcpy(&D, h + 26, 8);
    if (version != 1)
        return stk__set_error(err, err_size, STK_ENOTSUP,
                              "%s: Megatron index version %" PRIu64 " (this reads version 1)", p,
                              version);
    const char *dname;
    uint32_t width = code_width(h[17], &dname);
    if (!width)
        return stk__set_error(err, err_size, STK_ENOTSUP,
                              "%s: dtype code %u (%s) is not token ids (integers)", p, h[17],
                              dname);
    if (c->width && c->width != width)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "%s: %s tokens, but the corpus' first index has %u-byte ones: the "
                              "files of a corpus share their token width",
                              p, dname, c->width);
    c->width = width;
    /* The arrays must fill the file exactly (with or without the multimodal modes). */
    uint64_t body = idx->size - IDX_FIXED;
    bool fits = S < (UINT64_MAX / 16) && D < (UINT64_MAX / 16) && D >= 1 &&
                (body == 12 * S + 8 * D || body == 13 * S + 8 * D);
    if (!fits)
        return stk__set_error(
            err, err_size, STK_EFORMAT,
            "%s: %" PRIu64 " bytes, but an index of %" PRIu64 " sequences and %" PRIu64
            " document entries takes %" PRIu64 " (truncated, or the counts are corrupt)",
            p, idx->size, S, D,
            S < (UINT64_MAX / 16) && D < (UINT64_MAX / 16) ? IDX_FIXED + 12 * S + 8 * D
                                                           : UINT64_MAX);
    /* The document index, converted in place from sequence numbers to token starts below. */
    uint64_t keep = c->doc ? c->n_docs + 1 : 0; /* entries of earlier indexes */
    uint64_t *doc = stk__realloc(c->doc, (size_t)(keep + D) * sizeof(uint64_t));
    if (!doc)
        return stk__set_error(err, err_size, STK_ENOMEM,
                              "%s: out of memory for %" PRIu64 " documents", p, D);
    c->doc = doc;
    uint64_t *di = doc + keep;
    STK_TRY(stk__vfs_read(idx, IDX_FIXED + 12 * S, di, (size_t)(8 * D), err, err_size));
    for (uint64_t d = 0; d < D; d++) {
        uint64_t want_lo = d ? di[d - 1] : 0;
        if ((d == 0 && di[0] != 0) || di[d] < want_lo || di[d] > S || (d == D - 1 && di[d] != S))
            return stk__set_error(err, err_size, STK_EFORMAT,
                                  "%s: corrupt document index: entry %" PRIu64 " is %" PRId64
                                  " (entries run from 0 up to the %" PRIu64 " sequences)",
                                  p, d, (int64_t)di[d], S);
    }
    /* Lengths and pointers, a piece at a time: the sequences back to back from byte 0. */
    if (!(len = stk__malloc(PIECE * sizeof(*len))) || !(ptr = stk__malloc(PIECE * sizeof(*ptr))))
        STK_FAIL_E(STK_ENOMEM, "%s: out of memory", p);
    uint64_t at = 0; /* bytes of the sequences so far */
    uint64_t next_doc = 0;
    for (uint64_t s0 = 0; s0 < S; s0 += PIECE) {
        size_t k = (size_t)STK_MIN((uint64_t)PIECE, S - s0);
        STK_TRY(stk__vfs_read(idx, IDX_FIXED + 4 * s0, len, 4 * k, err, err_size));
        STK_TRY(stk__vfs_read(idx, IDX_FIXED + 4 * S + 8 * s0, ptr, 8 * k, err, err_size));
        for (size_t j = 0; j < k; j++) {
            uint64_t s = s0 + j;
            if (len[j] < 0)
                STK_FAIL_E(STK_EFORMAT, "%s: sequence %" PRIu64 " has length %d", p, s, len[j]);
            if (ptr[j] < 0 || (uint64_t)ptr[j] != at)
                STK_FAIL_E(STK_EFORMAT,
                           "%s: sequence %" PRIu64 " starts at byte %" PRId64
                           " of the .bin, not at %" PRIu64 " where the sequences before it end "
                           "(stoker reads .bin files whose sequences are back to back, as "
                           "Megatron's builder writes them)",
                           p, s, ptr[j], at);
            while (next_doc < D && di[next_doc] == s)
                di[next_doc++] = base + at / width;
            at += (uint64_t)len[j] * width;
        }
    }
    while (next_doc < D)
        di[next_doc++] = base + at / width; /* documents ending at the last sequence */
    if (at != bin_size)
        STK_FAIL_E(STK_EFORMAT,
                   at > bin_size ? "%s: truncated: its index says %" PRIu64 " %s tokens (%" PRIu64
                                   " bytes) but the .bin has %" PRIu64 " bytes"
                                 : "%s: its index says %" PRIu64 " %s tokens (%" PRIu64
                                   " bytes) but the .bin has %" PRIu64
                                   " bytes (the count does not match the file size)",
                   p, at / width, dname, at, bin_size);
    /* Documents of this index follow the earlier ones: its entry 0 is where they ended. */
    if (keep) {
        memmove(doc + keep - 1, doc + keep, (size_t)D * sizeof(uint64_t));
        c->n_docs = keep + D - 2;
    } else {
        c->n_docs = D - 1;
    }
    *tokens = at / width;
fail:
    stk__free(len);
    stk__free(ptr);
    return rc;
}

static stk_status megatron_parse(stk__tokcorpus *c, const char *const *paths, size_t n,
                                 uint32_t token_bytes, char *err, size_t err_size)
{
    (void)token_bytes; /* the index says */
    for (size_t i = 0; i < n; i++) {
        /* a prefix given twice (its .idx and .bin both matched a glob) is one corpus */
        bool seen = false;
        char *ip = stk__megatron_path(paths[i], ".idx");
        for (size_t j = 0; j < i && ip && !seen; j++) {
            char *jp = stk__megatron_path(paths[j], ".idx");
            seen = jp && strcmp(ip, jp) == 0;
            stk__free(jp);
        }
        char *bp = stk__megatron_path(paths[i], ".bin");
        stk__file *idx = NULL, *bin = NULL;
        stk_status rc =
            ip && bp ? STK_OK : stk__set_error(err, err_size, STK_ENOMEM, "out of memory");
        if (rc == STK_OK && !seen)
            rc = stk__vfs_open(ip, &idx, err, err_size);
        if (rc == STK_OK && !seen)
            rc = stk__vfs_open(bp, &bin, err, err_size);
        uint64_t tokens = 0;
        if (rc == STK_OK && !seen)
            rc = parse_index(c, idx, bin->size, c->n_tokens, &tokens, err, err_size);
        stk__vfs_close(idx);
        stk__free(ip);
        stk__free(bp);
        if (rc == STK_OK && !seen) {
            rc = stk__tokcorpus_add(c, bin, 0, tokens, err, err_size);
            bin = NULL;
        }
        stk__vfs_close(bin);
        if (rc < 0)
            return rc;
    }
    c->bounded = true;
    return STK_OK;
}

static int megatron_probe(const char *path, const stk__stat *st, const uint8_t *head, size_t n)
{
    if (st->is_dir)
        return 0;
    size_t len = strlen(path);
    if (len > 4 && strcmp(path + len - 4, ".idx") == 0)
        return n >= 9 && memcmp(head, "MMIDIDX\0\0", 9) == 0 ? 2 : 1;
    if (len > 4 && strcmp(path + len - 4, ".bin") == 0) { /* with its index beside it */
        char *ip = stk__megatron_path(path, ".idx");
        if (!ip)
            return -1;
        stk__stat ist;
        bool has = stk__vfs_stat(ip, &ist, NULL, 0) == STK_OK && !ist.is_dir;
        stk__free(ip);
        return has ? 2 : 0;
    }
    return 0;
}

static const char *const mega_suffixes[] = {".idx", NULL};

static stk_status megatron_open(stk_dataset *ds, const char *const *paths, size_t n, char *err,
                                size_t err_size)
{
    return stk__tokds_open(ds, paths, n, mega_suffixes, ".idx files", "megatron", megatron_parse,
                           err, err_size);
}

const stk__source_methods stk__src_megatron = {
    .name = "megatron",
    .summary = "Megatron-LM indexed datasets (PREFIX.idx with MMIDIDX + PREFIX.bin)",
    .probe = megatron_probe,
    .open = megatron_open,
    STK__TOKEN_METHODS,
};
