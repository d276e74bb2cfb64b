/*
 * stk_src_wds.c: WebDataset tar shards as a record source ("wds"). A dataset is one or more
 * .tar files (a list, glob or brace range, or a directory of *.tar). Each sample is the group of
 * adjacent members sharing a key: the path up to the first dot of the last path component
 * (`a/x.seg.png` -> key `a/x`, extension `seg.png`, lowercased). Fields: `__key__` (bytes), then
 * one per extension, sorted by name; `cls`, `index` and `id` hold ASCII integers and are int64
 * fields, `npy`/`*.npy` members array fields (dtype and shape of the first sample's array,
 * checked at each read), everything else bytes. A bytes member a transform reads in place (an
 * audio crop, a video clip) is lent where it lies in the shard (wds_field_open), gunzipped whole
 * when it is a `.gz`. A member named `*.gz` is gunzipped at read
 * (zlib; its size from the gzip trailer, read during the scan) and its field named without the
 * `.gz`, as webdataset does (`json.gz` -> `json`). The schema is the union over all shards (every
 * header is scanned at open anyway).
 *
 * Random access: one scan of the tar headers per shard at open (stk_tar.c) builds the member
 * list (ustar, GNU 'L' long names, PAX 'x' path=/size=; 'g' global headers, directories, links
 * and members whose name starts with "__" are skipped), and stk_wds_group.c groups it into
 * samples. The member list is cached
 * (stk_tar_index.c) beside the shard as `<shard>.stkidx` when the shard is a local file and its
 * directory writable, validated against the shard's size, mtime and inode (and its own
 * checksum), and rebuilt when any differs. A read also checks the tar header just before each
 * member's data (checksum and size), so an index that no longer matches its shard is an error,
 * never wrong bytes.
 *
 * Refused at open, naming the shard, member and byte offset: a header with a bad checksum (not a
 * tar), a member running past the end of the file (truncated), a key whose files are not
 * adjacent, one key split across two shards, an extension twice in one sample, an extension that
 * cannot be a field name. At read (STK_EFORMAT, so on_error="skip" skips and counts it): a
 * sample missing a field other samples have, a non-integer `cls`/`index`/`id`.
 *
 * Not supported: members of 4 GiB or more, sparse members, a `.gz` member of several gzip
 * streams.
 */
#include "common/stk_endian.h"
#include "source/npy/stk_npy.h"
#include "source/stk_source.h"
#include "source/wds/stk_tar.h"
#include "source/wds/stk_wds_group.h"

#include <xxhash.h>

#include <inttypes.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#define TAR_BLOCK STK__TAR_BLOCK
#define MAX_INT_TEXT 64
#define MISSING UINT32_MAX

typedef struct wds_shard {
    stk__file *f;
    char *keys; /* the keys of its samples, back to back */
    uint64_t first, count;
    bool from_cache;
} wds_shard;

typedef struct wds_rec {
    uint64_t off;     /* byte offset of the sample's first header */
    uint32_t shard;   /* index into shards */
    uint32_t key_off; /* in the shard's keys */
    uint32_t key_len;
} wds_rec;

typedef struct wds_loc {
    uint32_t rel;  /* data offset - rec.off */
    uint32_t size; /* MISSING: the sample has no such member */
} wds_loc;

typedef struct wds {
    wds_shard *shards;
    size_t n_shards;
    wds_rec *recs;
    wds_loc *locs; /* count * (n_fields - 1): field f >= 1 of record i at [i * (n - 1) + f - 1] */
    bool is_int[STK_MAX_FIELDS];
    bool is_npy[STK_MAX_FIELDS]; /* an array field from .npy members */
    uint32_t *gz; /* NULL when no member is gzipped, else count * (n_fields - 1) gunzipped sizes
                     (STK__TAR_NOT_GZ: that member is not gzipped), laid out as locs */
} wds;

/* ---- probe ---- */

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Whether head can start a tar header: a non-empty name, NUL-padded (so a NUL is followed only by
 * NULs). Rejects .stk, JPEG, .npy and most other files without opening them again. */
static bool tar_name_prefix(const uint8_t *head, size_t n)
{
    if (head[0] == 0)
        return false;
    size_t i = 0;
    while (i < n && head[i])
        i++;
    for (; i < n; i++)
        if (head[i])
            return false;
    return true;
}

