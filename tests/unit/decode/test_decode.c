/*
 * test_decode.c: the JPEG/PNG decoders (src/decode).
 *
 * JPEG references come from TurboJPEG itself (same libjpeg-turbo, same IDCT): a full decode must
 * equal tjDecompress2 exactly, and a window decoded at 1/den must equal the same region of
 * tjDecompress2's own 1/den decode, at the position the returned origin/scale claim. PIL
 * references (CMYK, YCCK, grayscale, EXIF, every PNG type) come from
 * tests/data/gen_decode_fixtures.py, run once into a temporary directory; those cases skip when
 * /usr/bin/python3 with PIL is missing. Error cases check the status, the reason in the message,
 * and that the decoder still decodes the next good image exactly.
 */
#include "decode/stk_codec.h"
#include "t.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <turbojpeg.h>

#define ERRSZ 512

/* ---- helpers ---- */

static uint32_t lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* A photo-like RGB image: smooth colour fields, gradients, hard-edged boxes, fine noise. */
static uint8_t *synth(int w, int h, uint32_t seed)
{
    uint8_t *p = malloc((size_t)w * h * 3);
    if (!p)
        return NULL;
    uint32_t s = seed;
    int bx[4], by[4];
    for (int i = 0; i < 4; i++) {
        bx[i] = (int)(lcg(&s) % (uint32_t)w);
        by[i] = (int)(lcg(&s) % (uint32_t)h);
    }
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                int v =
                    60 + (x * (c + 1) * 50) / w + (y * 70) / h + (((x / 9 + y / 7 + c) % 5) * 12);
                for (int i = 0; i < 4; i++)
                    if (x >= bx[i] && x < bx[i] + w / 5 && y >= by[i] && y < by[i] + h / 4)
                        v += (i & 1) ? 70 : -50;
                v += (int)(lcg(&s) % 17) - 8;
                p[((size_t)y * w + x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return p;
}

/* Encode with TurboJPEG; returns a malloc'd JPEG. pf is TJPF_RGB or TJPF_CMYK. */
static uint8_t *tj_encode(const uint8_t *px, int w, int h, int pf, int subsamp, int q, int flags,
                          size_t *size)
{
    tjhandle tj = tjInitCompress();
    unsigned char *buf = NULL;
    unsigned long n = 0;
    uint8_t *out = NULL;
    if (tj && tjCompress2(tj, px, w, 0, h, pf, &buf, &n, subsamp, q, flags) == 0) {
        out = malloc(n);
        if (out) {
            memcpy(out, buf, n);
            *size = n;
        }
    }
    tjFree(buf);
    if (tj)
        tjDestroy(tj);
    return out;
}

static uint8_t *make_jpeg(int w, int h, uint32_t seed, int subsamp, int q, int flags, size_t *size)
{
    uint8_t *px = synth(w, h, seed);
    uint8_t *j = px ? tj_encode(px, w, h, TJPF_RGB, subsamp, q, flags, size) : NULL;
    free(px);
    return j;
}

/* TurboJPEG's own RGB decode at 1/den with TJFLAG_* flags; *w, *h receive the scaled size. */
static uint8_t *tj_decode_flags(const uint8_t *jpeg, size_t size, int den, int flags, int *w,
                                int *h)
{
    tjhandle tj = tjInitDecompress();
    int fw, fh, ss, cs;
    uint8_t *out = NULL;
    if (tj && tjDecompressHeader3(tj, jpeg, size, &fw, &fh, &ss, &cs) == 0) {
        tjscalingfactor sf = {1, den};
        *w = TJSCALED(fw, sf);
        *h = TJSCALED(fh, sf);
        out = malloc((size_t)*w * *h * 3);
        if (out && tjDecompress2(tj, jpeg, size, out, *w, 0, *h, TJPF_RGB, flags) != 0) {
            free(out);
            out = NULL;
        }
    }
    if (tj)
        tjDestroy(tj);
    return out;
}

/* TurboJPEG's own RGB decode at 1/den, as PIL decodes (ISLOW, fancy upsampling). */
static uint8_t *tj_decode(const uint8_t *jpeg, size_t size, int den, int *w, int *h)
{
    return tj_decode_flags(jpeg, size, den, 0, w, h);
}

/* The decode stk__image_decode_fast claims: TurboJPEG's fast IDCT and plain upsampling. */
#define FAST_FLAGS (TJFLAG_FASTDCT | TJFLAG_FASTUPSAMPLE)

/* stk__image_decode or its fast variant. */
static stk_status decode_window(bool fast, stk__decoder *d, const uint8_t *j, size_t n,
                                const stk__imginfo *info, uint32_t x, uint32_t y, uint32_t w,
                                uint32_t h, uint32_t min_w, uint32_t min_h, stk__decoded *out,
                                char *err)
{
    return (fast ? stk__image_decode_fast : stk__image_decode)(d, j, n, info, x, y, w, h, min_w,
                                                               min_h, out, err, ERRSZ);
}

static uint8_t *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(n > 0 ? (size_t)n : 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return p;
}

static int write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t k = fwrite(p, 1, n, f);
    return fclose(f) == 0 && k == n ? 0 : -1;
}

/* Compare a decoded buffer with a reference image (rw wide) at offset (ox, oy). */
static int region_diff(const stk__decoded *d, const uint8_t *ref, int rw, int rh, int ox, int oy)
{
    int worst = 0;
    for (uint32_t v = 0; v < d->height; v++)
        for (uint32_t u = 0; u < d->width; u++) {
            int rx = ox + (int)u, ry = oy + (int)v;
            if (rx < 0 || ry < 0 || rx >= rw || ry >= rh)
                return 999;
            for (int c = 0; c < 3; c++) {
                int a = d->rgb[v * d->stride + u * 3 + c];
                int b = ref[((size_t)ry * rw + rx) * 3 + c];
                int e = abs(a - b);
                worst = e > worst ? e : worst;
            }
        }
    return worst;
}

/* Full decode through the internal API (probe + whole-image window at full scale). */
static stk_status decode_full(stk__decoder *d, const void *src, size_t size, stk__decoded *out,
                              char *err)
{
    stk__imginfo info;
    stk_status rc = stk__image_probe(d, src, size, &info, err, ERRSZ);
    if (rc < 0)
        return rc;
    return stk__image_decode(d, src, size, &info, 0, 0, info.width, info.height, info.width,
                             info.height, out, err, ERRSZ);
}

/* The decoder still works: a fresh JPEG decodes exactly like TurboJPEG. */
static int still_works(stk__decoder *d)
{
    size_t n;
    int rw, rh;
    char err[ERRSZ];
    stk__decoded out;
    uint8_t *j = make_jpeg(83, 61, 99, TJSAMP_420, 85, 0, &n);
    uint8_t *ref = j ? tj_decode(j, n, 1, &rw, &rh) : NULL;
    T_CHECK(ref);
    T_CHECKF(decode_full(d, j, n, &out, err) == STK_OK, "%s", err);
    T_EQ(region_diff(&out, ref, rw, rh, 0, 0), 0);
    free(j);
    free(ref);
    return 0;
}

/* Byte offset of the first marker `m` (0xFFm) in a JPEG, or 0. */
static size_t find_marker(const uint8_t *j, size_t n, uint8_t m)
{
    for (size_t i = 2; i + 1 < n; i++)
        if (j[i] == 0xFF && j[i + 1] == m)
            return i;
    return 0;
}

/* ---- PIL fixtures, generated once ---- */

static char fixdir[64];
static int fix_state;   /* 0 not yet, 1 ready, -1 unavailable */
static pid_t fix_owner; /* the process that made them: forked cases must not remove them */

static void remove_fixtures(void)
{
    if (getpid() != fix_owner)
        return;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fixdir);
    if (system(cmd) != 0)
        fprintf(stderr, "  could not remove %s\n", fixdir);
}

/* Write the TurboJPEG-made fixtures PIL must judge (YCCK), then run the generator. */
static int fixtures_ready(void)
{
    if (fix_state)
        return fix_state > 0;
    fix_state = -1;
    if (access("/usr/bin/python3", X_OK) != 0 || access("tests/data/gen_decode_fixtures.py", R_OK))
        return 0;
    snprintf(fixdir, sizeof(fixdir), "/tmp/stk_decode_XXXXXX");
    if (!mkdtemp(fixdir))
        return 0;
    fix_owner = getpid();
    atexit(remove_fixtures);

    int w = 45, h = 38;
    uint8_t *rgb = synth(w, h, 7), *cmyk = malloc((size_t)w * h * 4);
    if (!rgb || !cmyk)
        return 0;
    for (int i = 0; i < w * h; i++) { /* any CMYK will do; keep K moderate */
        cmyk[i * 4 + 0] = (uint8_t)(255 - rgb[i * 3]);
        cmyk[i * 4 + 1] = (uint8_t)(255 - rgb[i * 3 + 1]);
        cmyk[i * 4 + 2] = (uint8_t)(255 - rgb[i * 3 + 2]);
        cmyk[i * 4 + 3] = (uint8_t)(i % 97);
    }
    size_t n;
    uint8_t *ycck = tj_encode(cmyk, w, h, TJPF_CMYK, TJSAMP_420, 90, 0, &n);
    char path[128], cmd[256];
    snprintf(path, sizeof(path), "%s/ycck.jpg", fixdir);
    int ok = ycck && write_file(path, ycck, n) == 0;
    free(rgb);
    free(cmyk);
    free(ycck);
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 -W ignore tests/data/gen_decode_fixtures.py '%s'",
             fixdir);
    if (!ok || system(cmd) != 0)
        return 0;
    fix_state = 1;
    return 1;
}

/* Load fixture NAME (any image extension) and its PIL reference NAME-without-extension.rgb. */
static int load_fixture(const char *name, uint8_t **img, size_t *n, uint8_t **ref, int *rw, int *rh)
{
    char path[160];
    size_t rn;
    snprintf(path, sizeof(path), "%s/%s", fixdir, name);
    *img = read_file(path, n);
    snprintf(path, sizeof(path), "%s/%.*s.rgb", fixdir, (int)(strrchr(name, '.') - name), name);
    *ref = read_file(path, &rn);
    if (!*img || !*ref || rn < 8)
        return -1;
    uint32_t dims[2];
    memcpy(dims, *ref, 8);
    *rw = (int)dims[0];
    *rh = (int)dims[1];
    memmove(*ref, *ref + 8, rn - 8);
    return rn - 8 == (size_t)*rw * *rh * 3 ? 0 : -1;
}

