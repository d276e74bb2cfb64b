/*
 * stk_src_npy.c: NumPy `.npy` files as a record source, the example docs/design.md walks through
 * ("a new format is one file plus one line in stk_sources.def"). A dataset is a directory of
 * `<field>.npy` files, or a list of `.npy` files, sharing their first dimension N: record i is row
 * i of every file, one field per file named after it (x.npy -> "x"), or by the caller: the
 * NumPy dict form {"image": "x.npy", "label": "y.npy"} arrives as stk_dataset_opts.field_names
 * (ds->open_names during open), one file per name. Rows are read in place by offset (no copy of
 * the file), or copied out of a mapping where src/io/stk_mapped.h maps the file (a sealed memfd:
 * an array stoker copied out of the training process's memory; any file with STOKER_MMAP=1).
 *
 * The header (format versions 1-3) is a Python dict literal: {'descr': '<f4', 'fortran_order':
 * False, 'shape': (N, ...)}, parsed as strictly as numpy parses it (stk_npy.c). Supported:
 * little-endian or byte-sized integers and floats, C order; a row of shape () is an int64 or
 * float32 scalar field when the dtype is that, else a [1] array. Refused with the reason: Fortran
 * order, object or structured dtypes, big-endian data, files of different lengths, a file shorter
 * than its header says.
 */
#include "io/stk_mapped.h"
#include "source/npy/stk_npy.h"
#include "source/stk_source.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define NPY_MAGIC "\x93NUMPY"

typedef struct npyfile {
    stk__file *f;
    stk__mapped *map; /* NULL: rows are read (stk_mapped.h says which files are mapped) */
    uint64_t data_offset;
    uint64_t row_size;
} npyfile;

static const char *const npy_suffixes[] = {".npy", NULL};

static int npy_probe(const char *path, const stk__stat *st, const uint8_t *head, size_t n)
{
    if (n >= 6 && memcmp(head, NPY_MAGIC, 6) == 0)
        return 2;
    if (!st->is_dir) {
        size_t len = strlen(path);
        return len > 4 && strcmp(path + len - 4, ".npy") == 0;
    }
    return stk__paths_dir_has(path, npy_suffixes);
}

/* Parse one file's header into its field and N. */
static stk_status npy_header(npyfile *nf, const char *path, stk_field *fd, uint64_t *rows,
                             char *err, size_t err_size)
{
    uint8_t pre[12];
    uint8_t *h = NULL;
    stk_status rc = STK_OK;
    uint64_t hsize;
    stk__npy np;
    STK_TRY(stk__vfs_read(nf->f, 0, pre, (size_t)STK_MIN(sizeof(pre), nf->f->size), err, err_size));
    STK_TRY(stk__npy_header_size(pre, (size_t)STK_MIN(sizeof(pre), nf->f->size), path, &hsize, err,
                                 err_size));
    if (hsize > nf->f->size)
        STK_FAIL_E(STK_EFORMAT, "%s: corrupt .npy header (length %" PRIu64 ")", path, hsize);
    h = stk__malloc((size_t)hsize);
    if (!h)
        STK_FAIL_E(STK_ENOMEM, "%s: out of memory", path);
    STK_TRY(stk__vfs_read(nf->f, 0, h, (size_t)hsize, err, err_size));
    STK_TRY(stk__npy_parse(h, (size_t)hsize, path, &np, err, err_size));
    if (np.nd == 0)
        STK_FAIL_E(STK_EINVAL, "%s: a 0-d array has no rows", path);
    memset(fd, 0, sizeof(*fd));
    fd->dtype = np.dtype;
    uint32_t nd = np.nd;
    const int64_t *dims = np.dims;
    *rows = (uint64_t)dims[0];
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(fd->name, sizeof(fd->name), "%.*s", (int)STK_MIN(strlen(base) - 4, STK_MAX_NAME - 1),
             base);
    if (nd == 1 && (fd->dtype == STK_DTYPE_INT64 || fd->dtype == STK_DTYPE_FLOAT32)) {
        fd->kind = fd->dtype == STK_DTYPE_INT64 ? STK_FIELD_INT64 : STK_FIELD_FLOAT32;
    } else {
        fd->kind = STK_FIELD_ARRAY;
        fd->ndim = nd == 1 ? 1 : nd - 1;
        for (uint32_t d = 0; d < fd->ndim; d++)
            fd->shape[d] = nd == 1 ? 1 : dims[d + 1];
    }
    char bad[160];
    if (!stk__field_valid(fd, bad, sizeof(bad)))
        STK_FAIL_E(STK_EINVAL, "%s: %s", path, bad);
    *fd = stk__field_canonical(fd);
    nf->data_offset = np.data_offset;
    nf->row_size = stk__field_fixed_size(fd);
    if (*rows && nf->row_size > (nf->f->size - nf->data_offset) / *rows)
        STK_FAIL_E(STK_EFORMAT,
                   "%s: truncated (%" PRIu64 " rows of %" PRIu64
                   " bytes need more than the file's %" PRIu64 " bytes)",
                   path, *rows, nf->row_size, nf->f->size);
fail:
    stk__free(h);
    return rc;
}