static const char *const wds_suffixes[] = {".tar", NULL};

static int wds_probe(const char *path, const stk__stat *st, const uint8_t *head, size_t n)
{
    if (st->is_dir) {
        return stk__paths_dir_has(path, wds_suffixes);
    }
    int by_name = ends_with(path, ".tar");
    if (n == 0 || st->size < TAR_BLOCK || !tar_name_prefix(head, n))
        return by_name;
    uint8_t h[TAR_BLOCK];
    stk__file *f = NULL;
    stk_status rc = stk__vfs_open(path, &f, NULL, 0);
    if (rc == STK_ENOMEM)
        return -1;
    bool ok = rc == STK_OK && stk__vfs_read(f, 0, h, TAR_BLOCK, NULL, 0) == STK_OK;
    stk__vfs_close(f);
    if (!ok || !stk__tar_is_ustar(h) || !stk__tar_checksum_ok(h))
        return by_name;
    if (h[156] == 'x' || h[156] == 'g' || h[156] == 'L')
        return 2;
    /* a WebDataset member: key.ext in the last path component */
    char name[101];
    memcpy(name, h, 100);
    name[100] = '\0';
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    const char *dot = strchr(base, '.');
    return dot && dot > base && dot[1] ? 2 : 1;
}

/* ---- open, read ---- */

static void wds_close(stk_dataset *ds)
{
    wds *w = ds->impl;
    if (!w)
        return;
    for (size_t s = 0; s < w->n_shards; s++) {
        stk__vfs_close(w->shards[s].f);
        stk__free(w->shards[s].keys);
    }
    stk__free(w->shards);
    stk__free(w->recs);
    stk__free(w->locs);
    stk__free(w->gz);
    stk__free(w);
    ds->impl = NULL;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool is_int_ext(const char *e)
{
    return strcmp(e, "cls") == 0 || strcmp(e, "index") == 0 || strcmp(e, "id") == 0;
}

/* "npy", "seg.npy": a NumPy array per sample */
static bool is_npy_ext(const char *e)
{
    size_t n = strlen(e);
    return strcmp(e, "npy") == 0 || (n > 4 && strcmp(e + n - 4, ".npy") == 0);
}

/* The array field a .npy member holds (its whole array; a 0-d array is a [1] array). */
static stk_status npy_field(const uint8_t *b, size_t n, const char *where, stk_field *fd,
                            uint64_t *data_offset, char *err, size_t err_size)
{
    stk__npy np;
    stk_status rc = stk__npy_parse(b, n, where, &np, err, err_size);
    if (rc < 0)
        return rc;
    if (np.nd > STK_MAX_DIMS)
        return stk__set_error(err, err_size, STK_ENOTSUP,
                              "%s: a %u-dimensional array (array fields have 1 to %d)", where,
                              np.nd, STK_MAX_DIMS);
    stk_field f = {0};
    memcpy(f.name, fd->name, sizeof(f.name));
    f.kind = STK_FIELD_ARRAY;
    f.dtype = np.dtype;
    f.ndim = np.nd ? np.nd : 1;
    for (uint32_t d = 0; d < f.ndim; d++)
        f.shape[d] = np.nd ? np.dims[d] : 1;
    char bad[160];
    if (!stk__field_valid(&f, bad, sizeof(bad)))
        return stk__set_error(err, err_size, STK_EINVAL, "%s: %s", where, bad);
    *fd = stk__field_canonical(&f);
    *data_offset = np.data_offset;
    if (stk__field_fixed_size(fd) != n - np.data_offset)
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "%s: %zu bytes of data where its header says %" PRIu64, where,
                              n - (size_t)np.data_offset, stk__field_fixed_size(fd));
    return STK_OK;
}

/* "shard.tar: member 'key.ext' at byte N" for errors about one member before records exist. */
static void member_where(char *buf, size_t size, const char *path, const char *key, size_t key_len,
                         const char *ext, bool gz, uint64_t data_off)
{
    snprintf(buf, size, "%s: member '%.*s.%s%s' at byte %" PRIu64, path, (int)STK_MIN(key_len, 200),
             key, ext, gz ? ".gz" : "", data_off - TAR_BLOCK);
}

