/*
 * stk_src_hdf5.c: HDF5 files (as h5py writes them) as a record source. Record i is row i of
 * every dataset of the file (root group and subgroups, in byte order of their paths) whose first
 * dimension is the common length N; one field per dataset, named by its path without the leading
 * '/' ("images", "meta/label"). Several files (a list, glob or brace range) are one dataset:
 * their rows one file after another, in the listed order; each file must hold the same datasets
 * with the same dtypes and row shapes (an error names the first file that differs).
 *
 * Which datasets are records: every dataset of rank >= 1. Scalar (rank 0) and null datasets are
 * metadata and left out. Datasets of rank >= 1 whose first dimensions differ are an error naming
 * both (a per-row reader cannot guess which one the user meant).
 *
 * Types: little- or big-endian integers of 1..8 bytes (unsigned only for 1 byte) and floats of 2,
 * 4 or 8 bytes become array fields of the row's shape; a row of shape () is an int64 or float32
 * scalar field when the dtype is exactly that, else a [1] array. Variable-length sequences of
 * 1-byte integers (h5py's vlen_dtype(np.uint8), how encoded images are stored) become bytes
 * fields, one row at a time. Anything else is refused naming the dataset and its type.
 *
 * Reading. Debian's libhdf5 is the thread-safe build: one global lock around every call, so
 * nothing read through the library runs in parallel. Hence these paths:
 *  - contiguous, unfiltered datasets: the data's file offset is taken at open (H5Dget_offset) and
 *    rows are read with stk__vfs_read from the worker threads, never touching the library;
 *  - chunked (and so compressed) or compact datasets: H5Dread of one row under this source's own
 *    mutex (the library's lock would serialise them anyway; the mutex guards the shared
 *    dataspaces). Each row read inflates its whole chunk unless the chunk cache (32 MiB per
 *    dataset here) still holds it, so shuffled reads of compressed data cost a chunk each;
 *  - variable-length bytes, contiguous (h5py's default): at open the rows' descriptors (u32
 *    length, global heap collection, object index) and the heap collections' object headers give
 *    each row's offset and length (12 bytes a row: stk_hdf5_vlen.c), and rows are read by offset
 *    like the above;
 *  - variable-length bytes in any other layout (chunked, or a heap not as expected): H5Dread
 *    under the mutex, the largest row found by one pass over the rows at open.
 * A bytes field read in place (field_open: an audio crop's bytes) is lent where its contiguous
 * vlen row lies in the file; a row through the library is read whole and lent from memory.
 * Filters: deflate (gzip), shuffle and fletcher32 are read; any other (lzf, szip,
 * scaleoffset, nbit, blosc, ...) is refused at open naming the dataset and the filter.
 *
 * The library reads the file's metadata through its own I/O (the one exception to "every byte
 * through stk_vfs.h": HDF5 files are local); row data of contiguous datasets goes through the
 * byte source. The file is opened once, at open; there is no fork, so none of the
 * "opened before fork" failures of DataLoader workers.
 */
#include "common/stk_endian.h"
#include "source/hdf5/stk_hdf5.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define H5_MAGIC "\x89HDF\r\n\x1a\n"
#define CHUNK_CACHE_BYTES (32u << 20)

enum { COL_OFFSET, COL_LIB, COL_VLEN };

/* One file of the dataset: its datasets as columns, in the schema's order. */
typedef struct h5file {
    hid_t file;
    stk__file *f; /* the same file through the byte source, for COL_OFFSET rows */
    uint32_t n;
    stk__h5col col[STK_MAX_FIELDS];
} h5file;

typedef struct h5src {
    pthread_mutex_t lock; /* around every library call of a read, whatever the file */
    bool lock_init;
    h5file **fl; /* one per file (ds->files[k] describes fl[k]) */
    size_t n_fl;
} h5src;

static int h5_probe(const char *path, const stk__stat *st, const uint8_t *head, size_t n)
{
    if (st->is_dir)
        return 0;
    if (n >= 8 && memcmp(head, H5_MAGIC, 8) == 0)
        return 2;
    size_t len = strlen(path);
    return (len > 3 && strcmp(path + len - 3, ".h5") == 0) ||
           (len > 5 && strcmp(path + len - 5, ".hdf5") == 0);
}