/* The caller's name for the field of file `path` (the NumPy dict form). */
static stk_status set_name(stk_field *fd, const char *name, const char *path, char *err,
                           size_t err_size)
{
    if (strlen(name) >= STK_MAX_NAME)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "%s: field name '%.40s...' is over %d characters", path, name,
                              STK_MAX_NAME - 1);
    snprintf(fd->name, sizeof(fd->name), "%s", name);
    char bad[160];
    if (!stk__field_valid(fd, bad, sizeof(bad)))
        return stk__set_error(err, err_size, STK_EINVAL, "%s: %s", path, bad);
    return STK_OK;
}

static void npy_close(stk_dataset *ds)
{
    npyfile *nf = ds->impl;
    for (size_t i = 0; nf && i < ds->n_fields; i++) {
        stk__mapped_close(nf[i].map);
        stk__vfs_close(nf[i].f);
    }
    stk__free(nf);
    ds->impl = NULL;
}

static stk_status npy_open(stk_dataset *ds, const char *const *paths, size_t n_paths, char *err,
                           size_t err_size)
{
    stk_status rc = STK_OK;
    stk__strlist list = {0};
    if (ds->open_names) { /* one file per named field, as given */
        for (size_t i = 0; i < n_paths; i++)
            if (stk__strlist_add(&list, paths[i]) < 0)
                STK_FAIL_E(STK_ENOMEM, "out of memory");
    } else {
        STK_TRY(stk__paths_files(paths, n_paths, npy_suffixes, ".npy files", &list, err, err_size));
    }
    if (list.n == 0 || list.n > STK_MAX_FIELDS)
        STK_FAIL_E(STK_EINVAL, "%s: need 1 to %d .npy files (one per field), found %zu", paths[0],
                   STK_MAX_FIELDS, list.n);
    npyfile *nf = stk__calloc(list.n, sizeof(*nf));
    if (!nf)
        STK_FAIL_E(STK_ENOMEM, "out of memory");
    ds->impl = nf;
    STK_TRY(stk__dataset_files_alloc(ds, list.n, err, err_size));
    stk__fphash fp, *h = &fp;
    stk__fp_begin(h);
    for (size_t i = 0; i < list.n && rc == STK_OK; i++) {
        uint64_t rows = 0;
        ds->n_fields = (uint32_t)i + 1; /* so close sees the files opened so far */
        rc = stk__vfs_open(list.v[i], &nf[i].f, err, err_size);
        if (rc == STK_OK)
            rc = npy_header(&nf[i], list.v[i], &ds->fields[i], &rows, err, err_size);
        if (rc == STK_OK)
            rc = stk__mapped_open(nf[i].f, STK__MAP_RANDOM, &nf[i].map, err, err_size);
        if (rc == STK_OK && ds->open_names)
            rc = set_name(&ds->fields[i], ds->open_names[i], list.v[i], err, err_size);
        for (size_t j = 0; rc == STK_OK && j < i; j++)
            if (strcmp(ds->fields[i].name, ds->fields[j].name) == 0)
                rc = stk__set_error(err, err_size, STK_EINVAL, "%s and %s: two fields named '%s'",
                                    list.v[j], list.v[i], ds->fields[i].name);
        if (rc == STK_OK && i > 0 && rows != ds->count)
            rc = stk__set_error(err, err_size, STK_EINVAL,
                                "%s has %" PRIu64 " rows but %s has %" PRIu64
                                ": the files of a dataset share their first dimension",
                                list.v[i], rows, list.v[0], ds->count);
        if (rc < 0)
            break;
        ds->count = rows;
        ds->field_max[i] = nf[i].row_size;
        ds->max_record += nf[i].row_size;
        stk__srcfile *sf = &ds->files[i];
        sf->path = stk__strdup(list.v[i]);
        sf->count = rows;
        sf->size = nf[i].f->size;
        sf->data_size = rows * nf[i].row_size;
        sf->version = 1;
        if (!sf->path)
            rc = stk__set_error(err, err_size, STK_ENOMEM, "out of memory");
        stk__fp_add(h, ds->fields[i].name, sizeof(ds->fields[i].name));
        stk__fp_add_u64(h, sf->size);
    }
    stk__fp_add_u64(h, ds->count);
    ds->fingerprint = stk__fp_end(h);
fail:
    stk__strlist_free(&list);
    return rc;
}

