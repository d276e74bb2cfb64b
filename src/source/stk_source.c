/*
 * stk_source.c: the seam every record source plugs into (stk_source.h), below the formats: what
 * a source uses to fill its dataset (its files, the record-to-file map, the fingerprint, read
 * errors), the cursors and read-ahead hints the loader reads through, and the public stk_dataset_*
 * accessors as thin wrappers over the source table. Opening (the registry and format detection)
 * is stk_registry.c, above the formats.
 */
#include "source/stk_source.h"
#include "io/stk_vfs_http.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <inttypes.h>
#include <string.h>

stk_status stk__source_read_error(stk_status rc, const char *where, const char *path, char *err,
                                  size_t err_size)
{
    if (!err || err_size == 0)
        return rc;
    char why[STK_ERRMSG_SIZE];
    size_t lp = strlen(path);
    bool named = strncmp(err, path, lp) == 0 && err[lp] == ':' && err[lp + 1] == ' ';
    snprintf(why, sizeof(why), "%s", named ? err + lp + 2 : err);
    return stk__set_error(err, err_size, rc, "%s: %s", where, why);
}

size_t stk__dataset_file_of(const stk_dataset *ds, uint64_t index, uint64_t *local)
{
    size_t lo = 0, hi = ds->n_files;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (ds->files[mid].first <= index)
            lo = mid;
        else
            hi = mid;
    }
    while (index - ds->files[lo].first >= ds->files[lo].count)
        lo++; /* only when a later shard starts at the same number (empty shards) */
    *local = index - ds->files[lo].first;
    return lo;
}

stk_status stk__dataset_files_alloc(stk_dataset *ds, size_t n, char *err, size_t err_size)
{
    ds->files = stk__calloc(n ? n : 1, sizeof(*ds->files));
    if (!ds->files)
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for %zu files", n);
    ds->n_files = n;
    return STK_OK;
}

void stk__dataset_readahead(const stk_dataset *ds, const uint64_t *idx, size_t n)
{
    if (!ds->m->extent)
        return;
    stk__brange r[256];
    stk__file *file_of[256];
    for (size_t at = 0; at < n; at += 256) {
        size_t m = 0, k = STK_MIN(n - at, (size_t)256);
        for (size_t j = 0; j < k; j++)
            if (idx[at + j] < ds->count && ds->m->extent(ds, idx[at + j], &file_of[m], &r[m]) &&
                file_of[m]->vfs->readahead)
                m++;
        /* one hint per file, its ranges gathered at the front */
        for (size_t a = 0; a < m;) {
            size_t b = a + 1;
            for (size_t j = a + 1; j < m; j++)
                if (file_of[j] == file_of[a]) {
                    stk__brange t = r[b];
                    stk__file *tf = file_of[b];
                    r[b] = r[j], file_of[b] = file_of[j];
                    r[j] = t, file_of[j] = tf;
                    b++;
                }
            stk__vfs_readahead(file_of[a], r + a, b - a);
            a = b;
        }
    }
}

stk_status stk__dataset_cursor_open(const stk_dataset *ds, stk__cursor **out, char *err,
                                    size_t err_size)
{
    *out = NULL;
    if (!ds->m->cursor_open)
        return STK_OK;
    const stk__vfs_opts *prev = stk__vfs_opts_use(&ds->vfs);
    stk_status rc = ds->m->cursor_open(ds, out, err, err_size);
    stk__vfs_opts_use(prev);
    return rc;
}

void stk__dataset_cursor_close(const stk_dataset *ds, stk__cursor *cur)
{
    if (cur && ds->m->cursor_close)
        ds->m->cursor_close(ds, cur);
}

stk_status stk__dataset_locate(const stk_dataset *ds, uint64_t i, stk__recinfo *info, char *err,
                               size_t err_size)
{
    void *dst[STK_MAX_FIELDS] = {0};
    size_t cap[STK_MAX_FIELDS];
    stk__cursor *cur = NULL;
    stk_status rc = STK_OK;
    for (uint32_t f = 0; f < ds->n_fields; f++) {
        cap[f] = (size_t)stk_dataset_field_max_size(ds, f);
        if (!(dst[f] = stk__malloc(cap[f] ? cap[f] : 1)))
            rc = stk__set_error(err, err_size, STK_ENOMEM, "out of memory");
    }
    if (rc == STK_OK)
        rc = stk__dataset_cursor_open(ds, &cur, err, err_size);
    if (rc == STK_OK)
        rc = stk__dataset_read(ds, cur, i, dst, cap, STK__READ_NO_VERIFY, info, err, err_size);
    stk__dataset_cursor_close(ds, cur);
    for (uint32_t f = 0; f < ds->n_fields; f++)
        stk__free(dst[f]);
    return rc;
}

