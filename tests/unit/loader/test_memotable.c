/*
 * test_memotable.c: a local shard's parts' memo blobs kept as one table beside the shard
 * (src/loader/stk_memotable.c, `<shard>.stkvidx`): blobs put by one table are found by the next
 * (after its destroy wrote what was pending), each under its part's offset and length only; the
 * file is written as the new blobs double (1, 2, 4, 8 ... parts), not on every put; a blob
 * derived again replaces the kept one; a table file damaged anywhere (every byte flipped in
 * turn), sealed but inconsistent (a count or a length the body does not hold, another blob
 * layout) or made for another version of the shard is ignored whole; where the name is taken
 * (as a read-only directory would refuse it) the table goes to the cache directory, and with
 * none every blob is counted unsaved.
 */
#include "common/stk_endian.h"
#include "loader/stk_loader_int.h"
#include "source/stk_idxfile.h"
#include "t.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define N_PARTS 9

static char g_dir[64], g_shard[96], g_side[112];

static int setup(void)
{
    snprintf(g_dir, sizeof(g_dir), "/tmp/stk_memotab_XXXXXX");
    T_CHECK(mkdtemp(g_dir) != NULL);
    snprintf(g_shard, sizeof(g_shard), "%s/a.tar", g_dir);
    snprintf(g_side, sizeof(g_side), "%s.stkvidx", g_shard);
    FILE *w = fopen(g_shard, "wb");
    T_CHECK(w != NULL);
    for (int k = 0; k < 4096; k++)
        fputc(k & 0xff, w);
    T_CHECK(fclose(w) == 0);
    unsetenv("STOKER_CACHE_DIR");
    return 0;
}

static void teardown(void)
{
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
}

/* Part k's blob: k + 1 bytes of a pattern. */
static void blob(int k, uint8_t *b, size_t *n)
{
    *n = (size_t)k + 1;
    for (size_t i = 0; i < *n; i++)
        b[i] = (uint8_t)(k * 31 + i);
}

/* How many of the N_PARTS parts a fresh table finds with their blobs (-1: a wrong blob). */
static int found(stk__file *f)
{
    stk__memotab *t = stk__memotab_create("stkvidx", "STKVIX01");
    stk__memo *m = stk__memo_create(N_PARTS, 1 << 20);
    int got = 0;
    for (int k = 0; k < N_PARTS && t && m; k++) {
        if (!stk__memotab_get(t, f, 100u * k, 50, m, k))
            continue;
        uint8_t want[64];
        size_t n, size = 0;
        blob(k, want, &n);
        const uint8_t *b = stk__memo_get(m, k, &size);
        got = b && size == n && memcmp(b, want, n) == 0 && got >= 0 ? got + 1 : -1;
    }
    stk__memo_destroy(m);
    stk__memotab_destroy(t);
    return got;
}

/* Put every part into t; the blobs that found no place on disk. */
static uint64_t put_parts(stk__memotab *t, stk__file *f)
{
    uint64_t unsaved = 0;
    for (int k = 0; k < N_PARTS; k++) {
        uint8_t b[64];
        size_t n;
        blob(k, b, &n);
        unsaved += stk__memotab_put(t, f, 100u * k, 50, b, n);
    }
    return unsaved;
}

static ino_t side_ino(void)
{
    struct stat st;
    return stat(g_side, &st) == 0 ? st.st_ino : 0;
}

static int test_round_trip_and_doubling_writes(void)
{
    T_CHECK(setup() == 0);
    stk__file *f = NULL;
    T_OK(stk__vfs_open(g_shard, &f, NULL, 0));
    T_EQ(found(f), 0);
    stk__memotab *t = stk__memotab_create("stkvidx", "STKVIX01");
    T_CHECK(t != NULL);
    int writes = 0;
    ino_t last = side_ino();
    for (int k = 0; k < N_PARTS; k++) {
        uint8_t b[64];
        size_t n;
        blob(k, b, &n);
        T_EQ(stk__memotab_put(t, f, 100u * k, 50, b, n), 0);
        ino_t now = side_ino(); /* each write renames a new file over the name */
        writes += now != last;
        last = now;
    }
    T_EQ(writes, 4); /* after parts 1, 2, 4 and 8: not on every put */
    stk__memotab_destroy(t);
    T_CHECK(side_ino() != last); /* the ninth part, written at destroy */
    T_EQ(found(f), N_PARTS);
    /* only under its own place: another offset or length is another part */
    stk__memotab *u = stk__memotab_create("stkvidx", "STKVIX01");
    stk__memo *m = stk__memo_create(2, 1 << 20);
    T_CHECK(!stk__memotab_get(u, f, 101, 50, m, 0));
    T_CHECK(!stk__memotab_get(u, f, 100, 51, m, 1));
    T_CHECK(stk__memotab_get(u, f, 100, 50, m, 1));
    /* a blob derived again replaces the kept one */
    T_EQ(stk__memotab_put(u, f, 100, 50, "again", 5), 0);
    stk__memotab_destroy(u);
    stk__memo_destroy(m);
    T_EQ(found(f), -1);
    stk__vfs_close(f);
    teardown();
    return 0;
}

