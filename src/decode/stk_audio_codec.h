/*
 * stk_audio_codec.h: private to src/decode. The table each audio library implements (one file
 * per library: stk_sndfile.c, stk_mpg123.c) for the dispatcher, stk_audio_dec.c, which sniffs
 * the format, checks arguments, seeks, verifies and deinterleaves; a codec only opens a stream
 * from memory, seeks to a frame and reads interleaved float frames.
 *
 * Built without its library, a codec's `create` fails with STK_ENOTSUP: "stoker was built
 * without <library>".
 */
#ifndef STK_AUDIO_CODEC_H
#define STK_AUDIO_CODEC_H

#include "decode/stk_audio_decode.h"

typedef struct stk__audcodec {
    const char *lib; /* "libsndfile", "libmpg123" */
    /* A handle for one thread's streams. */
    stk_status (*create)(void **out, char *err, size_t err_size);
    void (*destroy)(void *h);
    /* Open src (borrowed until close) and fill info (format is the dispatcher's). `lenient`: the
     * codec may resynchronise past damage instead of failing. */
    stk_status (*open)(void *h, const uint8_t *src, size_t size, bool lenient, stk__audinfo *info,
                       char *err, size_t err_size);
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
