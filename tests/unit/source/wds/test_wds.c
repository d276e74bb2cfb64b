/*
 * test_wds.c: the WebDataset tar source (src/source/wds/stk_src_wds.c) from C, on tars this file
 * writes itself (ustar headers, a GNU long name): detection by magic and by name, the schema and
 * values, the index cache beside the shard, and every allocation of open and read failing in
 * turn (debug builds). python/tests/test_wds.py covers the loader semantics, the equality with
 * .stk and the bad inputs with shards written by Python's tarfile.
 */
#include "source/stk_source.h"
#include "stk_internal.h"
#include "t.h"
#include "data/fixtures.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* Append one member (a GNU 'L' entry first when the name is over 100 bytes). */
static void tar_member(FILE *f, const char *name, const void *data, size_t size, char type)
{
    size_t nl = strlen(name);
    if (nl > 100 && type != 'L') {
        tar_member(f, "././@LongLink", name, nl + 1, 'L');
        nl = 100;
    }
    uint8_t h[512] = {0};
    memcpy(h, name, nl);
    snprintf((char *)h + 100, 8, "%07o", 0644);
    snprintf((char *)h + 108, 8, "%07o", 0);
    snprintf((char *)h + 116, 8, "%07o", 0);
    snprintf((char *)h + 124, 12, "%011o", (unsigned)size);
    snprintf((char *)h + 136, 12, "%011o", 0);
    h[156] = (uint8_t)type;
    memcpy(h + 257,
           "ustar\0"
           "00",
           8);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    fwrite(h, 1, 512, f);
    fwrite(data, 1, size, f);
    static const uint8_t zero[512];
    fwrite(zero, 1, (512 - size % 512) % 512, f);
}

/* n samples: <key>.jpg (i+1 bytes of 'a'+i), <key>.cls ("i*3"); sample 1 has a long key. */
static int write_tar(const char *path, int n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    char lng[160];
    memset(lng, 'L', 150);
    lng[150] = '\0';
    for (int i = 0; i < n; i++) {
        char key[200], name[220], jpg[64], cls[16];
        if (i == 1)
            snprintf(key, sizeof(key), "dir/%s", lng);
        else
            snprintf(key, sizeof(key), "dir/s%03d", i);
        memset(jpg, 'a' + i, (size_t)i + 1);
        snprintf(cls, sizeof(cls), "%d", i * 3);
        snprintf(name, sizeof(name), "%s.JPG", key); /* extensions are lowercased */
        tar_member(f, name, jpg, (size_t)i + 1, '0');
        snprintf(name, sizeof(name), "%s.cls", key);
        tar_member(f, name, cls, strlen(cls), '0');
    }
    static const uint8_t zero[1024];
    fwrite(zero, 1, sizeof(zero), f);
    return fclose(f);
}

/* Open path (format detected), check schema and every record. Returns STK_OK or the status. */
static stk_status check_dataset(const char *path, int n)
{
    stk_dataset *ds = NULL;
    const char *paths[1] = {path};
    stk_status rc = stk_dataset_open(paths, 1, 0, &ds);
    if (rc != STK_OK)
        return rc;
    uint8_t buf[4096];
    T_EQ(stk_dataset_n_records(ds), (uint64_t)n);
    T_EQ(stk_dataset_n_fields(ds), 3);
    T_CHECK(strcmp(stk_dataset_field(ds, 0)->name, "__key__") == 0);
    T_CHECK(strcmp(stk_dataset_field(ds, 1)->name, "cls") == 0);
    T_EQ(stk_dataset_field(ds, 1)->kind, STK_FIELD_INT64);
    T_CHECK(strcmp(stk_dataset_field(ds, 2)->name, "jpg") == 0);
    for (int i = 0; i < n && rc == STK_OK; i++) {
        stk_record r;
        stk_record_init(&r);
        rc = stk_dataset_read(ds, (uint64_t)i, buf, sizeof(buf), &r);
        if (rc != STK_OK)
            break;
        T_EQ(stk_record_i64(&r, 1), i * 3);
        T_EQ(r.field_size[2], (size_t)i + 1);
        T_CHECK(r.field[2][0] == 'a' + i);
        T_EQ(r.field_size[0], i == 1 ? 154u : 8u);
        T_CHECK(memcmp(r.field[0], "dir/", 4) == 0);
    }
    stk_dataset_close(ds);
    return rc;
}

