/* test_remote.c: the remote byte sources' pure pieces (retry decision, backoff) and the on-disk
 * cache (fed by an in-memory "remote"), with no network. The loopback S3/HTTP tests are
 * python/tests/test_remote.py. */
#include "io/stk_vfs_http.h"
#include "t.h"

#include <curl/curl.h>
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
} mem_remote;

static stk_status mem_fetch(void *ctx, uint64_t off, void *buf, size_t len, char *err,
                            size_t err_size)
{
    (void)err, (void)err_size;
    mem_remote *m = ctx;
    memcpy(buf, m->data + off, len);
    m->fetches++;
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
    mem_remote m = {obj, 0};
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
    mem_remote m = {obj, 0};
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
            mem_remote m = {obj, 0};
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
       T_CASE(test_cache_settings_per_thread), T_CASE(test_cache_shared_by_processes))
