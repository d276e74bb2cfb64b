/*
 * decode_speed.c: single-threaded JPEG decode throughput of src/decode against TurboJPEG.
 *
 *   /usr/bin/python3 bench/gen_images.py /tmp/bimg --classes 1 --per-class 64 --profile small
 *   make lib && cc -O2 -Iinclude -Isrc bench/decode_speed.c build/libstoker.a \
 *       -lturbojpeg -lspng -lwebp -ltiff -lxxhash -ljpeg -lpthread -ldl -lm -o build/decode_speed
 *   build/decode_speed $(find /tmp/bimg -name '*.jpg')
 *
 * Loads every file given into memory, then decodes all of them in each mode, in interleaved
 * rounds of 0.3 s, and prints the best round's images per second (the machine may be shared).
 * Modes: TurboJPEG tjDecompress2 (ISLOW and FASTDCT), the public stk_decoder_decode, header probe
 * only, a centred window of 70% x 70% at 1/1, 1/2, 1/4, 1/8, the whole image at 1/8, and
 * RandomResizedCrop(224)-like windows (area 8-100%, aspect 3/4-4/3) decoded at the scale the den
 * rule picks for a 224x224 output, also through the fast decode and at the smallest M/8. Also
 * prints the PSNR of TurboJPEG's FASTDCT (and FASTDCT + FASTUPSAMPLE, the fast decode) against
 * the ISLOW one (= PIL's decode).
 *
 * Strict against lenient decoding (issue 16): every stk__ mode above runs strict (the default);
 * the last four rows are the full image at 1/1 and the RandomResizedCrop windows (exact, and
 * fast at 1/2^k: the transform's default path) strict and again through a lenient decoder,
 * side by side in the same interleaved rounds.
 */
#include "decode/stk_codec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <turbojpeg.h>

typedef struct {
    uint8_t *p;
    size_t n;
    stk__imginfo info;
} img;

static img *imgs;
static int n_imgs;
static stk__decoder *dec, *dec_lenient;
static stk_decoder *pub;
static tjhandle tj;
static uint8_t *tjbuf;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint32_t rng_state = 12345;
static double urand(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (rng_state >> 8) / 16777216.0;
}

/* The lenient twins of modes 13, 9 and 10 (see names[]). */
static const int lenient_base[] = {13, 9, 10};

/* Decode image i in mode m; returns 0 on success. */
static int run(int m, int i)
{
    if (m >= 14) { /* a lenient twin: the same decode through the lenient decoder */
        stk__decoder *strict = dec;
        dec = dec_lenient;
        int rc = run(lenient_base[m - 14], i);
        dec = strict;
        return rc;
    }
    img *im = &imgs[i];
    uint32_t W = im->info.width, H = im->info.height;
    char err[256];
    stk__decoded out;
    stk_image pim;
    stk_image_init(&pim);
    switch (m) {
    case 0:
    case 1:
        return tjDecompress2(tj, im->p, im->n, tjbuf, W, 0, H, TJPF_RGB, m ? TJFLAG_FASTDCT : 0);
    case 2:
        return stk_decoder_decode(pub, im->p, im->n, &pim);
    case 3:
        return stk__image_probe(dec, im->p, im->n, &im->info, err, sizeof(err));
    case 4:
    case 5:
    case 6:
    case 7: {
        uint32_t den = 1u << (m - 4), w = W * 7 / 10, h = H * 7 / 10;
        uint32_t mw = den == 1 ? w : (w + den - 1) / den, mh = den == 1 ? h : (h + den - 1) / den;
        stk__image_probe(dec, im->p, im->n, &im->info, err, sizeof(err));
        return stk__image_decode(dec, im->p, im->n, &im->info, (W - w) / 2, (H - h) / 2, w, h, mw,
                                 mh, &out, err, sizeof(err));
    }
    case 8:
    case 13: /* 1/8, or 1/1 */
        stk__image_probe(dec, im->p, im->n, &im->info, err, sizeof(err));
        return stk__image_decode(dec, im->p, im->n, &im->info, 0, 0, W, H, m == 13 ? W : 0,
                                 m == 13 ? H : 0, &out, err, sizeof(err));
    case 9:
    case 10:
    case 11:
    case 12: { /* RandomResizedCrop(224): torchvision's sampling, first try */
        uint32_t w, h;
        for (;;) {
            double area = W * (double)H * (0.08 + 0.92 * urand());
            double ar = exp(log(3.0 / 4) + urand() * (log(4.0 / 3) - log(3.0 / 4)));
            w = (uint32_t)lround(sqrt(area * ar));
            h = (uint32_t)lround(sqrt(area / ar));
            if (w > 0 && h > 0 && w <= W && h <= H)
                break;
        }
        uint32_t x = (uint32_t)(urand() * (W - w + 1)), y = (uint32_t)(urand() * (H - h + 1));
        stk__image_probe(dec, im->p, im->n, &im->info, err, sizeof(err));
        if (m == 9)
            return stk__image_decode(dec, im->p, im->n, &im->info, x, y, w, h, 224, 224, &out, err,
                                     sizeof(err));
        /* Downscale factor of the 224 output; the den rule, or the smallest M/8 above 1/sc */
        double sc = STK_MIN(w, h) / 224.0;
        uint32_t num = sc >= 8 ? 1 : sc >= 4 ? 2 : sc >= 2 ? 4 : 8;
        if (m == 10)
            return stk__image_decode_fast(dec, im->p, im->n, &im->info, x, y, w, h,
                                          (w * num + 7) / 8, (h * num + 7) / 8, &out, err,
                                          sizeof(err));
        for (num = 1; num < 8 && sc * num < 8.0; num++)
            ;
        return stk__jpeg_decode(dec, im->p, im->n, &im->info, x, y, w, h, num, m == 11, &out, err,
                                sizeof(err));
    }
    }
    return -1;
}