/* The schema of .npy field f (extension id e): from the first sample that has one. */
static stk_status npy_schema(const wds *w, const stk__wds_builder *b, const stk__strlist *list,
                             size_t e, stk_field *fd, char *err, size_t err_size)
{
    for (size_t i = 0; i < b->n_recs; i++) {
        const stk__wds_tmprec *t = &b->recs[i];
        for (uint32_t k = 0; k < t->n; k++) {
            const stk__wds_tmpmem *m = &b->mems[t->first + k];
            if (m->ext != e)
                continue;
            char where[STK_ERRMSG_SIZE];
            member_where(where, sizeof(where), list->v[t->shard],
                         w->shards[t->shard].keys + t->key_off, t->key_len, fd->name,
                         m->gz_size != STK__TAR_NOT_GZ, m->data_off);
            uint8_t *bytes;
            size_t n;
            uint64_t data_offset;
            stk_status rc = stk__tar_member_bytes(w->shards[t->shard].f, m->data_off, m->size,
                                                  m->gz_size, where, &bytes, &n, err, err_size);
            if (rc < 0)
                return rc;
            rc = npy_field(bytes, n, where, fd, &data_offset, err, err_size);
            stk__free(bytes);
            return rc;
        }
    }
    return STK_OK; /* not reached: every extension comes from a member */
}