/* ---- tests ---- */

static const int SUBSAMPS[] = {TJSAMP_444, TJSAMP_422, TJSAMP_420,
                               TJSAMP_440, TJSAMP_411, TJSAMP_GRAY};

static int test_sniff_errors(void)
{
    stk__decoder *d;
    stk__imginfo info;
    char err[ERRSZ];
    T_OK(stk__decoder_create(0, &d));
    T_EQ(stk__image_probe(d, "", 0, &info, err, ERRSZ), STK_EFORMAT);
    T_CHECKF(strcmp(err, "empty (0 bytes)") == 0, "%s", err);
    const char *text = "hello, world\n";
    T_EQ(stk__image_probe(d, text, strlen(text), &info, err, ERRSZ), STK_EFORMAT);
    T_CHECKF(strcmp(err, "not a supported image (JPEG, PNG, WebP, TIFF, BMP, PPM/PGM; starts with "
                         "0x68 0x65 0x6c 0x6c)") == 0,
             "%s", err);
    T_EQ(stk__image_probe(d, "\xff\xd8", 2, &info, err, ERRSZ), STK_EFORMAT);
    T_CHECKF(strstr(err, "not a supported image (") && strstr(err, "starts with 0xff 0xd8)"), "%s",
             err);
    /* the magic of a format that is then refused, with the codec's reason */
    T_EQ(stk__image_probe(d, "P3\n2 2\n255\n", 11, &info, err, ERRSZ), STK_EFORMAT);
    T_CHECKF(strcmp(err, "PNM: P3 (ASCII) is not supported; only binary PGM (P5) and PPM (P6)") ==
                 0,
             "%s", err);
    T_EQ(stk__image_probe(d, "BM", 2, &info, err, ERRSZ), STK_EFORMAT);
    T_CHECKF(strncmp(err, "BMP: truncated header", 21) == 0, "%s", err);
    T_EQ(stk__image_probe(d, "II*\0\0\0\0\0", 8, &info, err, ERRSZ), STK_EFORMAT);
    T_CHECKF(strncmp(err, "TIFF: ", 6) == 0, "%s", err);
    T_EQ(stk__image_probe(d, "RIFF\0\0\0\0WEBPVP8 ", 16, &info, err, ERRSZ), STK_EFORMAT);
    T_CHECKF(strncmp(err, "WebP: ", 6) == 0, "%s", err);
    /* PNG magic cut short */
    T_EQ(stk__image_probe(d, "\x89PNG\r\n", 6, &info, err, ERRSZ), STK_EFORMAT);
    /* JPEG magic and nothing else: libjpeg's reason */
    T_EQ(stk__image_probe(d, "\xff\xd8\xff", 3, &info, err, ERRSZ), STK_EFORMAT);
    T_CHECKF(strncmp(err, "JPEG: ", 6) == 0, "%s", err);
    T_CHECK(still_works(d) == 0);
    stk__decoder_destroy(d);
    return 0;
}

static int test_public_api(void)
{
    stk_decoder *pd;
    stk_image im;
    stk_image_init(&im);
    size_t n;
    int rw, rh;
    T_OK(stk_decoder_create(0, &pd));
    uint8_t *j = make_jpeg(120, 90, 5, TJSAMP_420, 90, 0, &n);
    uint8_t *ref = tj_decode(j, n, 1, &rw, &rh);
    T_CHECK(ref);
    T_OK(stk_decoder_decode(pd, j, n, &im));
    T_EQ(im.width, 120);
    T_EQ(im.height, 90);
    T_EQ(im.stride, 360);
    T_CHECK(memcmp(im.data, ref, (size_t)rw * rh * 3) == 0);
    T_EQ(stk_decoder_decode(pd, "GIF89a", 6, &im), STK_EFORMAT);
    T_CHECKF(strstr(stk_decoder_errmsg(pd), "not a supported image"), "%s", stk_decoder_errmsg(pd));
    T_CHECK(im.data == NULL);
    T_OK(stk_decoder_decode(pd, j, n, &im));
    T_CHECK(memcmp(im.data, ref, (size_t)rw * rh * 3) == 0);
    T_CHECK(stk_decoder_errmsg(pd)[0] == '\0');
    stk_decoder_destroy(pd);
    stk_decoder_destroy(NULL);
    T_EQ(stk_decoder_create(0, NULL), STK_EINVAL);
    free(j);
    free(ref);
    return 0;
}

/* Full decode equals TurboJPEG's for every subsampling, baseline and progressive, odd sizes. */
static int test_full_matches_turbojpeg(void)
{
    static const int sizes[][2] = {{500, 375}, {203, 157}, {17, 9}, {1, 1}, {8, 300}, {300, 8}};
    stk__decoder *d;
    char err[ERRSZ];
    T_OK(stk__decoder_create(0, &d));
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
        for (size_t k = 0; k < sizeof(SUBSAMPS) / sizeof(SUBSAMPS[0]); k++)
            for (int prog = 0; prog < 2; prog++) {
                size_t n;
                int rw, rh;
                stk__decoded out;
                uint8_t *j = make_jpeg(sizes[s][0], sizes[s][1], (uint32_t)(s * 7 + k), SUBSAMPS[k],
                                       75 + (int)k * 4, prog ? TJFLAG_PROGRESSIVE : 0, &n);
                uint8_t *ref = j ? tj_decode(j, n, 1, &rw, &rh) : NULL;
                T_CHECK(ref);
                T_CHECKF(decode_full(d, j, n, &out, err) == STK_OK, "%s", err);
                T_EQ(out.width, rw);
                T_EQ(out.height, rh);
                T_CHECK(out.origin_x == 0 && out.origin_y == 0 && out.scale_x == 1 &&
                        out.scale_y == 1);
                T_CHECKF(region_diff(&out, ref, rw, rh, 0, 0) == 0, "%dx%d subsamp %d prog %d", rw,
                         rh, SUBSAMPS[k], prog);
                free(j);
                free(ref);
            }
    stk__decoder_destroy(d);
    return 0;
}

/* One window decoded at 1/den must equal TurboJPEG's 1/den decode where origin/scale point
 * (its fast decode for the fast variant). */
static int check_window(bool fast, stk__decoder *d, const uint8_t *j, size_t n,
                        const stk__imginfo *info, uint32_t x, uint32_t y, uint32_t w, uint32_t h,
                        uint32_t den, uint8_t *const refs[4], const int rws[4], const int rhs[4])
{
    char err[ERRSZ];
    stk__decoded out;
    uint32_t min_w = den == 1 ? w : (w + den - 1) / den;
    uint32_t min_h = den == 1 ? h : (h + den - 1) / den;
    T_CHECKF(decode_window(fast, d, j, n, info, x, y, w, h, min_w, min_h, &out, err) == STK_OK,
             "%s", err);
    int r = den == 1 ? 0 : den == 2 ? 1 : den == 4 ? 2 : 3;
    T_CHECKF(out.scale_x == den && out.scale_y == den, "window %u,%u %ux%u: scale %g, not %u", x, y,
             w, h, out.scale_x, den);
    /* Origin on the scaled grid; the buffer covers the window */
    T_CHECK(out.origin_x == (double)((uint32_t)out.origin_x / den * den));
    T_CHECK(out.origin_y == (double)((uint32_t)out.origin_y / den * den));
    T_CHECK(out.origin_x <= x && out.origin_y <= y);
    T_CHECK(out.origin_x + out.width * out.scale_x >= x + w);
    T_CHECK(out.origin_y + out.height * out.scale_y >= y + h);
    T_CHECK(out.stride >= out.width * 3);
    int diff = region_diff(&out, refs[r], rws[r], rhs[r], (int)(out.origin_x / den),
                           (int)(out.origin_y / den));
    T_CHECKF(diff == 0, "window %u,%u %ux%u den %u: max diff %d (buffer %ux%u at %g,%g)", x, y, w,
             h, den, diff, out.width, out.height, out.origin_x, out.origin_y);
    return 0;
}

/* The whole image at 1/den through stk__image_decode: no crop, no skip, i.e. plain libjpeg. The
 * reference where TurboJPEG refuses the image (sampling factors it has no name for). */
static uint8_t *self_decode(bool fast, stk__decoder *d, const uint8_t *j, size_t n, int den, int *w,
                            int *h)
{
    char err[ERRSZ];
    stk__imginfo info;
    stk__decoded out;
    if (stk__image_probe(d, j, n, &info, err, ERRSZ) != STK_OK ||
        decode_window(fast, d, j, n, &info, 0, 0, info.width, info.height,
                      den == 1 ? info.width : (info.width + den - 1) / den,
                      den == 1 ? info.height : (info.height + den - 1) / den, &out,
                      err) != STK_OK ||
        out.scale_x != den || out.origin_x != 0 || out.origin_y != 0)
        return NULL;
    uint8_t *p = malloc((size_t)out.width * out.height * 3);
    for (uint32_t v = 0; p && v < out.height; v++)
        memcpy(p + (size_t)v * out.width * 3, out.rgb + v * out.stride, (size_t)out.width * 3);
    *w = (int)out.width;
    *h = (int)out.height;
    return p;
}

/* Windows at den 1, 2, 4, 8 over many geometries (iMCU boundaries and their neighbours, image
 * borders, random) of one JPEG: exact against TurboJPEG's scaled decodes (or self_decode's). */
