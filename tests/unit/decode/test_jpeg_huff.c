/*
 * test_jpeg_huff.c: stoker's Huffman decoder (src/decode/stk_jpeg_huff.c) against libjpeg-turbo's
 * own, through the decoder API: two decoders, one with stk__decoder_set_own_entropy(false), must
 * give the same status, the same message and the same pixels for every decode of every input,
 * clean or corrupt, strict or lenient, first read or trusted, full or windowed, at every DCT
 * scale, exact, fast and as planes. The clean inputs must be taken by stoker's decoder (never
 * handed back), the corrupt ones exercise both of its answers (taken, or handed back to libjpeg),
 * and damage after a window is still rejected by a first (untrusted) strict read of the window.
 *
 * Inputs are encoded here with libjpeg's compression API: 4:2:0, 4:2:2, 4:4:0, 4:4:4 and
 * grayscale, restart intervals (every MCU, every 7, every row), optimised Huffman tables,
 * progressive (which libjpeg keeps), odd sizes; then damaged by a deterministic generator.
 */
#include "decode/stk_codec.h"
#include "t.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#define ERRSZ 512

static uint32_t lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* An encoding: chroma sampling of the luma (h, v), quality, and the encoder's options. */
typedef struct enc {
    int h, v; /* luma sampling factors (chroma 1x1); 0 = grayscale */
    int quality;
    int restart_mcus, restart_rows;
    bool optimize, progressive;
} enc;

/* A photo-like image with sensor noise (what makes the entropy-coded data dense). */
static uint8_t *synth(int w, int h, uint32_t seed)
{
    uint8_t *p = malloc((size_t)w * h * 3);
    if (!p)
        return NULL;
    uint32_t s = seed;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                int v = 40 + (x * (c + 2) * 40) / w + (y * 90) / h + ((x / 11 + y / 5) % 4) * 15;
                v += (int)(lcg(&s) % 25) - 12;
                p[((size_t)y * w + x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return p;
}

/* Encode w x h RGB with libjpeg; returns a malloc'd JPEG. */
static uint8_t *encode(const uint8_t *px, int w, int h, const enc *e, size_t *size)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    unsigned char *mem = NULL;
    unsigned long n = 0;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &mem, &n);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    if (e->h == 0) {
        jpeg_set_colorspace(&c, JCS_GRAYSCALE);
    } else {
        c.comp_info[0].h_samp_factor = e->h;
        c.comp_info[0].v_samp_factor = e->v;
    }
    jpeg_set_quality(&c, e->quality, TRUE);
    c.optimize_coding = e->optimize;
    c.restart_interval = (unsigned)e->restart_mcus;
    c.restart_in_rows = e->restart_rows;
    if (e->progressive)
        jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    for (int y = 0; y < h; y++) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)y * w * 3);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    uint8_t *out = malloc(n);
    if (out)
        memcpy(out, mem, n);
    free(mem);
    *size = n;
    return out;
}

/* The offset of the entropy-coded data (after the first SOS segment), or 0. */
static size_t scan_start(const uint8_t *j, size_t n)
{
    for (size_t i = 2; i + 4 < n; i++)
        if (j[i] == 0xFF && j[i + 1] == 0xDA)
            return i + 2 + ((size_t)j[i + 2] << 8 | j[i + 3]);
    return 0;
}

/* One decode's outcome: status, message, pixels (RGB rows of the buffer, or the three planes). */
typedef struct outcome {
    stk_status rc;
    char msg[ERRSZ];
    uint8_t *px;
    size_t n;
    bool checked;
} outcome;