static stk_status wds_open(stk_dataset *ds, const char *const *paths, size_t n_paths, char *err,
                           size_t err_size)
{
    stk_status rc = STK_OK;
    stk__strlist list = {0};
    stk__wds_builder b = {0};
    stk__tar_members ml = {0};
    STK_TRY(stk__paths_files(paths, n_paths, wds_suffixes, ".tar shards", &list, err, err_size));
    if (list.n > UINT32_MAX)
        STK_FAIL_E(STK_ELIMIT, "%s: too many shards", paths[0]);
    wds *w = stk__calloc(1, sizeof(*w));
    if (!w)
        STK_FAIL_E(STK_ENOMEM, "out of memory");
    ds->impl = w;
    w->shards = stk__calloc(list.n, sizeof(*w->shards));
    if (!w->shards)
        STK_FAIL_E(STK_ENOMEM, "out of memory");
    STK_TRY(stk__dataset_files_alloc(ds, list.n, err, err_size));
    for (size_t s = 0; s < list.n; s++) {
        wds_shard *sh = &w->shards[s];
        w->n_shards = s + 1;
        STK_TRY(stk__vfs_open(list.v[s], &sh->f, err, err_size));
        STK_TRY(stk__tar_index(sh->f, &ml, &sh->from_cache, err, err_size));
        sh->first = b.n_recs;
        STK_TRY(stk__wds_group_shard(&b, (uint32_t)s, list.v[s], &ml, &sh->keys, &sh->count, err,
                                     err_size));
        stk__srcfile *sf = &ds->files[s];
        sf->path = stk__strdup(list.v[s]);
        if (!sf->path)
            STK_FAIL_E(STK_ENOMEM, "out of memory");
        sf->first = sh->first;
        sf->count = sh->count;
        sf->size = sh->f->size;
        char meta[96];
        snprintf(meta, sizeof(meta), "{\"index\": \"%s\", \"members\": %zu}",
                 sh->from_cache ? "cached" : "scanned", ml.n);
        sf->metadata = stk__strdup(meta);
        if (!sf->metadata)
            STK_FAIL_E(STK_ENOMEM, "out of memory");
        for (uint64_t r = sh->first; r < b.n_recs; r++)
            for (uint32_t k = 0; k < b.recs[r].n; k++)
                sf->data_size += b.mems[b.recs[r].first + k].size;
        stk__tar_members_free(&ml);
        /* one key split across two shards */
        for (size_t p = s; p-- > 0 && sh->count > 0;) {
            if (w->shards[p].count == 0)
                continue;
            const stk__wds_tmprec *last = &b.recs[w->shards[p].first + w->shards[p].count - 1];
            const stk__wds_tmprec *first = &b.recs[sh->first];
            if (last->key_len == first->key_len &&
                memcmp(w->shards[p].keys + last->key_off, sh->keys + first->key_off,
                       first->key_len) == 0)
                STK_FAIL_E(STK_EFORMAT,
                           "%s: sample '%.*s' at byte %" PRIu64
                           " continues the last sample of %s: its files are split across two "
                           "shards (a sample's files must be together in one shard)",
                           list.v[s], (int)STK_MIN(first->key_len, 200), sh->keys + first->key_off,
                           b.mems[first->first].data_off - TAR_BLOCK, list.v[p]);
            break;
        }
    }
    /* the schema: __key__, then the extensions sorted by name */
    const char *order[STK_MAX_FIELDS];
    for (size_t e = 0; e < b.ext.n; e++)
        order[e] = b.ext.name[e];
    qsort(order, b.ext.n, sizeof(order[0]), cmp_name);
    uint32_t field_of[STK_MAX_FIELDS];
    ds->n_fields = (uint32_t)b.ext.n + 1;
    memset(ds->fields, 0, sizeof(ds->fields));
    snprintf(ds->fields[0].name, STK_MAX_NAME, "__key__");
    ds->fields[0].kind = STK_FIELD_BYTES;
    for (size_t k = 0; k < b.ext.n; k++) {
        size_t e = (size_t)((const char(*)[STK_MAX_NAME])order[k] - b.ext.name);
        field_of[e] = (uint32_t)k + 1;
        stk_field *fd = &ds->fields[k + 1];
        memcpy(fd->name, order[k], STK_MAX_NAME);
        w->is_int[k + 1] = is_int_ext(order[k]);
        w->is_npy[k + 1] = is_npy_ext(order[k]);
        fd->kind = w->is_int[k + 1] ? STK_FIELD_INT64 : STK_FIELD_BYTES;
        *fd = stk__field_canonical(fd);
        if (w->is_npy[k + 1])
            STK_TRY(npy_schema(w, &b, &list, e, fd, err, err_size));
    }
    bool any_gz = false;
    for (size_t m = 0; m < b.n_mems && !any_gz; m++)
        any_gz = b.mems[m].gz_size != STK__TAR_NOT_GZ;
    size_t nf1 = b.ext.n;
    ds->count = b.n_recs;
    w->recs = stk__calloc(b.n_recs ? b.n_recs : 1, sizeof(*w->recs));
    w->locs = stk__calloc(b.n_recs && nf1 ? b.n_recs * nf1 : 1, sizeof(*w->locs));
    if (any_gz)
        w->gz = stk__malloc(b.n_recs && nf1 ? b.n_recs * nf1 * sizeof(*w->gz) : 1);
    if (!w->recs || !w->locs || (any_gz && !w->gz))
        STK_FAIL_E(STK_ENOMEM, "out of memory indexing %zu samples", b.n_recs);
    for (size_t f = 1; f < ds->n_fields; f++)
        ds->field_max[f] = w->is_int[f]   ? 8
                           : w->is_npy[f] ? stk__field_fixed_size(&ds->fields[f])
                                          : 0;
    for (size_t i = 0; i < b.n_recs; i++) {
        const stk__wds_tmprec *t = &b.recs[i];
        wds_rec *r = &w->recs[i];
        r->off = b.mems[t->first].data_off - TAR_BLOCK;
        r->shard = t->shard;
        r->key_off = t->key_off;
        r->key_len = t->key_len;
        wds_loc *loc = w->locs + i * nf1;
        for (size_t f = 0; f < nf1; f++)
            loc[f].size = MISSING;
        for (size_t f = 0; w->gz && f < nf1; f++)
            w->gz[i * nf1 + f] = STK__TAR_NOT_GZ;
        uint64_t total = t->key_len;
        for (uint32_t k = 0; k < t->n; k++) {
            const stk__wds_tmpmem *m = &b.mems[t->first + k];
            uint32_t f = field_of[m->ext];
            if (m->data_off - r->off >= UINT32_MAX)
                STK_FAIL_E(STK_ELIMIT, "%s: sample '%.*s' at byte %" PRIu64 " spans 4 GiB or more",
                           list.v[t->shard], (int)STK_MIN(t->key_len, 200),
                           w->shards[t->shard].keys + t->key_off, r->off);
            loc[f - 1].rel = (uint32_t)(m->data_off - r->off);
            loc[f - 1].size = m->size;
            if (w->gz)
                w->gz[i * nf1 + f - 1] = m->gz_size;
            uint64_t fsz = w->is_int[f]                    ? 8
                           : w->is_npy[f]                  ? ds->field_max[f]
                           : m->gz_size != STK__TAR_NOT_GZ ? m->gz_size
                                                           : m->size;
            ds->field_max[f] = STK_MAX(ds->field_max[f], fsz);
            total += fsz;
        }
        ds->field_max[0] = STK_MAX(ds->field_max[0], t->key_len);
        ds->max_record = STK_MAX(ds->max_record, total);
    }
    stk__fphash fp, *h = &fp;
    stk__fp_begin(h);
    for (size_t f = 0; f < ds->n_fields; f++)
        stk__fp_add(h, ds->fields[f].name, sizeof(ds->fields[f].name));
    for (size_t s = 0; s < w->n_shards; s++) {
        const wds_shard *sh = &w->shards[s];
        stk__fp_add_u64(h, sh->f->size);
        stk__fp_add_u64(h, sh->count);
        if (sh->count) {
            const wds_rec *a = &w->recs[sh->first], *z = &w->recs[sh->first + sh->count - 1];
            stk__fp_add(h, sh->keys + a->key_off, a->key_len);
            stk__fp_add(h, sh->keys + z->key_off, z->key_len);
        }
    }
    stk__fp_add_u64(h, ds->count);
    ds->fingerprint = stk__fp_end(h);
fail:
    stk__tar_members_free(&ml);
    stk__free(b.recs);
    stk__free(b.mems);
    stk__strlist_free(&list);
#ifdef __GLIBC__
    if (b.n_mems > 100000)
        malloc_trim(0); /* hand the build's temporaries (~4x the index) back to the system */
#endif
    return rc;
}

