/*
 * fixtures.h: the raw-record generator, the two-field shard schema, loader options and temporary
 * directories shared by the C tests (test_loader.c, test_recfile.c, test_source.c, and through
 * cuda_fixtures.h the GPU path's tests). Include after t.h.
 */
#ifndef STK_TEST_FIXTURES_H
#define STK_TEST_FIXTURES_H

#include "stoker.h"

#include <ftw.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FX_FN static __attribute__((unused))

/* Deterministic payload of record i: 1 + (i*37 % 300) bytes, byte k = (i*131 + k) & 255. */
FX_FN size_t fx_payload(uint64_t i, uint8_t *buf)
{
    size_t len = 1 + (size_t)(i * 37 % 300);
    for (size_t k = 0; k < len; k++)
        buf[k] = (uint8_t)(i * 131 + k);
    return len;
}

/* Open a shard writer at `path` with the loader tests' schema: data (bytes), label (int64), and
 * writer metadata `meta` (NULL: "{}"). */
FX_FN stk_status fx_shard_open_meta(const char *path, const char *meta, stk_writer **w)
{
    stk_field fields[2] = {
        {.struct_size = sizeof(stk_field), .name = "data", .kind = STK_FIELD_BYTES},
        {.struct_size = sizeof(stk_field), .name = "label", .kind = STK_FIELD_INT64}};
    stk_writer_opts wo;
    stk_writer_opts_init(&wo);
    wo.fields = fields;
    wo.n_fields = 2;
    wo.metadata_json = meta;
    return stk_writer_open(path, &wo, w);
}

/* Add records first..first+count-1 (fx_payload's data, label 7 * i) to a writer opened by
 * fx_shard_open. */
FX_FN stk_status fx_add_records(stk_writer *w, uint64_t first, uint64_t count)
{
    for (uint64_t i = first; i < first + count; i++) {
        uint8_t buf[512];
        stk_value v[2] = {
            {.struct_size = sizeof(stk_value), .data = buf, .size = fx_payload(i, buf)},
            {.struct_size = sizeof(stk_value), .i64 = (int64_t)i * 7}};
        stk_status rc = stk_writer_add(w, v);
        if (rc != STK_OK)
            return rc;
    }
    return STK_OK;
}

/* fx_shard_open_meta without metadata. */
FX_FN stk_status fx_shard_open(const char *path, stk_writer **w)
{
    return fx_shard_open_meta(path, NULL, w);
}

/* A fresh empty directory /tmp/stk_<name>_XXXXXX for one case (NULL on failure). Lifetime: a
 * static buffer, until the next call. */
FX_FN const char *fx_tmpdir(const char *name)
{
    static char dir[96];
    snprintf(dir, sizeof(dir), "/tmp/stk_%s_XXXXXX", name);
    return mkdtemp(dir);
}

FX_FN int fx_rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(p);
}

/* Remove a directory tree (links are removed, never followed). */
FX_FN void fx_rmtree(const char *dir)
{
    nftw(dir, fx_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* A whole small file (up to 1 MiB), malloc'd; NULL if it cannot be read. */
FX_FN uint8_t *fx_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *buf = malloc(1 << 20);
    *size = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    return buf;
}

/* Loader options over one dataset path: rank 0 of 1. */
FX_FN stk_loader_opts fx_opts(const char *const *paths, int64_t batch, int threads)
{
    stk_loader_opts o;
    stk_loader_opts_init(&o);
    o.paths = paths;
    o.n_paths = 1;
    o.batch_size = batch;
    o.n_threads = threads;
    o.rank = 0;
    o.world = 1;
    return o;
}

#endif
