/* test_remote.c: the remote byte sources' pure pieces (retry decision, backoff) and the on-disk
 * cache (fed by an in-memory "remote"), with no network. The loopback S3/HTTP tests are
 * python/tests/test_remote.py. */
#include "io/stk_vfs_http.h"
#include "t.h"

#include <curl/curl.h>
#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>

static int test_retry_decision(void)
{
    /* connection errors and timeouts */
    T_CHECK(stk__http_retryable(CURLE_COULDNT_CONNECT, 0, false));
    T_CHECK(stk__http_retryable(CURLE_OPERATION_TIMEDOUT, 0, false));
    T_CHECK(stk__http_retryable(CURLE_RECV_ERROR, 0, false));
    T_CHECK(stk__http_retryable(CURLE_GOT_NOTHING, 0, false));
    T_CHECK(stk__http_retryable(CURLE_PARTIAL_FILE, 200, false));
    /* 5xx (503 SlowDown), 429, 408 */
    T_CHECK(stk__http_retryable(CURLE_OK, 500, false));
    T_CHECK(stk__http_retryable(CURLE_OK, 503, false));
    T_CHECK(stk__http_retryable(CURLE_OK, 429, false));
    T_CHECK(stk__http_retryable(CURLE_OK, 408, false));
    /* a short body */
    T_CHECK(stk__http_retryable(CURLE_OK, 206, true));
    /* not: answers that will not change, local errors */
    T_CHECK(!stk__http_retryable(CURLE_OK, 404, false));
    T_CHECK(!stk__http_retryable(CURLE_OK, 403, false));
    T_CHECK(!stk__http_retryable(CURLE_OK, 416, false));
    T_CHECK(!stk__http_retryable(CURLE_OK, 206, false));
    T_CHECK(!stk__http_retryable(CURLE_WRITE_ERROR, 206, false));
    T_CHECK(!stk__http_retryable(CURLE_URL_MALFORMAT, 0, false));
    return 0;
}

static int test_backoff(void)
{
    /* attempt k waits within [cap/2, cap], cap = base * 2^(k-1) up to max */
    for (uint64_t rnd = 0; rnd < 1000; rnd += 37) {
        uint64_t w1 = stk__http_backoff_ms(1, 100, 5000, rnd);
        uint64_t w3 = stk__http_backoff_ms(3, 100, 5000, rnd);
        uint64_t w20 = stk__http_backoff_ms(20, 100, 5000, rnd);
        T_CHECKF(w1 >= 50 && w1 <= 100, "%llu", (unsigned long long)w1);
        T_CHECKF(w3 >= 200 && w3 <= 400, "%llu", (unsigned long long)w3);
        T_CHECKF(w20 >= 2500 && w20 <= 5000, "%llu", (unsigned long long)w20);
    }
    /* jitter: different draws give different waits */
    T_CHECK(stk__http_backoff_ms(4, 100, 5000, 1) != stk__http_backoff_ms(4, 100, 5000, 2));
    T_EQ(stk__http_backoff_ms(1, 0, 0, 12345), 0);
    return 0;
}

/* ---- the cache over an in-memory object ---- */

typedef struct mem_remote {
    const uint8_t *data;
    int fetches;
    size_t last_len; /* bytes of the last fetch */
} mem_remote;

static stk_status mem_fetch(void *ctx, uint64_t off, void *buf, size_t len, char *err,
                            size_t err_size)
{
    (void)err, (void)err_size;
    mem_remote *m = ctx;
    memcpy(buf, m->data + off, len);
    m->fetches++;
    m->last_len = len;
    return STK_OK;
}

static char g_dir[256];

static void remove_dir(void)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "  could not remove %s\n", g_dir);
}

/* A fresh cache directory, removed when the case's process exits. */
static int make_dir(void)
{
    snprintf(g_dir, sizeof(g_dir), "/tmp/stk_cache_test_%d_XXXXXX", (int)getpid());
    if (!mkdtemp(g_dir))
        return 1;
    atexit(remove_dir);
    return 0;
}

static int test_cache_limit_below_one_block(void)
{
    T_CHECK(make_dir() == 0);
    stk__cache *c = NULL;
    char err[512];
    T_EQ(stk__cache_open(g_dir, STK_CACHE_BLOCK - 1, &c, err, sizeof(err)), STK_EINVAL);
    T_CHECKF(strstr(err, "smaller than one cache block") != NULL, "%s", err);
    T_CHECK(c == NULL);
    return 0;
}