/* The innermost message of the library's error stack ("" when none). */
static herr_t h5_err_walk(unsigned n, const H5E_error2_t *e, void *data)
{
    if (n == 0)
        snprintf(data, 160, "%s: %s", e->func_name ? e->func_name : "?", e->desc ? e->desc : "");
    return 0;
}

const char *stk__h5_errmsg(char *buf)
{
    buf[0] = '\0';
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5_err_walk, buf);
    return buf[0] ? buf : "HDF5 library error";
}

/* The library prints its error stack to stderr unless told not to, per thread in the thread-safe
 * build: silence it around our calls and put back what the thread had (h5py's or the user's). */
typedef struct h5quiet {
    H5E_auto2_t fn;
    void *data;
} h5quiet;

static h5quiet quiet_begin(void)
{
    h5quiet q = {NULL, NULL};
    H5Eget_auto2(H5E_DEFAULT, &q.fn, &q.data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    return q;
}

static void quiet_end(h5quiet q)
{
    H5Eset_auto2(H5E_DEFAULT, q.fn, q.data);
}

/* Collect the paths of every dataset (H5Lvisit callback). */
static herr_t collect(hid_t g, const char *name, const H5L_info_t *info, void *data)
{
    if (info->type != H5L_TYPE_HARD)
        return 0;
    hid_t o = H5Oopen(g, name, H5P_DEFAULT);
    if (o < 0)
        return 0; /* not openable (dangling): not a dataset we can read */
    bool is_ds = H5Iget_type(o) == H5I_DATASET;
    H5Oclose(o);
    if (is_ds && stk__strlist_add(data, name) < 0)
        return -1;
    return 0;
}

/* The filters of a chunked dataset: STK_ENOTSUP naming the first one stoker does not read. */
static stk_status check_filters(hid_t plist, const char *path, const char *dname, char *err,
                                size_t err_size)
{
    int nf = H5Pget_nfilters(plist);
    for (int k = 0; k < nf; k++) {
        unsigned flags = 0, cd[8];
        size_t cd_n = 8;
        char fname[64] = "";
        unsigned config = 0;
        H5Z_filter_t id =
            H5Pget_filter2(plist, (unsigned)k, &flags, &cd_n, cd, sizeof(fname), fname, &config);
        bool ok =
            id == H5Z_FILTER_DEFLATE || id == H5Z_FILTER_SHUFFLE || id == H5Z_FILTER_FLETCHER32;
        if (!ok || H5Zfilter_avail(id) <= 0)
            return stk__set_error(err, err_size, STK_ENOTSUP,
                                  "%s: dataset '%s' uses the HDF5 filter '%s' (id %d), which "
                                  "stoker does not read (it reads gzip/deflate, shuffle and "
                                  "fletcher32; rewrite it with compression='gzip' or none)",
                                  path, dname,
                                  id == 32000 ? "lzf"
                                  : fname[0]  ? fname
                                              : "?",
                                  (int)id);
    }
    return STK_OK;
}

/* A chunked dataset's chunk shape against its dataspace: HDF5 refuses to create a chunk larger
 * than a fixed dimension, and libhdf5 1.10 trusts that when it reads one back (a damaged file
 * declaring a 65540-row chunk for an 8-row dataset made H5Dread copy past a buffer of its own,
 * found by fuzz_hdf5): such a file is refused at open, naming the dataset. */
static stk_status check_chunks(hid_t plist, hid_t sp, int rank, const char *path, const char *dname,
                               char *err, size_t err_size)
{
    hsize_t chunk[H5S_MAX_RANK], dims[H5S_MAX_RANK], maxdims[H5S_MAX_RANK];
    if (H5Pget_chunk(plist, rank, chunk) != rank ||
        H5Sget_simple_extent_dims(sp, dims, maxdims) != rank)
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "%s: dataset '%s': its chunk shape does not match its %d dimensions "
                              "(damaged file?)",
                              path, dname, rank);
    for (int d = 0; d < rank; d++) {
        if (chunk[d] == 0 || (maxdims[d] != H5S_UNLIMITED && chunk[d] > maxdims[d]))
            return stk__set_error(err, err_size, STK_EFORMAT,
                                  "%s: dataset '%s': chunk dimension %d is %llu for a dimension "
                                  "of at most %llu (damaged file?)",
                                  path, dname, d, (unsigned long long)chunk[d],
                                  (unsigned long long)maxdims[d]);
    }
    return STK_OK;
}

