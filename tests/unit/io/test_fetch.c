/* test_fetch.c: the decisions behind many requests in flight (stk_vfs_fetch.c): coalescing
 * neighbouring byte ranges, widening to cache blocks, how many requests to start, the memory
 * budget; and the cache's block insert (what a coalesced fetch fills). No network: the loopback
 * tests are python/tests/test_remote_transport.py. */
#include "io/stk_vfs_http.h"
#include "t.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define R(o, l) ((stk__brange){(o), (l)})

static int test_coalesce_gap_and_max(void)
{
    /* unsorted input; gaps 10 (joins at gap 16), 100 (does not) */
    stk__brange r[] = {R(200, 50), R(0, 100), R(110, 40)};
    stk__brange out[3];
    uint64_t useful[3];
    size_t k = stk__ranges_coalesce(r, 3, 16, 1 << 20, out, useful);
    T_EQ(k, 2);
    T_EQ(out[0].off, 0);
    T_EQ(out[0].len, 150); /* [0,100) + gap + [110,150) */
    T_EQ(useful[0], 140);
    T_EQ(out[1].off, 200);
    T_EQ(out[1].len, 50);
    T_EQ(useful[1], 50);
    /* sorted in place */
    T_EQ(r[0].off, 0);
    T_EQ(r[2].off, 200);

    /* gap 0: only touching ranges join */
    stk__brange t[] = {R(0, 10), R(10, 10), R(21, 5)};
    k = stk__ranges_coalesce(t, 3, 0, 1000, out, useful);
    T_EQ(k, 2);
    T_EQ(out[0].len, 20);
    T_EQ(out[1].off, 21);

    /* a large gap joins everything up to max; then a new request starts */
    stk__brange m[] = {R(0, 40), R(50, 40), R(100, 40), R(150, 40)};
    k = stk__ranges_coalesce(m, 4, 1000, 140, out, useful);
    T_EQ(k, 2);
    T_EQ(out[0].off, 0);
    T_EQ(out[0].len, 140);
    T_EQ(useful[0], 120);
    T_EQ(out[1].off, 150);
    T_EQ(out[1].len, 40);
    return 0;
}

static int test_coalesce_never_splits_and_dedups(void)
{
    /* a range longer than max is a request of its own, whole */
    stk__brange r[] = {R(0, 10), R(20, 500), R(530, 10)};
    stk__brange out[3];
    uint64_t useful[3];
    size_t k = stk__ranges_coalesce(r, 3, 100, 100, out, useful);
    T_EQ(k, 3);
    T_EQ(out[1].off, 20);
    T_EQ(out[1].len, 500);
    /* overlaps join whatever max says (no byte fetched twice) */
    stk__brange o[] = {R(0, 80), R(50, 80)};
    k = stk__ranges_coalesce(o, 2, 0, 100, out, useful);
    T_EQ(k, 1);
    T_EQ(out[0].len, 130);
    T_EQ(useful[0], 130);
    /* the same record twice, a contained one, and empty ranges: useful bytes counted once */
    stk__brange d[] = {R(100, 50), R(100, 50), R(0, 0), R(110, 10), R(150, 0)};
    k = stk__ranges_coalesce(d, 5, 0, 1000, out, useful);
    T_EQ(k, 1);
    T_EQ(out[0].off, 100);
    T_EQ(out[0].len, 50);
    T_EQ(useful[0], 50);
    /* nothing */
    T_EQ(stk__ranges_coalesce(d, 0, 0, 1000, out, useful), 0);
    return 0;
}

static int test_coalesce_covers_every_range(void)
{
    /* random disjoint ranges (records of a file, in random order): every range lies inside
     * exactly one request, requests are disjoint, sorted, at most max long unless a single range
     * is longer, and useful <= len */
    uint64_t s = 12345;
    for (int round = 0; round < 200; round++) {
        stk__brange r[64], in[64], out[64];
        uint64_t useful[64];
        size_t n = 1 + (size_t)(round % 64);
        uint64_t at = 0;
        for (size_t i = 0; i < n; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            at += (s >> 20) % 2000;
            r[i] = R(at, (s >> 50) % 3000);
            at += r[i].len;
        }
        for (size_t i = n - 1; i > 0; i--) { /* shuffle */
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            size_t j = (size_t)((s >> 33) % (i + 1));
            stk__brange t = r[i];
            r[i] = r[j];
            r[j] = t;
        }
        memcpy(in, r, sizeof(in));
        uint64_t gap = (uint64_t)(round % 7) * 500, max = 4000 + (uint64_t)(round % 5) * 2000;
        size_t k = stk__ranges_coalesce(r, n, gap, max, out, useful);
        for (size_t j = 0; j < k; j++) {
            T_CHECK(useful[j] <= out[j].len);
            T_CHECK(out[j].len > 0);
            if (j)
                T_CHECK(out[j - 1].off + out[j - 1].len <= out[j].off);
            bool single = false;
            for (size_t i = 0; i < n; i++)
                single |= in[i].off == out[j].off && in[i].len == out[j].len;
            T_CHECKF(out[j].len <= max || single, "request %zu: %llu bytes", j,
                     (unsigned long long)out[j].len);
        }
        for (size_t i = 0; i < n; i++) {
            if (!in[i].len)
                continue;
            int hits = 0;
            for (size_t j = 0; j < k; j++)
                hits += out[j].off <= in[i].off && in[i].off + in[i].len <= out[j].off + out[j].len;
            T_CHECKF(hits == 1, "range %zu in %d requests", i, hits);
        }
    }
    return 0;
}