static int test_cache_hits_and_limit(void)
{
    T_CHECK(make_dir() == 0);
    const size_t size = (size_t)(5 * STK_CACHE_BLOCK + 12345);
    uint8_t *obj = malloc(size), *out = malloc(size);
    T_CHECK(obj && out);
    for (size_t i = 0; i < size; i++)
        obj[i] = (uint8_t)(i * 7 + (i >> 13));
    mem_remote m = {obj, 0, 0};
    stk__cache *c = NULL;
    char err[512];
    const uint64_t limit = 3 * STK_CACHE_BLOCK;
    T_OK(stk__cache_open(g_dir, limit, &c, err, sizeof(err)));
    /* a read across a block boundary, in two pieces */
    uint64_t off = STK_CACHE_BLOCK - 100;
    stk__iov v[2] = {{out, 50}, {out + 50, 200}};
    T_OK(stk__cache_read(c, "k1", size, off, v, 2, mem_fetch, &m, err, sizeof(err)));
    T_CHECK(memcmp(out, obj + off, 250) == 0);
    T_EQ(m.fetches, 2);
    /* again: both blocks are hits */
    memset(out, 0, 250);
    T_OK(stk__cache_read(c, "k1", size, off, v, 2, mem_fetch, &m, err, sizeof(err)));
    T_CHECK(memcmp(out, obj + off, 250) == 0);
    T_EQ(m.fetches, 2);
    /* the whole object (6 blocks, the last short) through a 3-block cache: the bytes are right,
     * the entries never above the limit */
    stk__iov all = {out, size};
    T_OK(stk__cache_read(c, "k1", size, 0, &all, 1, mem_fetch, &m, err, sizeof(err)));
    T_CHECK(memcmp(out, obj, size) == 0);
    T_CHECKF(stk__cache_bytes(g_dir) <= limit, "%llu", (unsigned long long)stk__cache_bytes(g_dir));
    /* the most recent blocks stayed: reading the last one again fetches nothing */
    int before = m.fetches;
    stk__iov last = {out, 10};
    T_OK(stk__cache_read(c, "k1", size, size - 10, &last, 1, mem_fetch, &m, err, sizeof(err)));
    T_EQ(m.fetches, before);
    T_CHECK(memcmp(out, obj + size - 10, 10) == 0);
    /* another key (a new ETag) is another entry */
    T_OK(stk__cache_read(c, "k2", size, size - 10, &last, 1, mem_fetch, &m, err, sizeof(err)));
    T_EQ(m.fetches, before + 1);
    /* past the end is an error naming the offset */
    T_EQ(stk__cache_read(c, "k1", size, size - 5, &last, 1, mem_fetch, &m, err, sizeof(err)),
         STK_EFORMAT);
    T_CHECKF(strstr(err, "past the end") != NULL, "%s", err);
    stk__cache_close(c);
    free(obj);
    free(out);
    return 0;
}

