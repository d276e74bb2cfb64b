/*
 * stk_image.c: the image decoder front end. Sniffs the format from the magic bytes, checks the
 * arguments once for every codec, picks the JPEG DCT scale, dispatches to the codec (stk_jpeg.c,
 * stk_png.c, stk_webp.c, stk_tiff.c, stk_bmp.c, stk_pnm.c), and implements the public
 * stk_decoder_* API (a full-size decode) on top. Only JPEG decodes a window at a reduced scale;
 * the others decode at full scale and the window logic crops (stk_codec.h).
 *
 * Scale rule (stk_decode.h): the largest den in {8, 4, 2, 1} with ceil(w/den) >= min_w and
 * ceil(h/den) >= min_h. Passing min = w, h asks for full scale; for a 1x1 window the rule alone
 * would still allow 1/8 (1 pixel either way), so min_w >= w && min_h >= h forces den 1.
 *
 * Buffers: the output pixels and codec scratch live in the decoder and grow to the largest window
 * seen; the steady state allocates nothing here (libjpeg and libspng still allocate their own
 * per-image working memory).
 */
#include "stk_codec.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <string.h>

typedef stk_status (*probe_fn)(stk__decoder *, const uint8_t *, size_t, stk__imginfo *, char *,
                               size_t);
typedef stk_status (*decode_fn)(stk__decoder *, const uint8_t *, size_t, const stk__imginfo *,
                                uint32_t, uint32_t, uint32_t, uint32_t, stk__decoded *, char *,
                                size_t);

/* The full-scale codecs, indexed by stk__imgfmt (JPEG has its own scaled path). */
static const struct {
    probe_fn probe;
    decode_fn decode;
} whole_codecs[] = {
    [STK__IMG_PNG] = {stk__png_probe, stk__png_decode},
    [STK__IMG_WEBP] = {stk__webp_probe, stk__webp_decode},
    [STK__IMG_TIFF] = {stk__tiff_probe, stk__tiff_decode},
    [STK__IMG_BMP] = {stk__bmp_probe, stk__bmp_decode},
    [STK__IMG_PNM] = {stk__pnm_probe, stk__pnm_decode},
};

struct stk_decoder {
    stk__decoder *d;
    char errmsg[STK_ERRMSG_SIZE];
};

stk_status stk__decoder_reserve(uint8_t **buf, size_t *cap, size_t size, char *err, size_t err_size)
{
    return stk__buffer_reserve(buf, cap, size, "image",
                               "lower the transform's max_pixels to refuse such images up front, ",
                               err, err_size);
}

stk_status stk__buffer_reserve(uint8_t **buf, size_t *cap, size_t size, const char *what,
                               const char *hint, char *err, size_t err_size)
{
    if (size <= *cap)
        return STK_OK;
    /* Grow geometrically so that slowly growing windows settle quickly */
    size_t want = STK_MAX(size, *cap + *cap / 2);
    stk__budget *b = stk__thread_budget; /* a loader's memory_budget, charged as buffers grow */
    if (b && !stk__budget_charge(b, want - *cap)) {
        want = size; /* the exact size may still fit */
        if (!stk__budget_charge(b, want - *cap)) {
            uint64_t held = atomic_load_explicit(&b->held, memory_order_relaxed);
            return stk__set_error(err, err_size, STK_ELIMIT,
                                  "decoding needs %zu more bytes of %s buffer, over the "
                                  "memory budget of %" PRIu64 " bytes (the ring and per-thread "
                                  "scratch take %" PRIu64 ", decode buffers already hold %" PRIu64
                                  "): raise memory_budget, %sor use fewer threads",
                                  size - *cap, what, b->limit, b->fixed, held, hint);
        }
    }
    uint8_t *p = stk__realloc(*buf, want);
    if (!p)
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory (%zu-byte %s buffer)", size,
                              what);
    *buf = p;
    *cap = want;
    return STK_OK;
}

stk_status stk__decoder_check_pixels(const stk__decoder *d, uint32_t w, uint32_t h, char *err,
                                     size_t err_size)
{
    if ((uint64_t)w * h > d->max_pixels)
        return stk__set_error(err, err_size, STK_ELIMIT,
                              "image %ux%u exceeds the pixel limit (%g Mpx)", w, h,
                              (double)d->max_pixels / 1e6);
    return STK_OK;
}

stk_status stk__decoder_reserve_rgb(stk__decoder *d, uint32_t w, uint32_t h, size_t *stride,
                                    char *err, size_t err_size)
{
    size_t total;
    stk_status rc = stk__decoder_check_pixels(d, w, h, err, err_size);
    if (rc < 0)
        return rc;
    /* Cannot overflow once w*h <= max_pixels (a uint64_t), but size_t may be narrower */
    if (!stk__mul_ok((size_t)w * 3, h, &total))
        return stk__set_error(err, err_size, STK_ELIMIT, "image %ux%u too large", w, h);
    *stride = (size_t)w * 3;
    return stk__decoder_reserve(&d->pix, &d->pix_cap, total, err, err_size);
}