/* The field a dataset's element type makes (kind, dtype), and the memory type to read it with. */
static stk_status map_type(hid_t t, stk__h5col *c, stk_field *fd, const char *path,
                           const char *dname, char *err, size_t err_size)
{
    H5T_class_t cls = H5Tget_class(t);
    size_t size = H5Tget_size(t);
    if (cls == H5T_VLEN) {
        hid_t base = H5Tget_super(t);
        bool ok = base >= 0 && H5Tget_class(base) == H5T_INTEGER && H5Tget_size(base) == 1;
        if (base >= 0)
            H5Tclose(base);
        if (!ok)
            return stk__set_error(err, err_size, STK_ENOTSUP,
                                  "%s: dataset '%s' is a variable-length sequence of something "
                                  "other than bytes (stoker reads vlen uint8/int8 as bytes)",
                                  path, dname);
        fd->kind = STK_FIELD_BYTES;
        c->mode = COL_VLEN;
        c->mtype = H5Tvlen_create(H5T_NATIVE_UCHAR);
        return c->mtype < 0 ? stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", path)
                            : STK_OK;
    }
    if (cls == H5T_INTEGER) {
        bool sgn = H5Tget_sign(t) == H5T_SGN_2;
        static const stk_dtype st[] = {0, STK_DTYPE_INT8, STK_DTYPE_INT16, 0, STK_DTYPE_INT32, 0, 0,
                                       0, STK_DTYPE_INT64};
        if (size == 1 && !sgn)
            fd->dtype = STK_DTYPE_UINT8;
        else if (sgn && size <= 8 && st[size])
            fd->dtype = st[size];
        else
            return stk__set_error(err, err_size, STK_ENOTSUP,
                                  "%s: dataset '%s' has %s %zu-byte integers (stoker arrays hold "
                                  "uint8, int8, int16, int32, int64)",
                                  path, dname, sgn ? "signed" : "unsigned", size);
    } else if (cls == H5T_FLOAT && (size == 2 || size == 4 || size == 8)) {
        fd->dtype = size == 2   ? STK_DTYPE_FLOAT16
                    : size == 4 ? STK_DTYPE_FLOAT32
                                : STK_DTYPE_FLOAT64;
    } else {
        return stk__set_error(err, err_size, STK_ENOTSUP,
                              "%s: dataset '%s' has an element type stoker does not read (HDF5 "
                              "class %d, %zu bytes; it reads integers, floats and vlen bytes)",
                              path, dname, (int)cls, size);
    }
    /* Read as little-endian of the same size: the library converts a big-endian file type. */
    c->mtype = H5Tcopy(t);
    if (c->mtype < 0 || (size > 1 && H5Tset_order(c->mtype, H5T_ORDER_LE) < 0))
        return stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", path);
    return STK_OK;
}

/* Open one dataset of file s as its column s->n (field fd, largest row *fmax); *skip when it is
 * metadata (rank 0). */