/* The total the cache keeps in its .lock file (what inserts count against the limit). */
static uint64_t lock_total(void)
{
    char path[300], buf[32] = {0};
    snprintf(path, sizeof(path), "%s/.lock", g_dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return UINT64_MAX;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    return n ? strtoull(buf, NULL, 10) : UINT64_MAX;
}

/* Aux entries (the remote indexes): kept, replaced, counted in the limit, refused when too large
 * or badly named, and evicted only once no block is left to evict. */
static int test_cache_aux_entries(void)
{
    T_CHECK(make_dir() == 0);
    const size_t size = (size_t)(5 * STK_CACHE_BLOCK + 12345), big = 2 * STK_CACHE_BLOCK;
    uint8_t *obj = malloc(size), *out = malloc(size);
    T_CHECK(obj && out);
    for (size_t i = 0; i < size; i++)
        obj[i] = (uint8_t)(i * 13 + (i >> 11));
    mem_remote m = {obj, 0, 0};
    stk__cache *c = NULL;
    char err[512];
    const uint64_t limit = 3 * STK_CACHE_BLOCK;
    T_OK(stk__cache_open(g_dir, limit, &c, err, sizeof(err)));
    uint8_t *got = NULL;
    size_t n = 0;
    T_CHECK(!stk__cache_aux_get(c, "obj", "stkidx", &got, &n) && got == NULL && n == 0);
    T_CHECK(stk__cache_aux_put(c, "obj", "stkidx", obj, 1000));
    T_CHECK(stk__cache_aux_get(c, "obj", "stkidx", &got, &n));
    T_CHECK(n == 1000 && memcmp(got, obj, n) == 0);
    free(got);
    T_EQ(stk__cache_bytes(g_dir), 1000);
    T_EQ(lock_total(), 1000);
    /* another name, another key: other entries */
    T_CHECK(!stk__cache_aux_get(c, "obj", "tfidx", &got, &n));
    T_CHECK(!stk__cache_aux_get(c, "obj2", "stkidx", &got, &n));
    /* names that could be a block's, or a path, or too long, are refused */
    const char *bad[] = {"", "7", "0idx", "a-b", "a/b", "Idx", "abcdefghijklmnopq"};
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        T_CHECKF(!stk__cache_aux_put(c, "obj", bad[k], obj, 10), "%s", bad[k]);
        T_CHECKF(!stk__cache_aux_get(c, "obj", bad[k], &got, &n), "%s", bad[k]);
    }
    T_CHECK(!stk__cache_aux_put(c, "obj", "stkidx", obj, 0));
    T_CHECK(!stk__cache_aux_put(c, "obj", "huge", obj, (size_t)limit + 1));
    /* replaced (a rebuilt index), the total following */
    T_CHECK(stk__cache_aux_put(c, "obj", "stkidx", obj + 7, 500));
    T_CHECK(stk__cache_aux_get(c, "obj", "stkidx", &got, &n));
    T_CHECK(n == 500 && memcmp(got, obj + 7, n) == 0);
    free(got);
    T_EQ(stk__cache_bytes(g_dir), 500);
    T_EQ(lock_total(), 500);
    /* the whole 6-block object through the 3-block cache: blocks evict blocks, the index stays */
    stk__iov all = {out, size};
    T_OK(stk__cache_read(c, "obj", size, 0, &all, 1, mem_fetch, &m, err, sizeof(err)));
    T_CHECK(memcmp(out, obj, size) == 0);
    T_CHECK(stk__cache_aux_get(c, "obj", "stkidx", &got, &n) && n == 500);
    free(got);
    T_CHECK(stk__cache_bytes(g_dir) <= limit && lock_total() == stk__cache_bytes(g_dir));
    /* a large index: blocks go first, the small index stays */
    T_CHECK(stk__cache_aux_put(c, "obj2", "stkidx", obj, big));
    T_CHECK(stk__cache_aux_get(c, "obj", "stkidx", &got, &n) && n == 500);
    free(got);
    T_CHECK(stk__cache_bytes(g_dir) <= limit && lock_total() == stk__cache_bytes(g_dir));
    /* another one that only fits once an index leaves: indexes are evicted too */
    T_CHECK(stk__cache_aux_put(c, "obj3", "stkidx", obj + 1, big));
    T_CHECK(stk__cache_aux_get(c, "obj3", "stkidx", &got, &n) && n == big);
    T_CHECK(memcmp(got, obj + 1, big) == 0);
    free(got);
    T_CHECK(!stk__cache_aux_get(c, "obj2", "stkidx", &got, &n));
    T_CHECK(stk__cache_bytes(g_dir) <= limit && lock_total() == stk__cache_bytes(g_dir));
    stk__cache_close(c);
    free(obj);
    free(out);
    return 0;
}

/* The cache settings of a dataset (stk_dataset_opts' cache_dir / cache_limit) reach the byte
 * sources' open through the thread; unset ones come from the environment. */
