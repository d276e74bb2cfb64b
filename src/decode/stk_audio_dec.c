/*
 * stk_audio_dec.c: the audio decoder a worker thread holds (stk_audio_decode.h): which codec
 * reads a record (its bytes, not its name), the header checks the codecs leave out, where to
 * seek, strict verification, and the float planes the pipeline reads.
 *
 * A read of frames [first, first + n):
 *  - strict and not yet trusted: the stream is decoded from frame 0 to its end, the window kept
 *    as it passes; the count must be the header's and no codec error may occur (a truncated or
 *    corrupt FLAC, Vorbis, Opus or MP3 stream fails here, naming both counts); an Ogg stream's
 *    pages are first checked against their CRCs (ogg_check);
 *  - otherwise: seek (exact for WAV, AIFF, FLAC, MP3; 80 ms early for Opus; Vorbis decodes from
 *    the start) and decode the window only.
 * Frames come from the codec in chunks of CHUNK interleaved frames and are deinterleaved (or
 * averaged into one plane) straight into the caller's planes.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3") /* wav_pcm16's conversion loop, vectorised */
#endif

#include "decode/stk_audio_codec.h"
#include "decode/stk_decode.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 2048         /* frames per codec read */
#define OPUS_PREROLL 3840  /* 80 ms at 48 kHz: RFC 7845's decoder pre-roll */
#define MAX_RATE 1536000u  /* more is not audio: a corrupt header */
#define HEAD 4096          /* bytes of a record read in place fetched first: its header */
#define WHOLE (256u << 10) /* a compressed stream up to this size is read whole, at once */

enum { SEEK_EXACT, SEEK_PREROLL, SEEK_NONE };

struct stk__audiodec {
    void *h[2]; /* codec handles: [0] libsndfile, [1] libmpg123, made on first use */
    const stk__audcodec *codec;
    void *cur;      /* the open stream's handle (one of h) */
    stk__audview v; /* the open stream's bytes */
    stk__audinfo info;
    int seek_mode;
    int64_t pos; /* the frame the codec reads next */
    bool lenient, trusted, checked;
    float *chunk; /* CHUNK interleaved frames */
    size_t chunk_cap;
    uint64_t pcm16; /* a 16-bit PCM WAV whose frames all lie in the stream: its data chunk's
                       offset + 1 (0: none), read here without libsndfile (wav_pcm16) */
};

stk_status stk__audio_reserve(float **buf, size_t *cap, size_t n, char *err, size_t err_size)
{
    size_t bytes, have = *cap * sizeof(float);
    if (!stk__mul_ok(n, sizeof(float), &bytes))
        return stk__set_error(err, err_size, STK_ELIMIT, "audio buffer of %zu samples too large",
                              n);
    uint8_t *p = (uint8_t *)*buf;
    stk_status rc = stk__buffer_reserve(&p, &have, bytes, "audio", "", err, err_size);
    *buf = (float *)(void *)p;
    *cap = have / sizeof(float);
    return rc;
}

stk_status stk__audiodec_create(stk__audiodec **out)
{
    *out = stk__calloc(1, sizeof(**out));
    return *out ? STK_OK : stk__set_last_error(STK_ENOMEM, "out of memory for an audio decoder");
}

void stk__audiodec_destroy(stk__audiodec *d)
{
    if (!d)
        return;
    if (d->h[0])
        stk__audcodec_sndfile.destroy(d->h[0]);
    if (d->h[1])
        stk__audcodec_mpg123.destroy(d->h[1]);
    stk__free(d->chunk);
    stk__free(d->v.buf);
    stk__free(d);
}

void stk__audiodec_set_lenient(stk__audiodec *d, bool lenient)
{
    d->lenient = lenient;
}

void stk__audiodec_set_trusted(stk__audiodec *d, bool trusted)
{
    d->trusted = trusted;
}

bool stk__audiodec_checked(const stk__audiodec *d)
{
    return d->checked;
}

/* A WAV whose data chunk says more bytes than follow it was cut short: libsndfile would quietly
 * read what is there. A size of 0 or 0xFFFFFFFF (a stream's writer did not know) and RF64's
 * 64-bit sizes are left to libsndfile. */
