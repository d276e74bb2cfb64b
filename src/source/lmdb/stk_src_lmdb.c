/*
 * stk_src_lmdb.c: an LMDB environment as a record source. Record i is the i-th key of the main
 * (unnamed) database in LMDB's key order (bytewise: "10" < "2"); fields `__key__` (the key) and
 * `value` (the value), both bytes. Values are stored as the writer put them: pickled Python
 * objects (the common `pickle.dumps((jpeg_bytes, label))` layout) or Caffe `Datum` protobufs
 * cannot be taken apart here; stoker.pack_records converts them (docs/formats.md).
 *
 * The environment is opened once, read-only, with MDB_NOTLS (a read transaction belongs to a
 * cursor, not a thread), MDB_NORDAHEAD (random reads) and MDB_NOLOCK (no lock file: a read-only
 * directory works; so the environment must not be written while stoker reads it, which the key
 * index below assumes anyway). Open walks the keys once with a cursor and keeps them in one
 * arena with an offset array (8 bytes per key plus the key bytes: 16 MB per million 8-byte
 * keys), so record i's key is O(1) and its value one B-tree lookup. Each reader thread gets its
 * own read transaction through the source's cursor; the value is copied straight out of the
 * memory map into the caller's buffer (one memcpy, no intermediate copy).
 *
 * The map is read by LMDB itself (mmap), the one exception to "every byte through stk_vfs.h":
 * LMDB environments are local. liblmdb trusts its file (a zero page size divides by zero, a page
 * past the end is SIGBUS), so open first checks the file's structure through the byte source
 * (stk_lmdb_check.c).
 */
#include "source/stk_source.h"
#include "source/lmdb/stk_lmdb_check.h"

#include <lmdb.h>

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#define LMDB_MAGIC 0xBEEFC0DEu

typedef struct lmsrc {
    MDB_env *env;
    MDB_dbi dbi;
    uint8_t *keys;  /* every key, back to back, in order */
    uint64_t *koff; /* count + 1 offsets into keys */
} lmsrc;

/* A directory holding data.mdb, or a data.mdb file (name or magic at offset 16). */
static int lm_probe(const char *path, const stk__stat *st, const uint8_t *head, size_t n)
{
    if (st->is_dir) {
        char *p = stk__path_join(path, "data.mdb");
        if (!p)
            return -1;
        stk__stat s2;
        int r = stk__vfs_stat(p, &s2, NULL, 0) == STK_OK && s2.is_regular ? 2 : 0;
        stk__free(p);
        return r;
    }
    if (n >= 24 && (uint32_t)(head[16] | head[17] << 8 | head[18] << 16 |
                              (uint32_t)head[19] << 24) == LMDB_MAGIC)
        return 2;
    size_t len = strlen(path);
    return len >= 8 && strcmp(path + len - 8, "data.mdb") == 0 ? 2 : 0;
}

static void lm_close(stk_dataset *ds)
{
    lmsrc *s = ds->impl;
    if (!s)
        return;
    if (s->env)
        mdb_env_close(s->env);
    stk__free(s->keys);
    stk__free(s->koff);
    stk__free(s);
    ds->impl = NULL;
}

