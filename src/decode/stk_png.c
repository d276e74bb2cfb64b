/*
 * stk_png.c: PNG decoding through libspng.
 *
 * Every PNG comes out as 8-bit RGB (SPNG_FMT_RGB8): gray is replicated, palettes are expanded,
 * low bit depths are scaled (x255/max, as PIL's L;2 and L;4 unpackers), 16-bit samples keep
 * their high byte (PIL: RGB;16B, RGBA;16B, LA;16B), and alpha, tRNS, gAMA and sBIT are ignored,
 * as in PIL's Image.convert('RGB'). One known difference: PIL opens 16-bit grayscale as mode "I"
 * and its I -> RGB conversion clips at 255 (almost every pixel turns white); here 16-bit gray
 * keeps its high byte like every other 16-bit type.
 *
 * Rows are decoded progressively (SPNG_DECODE_PROGRESSIVE + spng_decode_row). Lenient, decoding
 * stops after the last row of the window. Strict (the default; stk_decode.h), every row is
 * decoded, rows past the window going to a scratch row, so that every IDAT chunk's CRC and the
 * whole zlib stream are checked as in a full decode: a corrupt PNG fails even when the window
 * ends above the damage; a trusted decode (an image checked so before: stk_decode.h) stops after
 * the window as lenient does. An interlaced (Adam7) image needs every pass, so it is always decoded
 * whole. The buffer holds rows 0 to the window's last, at full scale: origin 0, scale 1.
 *
 * libspng has no way to reset a context, so each image gets a new one; its allocations go
 * through stk__malloc/stk__free (OOM injection sees them, and a failed one is reported as
 * STK_ENOMEM whatever libspng makes of it). CRC errors fail for every chunk, and
 * chunk sizes and the memory kept for ancillary chunks are capped.
 */
#include "stk_codec.h"

#include <spng.h>

#define CHUNK_SIZE_MAX (64u << 20) /* largest chunk accepted */
#define CHUNK_CACHE_MAX (8u << 20) /* memory kept for ancillary chunks (text, iCCP, ...) */

/* Set when an allocation made for libspng fails during the current call on this thread. libspng
 * reports some of those as data errors (zlib allocates its window inside inflate(), which then
 * reads as "IDAT stream error"), so this flag, not the return code, tells out-of-memory apart.
 * A thread-local because struct spng_alloc has no user pointer; it only lives for one call. */
static _Thread_local bool alloc_failed;

static void *png_malloc(size_t size)
{
    void *p = stk__malloc(size);
    alloc_failed |= !p;
    return p;
}

static void *png_realloc(void *ptr, size_t size)
{
    void *p = stk__realloc(ptr, size);
    alloc_failed |= !p;
    return p;
}

static void *png_calloc(size_t n, size_t size)
{
    void *p = stk__calloc(n, size);
    alloc_failed |= !p;
    return p;
}

/* Turn a libspng error into a status and message. */
static stk_status png_error(int ret, char *err, size_t err_size)
{
    if (ret == SPNG_EMEM || alloc_failed)
        return stk__set_error(err, err_size, STK_ENOMEM, "PNG: out of memory (%s)",
                              spng_strerror(ret));
    return stk__set_error(err, err_size, STK_EFORMAT, "PNG: %s", spng_strerror(ret));
}