static stk_status wav_check(stk__audview *v, uint32_t *mask, uint64_t *pcm16, char *err,
                            size_t err_size)
{
    *mask = 0;
    *pcm16 = 0;
    bool is16 = false; /* the fmt chunk says 16-bit integer PCM */
    uint64_t size = v->size;
    const uint8_t *p = stk__audview_get(v, 0, (size_t)STK_MIN(size, (uint64_t)12));
    if (!p)
        return stk__set_error(err, err_size, v->rc, "%s", v->why);
    if (size < 12 || memcmp(p, "RIFF", 4) != 0)
        return STK_OK;
    uint64_t at = 12;
    while (at + 8 <= size) {
        const uint8_t *c = stk__audview_get(v, at, 8); /* the chunk's id and size */
        if (!c)
            return stk__set_error(err, err_size, v->rc, "%s", v->why);
        uint32_t len =
            (uint32_t)c[4] | (uint32_t)c[5] << 8 | (uint32_t)c[6] << 16 | (uint32_t)c[7] << 24;
        if (memcmp(c, "data", 4) == 0) {
            uint64_t have = size - (at + 8);
            if (len != 0 && len != 0xFFFFFFFFu && len > have)
                return stk__set_error(err, err_size, STK_EFORMAT,
                                      "WAV: truncated: its data chunk at byte %" PRIu64
                                      " says %" PRIu32 " bytes but %" PRIu64 " follow",
                                      at, len, have);
            if (is16)
                *pcm16 = at + 8 + 1;
            return STK_OK;
        }
        if (len > size - at - 8)
            break; /* a chunk past the end before the data: libsndfile says what is wrong */
        if (memcmp(c, "fmt ", 4) == 0 && len >= 16) {
            size_t n = len >= 26 ? 26 : 16;
            const uint8_t *f = stk__audview_get(v, at + 8, n);
            if (!f)
                return stk__set_error(err, err_size, v->rc, "%s", v->why);
            bool ext = f[0] == 0xFE && f[1] == 0xFF && n >= 26 && f[16] >= 22;
            if (ext) /* WAVE_FORMAT_EXTENSIBLE's channel mask */
                *mask = (uint32_t)f[20] | (uint32_t)f[21] << 8 | (uint32_t)f[22] << 16 |
                        (uint32_t)f[23] << 24;
            /* WAVE_FORMAT_PCM, or EXTENSIBLE with the PCM subformat; 16 bits, 2 per channel */
            uint32_t ch = (uint32_t)f[2] | (uint32_t)f[3] << 8;
            is16 = ((f[0] == 1 && f[1] == 0) || (ext && f[24] == 1 && f[25] == 0)) && f[14] == 16 &&
                   f[15] == 0 && ch > 0 && ((uint32_t)f[12] | (uint32_t)f[13] << 8) == 2 * ch;
        }
        at += 8 + (uint64_t)len + (len & 1);
    }
    return STK_OK;
}

/* A FLAC file's WAVEFORMATEXTENSIBLE_CHANNEL_MASK Vorbis comment, read as FFmpeg's FLAC demuxer
 * reads it (the layout FFmpeg then decodes with): the key in any case, a non-empty value parsed
 * as strtol(value, NULL, 0) does ("0x107", "263", "0407"), the last such comment; 0 or a value
 * with bits above 17 (FFmpeg's "Invalid value") is no mask. An ID3 tag before "fLaC" is skipped.
 * Damaged metadata gives no mask (libFLAC's own checks say what is wrong with the stream). */
