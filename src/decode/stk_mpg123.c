/*
 * stk_mpg123.c: MP3 (MPEG-1/2/2.5 layers I-III) through libmpg123, reading the record's bytes
 * (the view: in memory or read in place) with replaced reader callbacks.
 *
 * libsndfile 1.2 reads MP3 through libmpg123 too, but through a handle it configures itself,
 * which prints libmpg123's notes on damaged data to stderr ("Note: Illegal Audio-MPEG-Header
 * ... Trying to resync") and offers no way to refuse a resync. Here the handle is quiet
 * (MPG123_QUIET: the library never prints), decodes to float (MPG123_FORCE_FLOAT, the samples
 * torchaudio's ffmpeg path gives to within 6.4e-7), gapless (the LAME tag's encoder delay and
 * padding are removed, as ffmpeg does), one stream per file (MPG123_NO_FRANKENSTEIN), and in
 * strict mode never resynchronises (MPG123_NO_RESYNC: junk inside the stream is an error
 * instead of a skipped stretch of audio). The length comes from the Xing/LAME tag, or from a
 * scan of the frame headers (mpg123_scan) when there is none; seeking is then exact. MP3 frames
 * carry no checksum (LAME writes none): damage inside a frame's data decodes as other samples,
 * for every decoder; a stream cut short is caught by its tag's frame count.
 *
 * Threads: a handle belongs to one thread. mpg123_init runs once (pthread_once).
 */
#include "decode/stk_audio_codec.h"

#include <string.h>

#ifdef STK_HAVE_MPG123
#include <mpg123.h>
#include <pthread.h>

/* A seek decodes frames before its target (their output dropped): Layer III's bit reservoir
 * reaches up to 511 bytes of earlier frames' data, ~8 frames at 32 kbit/s, plus one for the
 * IMDCT's overlap. libmpg123's default (4) left a libsndfile-written 57 kbit/s VBR stream's
 * windows up to 0.5 off; 10 decodes them as a full decode does. A CBR stream needs fewer
 * (preframes()). */
#define PREFRAMES 10

typedef struct mph {
    mpg123_handle *mh;
    stk__audview *v;
    size_t size;
    off_t pos;
    uint32_t channels;
    bool open;
} mph;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_rc;

static void init_lib(void)
{
    init_rc = mpg123_init(); /* a no-op since 1.27; required before */
}

/* ---- reader callbacks over the view (the record's bytes) ---- */

static mpg123_ssize_t rd(void *u, void *buf, size_t count)
{
    mph *h = u;
    if (h->pos >= (off_t)h->size)
        return 0;
    size_t n =
        stk__audview_read(h->v, (uint64_t)h->pos, buf, STK_MIN(count, h->size - (size_t)h->pos));
    h->pos += (off_t)n;
    return (mpg123_ssize_t)n;
}

static off_t sk(void *u, off_t off, int whence)
{
    mph *h = u;
    off_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? h->pos : (off_t)h->size;
    if (base + off < 0)
        return -1;
    h->pos = base + off;
    return h->pos;
}

/* Frames a seek decodes before its target: enough to refill Layer III's bit reservoir (511
 * bytes of earlier frames' data for MPEG-1, 255 for MPEG-2/2.5) from frames of this size, plus
 * one for the IMDCT's overlap and one spare, when the stream is constant-bitrate (3-4 at 128
 * kbit/s); PREFRAMES for VBR, ABR and the other layers. */
static long preframes(mpg123_handle *mh)
{
    struct mpg123_frameinfo fi;
    if (mpg123_info(mh, &fi) != MPG123_OK || fi.vbr != MPG123_CBR || fi.layer != 3)
        return PREFRAMES;
    bool mpeg1 = fi.version == MPG123_1_0, mono = fi.mode == MPG123_M_MONO;
    int side = mpeg1 ? (mono ? 17 : 32) : (mono ? 9 : 17);
    int data = fi.framesize - 4 - side - ((fi.flags & MPG123_CRC) ? 2 : 0);
    if (data <= 0)
        return PREFRAMES;
    long need = ((mpeg1 ? 511 : 255) + data - 1) / data + 2;
    return need < PREFRAMES ? need : PREFRAMES;
}

/* ---- the codec ---- */

static void mp_close(void *u)
{
    mph *h = u;
    if (h && h->open) {
        mpg123_close(h->mh);
        h->open = false;
    }
}

static void mp_destroy(void *u)
{
    mph *h = u;
    if (!h)
        return;
    mp_close(h);
    if (h->mh)
        mpg123_delete(h->mh);
    stk__free(h);
}