/* ---- fingerprints ---- */

_Static_assert(sizeof(XXH3_state_t) <= sizeof(((stk__fphash *)0)->state),
               "stk__fphash too small for an XXH3 state");

void stk__fp_begin(stk__fphash *h)
{
    XXH3_64bits_reset((XXH3_state_t *)h->state);
}

void stk__fp_add(stk__fphash *h, const void *data, size_t size)
{
    if (size)
        XXH3_64bits_update((XXH3_state_t *)h->state, data, size);
}

void stk__fp_add_u64(stk__fphash *h, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i)); /* little-endian: the same value on every host */
    stk__fp_add(h, b, 8);
}

uint64_t stk__fp_end(stk__fphash *h)
{
    return XXH3_64bits_digest((XXH3_state_t *)h->state);
}

/* ---- the public dataset API ---- */

const char *stk_dataset_format(const stk_dataset *ds)
{
    return ds ? ds->m->name : "";
}

uint64_t stk_dataset_n_records(const stk_dataset *ds)
{
    return ds ? ds->count : 0;
}

size_t stk_dataset_n_fields(const stk_dataset *ds)
{
    return ds ? ds->n_fields : 0;
}

const stk_field *stk_dataset_field(const stk_dataset *ds, size_t i)
{
    return ds && i < ds->n_fields ? &ds->fields[i] : NULL;
}

int stk_dataset_find_field(const stk_dataset *ds, const char *name)
{
    for (uint32_t i = 0; ds && name && i < ds->n_fields; i++)
        if (strcmp(ds->fields[i].name, name) == 0)
            return (int)i;
    return -1;
}

uint64_t stk_dataset_field_max_size(const stk_dataset *ds, size_t i)
{
    if (!ds || i >= ds->n_fields)
        return 0;
    uint64_t fixed = stk__field_fixed_size(&ds->fields[i]);
    return fixed ? fixed : ds->field_max[i];
}

uint64_t stk_dataset_max_record_size(const stk_dataset *ds)
{
    return ds ? ds->max_record : 0;
}

size_t stk_dataset_n_shards(const stk_dataset *ds)
{
    return ds ? ds->n_files : 0;
}

stk_status stk_dataset_shard(const stk_dataset *ds, size_t i, stk_shard_info *out)
{
    if (!ds || !out || i >= ds->n_files)
        return STK_EINVAL;
    const stk__srcfile *f = &ds->files[i];
    stk_shard_info full;
    memset(&full, 0, sizeof(full));
    full.path = f->path;
    full.first_record = f->first;
    full.n_records = f->count;
    full.file_size = f->size;
    full.data_size = f->data_size;
    full.version = f->version;
    full.metadata = f->metadata ? f->metadata : "{}";
    return stk__out_store(out, &full, sizeof(full)) ? STK_OK : STK_EINVAL;
}

uint64_t stk_dataset_fingerprint(const stk_dataset *ds)
{
    return ds ? ds->fingerprint : 0;
}

stk_status stk_dataset_describe(const stk_dataset *ds, uint64_t index, char *buf, size_t size)
{
    if (!ds || !buf || size == 0)
        return STK_EINVAL;
    if (index >= ds->count) {
        snprintf(buf, size, "record %" PRIu64 " (out of range: %" PRIu64 " records)", index,
                 ds->count);
        return stk__set_last_error(STK_EINVAL, "%s", buf);
    }
    ds->m->describe(ds, index, buf, size);
    return STK_OK;
}