static int windows_exact(bool fast, stk__decoder *d, const uint8_t *j, size_t n, bool self_ref,
                         uint32_t seed)
{
    char err[ERRSZ];
    uint8_t *refs[4];
    int rws[4], rhs[4];
    stk__imginfo info;
    for (int r = 0; r < 4; r++) {
        refs[r] = self_ref ? self_decode(fast, d, j, n, 1 << r, &rws[r], &rhs[r])
                           : tj_decode_flags(j, n, 1 << r, fast ? FAST_FLAGS : 0, &rws[r], &rhs[r]);
        T_CHECK(refs[r]);
    }
    T_CHECKF(stk__image_probe(d, j, n, &info, err, ERRSZ) == STK_OK, "%s", err);
    T_EQ(info.format, STK__IMG_JPEG);
    T_EQ(info.width, rws[0]);
    T_EQ(info.height, rhs[0]);
    uint32_t W = info.width, H = info.height;
    static const uint32_t xs[] = {0, 1, 7, 8, 15, 16, 17, 31, 32, 33};
    for (uint32_t den = 1; den <= 8; den *= 2) {
        for (size_t a = 0; a < sizeof(xs) / sizeof(xs[0]); a++) {
            uint32_t x = STK_MIN(xs[a], W - 17), y = STK_MIN(xs[(a + 3) % 10], H - 17);
            uint32_t w = 16 + lcg(&seed) % (W - x - 16), h = 16 + lcg(&seed) % (H - y - 16);
            T_CHECK(check_window(fast, d, j, n, &info, x, y, w, h, den, refs, rws, rhs) == 0);
            /* the same window flush against the bottom-right corner */
            T_CHECK(check_window(fast, d, j, n, &info, W - w, H - h, w, h, den, refs, rws, rhs) ==
                    0);
        }
        for (int t = 0; t < 12; t++) { /* random windows */
            uint32_t w = 16 + lcg(&seed) % (W - 16), h = 16 + lcg(&seed) % (H - 16);
            uint32_t x = lcg(&seed) % (W - w + 1), y = lcg(&seed) % (H - h + 1);
            T_CHECK(check_window(fast, d, j, n, &info, x, y, w, h, den, refs, rws, rhs) == 0);
        }
        T_CHECK(check_window(fast, d, j, n, &info, 0, 0, W, H, den, refs, rws, rhs) == 0);
    }
    for (int r = 0; r < 4; r++)
        free(refs[r]);
    return 0;
}

/* Every TurboJPEG subsampling, baseline and progressive, several sizes; fast: the same for
 * stk__image_decode_fast against TurboJPEG's FASTDCT + FASTUPSAMPLE decodes. */
static int window_exact(bool fast)
{
    static const int sizes[][2] = {{500, 375}, {203, 157}, {37, 300}};
    stk__decoder *d;
    T_OK(stk__decoder_create(0, &d));
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
        for (size_t k = 0; k < sizeof(SUBSAMPS) / sizeof(SUBSAMPS[0]); k++)
            for (int prog = 0; prog < 2; prog++) {
                size_t n;
                uint8_t *j = make_jpeg(sizes[s][0], sizes[s][1], (uint32_t)(100 + s * 11 + k),
                                       SUBSAMPS[k], 90, prog ? TJFLAG_PROGRESSIVE : 0, &n);
                T_CHECK(j);
                T_CHECKF(windows_exact(fast, d, j, n, false,
                                       (uint32_t)(s * 131 + k * 7 + (size_t)prog)) == 0,
                         "%dx%d subsamp %d prog %d%s", sizes[s][0], sizes[s][1], SUBSAMPS[k], prog,
                         fast ? " fast" : "");
                free(j);
            }
    stk__decoder_destroy(d);
    return 0;
}

static int test_window_exact(void)
{
    return window_exact(false);
}

static int test_window_fast(void)
{
    return window_exact(true);
}

/* ---- planes (stk__image_decode_planes) ---- */

/* Max difference between plane pl (one byte a pixel) and the same region of ref (rw x rh, one
 * byte a pixel) at (ox, oy); 999 when the plane reaches outside ref. */
static int plane_diff(const stk__decoded *pl, const uint8_t *ref, int rw, int rh, int ox, int oy)
{
    int worst = 0;
    for (uint32_t v = 0; v < pl->height; v++)
        for (uint32_t u = 0; u < pl->width; u++) {
            int rx = ox + (int)u, ry = oy + (int)v;
            if (rx < 0 || ry < 0 || rx >= rw || ry >= rh)
                return 999;
            int e = abs(pl->rgb[v * pl->stride + u] - ref[(size_t)ry * rw + rx]);
            worst = e > worst ? e : worst;
        }
    return worst;
}

/* A planes window against reference planes: every plane covers the window, sits on its own grid
 * (origin a multiple of its scale) and equals the reference there. */
static int check_planes(stk__decoder *d, const uint8_t *j, size_t n, const stk__imginfo *info,
                        uint32_t x, uint32_t y, uint32_t w, uint32_t h, uint32_t den,
                        uint8_t *const ref[3], const int rw[3], const int rh[3])
{
    char err[ERRSZ];
    stk__decoded pl[3];
    uint32_t min_w = den == 1 ? w : (w + den - 1) / den;
    uint32_t min_h = den == 1 ? h : (h + den - 1) / den;
    T_CHECKF(stk__image_decode_planes(d, j, n, info, x, y, w, h, min_w, min_h, pl, err, ERRSZ) ==
                 STK_OK,
             "%s", err);
    T_CHECK(pl[0].scale_x == den && pl[0].scale_y == den);
    for (int c = 0; c < 3; c++) {
        const stk__decoded *p = &pl[c];
        T_CHECK(p->scale_x >= den && p->scale_y >= den);
        T_CHECK(p->origin_x == (double)((uint32_t)(p->origin_x / p->scale_x)) * p->scale_x);
        T_CHECK(p->origin_y == (double)((uint32_t)(p->origin_y / p->scale_y)) * p->scale_y);
        T_CHECK(p->origin_x <= x && p->origin_y <= y);
        T_CHECK(p->origin_x + p->width * p->scale_x >= x + w);
        T_CHECK(p->origin_y + p->height * p->scale_y >= y + h);
        int diff = plane_diff(p, ref[c], rw[c], rh[c], (int)(p->origin_x / p->scale_x),
                              (int)(p->origin_y / p->scale_y));
        T_CHECKF(diff == 0, "window %u,%u %ux%u den %u plane %d: max diff %d", x, y, w, h, den, c,
                 diff);
    }
    T_CHECK(pl[1].scale_x == pl[2].scale_x && pl[1].scale_y == pl[2].scale_y);
    return 0;
}

/* The whole image's planes at 1/den (no crop, no skip), copied out. */
static int whole_planes(stk__decoder *d, const uint8_t *j, size_t n, const stk__imginfo *info,
                        uint32_t den, uint8_t *ref[3], int rw[3], int rh[3])
{
    char err[ERRSZ];
    stk__decoded pl[3];
    uint32_t W = info->width, H = info->height;
    T_CHECKF(stk__image_decode_planes(d, j, n, info, 0, 0, W, H, den == 1 ? W : (W + den - 1) / den,
                                      den == 1 ? H : (H + den - 1) / den, pl, err, ERRSZ) == STK_OK,
             "%s", err);
    for (int c = 0; c < 3; c++) {
        T_CHECK(pl[c].origin_x == 0 && pl[c].origin_y == 0);
        rw[c] = (int)pl[c].width;
        rh[c] = (int)pl[c].height;
        ref[c] = malloc((size_t)rw[c] * rh[c]);
        T_CHECK(ref[c]);
        for (int v = 0; v < rh[c]; v++)
            memcpy(ref[c] + (size_t)v * rw[c], pl[c].rgb + v * pl[c].stride, (size_t)rw[c]);
    }
    return 0;
}

/* TurboJPEG's raw planes at full scale with the fast IDCT, as the planes mode decodes them. */
static int tj_planes(const uint8_t *j, size_t n, uint8_t *ref[3], int rw[3], int rh[3])
{
    tjhandle tj = tjInitDecompress();
    int W, H, ss, cs;
    T_CHECK(tj && tjDecompressHeader3(tj, j, n, &W, &H, &ss, &cs) == 0);
    int strides[3];
    for (int c = 0; c < 3; c++) {
        rw[c] = tjPlaneWidth(c, W, ss);
        rh[c] = tjPlaneHeight(c, H, ss);
        strides[c] = rw[c];
        ref[c] = malloc((size_t)rw[c] * rh[c]);
        T_CHECK(ref[c]);
    }
    T_CHECK(tjDecompressToYUVPlanes(tj, j, (unsigned long)n, ref, W, strides, H, TJFLAG_FASTDCT) ==
            0);
    tjDestroy(tj);
    return 0;
}

/* Planes windows of every subsampling the planes mode takes (4:4:4, 4:2:2, 4:2:0, 4:4:0),
 * baseline and progressive: at full scale equal to TurboJPEG's raw YUV decode, at 1/2 .. 1/8
 * equal to the same region of the whole image's planes; 4:1:1 and grayscale are STK__NOT_PLANAR
 * and leave the decoder working. */
static int test_planes(void)
{
    static const int subsamp[] = {TJSAMP_444, TJSAMP_422, TJSAMP_420, TJSAMP_440};
    static const int sizes[][2] = {{500, 375}, {203, 157}, {37, 300}};
    stk__decoder *d;
    T_OK(stk__decoder_create(0, &d));
    char err[ERRSZ];
    uint32_t seed = 7;
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
        for (size_t k = 0; k < sizeof(subsamp) / sizeof(subsamp[0]); k++)
            for (int prog = 0; prog < 2; prog++) {
                size_t n;
                uint8_t *j = make_jpeg(sizes[s][0], sizes[s][1], (uint32_t)(300 + s * 5 + k),
                                       subsamp[k], 90, prog ? TJFLAG_PROGRESSIVE : 0, &n);
                T_CHECK(j);
                stk__imginfo info;
                T_OK(stk__image_probe(d, j, n, &info, err, ERRSZ));
                uint32_t W = info.width, H = info.height;
                for (uint32_t den = 1; den <= 8; den *= 2) {
                    uint8_t *ref[3];
                    int rw[3], rh[3];
                    T_CHECK((den == 1 ? tj_planes(j, n, ref, rw, rh)
                                      : whole_planes(d, j, n, &info, den, ref, rw, rh)) == 0);
                    for (int t = 0; t < 10; t++) {
                        uint32_t w = 16 + lcg(&seed) % (W - 16), h = 16 + lcg(&seed) % (H - 16);
                        uint32_t x = t == 0 ? 0 : lcg(&seed) % (W - w + 1);
                        uint32_t y = t == 1 ? H - h : lcg(&seed) % (H - h + 1);
                        T_CHECKF(check_planes(d, j, n, &info, x, y, w, h, den, ref, rw, rh) == 0,
                                 "%dx%d subsamp %d prog %d", sizes[s][0], sizes[s][1], subsamp[k],
                                 prog);
                    }
                    for (int c = 0; c < 3; c++)
                        free(ref[c]);
                }
                free(j);
            }
    static const int other[] = {TJSAMP_411, TJSAMP_GRAY};
    for (size_t k = 0; k < 2; k++) {
        size_t n;
        uint8_t *j = make_jpeg(120, 90, 9, other[k], 90, 0, &n);
        stk__imginfo info;
        stk__decoded pl[3];
        T_OK(stk__image_probe(d, j, n, &info, err, ERRSZ));
        T_EQ(stk__image_decode_planes(d, j, n, &info, 3, 5, 100, 80, 50, 40, pl, err, ERRSZ),
             STK__NOT_PLANAR);
        free(j);
        T_CHECK(still_works(d) == 0);
    }
    stk__decoder_destroy(d);
    return 0;
}