static stk_status open_col(h5file *s, stk_field *fd, uint64_t *fmax, const char *path,
                           const char *dname, hid_t dapl, bool *skip, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    char m[160];
    hid_t sp = -1, t = -1, plist = -1;
    stk__h5col *c = &s->col[s->n];
    memset(fd, 0, sizeof(*fd));
    c->dset = H5Dopen2(s->file, dname, dapl);
    if (c->dset < 0)
        STK_FAIL_E(STK_EFORMAT, "%s: cannot open dataset '%s': %s", path, dname, stk__h5_errmsg(m));
    sp = H5Dget_space(c->dset);
    t = H5Dget_type(c->dset);
    plist = H5Dget_create_plist(c->dset);
    if (sp < 0 || t < 0 || plist < 0)
        STK_FAIL_E(STK_EFORMAT, "%s: dataset '%s': %s", path, dname, stk__h5_errmsg(m));
    c->rank = H5Sget_simple_extent_ndims(sp);
    if (c->rank <= 0) {
        *skip = true; /* scalar or null dataspace: metadata */
        goto fail;
    }
    if (c->rank > STK_MAX_DIMS + 1)
        STK_FAIL_E(STK_ENOTSUP, "%s: dataset '%s' has %d dimensions (at most %d)", path, dname,
                   c->rank, STK_MAX_DIMS + 1);
    H5Sget_simple_extent_dims(sp, c->dims, NULL);
    if (strlen(dname) >= STK_MAX_NAME)
        STK_FAIL_E(STK_ENOTSUP, "%s: dataset '%s': its path is the field name, at most %d bytes",
                   path, dname, STK_MAX_NAME - 1);
    snprintf(fd->name, sizeof(fd->name), "%s", dname);
    STK_TRY(map_type(t, c, fd, path, dname, err, err_size));
    H5D_layout_t layout = H5Pget_layout(plist);
    if (layout == H5D_CHUNKED) {
        STK_TRY(check_chunks(plist, sp, c->rank, path, dname, err, err_size));
        STK_TRY(check_filters(plist, path, dname, err, err_size));
    }
    if (c->mode == COL_VLEN && c->rank != 1)
        STK_FAIL_E(STK_ENOTSUP, "%s: dataset '%s': variable-length bytes need a 1-d dataset", path,
                   dname);
    hsize_t count[H5S_MAX_RANK];
    count[0] = 1;
    for (int d = 1; d < c->rank; d++)
        count[d] = c->dims[d];
    c->fspace = H5Scopy(sp);
    c->mspace = H5Screate_simple(c->rank, count, NULL);
    if (c->fspace < 0 || c->mspace < 0)
        STK_FAIL_E(STK_ENOMEM, "%s: out of memory", path);
    if (c->mode != COL_VLEN) {
        if (c->rank == 1 && (fd->dtype == STK_DTYPE_INT64 || fd->dtype == STK_DTYPE_FLOAT32)) {
            fd->kind = fd->dtype == STK_DTYPE_INT64 ? STK_FIELD_INT64 : STK_FIELD_FLOAT32;
        } else {
            fd->kind = STK_FIELD_ARRAY;
            fd->ndim = c->rank == 1 ? 1 : (uint32_t)c->rank - 1;
            for (uint32_t d = 0; d < fd->ndim; d++)
                fd->shape[d] = c->rank == 1 ? 1 : (int64_t)c->dims[d + 1];
        }
    }
    char bad[160];
    if (!stk__field_valid(fd, bad, sizeof(bad)))
        STK_FAIL_E(STK_EINVAL, "%s: dataset '%s': %s", path, dname, bad);
    *fd = stk__field_canonical(fd);
    c->row_size = stk__field_fixed_size(fd);
    if (c->mode == COL_VLEN) {
        STK_TRY(stk__h5_vlen_direct(c, s->f, plist, dname, fmax, err, err_size));
        if (!c->voff)
            STK_TRY(stk__h5_vlen_max(c, plist, path, s->f->size, dname, fmax, err, err_size));
    } else {
        *fmax = c->row_size;
        haddr_t off = layout == H5D_CONTIGUOUS ? H5Dget_offset(c->dset) : HADDR_UNDEF;
        bool le = c->row_size == 0 || H5Tget_order(t) != H5T_ORDER_BE;
        c->mode = COL_LIB;
        if (off != HADDR_UNDEF && le && off <= s->f->size &&
            c->dims[0] <= (s->f->size - off) / (c->row_size ? c->row_size : 1)) {
            c->mode = COL_OFFSET;
            c->offset = off;
        }
    }
fail:
    if (plist >= 0)
        H5Pclose(plist);
    if (t >= 0)
        H5Tclose(t);
    if (sp >= 0)
        H5Sclose(sp);
    return rc;
}

static void col_close(stk__h5col *c)
{
    stk__free(c->voff);
    stk__free(c->vlen);
    if (c->dset > 0)
        H5Dclose(c->dset);
    if (c->mtype > 0)
        H5Tclose(c->mtype);
    if (c->fspace > 0)
        H5Sclose(c->fspace);
    if (c->mspace > 0)
        H5Sclose(c->mspace);
    memset(c, 0, sizeof(*c));
}

