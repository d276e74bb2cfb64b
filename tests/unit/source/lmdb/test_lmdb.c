/*
 * test_lmdb.c: the LMDB source (src/source/lmdb/stk_src_lmdb.c) from C, on environments this file
 * writes with liblmdb: detection, count, schema (__key__, value), every record in LMDB's key order
 * (bytewise), values of every size, reads from several cursors, describe; and the bad inputs: a
 * directory that is not an environment, a data.mdb that is not LMDB or is truncated, an empty
 * environment, two environments at once.
 */
#include "source/stk_source.h"
#include "stk_internal.h"
#include "t.h"
#include "data/fixtures.h"

#include <lmdb.h>

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define N_KEYS 50

/* Key i: "k<i>" without padding, so that LMDB's order is not the numeric one. */
static size_t key_of(int i, char *buf)
{
    return (size_t)sprintf(buf, "k%d", i);
}

/* Value i: i * 97 bytes (the first one empty), byte k = (i + k) & 255. */
static size_t value_of(int i, uint8_t *buf)
{
    size_t n = (size_t)i * 97;
    for (size_t k = 0; k < n; k++)
        buf[k] = (uint8_t)(i + k);
    return n;
}

/* An environment in dir with keys 0..n-1. */
static int write_env(const char *dir, int n)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    static uint8_t val[N_KEYS * 97];
    T_EQ(mdb_env_create(&env), 0);
    T_EQ(mdb_env_set_mapsize(env, 16u << 20), 0);
    T_EQ(mdb_env_open(env, dir, 0, 0644), 0);
    T_EQ(mdb_txn_begin(env, NULL, 0, &txn), 0);
    T_EQ(mdb_dbi_open(txn, NULL, 0, &dbi), 0);
    for (int i = 0; i < n; i++) {
        char k[16];
        MDB_val kv = {key_of(i, k), k}, vv = {value_of(i, val), val};
        T_EQ(mdb_put(txn, dbi, &kv, &vv, 0), 0);
    }
    T_EQ(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
    return 0;
}

static int cmp_keys(const void *a, const void *b)
{
    char ka[16], kb[16];
    size_t la = key_of(*(const int *)a, ka), lb = key_of(*(const int *)b, kb);
    int c = memcmp(ka, kb, la < lb ? la : lb);
    return c ? c : (la > lb) - (la < lb);
}

static int open_as(const char *path, const char *format, stk_dataset **ds)
{
    stk_dataset_opts o;
    stk_dataset_opts_init(&o);
    const char *paths[] = {path};
    o.paths = paths;
    o.n_paths = 1;
    o.format = format;
    return stk_dataset_open_v2(&o, ds);
}

static int test_read_in_key_order(void)
{
    const char *dir = fx_tmpdir("lmdb");
    T_CHECK(dir && write_env(dir, N_KEYS) == 0);
    stk_dataset *ds;
    T_OK(open_as(dir, NULL, &ds)); /* detected: a directory holding data.mdb */
    T_CHECK(strcmp(stk_dataset_format(ds), "lmdb") == 0);
    T_EQ(stk_dataset_n_records(ds), N_KEYS);
    T_EQ(stk_dataset_n_fields(ds), 2);
    T_CHECK(strcmp(stk_dataset_field(ds, 0)->name, "__key__") == 0);
    T_CHECK(strcmp(stk_dataset_field(ds, 1)->name, "value") == 0);
    T_EQ(stk_dataset_field(ds, 0)->kind, STK_FIELD_BYTES);
    T_EQ(stk_dataset_field(ds, 1)->kind, STK_FIELD_BYTES);
    T_EQ(stk_dataset_field_max_size(ds, 1), (N_KEYS - 1) * 97);
    int order[N_KEYS];
    for (int i = 0; i < N_KEYS; i++)
        order[i] = i;
    qsort(order, N_KEYS, sizeof(order[0]), cmp_keys); /* "k0" < "k1" < "k10" < ... < "k2" */
    T_EQ(order[2], 10);
    static uint8_t buf[N_KEYS * 97 + 64], want[N_KEYS * 97];
    for (int r = 0; r < N_KEYS; r++) {
        stk_record rec;
        stk_record_init(&rec);
        char k[16];
        T_OK(stk_dataset_read(ds, (uint64_t)r, buf, sizeof(buf), &rec));
        size_t kl = key_of(order[r], k), vl = value_of(order[r], want);
        T_CHECKF(rec.field_size[0] == kl && memcmp(rec.field[0], k, kl) == 0, "record %d", r);
        T_CHECKF(rec.field_size[1] == vl && memcmp(rec.field[1], want, vl) == 0, "record %d", r);
    }
    /* two cursors (one read transaction each) reading interleaved */
    stk__cursor *c1, *c2;
    char err[STK_ERRMSG_SIZE];
    T_OK(stk__dataset_cursor_open(ds, &c1, err, sizeof(err)));
    T_OK(stk__dataset_cursor_open(ds, &c2, err, sizeof(err)));
    for (int r = N_KEYS - 1; r >= 0; r--) {
        uint8_t kb[16], vb[N_KEYS * 97];
        void *const dst[] = {kb, vb};
        const size_t cap[] = {sizeof(kb), sizeof(vb)};
        stk__recinfo info;
        T_OK(stk__dataset_read(ds, r % 2 ? c1 : c2, (uint64_t)r, dst, cap, 0, &info, err,
                               sizeof(err)));
        T_EQ(info.field_size[1], value_of(order[r], want));
        T_CHECK(memcmp(vb, want, (size_t)info.field_size[1]) == 0);
    }
    stk__dataset_cursor_close(ds, c1);
    stk__dataset_cursor_close(ds, c2);
    /* a value over its buffer is an error naming the record's key */
    uint8_t kb[16], small[8];
    void *const dst[] = {kb, small};
    const size_t cap[] = {sizeof(kb), sizeof(small)};
    stk__recinfo info;
    T_EQ(stk__dataset_read(ds, NULL, (uint64_t)N_KEYS - 1, dst, cap, 0, &info, err, sizeof(err)),
         STK_ELIMIT);
    T_CHECKF(strstr(err, "key 'k9' (record 49)") && strstr(err, "over its 8-byte buffer"), "%s",
             err);
    char where[512];
    T_OK(stk_dataset_describe(ds, 3, where, sizeof(where)));
    T_CHECKF(strstr(where, dir) != NULL, "%s", where);
    stk_dataset_close(ds);
    /* the data.mdb file itself is the same environment */
    char mdb[256];
    snprintf(mdb, sizeof(mdb), "%s/data.mdb", dir);
    T_OK(open_as(mdb, NULL, &ds));
    T_EQ(stk_dataset_n_records(ds), N_KEYS);
    stk_dataset_close(ds);
    fx_rmtree(dir);
    return 0;
}

