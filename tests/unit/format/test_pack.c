/*
 * test_pack.c: stk_pack's dataset-level atomicity and the reader's rules for packed directories
 * (issue 17): the manifest, a disk filling up at every point of `--force` (STK_FAULT_WRITE, debug
 * builds: `make oom`), shards of two packs refused unless concatenated, a manifest or shard
 * tampered with, and writer metadata that is not JSON.
 */
#include "source/stk/stk_format.h"
#include "stk_internal.h"
#include "t.h"
#include "data/fixtures.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* A source shard of n records (the fixtures' payloads, label = i + base), metadata `meta`. */
static int make_source(const char *path, uint64_t n, int64_t base, const char *meta)
{
    stk_writer *w;
    T_OK(fx_shard_open_meta(path, meta, &w));
    for (uint64_t i = 0; i < n; i++) {
        uint8_t buf[320];
        stk_value v[2];
        for (size_t vi = 0; vi < sizeof(v) / sizeof(v[0]); vi++)
            stk_value_init(&v[vi]);
        v[0].data = buf;
        v[0].size = fx_payload(i, buf);
        v[1].i64 = (int64_t)i + base;
        T_OK(stk_writer_add(w, v));
    }
    T_OK(stk_writer_close(w));
    return 0;
}

/* stk_pack of the shard at src into the directory out (shards of about 2 KiB). */
static stk_status pack_dir(const char *src, const char *out, bool force)
{
    stk_dataset *ds;
    const char *p[] = {src};
    stk_status rc = stk_dataset_open(p, 1, 0, &ds);
    if (rc < 0)
        return rc;
    stk_pack_opts o;
    stk_pack_opts_init(&o);
    o.shard_size = 2048;
    o.force = force;
    rc = stk_pack(ds, out, &o, NULL);
    stk_dataset_close(ds);
    return rc;
}

/* Count and fingerprint of the dataset at path (0, 0 when it does not open). */
static void facts(const char *path, unsigned flags, uint64_t *count, uint64_t *fp)
{
    stk_dataset *ds;
    const char *p[] = {path};
    *count = *fp = 0;
    if (stk_dataset_open(p, 1, flags, &ds) == STK_OK) {
        *count = stk_dataset_n_records(ds);
        *fp = stk_dataset_fingerprint(ds);
        stk_dataset_close(ds);
    }
}

/* Names in dir ending with suffix. */
static int count_suffix(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d))) {
        size_t a = strlen(e->d_name), b = strlen(suffix);
        n += a >= b && strcmp(e->d_name + a - b, suffix) == 0;
    }
    if (d)
        closedir(d);
    return n;
}

typedef struct setup {
    char dir[128], src_a[192], src_b[192], out[192];
} setup;

/* Two sources (40 records, classes a,b; 60 records, classes x,y,z) and OUT packed from the
 * first. */
static int make_setup(setup *s)
{
    const char *d = fx_tmpdir("pack");
    T_CHECK(d != NULL);
    snprintf(s->dir, sizeof(s->dir), "%s", d);
    snprintf(s->src_a, sizeof(s->src_a), "%s/a.stk", d);
    snprintf(s->src_b, sizeof(s->src_b), "%s/b.stk", d);
    snprintf(s->out, sizeof(s->out), "%s/out", d);
    T_CHECK(make_source(s->src_a, 40, 0, "{\"classes\": [\"a\", \"b\"]}") == 0);
    T_CHECK(make_source(s->src_b, 60, 100, "{\"classes\": [\"x\", \"y\", \"z\"]}") == 0);
    T_OK(pack_dir(s->src_a, s->out, false));
    return 0;
}