static void file_close(h5file *s)
{
    if (!s)
        return;
    for (uint32_t k = 0; k <= s->n && k < STK_MAX_FIELDS; k++)
        col_close(&s->col[k]);
    if (s->file > 0)
        H5Fclose(s->file);
    stk__vfs_close(s->f);
    stk__free(s);
}

static void h5_close(stk_dataset *ds)
{
    h5src *s = ds->impl;
    if (!s)
        return;
    for (size_t k = 0; k < s->n_fl; k++)
        file_close(s->fl[k]);
    stk__free(s->fl);
    if (s->lock_init)
        pthread_mutex_destroy(&s->lock);
    stk__free(s);
    ds->impl = NULL;
}

/* The file's metadata for inspect and Dataset.metadata: which datasets are read by offset from
 * the workers and which through the library (serialised), {"by_offset": [...], "library":
 * [...]}. NULL when out of memory. */
static char *read_paths_json(const stk_dataset *ds, const h5file *s)
{
    size_t cap = 64 + (size_t)s->n * (STK_MAX_NAME + 4), n = 0;
    char *j = stk__malloc(cap);
    if (!j)
        return NULL;
    for (int lib = 0; lib < 2; lib++) {
        n += (size_t)snprintf(j + n, cap - n, "%s\"%s\": [", lib ? ", " : "{",
                              lib ? "library" : "by_offset");
        const char *sep = "";
        for (uint32_t k = 0; k < s->n; k++)
            if ((s->col[k].mode == COL_OFFSET || s->col[k].voff) == !lib) {
                n += (size_t)snprintf(j + n, cap - n, "%s\"%s\"", sep, ds->fields[k].name);
                sep = ", ";
            }
        n += (size_t)snprintf(j + n, cap - n, "]");
    }
    snprintf(j + n, cap - n, "}");
    return j;
}

/* Open one file: its datasets of rank >= 1 sorted by path, each a field (fields[], fmax[]),
 * sharing their first dimension (*rows). */
static stk_status open_file(h5file *s, const char *path, hid_t dapl, stk_field *fields,
                            uint64_t *fmax, uint64_t *rows, uint64_t *data_size, char *err,
                            size_t err_size)
{
    stk_status rc = STK_OK;
    stk__strlist names = {0};
    char m[160];
    s->file = -1;
    STK_TRY(stk__vfs_open(path, &s->f, err, err_size));
    if (H5Fis_hdf5(path) <= 0)
        STK_FAIL_E(STK_EFORMAT, "%s: not an HDF5 file", path);
    s->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (s->file < 0)
        STK_FAIL_E(STK_EFORMAT, "%s: cannot open as HDF5: %s", path, stk__h5_errmsg(m));
    if (H5Lvisit(s->file, H5_INDEX_NAME, H5_ITER_INC, collect, &names) < 0)
        STK_FAIL_E(STK_EFORMAT, "%s: cannot list its datasets: %s", path, stk__h5_errmsg(m));
    stk__strlist_sort(&names);
    const char *first = NULL;
    for (size_t i = 0; i < names.n; i++) {
        bool skip = false;
        if (s->n == STK_MAX_FIELDS)
            STK_FAIL_E(STK_ENOTSUP,
                       "%s: more than %d per-row datasets (a record has at most %d "
                       "fields)",
                       path, STK_MAX_FIELDS, STK_MAX_FIELDS);
        STK_TRY(
            open_col(s, &fields[s->n], &fmax[s->n], path, names.v[i], dapl, &skip, err, err_size));
        stk__h5col *c = &s->col[s->n];
        if (skip) {
            col_close(c);
            continue;
        }
        if (first && c->dims[0] != *rows)
            STK_FAIL_E(STK_EINVAL,
                       "%s: dataset '%s' has %" PRIu64 " rows but '%s' has %" PRIu64
                       ": every dataset of rank >= 1 is a column of the records and they must "
                       "share their first dimension",
                       path, names.v[i], (uint64_t)c->dims[0], first, *rows);
        first = first ? first : names.v[i];
        *rows = c->dims[0];
        *data_size += H5Dget_storage_size(c->dset);
        s->n++;
    }
    if (s->n == 0)
        STK_FAIL_E(STK_EINVAL, "%s: no datasets of rank >= 1 (nothing to read as records)", path);
fail:
    stk__strlist_free(&names);
    return rc;
}

