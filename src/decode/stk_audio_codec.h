/*
 * stk_audio_codec.h: private to src/decode. The table each audio library implements (one file
 * per library: stk_sndfile.c, stk_mpg123.c) for the dispatcher, stk_audio_dec.c, which sniffs
 * the format, checks arguments, seeks, verifies and deinterleaves; a codec only opens a stream
 * (its bytes through a stk__audview: in memory, or read in place as the codec asks for them),
 * seeks to a frame and reads interleaved float frames.
 *
 * Built without its library, a codec's `create` fails with STK_ENOTSUP: "stoker was built
 * without <library>".
 */
#ifndef STK_AUDIO_CODEC_H
#define STK_AUDIO_CODEC_H

#include "decode/stk_audio_decode.h"

/* The bytes of the open stream (stk_audio_view.c): the whole record in memory, or a record read
 * in place (stk__bytesrc), of which one range at a time is held in `buf`. A read that misses it
 * fetches at least `ahead` bytes from where it starts (the dispatcher sets `ahead` to what the
 * next decode will read: a few KiB for a header, the window's bytes before a window's decode).
 * The first read error is kept (rc, why) for the dispatcher to report in place of the codec's
 * "unexpected end of file". Ownership: the stk__audiodec's; one thread. */
typedef struct stk__audview {
    const uint8_t *mem;     /* the whole stream (in memory), else NULL */
    const stk__bytesrc *in; /* the stream read in place (mem NULL) */
    uint64_t size;
    uint8_t *buf; /* bytes [lo, hi) of the stream */
    size_t cap;
    uint64_t lo, hi;
    size_t ahead;
    uint64_t fetched; /* bytes read through `in` since the stream was opened */
    stk_status rc;
    char why[STK_ERRMSG_SIZE];
} stk__audview;

/* Copy up to n bytes at `off` into dst; returns how many (fewer only at the end of the stream or
 * after a read error, kept in v->rc). */
size_t stk__audview_read(stk__audview *v, uint64_t off, void *dst, size_t n);
/* Bytes [off, off + n) of the stream (n <= size - off), fetched when not held: valid until the
 * next stk__audview_read or _get; NULL on a read error (v->rc, v->why). */
const uint8_t *stk__audview_get(stk__audview *v, uint64_t off, size_t n);

typedef struct stk__audcodec {
    const char *lib; /* "libsndfile", "libmpg123" */
    /* A handle for one thread's streams. */
    stk_status (*create)(void **out, char *err, size_t err_size);
    void (*destroy)(void *h);
    /* Open the stream of v (borrowed until close) and fill info (format is the dispatcher's).
     * `lenient`: the codec may resynchronise past damage instead of failing. */
    stk_status (*open)(void *h, stk__audview *v, bool lenient, stk__audinfo *info, char *err,
                       size_t err_size);
    /* Position the next read at `frame` (< info.frames). */
    stk_status (*seek)(void *h, int64_t frame, char *err, size_t err_size);
    /* Read up to `frames` interleaved frames into dst: *got of them, 0 at the end of the stream;
     * STK_EFORMAT with the library's text when it reports an error. */
    stk_status (*read)(void *h, float *dst, int64_t frames, int64_t *got, char *err,
                       size_t err_size);
    void (*close)(void *h);
} stk__audcodec;

extern const stk__audcodec stk__audcodec_sndfile; /* stk_sndfile.c */
extern const stk__audcodec stk__audcodec_mpg123;  /* stk_mpg123.c */

/* STK_ENOTSUP naming the library a build left out. */
stk_status stk__audcodec_missing(const char *lib, char *err, size_t err_size);

#endif /* STK_AUDIO_CODEC_H */
