/*
 * stk_audio_view.c: a stream's bytes as the audio codecs read them (stk__audview in
 * stk_audio_codec.h): straight from memory when the record was read whole, or fetched in place
 * through a stk__bytesrc, one range at a time, when only part of a long record is decoded (a
 * crop of a WAV file reads its header, then the crop's bytes, in two reads).
 *
 * A miss fetches [off, off + max(n, ahead)) (clipped to the stream) into the one buffer,
 * replacing what it held: the codecs read forward (a header, then a window), so one range
 * suffices. The buffer grows to the largest fetch and is kept (charged to the thread's budget).
 */
#include "decode/stk_audio_codec.h"
#include "decode/stk_decode.h"

#include <string.h>

/* Make the view hold [off, off + n) and more, up to `ahead` bytes from off. */
static bool fetch(stk__audview *v, uint64_t off, size_t n)
{
    if (v->rc < 0)
        return false;
    uint64_t want = STK_MAX((uint64_t)n, (uint64_t)v->ahead);
    want = STK_MIN(want, v->size - off);
    if (want > SIZE_MAX / 2) {
        v->rc = stk__set_error(v->why, sizeof(v->why), STK_ELIMIT, "a read of %llu bytes",
                               (unsigned long long)want);
        return false;
    }
    v->lo = v->hi = 0; /* nothing held while the buffer changes */
    stk_status rc = stk__buffer_reserve(&v->buf, &v->cap, (size_t)want, "audio read", "", v->why,
                                        sizeof(v->why));
    if (rc == STK_OK)
        rc = v->in->read(v->in->ctx, off, v->buf, (size_t)want, v->why, sizeof(v->why));
    if (rc < 0) {
        v->rc = rc;
        return false;
    }
    v->lo = off;
    v->hi = off + want;
    v->fetched += want;
    return true;
}

const uint8_t *stk__audview_get(stk__audview *v, uint64_t off, size_t n)
{
    if (off > v->size || n > v->size - off)
        return NULL;
    if (v->mem)
        return v->mem + off;
    if ((off < v->lo || off + n > v->hi) && !fetch(v, off, n))
        return NULL;
    return v->buf + (off - v->lo);
}

size_t stk__audview_read(stk__audview *v, uint64_t off, void *dst, size_t n)
{
    if (off >= v->size)
        return 0;
    n = (size_t)STK_MIN((uint64_t)n, v->size - off);
    const uint8_t *p = stk__audview_get(v, off, n);
    if (!p)
        return 0;
    memcpy(dst, p, n);
    return n;
}