static int test_manifest_written(void)
{
    setup s;
    T_CHECK(make_setup(&s) == 0);
    char m[256];
    snprintf(m, sizeof(m), "%s/" STK_MANIFEST_NAME, s.out);
    size_t size;
    uint8_t *text = fx_read_file(m, &size);
    T_CHECK(text != NULL);
    T_CHECK(strstr((char *)text, "\"stoker_manifest\": 1") &&
            strstr((char *)text, "\"records\": 40"));
    free(text);
    uint64_t n, fp;
    facts(s.out, 0, &n, &fp);
    T_EQ(n, 40);
    T_EQ(count_suffix(s.out, ".part"), 0);
    /* repacking a packed dataset gives it a dataset id of its own */
    stk_dataset *ds;
    const char *p[] = {s.out};
    T_OK(stk_dataset_open(p, 1, 0, &ds));
    stk_shard_info si = {.struct_size = sizeof(si)};
    T_OK(stk_dataset_shard(ds, 0, &si));
    T_CHECK(strstr(si.metadata, "\"dataset_id\": \"") && strstr(si.metadata, "\"classes\""));
    char again[256], old_id[17];
    const char *id = strstr(si.metadata, "\"dataset_id\": \"") + 15;
    memcpy(old_id, id, 16);
    old_id[16] = '\0';
    snprintf(again, sizeof(again), "%s/again", s.dir);
    stk_pack_opts o;
    stk_pack_opts_init(&o);
    o.shard_size = 4096;
    T_OK(stk_pack(ds, again, &o, NULL));
    stk_dataset_close(ds);
    const char *q[] = {again};
    T_OK(stk_dataset_open(q, 1, 0, &ds));
    T_OK(stk_dataset_shard(ds, 0, &si));
    T_CHECKF(strstr(si.metadata, old_id) == NULL && strstr(si.metadata, "\"dataset_id\": \""),
             "metadata of the repack: %s", si.metadata);
    T_CHECK(stk_dataset_n_records(ds) == 40);
    stk_dataset_close(ds);
    fx_rmtree(s.dir);
    return 0;
}

/* The disk fills up at every point of `--force` over an old dataset: each failure is an error
 * saying so, and the old dataset is left as it was (same records, same fingerprint, no part). */
static int test_fault_injection_pack_enospc(void)
{
#ifdef STK_DEBUG
    extern void stk__fault_write_set(long n);
    setup s;
    T_CHECK(make_setup(&s) == 0);
    uint64_t n0, fp0, n, fp;
    facts(s.out, 0, &n0, &fp0);
    T_EQ(n0, 40);
    int failures = 0;
    bool done = false;
    for (long limit = 1; !done && limit < (1L << 22); limit += 1 + limit / 8) {
        stk__fault_write_set(limit);
        stk_status rc = pack_dir(s.src_b, s.out, true);
        stk__fault_write_set(0);
        if (rc == STK_OK) {
            done = true;
            break;
        }
        failures++;
        T_EQ(rc, STK_EIO);
        T_CHECKF(strstr(stk_last_errmsg(), "No space left on device"), "limit %ld: %s", limit,
                 stk_last_errmsg());
        facts(s.out, 0, &n, &fp);
        T_CHECKF(n == n0 && fp == fp0, "limit %ld: %llu records after the failure", limit,
                 (unsigned long long)n);
        T_EQ(count_suffix(s.out, ".part"), 0);
    }
    T_CHECK(done && failures > 10);
    facts(s.out, 0, &n, &fp);
    T_EQ(n, 60);
    fx_rmtree(s.dir);
    return 0;
#else
    return T_SKIP;
#endif
}

static int test_mixed_packs_refused(void)
{
    setup s;
    T_CHECK(make_setup(&s) == 0);
    char other[256], a0[300], b0[300];
    snprintf(other, sizeof(other), "%s/other", s.dir);
    T_OK(pack_dir(s.src_b, other, false));
    snprintf(a0, sizeof(a0), "%s/shard-00000.stk", s.out);
    snprintf(b0, sizeof(b0), "%s/shard-00000.stk", other);
    const char *p[] = {a0, b0};
    stk_dataset *ds;
    T_EQ(stk_dataset_open(p, 2, 0, &ds), STK_EINVAL);
    T_CHECKF(strstr(stk_last_errmsg(), "a shard of a different dataset"), "%s", stk_last_errmsg());
    T_OK(stk_dataset_open(p, 2, STK_DATASET_CONCAT, &ds));
    stk_dataset_close(ds);
    /* two directories: the same */
    const char *q[] = {s.out, other};
    T_EQ(stk_dataset_open(q, 2, 0, &ds), STK_EINVAL);
    T_OK(stk_dataset_open(q, 2, STK_DATASET_CONCAT, &ds));
    T_EQ(stk_dataset_n_records(ds), 100);
    stk_dataset_close(ds);
    /* old shards without dataset ids but with other class lists: refused too */
    const char *r[] = {s.src_a, s.src_b};
    T_EQ(stk_dataset_open(r, 2, 0, &ds), STK_EINVAL);
    T_CHECKF(strstr(stk_last_errmsg(), "another class list"), "%s", stk_last_errmsg());
    fx_rmtree(s.dir);
    return 0;
}

