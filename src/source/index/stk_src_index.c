/*
 * stk_src_index.c: a dataset of bare record numbers, for loaders whose per-sample callback
 * produces every sample (stk_loader_opts.sample_fn_v2; Python's own Dataset objects, whose
 * __getitem__ runs there). Records have no fields and reading one reads nothing: the loader
 * keeps its order, ranks, tickets, ring, resume and stats, and the callback fills the rows.
 * Not a file format (nothing to detect, no paths): opened by stk_dataset_open_index only.
 * describe(i) is "NAME[i]", the way Python indexes the dataset; the fingerprint is the name and
 * the count, so a resume state of another dataset (name or length) is refused.
 */
#include "source/stk_source.h"

#include <inttypes.h>
#include <string.h>

typedef struct idxsrc {
    char name[128];
} idxsrc;

static void index_close(stk_dataset *ds)
{
    stk__free(ds->impl);
    ds->impl = NULL;
}

static stk_status index_read(const stk_dataset *ds, stk__cursor *cur, uint64_t i, void *const dst[],
                             const size_t cap[], unsigned flags, stk__recinfo *info, char *err,
                             size_t err_size)
{
    (void)cur;
    (void)dst;
    (void)cap;
    (void)flags;
    if (i >= ds->count)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "record %" PRIu64 " out of range (%" PRIu64 " records)", i,
                              ds->count);
    memset(info, 0, sizeof(*info));
    info->local = i;
    info->offset = UINT64_MAX;
    return STK_OK;
}

static void index_describe(const stk_dataset *ds, uint64_t i, char *buf, size_t size)
{
    const idxsrc *s = ds->impl;
    snprintf(buf, size, "%s[%" PRIu64 "]", s ? s->name : "dataset", i);
}

static const stk__source_methods index_methods = {
    .name = "index",
    .summary = "record numbers only: a callback produces each sample (stk_dataset_open_index)",
    .close = index_close,
    .read = index_read,
    .describe = index_describe,
};

stk_status stk_dataset_open_index(const char *name, uint64_t n_records, stk_dataset **out)
{
    stk_status rc = STK_OK;
    char err[STK_ERRMSG_SIZE] = "";
    if (!out)
        return stk__set_last_error(STK_EINVAL, "stk_dataset_open_index: NULL argument");
    *out = NULL;
    if (n_records == 0)
        return stk__set_last_error(STK_EINVAL, "%s: dataset is empty (0 records)",
                                   name && *name ? name : "dataset");
    stk_dataset *ds = stk__calloc(1, sizeof(*ds));
    idxsrc *s = stk__calloc(1, sizeof(*s));
    if (!ds || !s) {
        stk__free(ds);
        stk__free(s);
        return stk__set_last_error(STK_ENOMEM, "out of memory opening an index dataset");
    }
    snprintf(s->name, sizeof(s->name), "%s", name && *name ? name : "dataset");
    ds->m = &index_methods;
    ds->impl = s;
    ds->count = n_records;
    STK_TRY(stk__dataset_files_alloc(ds, 1, err, sizeof(err)));
    ds->files[0].count = n_records;
    if (!(ds->files[0].path = stk__strdup(s->name)) || !(ds->files[0].metadata = stk__strdup("{}")))
        STK_FAIL(err, STK_ENOMEM, "out of memory opening an index dataset");
    stk__fphash h;
    stk__fp_begin(&h);
    stk__fp_add(&h, "index", 5);
    stk__fp_add(&h, s->name, strlen(s->name));
    stk__fp_add_u64(&h, n_records);
    ds->fingerprint = stk__fp_end(&h);
    stk__clear_last_error();
    *out = ds;
    return STK_OK;
fail:
    stk_dataset_close(ds);
    return stk__last_error_copy(rc, err);
}
