/*
 * stk_sndfile.c: WAV, FLAC, Ogg Vorbis, Ogg Opus, AIFF (and the other containers libsndfile
 * reads) through libsndfile's virtual I/O: the record's bytes are the file, read by callbacks
 * over the view (in memory, or read in place: a WAV window's bytes only), never written to a
 * temporary file.
 *
 * libsndfile 1.2 converts integer PCM to float by dividing by 2^(bits - 1) (SFC_SET_NORM_FLOAT,
 * its default), which is what torchaudio's loaders give: WAV and FLAC decode to the same floats
 * bit for bit (python/tests/test_audio.py). An Ogg stream cut short has no last page, so its
 * length is unknown (libsndfile reports INT64_MAX frames): the dispatcher refuses that as a
 * truncated stream.
 *
 * A failed sf_open_virtual leaves its reason only in libsndfile's process-wide error number
 * (sf_strerror(NULL)), which another thread's open may overwrite meanwhile: the text can then
 * name the other failure; the status is right either way.
 *
 * Threads: a handle belongs to one thread; libsndfile keeps no other shared state.
 */
#include "decode/stk_audio_codec.h"

#include <string.h>

stk_status stk__audcodec_missing(const char *lib, char *err, size_t err_size)
{
    return stk__set_error(err, err_size, STK_ENOTSUP,
                          "stoker was built without %s (install its -dev package and rebuild)",
                          lib);
}

#ifdef STK_HAVE_SNDFILE
#include <sndfile.h>

typedef struct sfh {
    stk__audview *v;
    sf_count_t size, pos;
    SNDFILE *sf;
    SF_INFO info;
} sfh;

/* ---- virtual I/O over the view (the record's bytes in memory or read in place) ---- */

static sf_count_t vio_len(void *u)
{
    return ((sfh *)u)->size;
}

static sf_count_t vio_seek(sf_count_t off, int whence, void *u)
{
    sfh *h = u;
    sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? h->pos : h->size;
    if (off > INT64_MAX - base || base + off < 0)
        return -1;
    h->pos = base + off; /* past the end reads nothing, as a file would */
    return h->pos;
}

static sf_count_t vio_read(void *ptr, sf_count_t count, void *u)
{
    sfh *h = u;
    if (count <= 0 || h->pos >= h->size)
        return 0;
    size_t n =
        stk__audview_read(h->v, (uint64_t)h->pos, ptr, (size_t)STK_MIN(count, h->size - h->pos));
    h->pos += (sf_count_t)n;
    return (sf_count_t)n;
}

static sf_count_t vio_write(const void *ptr, sf_count_t count, void *u)
{
    (void)ptr;
    (void)count;
    (void)u;
    return 0; /* read-only */
}

static sf_count_t vio_tell(void *u)
{
    return ((sfh *)u)->pos;
}

/* ---- the codec ---- */

static stk_status sf_create(void **out, char *err, size_t err_size)
{
    sfh *h = stk__calloc(1, sizeof(*h));
    if (!h)
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for an audio decoder");
    *out = h;
    return STK_OK;
}

static void sf_close_h(void *u)
{
    sfh *h = u;
    if (h && h->sf) {
        sf_close(h->sf);
        h->sf = NULL;
    }
}

static void sf_destroy(void *u)
{
    sf_close_h(u);
    stk__free(u);
}

static stk_status sf_open_h(void *u, stk__audview *v, bool lenient, stk__audinfo *info, char *err,
                            size_t err_size)
{
    (void)lenient;
    sfh *h = u;
    static SF_VIRTUAL_IO vio = {vio_len, vio_seek, vio_read, vio_write, vio_tell};
    sf_close_h(h);
    h->v = v;
    h->size = (sf_count_t)v->size;
    h->pos = 0;
    memset(&h->info, 0, sizeof(h->info));
    h->sf = sf_open_virtual(&vio, SFM_READ, &h->info, h);
    if (!h->sf)
        return stk__set_error(err, err_size, STK_EFORMAT, "libsndfile: %s", sf_strerror(NULL));
    /* torchaudio's scaling: integer PCM over 2^(bits-1) (libsndfile's default, set anyway) */
    sf_command(h->sf, SFC_SET_NORM_FLOAT, NULL, SF_TRUE);
    if ((h->info.format & SF_FORMAT_SUBMASK) == SF_FORMAT_OPUS && h->info.samplerate != 48000) {
        /* libsndfile decodes Opus at the encoder's input rate rounded up to an Opus rate (22.05
         * kHz -> 24 kHz); every other decoder (ffmpeg's, so torchaudio's; opusfile) gives 48 kHz,
         * RFC 7845's recommendation */
        int rate = 48000;
        if (sf_command(h->sf, SFC_SET_ORIGINAL_SAMPLERATE, &rate, sizeof(rate)) == SF_TRUE) {
            sf_command(h->sf, SFC_GET_CURRENT_SF_INFO, &h->info, sizeof(h->info));
        }
    }
    info->rate = h->info.samplerate > 0 ? (uint32_t)h->info.samplerate : 0;
    info->channels = h->info.channels > 0 ? (uint32_t)h->info.channels : 0;
    info->frames = h->info.frames;
    return STK_OK;
}

static stk_status sf_seek_h(void *u, int64_t frame, char *err, size_t err_size)
{
    sfh *h = u;
    if (sf_seek(h->sf, frame, SEEK_SET) != frame)
        return stk__set_error(err, err_size, STK_EFORMAT, "cannot seek to frame %lld: %s",
                              (long long)frame, sf_strerror(h->sf));
    return STK_OK;
}

static stk_status sf_read_h(void *u, float *dst, int64_t frames, int64_t *got, char *err,
                            size_t err_size)
{
    sfh *h = u;
    sf_count_t n = sf_readf_float(h->sf, dst, frames);
    *got = n > 0 ? n : 0;
    if (n < frames && sf_error(h->sf) != SF_ERR_NO_ERROR)
        return stk__set_error(err, err_size, STK_EFORMAT, "%s", sf_strerror(h->sf));
    return STK_OK;
}

const stk__audcodec stk__audcodec_sndfile = {
    .lib = "libsndfile",
    .create = sf_create,
    .destroy = sf_destroy,
    .open = sf_open_h,
    .seek = sf_seek_h,
    .read = sf_read_h,
    .close = sf_close_h,
};

#else /* built without libsndfile */

static stk_status sf_missing(void **out, char *err, size_t err_size)
{
    *out = NULL;
    return stk__audcodec_missing("libsndfile", err, err_size);
}

const stk__audcodec stk__audcodec_sndfile = {.lib = "libsndfile", .create = sf_missing};

#endif