static void npy_describe(const stk_dataset *ds, uint64_t i, char *buf, size_t size)
{
    const npyfile *nf = ds->impl;
    snprintf(buf, size, "%s row %" PRIu64 " at byte %" PRIu64, ds->files[0].path, i,
             nf[0].data_offset + i * nf[0].row_size);
}

static void copy_row(void *dst, const uint8_t *bytes, size_t n)
{
    memcpy(dst, bytes, n);
}

static stk_status npy_read(const stk_dataset *ds, stk__cursor *cur, uint64_t i, void *const dst[],
                           const size_t cap[], unsigned flags, stk__recinfo *info, char *err,
                           size_t err_size)
{
    (void)cur;
    (void)flags;
    const npyfile *nf = ds->impl;
    memset(info, 0, sizeof(*info));
    info->local = i;
    info->offset = UINT64_MAX; /* one place per field */
    for (uint32_t f = 0; f < ds->n_fields; f++) {
        uint64_t off = nf[f].data_offset + i * nf[f].row_size;
        if (nf[f].row_size > cap[f])
            return stk__set_error(err, err_size, STK_ELIMIT, "%s row %" PRIu64 ": over its buffer",
                                  ds->files[f].path, i);
        stk_status rc =
            nf[f].map ? stk__mapped_use(nf[f].map, off, (size_t)nf[f].row_size, copy_row, dst[f],
                                        err, err_size)
                      : stk__vfs_read(nf[f].f, off, dst[f], (size_t)nf[f].row_size, err, err_size);
        if (rc < 0) {
            char where[STK_ERRMSG_SIZE];
            snprintf(where, sizeof(where), "%s row %" PRIu64, ds->files[f].path, i);
            return stk__source_read_error(rc, where, ds->files[f].path, err, err_size);
        }
        info->field_size[f] = nf[f].row_size;
        info->size += nf[f].row_size;
    }
    return STK_OK;
}

const stk__source_methods stk__src_npy = {
    .name = "npy",
    .summary = ".npy files (a directory, a list or a dict), one field per file",
    .takes_names = true,
    .probe = npy_probe,
    .open = npy_open,
    .close = npy_close,
    .read = npy_read,
    .describe = npy_describe,
};
