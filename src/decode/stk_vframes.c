/*
 * stk_vframes.c: a video's frame index (stk_video_decode.h) in its serialised form, and its
 * timestamps in seconds. No library: the loader's index cache (src/source/video/stk_vindex.c)
 * reads and writes these bytes whether or not this build decodes video.
 *
 * Layout (little-endian): "VIX1", stream, tb_num, tb_den (i32), width, height, codec, n_frames,
 * n_keys (u32); pts[0] (i64) and n_pts_runs (u32), then n_pts_runs x {step i64, count u32} that
 * take pts[1 ..] (each frame `step` after the one before); keys[0] (u32) and n_key_runs (u32),
 * then n_key_runs x {step u32, count u32}. Runs compress constant frame rates and regular
 * keyframes to one entry each; a variable frame rate costs 12 bytes per change of step.
 * Everything is checked on unpack (counts add up, steps positive, no overflow, the first key frame
 * 0, every key inside the frames): the bytes come from a cache file that may be damaged.
 */
#include "decode/stk_video_decode.h"
#include "common/stk_endian.h"

#include <string.h>

#define MAGIC "VIX1"
#define HEAD (4 + 8 * 4)
#define MAX_FRAMES                                                                                 \
    (1u << 28) /* a longer index is not unpacked (268M frames: 100+ days at 30 fps) */

double stk__vindex_seconds(const stk__vindex *ix, int64_t pts)
{
    int64_t num = ix->tb_num;
    if (pts > INT64_MAX / num || pts < INT64_MIN / num) /* beyond any real file: no overflow */
        return (double)pts * (double)num / (double)ix->tb_den;
    /* Both operands exact doubles when |pts * num| < 2^53: one correctly rounded division. */
    return (double)(pts * num) / (double)ix->tb_den;
}

/* A writer that counts past its capacity. */
typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
} wbuf;

static void put32(wbuf *w, uint32_t v)
{
    if (w->n + 4 <= w->cap)
        stk__st32(w->p + w->n, v);
    w->n += 4;
}

static void put64(wbuf *w, uint64_t v)
{
    if (w->n + 8 <= w->cap)
        stk__st64(w->p + w->n, v);
    w->n += 8;
}

size_t stk__vindex_pack(const stk__vindex *ix, uint8_t *out, size_t cap)
{
    wbuf w = {out, 0, cap};
    if (cap >= 4)
        memcpy(out, MAGIC, 4);
    w.n = 4;
    put32(&w, (uint32_t)ix->stream);
    put32(&w, (uint32_t)ix->tb_num);
    put32(&w, (uint32_t)ix->tb_den);
    put32(&w, ix->width);
    put32(&w, ix->height);
    put32(&w, ix->codec);
    put32(&w, ix->n_frames);
    put32(&w, ix->n_keys);
    /* pts: the first, then runs of equal steps */
    put64(&w, (uint64_t)ix->pts[0]);
    size_t at_runs = w.n;
    put32(&w, 0);
    uint32_t runs = 0;
    for (uint32_t i = 1; i < ix->n_frames;) {
        int64_t step = ix->pts[i] - ix->pts[i - 1];
        uint32_t k = i;
        while (k < ix->n_frames && ix->pts[k] - ix->pts[k - 1] == step)
            k++;
        put64(&w, (uint64_t)step);
        put32(&w, k - i);
        runs++;
        i = k;
    }
    if (at_runs + 4 <= cap)
        stk__st32(out + at_runs, runs);
    /* keys: the first, then runs of equal spacing */
    put32(&w, ix->keys[0]);
    at_runs = w.n;
    put32(&w, 0);
    runs = 0;
    for (uint32_t i = 1; i < ix->n_keys;) {
        uint32_t step = ix->keys[i] - ix->keys[i - 1];
        uint32_t k = i;
        while (k < ix->n_keys && ix->keys[k] - ix->keys[k - 1] == step)
            k++;
        put32(&w, step);
        put32(&w, k - i);
        runs++;
        i = k;
    }
    if (at_runs + 4 <= cap)
        stk__st32(out + at_runs, runs);
    return w.n;
}

/* Grow *p (elements of `elem` bytes, capacity *cap) to n elements. */
static bool reserve(void **p, size_t *cap, size_t n, size_t elem)
{
    if (n <= *cap)
        return true;
    void *q = stk__realloc(*p, n * elem);
    if (!q)
        return false;
    *p = q;
    *cap = n;
    return true;
}

bool stk__vindex_unpack(const uint8_t *buf, size_t size, stk__vindex *ix, int64_t **pts,
                        size_t *pts_cap, uint32_t **keys, size_t *keys_cap)
{
    if (size < HEAD + 8 + 4 + 4 + 4 || memcmp(buf, MAGIC, 4) != 0)
        return false;
    const uint8_t *p = buf + 4, *end = buf + size;
    memset(ix, 0, sizeof(*ix));
    ix->stream = (int32_t)stk__ld32(p);
    ix->tb_num = (int32_t)stk__ld32(p + 4);
    ix->tb_den = (int32_t)stk__ld32(p + 8);
    ix->width = stk__ld32(p + 12);
    ix->height = stk__ld32(p + 16);
    ix->codec = stk__ld32(p + 20);
    ix->n_frames = stk__ld32(p + 24);
    ix->n_keys = stk__ld32(p + 28);
    p += 32;
    if (ix->stream < 0 || ix->tb_num <= 0 || ix->tb_den <= 0 || ix->n_frames == 0 ||
        ix->n_frames > MAX_FRAMES || ix->n_keys == 0 || ix->n_keys > ix->n_frames)
        return false;
    if (!reserve((void **)pts, pts_cap, ix->n_frames, sizeof(int64_t)) ||
        !reserve((void **)keys, keys_cap, ix->n_keys, sizeof(uint32_t)))
        return false;
    int64_t *pv = *pts;
    uint32_t *kv = *keys;
    pv[0] = (int64_t)stk__ld64(p);
    uint32_t runs = stk__ld32(p + 8);
    p += 12;
    uint32_t n = 1;
    for (uint32_t r = 0; r < runs; r++) {
        if (end - p < 12)
            return false;
        int64_t step = (int64_t)stk__ld64(p);
        uint32_t count = stk__ld32(p + 8);
        p += 12;
        if (step <= 0 || count == 0 || count > ix->n_frames - n)
            return false;
        for (uint32_t k = 0; k < count; k++, n++) {
            if (pv[n - 1] > INT64_MAX - step)
                return false;
            pv[n] = pv[n - 1] + step;
        }
    }
    if (n != ix->n_frames || end - p < 8)
        return false;
    kv[0] = stk__ld32(p);
    runs = stk__ld32(p + 4);
    p += 8;
    if (kv[0] != 0) /* the first frame is a keyframe (decoding starts there) */
        return false;
    n = 1;
    for (uint32_t r = 0; r < runs; r++) {
        if (end - p < 8)
            return false;
        uint32_t step = stk__ld32(p), count = stk__ld32(p + 4);
        p += 8;
        if (step == 0 || count == 0 || count > ix->n_keys - n)
            return false;
        for (uint32_t k = 0; k < count; k++, n++) {
            if (step >= ix->n_frames - kv[n - 1])
                return false;
            kv[n] = kv[n - 1] + step;
        }
    }
    if (n != ix->n_keys || p != end)
        return false;
    ix->pts = pv;
    ix->keys = kv;
    return true;
}