static int test_damaged_or_stale_table_ignored_whole(void)
{
    T_CHECK(setup() == 0);
    stk__file *f = NULL;
    T_OK(stk__vfs_open(g_shard, &f, NULL, 0));
    stk__memotab *t = stk__memotab_create("stkvidx", "STKVIX01");
    T_EQ(put_parts(t, f), 0);
    stk__memotab_destroy(t);
    T_EQ(found(f), N_PARTS);
    FILE *r = fopen(g_side, "rb");
    T_CHECK(r != NULL);
    uint8_t good[4096];
    size_t len = fread(good, 1, sizeof(good), r);
    fclose(r);
    T_CHECK(len > 64 && len < sizeof(good));
    for (size_t k = 0; k < len; k++) { /* any byte: refused, whole */
        good[k] ^= 0x20;
        FILE *w = fopen(g_side, "wb");
        T_CHECK(fwrite(good, 1, len, w) == len && fclose(w) == 0);
        T_CHECKF(found(f) == 0, "byte %zu", k);
        good[k] ^= 0x20;
    }
    /* sealed, but the layout does not hold: a count past the parts, a blob length past the
     * body, another blob layout's magic */
    uint64_t id[3];
    T_CHECK(stk__idx_identity(f, id));
    for (int c = 0; c < 4; c++) {
        uint8_t b[4096];
        memcpy(b, good, len);
        if (c == 0)
            stk__st64(b + STK__IDX_HEAD + 8, N_PARTS + 1);
        else if (c == 1)
            stk__st64(b + STK__IDX_HEAD + 16 + 16, 1u << 20);
        else if (c == 2)
            memcpy(b + STK__IDX_HEAD, "STKVIX02", 8);
        /* c == 3: resealed unchanged: found */
        T_CHECK(stk__idx_store_local(g_shard, "stkvidx", b, len) == STK__IDX_BESIDE);
        T_CHECKF(found(f) == (c == 3 ? N_PARTS : 0), "case %d", c);
    }
    /* the shard rewritten (another size and mtime): its table is another version's */
    FILE *w = fopen(g_shard, "ab");
    fputc(0, w);
    fclose(w);
    stk__file *g = NULL;
    T_OK(stk__vfs_open(g_shard, &g, NULL, 0));
    T_EQ(found(g), 0);
    stk__vfs_close(g);
    stk__vfs_close(f);
    teardown();
    return 0;
}

static int test_name_taken_cache_or_unsaved(void)
{
    T_CHECK(setup() == 0);
    stk__file *f = NULL;
    T_OK(stk__vfs_open(g_shard, &f, NULL, 0));
    T_CHECK(mkdir(g_side, 0755) == 0); /* the name taken: no table beside the shard */
    stk__memotab *t = stk__memotab_create("stkvidx", "STKVIX01");
    T_EQ(put_parts(t, f), N_PARTS); /* no cache directory: every blob in memory only */
    stk__memotab_destroy(t);
    T_EQ(found(f), 0);
    char cache[96];
    snprintf(cache, sizeof(cache), "%s/cache", g_dir);
    T_CHECK(setenv("STOKER_CACHE_DIR", cache, 1) == 0);
    t = stk__memotab_create("stkvidx", "STKVIX01");
    T_EQ(put_parts(t, f), 0);
    stk__memotab_destroy(t);
    T_EQ(found(f), N_PARTS); /* from the cache directory */
    unsetenv("STOKER_CACHE_DIR");
    T_EQ(found(f), 0);
    stk__vfs_close(f);
    teardown();
    return 0;
}

T_MAIN(T_CASE(test_round_trip_and_doubling_writes),
       T_CASE(test_damaged_or_stale_table_ignored_whole), T_CASE(test_name_taken_cache_or_unsaved))