void stk__decoded_whole(const stk__decoder *d, uint32_t w, uint32_t h, stk__decoded *out)
{
    out->rgb = d->pix;
    out->width = w;
    out->height = h;
    out->stride = (size_t)w * 3;
    out->origin_x = out->origin_y = 0;
    out->scale_x = out->scale_y = 1;
}

void stk__decoder_set_lenient(stk__decoder *d, bool lenient)
{
    d->lenient = lenient;
}

void stk__decoder_set_trusted(stk__decoder *d, bool trusted)
{
    d->trusted = trusted;
}

void stk__decoder_set_own_entropy(stk__decoder *d, bool own)
{
    d->own_entropy = own;
}

void stk__decoder_entropy_counts(const stk__decoder *d, uint64_t *own, uint64_t *gave_up)
{
    stk__jpeg_entropy_counts(d->jpeg, own, gave_up);
}

bool stk__decoder_checked(const stk__decoder *d)
{
    return d->checked;
}

stk_status stk__decoder_create(uint64_t max_pixels, stk__decoder **out)
{
    stk__decoder *d = stk__calloc(1, sizeof(*d));
    if (!d)
        return STK_ENOMEM;
    d->max_pixels = max_pixels ? max_pixels : STK__DEFAULT_MAX_PIXELS;
    d->own_entropy = true;
    stk_status rc = stk__jpeg_create(&d->jpeg);
    if (rc < 0) {
        stk__free(d);
        return rc;
    }
    *out = d;
    return STK_OK;
}

void stk__decoder_destroy(stk__decoder *d)
{
    if (!d)
        return;
    stk__jpeg_destroy(d->jpeg);
    stk__free(d->pix);
    stk__free(d->aux);
    stk__free(d);
}

/* The format from the magic bytes, or the reason it is none of them. */
static stk__imgfmt sniff(const uint8_t *p, size_t size, char *err, size_t err_size)
{
    stk__imgfmt fmt = stk__image_magic(p, size);
    if (fmt != STK__IMG_UNKNOWN)
        return fmt;
    if (size == 0) {
        stk__set_error(err, err_size, STK_EFORMAT, "empty (0 bytes)");
        return STK__IMG_UNKNOWN;
    }
    char hex[24] = "";
    size_t n = STK_MIN(size, (size_t)4), at = 0;
    for (size_t i = 0; i < n; i++)
        at += (size_t)snprintf(hex + at, sizeof(hex) - at, "%s0x%02x", i ? " " : "", p[i]);
    stk__set_error(err, err_size, STK_EFORMAT,
                   "not a supported image (JPEG, PNG, WebP, TIFF, BMP, PPM/PGM; starts with %s)",
                   hex);
    return STK__IMG_UNKNOWN;
}

stk_status stk__image_probe(stk__decoder *d, const void *src, size_t size, stk__imginfo *out,
                            char *err, size_t err_size)
{
    if (!d || (!src && size) || !out)
        return stk__set_error(err, err_size, STK_EINVAL, "image probe: NULL argument");
    memset(out, 0, sizeof(*out));
    d->checked = false;
    stk__imgfmt fmt = sniff(src, size, err, err_size);
    if (fmt == STK__IMG_UNKNOWN)
        return STK_EFORMAT;
    if (fmt == STK__IMG_JPEG)
        return stk__jpeg_probe(d, src, size, out, err, err_size);
    return whole_codecs[fmt].probe(d, src, size, out, err, err_size);
}

/* The DCT scale num/8 for a w x h window decoded to at least min_w x min_h: the smallest num in
 * 1, 2, 4, 8 with ceil(w*num/8) >= min_w and ceil(h*num/8) >= min_h. The other M/8 scales
 * libjpeg offers have no SIMD IDCT in libjpeg-turbo 2.1 (stk_transform.c has the numbers). */
static uint32_t choose_num(uint32_t w, uint32_t h, uint32_t min_w, uint32_t min_h)
{
    if (min_w >= w && min_h >= h)
        return 8;
    for (uint32_t num = 1; num < 8; num *= 2)
        if (((uint64_t)w * num + 7) / 8 >= min_w && ((uint64_t)h * num + 7) / 8 >= min_h)
            return num;
    return 8;
}

