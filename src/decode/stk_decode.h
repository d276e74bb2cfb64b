/*
 * stk_decode.h: the internal image-decoding interface between src/decode (JPEG via
 * libjpeg-turbo, PNG via libspng, WebP via libwebp, TIFF via libtiff, BMP and binary PPM/PGM
 * parsed in src/decode) and src/xform (crop/resize/normalise ops).
 *
 * The transform first chooses a crop window in full-resolution pixel coordinates (from the image
 * size alone, via stk__image_probe), then asks the decoder for just that window, at the smallest
 * DCT scale that keeps the decoded window at least min_w x min_h pixels. The decoder returns an
 * RGB buffer and the affine map from the buffer's pixels back to full-resolution coordinates, so
 * the resize can sample exactly where a full decode would have.
 *
 * Ownership: a stk__decoder belongs to one worker thread and owns its scratch buffers, which grow
 * to the largest image seen and are then reused: no per-sample heap allocation in steady state.
 */
#ifndef STK_DECODE_H
#define STK_DECODE_H

#include "stk_internal.h"

/* Header facts, from parsing the image header only. */
typedef struct stk__imginfo {
    stk__imgfmt format;
    uint32_t width, height; /* full resolution, as PIL reports (EXIF orientation ignored) */
} stk__imginfo;

/* A decoded window. Buffer pixel (u, v) covers full-resolution coordinates
 * [origin_x + u*scale_x, origin_x + (u+1)*scale_x) x [origin_y + v*scale_y, ...). The buffer may
 * extend beyond the requested window (iMCU alignment); it always contains it. */
typedef struct stk__decoded {
    const uint8_t *rgb;     /* RGB interleaved; valid until the next call on the decoder */
    uint32_t width, height; /* buffer size in pixels */
    size_t stride;          /* bytes per row */
    double origin_x, origin_y;
    double scale_x, scale_y; /* full-resolution pixels per buffer pixel (1, 2, 4 or 8 for JPEG) */
} stk__decoded;

typedef struct stk__decoder stk__decoder;

/* Create a per-thread decoder; images over max_pixels (0 = 64 Mpx) fail with STK_ELIMIT. */
stk_status stk__decoder_create(uint64_t max_pixels, stk__decoder **out);
void stk__decoder_destroy(stk__decoder *d);

/* Strict (the default, lenient = false): a JPEG that libjpeg reports as corrupt (any warning
 * about the data: "Corrupt JPEG data: ...", premature end, bad Huffman code, bad progression)
 * fails with STK_EFORMAT and libjpeg's text, and the entropy-coded data is read through EOI even
 * when the window ends earlier (entropy decoding only for the whole iMCU rows below it), so
 * what PIL's full decode rejects is rejected. Lenient: libjpeg's recovery is kept (corrupt runs
 * decode to grey or smeared blocks) and decoding stops after the window's last row; a premature end
 * of the file still fails. PNG: every chunk CRC that is read is checked (libspng); strict reads
 * every row, lenient stops after the window's last. The other formats have no such choice. */
void stk__decoder_set_lenient(stk__decoder *d, bool lenient);

/* Checked once (strict mode): after a decode, stk__decoder_checked says whether it read all of
 * the image's data in strict mode and found nothing wrong (JPEG: through EOI; PNG: every row;
 * WebP, TIFF, BMP and PNM always decode the whole image); false after a failure, a lenient or a
 * trusted decode, and after a probe. A caller that remembers this per image (the loader, per
 * record) sets `trusted` for the next decodes of that image: strict then stops after the window's
 * last row, as lenient does, but every warning in the rows it reads stays fatal. The window's
 * pixels never depend on the data below it, so a trusted decode gives the same pixels, and an
 * image is rejected exactly when its first decode rejects it. The flag stays until changed. */
void stk__decoder_set_trusted(stk__decoder *d, bool trusted);

/* JPEG entropy decoding: stoker's own Huffman decoder for single-scan sequential JPEGs (true,
 * the default), or libjpeg-turbo's for every image (false). Both give the same pixels and the
 * same errors (src/decode/stk_jpeg_huff.c says why); the switch is for tests and benchmarks. */
void stk__decoder_set_own_entropy(stk__decoder *d, bool own);
/* JPEG decodes so far whose entropy data stoker's decoder took over (*own), and how many of
 * those it handed back to libjpeg (*gave_up: a stream it does not take, decoded again). */
