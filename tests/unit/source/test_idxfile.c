/*
 * test_idxfile.c: the envelope of the formats' indexes (src/source/stk_idxfile.c) over a byte
 * source that keeps aux entries in memory (as the remote cache does on disk): the frame offsets
 * of a remote file stored and loaded back, and every stale or inconsistent entry refused (another
 * size, another path, offsets that do not start at 0, go backwards, leave frames shorter than the
 * framing or end elsewhere than the file's end), even with a valid checksum; local files keep no
 * offsets index; a local file's index beside it, or in the cache directory where its directory
 * takes none. A part's index (a tar member's, a .stk record's field's): stored and loaded back by
 * its offset and length, refused for another part (another offset or length), another version of
 * the file, or a damaged entry; a local file's kept only in the cache directory (never beside it,
 * nowhere without a cache directory).
 */
#include "common/stk_endian.h"
#include "source/stk_idxfile.h"
#include "t.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- a byte source with one aux slot in memory ---- */

static uint8_t *g_aux;
static size_t g_aux_n;
static char g_aux_name[32];
static int g_puts;

static bool mem_aux_get(stk__file *f, const char *name, uint8_t **out, size_t *n)
{
    (void)f;
    if (!g_aux || strcmp(name, g_aux_name) != 0 || !(*out = stk__malloc(g_aux_n)))
        return false;
    memcpy(*out, g_aux, g_aux_n);
    *n = g_aux_n;
    return true;
}

static void mem_aux_put(stk__file *f, const char *name, const void *buf, size_t n)
{
    (void)f;
    uint8_t *b = stk__malloc(n); /* buf may be the slot itself */
    memcpy(b, buf, n);
    stk__free(g_aux);
    g_aux = b;
    g_aux_n = n;
    snprintf(g_aux_name, sizeof(g_aux_name), "%s", name);
    g_puts++;
}

static const stk__vfs mem_vfs = {.name = "mem", .aux_get = mem_aux_get, .aux_put = mem_aux_put};

#define FRAMING 16

/* Seal and store an offsets index of f with `count` and the given offsets, valid checksum. */
static int put_raw(stk__file *f, uint64_t count, const uint64_t *off, size_t n_off)
{
    uint64_t id[3];
    size_t n;
    T_CHECK(stk__idx_identity(f, id));
    uint8_t *b = stk__idx_new("STKOFFS1", id, 8 + n_off * 8, &n);
    stk__st64(b + STK__IDX_HEAD, count);
    for (size_t k = 0; k < n_off; k++)
        stk__st64(b + STK__IDX_HEAD + 8 + 8 * k, off[k]);
    stk__idx_store(f, "tfidx", false, b, n);
    stk__free(b);
    return 0;
}

static bool loads(stk__file *f)
{
    uint64_t *off = NULL, count = 0;
    bool ok = stk__idx_offsets_load(f, "tfidx", FRAMING, &off, &count);
    T_CHECK(ok == (off != NULL));
    stk__free(off);
    return ok;
}

static int test_offsets_round_trip_and_refusals(void)
{
    stk__file f = {.vfs = &mem_vfs, .path = "mem://bucket/a.tfrecord", .size = 400};
    const uint64_t off[] = {0, 100, 250, 400};
    T_CHECK(!loads(&f)); /* nothing stored yet */
    stk__idx_offsets_store(&f, "tfidx", off, 0);
    T_EQ(g_puts, 0); /* an empty file: nothing to keep */
    stk__idx_offsets_store(&f, "tfidx", off, 3);
    T_EQ(g_puts, 1);
    uint64_t *got = NULL, count = 0;
    T_CHECK(stk__idx_offsets_load(&f, "tfidx", FRAMING, &got, &count));
    T_EQ(count, 3);
    T_CHECK(memcmp(got, off, sizeof(off)) == 0);
    stk__free(got);
    /* the object changed size, or is another path: not its index */
    stk__file g = f;
    g.size = 401;
    T_CHECK(!loads(&g));
    g = f;
    g.path = "mem://bucket/b.tfrecord";
    T_CHECK(!loads(&g));
    /* any byte flipped: refused */
    for (size_t k = 0; k < g_aux_n; k++) {
        g_aux[k] ^= 0x10;
        T_CHECKF(!loads(&f), "byte %zu", k);
        g_aux[k] ^= 0x10;
    }
    T_CHECK(loads(&f));
    /* sealed but inconsistent */
    const uint64_t not0[] = {8, 100, 250, 400}, back[] = {0, 250, 100, 400},
                   short_frame[] = {0, 100, 110, 400}, end[] = {0, 100, 250, 399};
    T_CHECK(put_raw(&f, 3, not0, 4) == 0);
    T_CHECK(!loads(&f));
    T_CHECK(put_raw(&f, 3, back, 4) == 0);
    T_CHECK(!loads(&f));
    T_CHECK(put_raw(&f, 3, short_frame, 4) == 0);
    T_CHECK(!loads(&f));
    T_CHECK(put_raw(&f, 3, end, 4) == 0);
    T_CHECK(!loads(&f));
    T_CHECK(put_raw(&f, 0, off, 1) == 0); /* no record */
    T_CHECK(!loads(&f));
    T_CHECK(put_raw(&f, 4, off, 4) == 0); /* a count the body does not hold */
    T_CHECK(!loads(&f));
    T_CHECK(put_raw(&f, UINT64_MAX, off, 4) == 0);
    T_CHECK(!loads(&f));
    T_CHECK(put_raw(&f, 3, off, 4) == 0); /* and the same, consistent: fine */
    T_CHECK(loads(&f));
    /* a wrong magic with a valid checksum */
    g_aux[0] = 'X';
    stk__idx_store(&f, "tfidx", false, g_aux, g_aux_n); /* reseals */
    T_CHECK(!loads(&f));
    stk__free(g_aux);
    g_aux = NULL;
    return 0;
}

