/*
 * stk_tiff.c: TIFF decoding through libtiff (the only file that includes tiffio.h).
 *
 * The first image (directory) is read from memory through TIFFClientOpenExt with our own
 * read/seek/size procedures (no mapping: libtiff reads into its own buffers and never writes to
 * the record), then TIFFReadRGBAImageOriented converts whatever libtiff supports (gray, palette,
 * RGB, YCbCr, CMYK, 1-16 bits per sample, every compression libtiff was built with) to 8-bit
 * RGBA rows, top row first, stopping at the first error. The RGBA raster is written into the
 * decoder's pixel buffer and packed to RGB in place (each pixel moves down, never up). Known
 * differences from PIL: unassociated alpha is premultiplied by libtiff's RGBA interface (PIL
 * keeps the colour; alpha is dropped either way), and 16-bit gray keeps its high byte.
 *
 * Errors: a per-handle error handler (TIFFOpenOptions, libtiff >= 4.5) keeps libtiff's text for
 * the message ("TIFF: Not a TIFF file, bad magic number ..."); warnings (unknown tags and the
 * like) are ignored. Nothing is printed: the handlers return 1, which stops libtiff from calling
 * its process-wide handlers (left untouched: another libtiff user in the process, PIL for one,
 * keeps its own). Allocations inside libtiff are capped (TIFFOpenOptionsSetMaxSingleMemAlloc),
 * and the image size is checked against max_pixels before the raster is allocated.
 */
#include "stk_codec.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <tiffio.h>

/* A read-only memory file for libtiff, plus the first error message it reported. */
typedef struct {
    const uint8_t *p;
    size_t size, pos;
    char msg[256];
} memfile;

static tmsize_t mem_read(thandle_t h, void *buf, tmsize_t n)
{
    memfile *m = h;
    if (n < 0)
        return -1;
    size_t k = STK_MIN((size_t)n, m->size - m->pos);
    memcpy(buf, m->p + m->pos, k);
    m->pos += k;
    return (tmsize_t)k;
}

static tmsize_t mem_write(thandle_t h, void *buf, tmsize_t n)
{
    (void)h, (void)buf, (void)n;
    return -1;
}

static toff_t mem_seek(thandle_t h, toff_t off, int whence)
{
    memfile *m = h;
    uint64_t base = whence == SEEK_CUR ? m->pos : whence == SEEK_END ? m->size : 0;
    if (whence != SEEK_SET && whence != SEEK_CUR && whence != SEEK_END)
        return (toff_t)-1;
    /* Offsets past the end are allowed (reads there return 0 bytes), but not wrapped ones */
    if (off > UINT64_MAX - base || base + off > SIZE_MAX)
        return (toff_t)-1;
    m->pos = STK_MIN((size_t)(base + off), m->size);
    return (toff_t)(base + off);
}

static int mem_close(thandle_t h)
{
    (void)h;
    return 0;
}

static toff_t mem_size(thandle_t h)
{
    return ((memfile *)h)->size;
}

static int no_map(thandle_t h, void **base, toff_t *size)
{
    (void)h, (void)base, (void)size;
    return 0;
}

static void no_unmap(thandle_t h, void *base, toff_t size)
{
    (void)h, (void)base, (void)size;
}

/* libtiff's error hook: keep the first message; 1 = do not call the process-wide handlers. */
static int on_error(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap)
{
    (void)tif, (void)module;
    memfile *m = user;
    if (!m->msg[0])
        vsnprintf(m->msg, sizeof(m->msg), fmt, ap);
    return 1;
}

static int on_warning(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap)
{
    (void)tif, (void)user, (void)module, (void)fmt, (void)ap;
    return 1;
}