/* stk__image_decode, stk__image_decode_fast and (planes != NULL) stk__image_decode_planes. */
static stk_status image_decode(stk__decoder *d, const void *src, size_t size,
                               const stk__imginfo *info, uint32_t x, uint32_t y, uint32_t w,
                               uint32_t h, uint32_t min_w, uint32_t min_h, bool fast,
                               stk__decoded *out, stk__decoded *planes, char *err, size_t err_size)
{
    if (!d || (!src && size) || !info || (!out && !planes))
        return stk__set_error(err, err_size, STK_EINVAL, "image decode: NULL argument");
    if (w == 0 || h == 0 || x >= info->width || y >= info->height || w > info->width - x ||
        h > info->height - y)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "window %ux%u at (%u, %u) is not inside the %ux%u image", w, h, x, y,
                              info->width, info->height);
    stk__imgfmt fmt = sniff(src, size, err, err_size);
    if (fmt == STK__IMG_UNKNOWN)
        return STK_EFORMAT;
    if (fmt != info->format)
        return stk__set_error(err, err_size, STK_EINVAL, "image format differs from its probe");
    d->checked = false; /* the JPEG and PNG decoders set it; the others decode whole images */
    if (planes && fmt != STK__IMG_JPEG)
        return STK__NOT_PLANAR;
    if (planes)
        return stk__jpeg_decode_planes(d, src, size, info, x, y, w, h,
                                       choose_num(w, h, min_w, min_h), planes, err, err_size);
    if (fmt == STK__IMG_JPEG)
        return stk__jpeg_decode(d, src, size, info, x, y, w, h, choose_num(w, h, min_w, min_h),
                                fast, out, err, err_size);
    stk_status rc = whole_codecs[fmt].decode(d, src, size, info, x, y, w, h, out, err, err_size);
    if (rc == STK_OK && fmt != STK__IMG_PNG)
        d->checked = !d->lenient;
    return rc;
}

stk_status stk__image_decode(stk__decoder *d, const void *src, size_t size,
                             const stk__imginfo *info, uint32_t x, uint32_t y, uint32_t w,
                             uint32_t h, uint32_t min_w, uint32_t min_h, stk__decoded *out,
                             char *err, size_t err_size)
{
    return image_decode(d, src, size, info, x, y, w, h, min_w, min_h, false, out, NULL, err,
                        err_size);
}

stk_status stk__image_decode_fast(stk__decoder *d, const void *src, size_t size,
                                  const stk__imginfo *info, uint32_t x, uint32_t y, uint32_t w,
                                  uint32_t h, uint32_t min_w, uint32_t min_h, stk__decoded *out,
                                  char *err, size_t err_size)
{
    return image_decode(d, src, size, info, x, y, w, h, min_w, min_h, true, out, NULL, err,
                        err_size);
}

stk_status stk__image_decode_planes(stk__decoder *d, const void *src, size_t size,
                                    const stk__imginfo *info, uint32_t x, uint32_t y, uint32_t w,
                                    uint32_t h, uint32_t min_w, uint32_t min_h,
                                    stk__decoded planes[3], char *err, size_t err_size)
{
    return image_decode(d, src, size, info, x, y, w, h, min_w, min_h, true, NULL, planes, err,
                        err_size);
}

/* ---- public API: full-size decode ---- */

stk_status stk_decoder_create(uint64_t max_pixels, stk_decoder **out)
{
    if (!out)
        return stk__set_last_error(STK_EINVAL, "stk_decoder_create: out is NULL");
    *out = NULL;
    stk_decoder *pd = stk__calloc(1, sizeof(*pd));
    if (!pd || stk__decoder_create(max_pixels, &pd->d) < 0) {
        stk__free(pd);
        return stk__set_last_error(STK_ENOMEM, "stk_decoder_create: out of memory");
    }
    *out = pd;
    return STK_OK;
}

void stk_decoder_destroy(stk_decoder *pd)
{
    if (!pd)
        return;
    stk__decoder_destroy(pd->d);
    stk__free(pd);
}

stk_status stk_decoder_decode(stk_decoder *pd, const void *src, size_t size, stk_image *out)
{
    stk__imginfo info;
    stk__decoded dec;
    stk_status rc = STK_OK;
    if (!pd || !out)
        return stk__set_last_error(STK_EINVAL, "stk_decoder_decode: NULL argument");
    memset(out, 0, sizeof(*out));
    pd->errmsg[0] = '\0';
    STK_TRY(stk__image_probe(pd->d, src, size, &info, pd->errmsg, sizeof(pd->errmsg)));
    STK_TRY(stk__image_decode(pd->d, src, size, &info, 0, 0, info.width, info.height, info.width,
                              info.height, &dec, pd->errmsg, sizeof(pd->errmsg)));
    out->data = dec.rgb;
    out->width = dec.width;
    out->height = dec.height;
    out->stride = dec.stride;
    return STK_OK;

fail:
    return rc;
}

const char *stk_decoder_errmsg(const stk_decoder *pd)
{
    return pd ? pd->errmsg : "";
}