static int test_read_and_detect(void)
{
    const char *dir = fx_tmpdir("wds");
    char tar[128], named[128], cache[160];
    snprintf(tar, sizeof(tar), "%s/shard.tar", dir);
    snprintf(named, sizeof(named), "%s/shard.bin", dir);
    snprintf(cache, sizeof(cache), "%s.stkidx", tar);
    T_CHECK(write_tar(tar, 5) == 0);
    T_OK(check_dataset(tar, 5));
    T_CHECK(access(cache, F_OK) == 0); /* the index, cached */
    T_OK(check_dataset(tar, 5));       /* read back from the cache */
    T_CHECK(rename(tar, named) == 0);  /* by magic alone */
    T_OK(check_dataset(named, 5));
    /* a file named .tar that is not one: detected by name, refused naming the offset */
    FILE *f = fopen(tar, "wb");
    T_CHECK(f);
    for (int i = 0; i < 100; i++)
        fputs("not a tar ", f);
    fclose(f);
    stk_dataset *ds = NULL;
    const char *paths[1] = {tar};
    T_EQ(stk_dataset_open(paths, 1, 0, &ds), STK_EFORMAT);
    T_CHECKF(strstr(stk_last_errmsg(), "shard.tar: not a tar file at byte 0"), "%s",
             stk_last_errmsg());
    fx_rmtree(dir);
    return 0;
}

/* An I/O failure while the tar is scanned (at open) or a member read: the message names the
 * shard and says what failed (issue 30: the scan's message was formatted into itself and came
 * out empty). Faults from the fault-injecting byte source (stk-fault:PLAN:PATH). */
static int test_io_failure_names_the_shard(void)
{
    const char *dir = fx_tmpdir("wds");
    char tar[128], path[256];
    snprintf(tar, sizeof(tar), "%s/shard.tar", dir);
    T_CHECK(write_tar(tar, 6) == 0);
    static const char *const plans[] = {"eio@3072", "short@3100", "eio#1"};
    static const char *const says[] = {"injected I/O error at byte 3072", "short read (",
                                       "injected I/O error at byte 0"};
    for (int k = 0; k < 3; k++) {
        snprintf(path, sizeof(path), "stk-fault:%s:%s", plans[k], tar);
        const char *paths[1] = {path};
        stk_dataset *ds = NULL;
        T_EQ(stk_dataset_open(paths, 1, 0, &ds), STK_EIO);
        const char *m = stk_last_errmsg();
        T_CHECKF(strstr(m, path) && strstr(m, says[k]), "%s: %s", plans[k], m);
    }
    /* the Nth read failing, for each N: in the scan, the open fails saying so; past it, the
     * failing record names the shard and the failure, and every other record reads right */
    int failed_records = 0;
    for (int nth = 2; nth < 40; nth++) {
        snprintf(path, sizeof(path), "stk-fault:eio#%d:%s", nth, tar);
        const char *paths[1] = {path};
        stk_dataset *ds = NULL;
        stk_status orc = stk_dataset_open(paths, 1, 0, &ds);
        if (orc != STK_OK) { /* a read of the scan */
            T_EQ(orc, STK_EIO);
            T_CHECKF(strstr(stk_last_errmsg(), "injected I/O error"), "%s", stk_last_errmsg());
            continue;
        }
        for (int i = 0; i < 6; i++) {
            uint8_t buf[4096];
            stk_record r;
            stk_record_init(&r);
            stk_status rc = stk_dataset_read(ds, (uint64_t)i, buf, sizeof(buf), &r);
            const char *err = stk_last_errmsg();
            if (rc == STK_OK) {
                T_EQ(r.field_size[2], (size_t)i + 1);
                T_CHECK(r.field[2][0] == 'a' + i);
                continue;
            }
            T_EQ(rc, STK_EIO);
            T_CHECKF(strstr(err, "shard.tar") && strstr(err, "injected I/O error"), "%s", err);
            failed_records++;
        }
        stk_dataset_close(ds);
    }
    T_CHECK(failed_records >= 6); /* each record's read failed for some N */
    fx_rmtree(dir);
    return 0;
}