/* Walk the keys once: the arena, the offsets, the largest key and value. */
static stk_status build_index(stk_dataset *ds, lmsrc *s, MDB_txn *txn, const char *path, char *err,
                              size_t err_size)
{
    stk_status rc = STK_OK;
    MDB_stat ms;
    MDB_cursor *cur = NULL;
    int e = mdb_stat(txn, s->dbi, &ms);
    if (e)
        STK_FAIL_E(STK_EFORMAT, "%s: cannot read the database: %s", path, mdb_strerror(e));
    size_t cap = 4096, used = 0;
    s->koff = stk__calloc((size_t)ms.ms_entries + 1, sizeof(uint64_t));
    s->keys = stk__malloc(cap);
    if (!s->koff || !s->keys)
        STK_FAIL_E(STK_ENOMEM, "%s: out of memory for the index of %zu keys", path,
                   (size_t)ms.ms_entries);
    if ((e = mdb_cursor_open(txn, s->dbi, &cur)) != 0)
        STK_FAIL_E(STK_EFORMAT, "%s: %s", path, mdb_strerror(e));
    MDB_val k, v;
    uint64_t n = 0;
    for (e = mdb_cursor_get(cur, &k, &v, MDB_FIRST); e == 0;
         e = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (n == ms.ms_entries)
            STK_FAIL_E(STK_EFORMAT, "%s: more keys than the database says (%zu)", path,
                       (size_t)ms.ms_entries);
        if (used + k.mv_size > cap) {
            while (used + k.mv_size > cap)
                cap *= 2;
            uint8_t *nk = stk__realloc(s->keys, cap);
            if (!nk)
                STK_FAIL_E(STK_ENOMEM, "%s: out of memory for the index of keys", path);
            s->keys = nk;
        }
        memcpy(s->keys + used, k.mv_data, k.mv_size);
        used += k.mv_size;
        s->koff[++n] = used;
        ds->field_max[0] = STK_MAX(ds->field_max[0], k.mv_size);
        ds->field_max[1] = STK_MAX(ds->field_max[1], v.mv_size);
        ds->max_record = STK_MAX(ds->max_record, k.mv_size + v.mv_size);
        ds->files[0].data_size += k.mv_size + v.mv_size;
    }
    if (e != MDB_NOTFOUND)
        STK_FAIL_E(STK_EFORMAT, "%s: reading key %" PRIu64 ": %s", path, n, mdb_strerror(e));
    ds->count = n;
    uint8_t *fit = stk__realloc(s->keys, used ? used : 1); /* give back the doubling's slack */
    if (fit)
        s->keys = fit;
fail:
    if (cur)
        mdb_cursor_close(cur);
    return rc;
}

static stk_status lm_open(stk_dataset *ds, const char *const *paths, size_t n_paths, char *err,
                          size_t err_size)
{
    stk_status rc = STK_OK;
    MDB_txn *txn = NULL;
    const char *path = paths[0];
    char *file = NULL;
    if (n_paths != 1)
        STK_FAIL_E(STK_ENOTSUP, "%s and %zu more: an LMDB dataset is one environment", path,
                   n_paths - 1);
    lmsrc *s = stk__calloc(1, sizeof(*s));
    if (!s)
        STK_FAIL_E(STK_ENOMEM, "%s: out of memory", path);
    ds->impl = s;
    stk__stat st;
    STK_TRY(stk__vfs_stat(path, &st, err, err_size));
    file = st.is_dir ? stk__path_join(path, "data.mdb") : stk__strdup(path);
    if (!file)
        STK_FAIL_E(STK_ENOMEM, "%s: out of memory", path);
    stk__stat fst;
    if (st.is_dir && stk__vfs_stat(file, &fst, NULL, 0) != STK_OK)
        STK_FAIL_E(STK_EFORMAT, "%s: not an LMDB environment (no data.mdb in this directory)",
                   path);
    /* liblmdb trusts the file; check what it will read first (stk_lmdb_check.c) */
    STK_TRY(stk__lmdb_check(file, file, err, err_size));
    int e = mdb_env_create(&s->env);
    if (e)
        STK_FAIL_E(STK_ENOMEM, "%s: mdb_env_create: %s", path, mdb_strerror(e));
    unsigned fl = MDB_RDONLY | MDB_NOTLS | MDB_NORDAHEAD | MDB_NOLOCK;
    if ((e = mdb_env_open(s->env, path, fl | (st.is_dir ? 0 : MDB_NOSUBDIR), 0444)) != 0)
        STK_FAIL_E(e == ENOMEM ? STK_ENOMEM : STK_EFORMAT, "%s: not an LMDB environment (%s)", path,
                   mdb_strerror(e));
    if ((e = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn)) != 0 ||
        (e = mdb_dbi_open(txn, NULL, 0, &s->dbi)) != 0)
        STK_FAIL_E(STK_EFORMAT, "%s: cannot open the main database: %s", path, mdb_strerror(e));
    STK_TRY(stk__dataset_files_alloc(ds, 1, err, err_size));
    stk__srcfile *sf = &ds->files[0];
    sf->path = file;
    file = NULL;
    sf->size = st.is_dir ? fst.size : st.size;
    ds->n_fields = 2;
    stk_field key = {.name = "__key__", .kind = STK_FIELD_BYTES};
    stk_field val = {.name = "value", .kind = STK_FIELD_BYTES};
    ds->fields[0] = stk__field_canonical(&key);
    ds->fields[1] = stk__field_canonical(&val);
    STK_TRY(build_index(ds, s, txn, path, err, err_size));
    sf->count = ds->count;
    e = mdb_txn_commit(txn); /* makes the dbi handle usable by later transactions */
    txn = NULL;
    if (e)
        STK_FAIL_E(STK_EFORMAT, "%s: %s", path, mdb_strerror(e));
    stk__fphash fp, *h = &fp;
    stk__fp_begin(h);
    stk__fp_add(h, s->keys, (size_t)s->koff[ds->count]);
    stk__fp_add(h, s->koff, (size_t)(ds->count + 1) * sizeof(uint64_t));
    stk__fp_add_u64(h, ds->files[0].data_size);
    ds->fingerprint = stk__fp_end(h);