static int test_cache_settings_per_thread(void)
{
    T_CHECK(make_dir() == 0);
    char env_dir[300], err[512];
    snprintf(env_dir, sizeof(env_dir), "%s/env", g_dir);
    setenv("STOKER_CACHE_DIR", env_dir, 1);
    setenv("STOKER_CACHE_LIMIT", "8M", 1);
    stk__cache *c = NULL, *e = NULL;
    T_OK(stk__cache_from_env(&e, err, sizeof(err))); /* no settings: the environment's */
    T_CHECK(e != NULL);
    stk__vfs_opts o = {.cache_dir = g_dir, .cache_limit = 16 << 20};
    T_CHECK(stk__vfs_opts_use(&o) == NULL);
    T_OK(stk__cache_from_env(&c, err, sizeof(err)));
    T_CHECK(c != NULL && c != e);
    o.cache_dir = ""; /* no cache, whatever the environment says */
    T_OK(stk__cache_from_env(&c, err, sizeof(err)));
    T_CHECK(c == NULL);
    o.cache_dir = NULL; /* the environment's directory with this limit */
    T_OK(stk__cache_from_env(&c, err, sizeof(err)));
    T_CHECK(c != NULL && c != e);
    o.cache_limit = 0; /* both from the environment: the same cache as before */
    T_OK(stk__cache_from_env(&c, err, sizeof(err)));
    T_CHECK(c == e);
    T_CHECK(stk__vfs_opts_use(NULL) == &o);
    setenv("STOKER_CACHE_LIMIT", "1M", 1); /* below one block: a clear error */
    T_EQ(stk__cache_from_env(&c, err, sizeof(err)), STK_EINVAL);
    T_CHECKF(strstr(err, "smaller than one cache block") != NULL, "%s", err);

    /* stk_dataset_open_v2 checks cache_limit before reading anything */
    const char *paths[] = {"s3://bucket/never-read.stk"};
    stk_dataset_opts d;
    stk_dataset_opts_init(&d);
    d.paths = paths;
    d.n_paths = 1;
    d.cache_dir = g_dir;
    d.cache_limit = "lots";
    stk_dataset *ds = NULL;
    T_EQ(stk_dataset_open_v2(&d, &ds), STK_EINVAL);
    T_CHECKF(strstr(stk_last_errmsg(), "cache_limit=lots: not a size") != NULL, "%s",
             stk_last_errmsg());
    d.cache_limit = "1MB";
    T_EQ(stk_dataset_open_v2(&d, &ds), STK_EINVAL);
    T_CHECKF(strstr(stk_last_errmsg(), "smaller than one cache block") != NULL, "%s",
             stk_last_errmsg());
    T_CHECK(ds == NULL);
    return 0;
}

/* The path of the one block entry of the cache whose name ends with "-<blk>". */
static int block_entry(char *out, size_t size, int blk)
{
    char dir[300], suffix[16];
    snprintf(dir, sizeof(dir), "%s/entries", g_dir);
    snprintf(suffix, sizeof(suffix), "-%d", blk);
    DIR *d = opendir(dir);
    struct dirent *e;
    int found = 0;
    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name), k = strlen(suffix);
        if (n > k && strcmp(e->d_name + n - k, suffix) == 0) {
            snprintf(out, size, "%s/%s", dir, e->d_name);
            found++;
        }
    }
    if (d)
        closedir(d);
    return found == 1 ? 0 : -1;
}

/* Flip one bit of the file at `off`. */
static int flip_byte(const char *path, long off)
{
    FILE *f = fopen(path, "r+b");
    if (!f || fseek(f, off, SEEK_SET) != 0)
        return -1;
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ 0x10, f);
    return fclose(f);
}

static stk_status failing_fetch(void *ctx, uint64_t off, void *buf, size_t len, char *err,
                                size_t err_size)
{
    (void)ctx, (void)buf, (void)len;
    return stk__set_error(err, err_size, STK_EIO, "GET at %llu failed (the server is down)",
                          (unsigned long long)off);
}

/* A cache block damaged on disk (a flipped bit in its data or its checksums, a cut, an entry of
 * the layout before checksums) is found by its own checksum, evicted and fetched again: the
 * bytes read are the object's, and the next read is a hit again. When it cannot be fetched
 * again, the error names the cache file (issue 30: the damage was served to every reader). */