/* Mode of a decode: 0 exact, 1 fast, 2 planes. */
static outcome run(stk__decoder *d, const uint8_t *j, size_t n, int mode, uint32_t x, uint32_t y,
                   uint32_t w, uint32_t h, uint32_t min_w, uint32_t min_h)
{
    outcome o = {0};
    stk__imginfo info;
    o.rc = stk__image_probe(d, j, n, &info, o.msg, ERRSZ);
    if (o.rc < 0)
        return o;
    if (x >= info.width || y >= info.height) {
        x = 0;
        y = 0;
    }
    w = w && w <= info.width - x ? w : info.width - x;
    h = h && h <= info.height - y ? h : info.height - y;
    min_w = min_w > w ? w : min_w;
    min_h = min_h > h ? h : min_h;
    stk__decoded out, pl[3];
    if (mode == 2)
        o.rc = stk__image_decode_planes(d, j, n, &info, x, y, w, h, min_w, min_h, pl, o.msg, ERRSZ);
    else
        o.rc = (mode ? stk__image_decode_fast : stk__image_decode)(
            d, j, n, &info, x, y, w, h, min_w, min_h, &out, o.msg, ERRSZ);
    o.checked = stk__decoder_checked(d);
    if (o.rc != STK_OK)
        return o;
    int np = mode == 2 ? 3 : 1;
    const stk__decoded *b = mode == 2 ? pl : &out;
    size_t total = 0;
    for (int i = 0; i < np; i++)
        total += (size_t)b[i].width * (mode == 2 ? 1 : 3) * b[i].height;
    o.px = malloc(total ? total : 1);
    for (int i = 0; i < np && o.px; i++) {
        size_t row = (size_t)b[i].width * (mode == 2 ? 1 : 3);
        for (uint32_t r = 0; r < b[i].height; r++, o.n += row)
            memcpy(o.px + o.n, b[i].rgb + r * b[i].stride, row);
    }
    return o;
}

/* Decode with both decoders (own: stoker's entropy decoder; lib: libjpeg's) in the same mode and
 * settings; 0 when the outcomes are identical. */
static int same(stk__decoder *own, stk__decoder *lib, const uint8_t *j, size_t n, int mode,
                uint32_t x, uint32_t y, uint32_t w, uint32_t h, uint32_t min_w, uint32_t min_h,
                const char *what)
{
    outcome a = run(own, j, n, mode, x, y, w, h, min_w, min_h);
    outcome b = run(lib, j, n, mode, x, y, w, h, min_w, min_h);
    int bad = a.rc != b.rc || a.checked != b.checked || strcmp(a.msg, b.msg) != 0 || a.n != b.n ||
              (a.n && memcmp(a.px, b.px, a.n) != 0);
    if (bad)
        fprintf(stderr,
                "  %s: mode %d window %u,%u %ux%u min %ux%u: own rc %d '%s' checked %d, "
                "libjpeg rc %d '%s' checked %d, pixels %s\n",
                what, mode, x, y, w, h, min_w, min_h, a.rc, a.msg, a.checked, b.rc, b.msg,
                b.checked,
                a.n == b.n && (!a.n || memcmp(a.px, b.px, a.n) == 0) ? "equal" : "differ");
    free(a.px);
    free(b.px);
    return bad;
}

/* The two decoders compared: *own with stoker's entropy decoder (the default), *lib with
 * libjpeg's. */
static stk_status pair_create(stk__decoder **own, stk__decoder **lib)
{
    if (stk__decoder_create(0, own) < 0)
        return STK_ENOMEM;
    if (stk__decoder_create(0, lib) < 0) {
        stk__decoder_destroy(*own);
        return STK_ENOMEM;
    }
    stk__decoder_set_own_entropy(*lib, false);
    return STK_OK;
}

static void pair_destroy(stk__decoder *own, stk__decoder *lib)
{
    stk__decoder_destroy(own);
    stk__decoder_destroy(lib);
}

/* A pair of decoders in one mode (strict or lenient, trusted or not). */
static void set_both(stk__decoder *own, stk__decoder *lib, bool lenient, bool trusted)
{
    stk__decoder_set_lenient(own, lenient);
    stk__decoder_set_lenient(lib, lenient);
    stk__decoder_set_trusted(own, trusted);
    stk__decoder_set_trusted(lib, trusted);
}

/* Every decode this file compares on one input: full exact, 1/8 whole, windows at each scale in
 * each mode, strict and lenient, untrusted and (strict) trusted. Returns the number that differ. */
