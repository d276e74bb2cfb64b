/*
 * fuzz_jpeg.c: libFuzzer target for the image decoders (src/decode: JPEG, PNG, WebP, TIFF, BMP,
 * PPM/PGM, dispatched by stk__image_probe's sniffing; the corpus has each), strict or lenient
 * (from the tail hash): stk__image_probe, then
 * stk__image_decode of the full image, a window at full scale, the full image at 1/8, and a
 * window with a minimum size (also through stk__image_decode_fast), all chosen from a hash of the
 * input's last bytes (the data after EOI/IEND, which mutations can change without breaking the
 * image). Every decoded pixel is read so that ASan sees a buffer smaller than claimed, and the
 * mapping invariants of stk_decode.h (the buffer covers the window) are checked. One decoder serves
 * every input, as a worker's does, so a decoder left broken by a bad input shows up on the next
 * one. A second decoder with libjpeg's own entropy decoder (stk__decoder_set_own_entropy false)
 * decodes every window too, and must give the same status, message and pixels as the first, which
 * uses stoker's (src/decode/stk_jpeg_huff.c: on any stream, its result is libjpeg's); a trusted
 * decode of the window (what later epochs do) is compared the same way.
 *
 * max_pixels is 4 Mpx so that the fuzzer stays within -rss_limit_mb=2048.
 * Run: make fuzz && build/fuzz/fuzz_jpeg -max_total_time=180 -rss_limit_mb=2048 CORPUS_COPY
 */
#include "decode/stk_codec.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint32_t tail_hash(const uint8_t *data, size_t size)
{
    uint32_t h = 2166136261u;
    for (size_t i = size > 8 ? size - 8 : 0; i < size; i++)
        h = (h ^ data[i]) * 16777619u;
    return h;
}

/* Decode one window with d, read every pixel, check the buffer covers the window; the pixels'
 * checksum into *sum. Returns the status (the message in err). */
static stk_status decode_one(stk__decoder *d, const uint8_t *data, size_t size,
                             const stk__imginfo *info, uint32_t x, uint32_t y, uint32_t w,
                             uint32_t h, uint32_t min_w, uint32_t min_h, bool fast, char *err,
                             uint64_t *sum)
{
    stk__decoded out;
    *sum = 0;
    stk_status rc = (fast ? stk__image_decode_fast : stk__image_decode)(
        d, data, size, info, x, y, w, h, min_w, min_h, &out, err, STK_ERRMSG_SIZE);
    if (rc < 0)
        return rc;
    if (out.origin_x > x || out.origin_y > y || out.origin_x + out.width * out.scale_x < x + w ||
        out.origin_y + out.height * out.scale_y < y + h || out.stride < (size_t)out.width * 3)
        __builtin_trap();
    uint64_t s = 0;
    for (uint32_t v = 0; v < out.height; v++)
        for (size_t i = 0; i < (size_t)out.width * 3; i++)
            s = s * 31 + out.rgb[v * out.stride + i];
    *sum = s;
    return rc;
}

/* Decode one window with both decoders (stoker's entropy decoder, libjpeg's): the same status,
 * message, pixels and checked flag, or a trap. */
static void decode_window(stk__decoder *d, stk__decoder *ref, const uint8_t *data, size_t size,
                          const stk__imginfo *info, uint32_t x, uint32_t y, uint32_t w, uint32_t h,
                          uint32_t min_w, uint32_t min_h, bool fast)
{
    char e1[STK_ERRMSG_SIZE] = "", e2[STK_ERRMSG_SIZE] = "";
    uint64_t s1, s2;
    stk_status r1 = decode_one(d, data, size, info, x, y, w, h, min_w, min_h, fast, e1, &s1);
    bool c1 = stk__decoder_checked(d);
    stk_status r2 = decode_one(ref, data, size, info, x, y, w, h, min_w, min_h, fast, e2, &s2);
    if (r1 != r2 || s1 != s2 || c1 != stk__decoder_checked(ref) || (r1 < 0 && strcmp(e1, e2)))
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static stk__decoder *d, *ref; /* one decoder for every input, as in a worker */
    if (!d && (stk__decoder_create(4000000, &d) < 0 || stk__decoder_create(4000000, &ref) < 0))
        return 0;
    stk__decoder_set_own_entropy(ref, false);
    char err[STK_ERRMSG_SIZE];
    stk__imginfo info, info2;
    /* Both decoders read every header: libjpeg keeps the tables a header defines for the images
     * after it (abbreviated streams), so both must have seen the same ones. */
    stk_status rc = stk__image_probe(d, data, size, &info, err, sizeof(err));
    if (stk__image_probe(ref, data, size, &info2, err, sizeof(err)) != rc)
        __builtin_trap();
    if (rc < 0 || !info.width || !info.height)
        return 0;
    uint32_t W = info.width, H = info.height, s = tail_hash(data, size);
    stk__decoder_set_lenient(d, (s >> 31) != 0);
    stk__decoder_set_lenient(ref, (s >> 31) != 0);

    decode_window(d, ref, data, size, &info, 0, 0, W, H, W, H, false); /* full */
    uint32_t w = 1 + s % W, h = 1 + (s >> 8) % H; /* centred window, full scale */
    decode_window(d, ref, data, size, &info, (W - w) / 2, (H - h) / 2, w, h, w, h, false);
    decode_window(d, ref, data, size, &info, 0, 0, W, H, 0, 0, false); /* 1/8 */
    uint32_t x = (s >> 16) % (W - w + 1), y = (s >> 20) % (H - h + 1);
    uint32_t min_w = (s >> 24) % (w + 1), min_h = (s >> 28) % (h + 1);
    decode_window(d, ref, data, size, &info, x, y, w, h, min_w, min_h, false);
    /* the same window with the fast IDCT and plain upsampling (the default mode's decode) */
    decode_window(d, ref, data, size, &info, x, y, w, h, min_w, min_h, true);
    /* and trusted, as in later epochs (the pixels and verdicts of both still the same) */
    stk__decoder_set_trusted(d, true);
    stk__decoder_set_trusted(ref, true);
    decode_window(d, ref, data, size, &info, x, y, w, h, min_w, min_h, true);
    stk__decoder_set_trusted(d, false);
    stk__decoder_set_trusted(ref, false);
    return 0;
}