/* Every allocation of open (scan and cache paths) and read failing in turn: STK_ENOMEM saying
 * "out of memory", never a crash or leak (ASan), and the dataset right when it opens. */
static int test_alloc_failures(void)
{
#ifdef STK_DEBUG
    extern void stk__fault_alloc_set(long n);
    const char *dir = fx_tmpdir("wds");
    char tar[128], cache[160];
    snprintf(tar, sizeof(tar), "%s/shard.tar", dir);
    snprintf(cache, sizeof(cache), "%s.stkidx", tar);
    T_CHECK(write_tar(tar, 6) == 0);
    int failures = 0, oks = 0;
    for (int cached = 0; cached < 2; cached++) {
        for (long k = 1; k < 400; k++) {
            if (!cached)
                unlink(cache);
            else
                T_OK(check_dataset(tar, 6)); /* make sure the cache is there */
            stk__fault_alloc_set(k);
            stk_status rc = check_dataset(tar, 6);
            stk__fault_alloc_set(0);
            T_CHECKF(rc == STK_OK || (rc == STK_ENOMEM && strstr(stk_last_errmsg(), "memory")),
                     "allocation %ld: rc %d (%s)", k, rc, stk_last_errmsg());
            failures += rc == STK_ENOMEM;
            oks = rc == STK_OK ? oks + 1 : 0;
            if (oks > 20)
                break; /* past the last allocation */
        }
        oks = 0;
    }
    T_CHECKF(failures >= 10, "%d failures", failures);
    fx_rmtree(dir);
    return 0;
#else
    return T_SKIP;
#endif
}