static int test_cache_damaged_block_refetched(void)
{
    T_CHECK(make_dir() == 0);
    const size_t size = (size_t)(STK_CACHE_BLOCK + 5000);
    uint8_t *obj = malloc(size), out[300];
    T_CHECK(obj);
    for (size_t i = 0; i < size; i++)
        obj[i] = (uint8_t)(i * 31 + (i >> 9));
    mem_remote m = {obj, 0, 0};
    stk__cache *c = NULL;
    char err[512], entry[600];
    T_OK(stk__cache_open(g_dir, 4 * STK_CACHE_BLOCK, &c, err, sizeof(err)));
    stk__iov v = {out, sizeof(out)};
    const uint64_t at = 100000;
    T_OK(stk__cache_read(c, "obj", size, at, &v, 1, mem_fetch, &m, err, sizeof(err)));
    T_EQ(m.fetches, 1);
    T_CHECK(block_entry(entry, sizeof(entry), 0) == 0);
    struct stat st0;
    T_CHECK(stat(entry, &st0) == 0);
    /* damage: in the bytes read, elsewhere in the block, in the checksums, a cut */
    long where[] = {(long)at + 7, 3000000, (long)(STK_CACHE_BLOCK + 8 * (at / 4096)), -1};
    for (int k = 0; k < 4; k++) {
        if (where[k] >= 0)
            T_CHECK(flip_byte(entry, where[k]) == 0);
        else
            T_CHECK(truncate(entry, (off_t)STK_CACHE_BLOCK - 1) == 0);
        int before = m.fetches;
        memset(out, 0, sizeof(out));
        stk__iov all = {out, sizeof(out)};
        uint64_t off = where[k] == 3000000 ? 2999990 : at;
        T_OK(stk__cache_read(c, "obj", size, off, &all, 1, mem_fetch, &m, err, sizeof(err)));
        T_CHECKF(memcmp(out, obj + off, sizeof(out)) == 0, "damage %d: wrong bytes served", k);
        T_CHECKF(m.fetches == before + 1, "damage %d: %d fetches", k, m.fetches - before);
        T_OK(stk__cache_read(c, "obj", size, off, &all, 1, mem_fetch, &m, err, sizeof(err)));
        T_EQ(m.fetches, before + 1); /* repaired: a hit again */
        struct stat st;
        T_CHECK(stat(entry, &st) == 0 && st.st_size == st0.st_size);
    }
    /* an entry of the layout before checksums (the block's bytes alone) is replaced */
    FILE *f = fopen(entry, "wb");
    T_CHECK(f && fwrite(obj, 1, STK_CACHE_BLOCK, f) == STK_CACHE_BLOCK && fclose(f) == 0);
    int before = m.fetches;
    T_OK(stk__cache_read(c, "obj", size, at, &v, 1, mem_fetch, &m, err, sizeof(err)));
    T_CHECK(memcmp(out, obj + at, sizeof(out)) == 0 && m.fetches == before + 1);
    /* damaged and the object unreachable: the error names the cache file and says why */
    T_CHECK(flip_byte(entry, (long)at + 1) == 0);
    T_EQ(stk__cache_read(c, "obj", size, at, &v, 1, failing_fetch, NULL, err, sizeof(err)),
         STK_EIO);
    T_CHECKF(strstr(err, entry) && strstr(err, "checksum") && strstr(err, "server is down"), "%s",
             err);
    T_CHECK(block_entry(entry, sizeof(entry), 0) != 0); /* evicted, nothing put back */
    /* the total may count bytes the damage took away, never fewer than there are */
    T_CHECK(lock_total() >= stk__cache_bytes(g_dir));
    stk__cache_close(c);
    free(obj);
    return 0;
}

/* With a `checked` bitmap (what an open remote file keeps), a chunk's checksum is verified on
 * its first hit only: later hits read just their bytes. A new bitmap (the next open) checks
 * again, and finds damage done since. */