/* File k's datasets must be the first file's: the same names, dtypes and row shapes. */
static stk_status same_schema(const stk_dataset *ds, const char *path, const stk_field *got,
                              uint32_t n, char *err, size_t err_size)
{
    const char *first = ds->files[0].path;
    for (uint32_t f = 0; f < STK_MAX(n, ds->n_fields); f++) {
        const stk_field *a = f < ds->n_fields ? &ds->fields[f] : NULL, *b = f < n ? &got[f] : NULL;
        if (!a || !b || strcmp(a->name, b->name) != 0) {
            /* the first name in byte order that only one of them has */
            const char *only = !b || (a && strcmp(a->name, b->name) < 0) ? a->name : b->name;
            bool in_first = only == (a ? a->name : NULL);
            return stk__set_error(err, err_size, STK_EINVAL,
                                  "%s: dataset '%s' is in %s but not in %s (the files of an "
                                  "HDF5 dataset hold the same datasets)",
                                  path, only, in_first ? first : path, in_first ? path : first);
        }
        if (a->kind != b->kind || a->dtype != b->dtype || a->ndim != b->ndim ||
            memcmp(a->shape, b->shape, sizeof(a->shape[0]) * a->ndim) != 0) {
            char sa[96], sb[96];
            stk__field_str(a, sa, sizeof(sa));
            stk__field_str(b, sb, sizeof(sb));
            return stk__set_error(err, err_size, STK_EINVAL,
                                  "%s: dataset '%s' has rows of %s but in %s of %s (the files of "
                                  "an HDF5 dataset agree on dtypes and row shapes)",
                                  path, a->name, sb, first, sa);
        }
    }
    return STK_OK;
}

static stk_status h5_open(stk_dataset *ds, const char *const *paths, size_t n_paths, char *err,
                          size_t err_size)
{
    stk_status rc = STK_OK;
    hid_t dapl = -1;
    h5quiet q = quiet_begin(); /* errors come back here, never to stderr */
    h5src *s = stk__calloc(1, sizeof(*s));
    if (!s)
        STK_FAIL_E(STK_ENOMEM, "%s: out of memory", paths[0]);
    ds->impl = s;
    if (pthread_mutex_init(&s->lock, NULL) != 0)
        STK_FAIL_E(STK_ENOMEM, "%s: cannot create a mutex", paths[0]);
    s->lock_init = true;
    dapl = H5Pcreate(H5P_DATASET_ACCESS);
    if (dapl < 0 || H5Pset_chunk_cache(dapl, 10007, CHUNK_CACHE_BYTES, 0.75) < 0)
        STK_FAIL_E(STK_ENOMEM, "%s: out of memory", paths[0]);
    STK_TRY(stk__dataset_files_alloc(ds, n_paths, err, err_size));
    if (!(s->fl = stk__calloc(n_paths, sizeof(*s->fl))))
        STK_FAIL_E(STK_ENOMEM, "%s: out of memory for %zu files", paths[0], n_paths);
    stk__fphash fp, *h = &fp;
    stk__fp_begin(h);
    for (size_t k = 0; k < n_paths; k++) {
        const char *path = paths[k];
        stk_field fields[STK_MAX_FIELDS];
        uint64_t fmax[STK_MAX_FIELDS] = {0}, rows = 0;
        stk__srcfile *sf = &ds->files[k];
        if (!(s->fl[k] = stk__calloc(1, sizeof(*s->fl[k]))))
            STK_FAIL_E(STK_ENOMEM, "%s: out of memory", path);
        s->n_fl = k + 1;
        if (!(sf->path = stk__strdup(path)))
            STK_FAIL_E(STK_ENOMEM, "%s: out of memory", path);
        h5file *hf = s->fl[k];
        STK_TRY(open_file(hf, path, dapl, fields, fmax, &rows, &sf->data_size, err, err_size));
        if (k == 0) {
            memcpy(ds->fields, fields, hf->n * sizeof(fields[0]));
            ds->n_fields = hf->n;
        } else {
            STK_TRY(same_schema(ds, path, fields, hf->n, err, err_size));
        }
        for (uint32_t f = 0; f < hf->n; f++)
            ds->field_max[f] = STK_MAX(ds->field_max[f], fmax[f]);
        sf->first = ds->count;
        sf->count = rows;
        sf->size = hf->f->size;
        sf->version = 0;
        ds->count += rows;
        if (!(sf->metadata = read_paths_json(ds, hf)))
            STK_FAIL_E(STK_ENOMEM, "%s: out of memory", path);
        for (uint32_t f = 0; f < hf->n; f++) {
            if (k == 0)
                stk__fp_add(h, &ds->fields[f], sizeof(ds->fields[f]));
            stk__fp_add_u64(h, hf->col[f].dims[0]);
        }
        stk__fp_add_u64(h, sf->size);
    }
    ds->max_record = 0;
    for (uint32_t f = 0; f < ds->n_fields; f++)
        ds->max_record += ds->field_max[f];
    ds->fingerprint = stk__fp_end(h);
fail:
    if (dapl >= 0)
        H5Pclose(dapl);
    quiet_end(q);
    return rc;
}