static stk_status mp_create(void **out, char *err, size_t err_size)
{
    int e = MPG123_OK;
    pthread_once(&init_once, init_lib);
    if (init_rc != MPG123_OK)
        return stk__set_error(err, err_size, STK_ENOTSUP, "libmpg123: %s",
                              mpg123_plain_strerror(init_rc));
    mph *h = stk__calloc(1, sizeof(*h));
    if (!h)
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for an MP3 decoder");
    h->mh = mpg123_new(NULL, &e);
    if (!h->mh) {
        stk__free(h);
        return stk__set_error(err, err_size, e == MPG123_OUT_OF_MEM ? STK_ENOMEM : STK_ENOTSUP,
                              "libmpg123: %s", mpg123_plain_strerror(e));
    }
    /* Float output at every rate, the stream's own channel count */
    const long *rates = NULL;
    size_t n_rates = 0;
    mpg123_rates(&rates, &n_rates);
    e = mpg123_format_none(h->mh);
    for (size_t i = 0; i < n_rates && e == MPG123_OK; i++)
        e = mpg123_format(h->mh, rates[i], MPG123_MONO | MPG123_STEREO, MPG123_ENC_FLOAT_32);
    if (e == MPG123_OK)
        e = mpg123_replace_reader_handle(h->mh, rd, sk, NULL);
    if (e != MPG123_OK) {
        stk_status rc =
            stk__set_error(err, err_size, STK_ENOTSUP, "libmpg123: %s", mpg123_strerror(h->mh));
        mp_destroy(h);
        return rc;
    }
    *out = h;
    return STK_OK;
}

static stk_status mp_open(void *u, stk__audview *v, bool lenient, stk__audinfo *info, char *err,
                          size_t err_size)
{
    mph *h = u;
    long rate = 0;
    int channels = 0, enc = 0;
    mp_close(h);
    h->v = v;
    h->size = (size_t)v->size;
    h->pos = 0;
    long flags = MPG123_QUIET | MPG123_FORCE_FLOAT | MPG123_GAPLESS | MPG123_NO_FRANKENSTEIN |
                 (lenient ? 0 : MPG123_NO_RESYNC);
    if (mpg123_param(h->mh, MPG123_FLAGS, flags, 0) != MPG123_OK ||
        mpg123_open_handle(h->mh, h) != MPG123_OK)
        goto lib_error;
    h->open = true;
    if (mpg123_getformat(h->mh, &rate, &channels, &enc) != MPG123_OK)
        goto lib_error;
    mpg123_param(h->mh, MPG123_PREFRAMES, preframes(h->mh), 0);
    /* The length: the Xing/LAME tag's when there is one (positions are then "accurate" before
     * any scan), else a scan of every frame header. The scan runs either way, for exact seeks;
     * the tag's count stays the length, so a stream cut short decodes fewer frames than it. */
    long accurate = 0;
    double unused;
    off_t frames = -1;
    if (mpg123_getstate(h->mh, MPG123_ACCURATE, &accurate, &unused) == MPG123_OK && accurate)
        frames = mpg123_length(h->mh);
    if (mpg123_scan(h->mh) != MPG123_OK)
        goto lib_error;
    if (frames < 0)
        frames = mpg123_length(h->mh);
    if (frames < 0)
        goto lib_error;
    h->channels = (uint32_t)channels;
    info->rate = rate > 0 ? (uint32_t)rate : 0;
    info->channels = channels > 0 ? (uint32_t)channels : 0;
    info->frames = (int64_t)frames;
    return STK_OK;
lib_error:
    return stk__set_error(err, err_size, STK_EFORMAT, "libmpg123: %s", mpg123_strerror(h->mh));
}

static stk_status mp_seek(void *u, int64_t frame, char *err, size_t err_size)
{
    mph *h = u;
    off_t at = mpg123_seek(h->mh, (off_t)frame, SEEK_SET);
    if (at != (off_t)frame)
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "libmpg123: cannot seek to frame %lld: %s", (long long)frame,
                              at < 0 ? mpg123_strerror(h->mh) : "landed elsewhere");
    return STK_OK;
}

static stk_status mp_read(void *u, float *dst, int64_t frames, int64_t *got, char *err,
                          size_t err_size)
{
    mph *h = u;
    size_t want = (size_t)frames * h->channels * sizeof(float), have = 0;
    *got = 0;
    while (have < want) {
        size_t done = 0;
        int e = mpg123_read(h->mh, (unsigned char *)dst + have, want - have, &done);
        have += done;
        if (e == MPG123_DONE)
            break;
        if (e == MPG123_NEW_FORMAT) /* NO_FRANKENSTEIN: only at the very start */
            continue;
        if (e != MPG123_OK) {
            *got = (int64_t)(have / (h->channels * sizeof(float)));
            return stk__set_error(err, err_size, STK_EFORMAT, "libmpg123: %s",
                                  mpg123_strerror(h->mh));
        }
        if (done == 0)
            break;
    }
    *got = (int64_t)(have / (h->channels * sizeof(float)));
    return STK_OK;
}

const stk__audcodec stk__audcodec_mpg123 = {
    .lib = "libmpg123",
    .create = mp_create,
    .destroy = mp_destroy,
    .open = mp_open,
    .seek = mp_seek,
    .read = mp_read,
    .close = mp_close,
};

#else /* built without libmpg123 */

static stk_status mp_missing(void **out, char *err, size_t err_size)
{
    *out = NULL;
    return stk__audcodec_missing("libmpg123", err, err_size);
}

const stk__audcodec stk__audcodec_mpg123 = {.lib = "libmpg123", .create = mp_missing};

#endif
