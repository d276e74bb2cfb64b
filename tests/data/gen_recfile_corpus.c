/*
 * gen_recfile_corpus.c: writes the seed corpus of tests/fuzz/fuzz_recfile.c: small valid shards
 * (0..5 records, every field kind, several alignments) and damaged variants of them (truncated
 * in each region, a flipped byte in each region, a future version, a bad magic). Every file is
 * under 4 KB. Run once and commit the output:
 *
 *     make build/tests/gen_recfile_corpus && build/tests/gen_recfile_corpus
 * tests/fuzz/corpus/recfile
 */
#include "source/stk/stk_format.h"
#include "stoker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *out_dir;

static void die(const char *what)
{
    fprintf(stderr, "gen_recfile_corpus: %s: %s\n", what, stk_last_errmsg());
    exit(1);
}

static stk_field field(const char *name, stk_field_kind kind, stk_dtype dtype, uint32_t ndim,
                       int64_t d0, int64_t d1)
{
    stk_field f;
    stk_field_init(&f);
    snprintf(f.name, sizeof(f.name), "%s", name);
    f.kind = kind;
    f.dtype = dtype;
    f.ndim = ndim;
    f.shape[0] = d0;
    f.shape[1] = d1;
    return f;
}

/* Write a shard of n records with the given schema; returns its bytes (*size set). */
static uint8_t *make_shard(const char *name, const stk_field *fields, size_t nf, uint32_t n,
                           uint32_t align, const char *meta, size_t *size)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", out_dir, name);
    stk_writer_opts o;
    stk_writer_opts_init(&o);
    o.fields = fields;
    o.n_fields = nf;
    o.align = align;
    o.metadata_json = meta;
    stk_writer *w;
    if (stk_writer_open(path, &o, &w) != STK_OK)
        die(path);
    for (uint32_t r = 0; r < n; r++) {
        stk_value v[STK_MAX_FIELDS];
        uint8_t bytes[STK_MAX_FIELDS][64];
        for (size_t vi = 0; vi < sizeof(v) / sizeof(v[0]); vi++)
            stk_value_init(&v[vi]);
        for (size_t f = 0; f < nf; f++) {
            size_t len = fields[f].kind == STK_FIELD_ARRAY
                             ? stk_dtype_size(fields[f].dtype) * (size_t)fields[f].shape[0] *
                                   (size_t)(fields[f].ndim > 1 ? fields[f].shape[1] : 1)
                             : (r * 11 + f * 5) % 40;
            for (size_t i = 0; i < len; i++)
                bytes[f][i] = (uint8_t)(r * 31 + f * 7 + i);
            v[f].data = bytes[f];
            v[f].size = len;
            v[f].i64 = (int64_t)r - 2;
            v[f].f32 = (float)r * 1.5f;
        }
        if (stk_writer_add(w, v) != STK_OK) {
            fprintf(stderr, "%s\n", stk_writer_errmsg(w));
            exit(1);
        }
    }
    if (stk_writer_close(w) != STK_OK)
        die(path);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        die(path);
    fseek(fp, 0, SEEK_END);
    *size = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *b = malloc(*size);
    if (!b || fread(b, 1, *size, fp) != *size)
        die(path);
    fclose(fp);
    if (*size >= 4096) {
        fprintf(stderr, "%s: %zu bytes, over the 4 KB corpus budget\n", path, *size);
        exit(1);
    }
    return b;
}

static void put(const char *name, const uint8_t *b, size_t size)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", out_dir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(b, 1, size, fp) != size || fclose(fp) != 0)
        die(path);
}