static void h5_describe(const stk_dataset *ds, uint64_t i, char *buf, size_t size)
{
    if (ds->n_files == 1 || i >= ds->count) {
        snprintf(buf, size, "%s row %" PRIu64, ds->files[0].path, i);
        return;
    }
    uint64_t local;
    size_t k = stk__dataset_file_of(ds, i, &local);
    snprintf(buf, size, "%s row %" PRIu64 " (global %" PRIu64 ")", ds->files[k].path, local, i);
}

/* Row i of a column through the library (under the source's mutex). */
static stk_status read_lib(const stk_dataset *ds, h5src *s, h5file *hf, uint32_t f, uint64_t local,
                           uint64_t i, void *dst, size_t cap, uint64_t *size, char *err,
                           size_t err_size)
{
    stk__h5col *c = &hf->col[f];
    hsize_t start[H5S_MAX_RANK] = {0}, count[H5S_MAX_RANK];
    stk_status rc = STK_OK;
    char m[160], where[STK_ERRMSG_SIZE];
    start[0] = local;
    count[0] = 1;
    for (int d = 1; d < c->rank; d++)
        count[d] = c->dims[d];
    pthread_mutex_lock(&s->lock);
    h5quiet q = quiet_begin();
    hvl_t v = {0, NULL};
    bool ok = H5Sselect_hyperslab(c->fspace, H5S_SELECT_SET, start, NULL, count, NULL) >= 0 &&
              H5Dread(c->dset, c->mtype, c->mspace, c->fspace, H5P_DEFAULT,
                      c->mode == COL_VLEN ? (void *)&v : dst) >= 0;
    if (!ok) {
        h5_describe(ds, i, where, sizeof(where));
        rc = stk__set_error(err, err_size, STK_EIO, "%s: dataset '%s': %s", where,
                            ds->fields[f].name, stk__h5_errmsg(m));
    } else if (c->mode == COL_VLEN) {
        if (v.len > cap) {
            h5_describe(ds, i, where, sizeof(where));
            rc = stk__set_error(err, err_size, STK_ELIMIT,
                                "%s: dataset '%s': %zu bytes, over its %zu-byte buffer", where,
                                ds->fields[f].name, v.len, cap);
        } else {
            if (v.len) /* an empty row has no buffer (v.p NULL): nothing to copy */
                memcpy(dst, v.p, v.len);
            *size = v.len;
        }
        H5Dvlen_reclaim(c->mtype, c->mspace, H5P_DEFAULT, &v);
    } else {
        *size = c->row_size;
    }
    quiet_end(q);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static stk_status h5_read(const stk_dataset *ds, stk__cursor *cur, uint64_t i, void *const dst[],
                          const size_t cap[], unsigned flags, stk__recinfo *info, char *err,
                          size_t err_size)
{
    (void)cur;
    (void)flags;
    h5src *s = ds->impl;
    uint64_t local = i;
    size_t k = s->n_fl == 1 ? 0 : stk__dataset_file_of(ds, i, &local);
    h5file *hf = s->fl[k];
    memset(info, 0, sizeof(*info));
    info->file = (uint32_t)k;
    info->local = local;
    info->offset = UINT64_MAX; /* one place per dataset */
    for (uint32_t f = 0; f < hf->n; f++) {
        stk__h5col *c = &hf->col[f];
        uint64_t size = 0;
        if (!dst[f]) { /* read in place (h5_field_open): its size where known without a read */
            size = c->voff ? c->vlen[local] : 0;
            info->field_size[f] = size;
            info->size += size;
            continue;
        }
        if (c->mode != COL_VLEN && c->row_size > cap[f]) {
            char where[STK_ERRMSG_SIZE];
            h5_describe(ds, i, where, sizeof(where));
            return stk__set_error(err, err_size, STK_ELIMIT, "%s: dataset '%s': over its buffer",
                                  where, ds->fields[f].name);
        }
        bool direct = c->mode == COL_OFFSET || c->voff;
        if (c->voff && c->vlen[local] > cap[f]) {
            char where[STK_ERRMSG_SIZE];
            h5_describe(ds, i, where, sizeof(where));
            return stk__set_error(err, err_size, STK_ELIMIT,
                                  "%s: dataset '%s': %u bytes, over its %zu-byte buffer", where,
                                  ds->fields[f].name, c->vlen[local], cap[f]);
        }
        if (direct) {
            size = c->voff ? c->vlen[local] : c->row_size;
            stk_status rc =
                stk__vfs_read(hf->f, c->voff ? c->voff[local] : c->offset + local * c->row_size,
                              dst[f], (size_t)size, err, err_size);
            if (rc < 0) {
                char where[STK_ERRMSG_SIZE];
                h5_describe(ds, i, where, sizeof(where));
                return stk__source_read_error(rc, where, ds->files[k].path, err, err_size);
            }
        } else {
            stk_status rc = read_lib(ds, s, hf, f, local, i, dst[f], cap[f], &size, err, err_size);
            if (rc < 0)
                return rc;
        }
        info->field_size[f] = size;
        info->size += size;
    }
    return STK_OK;
}

/* Field f of record i read in place (an audio crop's bytes): a row of a contiguous vlen-bytes
 * dataset is lent where it lies in the file (the header, then the window, as a folder's file); a
 * row the library reads (chunked or compressed, a heap not as expected) is read whole and lent
 * from memory (*bytes: its size). */
static stk_status h5_field_open(const stk_dataset *ds, uint64_t i, size_t f, stk__file **file,
                                stk__brange *r, uint64_t *bytes, char *err, size_t err_size)
{
    h5src *s = ds->impl;
    *bytes = 0;
    *file = NULL;
    if (i >= ds->count || f >= ds->n_fields || ds->fields[f].kind != STK_FIELD_BYTES)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "field %zu of record %" PRIu64 " cannot be read in place", f, i);
    uint64_t local = i;
    size_t k = s->n_fl == 1 ? 0 : stk__dataset_file_of(ds, i, &local);
    h5file *hf = s->fl[k];
    stk__h5col *c = &hf->col[f];
    if (c->voff) {
        *r = (stk__brange){c->voff[local], c->vlen[local]};
        return stk__vfs_borrow(hf->f, file, err, err_size);
    }
    size_t cap = (size_t)ds->field_max[f];
    uint8_t *buf = stk__malloc(cap ? cap : 1);
    if (!buf)
        return stk__set_error(err, err_size, STK_ENOMEM,
                              "out of memory for row %" PRIu64 " (%zu bytes)", i, cap);
    uint64_t size = 0;
    stk_status rc = read_lib(ds, s, hf, (uint32_t)f, local, i, buf, cap, &size, err, err_size);
    if (rc < 0) {
        stk__free(buf);
        return rc;
    }
    *bytes = size;
    *r = (stk__brange){0, size};
    return stk__vfs_memfile(buf, size, ds->files[k].path, file, err, err_size);
}

const stk__source_methods stk__src_hdf5 = {
    .name = "hdf5",
    .summary = "HDF5 files: row i of every dataset is record i",
    .probe = h5_probe,
    .open = h5_open,
    .close = h5_close,
    .read = h5_read,
    .describe = h5_describe,
    .field_open = h5_field_open,
};
