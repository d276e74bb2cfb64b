/*
 * test_audio_decode.c: the audio decoders (src/decode/stk_audio_dec.c, stk_sndfile.c,
 * stk_mpg123.c) from memory. Fixtures are encoded here, in memory, by libsndfile itself (WAV,
 * FLAC, Ogg Vorbis, Opus, MP3 where its build writes it): a window read after a seek gives the
 * samples of a full decode (exactly, Opus within its pre-roll's tolerance); strict first reads
 * fail truncated and corrupt streams with the codec's reason; lenient ones zero-fill; the format
 * comes from the bytes; a record read in place gives the same frames, reading less. Skips (77) in a
 * build without libsndfile.
 */
#include "decode/stk_audio_decode.h"
#include "t.h"

#include <math.h>

#ifdef STK_HAVE_SNDFILE
#include <sndfile.h>

/* ---- a memory file libsndfile writes into ---- */

typedef struct membuf {
    uint8_t *p;
    sf_count_t size, cap, pos;
} membuf;

static sf_count_t m_len(void *u)
{
    return ((membuf *)u)->size;
}

static sf_count_t m_seek(sf_count_t off, int whence, void *u)
{
    membuf *m = u;
    m->pos = (whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->pos : m->size) + off;
    return m->pos;
}

static sf_count_t m_read(void *ptr, sf_count_t n, void *u)
{
    membuf *m = u;
    if (m->pos >= m->size)
        return 0;
    n = n < m->size - m->pos ? n : m->size - m->pos;
    memcpy(ptr, m->p + m->pos, (size_t)n);
    m->pos += n;
    return n;
}

static sf_count_t m_write(const void *ptr, sf_count_t n, void *u)
{
    membuf *m = u;
    if (m->pos + n > m->cap) {
        m->cap = (m->pos + n) * 2;
        m->p = realloc(m->p, (size_t)m->cap);
    }
    memcpy(m->p + m->pos, ptr, (size_t)n);
    m->pos += n;
    if (m->pos > m->size)
        m->size = m->pos;
    return n;
}

static sf_count_t m_tell(void *u)
{
    return ((membuf *)u)->pos;
}

#define RATE 44100
#define FRAMES 88200 /* 2 s */

/* A test signal of `ch` channels: a chord on the left, a chirp on the right, a tone of its own on
 * each further channel, 0.5 full scale. */
static float *test_signal(int ch)
{
    float *x = malloc(sizeof(float) * (size_t)ch * FRAMES);
    for (int i = 0; i < FRAMES; i++) {
        double t = (double)i / RATE;
        x[ch * i] = (float)(0.25 * sin(2 * M_PI * 220 * t) + 0.25 * sin(2 * M_PI * 330 * t));
        if (ch > 1)
            x[ch * i + 1] = (float)(0.5 * sin(2 * M_PI * (200 + 900 * t) * t));
        for (int c = 2; c < ch; c++)
            x[ch * i + c] = (float)(0.5 * sin(2 * M_PI * (100 + 70 * c) * t));
    }
    return x;
}

/* The signal of `ch` channels encoded as `format` at `rate` (NULL when libsndfile cannot write
 * it). */
static uint8_t *encode_ch(int format, int rate, int ch, size_t *size)
{
    static SF_VIRTUAL_IO vio = {m_len, m_seek, m_read, m_write, m_tell};
    membuf m = {0};
    SF_INFO info = {.samplerate = rate, .channels = ch, .format = format};
    if (!sf_format_check(&info))
        return NULL;
    SNDFILE *f = sf_open_virtual(&vio, SFM_WRITE, &info, &m);
    if (!f)
        return NULL;
    float *x = test_signal(ch);
    sf_writef_float(f, x, FRAMES);
    sf_close(f);
    free(x);
    *size = (size_t)m.size;
    return m.p;
}

static uint8_t *encode(int format, int rate, size_t *size)
{
    return encode_ch(format, rate, 2, size);
}

/* Decode frames [first, first + n) of src into two planes (malloc'd, interleaved back). */
static stk_status decode(stk__audiodec *d, const uint8_t *src, size_t size, int64_t first,
                         int64_t n, float **out, stk__audinfo *info, char *err)
{
    *out = NULL;
    stk_status rc = stk__audio_open(d, src, size, info, err, 256);
    if (rc < 0)
        return rc;
    float *pl = calloc((size_t)(2 * n + 1), sizeof(float));
    float *planes[2] = {pl, pl + n};
    rc = stk__audio_decode(d, first, n, planes, info->channels, err, 256);
    *out = pl;
    return rc;
}