static void wds_describe(const stk_dataset *ds, uint64_t i, char *buf, size_t size)
{
    const wds *w = ds->impl;
    if (i >= ds->count) {
        snprintf(buf, size, "%s record %" PRIu64 " (out of range)", ds->files[0].path, i);
        return;
    }
    const wds_rec *r = &w->recs[i];
    const wds_shard *sh = &w->shards[r->shard];
    snprintf(buf, size,
             "%s sample '%.*s' (record %" PRIu64 " of the shard, global %" PRIu64
             ") at byte %" PRIu64,
             ds->files[r->shard].path, (int)STK_MIN(r->key_len, 200), sh->keys + r->key_off,
             i - sh->first, i, r->off);
}

/* ASCII integer (spaces around allowed) -> int64; false when it is not one. */
static bool parse_int(const char *t, size_t n, int64_t *out)
{
    size_t i = 0;
    while (i < n && (t[i] == ' ' || t[i] == '\n' || t[i] == '\r' || t[i] == '\t'))
        i++;
    while (n > i && (t[n - 1] == ' ' || t[n - 1] == '\n' || t[n - 1] == '\r' || t[n - 1] == '\t' ||
                     t[n - 1] == '\0'))
        n--;
    bool neg = i < n && t[i] == '-';
    if (i < n && (t[i] == '-' || t[i] == '+'))
        i++;
    if (i == n)
        return false;
    uint64_t v = 0;
    for (; i < n; i++) {
        if (t[i] < '0' || t[i] > '9' || v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(t[i] - '0');
    }
    if (v > (uint64_t)INT64_MAX + neg)
        return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

/* The tar header just before field f's data must still describe it (else the shard changed). */
static stk_status check_header(const stk_dataset *ds, uint64_t i, uint32_t f, const uint8_t *hdr,
                               uint64_t hdr_off, uint32_t size, char *err, size_t err_size)
{
    uint64_t hsize;
    if (stk__tar_checksum_ok(hdr) && stk__tar_number(hdr + 124, 12, &hsize) && hsize == size)
        return STK_OK;
    char where[STK_ERRMSG_SIZE];
    wds_describe(ds, i, where, sizeof(where));
    return stk__set_error(err, err_size, STK_EFORMAT,
                          "%s: the tar header of field '%s' at byte %" PRIu64
                          " does not match the index: the shard changed after it was indexed "
                          "(reopen the dataset)",
                          where, ds->fields[f].name, hdr_off);
}

/* "x.tar sample 'k' (...) at byte N: field 'npy' (member 'k.npy.gz' at byte M)" */
static void field_where(const stk_dataset *ds, uint64_t i, uint32_t f, bool gz, char *buf,
                        size_t size)
{
    const wds *w = ds->impl;
    const wds_rec *r = &w->recs[i];
    const char *key = w->shards[r->shard].keys + r->key_off;
    wds_describe(ds, i, buf, size);
    size_t n = strlen(buf);
    snprintf(buf + n, size - n, ": field '%s' (member '%.*s.%s%s' at byte %" PRIu64 ")",
             ds->fields[f].name, (int)STK_MIN(r->key_len, 200), key, ds->fields[f].name,
             gz ? ".gz" : "", r->off + w->locs[i * (ds->n_fields - 1) + f - 1].rel - TAR_BLOCK);
}

/* Field f of record i through a buffer: a gzipped member gunzipped, a .npy member's header
 * checked against the schema (dtype and shape of the first sample's). */
static stk_status read_buffered(const stk_dataset *ds, uint64_t i, uint32_t f, uint32_t gz,
                                void *dst, size_t cap, stk__recinfo *info, char *err,
                                size_t err_size)
{
    const wds *w = ds->impl;
    const wds_rec *r = &w->recs[i];
    const wds_loc *l = &w->locs[i * (ds->n_fields - 1) + f - 1];
    char where[STK_ERRMSG_SIZE];
    uint8_t *b = NULL;
    size_t n = 0;
    uint64_t size = 0;
    field_where(ds, i, f, gz != STK__TAR_NOT_GZ, where, sizeof(where));
    stk_status rc = stk__tar_member_bytes(w->shards[r->shard].f, r->off + l->rel, l->size, gz,
                                          where, &b, &n, err, err_size);
    if (rc < 0)
        return rc;
    if (w->is_npy[f]) {
        stk_field got;
        uint64_t doff = 0;
        memcpy(got.name, ds->fields[f].name, sizeof(got.name));
        STK_TRY(npy_field(b, n, where, &got, &doff, err, err_size));
        if (got.dtype != ds->fields[f].dtype || got.ndim != ds->fields[f].ndim ||
            memcmp(got.shape, ds->fields[f].shape, got.ndim * sizeof(got.shape[0])) != 0) {
            char a[96], want[96];
            stk__field_str(&got, a, sizeof(a));
            stk__field_str(&ds->fields[f], want, sizeof(want));
            STK_FAIL_E(STK_EFORMAT,
                       "%s: a %s array where the dataset's field is %s (the first sample's; "
                       "every sample's .npy must have one dtype and shape)",
                       where, a, want);
        }
        size = n - doff;
        if (size > cap)
            STK_FAIL_E(STK_ELIMIT, "%s: over its buffer", where);
        memcpy(dst, b + doff, (size_t)size);
    } else if (w->is_int[f]) {
        int64_t v;
        if (cap < 8)
            STK_FAIL_E(STK_ELIMIT, "%s: over its buffer", where);
        if (n > MAX_INT_TEXT || !parse_int((const char *)b, n, &v))
            STK_FAIL_E(STK_EFORMAT, "%s: not an ASCII integer ('%.*s')", where,
                       (int)STK_MIN(n, MAX_INT_TEXT), (const char *)b);
        stk__st64(dst, (uint64_t)v);
        size = 8;
    } else {
        if (n > cap)
            STK_FAIL_E(STK_ELIMIT, "%s: %zu bytes gunzipped, over its buffer", where, n);
        memcpy(dst, b, n);
        size = n;
    }
    info->field_size[f] = size;
    info->size += size;
fail:
    stk__free(b);
    return rc;
}

/* STK_EFORMAT: sample i lacks field f's member. */
static stk_status missing_member(const stk_dataset *ds, uint64_t i, uint32_t f, char *err,
                                 size_t err_size)
{
    char where[STK_ERRMSG_SIZE];
    wds_describe(ds, i, where, sizeof(where));
    return stk__set_error(err, err_size, STK_EFORMAT, "%s: no '%s' member (other samples have one)",
                          where, ds->fields[f].name);
}

#define READ_GAPS 8192 /* bytes of headers and padding one read may skip over */
#define READ_PIECES (STK_MAX_FIELDS + 1)

/* Record i: the members' data go straight to dst (ints through text); the headers and padding
 * between them to a stack buffer, so a sample of adjacent members is one read. */
static stk_status wds_read(const stk_dataset *ds, stk__cursor *cur, uint64_t i, void *const dst[],
                           const size_t cap[], unsigned flags, stk__recinfo *info, char *err,
                           size_t err_size)
{
    (void)cur;
    (void)flags;
    const wds *w = ds->impl;
    const wds_rec *r = &w->recs[i];
    const wds_shard *sh = &w->shards[r->shard];
    const wds_loc *loc = w->locs + i * (ds->n_fields - 1);
    char where[STK_ERRMSG_SIZE];
    memset(info, 0, sizeof(*info));
    info->file = r->shard;
    info->local = i - sh->first;
    info->offset = r->off;
    if (r->key_len > cap[0]) {
        wds_describe(ds, i, where, sizeof(where));
        return stk__set_error(err, err_size, STK_ELIMIT, "%s: __key__ over its buffer", where);
    }
    memcpy(dst[0], sh->keys + r->key_off, r->key_len);
    info->field_size[0] = r->key_len;
    info->size = r->key_len;
    /* the fields in file order */
    uint32_t order[STK_MAX_FIELDS];
    uint32_t np = 0;
    for (uint32_t f = 1; f < ds->n_fields; f++) {
        const wds_loc *l = &loc[f - 1];
        bool as_int = w->is_int[f];
        if (l->size == MISSING)
            return missing_member(ds, i, f, err, err_size);
        uint32_t gz = w->gz ? w->gz[i * (ds->n_fields - 1) + f - 1] : STK__TAR_NOT_GZ;
        if (!dst[f]) { /* read in place (wds_field_open): its size only */
            info->field_size[f] = gz != STK__TAR_NOT_GZ ? gz : l->size;
            info->size += info->field_size[f];
            continue;
        }
        if (w->is_npy[f] || gz != STK__TAR_NOT_GZ) { /* through a buffer, on its own */
            stk_status rc = read_buffered(ds, i, f, gz, dst[f], cap[f], info, err, err_size);
            if (rc < 0)
                return rc;
            continue;
        }
        if (as_int ? l->size > MAX_INT_TEXT || cap[f] < 8 : l->size > cap[f]) {
            bool text = as_int && cap[f] >= 8;
            wds_describe(ds, i, where, sizeof(where));
            return stk__set_error(err, err_size, text ? STK_EFORMAT : STK_ELIMIT,
                                  "%s: field '%s' (%" PRIu32 " bytes) %s", where,
                                  ds->fields[f].name, l->size,
                                  text ? "is too long for an ASCII integer" : "is over its buffer");
        }
        uint32_t k = np++;
        while (k > 0 && loc[order[k - 1] - 1].rel > l->rel) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = f;
    }
    uint8_t gaps[READ_GAPS];
    char text[STK_MAX_FIELDS][MAX_INT_TEXT];
    for (uint32_t a = 0; a < np;) {
        /* one read from the header of order[a] over as many following members as fit */
        stk__iov iov[READ_PIECES];
        const uint8_t *hdr[STK_MAX_FIELDS];
        int n = 0;
        size_t used = 0;
        uint64_t start = r->off + loc[order[a] - 1].rel - TAR_BLOCK, pos = start;
        uint32_t z = a;
        for (; z < np && n + 2 <= READ_PIECES; z++) {
            uint32_t f = order[z];
            uint64_t data_off = r->off + loc[f - 1].rel;
            uint64_t gap = data_off - pos;
            if (gap < TAR_BLOCK || gap > sizeof(gaps) - used)
                break; /* a long PAX header or a skipped member in between: a new read */
            iov[n++] = (stk__iov){gaps + used, (size_t)gap};
            hdr[z] = gaps + used + gap - TAR_BLOCK;
            used += (size_t)gap;
            iov[n++] = (stk__iov){w->is_int[f] ? (void *)text[f] : dst[f], loc[f - 1].size};
            pos = data_off + loc[f - 1].size;
        }
        stk_status rc = sh->f->vfs->read(sh->f, start, iov, n, err, err_size);
        if (rc < 0) {
            wds_describe(ds, i, where, sizeof(where));
            return stk__source_read_error(rc, where, sh->f->path, err, err_size);
        }
        for (uint32_t k = a; k < z; k++) {
            uint32_t f = order[k];
            const wds_loc *l = &loc[f - 1];
            uint64_t data_off = r->off + l->rel;
            rc = check_header(ds, i, f, hdr[k], data_off - TAR_BLOCK, l->size, err, err_size);
            if (rc < 0)
                return rc;
            int64_t v;
            if (w->is_int[f] && !parse_int(text[f], l->size, &v)) {
                wds_describe(ds, i, where, sizeof(where));
                return stk__set_error(err, err_size, STK_EFORMAT,
                                      "%s: field '%s' at byte %" PRIu64
                                      " is not an ASCII integer ('%.*s')",
                                      where, ds->fields[f].name, data_off, (int)l->size, text[f]);
            }
            if (w->is_int[f])
                stk__st64(dst[f], (uint64_t)v);
            info->field_size[f] = w->is_int[f] ? 8 : l->size;
            info->size += info->field_size[f];
        }
        a = z;
    }
    return STK_OK;
}

/* Sample i's bytes for read-ahead of remote shards: from its first member's header to the end of
 * its last member, the range wds_read reads in one piece when nothing lies between its members
 * (the usual shard: the read-ahead range is then released as soon as it was read). */
static bool wds_extent(const stk_dataset *ds, uint64_t i, stk__file **f, stk__brange *r)
{
    const wds *w = ds->impl;
    const wds_rec *rec = &w->recs[i];
    const wds_loc *loc = w->locs + i * (ds->n_fields - 1);
    uint64_t start = UINT64_MAX, end = 0;
    for (uint32_t k = 1; k < ds->n_fields; k++)
        if (loc[k - 1].size != MISSING) {
            start = STK_MIN(start, rec->off + loc[k - 1].rel - TAR_BLOCK);
            end = STK_MAX(end, rec->off + loc[k - 1].rel + loc[k - 1].size);
        }
    *f = w->shards[rec->shard].f;
    *r = (stk__brange){start, end - start};
    return end > start;
}

/* Field f of record i read in place: the member's bytes where they lie in the shard (its tar
 * header checked first, as a read checks it), lent; a gzipped member gunzipped whole, in memory. */
static stk_status wds_field_open(const stk_dataset *ds, uint64_t i, size_t f, stk__file **file,
                                 stk__brange *r, uint64_t *bytes, char *err, size_t err_size)
{
    *bytes = 0;
    const wds *w = ds->impl;
    char where[STK_ERRMSG_SIZE];
    *file = NULL;
    if (i >= ds->count || f == 0 || f >= ds->n_fields || w->is_int[f] || w->is_npy[f])
        return stk__set_error(err, err_size, STK_EINVAL,
                              "field %zu of record %" PRIu64 " cannot be read in place", f, i);
    const wds_rec *rec = &w->recs[i];
    const wds_loc *l = &w->locs[i * (ds->n_fields - 1) + f - 1];
    stk__file *sf = w->shards[rec->shard].f;
    if (l->size == MISSING)
        return missing_member(ds, i, (uint32_t)f, err, err_size);
    uint32_t gz = w->gz ? w->gz[i * (ds->n_fields - 1) + f - 1] : STK__TAR_NOT_GZ;
    uint64_t data_off = rec->off + l->rel;
    if (gz != STK__TAR_NOT_GZ) {
        uint8_t *b = NULL;
        size_t n = 0;
        field_where(ds, i, (uint32_t)f, true, where, sizeof(where));
        stk_status rc =
            stk__tar_member_bytes(sf, data_off, l->size, gz, where, &b, &n, err, err_size);
        if (rc < 0)
            return rc;
        *bytes = l->size;
        *r = (stk__brange){0, n};
        return stk__vfs_memfile_of(b, n, sf, data_off, file, err, err_size);
    }
    uint8_t hdr[TAR_BLOCK];
    stk_status rc = stk__vfs_read(sf, data_off - TAR_BLOCK, hdr, TAR_BLOCK, err, err_size);
    if (rc < 0) {
        wds_describe(ds, i, where, sizeof(where));
        return stk__source_read_error(rc, where, sf->path, err, err_size);
    }
    *bytes = TAR_BLOCK;
    STK_TRY_RET(
        check_header(ds, i, (uint32_t)f, hdr, data_off - TAR_BLOCK, l->size, err, err_size));
    *r = (stk__brange){data_off, l->size};
    return stk__vfs_borrow(sf, file, err, err_size);
}

const stk__source_methods stk__src_wds = {
    .name = "wds",
    .summary = "WebDataset .tar shards, one sample per key, one field per extension",
    .probe = wds_probe,
    .open = wds_open,
    .close = wds_close,
    .read = wds_read,
    .describe = wds_describe,
    .extent = wds_extent,
    .field_open = wds_field_open,
};