/* One decoder alternating exact and fast decodes, 4:4:4 (a colour deconverter) and 4:2:0 (the
 * fast mode's merged upsampler, none), with skips inside an iMCU row: what a worker does. A
 * pointer left from the previous image made libjpeg-turbo 2.1 write to freed memory here
 * (stk_jpeg.c); that crashed only when the memory had been reused, so this checks the pixels. */
static int test_window_fast_exact_alternate(void)
{
    static const int subsamp[2] = {TJSAMP_444, TJSAMP_420};
    stk__decoder *d;
    T_OK(stk__decoder_create(0, &d));
    uint8_t *j[2], *refs[2][2][4];
    size_t n[2];
    int rws[2][2][4], rhs[2][2][4];
    stk__imginfo info[2];
    char err[ERRSZ];
    for (int k = 0; k < 2; k++) {
        j[k] = make_jpeg(203, 157, (uint32_t)(40 + k), subsamp[k], 90, 0, &n[k]);
        T_CHECK(j[k]);
        T_OK(stk__image_probe(d, j[k], n[k], &info[k], err, ERRSZ));
        for (int fast = 0; fast < 2; fast++)
            for (int r = 0; r < 4; r++) {
                refs[k][fast][r] = tj_decode_flags(j[k], n[k], 1 << r, fast ? FAST_FLAGS : 0,
                                                   &rws[k][fast][r], &rhs[k][fast][r]);
                T_CHECK(refs[k][fast][r]);
            }
    }
    uint32_t seed = 5;
    for (int it = 0; it < 200; it++) {
        int k = (int)(lcg(&seed) % 2), fast = (int)(lcg(&seed) % 2);
        uint32_t den = 1u << (lcg(&seed) % 3);
        uint32_t w = 16 + lcg(&seed) % 150, h = 16 + lcg(&seed) % 120;
        uint32_t x = lcg(&seed) % (203 - w + 1), y = 1 + lcg(&seed) % (157 - h);
        T_CHECKF(check_window(fast, d, j[k], n[k], &info[k], x, y, w, h, den, refs[k][fast],
                              rws[k][fast], rhs[k][fast]) == 0,
                 "step %d: subsamp %d fast %d", it, subsamp[k], fast);
    }
    for (int k = 0; k < 2; k++) {
        free(j[k]);
        for (int fast = 0; fast < 2; fast++)
            for (int r = 0; r < 4; r++)
                free(refs[k][fast][r]);
    }
    stk__decoder_destroy(d);
    return 0;
}

/* Sampling factors TurboJPEG can neither write nor read (tests/data/decode/gen_sampling.c): luma
 * h4v2 and h2v4 over 1x1 chroma, where libjpeg-turbo 2.1's crop is wrong at 1/2 and 1/4 scale. */
static int test_window_odd_sampling(void)
{
    static const char *files[] = {"tests/data/decode/h4v2.jpg", "tests/data/decode/h2v4_prog.jpg"};
    stk__decoder *d;
    T_OK(stk__decoder_create(0, &d));
    for (size_t i = 0; i < 2; i++) {
        size_t n;
        uint8_t *j = read_file(files[i], &n);
        T_CHECKF(j, "%s", files[i]);
        T_CHECKF(windows_exact(false, d, j, n, true, (uint32_t)i) == 0, "%s", files[i]);
        T_CHECKF(windows_exact(true, d, j, n, true, (uint32_t)i) == 0, "%s fast", files[i]);
        free(j);
    }
    stk__decoder_destroy(d);
    return 0;
}

/* Tiny windows (1 pixel, 1 row, 1 column) at full scale. */
static int test_window_tiny(void)
{
    stk__decoder *d;
    char err[ERRSZ];
    size_t n;
    int rw, rh;
    stk__imginfo info;
    stk__decoded out;
    T_OK(stk__decoder_create(0, &d));
    uint8_t *j = make_jpeg(97, 71, 3, TJSAMP_420, 90, 0, &n);
    uint8_t *ref = tj_decode(j, n, 1, &rw, &rh);
    T_CHECK(ref);
    T_OK(stk__image_probe(d, j, n, &info, err, ERRSZ));
    static const uint32_t win[][4] = {{0, 0, 1, 1},   {96, 70, 1, 1}, {16, 16, 1, 1},
                                      {33, 47, 1, 1}, {0, 35, 97, 1}, {48, 0, 1, 71}};
    for (size_t i = 0; i < sizeof(win) / sizeof(win[0]); i++) {
        const uint32_t *q = win[i];
        T_CHECKF(stk__image_decode(d, j, n, &info, q[0], q[1], q[2], q[3], q[2], q[3], &out, err,
                                   ERRSZ) == STK_OK,
                 "%s", err);
        T_CHECK(out.scale_x == 1 && out.scale_y == 1);
        T_CHECK(out.origin_x <= q[0] && out.origin_x + out.width >= q[0] + q[2]);
        T_CHECK(out.origin_y <= q[1] && out.origin_y + out.height >= q[1] + q[3]);
        T_EQ(region_diff(&out, ref, rw, rh, (int)out.origin_x, (int)out.origin_y), 0);
    }
    free(j);
    free(ref);
    stk__decoder_destroy(d);
    return 0;
}