static int test_wav_exact(void)
{
    size_t size;
    uint8_t *wav = encode(SF_FORMAT_WAV | SF_FORMAT_PCM_16, RATE, &size);
    T_CHECK(wav);
    stk__audiodec *d;
    T_OK(stk__audiodec_create(&d));
    stk__audinfo info;
    float *all, *win;
    char err[256];
    T_OK(decode(d, wav, size, 0, FRAMES, &all, &info, err));
    T_EQ(info.format, STK__AUD_WAV);
    T_EQ(info.rate, RATE);
    T_EQ(info.channels, 2);
    T_EQ(info.frames, FRAMES);
    T_CHECK(stk__audiodec_checked(d)); /* PCM: the header is all there is to check */
    /* The samples are int16 over 32768, as torchaudio's */
    const int16_t *pcm = (const int16_t *)(const void *)(wav + 44);
    for (int i = 0; i < FRAMES; i += 997)
        T_CHECK(all[i] == (float)pcm[2 * i] / 32768.0f &&
                all[FRAMES + i] == pcm[2 * i + 1] / 32768.0f);
    /* A window after a seek: the same samples */
    T_OK(decode(d, wav, size, 12345, 1000, &win, &info, err));
    T_CHECK(memcmp(win, all + 12345, 1000 * sizeof(float)) == 0);
    T_CHECK(memcmp(win + 1000, all + FRAMES + 12345, 1000 * sizeof(float)) == 0);
    free(win);
    /* One plane: the mean of the channels */
    float mono[1000], *mp[1] = {mono};
    T_OK(stk__audio_open(d, wav, size, &info, err, sizeof(err)));
    T_OK(stk__audio_decode(d, 500, 1000, mp, 1, err, sizeof(err)));
    for (int i = 0; i < 1000; i++)
        T_CHECK(mono[i] == (all[500 + i] + all[FRAMES + 500 + i]) / 2.0f);
    /* Truncated: the data chunk says more than follows */
    T_EQ(stk__audio_open(d, wav, size - 1000, &info, err, sizeof(err)), STK_EFORMAT);
    T_CHECKF(strstr(err, "WAV: truncated: its data chunk at byte 36 says 352800 bytes but "
                         "351800 follow"),
             "%s", err);
    free(all);
    free(wav);
    stk__audiodec_destroy(d);
    return 0;
}

/* Every compressed format: a trusted window read (the seek path) equals the full strict decode's
 * window; the full decode is checked. */
static int test_compressed_windows(void)
{
    static const struct {
        int format;
        int rate;
        stk__audfmt fmt;
        float tol; /* Opus: a seek decodes 80 ms of pre-roll, not the whole past */
    } cases[] = {
        {SF_FORMAT_FLAC | SF_FORMAT_PCM_16, RATE, STK__AUD_FLAC, 0.0f},
        {SF_FORMAT_FLAC | SF_FORMAT_PCM_24, 48000, STK__AUD_FLAC, 0.0f},
        {SF_FORMAT_OGG | SF_FORMAT_VORBIS, RATE, STK__AUD_VORBIS, 0.0f},
        {SF_FORMAT_OGG | SF_FORMAT_OPUS, 48000, STK__AUD_OPUS, 3e-4f},
        {SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, RATE, STK__AUD_MP3, 0.0f},
    };
    int tried = 0;
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        size_t size;
        uint8_t *src = encode(cases[k].format, cases[k].rate, &size);
        if (!src)
            continue; /* this libsndfile cannot write it (MP3 without lame) */
#ifndef STK_HAVE_MPG123
        if (cases[k].fmt == STK__AUD_MP3) {
            free(src);
            continue;
        }
#endif
        tried++;
        stk__audiodec *d;
        T_OK(stk__audiodec_create(&d));
        stk__audinfo info;
        float *all, *win;
        char err[256];
        T_OK(stk__audio_open(d, src, size, &info, err, sizeof(err)));
        int64_t n = info.frames;
        T_CHECKF(info.format == cases[k].fmt && info.channels == 2 &&
                     llabs(n - (int64_t)FRAMES) < 3000,
                 "case %zu: format %d, %lld frames", k, (int)info.format, (long long)n);
        T_OK(decode(d, src, size, 0, n, &all, &info, err));
        T_CHECKF(stk__audiodec_checked(d), "case %zu", k);
        stk__audiodec_set_trusted(d, true);
        for (int64_t first = 7; first < n - 5000; first += n / 5) {
            T_OK(decode(d, src, size, first, 4000, &win, &info, err));
            T_CHECK(!stk__audiodec_checked(d));
            float worst = 0.0f;
            for (int c = 0; c < 2; c++)
                for (int i = 0; i < 4000; i++)
                    worst = fmaxf(worst, fabsf(win[c * 4000 + i] - all[c * n + first + i]));
            T_CHECKF(worst <= cases[k].tol, "case %zu at %lld: %g", k, (long long)first, worst);
            free(win);
        }
        stk__audiodec_set_trusted(d, false);
        /* Cut short: strict fails, naming the codec; lenient reads a window before the cut */
        T_CHECK(decode(d, src, size * 6 / 10, 0, 100, &win, &info, err) < 0);
        T_CHECKF(strstr(err, stk__audfmt_name(cases[k].fmt)), "case %zu: %s", k, err);
        free(win);
        if (cases[k].fmt == STK__AUD_FLAC || cases[k].fmt == STK__AUD_MP3) {
            /* (a cut MP3's LAME tag no longer fits it: libmpg123 then drops the tag's encoder
             * delay, so its samples come ~1105 frames late; FLAC's are the same) */
            stk__audiodec_set_lenient(d, true);
            T_OK(decode(d, src, size * 6 / 10, 100, 1000, &win, &info, err));
            T_CHECK(cases[k].fmt == STK__AUD_MP3 ||
                    memcmp(win, all + 100, 1000 * sizeof(float)) == 0);
            free(win);
            stk__audiodec_set_lenient(d, false);
        }
        free(all);
        free(src);
        stk__audiodec_destroy(d);
    }
    T_CHECK(tried >= 4);
    return 0;
}