void stk__decoder_entropy_counts(const stk__decoder *d, uint64_t *own, uint64_t *gave_up);
bool stk__decoder_checked(const stk__decoder *d);

/* Parse the header of a JPEG, PNG, WebP, TIFF, BMP or binary PPM/PGM (sniffed from the magic
 * bytes, whatever the file name says). Errors (STK_EFORMAT, STK_ELIMIT) carry the decoder's reason
 * in err, e.g. "JPEG: Not a JPEG file: starts with 0x89 0x50". */
stk_status stk__image_probe(stk__decoder *d, const void *src, size_t size, stk__imginfo *out,
                            char *err, size_t err_size);

/* Decode the window x, y, w, h (full-resolution pixels, inside the image) of the image probed as
 * `info`. JPEG: choose the largest denominator in {1, 2, 4, 8} with ceil(w/den) >= min_w and
 * ceil(h/den) >= min_h (min_w = min_h = 0 allows 1/8; pass w, h to force full scale), decode only
 * the iMCU rows/columns covering the window (jpeg_crop_scanline + jpeg_skip_scanlines).
 * PNG: decode at full scale (rows past the window are not decoded). WebP, TIFF, BMP, PPM/PGM:
 * decode the whole image at full scale (origin 0, scale 1) and let the caller crop. Grayscale,
 * palette, 16-bit and CMYK inputs come out as 8-bit RGB; alpha is dropped. */
stk_status stk__image_decode(stk__decoder *d, const void *src, size_t size,
                             const stk__imginfo *info, uint32_t x, uint32_t y, uint32_t w,
                             uint32_t h, uint32_t min_w, uint32_t min_h, stk__decoded *out,
                             char *err, size_t err_size);

/* stk__image_decode, trading exactness for speed where the output is resampled anyway: JPEG
 * uses the fast integer IDCT (JDCT_IFAST) and plain (replicating) chroma upsampling instead of
 * PIL's ISLOW IDCT and triangle ("fancy") upsampling. The window, scale rule and map are the
 * same. PNG is decoded exactly as by stk__image_decode. */
stk_status stk__image_decode_fast(stk__decoder *d, const void *src, size_t size,
                                  const stk__imginfo *info, uint32_t x, uint32_t y, uint32_t w,
                                  uint32_t h, uint32_t min_w, uint32_t min_h, stk__decoded *out,
                                  char *err, size_t err_size);

/* stk__image_decode_planes' answer when the image cannot come out as planes (not a JPEG, or not
 * 3-component YCbCr with 1x1 chroma and luma sampled 1 or 2 each way): nothing was decoded, and
 * nothing is wrong with the image. */
#define STK__NOT_PLANAR 1

/* stk__image_decode_fast, but the window comes out before colour conversion: planes[0] is luma
 * (Y) at the decoded scale, planes[1] and planes[2] are Cb and Cr at their own resolution (half
 * the luma's on each subsampled axis), one byte per pixel, each with its own map to full
 * resolution (a chroma sample covers the full-resolution pixels of the luma samples it was
 * subsampled from). Same window and DCT scale rule as stk__image_decode_fast; the luma plane
 * equals the Y of that decode, and the chroma planes hold the samples its plain upsampling
 * replicates. @return STK_OK, STK__NOT_PLANAR, or the errors of stk__image_decode_fast. */
stk_status stk__image_decode_planes(stk__decoder *d, const void *src, size_t size,
                                    const stk__imginfo *info, uint32_t x, uint32_t y, uint32_t w,
                                    uint32_t h, uint32_t min_w, uint32_t min_h,
                                    stk__decoded planes[3], char *err, size_t err_size);

/* Grow *buf (capacity *cap bytes) to at least `size` bytes, geometrically, charging the
 * calling thread's stk__thread_budget (a loader's memory_budget) for what it adds: STK_ELIMIT
 * over it (the message names the `what` buffer and adds `hint`, "" or advice ending in ", "),
 * STK_ENOMEM. Contents are not kept. The image and audio decoders' one way to grow a buffer. */
stk_status stk__buffer_reserve(uint8_t **buf, size_t *cap, size_t size, const char *what,
                               const char *hint, char *err, size_t err_size);

#endif /* STK_DECODE_H */
