/*
 * stk_webp.c: WebP decoding through libwebp (the only file that includes webp/decode.h).
 *
 * Lossy, lossless and still images with alpha (VP8X) decode to 8-bit RGB with alpha dropped, as
 * PIL's Image.convert('RGB') does (PIL decodes through the same libwebp, with the same default
 * "fancy" chroma upsampling, so the pixels are PIL's). Animated WebP is refused: PIL's first
 * frame is a composition of the animation's canvas, not a single bitstream.
 *
 * The whole image is decoded at full scale into the decoder's pixel buffer (WebPDecodeRGBInto:
 * no allocation by libwebp for the output); the window logic crops. The header is checked
 * against max_pixels before anything is allocated.
 */
#include "stk_codec.h"

#include <webp/decode.h>

/* libwebp's status codes, as text. */
static const char *vp8_status_text(VP8StatusCode st)
{
    switch (st) {
    case VP8_STATUS_OUT_OF_MEMORY:
        return "out of memory";
    case VP8_STATUS_INVALID_PARAM:
        return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR:
        return "bitstream error (corrupt data)";
    case VP8_STATUS_UNSUPPORTED_FEATURE:
        return "unsupported feature";
    case VP8_STATUS_SUSPENDED:
        return "suspended";
    case VP8_STATUS_USER_ABORT:
        return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA:
        return "truncated (not enough data)";
    default:
        return "error";
    }
}

/* The header facts, checked: a still image within the pixel limit. */
static stk_status webp_header(const stk__decoder *d, const uint8_t *src, size_t size,
                              WebPBitstreamFeatures *f, char *err, size_t err_size)
{
    VP8StatusCode st = WebPGetFeatures(src, size, f);
    if (st != VP8_STATUS_OK)
        return stk__set_error(err, err_size, STK_EFORMAT, "WebP: %s", vp8_status_text(st));
    if (f->has_animation)
        return stk__set_error(err, err_size, STK_EFORMAT, "WebP: animated WebP is not supported");
    if (f->width <= 0 || f->height <= 0)
        return stk__set_error(err, err_size, STK_EFORMAT, "WebP: bad size %dx%d", f->width,
                              f->height);
    return stk__decoder_check_pixels(d, (uint32_t)f->width, (uint32_t)f->height, err, err_size);
}

stk_status stk__webp_probe(stk__decoder *d, const uint8_t *src, size_t size, stk__imginfo *out,
                           char *err, size_t err_size)
{
    WebPBitstreamFeatures f;
    stk_status rc = webp_header(d, src, size, &f, err, err_size);
    if (rc < 0)
        return rc;
    out->format = STK__IMG_WEBP;
    out->width = (uint32_t)f.width;
    out->height = (uint32_t)f.height;
    return STK_OK;
}

stk_status stk__webp_decode(stk__decoder *d, const uint8_t *src, size_t size,
                            const stk__imginfo *info, uint32_t x, uint32_t y, uint32_t w,
                            uint32_t h, stk__decoded *out, char *err, size_t err_size)
{
    (void)x, (void)y, (void)w, (void)h;
    WebPBitstreamFeatures f;
    size_t stride;
    stk_status rc = webp_header(d, src, size, &f, err, err_size);
    if (rc < 0)
        return rc;
    if ((uint32_t)f.width != info->width || (uint32_t)f.height != info->height)
        return stk__set_error(err, err_size, STK_EINVAL, "image is %dx%d, not the probed %ux%u",
                              f.width, f.height, info->width, info->height);
    rc = stk__decoder_reserve_rgb(d, info->width, info->height, &stride, err, err_size);
    if (rc < 0)
        return rc;
    /* stride * height <= the buffer; libwebp takes an int stride and size_t size */
    if (!WebPDecodeRGBInto(src, size, d->pix, stride * info->height, (int)stride))
        return stk__set_error(err, err_size, STK_EFORMAT, "WebP: corrupt or truncated data");
    stk__decoded_whole(d, info->width, info->height, out);
    return STK_OK;
}