static int test_ogg_crc(void)
{
    size_t size;
    uint8_t *src = encode(SF_FORMAT_OGG | SF_FORMAT_VORBIS, RATE, &size);
    T_CHECK(src);
    src[size / 2] ^= 0x5a; /* inside some page: its CRC no longer matches */
    stk__audiodec *d;
    T_OK(stk__audiodec_create(&d));
    stk__audinfo info;
    float *out;
    char err[256];
    stk_status rc = decode(d, src, size, 0, 100, &out, &info, err);
    T_EQ(rc, STK_EFORMAT);
    T_CHECKF(strstr(err, "fails its CRC (corrupt)"), "%s", err);
    free(out);
    free(src);
    stk__audiodec_destroy(d);
    return 0;
}

static int test_not_audio(void)
{
    stk__audiodec *d;
    T_OK(stk__audiodec_create(&d));
    stk__audinfo info;
    char err[256];
    static const char text[] = "hello, not audio at all";
    T_EQ(stk__audio_open(d, text, sizeof(text), &info, err, sizeof(err)), STK_EFORMAT);
    T_CHECKF(strstr(err, "not a supported audio file") && strstr(err, "0x68 0x65 0x6c 0x6c"), "%s",
             err);
    T_EQ(stk__audio_open(d, text, 0, &info, err, sizeof(err)), STK_EFORMAT);
    T_CHECK(strstr(err, "empty (0 bytes)"));
    static const uint8_t riff[] = "RIFF\x24\0\0\0WAVEfmt ";
    T_EQ(stk__audio_open(d, riff, sizeof(riff) - 1, &info, err, sizeof(err)), STK_EFORMAT);
    T_CHECKF(strstr(err, "WAV: libsndfile: "), "%s", err);
    stk__audiodec_destroy(d);
    /* The magic sniffing the decoders and the field pick share */
    T_EQ(stk__audio_magic((const uint8_t *)"fLaC\0\0\0\x22", 8, true), STK__AUD_FLAC);
    T_EQ(stk__audio_magic((const uint8_t *)"ID3\x04\0\0\0\0\0\0\xff\xfb\x90\x64", 14, true),
         STK__AUD_MP3);
    T_EQ(stk__audio_magic((const uint8_t *)"\xff\xfb\x90\x64", 4, true), STK__AUD_UNKNOWN);
    T_EQ(stk__audio_magic((const uint8_t *)"\xff\xfb\x90\x64", 4, false), STK__AUD_MP3);
    T_EQ(stk__audio_magic((const uint8_t *)"\xff\xff\xff\xff", 4, false), STK__AUD_UNKNOWN);
    return 0;
}