/* A context reading src, with its header read and checked against the limits. */
static stk_status png_open(const stk__decoder *d, const uint8_t *src, size_t size, spng_ctx **out,
                           struct spng_ihdr *ihdr, char *err, size_t err_size)
{
    struct spng_alloc alloc = {png_malloc, png_realloc, png_calloc, stk__free};
    stk_status rc = STK_OK;
    int ret;
    alloc_failed = false;
    spng_ctx *ctx = spng_ctx_new2(&alloc, 0);
    if (!ctx)
        STK_FAIL_SIZED(err, err_size, STK_ENOMEM, "PNG: out of memory");
    spng_set_crc_action(ctx, SPNG_CRC_ERROR, SPNG_CRC_ERROR);
    spng_set_chunk_limits(ctx, CHUNK_SIZE_MAX, CHUNK_CACHE_MAX);
    ret = spng_set_png_buffer(ctx, src, size);
    if (ret == 0)
        ret = spng_get_ihdr(ctx, ihdr);
    if (ret != 0) {
        rc = png_error(ret, err, err_size);
        goto fail;
    }
    STK_TRY(stk__decoder_check_pixels(d, ihdr->width, ihdr->height, err, err_size));
    *out = ctx;
    return STK_OK;

fail:
    spng_ctx_free(ctx);
    return rc;
}

stk_status stk__png_probe(stk__decoder *d, const uint8_t *src, size_t size, stk__imginfo *out,
                          char *err, size_t err_size)
{
    spng_ctx *ctx;
    struct spng_ihdr ihdr;
    stk_status rc = png_open(d, src, size, &ctx, &ihdr, err, err_size);
    if (rc < 0)
        return rc;
    spng_ctx_free(ctx);
    out->format = STK__IMG_PNG;
    out->width = ihdr.width;
    out->height = ihdr.height;
    return STK_OK;
}

stk_status stk__png_decode(stk__decoder *d, const uint8_t *src, size_t size,
                           const stk__imginfo *info, uint32_t x, uint32_t y, uint32_t w, uint32_t h,
                           stk__decoded *out, char *err, size_t err_size)
{
    (void)x;
    (void)w;
    spng_ctx *ctx = NULL;
    struct spng_ihdr ihdr;
    stk_status rc = STK_OK;
    int ret;

    STK_TRY(png_open(d, src, size, &ctx, &ihdr, err, err_size));
    if (ihdr.width != info->width || ihdr.height != info->height)
        STK_FAIL_SIZED(err, err_size, STK_EINVAL, "image is %ux%u, not the probed %ux%u",
                       ihdr.width, ihdr.height, info->width, info->height);

    uint32_t rows = y + h; /* rows 0 .. the window's last */
    size_t stride = (size_t)ihdr.width * 3, total;
    if (!stk__mul_ok(stride, rows, &total))
        STK_FAIL_SIZED(err, err_size, STK_ELIMIT, "PNG: image too large");
    STK_TRY(stk__decoder_reserve(&d->pix, &d->pix_cap, total, err, err_size));
    bool interlaced = ihdr.interlace_method != SPNG_INTERLACE_NONE;
    /* Rows past the window go to aux, unless the decode may stop after the window's last */
    bool stop_early = !interlaced && (d->lenient || d->trusted);
    if (!stop_early)
        STK_TRY(stk__decoder_reserve(&d->aux, &d->aux_cap, stride, err, err_size));

    ret = spng_decode_image(ctx, NULL, 0, SPNG_FMT_RGB8, SPNG_DECODE_PROGRESSIVE);
    for (struct spng_row_info ri; ret == 0;) {
        ret = spng_get_row_info(ctx, &ri);
        if (ret != 0)
            break;
        uint8_t *dst = ri.row_num < rows ? d->pix + (size_t)ri.row_num * stride : d->aux;
        ret = spng_decode_row(ctx, dst, stride);
        if (ret == 0 && stop_early && ri.row_num + 1 == rows)
            break; /* the window's last row: the rest is not needed */
    }
    if (ret != 0 && ret != SPNG_EOI) {
        rc = png_error(ret, err, err_size);
        goto fail;
    }
    spng_ctx_free(ctx);
    d->checked = !d->lenient && !stop_early;

    out->rgb = d->pix;
    out->width = ihdr.width;
    out->height = rows;
    out->stride = stride;
    out->origin_x = out->origin_y = 0;
    out->scale_x = out->scale_y = 1;
    return STK_OK;

fail:
    spng_ctx_free(ctx);
    return rc;
}