static int test_blocks(void)
{
    stk__brange r[] = {R(5, 10), R(4090, 20), R(9000, 100), R(8192, 0)};
    stk__ranges_to_blocks(r, 4, 4096, 9050);
    T_EQ(r[0].off, 0);
    T_EQ(r[0].len, 4096);
    T_EQ(r[1].off, 0);
    T_EQ(r[1].len, 8192); /* spans two blocks */
    T_EQ(r[2].off, 8192);
    T_EQ(r[2].len, 9050 - 8192); /* the last block is short */
    T_EQ(r[3].off, 8192);
    T_EQ(r[3].len, 0);
    return 0;
}

static int test_in_flight_and_budget(void)
{
    T_EQ(stk__fetch_to_start(0, 100, 16), 16);
    T_EQ(stk__fetch_to_start(10, 100, 16), 6);
    T_EQ(stk__fetch_to_start(16, 100, 16), 0);
    T_EQ(stk__fetch_to_start(20, 100, 16), 0); /* the limit was lowered meanwhile */
    T_EQ(stk__fetch_to_start(3, 2, 16), 2);
    T_EQ(stk__fetch_to_start(0, 5, 0), 1); /* at least one */
    T_EQ(stk__fetch_to_start(1, 5, 0), 0);
    T_CHECK(stk__readahead_admit(0, 100, 100));
    T_CHECK(!stk__readahead_admit(1, 100, 100));
    T_CHECK(!stk__readahead_admit(0, 101, 100));
    T_CHECK(stk__readahead_admit(60, 40, 100));
    T_CHECK(!stk__readahead_admit(UINT64_MAX, 1, 100)); /* no overflow */
    T_CHECK(!stk__readahead_admit(0, 1, 0));
    return 0;
}

static int test_cache_put_fills_blocks(void)
{
    char dir[] = "/tmp/stk_fetch_XXXXXX";
    T_CHECK(mkdtemp(dir) != NULL);
    char err[STK_ERRMSG_SIZE];
    stk__cache *c;
    T_OK(stk__cache_open(dir, 4 * STK_CACHE_BLOCK, &c, err, sizeof(err)));
    uint64_t size = STK_CACHE_BLOCK + 1000;
    uint8_t *obj = malloc(size);
    T_CHECK(obj != NULL);
    for (uint64_t i = 0; i < size; i++)
        obj[i] = (uint8_t)(i * 7 + 3);
    T_CHECK(!stk__cache_has(c, "k", size, 0));
    T_CHECK(stk__cache_put(c, "k", size, 0, obj));
    T_CHECK(stk__cache_put(c, "k", size, 1, obj + STK_CACHE_BLOCK)); /* the short last block */
    T_CHECK(!stk__cache_put(c, "k", size, 2, obj));                  /* past the end */
    T_CHECK(stk__cache_has(c, "k", size, 0) && stk__cache_has(c, "k", size, 1));
    T_CHECK(!stk__cache_has(c, "other", size, 0));
    T_EQ(stk__cache_bytes(dir), size + 8 * (1024 + 1)); /* each entry's checksums: 8 B / 4 KiB */
    /* a read across both blocks is served from them: the fetch is never called */
    uint8_t buf[1500];
    stk__iov v = {buf, sizeof(buf)};
    T_OK(
        stk__cache_read(c, "k", size, STK_CACHE_BLOCK - 1000, &v, 1, NULL, NULL, err, sizeof(err)));
    T_CHECK(memcmp(buf, obj + STK_CACHE_BLOCK - 1000, sizeof(buf)) == 0);
    stk__cache_close(c);
    free(obj);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    T_EQ(system(cmd), 0);
    return 0;
}

T_MAIN(T_CASE(test_coalesce_gap_and_max), T_CASE(test_coalesce_never_splits_and_dedups),
       T_CASE(test_coalesce_covers_every_range), T_CASE(test_blocks),
       T_CASE(test_in_flight_and_budget), T_CASE(test_cache_put_fills_blocks))