/* ---- a record read in place (stk__audio_open_in) ---- */

typedef struct memsrc {
    const uint8_t *p;
    uint64_t fail_at; /* a read reaching this byte fails (UINT64_MAX: none) */
    uint64_t reads, bytes;
} memsrc;

static stk_status memsrc_read(void *ctx, uint64_t off, void *buf, size_t n, char *err,
                              size_t err_size)
{
    memsrc *m = ctx;
    if (off + n > m->fail_at)
        return stk__set_error(err, err_size, STK_EIO, "clip.wav: Input/output error");
    memcpy(buf, m->p + off, n);
    m->reads++;
    m->bytes += n;
    return STK_OK;
}

/* Frames [first, first + n) into `planes` planes, from memory or read in place; *bytes receives
 * what the in-place read fetched. */
static stk_status window(stk__audiodec *d, const uint8_t *src, size_t size, bool in_place,
                         int64_t first, int64_t n, uint32_t planes, float *out, uint64_t *bytes,
                         char *err)
{
    memsrc m = {src, UINT64_MAX, 0, 0};
    stk__bytesrc in = {size, memsrc_read, &m};
    stk__audinfo info;
    stk_status rc = in_place ? stk__audio_open_in(d, &in, &info, err, 256)
                             : stk__audio_open(d, src, size, &info, err, 256);
    if (rc < 0)
        return rc;
    float *pl[STK__AUD_MAX_CHANNELS];
    for (uint32_t c = 0; c < planes; c++)
        pl[c] = out + (size_t)c * (size_t)n;
    rc = stk__audio_decode(d, first, n, pl, planes, err, 256);
    *bytes = stk__audiodec_bytes_read(d);
    return rc;
}

/* The frames of a record read in place are those of the record in memory, bit for bit, for
 * windows at the start, middle and end, every channel count, one plane or all, strict, trusted
 * and lenient; a PCM window reads its header and its own bytes only. */
static int test_in_place_equals_memory(void)
{
    static const struct {
        int format, ch;
        bool pcm;
    } cases[] = {
        {SF_FORMAT_WAV | SF_FORMAT_PCM_U8, 1, true},
        {SF_FORMAT_WAV | SF_FORMAT_PCM_16, 3, true},
        {SF_FORMAT_WAV | SF_FORMAT_PCM_24, 5, true},
        {SF_FORMAT_WAV | SF_FORMAT_PCM_32, 2, true},
        {SF_FORMAT_WAV | SF_FORMAT_FLOAT, 1, true},
        {SF_FORMAT_AIFF | SF_FORMAT_PCM_16, 3, true},
        {SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 3, false},
        {SF_FORMAT_FLAC | SF_FORMAT_PCM_24, 1, false},
        {SF_FORMAT_OGG | SF_FORMAT_VORBIS, 2, false},
        {SF_FORMAT_OGG | SF_FORMAT_OPUS, 1, false},
        {SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, 2, false},
    };
    int tried = 0;
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        size_t size;
        uint8_t *src = encode_ch(cases[k].format, RATE, cases[k].ch, &size);
        if (!src)
            continue; /* this libsndfile cannot write it */
#ifndef STK_HAVE_MPG123
        if ((cases[k].format & SF_FORMAT_TYPEMASK) == SF_FORMAT_MPEG) {
            free(src);
            continue;
        }
#endif
        tried++;
        stk__audiodec *d;
        T_OK(stk__audiodec_create(&d));
        stk__audinfo info;
        char err[256];
        T_OK(stk__audio_open(d, src, size, &info, err, sizeof(err)));
        int64_t total = info.frames, n = 4410; /* 0.1 s */
        uint32_t ch = info.channels;
        float *a = malloc(sizeof(float) * ch * (size_t)n),
              *b = malloc(sizeof(float) * ch * (size_t)n);
        const int64_t firsts[] = {0, total / 2 - 1234, total - n};
        for (int mode = 0; mode < 3; mode++) { /* strict, trusted, lenient */
            stk__audiodec_set_trusted(d, mode == 1);
            stk__audiodec_set_lenient(d, mode == 2);
            for (size_t f = 0; f < 3; f++)
                for (uint32_t planes = 1; planes <= ch; planes += ch > 1 ? ch - 1 : 1) {
                    uint64_t bytes_a, bytes_b;
                    T_OK(window(d, src, size, false, firsts[f], n, planes, a, &bytes_a, err));
                    T_OK(window(d, src, size, true, firsts[f], n, planes, b, &bytes_b, err));
                    T_CHECKF(memcmp(a, b, sizeof(float) * planes * (size_t)n) == 0,
                             "case %zu mode %d at %lld, %u planes", k, mode, (long long)firsts[f],
                             planes);
                    T_EQ(bytes_a, size);
                    if (cases[k].pcm) /* the header (4 KiB) and the window's bytes, no more */
                        T_CHECKF(bytes_b <=
                                     4096 + (uint64_t)(n + 1) * (size / (uint64_t)total + 1) + 4096,
                                 "case %zu: %llu of %zu bytes read", k, (unsigned long long)bytes_b,
                                 size);
                    else if (mode == 0) /* strict: decoded to its end, read whole once (and
                                           the header's 4 KiB before the format was known) */
                        T_CHECKF(bytes_b >= size && bytes_b <= size + 4096, "case %zu: %llu of %zu",
                                 k, (unsigned long long)bytes_b, size);
                }
        }
        stk__audiodec_set_trusted(d, false);
        stk__audiodec_set_lenient(d, false);
        if (cases[k].pcm) { /* a 0.1 s window of a 2 s file reads a small part of it */
            uint64_t bytes;
            T_OK(window(d, src, size, true, total / 2, n, ch, b, &bytes, err));
            T_CHECKF(bytes * 5 < size, "case %zu: %llu of %zu bytes", k, (unsigned long long)bytes,
                     size);
        }
        free(a);
        free(b);
        free(src);
        stk__audiodec_destroy(d);
    }
    T_CHECK(tried >= 9);
    return 0;
}

