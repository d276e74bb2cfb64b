/*
 * stk_tokfill.c: the ids of a packed row that are computed, not read: position ids counting up
 * from 0 in each piece, and the constant runs (padding's pad_id and position ids, labels of -100),
 * as int64 or int32.
 *
 * The plain loop `d[j] = first + step * j` stays scalar at gcc -O2: its vectoriser's "very cheap"
 * cost model refuses a loop whose count is not a known multiple of the vector (-fopt-info-vec:
 * "couldn't vectorize loop"), so a row's positions went out one 8-byte store an id. Here a run is
 * written 64 bytes a step from 16-byte vectors (GCC's generic vectors: SSE2 on x86-64, NEON on
 * arm64), the last few ids by the plain loop, and a run of zeros is a memset. Unsigned lanes:
 * the bits are those of the scalar two's-complement sum, with no signed overflow.
 */
#include "source/tokens/stk_tokens.h"

#include <string.h>

typedef uint64_t u64x2 __attribute__((vector_size(16)));
typedef uint32_t u32x4 __attribute__((vector_size(16)));

/* 16 bytes at p (unaligned). */
#define PUT(p, v) memcpy((p), &(v), 16)

static void fill64(int64_t *d, size_t n, int64_t first, int64_t step)
{
    uint64_t f = (uint64_t)first, s = (uint64_t)step;
    u64x2 v = {f, f + s}, inc = {2 * s, 2 * s};
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        u64x2 v1 = v + inc, v2 = v1 + inc, v3 = v2 + inc;
        PUT(d + j, v);
        PUT(d + j + 2, v1);
        PUT(d + j + 4, v2);
        PUT(d + j + 6, v3);
        v = v3 + inc;
    }
    for (; j < n; j++)
        d[j] = (int64_t)(f + s * j);
}

static void fill32(int32_t *d, size_t n, int64_t first, int64_t step)
{
    uint32_t f = (uint32_t)first, s = (uint32_t)step; /* the low 32 bits of the int64 ids */
    u32x4 v = {f, f + s, f + 2 * s, f + 3 * s}, inc = {4 * s, 4 * s, 4 * s, 4 * s};
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
        u32x4 v1 = v + inc, v2 = v1 + inc, v3 = v2 + inc;
        PUT(d + j, v);
        PUT(d + j + 4, v1);
        PUT(d + j + 8, v2);
        PUT(d + j + 12, v3);
        v = v3 + inc;
    }
    for (; j < n; j++)
        d[j] = (int32_t)(f + s * (uint32_t)j);
}

/* How fills are written: 0 as above, 1 the plain loop, 2 not at all (stk__tok_fill_use). */
static int fill_how;

bool stk__tok_fill_use(const char *how)
{
    int k = !strcmp(how, "vector") ? 0 : !strcmp(how, "plain") ? 1 : !strcmp(how, "none") ? 2 : -1;
    if (k >= 0)
        fill_how = k;
    return k >= 0;
}

void stk__tok_fill(void *ids, bool i32, size_t at, size_t n, int64_t first, int64_t step)
{
    if (fill_how == 2)
        return;
    if (fill_how == 1) {
        for (size_t j = 0; j < n; j++)
            if (i32)
                ((int32_t *)ids)[at + j] =
                    (int32_t)(uint32_t)((uint64_t)first + (uint64_t)step * j);
            else
                ((int64_t *)ids)[at + j] = (int64_t)((uint64_t)first + (uint64_t)step * j);
        return;
    }
    if (first == 0 && step == 0) /* padding with pad_id 0 */
        memset((uint8_t *)ids + at * (i32 ? 4 : 8), 0, n * (i32 ? 4 : 8));
    else if (i32)
        fill32((int32_t *)ids + at, n, first, step);
    else
        fill64((int64_t *)ids + at, n, first, step);
}