static int test_local_files_keep_no_offsets_index(void)
{
    char dir[] = "/tmp/stk_idxfile_XXXXXX", path[64];
    T_CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/a.tfrecord", dir);
    FILE *w = fopen(path, "wb");
    T_CHECK(w && fwrite("0123456789abcdef", 1, 16, w) == 16 && fclose(w) == 0);
    stk__file *f = NULL;
    T_OK(stk__vfs_open(path, &f, NULL, 0));
    const uint64_t off[] = {0, 16};
    stk__idx_offsets_store(f, "tfidx", off, 1);
    T_CHECK(!loads(f));
    stk__vfs_close(f);
    char side[80];
    snprintf(side, sizeof(side), "%s.tfidx", path);
    T_CHECK(access(side, F_OK) != 0); /* nothing written beside it */
    unlink(path);
    rmdir(dir);
    return 0;
}

/* An index of f (body "body"), sealed and stored beside it (or where stk__idx_store puts it). */
static void store_body(stk__file *f, const char *body)
{
    uint64_t id[3];
    size_t n;
    stk__idx_identity(f, id);
    uint8_t *b = stk__idx_new("TESTIDX1", id, strlen(body), &n);
    memcpy(b + STK__IDX_HEAD, body, strlen(body));
    stk__idx_store(f, "testidx", true, b, n);
    stk__free(b);
}

/* The body of f's index, or "" when none loads. */
static const char *load_body(stk__file *f, char *buf, size_t size)
{
    uint64_t id[3];
    size_t n;
    stk__idx_identity(f, id);
    uint8_t *b = stk__idx_load(f, "testidx", true, "TESTIDX1", id, &n);
    buf[0] = '\0';
    if (b) {
        size_t len = STK_MIN(n - STK__IDX_HEAD - STK__IDX_TAIL, size - 1);
        memcpy(buf, b + STK__IDX_HEAD, len);
        buf[len] = '\0';
    }
    stk__free(b);
    return buf;
}

/* Beside a local file when its directory takes it; where it does not (the name taken by a
 * directory, as a read-only directory refuses it), in the cache directory (STOKER_CACHE_DIR) as
 * an aux entry, found there by the next load; without a cache directory, nowhere. A truncated
 * index file beside it is ignored (and the cache's copy, if any, read). */