/* The denominator rule of stk_decode.h, observed through the returned scale. */
static int test_den_rule(void)
{
    stk__decoder *d;
    char err[ERRSZ];
    size_t n;
    stk__imginfo info;
    stk__decoded out;
    T_OK(stk__decoder_create(0, &d));
    uint8_t *j = make_jpeg(400, 300, 4, TJSAMP_420, 90, 0, &n);
    T_OK(stk__image_probe(d, j, n, &info, err, ERRSZ));
    static const uint32_t cases[][7] = {
        /* x, y, w, h, min_w, min_h, expected den */
        {0, 0, 400, 300, 0, 0, 8},     {0, 0, 400, 300, 50, 38, 8},   {0, 0, 400, 300, 51, 38, 4},
        {0, 0, 400, 300, 50, 39, 4},   {0, 0, 400, 300, 100, 75, 4},  {0, 0, 400, 300, 101, 75, 2},
        {0, 0, 400, 300, 200, 150, 2}, {0, 0, 400, 300, 200, 151, 1}, {10, 20, 100, 60, 13, 8, 8},
        {10, 20, 100, 60, 14, 8, 4},   {10, 20, 100, 60, 100, 60, 1}, {5, 5, 1, 1, 1, 1, 1},
        {5, 5, 1, 1, 0, 0, 8},         {5, 5, 17, 3, 3, 1, 8},        {5, 5, 17, 3, 4, 1, 4},
        {0, 0, 400, 300, 224, 224, 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const uint32_t *c = cases[i];
        T_CHECKF(stk__image_decode(d, j, n, &info, c[0], c[1], c[2], c[3], c[4], c[5], &out, err,
                                   ERRSZ) == STK_OK,
                 "%s", err);
        T_CHECKF(out.scale_x == c[6], "case %zu: den %g, expected %u", i, out.scale_x, c[6]);
        T_CHECK(out.width * out.scale_x >= c[2] && out.height * out.scale_y >= c[3]);
    }
    free(j);
    stk__decoder_destroy(d);
    return 0;
}

static int test_invalid_args(void)
{
    stk__decoder *d;
    char err[ERRSZ];
    size_t n;
    stk__imginfo info;
    stk__decoded out;
    T_OK(stk__decoder_create(0, &d));
    uint8_t *j = make_jpeg(64, 48, 4, TJSAMP_420, 90, 0, &n);
    T_OK(stk__image_probe(d, j, n, &info, err, ERRSZ));
    T_EQ(stk__image_decode(d, j, n, &info, 60, 0, 5, 10, 0, 0, &out, err, ERRSZ), STK_EINVAL);
    T_CHECKF(strstr(err, "not inside"), "%s", err);
    T_EQ(stk__image_decode(d, j, n, &info, 0, 0, 0, 10, 0, 0, &out, err, ERRSZ), STK_EINVAL);
    T_EQ(stk__image_decode(d, j, n, &info, 0, 48, 1, 1, 0, 0, &out, err, ERRSZ), STK_EINVAL);
    stk__imginfo wrong = info;
    wrong.width = 32;
    T_EQ(stk__image_decode(d, j, n, &wrong, 0, 0, 8, 8, 0, 0, &out, err, ERRSZ), STK_EINVAL);
    T_CHECKF(strstr(err, "not the probed 32x48"), "%s", err);
    wrong = info;
    wrong.format = STK__IMG_PNG;
    T_EQ(stk__image_decode(d, j, n, &wrong, 0, 0, 8, 8, 0, 0, &out, err, ERRSZ), STK_EINVAL);
    T_CHECK(still_works(d) == 0);
    free(j);
    stk__decoder_destroy(d);
    return 0;
}

/* Each call starts from its own buffer's header, whatever was probed before. */
static int test_probe_then_other_image(void)
{
    stk__decoder *d;
    char err[ERRSZ];
    size_t na, nb;
    int rw, rh;
    stk__imginfo ia, ib;
    stk__decoded out;
    T_OK(stk__decoder_create(0, &d));
    uint8_t *a = make_jpeg(64, 48, 1, TJSAMP_420, 90, 0, &na);
    uint8_t *b = make_jpeg(80, 40, 2, TJSAMP_444, 80, 0, &nb);
    uint8_t *refb = tj_decode(b, nb, 1, &rw, &rh);
    T_CHECK(refb);
    T_OK(stk__image_probe(d, a, na, &ia, err, ERRSZ));
    T_OK(stk__image_probe(d, b, nb, &ib, err, ERRSZ));
    T_OK(stk__image_decode(d, b, nb, &ib, 0, 0, 80, 40, 80, 40, &out, err, ERRSZ));
    T_EQ(region_diff(&out, refb, rw, rh, 0, 0), 0);
    /* decode again without a new probe: the header is read again */
    T_OK(stk__image_decode(d, b, nb, &ib, 0, 0, 80, 40, 80, 40, &out, err, ERRSZ));
    T_EQ(region_diff(&out, refb, rw, rh, 0, 0), 0);
    /* probe a, decode b (a stale probe of another image of another size) */
    T_OK(stk__image_probe(d, a, na, &ia, err, ERRSZ));
    T_OK(stk__image_decode(d, b, nb, &ib, 0, 0, 80, 40, 80, 40, &out, err, ERRSZ));
    T_EQ(region_diff(&out, refb, rw, rh, 0, 0), 0);
    free(a);
    free(b);
    free(refb);
    stk__decoder_destroy(d);
    return 0;
}

/* Buffers grow to the largest window and are then reused: no reallocation in steady state. */
static int test_buffers_reused(void)
{
    stk__decoder *d;
    char err[ERRSZ];
    size_t nb, ns;
    stk__decoded out;
    T_OK(stk__decoder_create(0, &d));
    uint8_t *big = make_jpeg(320, 240, 1, TJSAMP_420, 90, 0, &nb);
    uint8_t *small = make_jpeg(64, 48, 2, TJSAMP_420, 90, 0, &ns);
    T_CHECK(big && small);
    T_OK(decode_full(d, big, nb, &out, err));
    uint8_t *pix = d->pix, *aux = d->aux;
    size_t pix_cap = d->pix_cap, aux_cap = d->aux_cap;
    for (int i = 0; i < 5; i++) {
        T_OK(decode_full(d, small, ns, &out, err));
        T_OK(decode_full(d, big, nb, &out, err));
    }
    T_CHECK(d->pix == pix && d->pix_cap == pix_cap && d->aux == aux && d->aux_cap == aux_cap);
    free(big);
    free(small);
    stk__decoder_destroy(d);
    return 0;
}

/* JPEG cut at 10%, 50%, 99% and without its EOI: STK_EFORMAT, "Premature end of JPEG file". */
static int test_truncated_jpeg(void)
{
    stk__decoder *d;
    char err[ERRSZ];
    stk__decoded out;
    T_OK(stk__decoder_create(0, &d));
    for (int prog = 0; prog < 2; prog++) {
        size_t n;
        uint8_t *j = make_jpeg(160, 120, 8, TJSAMP_420, 90, prog ? TJFLAG_PROGRESSIVE : 0, &n);
        T_CHECK(j);
        size_t cuts[] = {n / 10, n / 2, n * 99 / 100, n - 2, n - 1};
        for (size_t c = 0; c < sizeof(cuts) / sizeof(cuts[0]); c++) {
            stk_status rc = decode_full(d, j, cuts[c], &out, err);
            T_CHECKF(rc == STK_EFORMAT, "prog %d cut %zu/%zu: rc %d", prog, cuts[c], n, rc);
            T_CHECKF(strcmp(err, "JPEG: Premature end of JPEG file") == 0, "%s", err);
            T_CHECK(still_works(d) == 0);
        }
        free(j);
    }
    stk__decoder_destroy(d);
    return 0;
}

/* Flipped bytes in the header and in the entropy data: never a crash; OK (libjpeg decodes
 * through some corrupt entropy data without a warning) or an error naming libjpeg's reason. */
static int test_corrupt_jpeg(void)
{
    stk__decoder *d;
    char err[ERRSZ];
    stk__decoded out;
    T_OK(stk__decoder_create(0, &d));
    for (int prog = 0; prog < 2; prog++) {
        size_t n;
        uint8_t *j = make_jpeg(96, 64, 9, TJSAMP_420, 90, prog ? TJFLAG_PROGRESSIVE : 0, &n);
        T_CHECK(j);
        size_t sos = find_marker(j, n, 0xDA);
        T_CHECK(sos > 0);
        int n_err = 0;
        uint32_t seed = 5;
        for (size_t i = 2; i < n; i += (i < sos + 16 ? 1 : 1 + lcg(&seed) % 23)) {
            uint8_t save = j[i];
            j[i] ^= (uint8_t)(1u << (lcg(&seed) % 8));
            stk_status rc = decode_full(d, j, n, &out, err);
            T_CHECKF(rc == STK_OK || rc == STK_EFORMAT || rc == STK_ELIMIT, "byte %zu: rc %d", i,
                     rc);
            if (rc == STK_EFORMAT) {
                n_err++;
                T_CHECKF(strncmp(err, "JPEG: ", 6) == 0 ||
                             strncmp(err, "not a supported image", 21) == 0,
                         "%s", err);
            }
            j[i] = save;
        }
        T_CHECK(n_err > 0);
        T_CHECK(still_works(d) == 0);
        /* A specific header error: 12-bit precision in SOF0 */
        size_t sof = find_marker(j, n, prog ? 0xC2 : 0xC0);
        T_CHECK(sof > 0);
        j[sof + 4] = 12;
        T_EQ(decode_full(d, j, n, &out, err), STK_EFORMAT);
        T_CHECKF(strstr(err, "JPEG: Unsupported JPEG data precision 12"), "%s", err);
        T_CHECK(still_works(d) == 0);
        free(j);
    }
    stk__decoder_destroy(d);
    return 0;
}

/* A header claiming 30000x30000 fails with STK_ELIMIT before anything is allocated for it. */
static int test_oversized(void)
{
    stk__decoder *d;
    char err[ERRSZ];
    stk__imginfo info;
    stk__decoded out;
    size_t n;
    T_OK(stk__decoder_create(0, &d));
    uint8_t *j = make_jpeg(64, 48, 1, TJSAMP_420, 90, 0, &n);
    size_t sof = find_marker(j, n, 0xC0);
    T_CHECK(sof > 0);
    j[sof + 5] = 30000 >> 8; /* height */
    j[sof + 6] = 30000 & 255;
    j[sof + 7] = 30000 >> 8; /* width */
    j[sof + 8] = 30000 & 255;
    T_EQ(stk__image_probe(d, j, n, &info, err, ERRSZ), STK_ELIMIT);
    T_CHECKF(strcmp(err, "image 30000x30000 exceeds the pixel limit (64 Mpx)") == 0, "%s", err);
    T_EQ(decode_full(d, j, n, &out, err), STK_ELIMIT);
    T_CHECK(d->pix_cap < 1000000);
    /* a decode with a hand-made info meets the same limit */
    info.format = STK__IMG_JPEG;
    info.width = info.height = 30000;
    T_EQ(stk__image_decode(d, j, n, &info, 0, 0, 30000, 30000, 0, 0, &out, err, ERRSZ), STK_ELIMIT);
    T_CHECK(still_works(d) == 0);
    free(j);
    stk__decoder_destroy(d);

    /* A custom limit */
    T_OK(stk__decoder_create(1000, &d));
    j = make_jpeg(40, 30, 1, TJSAMP_420, 90, 0, &n);
    T_EQ(stk__image_probe(d, j, n, &info, err, ERRSZ), STK_ELIMIT);
    T_CHECKF(strcmp(err, "image 40x30 exceeds the pixel limit (0.001 Mpx)") == 0, "%s", err);
    free(j);
    j = make_jpeg(40, 25, 1, TJSAMP_420, 90, 0, &n); /* exactly 1000 pixels: allowed */
    T_OK(decode_full(d, j, n, &out, err));
    free(j);
    stk__decoder_destroy(d);
    return 0;
}

/* Repeat the last scan of a progressive JPEG until it has `scans` scans. */
static uint8_t *many_scans(const uint8_t *j, size_t n, int scans, size_t *out_n)
{
    size_t last = 0; /* offset of the last SOS */
    int count = 0;
    for (size_t i = 2; i + 1 < n; i++)
        if (j[i] == 0xFF && j[i + 1] == 0xDA) {
            last = i;
            count++;
        }
    size_t eoi = n - 2; /* TurboJPEG ends with FF D9 */
    if (!last || count >= scans || j[eoi] != 0xFF || j[eoi + 1] != 0xD9)
        return NULL;
    size_t scan = eoi - last, total = last + scan * (size_t)(scans - count + 1) + 2;
    uint8_t *p = malloc(total), *w = p;
    if (!p)
        return NULL;
    memcpy(w, j, last);
    w += last;
    for (int k = 0; k < scans - count + 1; k++, w += scan)
        memcpy(w, j + last, scan);
    memcpy(w, j + eoi, 2);
    *out_n = total;
    return p;
}

/* Progressive JPEGs with more than 500 scans fail (TJFLAG_LIMITSCANS); 500 or fewer decode. */
static int test_scan_limit(void)
{
    stk__decoder *d;
    char err[ERRSZ];
    stk__decoded out;
    size_t n, nb;
    T_OK(stk__decoder_create(0, &d));
    uint8_t *j = make_jpeg(16, 16, 1, TJSAMP_GRAY, 90, TJFLAG_PROGRESSIVE, &n);
    T_CHECK(j);
    uint8_t *ok = many_scans(j, n, 500, &nb);
    T_CHECK(ok);
    /* A repeated refinement scan is a bogus progression: strict refuses it at once */
    T_EQ(decode_full(d, ok, nb, &out, err), STK_EFORMAT);
    T_CHECKF(strncmp(err, "JPEG: Inconsistent progression sequence", 39) == 0, "%s", err);
    /* Lenient decodes through it, so the scan limit is what stops the bombs */
    stk__decoder_set_lenient(d, true);
    T_CHECKF(decode_full(d, ok, nb, &out, err) == STK_OK, "%s", err);
    free(ok);
    uint8_t *bomb = many_scans(j, n, 501, &nb);
    T_CHECK(bomb);
    T_EQ(decode_full(d, bomb, nb, &out, err), STK_EFORMAT);
    T_CHECKF(strcmp(err, "JPEG: Progressive JPEG image has more than 500 scans") == 0, "%s", err);
    free(bomb);
    bomb = many_scans(j, n, 5000, &nb);
    T_CHECK(bomb);
    T_EQ(decode_full(d, bomb, nb, &out, err), STK_EFORMAT);
    free(bomb);
    T_CHECK(still_works(d) == 0);
    free(j);
    stk__decoder_destroy(d);
    return 0;
}

/* Every PIL fixture decodes to exactly PIL's convert('RGB'), CMYK and YCCK included (same
 * libjpeg-turbo, same IDCT; the CMYK -> RGB arithmetic is PIL's). */
static int test_pil_fixtures(void)
{
    static const char *names[] = {
        "gray.jpg",
        "cmyk.jpg",
        "ycck.jpg",
        "exif6.jpg",
        "png_gray8.png",
        "png_gray16.png",
        "png_ga8.png",
        "png_ga16.png",
        "png_rgb8.png",
        "png_rgb16.png",
        "png_rgba8.png",
        "png_rgba16.png",
        "png_pal8.png",
        "png_pal8_trns.png",
        "png_pal4.png",
        "png_gray1.png",
        "png_gray2.png",
        "png_gray4.png",
        "png_gray8_trns.png",
        "png_rgb8_adam7.png",
        "png_rgba16_adam7.png",
        /* the other formats of torchvision's IMG_EXTENSIONS */
        "webp_lossy.webp",
        "webp_lossless.webp",
        "webp_alpha.webp",
        "bmp_rgb24.bmp",
        "bmp_pal8.bmp",
        "bmp_gray8.bmp",
        "bmp_bw1.bmp",
        "bmp_rgba32.bmp",
        "pnm_rgb.ppm",
        "pnm_gray.pgm",
        "pnm_max100.pgm",
        "tiff_raw.tif",
        "tiff_lzw.tif",
        "tiff_deflate.tif",
        "tiff_jpeg.tif",
        "tiff_gray.tif",
        "tiff_pal.tif",
    };
    if (!fixtures_ready())
        return T_SKIP;
    stk_decoder *pd;
    T_OK(stk_decoder_create(0, &pd));
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        uint8_t *img, *ref;
        size_t n;
        int rw, rh;
        stk_image im;
        stk_image_init(&im);
        T_CHECKF(load_fixture(names[i], &img, &n, &ref, &rw, &rh) == 0, "%s", names[i]);
        T_CHECKF(stk_decoder_decode(pd, img, n, &im) == STK_OK, "%s: %s", names[i],
                 stk_decoder_errmsg(pd));
        T_EQ(im.width, rw);
        T_EQ(im.height, rh);
        stk__decoded as = {im.data, im.width, im.height, im.stride, 0, 0, 1, 1};
        int diff = region_diff(&as, ref, rw, rh, 0, 0);
        T_CHECKF(diff == 0, "%s: max diff %d vs PIL", names[i], diff);
        free(img);
        free(ref);
    }
    stk_decoder_destroy(pd);
    return 0;
}