fail:
    if (txn)
        mdb_txn_abort(txn);
    stk__free(file);
    return rc;
}

static stk_status lm_cursor_open(const stk_dataset *ds, stk__cursor **out, char *err,
                                 size_t err_size)
{
    const lmsrc *s = ds->impl;
    MDB_txn *txn = NULL;
    int e = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
    if (e)
        return stk__set_error(err, err_size, e == ENOMEM ? STK_ENOMEM : STK_EIO,
                              "%s: cannot begin a read transaction: %s", ds->files[0].path,
                              mdb_strerror(e));
    *out = (stk__cursor *)txn;
    return STK_OK;
}

static void lm_cursor_close(const stk_dataset *ds, stk__cursor *cur)
{
    (void)ds;
    mdb_txn_abort((MDB_txn *)cur);
}

static void lm_describe(const stk_dataset *ds, uint64_t i, char *buf, size_t size)
{
    const lmsrc *s = ds->impl;
    char key[64];
    size_t n = 0;
    if (i < ds->count) {
        const uint8_t *k = s->keys + s->koff[i];
        size_t len = (size_t)(s->koff[i + 1] - s->koff[i]);
        for (size_t j = 0; j < len && n + 5 < sizeof(key); j++)
            n += (size_t)snprintf(key + n, sizeof(key) - n,
                                  k[j] >= 0x20 && k[j] < 0x7f && k[j] != '\'' ? "%c" : "\\x%02x",
                                  k[j]);
    }
    key[n] = '\0';
    snprintf(buf, size, "%s key '%s' (record %" PRIu64 ")", ds->files[0].path, key, i);
}

static stk_status lm_read(const stk_dataset *ds, stk__cursor *cur, uint64_t i, void *const dst[],
                          const size_t cap[], unsigned flags, stk__recinfo *info, char *err,
                          size_t err_size)
{
    (void)flags;
    const lmsrc *s = ds->impl;
    char where[STK_ERRMSG_SIZE];
    stk_status rc = STK_OK;
    MDB_txn *txn = (MDB_txn *)cur;
    if (!txn)
        STK_TRY(lm_cursor_open(ds, (stk__cursor **)&txn, err, err_size));
    memset(info, 0, sizeof(*info));
    info->local = i;
    info->offset = UINT64_MAX;
    MDB_val k = {(size_t)(s->koff[i + 1] - s->koff[i]), s->keys + s->koff[i]}, v;
    int e = mdb_get(txn, s->dbi, &k, &v);
    if (e) {
        lm_describe(ds, i, where, sizeof(where));
        STK_FAIL_E(e == MDB_NOTFOUND ? STK_EFORMAT : STK_EIO, "%s: %s%s", where, mdb_strerror(e),
                   e == MDB_NOTFOUND ? " (the environment changed since it was opened)" : "");
    }
    if (k.mv_size > cap[0] || v.mv_size > cap[1]) {
        lm_describe(ds, i, where, sizeof(where));
        STK_FAIL_E(STK_ELIMIT, "%s: %zu-byte value over its %zu-byte buffer", where, v.mv_size,
                   cap[1]);
    }
    memcpy(dst[0], k.mv_data, k.mv_size);
    memcpy(dst[1], v.mv_data, v.mv_size);
    info->field_size[0] = k.mv_size;
    info->field_size[1] = v.mv_size;
    info->size = k.mv_size + v.mv_size;
fail:
    if (!cur && txn)
        mdb_txn_abort(txn);
    return rc;
}

const stk__source_methods stk__src_lmdb = {
    .name = "lmdb",
    .summary = "an LMDB environment: one record per key, fields __key__ and value",
    .probe = lm_probe,
    .open = lm_open,
    .close = lm_close,
    .cursor_open = lm_cursor_open,
    .cursor_close = lm_cursor_close,
    .read = lm_read,
    .describe = lm_describe,
};