static int test_local_index_beside_or_in_the_cache(void)
{
    char dir[] = "/tmp/stk_idxfile_XXXXXX", path[96], side[128], cache[128], buf[64];
    T_CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/a.mp4", dir);
    snprintf(side, sizeof(side), "%s.testidx", path);
    snprintf(cache, sizeof(cache), "%s/cache", dir);
    FILE *w = fopen(path, "wb");
    T_CHECK(w && fwrite("0123456789abcdef", 1, 16, w) == 16 && fclose(w) == 0);
    stk__file *f = NULL;
    T_OK(stk__vfs_open(path, &f, NULL, 0));
    unsetenv("STOKER_CACHE_DIR");
    T_CHECK(strcmp(load_body(f, buf, sizeof(buf)), "") == 0);
    store_body(f, "beside");
    T_CHECK(access(side, F_OK) == 0);
    T_CHECK(strcmp(load_body(f, buf, sizeof(buf)), "beside") == 0);
    T_CHECK(truncate(side, 20) == 0); /* a truncated index file: not trusted */
    T_CHECK(strcmp(load_body(f, buf, sizeof(buf)), "") == 0);
    /* the name taken by a directory: without a cache directory, the index is kept nowhere */
    T_CHECK(unlink(side) == 0 && mkdir(side, 0755) == 0);
    store_body(f, "nowhere");
    T_CHECK(strcmp(load_body(f, buf, sizeof(buf)), "") == 0);
    /* with one, there */
    T_CHECK(setenv("STOKER_CACHE_DIR", cache, 1) == 0);
    T_CHECK(strcmp(load_body(f, buf, sizeof(buf)), "") == 0);
    store_body(f, "cached");
    T_CHECK(strcmp(load_body(f, buf, sizeof(buf)), "cached") == 0);
    unsetenv("STOKER_CACHE_DIR");
    T_CHECK(strcmp(load_body(f, buf, sizeof(buf)), "") == 0);
    stk__vfs_close(f);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    T_CHECK(system(cmd) == 0);
    return 0;
}

static bool part_is(stk__file *f, uint64_t off, uint64_t len, const char *want)
{
    const uint8_t *body;
    size_t n;
    uint8_t *b = stk__idx_part_load(f, "stkvidx", "STKVIX01", off, len, &body, &n);
    bool same = want ? b && n == strlen(want) && memcmp(body, want, n) == 0 : b == NULL;
    stk__free(b);
    return same;
}

static int test_part_index(void)
{
    /* a remote shard: the aux entry of its byte source */
    stk__file f = {.vfs = &mem_vfs, .path = "mem://bucket/v.tar", .size = 9000};
    stk__free(g_aux);
    g_aux = NULL;
    T_CHECK(part_is(&f, 512, 3000, NULL));
    stk__idx_part_store(&f, "stkvidx", "STKVIX01", 512, 3000, "member", 6);
    T_CHECK(g_aux_name[0] == 's' && strlen(g_aux_name) == 16);
    T_CHECK(part_is(&f, 512, 3000, "member"));
    T_CHECK(part_is(&f, 512, 3001, NULL)); /* another part */
    T_CHECK(part_is(&f, 1024, 3000, NULL));
    f.size = 9001; /* another version of the shard */
    T_CHECK(part_is(&f, 512, 3000, NULL));
    f.size = 9000;
    g_aux[g_aux_n / 2] ^= 1; /* damaged */
    T_CHECK(part_is(&f, 512, 3000, NULL));
    /* a local shard: in the cache directory only */
    char dir[] = "/tmp/stk_idxpart_XXXXXX", path[96], cache[128], side[128];
    T_CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/v.tar", dir);
    snprintf(cache, sizeof(cache), "%s/cache", dir);
    snprintf(side, sizeof(side), "%s.stkvidx", path);
    FILE *w = fopen(path, "wb");
    T_CHECK(w && fwrite("0123456789abcdef", 1, 16, w) == 16 && fclose(w) == 0);
    stk__file *lf = NULL;
    T_OK(stk__vfs_open(path, &lf, NULL, 0));
    unsetenv("STOKER_CACHE_DIR");
    stk__idx_part_store(lf, "stkvidx", "STKVIX01", 4, 8, "nowhere", 7);
    T_CHECK(part_is(lf, 4, 8, NULL));
    T_CHECK(setenv("STOKER_CACHE_DIR", cache, 1) == 0);
    stk__idx_part_store(lf, "stkvidx", "STKVIX01", 4, 8, "cached", 6);
    T_CHECK(part_is(lf, 4, 8, "cached"));
    T_CHECK(part_is(lf, 0, 8, NULL));
    T_CHECK(access(side, F_OK) != 0); /* nothing beside the shard */
    unsetenv("STOKER_CACHE_DIR");
    T_CHECK(part_is(lf, 4, 8, NULL));
    stk__vfs_close(lf);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    T_CHECK(system(cmd) == 0);
    return 0;
}

T_MAIN(T_CASE(test_offsets_round_trip_and_refusals), T_CASE(test_local_files_keep_no_offsets_index),
       T_CASE(test_local_index_beside_or_in_the_cache), T_CASE(test_part_index))