/* EXIF orientation is ignored, as in PIL's Image.open: stored 40x24, not rotated to 24x40. */
static int test_exif_orientation_ignored(void)
{
    if (!fixtures_ready())
        return T_SKIP;
    stk__decoder *d;
    char err[ERRSZ];
    stk__imginfo info;
    uint8_t *img, *ref;
    size_t n;
    int rw, rh;
    T_CHECK(load_fixture("exif6.jpg", &img, &n, &ref, &rw, &rh) == 0);
    T_CHECK(memmem(img, n, "Exif", 4) != NULL);
    T_OK(stk__decoder_create(0, &d));
    T_OK(stk__image_probe(d, img, n, &info, err, ERRSZ));
    T_EQ(info.width, 40);
    T_EQ(info.height, 24);
    free(img);
    free(ref);
    stk__decoder_destroy(d);
    return 0;
}

/* Windows of CMYK and grayscale JPEGs (the CMYK row path, gray replication) stay exact. */
static int test_window_cmyk_gray(void)
{
    if (!fixtures_ready())
        return T_SKIP;
    static const char *names[] = {"cmyk.jpg", "ycck.jpg", "gray.jpg"};
    stk__decoder *d;
    char err[ERRSZ];
    T_OK(stk__decoder_create(0, &d));
    for (size_t i = 0; i < 3; i++) {
        uint8_t *img, *ref;
        size_t n;
        int rw, rh;
        stk__imginfo info;
        stk__decoded full, out;
        T_CHECK(load_fixture(names[i], &img, &n, &ref, &rw, &rh) == 0);
        T_OK(decode_full(d, img, n, &full, err));
        /* keep a copy: the next call reuses the buffer */
        size_t sz = full.stride * full.height;
        uint8_t *copy = malloc(sz);
        T_CHECK(copy);
        memcpy(copy, full.rgb, sz);
        T_OK(stk__image_probe(d, img, n, &info, err, ERRSZ));
        uint32_t x = 17, y = 9, w = info.width - 20, h = info.height - 12;
        T_CHECKF(stk__image_decode(d, img, n, &info, x, y, w, h, w, h, &out, err, ERRSZ) == STK_OK,
                 "%s", err);
        T_EQ(region_diff(&out, copy, rw, rh, (int)out.origin_x, (int)out.origin_y), 0);
        free(copy);
        free(img);
        free(ref);
    }
    stk__decoder_destroy(d);
    return 0;
}

static uint32_t crc32_png(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
    }
    return ~c;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* PNG errors: truncation, CRC, oversized IHDR; windows stop early and stay exact. */
/* An offset nine tenths into a PNG's image data (between the first IDAT and IEND). */
static size_t png_late_offset(const uint8_t *img, size_t n)
{
    size_t idat = (size_t)((const uint8_t *)memmem(img, n, "IDAT", 4) - img);
    size_t iend = (size_t)((const uint8_t *)memmem(img + idat, n - idat, "IEND", 4) - img);
    return idat + 8 + (iend - idat - 8) * 9 / 10;
}

static int test_png_errors_and_windows(void)
{
    if (!fixtures_ready())
        return T_SKIP;
    stk__decoder *d;
    char err[ERRSZ];
    stk__imginfo info;
    stk__decoded out;
    uint8_t *img, *ref;
    size_t n;
    int rw, rh;
    T_CHECK(load_fixture("png_rgb8.png", &img, &n, &ref, &rw, &rh) == 0);
    T_OK(stk__decoder_create(0, &d));

    /* windows: rows 0 .. y+h-1 at full scale, origin 0 */
    T_OK(stk__image_probe(d, img, n, &info, err, ERRSZ));
    T_EQ(info.format, STK__IMG_PNG);
    T_OK(stk__image_decode(d, img, n, &info, 5, 3, 10, 7, 0, 0, &out, err, ERRSZ));
    T_CHECK(out.origin_x == 0 && out.origin_y == 0 && out.scale_x == 1 && out.scale_y == 1);
    T_EQ(out.width, rw);
    T_EQ(out.height, 10);
    T_EQ(region_diff(&out, ref, rw, rh, 0, 0), 0);

    /* truncated: 10%, 50%, 99% */
    size_t cuts[] = {n / 10, n / 2, n * 99 / 100};
    for (size_t c = 0; c < 3; c++) {
        stk_status rc = decode_full(d, img, cuts[c], &out, err);
        T_CHECKF(rc == STK_EFORMAT, "cut %zu: rc %d", cuts[c], rc);
        T_CHECKF(strncmp(err, "PNG: ", 5) == 0, "%s", err);
    }
    /* a flipped bit in the IDAT data: CRC error */
    size_t idat = (size_t)((uint8_t *)memmem(img, n, "IDAT", 4) - img);
    img[idat + 20] ^= 0x10;
    T_EQ(decode_full(d, img, n, &out, err), STK_EFORMAT);
    T_CHECKF(strncmp(err, "PNG: ", 5) == 0, "%s", err);
    img[idat + 20] ^= 0x10;
    /* strict (the default) decodes every row, so damage below a window of the top rows fails
     * too; lenient stops after the window */
    size_t late = png_late_offset(img, n);
    img[late] ^= 0x10;
    T_EQ(stk__image_decode(d, img, n, &info, 0, 0, 10, 2, 0, 0, &out, err, ERRSZ), STK_EFORMAT);
    T_CHECKF(strncmp(err, "PNG: ", 5) == 0, "%s", err);
    stk__decoder_set_lenient(d, true);
    T_OK(stk__image_decode(d, img, n, &info, 0, 0, 10, 2, 0, 0, &out, err, ERRSZ));
    T_EQ(region_diff(&out, ref, rw, 2, 0, 0), 0);
    stk__decoder_set_lenient(d, false);
    img[late] ^= 0x10;
    /* a flipped bit in IHDR: CRC error too */
    img[17] ^= 0x01;
    T_EQ(decode_full(d, img, n, &out, err), STK_EFORMAT);
    img[17] ^= 0x01;
    T_OK(decode_full(d, img, n, &out, err));
    T_EQ(region_diff(&out, ref, rw, rh, 0, 0), 0);

    /* oversized IHDR with a valid CRC */
    put_be32(img + 16, 30000);
    put_be32(img + 20, 30000);
    put_be32(img + 29, crc32_png(img + 12, 17));
    T_EQ(stk__image_probe(d, img, n, &info, err, ERRSZ), STK_ELIMIT);
    T_CHECKF(strcmp(err, "image 30000x30000 exceeds the pixel limit (64 Mpx)") == 0, "%s", err);
    T_CHECK(still_works(d) == 0);
    free(img);
    free(ref);

    /* each byte flipped in turn in a small palette PNG: never a crash */
    T_CHECK(load_fixture("png_pal4.png", &img, &n, &ref, &rw, &rh) == 0);
    for (size_t i = 8; i < n; i++) {
        img[i] ^= 0x21;
        stk_status rc = decode_full(d, img, n, &out, err);
        T_CHECKF(rc == STK_OK || rc == STK_EFORMAT || rc == STK_ELIMIT, "byte %zu: rc %d", i, rc);
        img[i] ^= 0x21;
    }
    T_OK(decode_full(d, img, n, &out, err));
    T_EQ(region_diff(&out, ref, rw, rh, 0, 0), 0);
    free(img);
    free(ref);

    /* interlaced: windows are exact too (the whole image is decoded) */
    T_CHECK(load_fixture("png_rgb8_adam7.png", &img, &n, &ref, &rw, &rh) == 0);
    T_OK(stk__image_probe(d, img, n, &info, err, ERRSZ));
    T_OK(stk__image_decode(d, img, n, &info, 0, 2, 5, 5, 0, 0, &out, err, ERRSZ));
    T_EQ(out.height, 7);
    T_EQ(region_diff(&out, ref, rw, rh, 0, 0), 0);
    free(img);
    free(ref);
    stk__decoder_destroy(d);
    return 0;
}