stk_status stk_dataset_read(const stk_dataset *ds, uint64_t index, void *buf, size_t buf_size,
                            stk_record *dst_rec)
{
    char err[STK_ERRMSG_SIZE];
    size_t err_size = sizeof(err);
    stk_status rc = STK_OK;
    stk__cursor *cur = NULL;
    uint8_t *tmp = NULL;
    stk_record full, *out = &full;
    stk_record_init(out);
    if (!ds || !dst_rec || (!buf && buf_size)) {
        rc = stk__set_error(err, err_size, STK_EINVAL, "stk_dataset_read: NULL argument");
        goto fail;
    }
    if (dst_rec->struct_size < STK__STRUCT_MIN) {
        rc = stk__set_error(err, err_size, STK_EINVAL,
                            "stk_dataset_read: the record's struct_size is not set "
                            "(stk_record_init)");
        goto fail;
    }
    if (index >= ds->count) {
        rc = stk__set_error(err, err_size, STK_EINVAL,
                            "record %" PRIu64 " out of range (dataset has %" PRIu64 " records)",
                            index, ds->count);
        goto fail;
    }
    /* Each field gets room for its largest value, then the fields are packed back to back. */
    size_t room = 0, cap[STK_MAX_FIELDS], off[STK_MAX_FIELDS];
    void *dst[STK_MAX_FIELDS];
    for (uint32_t f = 0; f < ds->n_fields; f++) {
        cap[f] = (size_t)stk_dataset_field_max_size(ds, f);
        off[f] = room;
        room += cap[f];
    }
    uint8_t *base = buf;
    if (room > buf_size) {
        tmp = stk__malloc(room ? room : 1);
        if (!tmp) {
            rc = stk__set_error(err, err_size, STK_ENOMEM, "out of memory reading record %" PRIu64,
                                index);
            goto fail;
        }
        base = tmp;
    }
    for (uint32_t f = 0; f < ds->n_fields; f++)
        dst[f] = base + off[f];
    STK_TRY(stk__dataset_cursor_open(ds, &cur, err, err_size));
    stk__recinfo info;
    unsigned flags =
        (ds->flags & STK_DATASET_NO_VERIFY) ? STK__READ_NO_VERIFY : STK__READ_VERIFY_ALL;
    STK_TRY(stk__dataset_read(ds, cur, index, dst, cap, flags, &info, err, err_size));
    if (info.size > buf_size) {
        char where[STK_ERRMSG_SIZE];
        ds->m->describe(ds, index, where, sizeof(where));
        rc = stk__set_error(err, err_size, STK_EINVAL,
                            "%s: record is %" PRIu64 " bytes, buffer only %zu", where, info.size,
                            buf_size);
        goto fail;
    }
    out->index = index;
    out->shard = info.file;
    out->local = info.local;
    out->size = (size_t)info.size;
    size_t at = 0;
    for (uint32_t f = 0; f < ds->n_fields; f++) { /* pack: fields only move towards the start */
        memmove((uint8_t *)buf + at, dst[f], (size_t)info.field_size[f]);
        out->field[f] = (const uint8_t *)buf + at;
        out->field_size[f] = (size_t)info.field_size[f];
        at += (size_t)info.field_size[f];
    }
    stk__out_store(dst_rec, &full, sizeof(full)); /* the caller's size */
    stk__dataset_cursor_close(ds, cur);
    stk__free(tmp);
    return STK_OK;
fail:
    stk__dataset_cursor_close(ds, cur);
    stk__free(tmp);
    stk__last_error_copy(rc, err);
    return rc;
}

int64_t stk_record_i64(const stk_record *rec, size_t f)
{
    if (!rec || f >= STK_MAX_FIELDS || rec->field_size[f] != 8 || !rec->field[f])
        return 0;
    int64_t v;
    uint64_t u = 0;
    for (int i = 7; i >= 0; i--)
        u = u << 8 | rec->field[f][i];
    memcpy(&v, &u, 8);
    return v;
}

float stk_record_f32(const stk_record *rec, size_t f)
{
    if (!rec || f >= STK_MAX_FIELDS || rec->field_size[f] != 4 || !rec->field[f])
        return 0.0f;
    uint32_t bits = 0;
    for (int i = 3; i >= 0; i--)
        bits = bits << 8 | rec->field[f][i];
    float v;
    memcpy(&v, &bits, 4);
    return v;
}

void stk__field_str(const stk_field *f, char *buf, size_t size)
{
    if (f->kind != STK_FIELD_ARRAY) {
        snprintf(buf, size, "%s",
                 f->kind == STK_FIELD_BYTES   ? "bytes"
                 : f->kind == STK_FIELD_INT64 ? "int64"
                                              : "float32");
        return;
    }
    int n = snprintf(buf, size, "%s [", stk_dtype_name(f->dtype));
    for (uint32_t d = 0; d < f->ndim && n > 0 && (size_t)n < size; d++)
        n += snprintf(buf + n, size - (size_t)n, "%s%" PRId64, d ? ", " : "", f->shape[d]);
    if (n > 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, "]");
}

/* Closing needs no format table: the dataset carries its methods. */
void stk_dataset_close(stk_dataset *ds)
{
    if (!ds)
        return;
    if (ds->m)
        ds->m->close(ds);
    for (size_t i = 0; i < ds->n_files; i++) {
        stk__free(ds->files[i].path);
        stk__free(ds->files[i].metadata);
    }
    stk__free(ds->files);
    stk__free(ds->cache_dir);
    stk__free(ds);
}
