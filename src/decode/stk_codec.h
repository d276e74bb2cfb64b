/*
 * stk_codec.h: private to src/decode. The decoder object that stk_image.c (sniffing, argument
 * checks, the public stk_decoder_* API) hands to the two codecs, stk_jpeg.c and stk_png.c.
 *
 * stk_image.c validates every argument before dispatching, so the codec entry points may assume
 * a non-empty buffer of their own format and, for decode, a window inside the probed image.
 */
#ifndef STK_CODEC_H
#define STK_CODEC_H

#include "stk_decode.h"

#define STK__DEFAULT_MAX_PIXELS 64000000u /* "64 Mpx" */

/* STK_FAIL for an error buffer passed as pointer + size (STK_FAIL takes sizeof of an array). */
#define STK_FAIL_SIZED(buf, size, code, ...)                                                       \
    do {                                                                                           \
        rc = stk__set_error((buf), (size), (code), __VA_ARGS__);                                   \
        goto fail;                                                                                 \
    } while (0)

typedef struct stk__jpeg stk__jpeg; /* libjpeg state, reused for every JPEG (stk_jpeg.c) */

struct stk__decoder {
    uint64_t max_pixels;
    bool lenient; /* keep libjpeg's recovery from corrupt data (default false: it is an error) */
    bool trusted; /* this image read clean through its end before: stop after the window */
    bool checked; /* the last decode read all of the image's data strictly, nothing wrong */
    bool own_entropy; /* JPEG: stoker's Huffman decoder (stk_jpeg_huff.c; default true) */
    uint8_t *pix;     /* output pixels: grows to the largest window seen, then reused */
    size_t pix_cap;
    uint8_t *aux; /* codec scratch (row pointers, CMYK rows, PNG rows outside the window) */
    size_t aux_cap;
    stk__jpeg *jpeg;
};

/* Grow *buf (capacity *cap) to at least `size` bytes; contents are not kept. STK_ENOMEM fails. */
stk_status stk__decoder_reserve(uint8_t **buf, size_t *cap, size_t size, char *err,
                                size_t err_size);
/* STK_ELIMIT with "image WxH exceeds the pixel limit (N Mpx)" when w*h > d->max_pixels. */
stk_status stk__decoder_check_pixels(const stk__decoder *d, uint32_t w, uint32_t h, char *err,
                                     size_t err_size);

stk_status stk__jpeg_create(stk__jpeg **out);
void stk__jpeg_destroy(stk__jpeg *j);
stk_status stk__jpeg_probe(stk__decoder *d, const uint8_t *src, size_t size, stk__imginfo *out,
                           char *err, size_t err_size);
/* Decode window x, y, w, h at scale num/8 (num in 1..8); fast: JDCT_IFAST and plain chroma
 * upsampling instead of PIL's ISLOW and fancy upsampling. */
stk_status stk__jpeg_decode(stk__decoder *d, const uint8_t *src, size_t size,
                            const stk__imginfo *info, uint32_t x, uint32_t y, uint32_t w,
                            uint32_t h, uint32_t num, bool fast, stk__decoded *out, char *err,
                            size_t err_size);

/* stk__decoder_entropy_counts for the JPEG state. */
void stk__jpeg_entropy_counts(const stk__jpeg *j, uint64_t *own, uint64_t *gave_up);

/* stk__jpeg_decode in fast mode, the window as planes (stk__image_decode_planes). */
stk_status stk__jpeg_decode_planes(stk__decoder *d, const uint8_t *src, size_t size,
                                   const stk__imginfo *info, uint32_t x, uint32_t y, uint32_t w,
                                   uint32_t h, uint32_t num, stk__decoded planes[3], char *err,
                                   size_t err_size);

/* The codecs that decode at full scale (no DCT scaling). Their decode fills d->pix with at least
 * rows 0 .. y+h-1 of the image at full width (origin 0, scale 1); the window logic crops. PNG
 * stops after the window's last row; the others decode the whole image. */
#define STK__DECLARE_WHOLE_CODEC(name)                                                             \
    stk_status stk__##name##_probe(stk__decoder *d, const uint8_t *src, size_t size,               \
                                   stk__imginfo *out, char *err, size_t err_size);                 \
    stk_status stk__##name##_decode(stk__decoder *d, const uint8_t *src, size_t size,              \
                                    const stk__imginfo *info, uint32_t x, uint32_t y, uint32_t w,  \
                                    uint32_t h, stk__decoded *out, char *err, size_t err_size)
STK__DECLARE_WHOLE_CODEC(png);
STK__DECLARE_WHOLE_CODEC(webp);
STK__DECLARE_WHOLE_CODEC(tiff);
STK__DECLARE_WHOLE_CODEC(bmp);
STK__DECLARE_WHOLE_CODEC(pnm);

/* Point *out at d->pix holding a whole w x h image, 3 bytes per pixel, rows packed. */
void stk__decoded_whole(const stk__decoder *d, uint32_t w, uint32_t h, stk__decoded *out);

/* Reserve d->pix for a whole w x h RGB image after checking max_pixels; sets *stride. */
stk_status stk__decoder_reserve_rgb(stk__decoder *d, uint32_t w, uint32_t h, size_t *stride,
                                    char *err, size_t err_size);

#endif /* STK_CODEC_H */