/* Open the first image of src and check its size; the reason for a failure goes to err. */
static stk_status tiff_open(const stk__decoder *d, memfile *m, TIFF **out, uint32_t *w, uint32_t *h,
                            char *err, size_t err_size)
{
    *out = NULL;
    TIFFOpenOptions *o = TIFFOpenOptionsAlloc();
    if (!o)
        return stk__set_error(err, err_size, STK_ENOMEM, "TIFF: out of memory");
    TIFFOpenOptionsSetErrorHandlerExtR(o, on_error, m);
    TIFFOpenOptionsSetWarningHandlerExtR(o, on_warning, m);
    /* The RGBA raster is ours; libtiff's own buffers (strips, tiles) stay well below this */
    uint64_t cap = d->max_pixels * 4 + (64u << 20);
    TIFFOpenOptionsSetMaxSingleMemAlloc(o, (tmsize_t)STK_MIN(cap, (uint64_t)INT64_MAX / 2));
    /* "rm": read-only, never memory-map */
    TIFF *tif = TIFFClientOpenExt("image", "rm", m, mem_read, mem_write, mem_seek, mem_close,
                                  mem_size, no_map, no_unmap, o);
    TIFFOpenOptionsFree(o);
    if (!tif)
        return stk__set_error(err, err_size, STK_EFORMAT, "TIFF: %s",
                              m->msg[0] ? m->msg : "cannot read the header");
    if (!TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, w) || !TIFFGetField(tif, TIFFTAG_IMAGELENGTH, h) ||
        *w == 0 || *h == 0) {
        TIFFClose(tif);
        return stk__set_error(err, err_size, STK_EFORMAT, "TIFF: no image size");
    }
    stk_status rc = stk__decoder_check_pixels(d, *w, *h, err, err_size);
    if (rc < 0) {
        TIFFClose(tif);
        return rc;
    }
    *out = tif;
    return STK_OK;
}

stk_status stk__tiff_probe(stk__decoder *d, const uint8_t *src, size_t size, stk__imginfo *out,
                           char *err, size_t err_size)
{
    memfile m = {.p = src, .size = size};
    TIFF *tif;
    uint32_t w, h;
    stk_status rc = tiff_open(d, &m, &tif, &w, &h, err, err_size);
    if (rc < 0)
        return rc;
    TIFFClose(tif);
    out->format = STK__IMG_TIFF;
    out->width = w;
    out->height = h;
    return STK_OK;
}

stk_status stk__tiff_decode(stk__decoder *d, const uint8_t *src, size_t size,
                            const stk__imginfo *info, uint32_t x, uint32_t y, uint32_t w,
                            uint32_t h, stk__decoded *out, char *err, size_t err_size)
{
    (void)x, (void)y, (void)w, (void)h;
    memfile m = {.p = src, .size = size};
    TIFF *tif = NULL;
    uint32_t iw, ih;
    size_t stride, raster;
    char emsg[1024] = "";
    stk_status rc = STK_OK;

    STK_TRY(tiff_open(d, &m, &tif, &iw, &ih, err, err_size));
    if (iw != info->width || ih != info->height)
        STK_FAIL_SIZED(err, err_size, STK_EINVAL, "image is %ux%u, not the probed %ux%u", iw, ih,
                       info->width, info->height);
    if (!TIFFRGBAImageOK(tif, emsg))
        STK_FAIL_SIZED(err, err_size, STK_EFORMAT, "TIFF: %s", emsg);
    /* The RGBA raster (4 bytes a pixel) in d->pix, then packed to RGB in place */
    STK_TRY(stk__decoder_reserve_rgb(d, iw, ih, &stride, err, err_size));
    if (!stk__mul_ok((size_t)iw * ih, 4, &raster))
        STK_FAIL_SIZED(err, err_size, STK_ELIMIT, "TIFF: image too large");
    STK_TRY(stk__decoder_reserve(&d->pix, &d->pix_cap, raster, err, err_size));
    uint32_t *px = (uint32_t *)(void *)d->pix;
    if (!TIFFReadRGBAImageOriented(tif, iw, ih, px, ORIENTATION_TOPLEFT, 1))
        STK_FAIL_SIZED(err, err_size, STK_EFORMAT, "TIFF: %s",
                       m.msg[0] ? m.msg : "corrupt or truncated image data");
    uint8_t *dst = d->pix;
    for (size_t i = 0, n = (size_t)iw * ih; i < n; i++, dst += 3) {
        uint32_t v = px[i]; /* read before the 3-byte write that may overlap it */
        dst[0] = (uint8_t)TIFFGetR(v);
        dst[1] = (uint8_t)TIFFGetG(v);
        dst[2] = (uint8_t)TIFFGetB(v);
    }
    TIFFClose(tif);
    stk__decoded_whole(d, iw, ih, out);
    return STK_OK;

fail:
    if (tif)
        TIFFClose(tif);
    return rc;
}