/* A read error in place is the decode's error, as the byte source gave it; a truncated WAV read
 * in place fails from its header as it does in memory. */
static int test_in_place_errors(void)
{
    size_t size;
    uint8_t *wav = encode(SF_FORMAT_WAV | SF_FORMAT_PCM_16, RATE, &size);
    T_CHECK(wav);
    stk__audiodec *d;
    T_OK(stk__audiodec_create(&d));
    stk__audinfo info;
    char err[256];
    float out[2000], *pl[2] = {out, out + 1000};
    /* the header reads, the window's bytes fail */
    memsrc m = {wav, size / 2, 0, 0};
    stk__bytesrc in = {size, memsrc_read, &m};
    T_OK(stk__audio_open_in(d, &in, &info, err, sizeof(err)));
    T_EQ(stk__audio_decode(d, FRAMES - 1000, 1000, pl, 2, err, sizeof(err)), STK_EIO);
    T_CHECKF(strstr(err, "clip.wav: Input/output error"), "%s", err);
    /* the header fails */
    m = (memsrc){wav, 10, 0, 0};
    T_EQ(stk__audio_open_in(d, &in, &info, err, sizeof(err)), STK_EIO);
    T_CHECKF(strstr(err, "clip.wav: Input/output error"), "%s", err);
    /* truncated: its data chunk says more than follows */
    m = (memsrc){wav, UINT64_MAX, 0, 0};
    in.size = size - 1000;
    T_EQ(stk__audio_open_in(d, &in, &info, err, sizeof(err)), STK_EFORMAT);
    T_CHECKF(strstr(err, "WAV: truncated: its data chunk at byte 36 says 352800 bytes but "
                         "351800 follow"),
             "%s", err);
    in.size = 0;
    T_EQ(stk__audio_open_in(d, &in, &info, err, sizeof(err)), STK_EFORMAT);
    T_CHECK(strstr(err, "empty (0 bytes)"));
    free(wav);
    stk__audiodec_destroy(d);
    return 0;
}

T_MAIN(T_CASE(test_wav_exact), T_CASE(test_compressed_windows), T_CASE(test_ogg_crc),
       T_CASE(test_not_audio), T_CASE(test_in_place_equals_memory), T_CASE(test_in_place_errors))

#else /* built without libsndfile */

static int test_built_without_sndfile(void)
{
    stk__audiodec *d;
    T_OK(stk__audiodec_create(&d));
    stk__audinfo info;
    char err[256];
    static const char wav[] = "RIFF\x24\0\0\0WAVEfmt ";
    T_EQ(stk__audio_open(d, wav, sizeof(wav) - 1, &info, err, sizeof(err)), STK_ENOTSUP);
    T_CHECKF(strstr(err, "stoker was built without libsndfile"), "%s", err);
    stk__audiodec_destroy(d);
    return 0;
}

T_MAIN(T_CASE(test_built_without_sndfile))
#endif