static int compare_all(stk__decoder *own, stk__decoder *lib, const uint8_t *j, size_t n,
                       uint32_t seed, const char *what)
{
    int bad = 0;
    for (int lenient = 0; lenient < 2; lenient++)
        for (int trusted = 0; trusted < 2 - lenient; trusted++) {
            set_both(own, lib, lenient, trusted);
            uint32_t s = seed;
            bad += same(own, lib, j, n, 0, 0, 0, 0, 0, 100000, 100000, what); /* full, exact */
            bad += same(own, lib, j, n, 1, 0, 0, 0, 0, 0, 0, what);           /* whole at 1/8 */
            for (int k = 0; k < 3; k++) {
                uint32_t x = lcg(&s) % 64, y = lcg(&s) % 64, w = 8 + lcg(&s) % 120,
                         h = 8 + lcg(&s) % 120, m = lcg(&s) % 4;
                uint32_t min = m == 0 ? 100000 : m == 1 ? w / 2 : m == 2 ? w / 4 : 1;
                bad += same(own, lib, j, n, k, x, y, w, h, min, min, what);
            }
        }
    set_both(own, lib, false, false);
    return bad;
}

/* The encodings of the clean inputs. */
static const enc encodings[] = {
    {2, 2, 90, 0, 0, false, false}, {2, 2, 75, 0, 0, true, false},  {2, 1, 95, 0, 0, false, false},
    {1, 2, 85, 0, 0, false, false}, {1, 1, 92, 0, 0, false, false}, {0, 0, 90, 0, 0, false, false},
    {2, 2, 90, 1, 0, false, false}, {2, 2, 88, 7, 0, true, false},  {1, 1, 80, 0, 1, false, false},
    {0, 0, 70, 3, 0, true, false},  {2, 2, 98, 0, 2, false, false}, {2, 2, 90, 0, 0, false, true},
};
#define N_ENC (sizeof(encodings) / sizeof(encodings[0]))

static int test_clean_streams(void)
{
    stk__decoder *own, *lib;
    T_OK(pair_create(&own, &lib));
    static const int sizes[][2] = {{160, 120}, {173, 97}, {64, 200}, {17, 9}, {1, 1}, {331, 250}};
    uint64_t taken = 0, gave_up = 0, expect = 0;
    for (size_t e = 0; e < N_ENC; e++)
        for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
            int w = sizes[z][0], h = sizes[z][1];
            uint8_t *px = synth(w, h, (uint32_t)(e * 31 + z));
            size_t n;
            uint8_t *j = px ? encode(px, w, h, &encodings[e], &n) : NULL;
            T_CHECK(j);
            char what[64];
            snprintf(what, sizeof(what), "encoding %zu, %dx%d", e, w, h);
            T_EQ(compare_all(own, lib, j, n, (uint32_t)(e * 7 + z), what), 0);
            /* compare_all's 15 decodes, less the 3 as planes of a grayscale image */
            if (!encodings[e].progressive)
                expect += encodings[e].h ? 15 : 12;
            free(px);
            free(j);
        }
    stk__decoder_entropy_counts(own, &taken, &gave_up);
    /* every decode of a sequential image was taken over, none handed back */
    T_EQ(gave_up, 0);
    T_EQ(taken, expect);
    uint64_t lib_taken, lib_gave_up;
    stk__decoder_entropy_counts(lib, &lib_taken, &lib_gave_up);
    T_EQ(lib_taken, 0);
    pair_destroy(own, lib);
    return 0;
}

/* One damaged copy of j (n bytes, entropy data from `at`): kind chosen by the generator. The
 * copy may be longer (insertions): *out_n. */