static int test_cache_chunks_checked_once_per_open(void)
{
    T_CHECK(make_dir() == 0);
    const size_t size = (size_t)(STK_CACHE_BLOCK + 5000);
    uint8_t *obj = malloc(size), out[300];
    T_CHECK(obj);
    for (size_t i = 0; i < size; i++)
        obj[i] = (uint8_t)(i * 29 + (i >> 8));
    mem_remote m = {obj, 0, 0};
    stk__cache *c = NULL;
    char err[512], entry[600];
    T_OK(stk__cache_open(g_dir, 4 * STK_CACHE_BLOCK, &c, err, sizeof(err)));
    size_t words = stk__cache_checked_words(size);
    _Atomic uint64_t *first = calloc(words, sizeof(uint64_t)),
                     *second = calloc(words, sizeof(uint64_t));
    T_CHECK(first && second);
    stk__iov v = {out, sizeof(out)};
    const uint64_t at = 9000; /* chunk 2 */
    T_OK(stk__cache_read_checked(c, "o", size, at, &v, 1, mem_fetch, &m, first, err,
                                 sizeof(err))); /* a miss: nothing checked yet */
    T_EQ(first[0], 0);
    T_OK(stk__cache_read_checked(c, "o", size, at, &v, 1, mem_fetch, &m, first, err,
                                 sizeof(err))); /* a hit: chunk 2 checked */
    T_EQ(first[0], 1u << 2);
    T_CHECK(block_entry(entry, sizeof(entry), 0) == 0 && flip_byte(entry, (long)at + 5) == 0);
    T_OK(stk__cache_read_checked(c, "o", size, at, &v, 1, mem_fetch, &m, first, err, sizeof(err)));
    T_EQ(m.fetches, 1); /* checked before: read as it is (the damage is not seen) */
    T_CHECK(out[5] != obj[at + 5]);
    T_OK(stk__cache_read_checked(c, "o", size, at, &v, 1, mem_fetch, &m, second, err,
                                 sizeof(err))); /* the next open checks: damage found */
    T_EQ(m.fetches, 2);
    T_CHECK(memcmp(out, obj + at, sizeof(out)) == 0);
    stk__cache_close(c);
    free((void *)first);
    free((void *)second);
    free(obj);
    return 0;
}

/* The cache directory removed while the process lives (a user clearing it between runs in a
 * notebook, a tmp cleaner): the next insert and the next open of the same cache recreate it, so
 * blocks are kept again, instead of every read fetching a whole block that can never be kept
 * (issue 30: 80 samples/s against 580 with no cache at all, and no message). */
static int test_cache_dir_removed_is_recreated(void)
{
    T_CHECK(make_dir() == 0);
    char dir[300], err[512], lock[320], cmd[800];
    snprintf(dir, sizeof(dir), "%s/c", g_dir);
    snprintf(lock, sizeof(lock), "%s/.lock", dir);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    const size_t size = (size_t)(3 * STK_CACHE_BLOCK);
    uint8_t *obj = malloc(size), out[100];
    T_CHECK(obj);
    for (size_t i = 0; i < size; i++)
        obj[i] = (uint8_t)(i * 11 + (i >> 10));
    mem_remote m = {obj, 0, 0};
    stk__vfs_opts o = {.cache_dir = dir, .cache_limit = 64 << 20};
    stk__vfs_opts_use(&o);
    stk__cache *c = NULL;
    T_OK(stk__cache_from_env(&c, err, sizeof(err)));
    stk__iov v = {out, sizeof(out)};
    T_OK(stk__cache_read(c, "obj", size, 10, &v, 1, mem_fetch, &m, err, sizeof(err)));
    T_EQ(m.fetches, 1);
    /* removed under the running process: the next miss puts its block into a new directory */
    T_EQ(system(cmd), 0);
    T_OK(stk__cache_read(c, "obj", size, STK_CACHE_BLOCK + 10, &v, 1, mem_fetch, &m, err,
                         sizeof(err)));
    T_CHECK(memcmp(out, obj + STK_CACHE_BLOCK + 10, sizeof(out)) == 0);
    T_OK(stk__cache_read(c, "obj", size, STK_CACHE_BLOCK + 20, &v, 1, mem_fetch, &m, err,
                         sizeof(err)));
    T_EQ(m.fetches, 2); /* kept: a hit */
    T_CHECK(access(lock, F_OK) == 0);
    T_CHECK(stk__cache_bytes(dir) > 0);
    /* removed between two datasets: the next open of the same cache recreates it */
    T_EQ(system(cmd), 0);
    stk__cache *again = NULL;
    T_OK(stk__cache_from_env(&again, err, sizeof(err)));
    T_CHECK(again == c);
    T_CHECK(access(lock, F_OK) == 0);
    T_OK(stk__cache_read(c, "obj", size, 2 * STK_CACHE_BLOCK, &v, 1, mem_fetch, &m, err,
                         sizeof(err)));
    T_OK(stk__cache_read(c, "obj", size, 2 * STK_CACHE_BLOCK + 1, &v, 1, mem_fetch, &m, err,
                         sizeof(err)));
    T_EQ(m.fetches, 3);
    /* a cache that cannot be written (its tmp/ a file): misses fetch only what they read,
     * not whole blocks that cannot be kept */
    char tmpdir[320];
    snprintf(tmpdir, sizeof(tmpdir), "%s/tmp", dir);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' && touch '%s'", tmpdir, tmpdir);
    T_EQ(system(cmd), 0);
    stk__iov w = {out, 40};
    T_OK(stk__cache_read(c, "other", size, 5, &w, 1, mem_fetch, &m, err, sizeof(err)));
    T_EQ(m.last_len, STK_CACHE_BLOCK); /* tried to keep it: could not */
    T_OK(stk__cache_read(c, "other", size, 50, &w, 1, mem_fetch, &m, err, sizeof(err)));
    T_CHECK(memcmp(out, obj + 50, 40) == 0);
    T_EQ(m.last_len, 40);
    T_OK(stk__cache_read(c, "obj", size, 2 * STK_CACHE_BLOCK + 5, &v, 1, mem_fetch, &m, err,
                         sizeof(err)));
    T_EQ(m.fetches, 5); /* blocks kept before are still hits */
    /* ... and the next open says why it cannot be written */
    T_EQ(stk__cache_from_env(&again, err, sizeof(err)), STK_EIO);
    T_CHECKF(strstr(err, tmpdir) && strstr(err, "not a directory"), "%s", err);
    /* a directory that cannot be made again: the open says so */
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    T_EQ(system(cmd), 0);
    FILE *f = fopen(dir, "w"); /* a file where the directory was */
    T_CHECK(f && fclose(f) == 0);
    T_EQ(stk__cache_from_env(&again, err, sizeof(err)), STK_EIO);
    T_CHECKF(strstr(err, dir) != NULL, "%s", err);
    stk__vfs_opts_use(NULL);
    free(obj);
    return 0;
}