/* Bytes of a file, to write a truncated or foreign data.mdb. */
static int put_bytes(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    T_CHECK(f && fwrite(b, 1, n, f) == n);
    T_CHECK(fclose(f) == 0);
    return 0;
}

static int expect_fail(const char *path, const char *format, int code, const char *want)
{
    stk_dataset *ds = (stk_dataset *)1;
    int rc = open_as(path, format, &ds);
    T_CHECKF(rc == code, "%s: got %d (%s), want %d", path, rc, stk_last_errmsg(), code);
    T_CHECK(ds == NULL);
    T_CHECKF(strstr(stk_last_errmsg(), want), "'%s' lacks '%s'", stk_last_errmsg(), want);
    return 0;
}

static int test_bad_environments(void)
{
    const char *tmp = fx_tmpdir("lmdb");
    T_CHECK(tmp);
    char root[128], env[160], mdb[200], empty[160], other[160], junk[200];
    snprintf(root, sizeof(root), "%s", tmp);
    /* a directory that is not an environment */
    T_CHECK(expect_fail(root, "lmdb", STK_EFORMAT, "not an LMDB environment (no data.mdb") == 0);
    /* a real environment, then its data.mdb truncated inside its first pages */
    snprintf(env, sizeof(env), "%s/env", root);
    snprintf(mdb, sizeof(mdb), "%s/data.mdb", env);
    T_CHECK(mkdir(env, 0755) == 0 && write_env(env, N_KEYS) == 0);
    size_t n;
    uint8_t *b = fx_read_file(mdb, &n);
    T_CHECK(b && n > 8192);
    T_CHECK(put_bytes(mdb, b, 6000) == 0);
    free(b);
    T_CHECK(expect_fail(env, NULL, STK_EFORMAT, "truncated LMDB environment (6000 bytes") == 0);
    T_CHECK(expect_fail(mdb, NULL, STK_EFORMAT, "data.mdb: truncated LMDB environment") == 0);
    /* a data.mdb that is not LMDB at all */
    snprintf(other, sizeof(other), "%s/other", root);
    snprintf(junk, sizeof(junk), "%s/data.mdb", other);
    T_CHECK(mkdir(other, 0755) == 0 && put_bytes(junk, "not an lmdb file at all, no", 27) == 0);
    T_CHECK(expect_fail(other, "lmdb", STK_EFORMAT, "not an LMDB environment") == 0);
    /* an environment with no keys: an empty dataset */
    snprintf(empty, sizeof(empty), "%s/empty", root);
    T_CHECK(mkdir(empty, 0755) == 0 && write_env(empty, 0) == 0);
    T_CHECK(expect_fail(empty, NULL, STK_EINVAL, "dataset is empty (0 records)") == 0);
    /* two environments are not one dataset */
    char e2[160];
    snprintf(e2, sizeof(e2), "%s/env2", root);
    T_CHECK(mkdir(e2, 0755) == 0 && write_env(e2, 3) == 0);
    stk_dataset *ds;
    stk_dataset_opts o;
    stk_dataset_opts_init(&o);
    const char *two[] = {e2, e2};
    o.paths = two;
    o.n_paths = 2;
    o.format = "lmdb";
    ds = (stk_dataset *)1;
    T_EQ(stk_dataset_open_v2(&o, &ds), STK_ENOTSUP);
    T_CHECKF(strstr(stk_last_errmsg(), "an LMDB dataset is one environment"), "%s",
             stk_last_errmsg());
    fx_rmtree(root);
    return 0;
}

T_MAIN(T_CASE(test_read_in_key_order), T_CASE(test_bad_environments))