static stk_status flac_mask(stk__audview *v, uint32_t *mask)
{
    static const char key[] = "WAVEFORMATEXTENSIBLE_CHANNEL_MASK";
    const size_t klen = sizeof(key) - 1;
    *mask = 0;
    size_t ahead = v->ahead;
    v->ahead = STK_MAX(ahead, (size_t)HEAD); /* the blocks are read forward: a few reads */
    uint64_t at = 0, size = v->size;
    const uint8_t *p = stk__audview_get(v, 0, (size_t)STK_MIN(size, (uint64_t)10));
    if (p && size >= 10 && memcmp(p, "ID3", 3) == 0)
        at = 10 +
             ((uint64_t)(p[6] & 0x7f) << 21 | (uint64_t)(p[7] & 0x7f) << 14 |
              (uint64_t)(p[8] & 0x7f) << 7 | (uint64_t)(p[9] & 0x7f)) +
             (p[5] & 0x10 ? 10 : 0);
    p = at + 4 <= size ? stk__audview_get(v, at, 4) : NULL;
    if (!p || memcmp(p, "fLaC", 4) != 0)
        goto done;
    at += 4;
    for (bool last = false; !last && at + 4 <= size;) {
        if (!(p = stk__audview_get(v, at, 4)))
            goto done;
        last = p[0] & 0x80;
        uint64_t len = (uint64_t)p[1] << 16 | (uint64_t)p[2] << 8 | p[3], end = at + 4 + len;
        if (end > size)
            goto done;
        if ((p[0] & 0x7f) != 4) { /* not VORBIS_COMMENT */
            at = end;
            continue;
        }
        /* vendor string, comment count, then each comment: a 32-bit length and KEY=value */
        uint64_t q = at + 4;
        if (len < 8 || !(p = stk__audview_get(v, q, 4)))
            goto done;
        uint64_t vendor =
            (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
        if (vendor > end - q - 8)
            goto done;
        q += 4 + vendor;
        if (!(p = stk__audview_get(v, q, 4)))
            goto done;
        uint32_t n =
            (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        q += 4;
        for (; n > 0 && end - q >= 4; n--) {
            if (!(p = stk__audview_get(v, q, 4)))
                goto done;
            uint64_t clen =
                (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
            q += 4;
            if (clen > end - q)
                break;
            /* KEY=value with a value of up to 63 characters (a longer one is no mask) */
            if (clen > klen + 1 && clen <= klen + 64) {
                const uint8_t *c = stk__audview_get(v, q, (size_t)clen);
                if (!c)
                    goto done;
                bool match = c[klen] == '=';
                for (size_t i = 0; match && i < klen; i++)
                    match = (c[i] >= 'a' && c[i] <= 'z' ? c[i] - 32 : c[i]) == (uint8_t)key[i];
                if (match) {
                    char val[64];
                    memcpy(val, c + klen + 1, (size_t)clen - klen - 1);
                    val[clen - klen - 1] = '\0';
                    unsigned long long m = (unsigned long long)strtoll(val, NULL, 0);
                    *mask = m && !(m & ~0x3ffffull) ? (uint32_t)m : 0;
                }
            }
            q += clen;
        }
        at = end;
    }
done:
    v->ahead = ahead;
    return v->rc < 0 ? STK_EIO : STK_OK;
}

/* Every page of an Ogg stream (Vorbis, Opus) in a row from byte 0 to the end, each with the
 * CRC-32 its header carries (polynomial 0x04C11DB7, MSB first, over the page with the CRC field
 * zeroed): libogg drops a damaged page without a word, and libsndfile then decodes a shorter
 * stream that its length agrees with. */
static stk_status ogg_check(const uint8_t *p, size_t size, char *err, size_t err_size)
{
    uint32_t table[256];
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t r = i << 24;
        for (int k = 0; k < 8; k++)
            r = (r << 1) ^ (r & 0x80000000u ? 0x04C11DB7u : 0);
        table[i] = r;
    }
    size_t at = 0, pages = 0;
    while (at < size) {
        if (size - at < 27 || memcmp(p + at, "OggS", 4) != 0 || p[at + 4] != 0)
            return stk__set_error(err, err_size, STK_EFORMAT, "Ogg: %s at byte %zu (page %zu)",
                                  size - at < 27 ? "a page header cut short" : "no page header", at,
                                  pages);
        size_t nseg = p[at + 26], len = 27 + nseg;
        if (size - at < len)
            return stk__set_error(err, err_size, STK_EFORMAT,
                                  "Ogg: truncated: page %zu at byte %zu ends past the file", pages,
                                  at);
        for (size_t k = 0; k < nseg; k++)
            len += p[at + 27 + k];
        if (size - at < len)
            return stk__set_error(
                err, err_size, STK_EFORMAT,
                "Ogg: truncated: page %zu at byte %zu needs %zu bytes, %zu follow", pages, at, len,
                size - at);
        uint32_t want = (uint32_t)p[at + 22] | (uint32_t)p[at + 23] << 8 |
                        (uint32_t)p[at + 24] << 16 | (uint32_t)p[at + 25] << 24,
                 crc = 0;
        for (size_t k = 0; k < len; k++) {
            uint8_t b = k >= 22 && k < 26 ? 0 : p[at + k];
            crc = (crc << 8) ^ table[(crc >> 24) ^ b];
        }
        if (crc != want)
            return stk__set_error(err, err_size, STK_EFORMAT,
                                  "Ogg: page %zu at byte %zu fails its CRC (corrupt)", pages, at);
        at += len;
        pages++;
    }
    return STK_OK;
}

/* The view's read error as the stream's (a record read in place whose file failed). */
static stk_status view_error(const stk__audview *v, char *err, size_t err_size)
{
    return stk__set_error(err, err_size, v->rc < 0 ? v->rc : STK_EIO, "%s",
                          v->why[0] ? v->why : "cannot read");
}

/* Open the stream in d->v (set up by stk__audio_open or stk__audio_open_in). */
static stk_status open_view(stk__audiodec *d, stk__audinfo *out, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    stk__audview *v = &d->v;
    if (d->cur)
        d->codec->close(d->cur);
    d->cur = NULL;
    d->checked = false;
    if (v->size == 0)
        return stk__set_error(err, err_size, STK_EFORMAT, "empty (0 bytes)");
    size_t head = (size_t)STK_MIN(v->size, (uint64_t)HEAD);
    const uint8_t *p = stk__audview_get(v, 0, head);
    if (p && !v->mem && head >= 3 && memcmp(p, "ID3", 3) == 0) {
        /* a tag of any length before the stream: MP3 (whose length scan reads all of it) or a
         * tagged FLAC, told apart at the tag's end */
        v->ahead = (size_t)STK_MIN(v->size, (uint64_t)SIZE_MAX);
        p = stk__audview_get(v, 0, head = (size_t)v->size);
    }
    if (!p)
        return view_error(v, err, err_size);
    stk__audfmt fmt = stk__audio_magic(p, head, false);
    if (fmt == STK__AUD_UNKNOWN) {
        char hex[64] = "";
        for (size_t i = 0, at = 0; i < STK_MIN(head, (size_t)4); i++)
            at += (size_t)snprintf(hex + at, sizeof(hex) - at, "%s0x%02x", i ? " " : "", p[i]);
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "not a supported audio file (WAV, FLAC, Ogg Vorbis, Opus, MP3, "
                              "AIFF; starts with %s)",
                              hex);
    }
    const char *name = stk__audfmt_name(fmt);
    bool pcm = fmt == STK__AUD_WAV || fmt == STK__AUD_AIFF;
    if (fmt == STK__AUD_MP3 || (!pcm && ((!d->lenient && !d->trusted) || v->size <= WHOLE))) {
        /* read to its end (an MP3's length is a scan of its frames), or compressed and small
         * (a seek's search reads a few blocks here and there): all of it, at once */
        v->ahead = (size_t)STK_MIN(v->size, (uint64_t)SIZE_MAX);
        if (!stk__audview_get(v, 0, (size_t)v->size))
            return view_error(v, err, err_size);
    }
    uint32_t mask = 0;
    uint64_t pcm16 = 0;
    d->pcm16 = 0;
    if (fmt == STK__AUD_WAV)
        STK_TRY(wav_check(v, &mask, &pcm16, err, err_size));
    int k = fmt == STK__AUD_MP3;
    d->codec = k ? &stk__audcodec_mpg123 : &stk__audcodec_sndfile;
    if (!d->h[k])
        STK_TRY(d->codec->create(&d->h[k], err, err_size));
    char why[STK_ERRMSG_SIZE];
    rc = d->codec->open(d->h[k], v, d->lenient, &d->info, why, sizeof(why));
    if (v->rc < 0)
        return view_error(v, err, err_size);
    if (rc < 0)
        return stk__set_error(err, err_size, rc, "%s: %s", name, why);
    d->cur = d->h[k];
    d->pos = 0;
    d->info.format = fmt;
    if (fmt == STK__AUD_FLAC && d->info.channels >= 3 && flac_mask(v, &mask) < 0) {
        rc = view_error(v, err, err_size); /* the mask serves Downmix(2) of 3 to 8 channels */
        goto fail;
    }
    d->info.mask = mask;
    if (d->info.rate == 0 || d->info.rate > MAX_RATE || d->info.channels == 0)
        STK_FAIL_SIZED(err, err_size, STK_EFORMAT,
                       "%s: a header of %" PRIu32 " Hz, %" PRIu32 " channels is not audio", name,
                       d->info.rate, d->info.channels);
    if (d->info.channels > STK__AUD_MAX_CHANNELS)
        STK_FAIL_SIZED(err, err_size, STK_ELIMIT,
                       "%s: %" PRIu32 " channels (stoker reads at most %d)", name, d->info.channels,
                       STK__AUD_MAX_CHANNELS);
    if (d->info.frames <= 0 || d->info.frames == INT64_MAX)
        STK_FAIL_SIZED(err, err_size, STK_EFORMAT, "%s: %s", name,
                       d->info.frames == INT64_MAX
                           ? "its length is unknown (a truncated Ogg stream has no last page)"
                           : "no audio frames");
    /* libsndfile's frames from the data chunk on, 2 bytes a sample: read them here when all are
     * in the stream (wav_pcm16; the same floats, value / 32768, as libsndfile's) */
    if (pcm16 && (uint64_t)d->info.frames <= (v->size - (pcm16 - 1)) / (2u * d->info.channels))
        d->pcm16 = pcm16;
    d->seek_mode = fmt == STK__AUD_VORBIS ? SEEK_NONE
                   : fmt == STK__AUD_OPUS ? SEEK_PREROLL
                                          : SEEK_EXACT;
    *out = d->info;
    return STK_OK;
fail:
    if (d->cur)
        d->codec->close(d->cur);
    d->cur = NULL;
    return rc;
}

/* Point the view at a new stream (its buffer kept for reuse). */
static void view_reset(stk__audview *v, const uint8_t *mem, const stk__bytesrc *in, uint64_t size)
{
    v->mem = mem;
    v->in = in;
    v->size = size;
    v->lo = v->hi = 0;
    v->ahead = HEAD;
    v->fetched = 0;
    v->rc = STK_OK;
    v->why[0] = '\0';
}

stk_status stk__audio_open(stk__audiodec *d, const void *src, size_t size, stk__audinfo *out,
                           char *err, size_t err_size)
{
    view_reset(&d->v, src, NULL, size);
    return open_view(d, out, err, err_size);
}

stk_status stk__audio_open_in(stk__audiodec *d, const stk__bytesrc *in, stk__audinfo *out,
                              char *err, size_t err_size)
{
    view_reset(&d->v, NULL, in, in->size);
    return open_view(d, out, err, err_size);
}

uint64_t stk__audiodec_bytes_read(const stk__audiodec *d)
{
    return d->v.mem ? d->v.size : d->v.fetched;
}

/* Reopen the stream at frame 0 (a Vorbis read that must go back). */
static stk_status rewind_stream(stk__audiodec *d, char *err, size_t err_size)
{
    stk__audinfo info;
    stk_status rc = d->codec->open(d->cur, &d->v, d->lenient, &info, err, err_size);
    d->pos = 0;
    return rc;
}

/* Read the next `n` frames (fewer at the end: *got) and put frames [keep0, keep1) of the stream
 * among them into the planes (frame f at planes[p][f - keep0]). */
static stk_status read_frames(stk__audiodec *d, int64_t n, int64_t keep0, int64_t keep1,
                              float *const *planes, uint32_t n_planes, int64_t *got, char *err,
                              size_t err_size)
{
    stk_status rc = STK_OK;
    uint32_t ch = d->info.channels;
    *got = 0;
    STK_TRY(stk__audio_reserve(&d->chunk, &d->chunk_cap, (size_t)CHUNK * ch, err, err_size));
    while (*got < n) {
        int64_t want = (int64_t)STK_MIN((uint64_t)CHUNK, (uint64_t)(n - *got)), k = 0;
        rc = d->codec->read(d->cur, d->chunk, want, &k, err, err_size);
        int64_t f0 = d->pos, lo = STK_MAX(f0, keep0), hi = STK_MIN(f0 + k, keep1);
        if (lo < hi) {
            const float *fr = d->chunk + (size_t)(lo - f0) * ch;
            size_t m = (size_t)(hi - lo);
            if (ch == 1) { /* mono: as it is */
                memcpy(planes[0] + (lo - keep0), fr, m * sizeof(float));
            } else if (n_planes == ch) { /* deinterleave */
                for (uint32_t c = 0; c < ch; c++) {
                    float *o = planes[c] + (lo - keep0);
                    for (size_t i = 0; i < m; i++)
                        o[i] = fr[i * ch + c];
                }
            } else { /* the mean of the channels, summed in channel order */
                float *o = planes[0] + (lo - keep0);
                for (size_t i = 0; i < m; i++) {
                    float sum = 0.0f;
                    for (uint32_t c = 0; c < ch; c++)
                        sum += fr[i * ch + c];
                    o[i] = sum / (float)ch;
                }
            }
        }
        d->pos += k;
        *got += k;
        if (rc < 0 || k == 0)
            break;
    }
fail:
    return rc;
}

/* Frames [first, first + n) of a 16-bit PCM WAV (d->pcm16) into the planes, as read_frames puts
 * libsndfile's: each sample value / 32768 (libsndfile's float conversion: the same float), the
 * channels deinterleaved, or their mean (summed in channel order). The window's bytes are one
 * read of a stream read in place. */
static stk_status wav_pcm16(stk__audiodec *d, int64_t first, int64_t n, float *const *planes,
                            uint32_t n_planes, char *err, size_t err_size)
{
    uint32_t ch = d->info.channels;
    size_t ba = 2u * ch;
    const uint8_t *p =
        n ? stk__audview_get(&d->v, d->pcm16 - 1 + (uint64_t)first * ba, (size_t)n * ba) : NULL;
    if (n && !p)
        return view_error(&d->v, err, err_size);
    const float scale = 1.0f / 32768.0f;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (ch == 1) { /* mono on a little-endian host: one loop the compiler vectorises */
        float *o = planes[0];
        for (int64_t i = 0; i < n; i++) {
            int16_t v;
            memcpy(&v, p + 2 * i, 2);
            o[i] = (float)v * scale;
        }
        return STK_OK;
    }
#endif
    for (int64_t i = 0; i < n; i++, p += ba) {
        if (n_planes == ch) {
            for (uint32_t c = 0; c < ch; c++)
                planes[c][i] = (float)(int16_t)(uint16_t)(p[2 * c] | p[2 * c + 1] << 8) * scale;
        } else {
            float sum = 0.0f;
            for (uint32_t c = 0; c < ch; c++)
                sum += (float)(int16_t)(uint16_t)(p[2 * c] | p[2 * c + 1] << 8) * scale;
            planes[0][i] = sum / (float)ch;
        }
    }
    return STK_OK;
}

stk_status stk__audio_decode(stk__audiodec *d, int64_t first, int64_t n, float *const *planes,
                             uint32_t n_planes, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    const char *name = stk__audfmt_name(d->info.format);
    char why[STK_ERRMSG_SIZE] = "";
    int64_t got = 0, total = d->info.frames;
    d->checked = false;
    if (!d->cur || first < 0 || n < 0 || first > total - n ||
        (n_planes != 1 && n_planes != d->info.channels))
        return stk__set_error(err, err_size, STK_EINVAL,
                              "audio decode of frames [%" PRId64 ", %" PRId64 ") into %" PRIu32
                              " planes: outside the stream",
                              first, first + n, n_planes);
    bool pcm = d->info.format == STK__AUD_WAV || d->info.format == STK__AUD_AIFF;
    if (d->pcm16) {
        STK_TRY(wav_pcm16(d, first, n, planes, n_planes, err, err_size));
        d->checked = !d->lenient; /* as below: PCM has nothing to check but its header */
        return STK_OK;
    }
    if (!d->lenient && !d->trusted && !pcm) {
        /* the whole stream from frame 0, keeping the window as it passes */
        if (d->info.format == STK__AUD_VORBIS || d->info.format == STK__AUD_OPUS ||
            d->info.format == STK__AUD_OGG) {
            const uint8_t *all = stk__audview_get(&d->v, 0, (size_t)d->v.size);
            if (!all)
                return view_error(&d->v, err, err_size);
            STK_TRY(ogg_check(all, (size_t)d->v.size, err, err_size));
        }
        if (d->pos != 0)
            STK_TRY(rewind_stream(d, why, sizeof(why)));
        int64_t all = 0;
        rc = read_frames(d, INT64_MAX, first, first + n, planes, n_planes, &all, why, sizeof(why));
        if (d->v.rc < 0)
            return view_error(&d->v, err, err_size);
        if (rc < 0)
            STK_FAIL_SIZED(err, err_size, rc,
                           "%s: %s (after %" PRId64 " of its %" PRId64 " frames)", name, why, all,
                           total);
        if (all != total)
            STK_FAIL_SIZED(err, err_size, STK_EFORMAT,
                           "%s: %" PRId64 " frames decode where its header says %" PRId64
                           " (truncated or corrupt)",
                           name, all, total);
        d->checked = true;
        return STK_OK;
    }
    int64_t start = first; /* where reading starts */
    if (d->seek_mode == SEEK_PREROLL)
        start = STK_MAX((int64_t)0, first - OPUS_PREROLL);
    if (d->seek_mode == SEEK_NONE) {
        if (d->pos > first)
            STK_TRY(rewind_stream(d, why, sizeof(why)));
        start = d->pos;
    } else if (start != d->pos) {
        if (!d->v.mem)
            d->v.ahead = HEAD; /* a seek reads a little here and there (FLAC's search) */
        rc = d->codec->seek(d->cur, start, why, sizeof(why));
        if (d->v.rc < 0)
            return view_error(&d->v, err, err_size);
        if (rc < 0)
            STK_FAIL_SIZED(err, err_size, rc, "%s: %s", name, why);
        d->pos = start;
    }
    if (!d->v.mem) { /* the window's bytes in one read: its frames at the stream's mean size */
        double bytes = (double)(first + n - start) * ((double)d->v.size / (double)total) + HEAD;
        d->v.ahead = (size_t)STK_MIN((double)d->v.size, bytes);
    }
    rc = read_frames(d, first + n - start, first, first + n, planes, n_planes, &got, why,
                     sizeof(why));
    if (d->v.rc < 0)
        return view_error(&d->v, err, err_size);
    if (rc < 0 && d->lenient)
        rc = STK_OK; /* lenient: what decoded stands, the rest is zeros */
    if (rc == STK_OK && got < first + n - start) {
        if (!d->lenient) /* shorter than its header says */
            STK_FAIL_SIZED(err, err_size, STK_EFORMAT,
                           "%s: the stream ends at frame %" PRId64 " where its header says %" PRId64
                           " (truncated or corrupt)",
                           name, start + got, total);
        for (int64_t f = STK_MAX(start + got, first); f < first + n; f++) /* lenient: zeros */
            for (uint32_t c = 0; c < n_planes; c++)
                planes[c][f - first] = 0.0f;
    }
    if (rc < 0)
        STK_FAIL_SIZED(err, err_size, rc, "%s: %s", name, why);
    d->checked = pcm && !d->lenient; /* PCM has nothing to check but its length (the header) */
    return STK_OK;
fail:
    return rc;
}

stk_status stk_audio_check(const void *src, size_t size, uint32_t *rate, uint32_t *channels,
                           int64_t *frames)
{
    char err[STK_ERRMSG_SIZE];
    stk__audiodec *d = NULL;
    stk__audinfo info;
    float one[STK__AUD_MAX_CHANNELS];
    float *plane = one;
    if (!src && size)
        return stk__set_last_error(STK_EINVAL, "stk_audio_check: NULL src");
    stk_status rc = stk__audiodec_create(&d);
    if (rc < 0)
        return rc;
    /* strict and not trusted: asking for frame 0 decodes the stream to its end */
    rc = stk__audio_open(d, src, size, &info, err, sizeof(err));
    if (rc >= 0)
        rc = stk__audio_decode(d, 0, 1, &plane, 1, err, sizeof(err));
    stk__audiodec_destroy(d);
    if (rc < 0)
        return stk__set_last_error(rc, "%s", err);
    if (rate)
        *rate = info.rate;
    if (channels)
        *channels = info.channels;
    if (frames)
        *frames = info.frames;
    return STK_OK;
}