/* Several processes filling one small cache at once: every byte right, entries within the limit. */
static int test_cache_shared_by_processes(void)
{
    T_CHECK(make_dir() == 0);
    const size_t size = (size_t)(8 * STK_CACHE_BLOCK);
    uint8_t *obj = malloc(size);
    T_CHECK(obj);
    for (size_t i = 0; i < size; i++)
        obj[i] = (uint8_t)(i * 13 + (i >> 11));
    const uint64_t limit = 2 * STK_CACHE_BLOCK + 1000;
    pid_t kids[3];
    for (int k = 0; k < 3; k++) {
        kids[k] = fork();
        T_CHECK(kids[k] >= 0);
        if (kids[k] == 0) {
            stk__cache *c = NULL;
            char err[512];
            mem_remote m = {obj, 0, 0};
            uint8_t buf[4096];
            int bad = stk__cache_open(g_dir, limit, &c, err, sizeof(err)) != STK_OK;
            for (int r = 0; r < 200 && !bad; r++) {
                uint64_t off = ((uint64_t)(r * 7919 + k * 104729) * 4099) % (size - sizeof(buf));
                stk__iov v = {buf, sizeof(buf)};
                bad = stk__cache_read(c, "shared", size, off, &v, 1, mem_fetch, &m, err,
                                      sizeof(err)) != STK_OK ||
                      memcmp(buf, obj + off, sizeof(buf)) != 0 || stk__cache_bytes(g_dir) > limit;
            }
            stk__cache_close(c);
            _exit(bad);
        }
    }
    for (int k = 0; k < 3; k++) {
        int st = 0;
        T_CHECK(waitpid(kids[k], &st, 0) == kids[k]);
        T_CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d: status %d", k, st);
    }
    T_CHECK(stk__cache_bytes(g_dir) <= limit);
    free(obj);
    return 0;
}

T_MAIN(T_CASE(test_retry_decision), T_CASE(test_backoff), T_CASE(test_cache_limit_below_one_block),
       T_CASE(test_cache_hits_and_limit), T_CASE(test_cache_aux_entries),
       T_CASE(test_cache_settings_per_thread), T_CASE(test_cache_damaged_block_refetched),
       T_CASE(test_cache_chunks_checked_once_per_open), T_CASE(test_cache_dir_removed_is_recreated),
       T_CASE(test_cache_shared_by_processes))
