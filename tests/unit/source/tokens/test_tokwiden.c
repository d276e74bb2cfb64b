/*
 * test_tokwiden.c: the widening of stored token ids (src/source/tokens/stk_tokwiden.c) against
 * a plain reference loop, with each instruction set this CPU has (plain loops, SSE2, AVX2): every
 * id width (1, 2, 4, 8 bytes) to int64 and int32, lengths around
 * the 8-id vector steps (0..40 and a 2048-id row), sources at every offset (unaligned rows and
 * labels one id on), ids at the extremes of each width; a window's input_ids and labels in one
 * pass; and nothing written past the row.
 */
#include "source/tokens/stk_tokens.h"
#include "t.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXN 2048
#define GUARD 0x5a

/* Id k of a test stream of `width`-byte ids: extremes (0, max, max - 1, the sign bit) mixed with
 * pseudo-random values. */
static uint64_t id_at(uint32_t width, size_t k)
{
    uint64_t max = width == 8 ? UINT64_MAX : (1ULL << (8 * width)) - 1;
    static const uint64_t picks[] = {
        0, 1, UINT64_MAX, UINT64_MAX - 1, 0x8000000000000000ULL, 0x7fffffffffffffffULL};
    uint64_t v = k % 5 == 0 ? picks[(k / 5) % 6] : stk__mix64(k * 7919 + width);
    if (v == 0x8000000000000000ULL) /* the sign bit of this width */
        v = 1ULL << (8 * width - 1);
    return v & max;
}

static void put(uint8_t *p, uint32_t width, uint64_t v)
{
    memcpy(p, &v, width); /* little-endian, as the library */
}

/* What the reference loop writes for id v: (int64_t)v or (int32_t)v. */
static int check_row(const uint8_t *got, const uint8_t *src, uint32_t width, size_t n, bool i32,
                     const char *what, size_t at)
{
    size_t es = i32 ? 4 : 8;
    for (size_t j = 0; j < n; j++) {
        uint64_t v = 0;
        memcpy(&v, src + j * width, width);
        int64_t want = i32 ? (int64_t)(int32_t)(uint32_t)v : (int64_t)v;
        int64_t have;
        if (i32) {
            int32_t h;
            memcpy(&h, got + j * es, 4);
            have = h;
        } else {
            memcpy(&have, got + j * es, 8);
        }
        T_CHECKF(have == want,
                 "%s: width %u, %s, n %zu, source offset %zu: id %zu is %lld, not %lld", what,
                 width, i32 ? "int32" : "int64", n, at, j, (long long)have, (long long)want);
    }
    for (size_t j = n * es; j < n * es + 64; j++)
        T_CHECKF(got[j] == GUARD, "%s: width %u, n %zu: byte %zu past the row written", what, width,
                 n, j);
    return 0;
}

static int check_all(void)
{
    static const uint32_t widths[] = {1, 2, 4, 8};
    uint8_t *src = malloc((MAXN + 16) * 8);
    uint8_t *x = malloc(MAXN * 8 + 64), *y = malloc(MAXN * 8 + 64);
    T_CHECK(src && x && y);
    for (size_t w = 0; w < 4; w++) {
        uint32_t width = widths[w];
        for (size_t k = 0; k < MAXN + 16; k++)
            put(src + k * width, width, id_at(width, k));
        for (int i32 = 0; i32 < 2; i32++) {
            for (size_t n = 0; n <= MAXN; n = n < 40 ? n + 1 : n == 40 ? MAXN - 1 : n + 1) {
                for (size_t at = 0; at < (n < 40 ? 9u : 2u); at++) { /* ids at any alignment */
                    const uint8_t *s = src + at * width;
                    memset(x, GUARD, MAXN * 8 + 64);
                    memset(y, GUARD, MAXN * 8 + 64);
                    stk__tok_widen(s, width, n, x, i32);
                    if (check_row(x, s, width, n, i32, "widen", at))
                        return 1;
                    memset(x, GUARD, MAXN * 8 + 64);
                    stk__tok_window(s, width, n, x, y, i32);
                    if (check_row(x, s, width, n, i32, "window input_ids", at) ||
                        check_row(y, s + width, width, n, i32, "window labels", at))
                        return 1;
                }
            }
        }
    }
    free(src);
    free(x);
    free(y);
    return 0;
}

static int test_widen_matches_plain_loop(void)
{
    static const char *const isas[] = {"plain", "sse2", "avx2"};
    int n_used = 0;
    for (size_t k = 0; k < 3; k++) {
        if (!stk__tok_widen_use(isas[k])) {
            printf("  %s: not on this CPU or build\n", isas[k]);
            continue;
        }
        n_used++;
        if (check_all()) {
            printf("  (with %s)\n", isas[k]);
            return 1;
        }
    }
    T_CHECK(n_used >= 1);
#if defined(__x86_64__)
    T_CHECK(n_used >= 2); /* SSE2 is in every x86-64 CPU */
#endif
    return 0;
}

T_MAIN(T_CASE(test_widen_matches_plain_loop))
