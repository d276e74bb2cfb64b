/*
 * stk_pnm.c: binary PGM (P5) and PPM (P6) decoding, parsed here (no library: a text header and
 * raw samples).
 *
 * Header: the magic, then width, height and maxval as decimal numbers separated by whitespace
 * and '#' comments (to the end of the line), then exactly one whitespace byte before the samples.
 * Samples are one byte (maxval 1..255); below 255 they are scaled as PIL does, round(v / maxval *
 * 255) in double precision with ties to even (Python's round), and a sample above maxval is an
 * error, as in PIL. Gray (P5) is replicated to RGB.
 *
 * Refused with their name: 16-bit samples (maxval > 255; PIL opens those as 32-bit integer
 * images), the ASCII types P1-P3, bitmaps (P4) and PAM (P7). Every number is bounded while it is
 * parsed, and the sample data is checked against the file size before the output is reserved.
 */
#include "stk_codec.h"

#include <math.h>
#include <string.h>

typedef struct {
    uint32_t width, height, maxval, channels;
    size_t data_off;
} pnm_header;

static bool is_space(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Skip whitespace and comments, then read a decimal number <= limit; false when there is none. */
static bool read_number(const uint8_t *p, size_t size, size_t *pos, uint32_t limit, uint32_t *out)
{
    size_t i = *pos;
    for (;;) {
        while (i < size && is_space(p[i]))
            i++;
        if (i < size && p[i] == '#') {
            while (i < size && p[i] != '\n' && p[i] != '\r')
                i++;
            continue;
        }
        break;
    }
    if (i >= size || p[i] < '0' || p[i] > '9')
        return false;
    uint64_t v = 0;
    for (; i < size && p[i] >= '0' && p[i] <= '9'; i++) {
        v = v * 10 + (uint64_t)(p[i] - '0');
        if (v > limit)
            return false;
    }
    *pos = i;
    *out = (uint32_t)v;
    return true;
}

/* Parse and check the header; the reason for a failure goes to err. */
static stk_status pnm_parse(const stk__decoder *d, const uint8_t *p, size_t size, pnm_header *h,
                            char *err, size_t err_size)
{
    memset(h, 0, sizeof(*h));
    char type = size >= 2 ? (char)p[1] : '?';
    if (type != '5' && type != '6')
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "PNM: P%c (%s) is not supported; only binary PGM (P5) and PPM (P6)",
                              type,
                              type <= '3'   ? "ASCII"
                              : type == '4' ? "bitmap"
                                            : "PAM");
    size_t pos = 2;
    if (pos >= size || !is_space(p[pos]))
        return stk__set_error(err, err_size, STK_EFORMAT, "PNM: bad header after P%c", type);
    if (!read_number(p, size, &pos, INT32_MAX, &h->width) ||
        !read_number(p, size, &pos, INT32_MAX, &h->height) ||
        !read_number(p, size, &pos, 65535, &h->maxval))
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "PNM: bad or truncated header (width, height, maxval)");
    if (h->width == 0 || h->height == 0 || h->maxval == 0)
        return stk__set_error(err, err_size, STK_EFORMAT, "PNM: bad header %ux%u maxval %u",
                              h->width, h->height, h->maxval);
    if (h->maxval > 255)
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "PNM: 16-bit samples (maxval %u) are not supported", h->maxval);
    if (pos >= size || !is_space(p[pos]))
        return stk__set_error(err, err_size, STK_EFORMAT, "PNM: no whitespace after the header");
    h->data_off = pos + 1;
    h->channels = type == '5' ? 1 : 3;
    return stk__decoder_check_pixels(d, h->width, h->height, err, err_size);
}

stk_status stk__pnm_probe(stk__decoder *d, const uint8_t *src, size_t size, stk__imginfo *out,
                          char *err, size_t err_size)
{
    pnm_header h;
    stk_status rc = pnm_parse(d, src, size, &h, err, err_size);
    if (rc < 0)
        return rc;
    out->format = STK__IMG_PNM;
    out->width = h.width;
    out->height = h.height;
    return STK_OK;
}

stk_status stk__pnm_decode(stk__decoder *d, const uint8_t *src, size_t size,
                           const stk__imginfo *info, uint32_t x, uint32_t y, uint32_t w, uint32_t h,
                           stk__decoded *out, char *err, size_t err_size)
{
    (void)x, (void)y, (void)w, (void)h;
    pnm_header ph;
    size_t stride, n;
    stk_status rc = pnm_parse(d, src, size, &ph, err, err_size);
    if (rc < 0)
        return rc;
    if (ph.width != info->width || ph.height != info->height)
        return stk__set_error(err, err_size, STK_EINVAL, "image is %ux%u, not the probed %ux%u",
                              ph.width, ph.height, info->width, info->height);
    /* width * height <= max_pixels, so the sample count fits after this check */
    if (!stk__mul_ok((size_t)ph.width * ph.height, ph.channels, &n) || n > size - ph.data_off)
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "PNM: truncated samples (%zu of %zu bytes)", size - ph.data_off, n);
    rc = stk__decoder_reserve_rgb(d, ph.width, ph.height, &stride, err, err_size);
    if (rc < 0)
        return rc;
    uint8_t lut[256];
    for (uint32_t v = 0; v < 256; v++) /* PIL: round(v / maxval * 255), ties to even */
        lut[v] = v > ph.maxval ? 0 : (uint8_t)nearbyint((double)v / ph.maxval * 255.0);
    const uint8_t *in = src + ph.data_off;
    uint8_t *o = d->pix;
    for (size_t i = 0; i < n; i++) {
        if (in[i] > ph.maxval)
            return stk__set_error(err, err_size, STK_EFORMAT,
                                  "PNM: sample %u above maxval %u (byte %zu)", in[i], ph.maxval,
                                  ph.data_off + i);
        if (ph.channels == 3) {
            o[i] = lut[in[i]];
        } else {
            o[3 * i] = o[3 * i + 1] = o[3 * i + 2] = lut[in[i]];
        }
    }
    stk__decoded_whole(d, ph.width, ph.height, out);
    return STK_OK;
}