static uint8_t *damage(const uint8_t *j, size_t n, size_t at, uint32_t *s, size_t *out_n)
{
    uint8_t *c = malloc(n + 16);
    if (!c)
        return NULL;
    memcpy(c, j, n);
    size_t span = n - 2 - at, pos = at + lcg(s) % span;
    *out_n = n;
    switch (lcg(s) % 10) {
    case 0: /* one bit */
        c[pos] ^= (uint8_t)(1u << (lcg(s) % 8));
        break;
    case 1: /* a run of random bytes */
        for (size_t k = 0; k < 6 && pos + k < n - 2; k++)
            c[pos + k] = (uint8_t)lcg(s);
        break;
    case 2: { /* a marker inserted: RSTn, EOI, DHT, or a byte libjpeg reads as one */
        static const uint8_t m[] = {0xD0, 0xD3, 0xD7, 0xD9, 0xC4, 0x01, 0xFE, 0xE1};
        memmove(c + pos + 2, c + pos, n - pos);
        c[pos] = 0xFF;
        c[pos + 1] = m[lcg(s) % sizeof(m)];
        *out_n = n + 2;
        break;
    }
    case 3: /* FF FF 00 (libjpeg: one FF data byte) */
        memmove(c + pos + 3, c + pos, n - pos);
        c[pos] = 0xFF;
        c[pos + 1] = 0xFF;
        c[pos + 2] = 0x00;
        *out_n = n + 3;
        break;
    case 4: /* truncated, without EOI */
        *out_n = pos;
        break;
    case 5: /* truncated, with EOI */
        c[pos] = 0xFF;
        c[pos + 1] = 0xD9;
        *out_n = pos + 2;
        break;
    case 6: /* a byte deleted */
        memmove(c + pos, c + pos + 1, n - pos - 1);
        *out_n = n - 1;
        break;
    case 7: /* bytes after EOI */
        for (size_t k = 0; k < 9; k++)
            c[n + k] = (uint8_t)lcg(s);
        *out_n = n + 9;
        break;
    case 8: { /* the next restart marker renumbered, or bytes before it */
        size_t k = pos;
        while (k + 1 < n && !(c[k] == 0xFF && c[k + 1] >= 0xD0 && c[k + 1] <= 0xD7))
            k++;
        if (k + 1 >= n)
            c[pos] ^= 0x40;
        else if (lcg(s) & 1)
            c[k + 1] = (uint8_t)(0xD0 + (c[k + 1] - 0xD0 + 1 + lcg(s) % 6) % 8);
        else {
            memmove(c + k + 3, c + k, n - k);
            c[k] = 0x12;
            c[k + 1] = 0x34;
            c[k + 2] = 0x56;
            *out_n = n + 3;
        }
        break;
    }
    default: /* a byte set to FF (then whatever follows decides what it is) */
        c[pos] = 0xFF;
        break;
    }
    return c;
}

static int test_corrupt_streams(void)
{
    stk__decoder *own, *lib;
    T_OK(pair_create(&own, &lib));
    static const enc bases[] = {
        {2, 2, 90, 0, 0, false, false}, {2, 1, 85, 0, 0, true, false},
        {1, 1, 95, 0, 0, false, false}, {0, 0, 90, 0, 0, false, false},
        {2, 2, 90, 2, 0, false, false}, {2, 2, 80, 0, 1, true, false},
    };
    uint32_t s = 12345;
    int rejected = 0, accepted = 0;
    for (size_t e = 0; e < sizeof(bases) / sizeof(bases[0]); e++) {
        uint8_t *px = synth(120, 88, (uint32_t)e);
        size_t n;
        uint8_t *j = px ? encode(px, 120, 88, &bases[e], &n) : NULL;
        T_CHECK(j);
        size_t at = scan_start(j, n);
        T_CHECK(at > 0 && at + 16 < n);
        for (int m = 0; m < 150; m++) {
            size_t cn;
            uint8_t *c = damage(j, n, at, &s, &cn);
            T_CHECK(c);
            char what[64];
            snprintf(what, sizeof(what), "base %zu, damage %d", e, m);
            T_EQ(compare_all(own, lib, c, cn, s, what), 0);
            outcome o = run(lib, c, cn, 0, 0, 0, 0, 0, 100000, 100000);
            if (o.rc == STK_OK)
                accepted++;
            else
                rejected++;
            free(o.px);
            free(c);
        }
        free(px);
        free(j);
    }
    uint64_t taken, gave_up;
    stk__decoder_entropy_counts(own, &taken, &gave_up);
    /* both answers of stoker's decoder were exercised, and both verdicts of libjpeg */
    T_CHECKF(gave_up > 100 && taken > gave_up + 100, "taken %llu, gave up %llu",
             (unsigned long long)taken, (unsigned long long)gave_up);
    T_CHECKF(accepted > 50 && rejected > 200, "accepted %d, rejected %d", accepted, rejected);
    pair_destroy(own, lib);
    return 0;
}

/* Damage after the window: a first (untrusted) strict read of a top window rejects the file in
 * every mode with stoker's decoder on (which takes the file, then hands it back at the damage),
 * a trusted read gives the clean file's pixels, and a full lenient read matches libjpeg's. */