static int test_manifest_tampering(void)
{
    setup s;
    T_CHECK(make_setup(&s) == 0);
    char m[256], shard[256], other[256], cmd[1024];
    snprintf(m, sizeof(m), "%s/" STK_MANIFEST_NAME, s.out);
    snprintf(shard, sizeof(shard), "%s/shard-00001.stk", s.out);
    snprintf(other, sizeof(other), "%s/other", s.dir);
    T_OK(pack_dir(s.src_b, other, false));
    uint64_t n, fp;
    /* one byte of the manifest changed */
    size_t size;
    uint8_t *text = fx_read_file(m, &size);
    T_CHECK(text);
    char *at = strstr((char *)text, "\"records\": 40");
    T_CHECK(at);
    at[12] = '1';
    FILE *f = fopen(m, "wb");
    T_CHECK(f && fwrite(text, 1, size, f) == size && fclose(f) == 0);
    stk_dataset *ds;
    const char *p[] = {s.out};
    T_EQ(stk_dataset_open(p, 1, 0, &ds), STK_EFORMAT);
    T_CHECKF(strstr(stk_last_errmsg(), "damaged or edited manifest"), "%s", stk_last_errmsg());
    at[12] = '0';
    f = fopen(m, "wb");
    T_CHECK(f && fwrite(text, 1, size, f) == size && fclose(f) == 0);
    free(text);
    facts(s.out, 0, &n, &fp);
    T_EQ(n, 40);
    /* a listed shard replaced by another pack's */
    snprintf(cmd, sizeof(cmd), "cp %s/shard-00001.stk %s", other, shard);
    T_CHECK(system(cmd) == 0);
    T_EQ(stk_dataset_open(p, 1, 0, &ds), STK_EFORMAT);
    T_CHECKF(strstr(stk_last_errmsg(), shard) && strstr(stk_last_errmsg(), "but the manifest"),
             "%s", stk_last_errmsg());
    /* a listed shard missing */
    T_CHECK(unlink(shard) == 0);
    T_EQ(stk_dataset_open(p, 1, 0, &ds), STK_EIO);
    T_CHECKF(strstr(stk_last_errmsg(), shard) && strstr(stk_last_errmsg(), "missing"), "%s",
             stk_last_errmsg());
    fx_rmtree(s.dir);
    return 0;
}

