/*
 * stk_bmp.c: Windows BMP decoding, parsed here (no library: the format is a header and raw rows).
 *
 * Supported, as PIL's BmpImagePlugin reads them: the OS/2 core header (12 bytes) and the
 * Windows info headers (40, 52, 56, 64, 108, 124 bytes); uncompressed 1, 4 and 8 bits through a
 * palette, 24 bits (BGR), 32 bits (BGRX: the fourth byte is ignored, as in PIL's "BGRX"), 16 bits
 * (5-5-5); BI_BITFIELDS masks for 16 and 32 bits; bottom-up and top-down (negative height) rows.
 * Masked channels are scaled to 8 bits as PIL's unpackers do (v * 255 / max, truncated).
 * RLE4/RLE8 and embedded JPEG/PNG are refused with their name.
 *
 * Every size comes from the file, so each is checked before use: the header lengths, the
 * palette against the file, the pixel data offset, each row against the end of the data (a short
 * file is an error, never a read past the end), and the image size against max_pixels before the
 * output is reserved. Palette indices past the palette give black.
 */
#include "stk_codec.h"

#include <string.h>

static uint32_t le16(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

enum { BI_RGB = 0, BI_RLE8 = 1, BI_RLE4 = 2, BI_BITFIELDS = 3, BI_JPEG = 4, BI_PNG = 5 };

/* A channel mask: value = (px & mask) >> shift, scaled from 0..max to 0..255. */
typedef struct {
    uint32_t mask, shift, max;
} channel;

typedef struct {
    uint32_t width, height;
    bool top_down;
    uint32_t bits, compression;
    size_t data_off, row_size;
    const uint8_t *palette; /* n_colors entries of pal_entry bytes (BGR or BGRX) */
    uint32_t n_colors, pal_entry;
    channel ch[3]; /* R, G, B for 16 and 32 bits */
} bmp_header;

static channel make_channel(uint32_t mask)
{
    channel c = {mask, 0, 0};
    if (mask) {
        while (!((mask >> c.shift) & 1))
            c.shift++;
        c.max = mask >> c.shift;
    }
    return c;
}

static uint8_t channel_value(const channel *c, uint32_t px)
{
    if (!c->max)
        return 0;
    return (uint8_t)((uint64_t)((px & c->mask) >> c->shift) * 255 / c->max);
}

/* Parse and check the headers; the reason for a failure goes to err. */
static stk_status bmp_parse(const stk__decoder *d, const uint8_t *p, size_t size, bmp_header *b,
                            char *err, size_t err_size)
{
    memset(b, 0, sizeof(*b));
    if (size < 14 + 12)
        return stk__set_error(err, err_size, STK_EFORMAT, "BMP: truncated header (%zu bytes)",
                              size);
    size_t data_off = le32(p + 10), hsize = le32(p + 14);
    int32_t w, h;
    if (hsize == 12) { /* OS/2 BITMAPCOREHEADER */
        w = (int32_t)le16(p + 18);
        h = (int32_t)le16(p + 20);
        b->bits = le16(p + 24);
        b->compression = BI_RGB;
        b->pal_entry = 3;
    } else if (hsize == 40 || hsize == 52 || hsize == 56 || hsize == 64 || hsize == 108 ||
               hsize == 124) {
        if (size < 14 + hsize)
            return stk__set_error(err, err_size, STK_EFORMAT, "BMP: truncated header (%zu bytes)",
                                  size);
        w = (int32_t)le32(p + 18);
        h = (int32_t)le32(p + 22);
        b->bits = le16(p + 28);
        b->compression = le32(p + 30);
        b->n_colors = le32(p + 46);
        b->pal_entry = 4;
    } else {
        return stk__set_error(err, err_size, STK_EFORMAT, "BMP: unsupported header size %zu",
                              hsize);
    }
    if (b->compression == BI_RLE8 || b->compression == BI_RLE4 || b->compression == BI_JPEG ||
        b->compression == BI_PNG)
        return stk__set_error(err, err_size, STK_EFORMAT, "BMP: %s compression is not supported",
                              b->compression == BI_RLE8   ? "RLE8"
                              : b->compression == BI_RLE4 ? "RLE4"
                              : b->compression == BI_JPEG ? "embedded JPEG"
                                                          : "embedded PNG");
    if (b->compression != BI_RGB && b->compression != BI_BITFIELDS)
        return stk__set_error(err, err_size, STK_EFORMAT, "BMP: unknown compression %u",
                              b->compression);
    if (w <= 0 || h == 0 || h == INT32_MIN)
        return stk__set_error(err, err_size, STK_EFORMAT, "BMP: bad size %dx%d", (int)w, (int)h);
    b->width = (uint32_t)w;
    b->top_down = h < 0;
    b->height = (uint32_t)(h < 0 ? -h : h);
    stk_status rc = stk__decoder_check_pixels(d, b->width, b->height, err, err_size);
    if (rc < 0)
        return rc;

    const uint8_t *after_header = p + 14 + hsize;
    switch (b->bits) {
    case 1:
    case 4:
    case 8:
        if (b->compression != BI_RGB)
            return stk__set_error(err, err_size, STK_EFORMAT,
                                  "BMP: bit fields with %u bits per pixel", b->bits);
        if (b->n_colors == 0 || b->n_colors > (1u << b->bits))
            b->n_colors = 1u << b->bits;
        b->palette = after_header;
        /* A palette cut short by the pixel data or the file keeps the entries that fit */
        size_t room = STK_MIN(size, STK_MAX(data_off, (size_t)(after_header - p))) -
                      (size_t)(after_header - p);
        b->n_colors = (uint32_t)STK_MIN((size_t)b->n_colors, room / b->pal_entry);
        break;
    case 16:
    case 24:
    case 32:
        if (b->compression == BI_BITFIELDS) {
            if (b->bits == 24)
                return stk__set_error(err, err_size, STK_EFORMAT,
                                      "BMP: bit fields with 24 bits per pixel");
            /* Masks follow a 40-byte header; the V2+ headers hold them in place */
            if ((size_t)(after_header - p) + (hsize == 40 ? 12 : 0) > size)
                return stk__set_error(err, err_size, STK_EFORMAT, "BMP: truncated bit fields");
            const uint8_t *m = hsize == 40 ? after_header : p + 14 + 40;
            for (int i = 0; i < 3; i++)
                b->ch[i] = make_channel(le32(m + 4 * i));
        } else if (b->bits == 16) {
            b->ch[0] = make_channel(0x7C00);
            b->ch[1] = make_channel(0x03E0);
            b->ch[2] = make_channel(0x001F);
        } else {
            b->ch[0] = make_channel(0xFF0000);
            b->ch[1] = make_channel(0x00FF00);
            b->ch[2] = make_channel(0x0000FF);
        }
        break;
    default:
        return stk__set_error(err, err_size, STK_EFORMAT, "BMP: unsupported %u bits per pixel",
                              b->bits);
    }
    /* Rows are padded to 4 bytes; width < 2^31 and bits <= 32, so this fits in 64 bits */
    uint64_t row = ((uint64_t)b->width * b->bits + 31) / 32 * 4;
    if (data_off < 14 + 12 || data_off > size || row > size)
        return stk__set_error(err, err_size, STK_EFORMAT, "BMP: pixel data outside the file");
    b->data_off = data_off;
    b->row_size = (size_t)row;
    return STK_OK;
}

stk_status stk__bmp_probe(stk__decoder *d, const uint8_t *src, size_t size, stk__imginfo *out,
                          char *err, size_t err_size)
{
    bmp_header b;
    stk_status rc = bmp_parse(d, src, size, &b, err, err_size);
    if (rc < 0)
        return rc;
    out->format = STK__IMG_BMP;
    out->width = b.width;
    out->height = b.height;
    return STK_OK;
}

/* One row of pixels from `in` (row_size bytes) to RGB. */
static void bmp_row(const bmp_header *b, const uint8_t *in, uint8_t *out)
{
    if (b->bits <= 8) {
        uint32_t per_byte = 8 / b->bits, mask = (1u << b->bits) - 1;
        for (uint32_t x = 0; x < b->width; x++, out += 3) {
            uint32_t shift = (per_byte - 1 - x % per_byte) * b->bits;
            uint32_t i = (in[x / per_byte] >> shift) & mask;
            if (i < b->n_colors) {
                const uint8_t *e = b->palette + (size_t)i * b->pal_entry;
                out[0] = e[2], out[1] = e[1], out[2] = e[0];
            } else {
                out[0] = out[1] = out[2] = 0;
            }
        }
        return;
    }
    uint32_t bpp = b->bits / 8;
    for (uint32_t x = 0; x < b->width; x++, in += bpp, out += 3) {
        uint32_t px = bpp == 2 ? le16(in) : bpp == 3 ? le16(in) | (uint32_t)in[2] << 16 : le32(in);
        for (int c = 0; c < 3; c++)
            out[c] = channel_value(&b->ch[c], px);
    }
}

stk_status stk__bmp_decode(stk__decoder *d, const uint8_t *src, size_t size,
                           const stk__imginfo *info, uint32_t x, uint32_t y, uint32_t w, uint32_t h,
                           stk__decoded *out, char *err, size_t err_size)
{
    (void)x, (void)y, (void)w, (void)h;
    bmp_header b;
    size_t stride;
    stk_status rc = bmp_parse(d, src, size, &b, err, err_size);
    if (rc < 0)
        return rc;
    if (b.width != info->width || b.height != info->height)
        return stk__set_error(err, err_size, STK_EINVAL, "image is %ux%u, not the probed %ux%u",
                              b.width, b.height, info->width, info->height);
    /* Every row must be in the file: height * row_size past data_off, without overflow */
    size_t avail = (size - b.data_off) / b.row_size;
    if (avail < b.height)
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "BMP: truncated pixel data (%zu of %u rows)", avail, b.height);
    rc = stk__decoder_reserve_rgb(d, b.width, b.height, &stride, err, err_size);
    if (rc < 0)
        return rc;
    for (uint32_t r = 0; r < b.height; r++) {
        uint32_t file_row = b.top_down ? r : b.height - 1 - r;
        bmp_row(&b, src + b.data_off + (size_t)file_row * b.row_size, d->pix + (size_t)r * stride);
    }
    stk__decoded_whole(d, b.width, b.height, out);
    return STK_OK;
}