/* Write a copy of b with byte `off` complemented. */
static void put_flipped(const char *name, const uint8_t *b, size_t size, size_t off)
{
    uint8_t *c = malloc(size);
    memcpy(c, b, size);
    c[off] = (uint8_t)~c[off];
    put(name, c, size);
    free(c);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
        return 2;
    }
    out_dir = argv[1];
    size_t size;
    char name[64];

    /* One bytes field, 0..5 records, byte alignment. */
    stk_field one = field("data", STK_FIELD_BYTES, STK_DTYPE_UINT8, 0, 0, 0);
    for (uint32_t n = 0; n <= 5; n++) {
        snprintf(name, sizeof(name), "valid-bytes-%u.stk", n);
        free(make_shard(name, &one, 1, n, 1, NULL, &size));
    }

    stk_field scalars[2] = {field("label", STK_FIELD_INT64, 0, 0, 0, 0),
                            field("weight", STK_FIELD_FLOAT32, 0, 0, 0, 0)};
    free(make_shard("valid-scalars-3.stk", scalars, 2, 3, 8, "{\"kind\": \"scalars\"}", &size));

    stk_field arrays[2] = {field("mask", STK_FIELD_ARRAY, STK_DTYPE_UINT8, 2, 2, 3),
                           field("xyz", STK_FIELD_ARRAY, STK_DTYPE_INT16, 1, 3, 0)};
    free(make_shard("valid-arrays-2.stk", arrays, 2, 2, 16, NULL, &size));

    stk_field folder[3] = {field("image", STK_FIELD_BYTES, 0, 0, 0, 0),
                           field("label", STK_FIELD_INT64, 0, 0, 0, 0),
                           field("path", STK_FIELD_BYTES, 0, 0, 0, 0)};
    free(make_shard("valid-imagefolder-4.stk", folder, 3, 4, 64,
                    "{\"source\": \"imagefolder\", \"classes\": [\"cat\", \"dog\"], "
                    "\"tool\": \"stoker pack 0.1.0\"}",
                    &size));

    /* Every kind in one schema: the base of the damaged variants. */
    stk_field all[5] = {field("image", STK_FIELD_BYTES, 0, 0, 0, 0),
                        field("label", STK_FIELD_INT64, 0, 0, 0, 0),
                        field("score", STK_FIELD_FLOAT32, 0, 0, 0, 0),
                        field("vec", STK_FIELD_ARRAY, STK_DTYPE_FLOAT32, 2, 2, 2),
                        field("path", STK_FIELD_BYTES, 0, 0, 0, 0)};
    uint8_t *b = make_shard("valid-all-5.stk", all, 5, 5, 32, "{\"a\": [1, 2]}", &size);
    size_t hs = stk__ld32(b + STK_FMT_H_HEADER_SIZE);
    size_t data = (size_t)stk__ld64(b + STK_FMT_H_DATA_OFFSET);
    size_t index = (size_t)stk__ld64(b + size - STK_FMT_FOOTER_SIZE + STK_FMT_T_INDEX_OFFSET);
    size_t footer = size - STK_FMT_FOOTER_SIZE;

    const size_t cuts[] = {0, 5, 20, hs / 2, data + 10, index + 20, footer + 30, size - 1};
    for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
        snprintf(name, sizeof(name), "trunc-%zu.stk", cuts[i]);
        put(name, b, cuts[i]);
    }
    put_flipped("flip-magic.stk", b, size, 2);
    put_flipped("flip-header-count.stk", b, size, STK_FMT_H_COUNT);
    put_flipped("flip-header-meta.stk", b, size, hs - 12);
    put_flipped("flip-record.stk", b, size, data + 3);
    put_flipped("flip-index-entry.stk", b, size, footer - 20);
    put_flipped("flip-index-max.stk", b, size, index + STK_FMT_I_MAX_RECORD);
    put_flipped("flip-footer-offset.stk", b, size, footer + STK_FMT_T_INDEX_OFFSET);
    put_flipped("flip-footer-magic.stk", b, size, size - 2);

    uint8_t *c = malloc(size);
    memcpy(c, b, size);
    stk__st32(c + STK_FMT_H_VERSION, 7);
    put("version-7.stk", c, size);
    free(c);
    put("garbage.stk", (const uint8_t *)"not a shard at all\n", 19);
    free(b);
    return 0;
}
