/*
 * stk_audio_decode.h: the internal audio-decoding interface between src/decode (WAV, FLAC, Ogg
 * Vorbis, Opus, AIFF through libsndfile; MP3 through libmpg123) and the audio pipeline in
 * src/xform (stk_audio.c).
 *
 * The pipeline opens a record's bytes (stk__audio_open: the header's rate, channels and length),
 * plans what the ops keep (a crop needs a second of a minute), then asks for just those frames
 * (stk__audio_decode), as float planes (one per channel, or their mean). Decoding happens from
 * memory or from the record read in place, only the bytes it needs (libsndfile's virtual I/O,
 * libmpg123's reader callbacks): no temporary files.
 *
 * Seeking: WAV, AIFF, FLAC and MP3 seek to the exact frame (the frames are those of a full
 * decode, bit for bit); Opus seeks 80 ms early (RFC 7845's pre-roll) and decodes forward, which
 * gives a full decode's samples to within 2.2e-4; Ogg Vorbis does not seek (libsndfile 1.2.0's
 * Vorbis seek lands up to 896 frames off): it decodes from the start.
 *
 * Strict (the default): a compressed stream (FLAC, Vorbis, Opus, MP3) is decoded to its end on
 * its first read (stk__audiodec_set_trusted tells the decoder a record already passed) and must
 * give exactly the frames its header says, with no decoder error; a WAV whose data chunk is
 * longer than the file fails from the header alone. Lenient: only the frames asked for are
 * decoded, and frames missing at the end of a damaged stream come out as zeros.
 *
 * Ownership: a stk__audiodec belongs to one worker thread; its buffers grow to the largest need
 * and are reused (charged to the thread's stk__thread_budget as they grow).
 */
#ifndef STK_AUDIO_DECODE_H
#define STK_AUDIO_DECODE_H

#include "stk_internal.h"

#define STK__AUD_MAX_CHANNELS 64 /* more is STK_ELIMIT */

#ifndef STK_FAIL_SIZED /* as stk_codec.h's: STK_FAIL for an error buffer passed with its size */
#define STK_FAIL_SIZED(buf, size, code, ...)                                                       \
    do {                                                                                           \
        rc = stk__set_error((buf), (size), (code), __VA_ARGS__);                                   \
        goto fail;                                                                                 \
    } while (0)
#endif

/* Header facts of an open stream. */
typedef struct stk__audinfo {
    stk__audfmt format;
    uint32_t rate;     /* Hz */
    uint32_t channels; /* 1 .. STK__AUD_MAX_CHANNELS */
    int64_t frames;    /* samples per channel */
    uint32_t mask; /* WAV: WAVE_FORMAT_EXTENSIBLE's dwChannelMask; FLAC (3 or more channels): its
                      WAVEFORMATEXTENSIBLE_CHANNEL_MASK comment; else 0 (not given) */
} stk__audinfo;

typedef struct stk__audiodec stk__audiodec;

/* A per-thread decoder (the codecs' handles are made on first use). */
stk_status stk__audiodec_create(stk__audiodec **out);
void stk__audiodec_destroy(stk__audiodec *d);
/* Lenient: decode only what is asked; frames a damaged stream lacks come out as zeros. */
void stk__audiodec_set_lenient(stk__audiodec *d, bool lenient);
/* Checked once, as for images (stk_decode.h): `trusted` says the next streams passed a strict
 * decode to their end before, so only the frames asked for are decoded; stk__audiodec_checked
 * says whether the last stk__audio_decode checked its whole stream and found nothing wrong. */
void stk__audiodec_set_trusted(stk__audiodec *d, bool trusted);
bool stk__audiodec_checked(const stk__audiodec *d);

/* Open the stream in src (size bytes, borrowed until the next open) and read its header: the
 * format from the bytes (whatever the file is called), then the codec's header. STK_EFORMAT
 * (not audio, truncated or corrupt header, unknown length), STK_ELIMIT (over
 * STK__AUD_MAX_CHANNELS channels), STK_ENOTSUP ("stoker was built without libsndfile"), with the
 * reason in err (no file or record prefix: the loader adds it). */
stk_status stk__audio_open(stk__audiodec *d, const void *src, size_t size, stk__audinfo *out,
                           char *err, size_t err_size);

/* stk__audio_open on a record read in place (`in`, borrowed until the next open): only the bytes
 * a decode needs are read: the header, then for a window of WAV, AIFF or (trusted or lenient)
 * FLAC, Opus over 256 KiB, the window's bytes; a stream decoded to its end (strict, not yet
 * trusted), an MP3 (whose length is a scan of its frames) or a smaller compressed stream is read
 * whole, once. The frames are those
 * stk__audio_open on the whole record gives, bit for bit; a read error is returned as `in`
 * gives it. */
stk_status stk__audio_open_in(stk__audiodec *d, const stk__bytesrc *in, stk__audinfo *out,
                              char *err, size_t err_size);
/* Bytes of the open stream read through `in` so far (its size for a stream in memory). */
uint64_t stk__audiodec_bytes_read(const stk__audiodec *d);

/* Decode frames [first, first + n) of the open stream (inside [0, frames)) into n_planes float
 * planes: n_planes == channels gives plane c channel c, n_planes == 1 the mean of the channels
 * (torch's mean over the channel dimension); frame i of the range at planes[p][i]. Values are
 * torchaudio's: PCM divided by 2^(bits - 1) (8-bit unsigned centred on 128), float as stored. */
stk_status stk__audio_decode(stk__audiodec *d, int64_t first, int64_t n, float *const *planes,
                             uint32_t n_planes, char *err, size_t err_size);

/* Grow *buf (capacity *cap floats) to at least n floats, charging stk__thread_budget (STK_ELIMIT
 * over it, STK_ENOMEM); contents are not kept. For the pipeline's buffers too. */
stk_status stk__audio_reserve(float **buf, size_t *cap, size_t n, char *err, size_t err_size);

#endif /* STK_AUDIO_DECODE_H */
