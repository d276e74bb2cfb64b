/*
 * test_audio_decode.c: the audio decoders (src/decode/stk_audio_dec.c, stk_sndfile.c,
 * stk_mpg123.c) from memory. Fixtures are encoded here, in memory, by libsndfile itself (WAV,
 * FLAC, Ogg Vorbis, Opus, MP3 where its build writes it): a window read after a seek gives the
 * samples of a full decode (exactly, Opus within its pre-roll's tolerance); strict first reads
 * fail truncated and corrupt streams with the codec's reason; lenient ones zero-fill; the format
 * comes from the bytes. Skips (77) in a build without libsndfile.
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

/* A stereo test signal: a chord on the left, a chirp on the right, 0.5 full scale. */
static float *test_signal(void)
{
    float *x = malloc(sizeof(float) * 2 * FRAMES);
    for (int i = 0; i < FRAMES; i++) {
        double t = (double)i / RATE;
        x[2 * i] = (float)(0.25 * sin(2 * M_PI * 220 * t) + 0.25 * sin(2 * M_PI * 330 * t));
        x[2 * i + 1] = (float)(0.5 * sin(2 * M_PI * (200 + 900 * t) * t));
    }
    return x;
}

/* The signal encoded as `format` at `rate` (NULL when libsndfile cannot write it). */
static uint8_t *encode(int format, int rate, size_t *size)
{
    static SF_VIRTUAL_IO vio = {m_len, m_seek, m_read, m_write, m_tell};
    membuf m = {0};
    SF_INFO info = {.samplerate = rate, .channels = 2, .format = format};
    if (!sf_format_check(&info))
        return NULL;
    SNDFILE *f = sf_open_virtual(&vio, SFM_WRITE, &info, &m);
    if (!f)
        return NULL;
    float *x = test_signal();
    sf_writef_float(f, x, FRAMES);
    sf_close(f);
    free(x);
    *size = (size_t)m.size;
    return m.p;
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

T_MAIN(T_CASE(test_wav_exact), T_CASE(test_compressed_windows), T_CASE(test_ogg_crc),
       T_CASE(test_not_audio))

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