/* Writer metadata must be JSON: the writer refuses other text, the reader a shard holding it. */
static int test_metadata_not_json(void)
{
    const char *dir = fx_tmpdir("pack");
    T_CHECK(dir);
    char path[256];
    snprintf(path, sizeof(path), "%s/m.stk", dir);
    stk_field fields[1] = {
        {.struct_size = sizeof(stk_field), .name = "data", .kind = STK_FIELD_BYTES}};
    stk_writer_opts wo;
    stk_writer_opts_init(&wo);
    wo.fields = fields;
    wo.n_fields = 1;
    wo.metadata_json = "{\"k\": \"abc\"";
    stk_writer *w;
    T_EQ(stk_writer_open(path, &wo, &w), STK_EINVAL);
    T_CHECKF(strstr(stk_last_errmsg(), "metadata is not valid JSON"), "%s", stk_last_errmsg());
    /* a shard whose valid metadata is patched (checksums recomputed) into another text */
    wo.metadata_json = "{\"k\": \"abc\"}";
    T_OK(stk_writer_open(path, &wo, &w));
    stk_value v = {.struct_size = sizeof(stk_value), .data = "x", .size = 1};
    T_OK(stk_writer_add(w, &v));
    T_OK(stk_writer_close(w));
    size_t size;
    uint8_t *b = fx_read_file(path, &size);
    T_CHECK(b);
    char *at = memmem(b, size, "{\"k\": \"abc\"}", 12);
    T_CHECK(at);
    at[4] = ';'; /* {"k"; "abc"} */
    uint64_t hs = stk__ld32(b + STK_FMT_H_HEADER_SIZE);
    uint64_t sum = XXH3_64bits(b, hs - 8);
    uint8_t *foot = b + size - STK_FMT_FOOTER_SIZE;
    stk__st64(b + hs - 8, sum);
    stk__st64(foot + STK_FMT_T_HEADER_SUM, sum);
    stk__st64(foot + STK_FMT_T_SUM, XXH3_64bits(foot, STK_FMT_T_SUM));
    FILE *f = fopen(path, "wb");
    T_CHECK(f && fwrite(b, 1, size, f) == size && fclose(f) == 0);
    free(b);
    stk_dataset *ds;
    const char *p[] = {path};
    T_EQ(stk_dataset_open(p, 1, 0, &ds), STK_EFORMAT);
    T_CHECKF(strstr(stk_last_errmsg(), path) &&
                 strstr(stk_last_errmsg(), "writer metadata is not valid JSON"),
             "%s", stk_last_errmsg());
    fx_rmtree(dir);
    return 0;
}

/* Every allocation of opening a packed directory (manifest, shards, checks) and of packing one
 * failing in turn: STK_ENOMEM, nothing half-made (ASan: no leak), the old dataset intact. */
static int test_alloc_failures_manifest(void)
{
#ifdef STK_DEBUG
    extern void stk__fault_alloc_set(long n);
    setup s;
    T_CHECK(make_setup(&s) == 0);
    uint64_t n0, fp0, n, fp;
    facts(s.out, 0, &n0, &fp0);
    int failures = 0;
    bool opened = false, packed = false;
    for (long k = 1; k < 5000 && !opened; k++) {
        stk_dataset *ds = NULL;
        const char *p[] = {s.out};
        stk__fault_alloc_set(k);
        stk_status rc = stk_dataset_open(p, 1, 0, &ds);
        stk__fault_alloc_set(0);
        opened = rc == STK_OK;
        stk_dataset_close(ds);
        T_CHECKF(opened || rc == STK_ENOMEM, "open, allocation %ld: %d %s", k, rc,
                 stk_last_errmsg());
        failures += !opened;
    }
    /* --force over it, failing at each allocation in turn (the source opened before) */
    for (long k = 1; k < 5000 && !packed; k++) {
        stk_dataset *ds;
        const char *src[] = {s.src_b};
        T_OK(stk_dataset_open(src, 1, 0, &ds));
        stk_pack_opts o;
        stk_pack_opts_init(&o);
        o.shard_size = 2048;
        o.force = true;
        stk__fault_alloc_set(k);
        stk_status rc = stk_pack(ds, s.out, &o, NULL);
        stk__fault_alloc_set(0);
        stk_dataset_close(ds);
        packed = rc == STK_OK;
        if (packed)
            break;
        T_CHECKF(rc == STK_ENOMEM || rc == STK_EIO, "pack, allocation %ld: %d %s", k, rc,
                 stk_last_errmsg());
        facts(s.out, 0, &n, &fp);
        T_CHECKF(n == n0 && fp == fp0, "pack, allocation %ld: old dataset changed", k);
        failures++;
    }
    T_CHECK(opened && packed && failures > 5);
    fx_rmtree(s.dir);
    return 0;
#else
    return T_SKIP;
#endif
}

/* Damage the stored bytes of record `rec` of the shard at path (its checksum then fails). */
static int corrupt_record(const char *path, uint64_t rec)
{
    stk_dataset *ds;
    const char *p[] = {path};
    T_OK(stk_dataset_open(p, 1, 0, &ds));
    char where[512];
    T_OK(stk_dataset_describe(ds, rec, where, sizeof(where)));
    stk_dataset_close(ds);
    const char *at = strstr(where, "at byte ");
    T_CHECK(at != NULL);
    long off = strtol(at + 8, NULL, 10);
    int fd = open(path, O_RDWR);
    T_CHECK(fd >= 0);
    uint8_t b;
    T_CHECK(pread(fd, &b, 1, off) == 1);
    b ^= 0xff;
    T_CHECK(pwrite(fd, &b, 1, off) == 1);
    close(fd);
    return 0;
}

