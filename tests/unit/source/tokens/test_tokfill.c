/*
 * test_tokfill.c: the computed ids of a packed row (src/source/tokens/stk_tokfill.c: position
 * ids, padding, -100 labels) against a plain reference loop: int64 and int32, every length
 * around the 16- and 64-byte steps (0..80 and a 2048-id row), every start offset in the row,
 * the values a packed row uses (positions from 0, pad ids 0, -1 and large, -100) and the
 * extremes (wrap-around of the int32 lanes as the scalar cast does), bytes around the run left
 * alone; the same with the benchmarks' scalar fills (stk__tok_fill_use "plain"), and "none"
 * writing nothing.
 */
#include "source/tokens/stk_tokens.h"
#include "t.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXN 2048
#define GUARD 0x5a

/* The reference: the loop stk_tokrows.c had before (one store an id). */
static void fill_ref(void *ids, bool i32, size_t at, size_t n, int64_t first, int64_t step)
{
    for (size_t j = 0; j < n; j++) {
        uint64_t v = (uint64_t)first + (uint64_t)step * j; /* two's complement, no overflow */
        if (i32) {
            int32_t x = (int32_t)(uint32_t)v;
            memcpy((uint8_t *)ids + (at + j) * 4, &x, 4);
        } else {
            memcpy((uint8_t *)ids + (at + j) * 8, &v, 8);
        }
    }
}

static int fill_matches(void)
{
    static const int64_t firsts[] = {
        0, 1, -1, -100, 50256, 7, INT64_MAX - 3, INT32_MAX - 5, INT32_MIN, INT64_MIN};
    static const int64_t steps[] = {0, 1, 3, -1};
    size_t room = (MAXN + 80) * 8 + 128;
    uint8_t *got = malloc(room), *want = malloc(room);
    T_CHECK(got && want);
    size_t checked = 0;
    for (int i32 = 0; i32 < 2; i32++)
        for (size_t f = 0; f < sizeof(firsts) / sizeof(firsts[0]); f++)
            for (size_t s = 0; s < sizeof(steps) / sizeof(steps[0]); s++)
                for (size_t n = 0; n <= MAXN; n = n < 80 ? n + 1 : n == 80 ? MAXN - 1 : n + 1)
                    for (size_t at = 0; at < (n < 80 ? 17u : 3u); at++) {
                        memset(got, GUARD, room);
                        memset(want, GUARD, room);
                        stk__tok_fill(got, i32, at, n, firsts[f], steps[s]);
                        fill_ref(want, i32, at, n, firsts[f], steps[s]);
                        if (memcmp(got, want, room) != 0) {
                            size_t b = 0;
                            while (got[b] == want[b])
                                b++;
                            T_CHECKF(false,
                                     "%s, first %lld, step %lld, n %zu, at %zu: byte %zu is "
                                     "0x%02x, not 0x%02x (ids start at byte %zu)",
                                     i32 ? "int32" : "int64", (long long)firsts[f],
                                     (long long)steps[s], n, at, b, got[b], want[b],
                                     at * (i32 ? 4 : 8));
                        }
                        checked++;
                    }
    free(got);
    free(want);
    T_CHECK(checked > 10000);
    return 0;
}

static int test_fill_matches_plain_loop(void)
{
    if (fill_matches()) /* the vectors */
        return 1;
    T_CHECK(stk__tok_fill_use("plain")); /* the benchmarks' scalar loop */
    if (fill_matches())
        return 1;
    T_CHECK(stk__tok_fill_use("vector"));
    return fill_matches();
}

static int test_fill_use_none_writes_nothing(void)
{
    uint8_t ids[256];
    memset(ids, GUARD, sizeof(ids));
    T_CHECK(!stk__tok_fill_use("fast")); /* an unknown word changes nothing */
    T_CHECK(stk__tok_fill_use("none"));
    stk__tok_fill(ids, false, 0, 32, 5, 1);
    stk__tok_fill(ids, true, 0, 64, 0, 0);
    for (size_t i = 0; i < sizeof(ids); i++)
        T_EQ(ids[i], GUARD);
    T_CHECK(stk__tok_fill_use("vector"));
    stk__tok_fill(ids, false, 0, 32, 5, 1);
    T_EQ(((int64_t *)(void *)ids)[31], 36);
    return 0;
}

/* A row as read_packed lays it out: pieces' positions, then the padding's. */
static int test_positions_of_a_row(void)
{
    int64_t pos[64];
    static const size_t pieces[] = {5, 1, 17, 30};
    size_t at = 0;
    for (size_t k = 0; k < 4; k++) {
        stk__tok_fill(pos, false, at, pieces[k], 0, 1);
        at += pieces[k];
    }
    stk__tok_fill(pos, false, at, 64 - at, 0, 1); /* padding: 11 positions */
    size_t j = 0;
    for (size_t k = 0; k < 5; k++) {
        size_t len = k < 4 ? pieces[k] : 64 - at;
        for (size_t i = 0; i < len; i++, j++)
            T_CHECKF(pos[j] == (int64_t)i, "position %zu is %lld, not %zu", j, (long long)pos[j],
                     i);
    }
    T_EQ(j, 64);
    return 0;
}

T_MAIN(T_CASE(test_fill_matches_plain_loop), T_CASE(test_fill_use_none_writes_nothing),
       T_CASE(test_positions_of_a_row))