/* data gzipped (one gzip stream) into out; its size, 0 on failure. */
static size_t gzip_bytes(const void *data, size_t n, uint8_t *out, size_t cap)
{
    z_stream z;
    memset(&z, 0, sizeof(z));
    if (deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return 0;
    z.next_in = (Bytef *)(uintptr_t)data;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    int r = deflate(&z, Z_FINISH);
    size_t got = z.total_out;
    deflateEnd(&z);
    return r == Z_STREAM_END ? got : 0;
}

/* n samples: <k>.txt.gz (gzip of "text <i>" repeated i + 1 times) and <k>.npy (int16 (2, 3),
 * 6 i + j), written as numpy 1.0 files. */
static int write_gz_npy_tar(const char *path, int n)
{
    FILE *f = fopen(path, "wb");
    T_CHECK(f);
    for (int i = 0; i < n; i++) {
        char name[64], text[256] = "";
        uint8_t gz[512], npy[128 + 12];
        for (int k = 0; k <= i; k++)
            snprintf(text + strlen(text), sizeof(text) - strlen(text), "text %d ", i);
        size_t gn = gzip_bytes(text, strlen(text), gz, sizeof(gz));
        T_CHECK(gn > 0);
        snprintf(name, sizeof(name), "s%03d.txt.gz", i);
        tar_member(f, name, gz, gn, '0');
        /* .npy 1.0: magic, version, header length, the dict padded to 128 bytes in all */
        memset(npy, ' ', 128);
        memcpy(npy, "\x93NUMPY\x01\x00\x76\x00", 10);
        const char *dict = "{'descr': '<i2', 'fortran_order': False, 'shape': (2, 3), }";
        memcpy(npy + 10, dict, strlen(dict));
        npy[127] = '\n';
        for (int j = 0; j < 6; j++) {
            int16_t v = (int16_t)(6 * i + j);
            memcpy(npy + 128 + 2 * j, &v, 2);
        }
        snprintf(name, sizeof(name), "s%03d.npy", i);
        tar_member(f, name, npy, sizeof(npy), '0');
    }
    static const uint8_t zero[1024];
    fwrite(zero, 1, sizeof(zero), f);
    T_CHECK(fclose(f) == 0);
    return 0;
}

/* Open the gz/npy tar and check every record: STK_OK or the failing status. */
static stk_status check_gz_npy(const char *path, int n)
{
    stk_dataset *ds = NULL;
    const char *paths[1] = {path};
    stk_status rc = stk_dataset_open(paths, 1, 0, &ds);
    if (rc != STK_OK)
        return rc;
    T_EQ(stk_dataset_n_fields(ds), 3);
    const stk_field *npy = stk_dataset_field(ds, 1), *txt = stk_dataset_field(ds, 2);
    T_CHECK(strcmp(npy->name, "npy") == 0 && npy->kind == STK_FIELD_ARRAY &&
            npy->dtype == STK_DTYPE_INT16 && npy->ndim == 2 && npy->shape[0] == 2 &&
            npy->shape[1] == 3);
    T_CHECK(strcmp(txt->name, "txt") == 0 && txt->kind == STK_FIELD_BYTES);
    for (int i = 0; i < n && rc == STK_OK; i++) {
        uint8_t buf[1024];
        stk_record r;
        stk_record_init(&r);
        char want[256] = "";
        rc = stk_dataset_read(ds, (uint64_t)i, buf, sizeof(buf), &r);
        if (rc != STK_OK)
            break;
        for (int k = 0; k <= i; k++)
            snprintf(want + strlen(want), sizeof(want) - strlen(want), "text %d ", i);
        T_CHECK(r.field_size[2] == strlen(want) && memcmp(r.field[2], want, strlen(want)) == 0);
        T_EQ(r.field_size[1], 12);
        int16_t v[6];
        memcpy(v, r.field[1], 12);
        for (int j = 0; j < 6; j++)
            T_EQ(v[j], 6 * i + j);
    }
    stk_dataset_close(ds);
    return rc;
}

/* `.gz` members gunzipped (the field named without .gz), `.npy` members as array fields; with
 * STK_DEBUG every allocation of open and read failing in turn: STK_ENOMEM, never a crash. */
static int test_gz_npy_members_alloc_failures(void)
{
    const char *dir = fx_tmpdir("wds");
    char tar[128];
    snprintf(tar, sizeof(tar), "%s/gz.tar", dir);
    T_CHECK(write_gz_npy_tar(tar, 5) == 0);
    T_OK(check_gz_npy(tar, 5)); /* scanned */
    T_OK(check_gz_npy(tar, 5)); /* from the cache */
#ifdef STK_DEBUG
    extern void stk__fault_alloc_set(long n);
    int failures = 0, oks = 0;
    for (long k = 1; k < 400 && oks <= 20; k++) {
        stk__fault_alloc_set(k);
        stk_status rc = check_gz_npy(tar, 5);
        stk__fault_alloc_set(0);
        T_CHECKF(rc == STK_OK || (rc == STK_ENOMEM && strstr(stk_last_errmsg(), "memory")),
                 "allocation %ld: rc %d (%s)", k, rc, stk_last_errmsg());
        failures += rc == STK_ENOMEM;
        oks = rc == STK_OK ? oks + 1 : 0;
    }
    T_CHECKF(failures >= 10, "%d failures", failures);
#endif
    fx_rmtree(dir);
    return 0;
}

T_MAIN(T_CASE(test_read_and_detect), T_CASE(test_io_failure_names_the_shard),
       T_CASE(test_alloc_failures), T_CASE(test_gz_npy_members_alloc_failures))