static const char *names[] = {"tjDecompress2 full (ISLOW)",
                              "tjDecompress2 full (FASTDCT)",
                              "stk_decoder_decode full",
                              "probe (header only)",
                              "window 70%x70% 1/1",
                              "window 70%x70% 1/2",
                              "window 70%x70% 1/4",
                              "window 70%x70% 1/8",
                              "full image 1/8",
                              "RandomResizedCrop(224) windows",
                              "RRC windows, fast, 1/2^k",
                              "RRC windows, fast, M/8",
                              "RRC windows, ISLOW+fancy, M/8",
                              "full image 1/1, strict",
                              "full image 1/1, lenient",
                              "RRC windows, lenient",
                              "RRC windows, fast, 1/2^k, lenient"};

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s JPEG...\n", argv[0]);
        return 2;
    }
    imgs = calloc((size_t)argc, sizeof(*imgs));
    stk__decoder_create(0, &dec);
    stk__decoder_create(0, &dec_lenient);
    stk__decoder_set_lenient(dec_lenient, true);
    stk_decoder_create(0, &pub);
    tj = tjInitDecompress();
    size_t total = 0, maxpx = 0;
    char err[256];
    for (int a = 1; a < argc; a++) {
        FILE *f = fopen(argv[a], "rb");
        if (!f)
            continue;
        img *im = &imgs[n_imgs];
        fseek(f, 0, SEEK_END);
        im->n = (size_t)ftell(f);
        fseek(f, 0, SEEK_SET);
        im->p = malloc(im->n);
        if (fread(im->p, 1, im->n, f) != im->n ||
            stk__image_probe(dec, im->p, im->n, &im->info, err, sizeof(err)) != 0 ||
            im->info.format != STK__IMG_JPEG) {
            fclose(f);
            free(im->p);
            continue;
        }
        fclose(f);
        total += im->n;
        maxpx = STK_MAX(maxpx, (size_t)im->info.width * im->info.height);
        n_imgs++;
    }
    if (!n_imgs)
        return 1;
    tjbuf = malloc(maxpx * 3);
    printf("%d JPEGs, mean %.1f KB\n", n_imgs, total / 1024.0 / n_imgs);

    /* The fast decodes' quality against ISLOW (= PIL's decode) */
    uint8_t *ref = malloc(maxpx * 3);
    static const int fast_flags[2] = {TJFLAG_FASTDCT, TJFLAG_FASTDCT | TJFLAG_FASTUPSAMPLE};
    for (int f = 0; f < 2; f++) {
        double se = 0, cnt = 0;
        for (int i = 0; i < n_imgs; i++) {
            img *im = &imgs[i];
            size_t n = (size_t)im->info.width * im->info.height * 3;
            tjDecompress2(tj, im->p, im->n, ref, im->info.width, 0, im->info.height, TJPF_RGB, 0);
            tjDecompress2(tj, im->p, im->n, tjbuf, im->info.width, 0, im->info.height, TJPF_RGB,
                          fast_flags[f]);
            for (size_t k = 0; k < n; k++)
                se += (ref[k] - tjbuf[k]) * (double)(ref[k] - tjbuf[k]);
            cnt += n;
        }
        printf("%s vs ISLOW: PSNR %.2f dB\n", f ? "FASTDCT+FASTUPSAMPLE" : "FASTDCT",
               10 * log10(255.0 * 255.0 / (se / cnt)));
    }

    /* Rounds of 0.3 s per mode, interleaved; the best round counts (the machine may be shared) */
    enum { N_MODES = sizeof(names) / sizeof(names[0]), ROUNDS = 6 };
    double best[N_MODES] = {0};
    for (int m = 0; m < N_MODES; m++)
        for (int i = 0; i < n_imgs; i++) /* warm-up, and check */
            if (run(m, i) != 0) {
                fprintf(stderr, "%s failed on image %d\n", names[m], i);
                return 1;
            }
    for (int r = 0; r < ROUNDS; r++)
        for (int m = 0; m < N_MODES; m++) {
            long done = 0;
            double t0 = now(), t;
            do {
                for (int i = 0; i < n_imgs; i++)
                    run(m, i);
                done += n_imgs;
                t = now() - t0;
            } while (t < 0.3);
            best[m] = STK_MAX(best[m], done / t);
        }
    for (int m = 0; m < N_MODES; m++)
        printf("%-34s %8.0f img/s\n", names[m], best[m]);
    return 0;
}