/* Each allocation of the decoder (and of libspng, which allocates through stk__malloc) failing in
 * turn gives STK_ENOMEM, never a crash or a leak, and the next call works. Debug builds only. */
static int test_alloc_failures(void)
{
#ifdef STK_DEBUG
    extern void stk__fault_alloc_set(long n);
    char err[ERRSZ];
    size_t nj, np = 0;
    int rw, rh;
    uint8_t *j = make_jpeg(200, 150, 3, TJSAMP_420, 90, 0, &nj), *png = NULL, *ref = NULL;
    T_CHECK(j);
    if (fixtures_ready())
        T_CHECK(load_fixture("png_rgba16_adam7.png", &png, &np, &ref, &rw, &rh) == 0);
    int failures = 0;
    for (long k = 1; k < 100; k++) {
        stk__decoder *d;
        stk__decoded out;
        stk__fault_alloc_set(k);
        stk_status rc = stk__decoder_create(0, &d);
        if (rc == STK_OK) {
            rc = decode_full(d, j, nj, &out, err);
            if (rc == STK_OK && png)
                rc = decode_full(d, png, np, &out, err);
            stk__fault_alloc_set(0);
            if (rc == STK_OK && png)
                T_EQ(region_diff(&out, ref, rw, rh, 0, 0), 0);
            T_CHECK(still_works(d) == 0);
            stk__decoder_destroy(d);
        }
        stk__fault_alloc_set(0);
        T_CHECKF(rc == STK_OK || rc == STK_ENOMEM, "allocation %ld: rc %d (%s)", k, rc, err);
        failures += rc == STK_ENOMEM;
    }
    T_CHECKF(failures >= (png ? 10 : 4), "%d failures", failures);
    free(j);
    free(png);
    free(ref);
    return 0;
#else
    return T_SKIP;
#endif
}

/* Strict (the default) against lenient (issue 16): junk before EOI (libjpeg's "extraneous
 * bytes before marker" warning, which real ImageNet files carry and PIL accepts) decodes in both
 * modes to the clean file's pixels, also through a window and the public decoder (the decision:
 * docs/images.md "Strict decoding"); random byte runs in the entropy-coded data fail strictly at
 * least as often as leniently. */
static int test_strict_jpeg(void)
{
    stk__decoder *d;
    char err[ERRSZ];
    stk__decoded out;
    stk__imginfo info;
    size_t n;
    T_OK(stk__decoder_create(0, &d));
    uint8_t *j = make_jpeg(96, 64, 11, TJSAMP_420, 90, 0, &n);
    T_CHECK(j && n > 100 && j[n - 2] == 0xFF && j[n - 1] == 0xD9);
    uint8_t *junk = malloc(n + 5);
    T_CHECK(junk);
    memcpy(junk, j, n - 2);
    memset(junk + n - 2, 0x5A, 5);
    memcpy(junk + n + 3, j + n - 2, 2);
    int rw, rh;
    uint8_t *ref = tj_decode(j, n, 1, &rw, &rh);
    T_CHECK(ref);
    for (int lenient = 0; lenient < 2; lenient++) {
        stk__decoder_set_lenient(d, lenient);
        T_OK(decode_full(d, junk, n + 5, &out, err));
        T_EQ(region_diff(&out, ref, rw, rh, 0, 0), 0);
        T_OK(stk__image_probe(d, junk, n + 5, &info, err, ERRSZ));
        for (int fast = 0; fast < 2; fast++) /* a window of the top rows only, at 1/2 */
            T_OK(decode_window(fast, d, junk, n + 5, &info, 8, 0, 40, 16, 20, 8, &out, err));
    }
    stk__decoder_set_lenient(d, false);
    /* the public decoder (always strict) */
    stk_decoder *pd;
    stk_image im;
    stk_image_init(&im);
    T_OK(stk_decoder_create(0, &pd));
    T_OK(stk_decoder_decode(pd, junk, n + 5, &im));
    stk_decoder_destroy(pd);
    free(ref);
    free(junk);

    /* Random byte runs in the entropy-coded data */
    size_t sos = find_marker(j, n, 0xDA);
    T_CHECK(sos > 0 && sos + 40 < n);
    uint8_t *c = malloc(n);
    T_CHECK(c);
    uint32_t seed = 99;
    int strict_fail = 0, lenient_fail = 0;
    for (int trial = 0; trial < 60; trial++) {
        memcpy(c, j, n);
        size_t len = 1 + lcg(&seed) % 16;
        size_t at = sos + 20 + lcg(&seed) % (n - 2 - len - sos - 20);
        for (size_t k = 0; k < len; k++)
            c[at + k] = (uint8_t)lcg(&seed);
        stk__decoder_set_lenient(d, false);
        stk_status rs = decode_full(d, c, n, &out, err);
        T_CHECKF(rs == STK_OK || (rs == STK_EFORMAT && strncmp(err, "JPEG: ", 6) == 0),
                 "trial %d: rc %d %s", trial, rs, err);
        stk__decoder_set_lenient(d, true);
        stk_status rl = decode_full(d, c, n, &out, err);
        T_CHECKF(rl == STK_OK || rl == STK_EFORMAT, "trial %d: rc %d", trial, rl);
        T_CHECKF(rl == STK_OK || rs != STK_OK, "trial %d: only lenient failed: %s", trial, err);
        strict_fail += rs != STK_OK;
        lenient_fail += rl != STK_OK;
    }
    printf("  60 corrupt JPEGs: strict rejects %d, lenient %d\n", strict_fail, lenient_fail);
    T_CHECK(strict_fail > lenient_fail);
    T_CHECK(still_works(d) == 0);
    free(c);
    free(j);
    stk__decoder_destroy(d);
    return 0;
}

/* Copy a decoded window's rows out (the decoder's buffer is reused by the next call). */
static uint8_t *copy_rows(const stk__decoded *o, size_t *size)
{
    *size = o->stride * o->height;
    uint8_t *p = malloc(*size ? *size : 1);
    if (p)
        memcpy(p, o->rgb, *size);
    return p;
}

/* One strict window decode of the top rows of j: *rc, and the pixels (or planes) it gave. */
static uint8_t *top_window(stk__decoder *d, const uint8_t *j, size_t n, int mode, stk_status *rc,
                           size_t *size)
{
    char err[ERRSZ];
    stk__imginfo info;
    stk__decoded out, pl[3];
    *size = 0;
    if ((*rc = stk__image_probe(d, j, n, &info, err, ERRSZ)) < 0)
        return NULL;
    uint32_t w = info.width / 2, h = 24;
    if (mode == 2) { /* planes: luma, then each chroma plane */
        if ((*rc = stk__image_decode_planes(d, j, n, &info, 8, 0, w, h, w / 2, h / 2, pl, err,
                                            ERRSZ)) < 0)
            return NULL;
        size_t s0, s1, s2;
        uint8_t *a = copy_rows(&pl[0], &s0), *b = copy_rows(&pl[1], &s1),
                *c = copy_rows(&pl[2], &s2), *all = malloc(s0 + s1 + s2);
        if (all) {
            memcpy(all, a, s0);
            memcpy(all + s0, b, s1);
            memcpy(all + s0 + s1, c, s2);
            *size = s0 + s1 + s2;
        }
        free(a);
        free(b);
        free(c);
        return all;
    }
    if ((*rc = decode_window(mode == 1, d, j, n, &info, 8, 0, w, h, w / 2, h / 2, &out, err)) < 0)
        return NULL;
    return copy_rows(&out, size);
}

/* Checked once (stk__decoder_set_trusted / stk__decoder_checked, the loader's per-record bit):
 * a clean strict decode to the image's end reports checked; a trusted window decode stops after
 * the window and gives the same pixels (exact, fast and planes); a JPEG corrupt below the window
 * fails the untrusted strict decode and passes the trusted one; lenient, trusted, failed and
 * probe-only calls never report checked. PNG the same way. */