static int test_tail_damage_first_read(void)
{
    stk__decoder *own, *lib;
    T_OK(pair_create(&own, &lib));
    static const enc bases[] = {{2, 2, 90, 0, 0, false, false}, {2, 2, 90, 4, 0, false, false}};
    for (size_t e = 0; e < 2; e++) {
        uint8_t *px = synth(320, 240, 77 + (uint32_t)e);
        size_t n;
        uint8_t *j = px ? encode(px, 320, 240, &bases[e], &n) : NULL;
        T_CHECK(j);
        uint8_t *c = malloc(n);
        T_CHECK(c);
        uint32_t s = 99;
        int found = 0;
        for (int trial = 0; trial < 300 && !found; trial++) {
            memcpy(c, j, n);
            size_t pos = n - 2 - n / 6 + lcg(&s) % (n / 6 - 8);
            for (size_t k = 0; k < 4; k++)
                c[pos + k] = (uint8_t)lcg(&s);
            outcome o = run(lib, c, n, 0, 0, 0, 0, 0, 100000, 100000);
            found = o.rc == STK_EFORMAT;
            free(o.px);
        }
        T_CHECKF(found, "no damage in the last sixth failed libjpeg's strict decode");
        for (int mode = 0; mode < 3; mode++) {
            uint64_t t0, g0, t1, g1;
            stk__decoder_entropy_counts(own, &t0, &g0);
            outcome a = run(own, c, n, mode, 8, 0, 100, 40, 50, 20); /* rows 0-39 of 240 */
            stk__decoder_entropy_counts(own, &t1, &g1);
            T_CHECKF(a.rc == STK_EFORMAT && !a.checked, "mode %d: rc %d", mode, a.rc);
            T_CHECKF(t1 == t0 + 1 && g1 == g0 + 1, "mode %d: taken %llu, gave up %llu", mode,
                     (unsigned long long)(t1 - t0), (unsigned long long)(g1 - g0));
            T_EQ(same(own, lib, c, n, mode, 8, 0, 100, 40, 50, 20, "tail"), 0);
            free(a.px);
            /* trusted (read clean before): stops after the window, the clean file's pixels */
            stk__decoder_set_trusted(own, true);
            outcome b = run(own, c, n, mode, 8, 0, 100, 40, 50, 20);
            outcome ref = run(own, j, n, mode, 8, 0, 100, 40, 50, 20);
            stk__decoder_set_trusted(own, false);
            T_CHECKF(b.rc == STK_OK && ref.rc == STK_OK && b.n == ref.n && b.n > 0 &&
                         memcmp(b.px, ref.px, b.n) == 0,
                     "mode %d: trusted rc %d", mode, b.rc);
            free(b.px);
            free(ref.px);
        }
        stk__decoder_set_lenient(own, true);
        stk__decoder_set_lenient(lib, true);
        T_EQ(same(own, lib, c, n, 0, 0, 0, 0, 0, 100000, 100000, "tail, lenient"), 0);
        stk__decoder_set_lenient(own, false);
        stk__decoder_set_lenient(lib, false);
        free(c);
        free(j);
        free(px);
    }
    pair_destroy(own, lib);
    return 0;
}

/* Many images in a row through one decoder, tables of different contents (optimised per image)
 * and the same ones again: the table cache hands back the right tables. */
static int test_table_cache(void)
{
    stk__decoder *own, *lib;
    T_OK(pair_create(&own, &lib));
    uint8_t *js[20];
    size_t ns[20];
    for (int i = 0; i < 20; i++) {
        uint8_t *px = synth(48 + i * 3, 40, 500 + (uint32_t)i);
        enc e = {i % 3 ? 2 : 1, i % 2 ? 2 : 1, 60 + i, 0, 0, true, false};
        js[i] = px ? encode(px, 48 + i * 3, 40, &e, &ns[i]) : NULL;
        free(px);
        T_CHECK(js[i]);
    }
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 20; i++) {
            int k = (i * 7 + round * 3) % 20;
            T_EQ(same(own, lib, js[k], ns[k], 0, 0, 0, 0, 0, 100000, 100000, "cache"), 0);
        }
    for (int i = 0; i < 20; i++)
        free(js[i]);
    pair_destroy(own, lib);
    return 0;
}

T_MAIN(T_CASE(test_clean_streams), T_CASE(test_corrupt_streams),
       T_CASE(test_tail_damage_first_read), T_CASE(test_table_cache))