/* Entries of dir (without . and ..). */
static int count_entries(const char *dir)
{
    return count_suffix(dir, "") - 2;
}

/* --force where OUT is a regular file and a directory is asked for (and where OUT is a
 * directory named like a file): a failure before the commit leaves the old dataset exactly as
 * it was and nothing next to it; a success replaces it. */
static int test_force_over_a_file_is_atomic(void)
{
    setup s;
    T_CHECK(make_setup(&s) == 0);
    char file[256], bad[256], named_dir[256];
    snprintf(file, sizeof(file), "%s/single.stk", s.dir);
    snprintf(bad, sizeof(bad), "%s/bad.stk", s.dir);
    snprintf(named_dir, sizeof(named_dir), "%s/dir.stk", s.dir);
    T_CHECK(make_source(bad, 60, 100, "{\"classes\": [\"x\", \"y\", \"z\"]}") == 0);
    T_CHECK(corrupt_record(bad, 45) == 0); /* packing it fails late, after several shards */
    stk_dataset *ds;
    const char *pa[] = {s.src_a};
    T_OK(stk_dataset_open(pa, 1, 0, &ds));
    stk_pack_opts o;
    stk_pack_opts_init(&o);
    T_OK(stk_pack(ds, file, &o, NULL)); /* one file */
    stk_dataset_close(ds);
    uint64_t n0, fp0, n, fp;
    facts(file, 0, &n0, &fp0);
    T_EQ(n0, 40);
    int entries = count_entries(s.dir);

    T_EQ(pack_dir(bad, file, true), STK_EFORMAT); /* a directory over the file, failing */
    T_CHECKF(strstr(stk_last_errmsg(), "checksum"), "%s", stk_last_errmsg());
    struct stat st;
    T_CHECK(stat(file, &st) == 0 && S_ISREG(st.st_mode));
    facts(file, 0, &n, &fp);
    T_CHECK(n == n0 && fp == fp0);
    T_EQ(count_entries(s.dir), entries); /* no staging directory left behind */

    T_OK(pack_dir(s.src_b, file, true)); /* succeeding: now a directory of 60 records */
    T_CHECK(stat(file, &st) == 0 && S_ISDIR(st.st_mode));
    facts(file, 0, &n, &fp);
    T_EQ(n, 60);
    T_CHECK(count_suffix(file, ".stk") > 1);
    T_EQ(count_entries(s.dir), entries);

    /* vice versa: OUT a directory named like a file, a single file asked (no shard size): it
     * stays a directory, replaced at the manifest's commit, untouched by a failure */
    T_OK(pack_dir(s.src_a, named_dir, false));
    facts(named_dir, 0, &n0, &fp0);
    const char *pb[] = {bad};
    T_OK(stk_dataset_open(pb, 1, 0, &ds));
    o.force = true;
    T_EQ(stk_pack(ds, named_dir, &o, NULL), STK_EFORMAT);
    stk_dataset_close(ds);
    facts(named_dir, 0, &n, &fp);
    T_CHECK(n == n0 && fp == fp0 && count_suffix(named_dir, ".part") == 0);
    const char *pb2[] = {s.src_b};
    T_OK(stk_dataset_open(pb2, 1, 0, &ds));
    T_OK(stk_pack(ds, named_dir, &o, NULL));
    stk_dataset_close(ds);
    T_CHECK(stat(named_dir, &st) == 0 && S_ISDIR(st.st_mode));
    facts(named_dir, 0, &n, &fp);
    T_EQ(n, 60);
    fx_rmtree(s.dir);
    return 0;
}

T_MAIN(T_CASE(test_manifest_written), T_CASE(test_force_over_a_file_is_atomic),
       T_CASE(test_fault_injection_pack_enospc), T_CASE(test_mixed_packs_refused),
       T_CASE(test_manifest_tampering), T_CASE(test_metadata_not_json),
       T_CASE(test_alloc_failures_manifest))