static int test_checked_once(void)
{
    stk__decoder *d;
    char err[ERRSZ];
    stk__decoded out;
    stk__imginfo info;
    size_t n;
    T_OK(stk__decoder_create(0, &d));
    uint8_t *j = make_jpeg(320, 240, 21, TJSAMP_420, 90, 0, &n);
    T_CHECK(j);
    T_OK(stk__image_probe(d, j, n, &info, err, ERRSZ));
    T_CHECK(!stk__decoder_checked(d));
    T_OK(decode_full(d, j, n, &out, err));
    T_CHECK(stk__decoder_checked(d));
    T_OK(stk__image_probe(d, j, n, &info, err, ERRSZ));
    T_CHECK(!stk__decoder_checked(d));
    for (int mode = 0; mode < 3; mode++) { /* exact, fast, planes */
        stk_status r0, r1;
        size_t s0, s1;
        uint8_t *a = top_window(d, j, n, mode, &r0, &s0);
        T_CHECKF(r0 == STK_OK && stk__decoder_checked(d), "mode %d: untrusted rc %d", mode, r0);
        stk__decoder_set_trusted(d, true);
        uint8_t *b = top_window(d, j, n, mode, &r1, &s1);
        T_CHECKF(r1 == STK_OK && !stk__decoder_checked(d), "mode %d: trusted rc %d", mode, r1);
        stk__decoder_set_trusted(d, false);
        T_CHECKF(a && b && s0 == s1 && s0 > 0 && memcmp(a, b, s0) == 0,
                 "mode %d: trusted pixels differ", mode);
        free(a);
        free(b);
    }
    stk__decoder_set_lenient(d, true);
    T_OK(decode_full(d, j, n, &out, err));
    T_CHECK(!stk__decoder_checked(d));
    stk__decoder_set_lenient(d, false);

    /* Damage in the last fifth of the entropy-coded data, found by trying runs until a strict
     * full decode rejects the file (the seed fixes which) */
    uint8_t *c = malloc(n);
    T_CHECK(c);
    uint32_t seed = 5;
    int found = 0;
    for (int trial = 0; trial < 200 && !found; trial++) {
        memcpy(c, j, n);
        size_t at = n - 2 - n / 5 + lcg(&seed) % (n / 5 - 16);
        for (size_t k = 0; k < 8; k++)
            c[at + k] = (uint8_t)lcg(&seed);
        found = decode_full(d, c, n, &out, err) == STK_EFORMAT;
    }
    T_CHECKF(found, "no run in the last fifth made the JPEG fail a strict decode");
    T_CHECK(!stk__decoder_checked(d));
    for (int mode = 0; mode < 3; mode++) {
        stk_status r0, r1;
        size_t s0, s1;
        free(top_window(d, c, n, mode, &r0, &s0));
        T_CHECKF(r0 == STK_EFORMAT && !stk__decoder_checked(d), "mode %d: rc %d", mode, r0);
        stk__decoder_set_trusted(d, true);
        uint8_t *b = top_window(d, c, n, mode, &r1, &s1);
        uint8_t *a = top_window(d, j, n, mode, &r0, &s0); /* the clean file, trusted too */
        stk__decoder_set_trusted(d, false);
        T_CHECKF(r1 == STK_OK && r0 == STK_OK, "mode %d: trusted rc %d", mode, r1);
        T_CHECKF(a && b && s0 == s1 && memcmp(a, b, s0) == 0, "mode %d: pixels differ", mode);
        free(a);
        free(b);
    }
    free(c);
    free(j);

    /* PNG: damage late in IDAT fails a strict window of the top rows, not a trusted one */
    if (fixtures_ready()) {
        uint8_t *img, *ref;
        int rw, rh;
        T_CHECK(load_fixture("png_rgb8.png", &img, &n, &ref, &rw, &rh) == 0);
        T_OK(decode_full(d, img, n, &out, err));
        T_CHECK(stk__decoder_checked(d));
        size_t late = png_late_offset(img, n);
        img[late] ^= 0x10;
        T_OK(stk__image_probe(d, img, n, &info, err, ERRSZ));
        T_EQ(stk__image_decode(d, img, n, &info, 0, 0, 10, 2, 0, 0, &out, err, ERRSZ), STK_EFORMAT);
        stk__decoder_set_trusted(d, true);
        T_OK(stk__image_decode(d, img, n, &info, 0, 0, 10, 2, 0, 0, &out, err, ERRSZ));
        T_CHECK(!stk__decoder_checked(d));
        T_EQ(region_diff(&out, ref, rw, 2, 0, 0), 0);
        stk__decoder_set_trusted(d, false);
        free(img);
        free(ref);
    }
    T_CHECK(still_works(d) == 0);
    stk__decoder_destroy(d);
    return 0;
}

/* WebP, BMP, PPM/PGM, TIFF: windows come from a full-scale decode (origin 0); truncated files
 * fail with the codec's name; flipped bytes never crash; oversized headers fail before any
 * allocation for them. */
static int test_other_formats_errors(void)
{
    static const struct {
        const char *name, *prefix;
    } files[] = {
        {"webp_lossy.webp", "WebP: "}, {"webp_lossless.webp", "WebP: "}, {"bmp_rgb24.bmp", "BMP: "},
        {"bmp_pal8.bmp", "BMP: "},     {"bmp_bw1.bmp", "BMP: "},         {"pnm_rgb.ppm", "PNM: "},
        {"pnm_gray.pgm", "PNM: "},     {"tiff_raw.tif", "TIFF: "},       {"tiff_lzw.tif", "TIFF: "},
        {"tiff_jpeg.tif", "TIFF: "},
    };
    if (!fixtures_ready())
        return T_SKIP;
    stk__decoder *d;
    char err[ERRSZ];
    stk__imginfo info;
    stk__decoded out;
    T_OK(stk__decoder_create(0, &d));
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
        uint8_t *img, *ref;
        size_t n;
        int rw, rh;
        T_CHECKF(load_fixture(files[f].name, &img, &n, &ref, &rw, &rh) == 0, "%s", files[f].name);
        T_OK(stk__image_probe(d, img, n, &info, err, ERRSZ));
        T_EQ(info.width, rw);
        T_EQ(info.height, rh);
        T_CHECKF(stk__image_decode(d, img, n, &info, 5, 3, 10, 7, 0, 0, &out, err, ERRSZ) == STK_OK,
                 "%s: %s", files[f].name, err);
        T_CHECK(out.origin_x == 0 && out.origin_y == 0 && out.scale_x == 1 && out.scale_y == 1);
        T_CHECK((int)out.width == rw && out.height >= 10);
        T_CHECKF(region_diff(&out, ref, rw, (int)out.height, 0, 0) == 0, "%s", files[f].name);

        size_t cuts[] = {n / 10, n / 2, n * 99 / 100};
        for (size_t k = 0; k < 3; k++) {
            stk_status rc = decode_full(d, img, cuts[k], &out, err);
            T_CHECKF(rc == STK_EFORMAT, "%s cut at %zu: rc %d", files[f].name, cuts[k], rc);
            T_CHECKF(strncmp(err, files[f].prefix, strlen(files[f].prefix)) == 0, "%s: %s",
                     files[f].name, err);
        }
        uint32_t seed = (uint32_t)f + 1;
        for (size_t i = 0; i < n; i += 1 + lcg(&seed) % 5) {
            uint8_t save = img[i];
            img[i] ^= (uint8_t)(1u << (lcg(&seed) % 8));
            stk_status rc = decode_full(d, img, n, &out, err);
            T_CHECKF(rc == STK_OK || rc == STK_EFORMAT || rc == STK_ELIMIT, "%s byte %zu: rc %d",
                     files[f].name, i, rc);
            img[i] = save;
        }
        T_OK(decode_full(d, img, n, &out, err));
        T_EQ(region_diff(&out, ref, rw, rh, 0, 0), 0);
        free(img);
        free(ref);
    }
    /* Oversized headers */
    const char *big_pnm = "P6\n30000 30000\n255\n";
    T_EQ(stk__image_probe(d, big_pnm, strlen(big_pnm), &info, err, ERRSZ), STK_ELIMIT);
    T_CHECKF(strcmp(err, "image 30000x30000 exceeds the pixel limit (64 Mpx)") == 0, "%s", err);
    uint8_t bmp[54] = {'B', 'M'};
    bmp[10] = 54;                   /* pixel data offset */
    bmp[14] = 40;                   /* BITMAPINFOHEADER */
    bmp[18] = 0x30, bmp[19] = 0x75; /* width 30000 */
    bmp[22] = 0x30, bmp[23] = 0x75; /* height 30000 */
    bmp[26] = 1, bmp[28] = 24;      /* planes, bits */
    T_EQ(stk__image_probe(d, bmp, sizeof(bmp), &info, err, ERRSZ), STK_ELIMIT);
    /* Unsupported variants, named */
    bmp[19] = 0, bmp[23] = 0, bmp[30] = 1; /* 48x48, RLE8 */
    T_EQ(stk__image_probe(d, bmp, sizeof(bmp), &info, err, ERRSZ), STK_EFORMAT);
    T_CHECKF(strcmp(err, "BMP: RLE8 compression is not supported") == 0, "%s", err);
    const char *deep = "P5\n2 2\n65535\n\1\2\3\4\5\6\7\10";
    T_EQ(stk__image_probe(d, deep, 21, &info, err, ERRSZ), STK_EFORMAT);
    T_CHECKF(strcmp(err, "PNM: 16-bit samples (maxval 65535) are not supported") == 0, "%s", err);
    const char *over = "P5\n2 2\n100\n\1\2\3\145";
    T_OK(stk__image_probe(d, over, 15, &info, err, ERRSZ));
    T_EQ(decode_full(d, over, 15, &out, err), STK_EFORMAT);
    T_CHECKF(strcmp(err, "PNM: sample 101 above maxval 100 (byte 14)") == 0, "%s", err);
    T_CHECK(still_works(d) == 0);
    stk__decoder_destroy(d);
    return 0;
}

/* Fixture: make the PIL fixtures once, in the runner's process, for every case after it. */
static int setup(void)
{
    fixtures_ready();
    return 0;
}

T_MAIN(T_CASE(setup), T_CASE(test_sniff_errors), T_CASE(test_public_api),
       T_CASE(test_full_matches_turbojpeg), T_CASE(test_window_exact), T_CASE(test_window_fast),
       T_CASE(test_window_fast_exact_alternate), T_CASE(test_planes),
       T_CASE(test_window_odd_sampling), T_CASE(test_window_tiny), T_CASE(test_den_rule),
       T_CASE(test_invalid_args), T_CASE(test_probe_then_other_image), T_CASE(test_buffers_reused),
       T_CASE(test_truncated_jpeg), T_CASE(test_corrupt_jpeg), T_CASE(test_oversized),
       T_CASE(test_scan_limit), T_CASE(test_pil_fixtures), T_CASE(test_exif_orientation_ignored),
       T_CASE(test_window_cmyk_gray), T_CASE(test_png_errors_and_windows), T_CASE(test_strict_jpeg),
       T_CASE(test_checked_once), T_CASE(test_other_formats_errors), T_CASE(test_alloc_failures))
