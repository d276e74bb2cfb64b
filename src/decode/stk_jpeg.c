/*
 * stk_jpeg.c: JPEG decoding through the libjpeg API of libjpeg-turbo (with stk_jpeg_huff.c, the
 * only files that include jpeglib.h).
 *
 * Entropy decoding: after jpeg_start_decompress, stk_jpeg_huff.c's decoder takes over the
 * Huffman decoding of single-scan sequential JPEGs (issue 29). When it gives up on a stream (not
 * clean: corrupt, truncated, unusual), it longjmps here with STK__JHUFF_GAVE_UP and the image is
 * decoded again from the start by libjpeg alone (decode_entry), whose pixels and verdict are the
 * answer; stk_jpeg_huff.c says why a clean stream gives libjpeg's pixels and verdict too.
 *
 * Design: one jpeg_decompress_struct per stk__decoder, created once and reset with
 * jpeg_abort_decompress between images, reading from memory (jpeg_mem_src). A window is decoded
 * at scale num/8 = 1/den (DCT-domain scaling; the library uses den 1, 2, 4, 8, which have SIMD
 * IDCTs in libjpeg-turbo 2.1; any num in 1..8 works, for bench/decode_speed.c's comparison),
 * restricted to the iMCU columns that cover it (jpeg_crop_scanline) and to its rows
 * (jpeg_skip_scanlines, then reading stops after the last row it needs).
 *
 * Geometry: libjpeg's image at 1/den is ceil(W/den) x ceil(H/den), and scaled pixel u covers
 * full-resolution pixels [u*den, (u+1)*den), because every 8x8 block becomes an (8/den)^2 block.
 * The window [x, x+w) becomes scaled columns [floor(x/den), ceil((x+w)/den)), and likewise for
 * rows; the buffer is exactly those, so buffer pixel (u, v) covers full resolution
 * origin + (u, v) * den with origin = (floor(x/den), floor(y/den)) * den. jpeg_crop_scanline
 * widens the decoded columns to iMCU boundaries; the extra columns stay in the row stride.
 *
 * Fast mode (stk__image_decode_fast, the transform's default where it resamples): JDCT_IFAST
 * and do_fancy_upsampling = FALSE (chroma replicated; for h2v1/h2v2 libjpeg then merges the
 * upsampling into the colour conversion). Same windows and map, without the crop margin below
 * (replicated chroma needs no neighbour); the buffer equals TurboJPEG's TJFLAG_FASTDCT |
 * TJFLAG_FASTUPSAMPLE decode (tested like the exact mode).
 *
 * Planes mode (stk__jpeg_decode_planes, the transform's default for YCbCr JPEGs; issue 15): the
 * fast mode with JCS_YCbCr output, whose colour deconverter (null_convert: interleaving) is
 * replaced after jpeg_start_decompress by ycc_rows, which copies the window's rows into planes:
 * luma whole, chroma at its own resolution (every other sample of each row, every other row,
 * where plain upsampling replicated them; at 1/2 .. 1/8 libjpeg-turbo often enlarges the
 * chroma IDCT instead and there is nothing to drop). Crop, skip and the strict read to the end
 * work as in the fast mode; jpeg_skip_scanlines swaps in its own no-op converter while it
 * discards rows and restores ours. The planes equal TurboJPEG's raw YUV decode with
 * TJFLAG_FASTDCT at full scale (test_decode's test_planes).
 *
 * Exactness: the buffer equals the same region of libjpeg's own full decode at that scale. At
 * den 1, 4:2:x chroma is upsampled with the "fancy" triangle filter, which reads the chroma
 * sample on each side; at a crop edge libjpeg replicates its last sample instead. So the crop
 * takes one extra column on each side of the window (costing a whole extra iMCU on the left only
 * when the window starts exactly on an iMCU boundary), and the buffer reported is the window's
 * columns alone, without those margins. Rows need nothing: jpeg_skip_scanlines and libjpeg's
 * context-row buffering produce the rows a full decode would (test_decode.c checks all this
 * against TurboJPEG's own decodes for every subsampling). Where 2.1's crop itself is wrong
 * (crop_is_exact), whole rows are decoded instead.
 *
 * Errors: error_exit longjmps back to the entry point with libjpeg's text ("JPEG: Premature end
 * of JPEG file"). Strict mode (the default; issue 16): every warning about the data is fatal too
 * ("bad Huffman code", "premature end of data segment", bogus progression...); only the two
 * about metadata (JWRN_JFIF_MAJOR, JWRN_ADOBE_XFORM) and JWRN_EXTRANEOUS_DATA (bytes skipped
 * before a marker: on_emit_message) stay warnings. libjpeg recovers from corrupt entropy-coded
 * data by filling grey or smeared blocks; PIL ignores the warnings but fails on the errors that
 * follow them (a marker in the middle of the data, data past EOI, a truncated image), and a
 * corrupt run almost always raises one of these warnings first, so strict rejects a superset of
 * what PIL rejects (python/tests/test_strict_decode.py counts both). Strict also reads the
 * entropy-coded data through EOI when the window ends above the last row: whole iMCU rows below
 * it are skipped with jpeg_skip_scanlines (entropy decoding only, no IDCT), the few rows around
 * them are read into scratch (read_to_end), then jpeg_finish_decompress; corruption below the
 * window is then caught as in a full decode. That is needed once per image: a trusted decode (the
 * image read clean through EOI before, stk__decoder_set_trusted) stops after the window with
 * every warning still fatal. Lenient mode ignores warnings (libjpeg's
 * recovery), except JWRN_JPEG_EOF: a truncated image always fails, as it does in PIL ("image file
 * is truncated"), and stops reading after the window. A progress monitor caps progressive images at
 * 500 scans (TJFLAG_LIMITSCANS in libjpeg-turbo 2.1), against scan-count decompression bombs.
 *
 * Colour: YCbCr, RGB and grayscale come out as JCS_EXT_RGB (gray replicated). CMYK and YCCK are
 * decoded as JCS_CMYK and converted as PIL does: PIL reads every 4-component JPEG as inverted
 * (Adobe) CMYK, then Image.convert('RGB') computes R = nk - nk*C/255 with nk = 255 - K.
 *
 * Speed (bench/decode_speed.c, one thread, 64 photo-like 500x375-class JPEGs of 52 KB from
 * bench/gen_images.py --profile small, libjpeg-turbo 2.1.5, this project's 2-core machine):
 *   full decode: tjDecompress2 1,525 img/s, this libjpeg-API path 1,515 (the same library calls;
 *     the difference is noise), so there is one path, which crop and skip need anyway;
 *   JDCT_IFAST (TJFLAG_FASTDCT) 1,566 img/s, +2.7%, but 45.3 dB PSNR against ISLOW, which is
 *     PIL's decode bit for bit: ISLOW and fancy upsampling (PIL's) in the exact mode;
 *   70% x 70% window at 1/1 2,070, 1/2 2,330, 1/4 2,490, 1/8 2,790; whole image at 1/8 2,280;
 *   RandomResizedCrop(224) windows at the scale the den rule picks 2,120; header parse ~0.6 us.
 *   Same windows, later sessions (load noise of a shared machine: compare within one run):
 *   exact 2,005-2,048, fast 2,120-2,162 (+3.5-8%); at the smallest M/8 >= the output (7/8,
 *   6/8, 5/8 are common: fewer pixels, but C IDCTs, and 4:2:0 chroma at 2M x 2M) 1,541-1,605,
 *   fast 1,640-1,646: slower. The fast decode is 35.4 dB from ISLOW + fancy upsampling (45.3
 *   dB for the IDCT alone: the replicated chroma is most of the difference).
 */
#include "stk_codec.h"
#include "stk_jpeg_huff.h"

#include <setjmp.h>
#include <stddef.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>
/* jpegint.h: the colour deconverter's method table, whose color_convert the planes mode replaces
 * (its layout has been the same since libjpeg 6b; libjpeg-turbo installs the header) */
#include <jpegint.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define MAX_SCANS 500

/* The planes mode's colour-conversion hook (ycc_rows): where the window's rows go. */
typedef struct ycc_sink {
    bool active;          /* only while the window's rows are read */
    const JSAMPROW *base; /* the row array handed to jpeg_read_scanlines: row r is base + r */
    uint32_t rows;        /* window rows */
    uint32_t ys;          /* the window's first row in the scaled image */
    uint32_t width;       /* luma bytes a row (the cropped width) */
    uint32_t cwidth;      /* chroma samples a row */
    uint32_t fx, fy;      /* chroma subsampling left in libjpeg's upsampled rows (1 or 2) */
    uint8_t *plane[3];
    size_t stride[3];
} ycc_sink;

struct stk__jpeg {
    struct jpeg_decompress_struct cinfo;
    ycc_sink ycc;
    struct jpeg_error_mgr jerr;
    struct jpeg_progress_mgr progress;
    jmp_buf jump;
    stk__jhuff *huff; /* stoker's entropy decoder (stk_jpeg_huff.c), state and table cache */
    bool own_huff;    /* install it in this decode (cleared when it gave up on the image) */
    bool lenient;     /* the decoder's mode, copied at each entry point */
    char msg[JMSG_LENGTH_MAX];
};

static stk__jpeg *from_cinfo(j_common_ptr c)
{
    return (stk__jpeg *)((char *)c - offsetof(stk__jpeg, cinfo));
}

/* libjpeg's fatal-error hook: keep the text and return to the entry point's setjmp. */
static void on_error_exit(j_common_ptr c)
{
    stk__jpeg *j = from_cinfo(c);
    c->err->format_message(c, j->msg);
    longjmp(j->jump, 1);
}

/* Warnings (level < 0) and trace messages: a premature end of data is always fatal, and in
 * strict mode so is every warning about the data except JWRN_EXTRANEOUS_DATA ("N extraneous
 * bytes before marker"): libjpeg skips bytes it finds between the end of a segment and the next
 * marker and decodes the image exactly as without them; PIL accepts such files and real ImageNet
 * files have them (the decision and its price: docs/images.md "Strict decoding"). */
static void on_emit_message(j_common_ptr c, int level)
{
    if (level >= 0)
        return;
    int code = c->err->msg_code;
    if (code == JWRN_JPEG_EOF || (!from_cinfo(c)->lenient && code != JWRN_JFIF_MAJOR &&
                                  code != JWRN_ADOBE_XFORM && code != JWRN_EXTRANEOUS_DATA))
        on_error_exit(c);
    c->err->num_warnings++;
}

/* The library never prints. */
static void on_output_message(j_common_ptr c)
{
    (void)c;
}

/* Called once per iMCU row (and per marker segment) while scans are absorbed. */
static void on_progress(j_common_ptr c)
{
    j_decompress_ptr cinfo = (j_decompress_ptr)c;
    if (cinfo->input_scan_number > MAX_SCANS) {
        stk__jpeg *j = from_cinfo(c);
        snprintf(j->msg, sizeof(j->msg), "Progressive JPEG image has more than %d scans",
                 MAX_SCANS);
        longjmp(j->jump, 1);
    }
}

stk_status stk__jpeg_create(stk__jpeg **out)
{
    stk__jpeg *j = stk__calloc(1, sizeof(*j));
    if (!j)
        return STK_ENOMEM;
    j->cinfo.err = jpeg_std_error(&j->jerr);
    j->jerr.error_exit = on_error_exit;
    j->jerr.emit_message = on_emit_message;
    j->jerr.output_message = on_output_message;
    if (stk__jhuff_create(&j->huff) < 0) {
        stk__free(j);
        return STK_ENOMEM;
    }
    if (setjmp(j->jump)) { /* jpeg_create_decompress only fails when out of memory */
        jpeg_destroy_decompress(&j->cinfo);
        stk__jhuff_destroy(j->huff);
        stk__free(j);
        return STK_ENOMEM;
    }
    jpeg_create_decompress(&j->cinfo);
    j->progress.progress_monitor = on_progress;
    j->cinfo.progress = &j->progress;
    *out = j;
    return STK_OK;
}

void stk__jpeg_destroy(stk__jpeg *j)
{
    if (!j)
        return;
    jpeg_destroy_decompress(&j->cinfo);
    stk__jhuff_destroy(j->huff);
    stk__free(j);
}

/* After a longjmp: reset libjpeg and turn its message into a status. */
static stk_status jpeg_failed(stk__jpeg *j, char *err, size_t err_size)
{
    int code = j->jerr.msg_code;
    jpeg_abort_decompress(&j->cinfo);
    if (code == JERR_OUT_OF_MEMORY)
        return stk__set_error(err, err_size, STK_ENOMEM, "JPEG: %s", j->msg);
    return stk__set_error(err, err_size, STK_EFORMAT, "JPEG: %s", j->msg);
}

/* Start on a new image: read its header (about 1 us; not worth caching between probe and
 * decode). May longjmp. */
static void read_header(stk__jpeg *j, const uint8_t *src, size_t size)
{
    jpeg_mem_src(&j->cinfo, src, (unsigned long)size);
    jpeg_read_header(&j->cinfo, TRUE);
}

/* The checks every header must pass; the reason goes to err. */
static stk_status check_header(stk__decoder *d, char *err, size_t err_size)
{
    const struct jpeg_decompress_struct *c = &d->jpeg->cinfo;
    switch (c->jpeg_color_space) {
    case JCS_GRAYSCALE:
    case JCS_YCbCr:
    case JCS_RGB:
    case JCS_CMYK:
    case JCS_YCCK:
        break;
    default:
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "JPEG: unsupported color space (%d components)", c->num_components);
    }
    return stk__decoder_check_pixels(d, c->image_width, c->image_height, err, err_size);
}

/* Body of stk__jpeg_probe, under its setjmp. */
static stk_status probe_body(stk__decoder *d, const uint8_t *src, size_t size, stk__imginfo *out,
                             char *err, size_t err_size)
{
    stk__jpeg *j = d->jpeg;
    read_header(j, src, size);
    stk_status rc = check_header(d, err, err_size);
    out->format = STK__IMG_JPEG;
    out->width = j->cinfo.image_width;
    out->height = j->cinfo.image_height;
    jpeg_abort_decompress(&j->cinfo);
    return rc;
}

stk_status stk__jpeg_probe(stk__decoder *d, const uint8_t *src, size_t size, stk__imginfo *out,
                           char *err, size_t err_size)
{
    d->jpeg->lenient = d->lenient;
    if (setjmp(d->jpeg->jump))
        return jpeg_failed(d->jpeg, err, err_size);
    return probe_body(d, src, size, out, err, err_size);
}

static inline uint8_t muldiv255(unsigned a, unsigned b)
{
    unsigned t = a * b + 128;
    return (uint8_t)(((t >> 8) + t) >> 8);
}

/* One row of libjpeg CMYK (Adobe-inverted) to RGB, exactly as PIL's CMYK;I + convert('RGB'). */
static void cmyk_row_to_rgb(const uint8_t *in, uint8_t *out, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++, in += 4, out += 3) {
        unsigned nk = in[3]; /* 255 - K, K = 255 - raw */
        out[0] = (uint8_t)(nk - muldiv255(255u - in[0], nk));
        out[1] = (uint8_t)(nk - muldiv255(255u - in[1], nk));
        out[2] = (uint8_t)(nk - muldiv255(255u - in[2], nk));
    }
}

/* Whether jpeg_crop_scanline gives exact pixels for this image at this scale. libjpeg-turbo 2.1
 * sets each component's downsampled_width to output_width * h_samp / max_h_samp, ignoring that
 * with DCT scaling a chroma component may get a larger IDCT (DCT_scaled_size above the minimum)
 * that takes over part of its upsampling. The fancy upsamplers that still run then use a wrong
 * width: garbage for h4v2 or h2v4 luma over 1x1 chroma at 1/2 and 1/4 (later libjpeg-turbo
 * versions include DCT_scaled_size in that formula). So crop only when every component has the
 * minimum scaled size or needs no upsampling at all; otherwise decode whole rows. */
static bool crop_is_exact(const struct jpeg_decompress_struct *c)
{
    int min = c->min_DCT_scaled_size;
    for (int i = 0; i < c->num_components; i++) {
        const jpeg_component_info *ci = &c->comp_info[i];
        if (ci->DCT_scaled_size != min &&
            (ci->h_samp_factor * ci->DCT_scaled_size != c->max_h_samp_factor * min ||
             ci->v_samp_factor * ci->DCT_scaled_size != c->max_v_samp_factor * min))
            return false;
    }
    return true;
}

/* Strict mode, after the window's rows: run the entropy decoder over the rest of the data (the
 * header comment says why). Rows are read into scratch (aux; free again by now) up to an iMCU
 * row boundary, whole iMCU rows are skipped (jpeg_skip_scanlines: Huffman decoding only, no
 * IDCT) up to the last iMCU row, and its rows are read. Only whole-iMCU skips are safe here: in
 * libjpeg-turbo 2.1 a skip that starts inside an iMCU row after rows were read misplaces the
 * entropy decoder with the merged upsampler (fast mode, 4:2:x: "premature end of data segment"
 * on a clean file), and never returns for the samplings crop_is_exact rejects, which read every
 * row instead. A skip to the very end would not read the data at all. May longjmp. */
static stk_status read_to_end(struct jpeg_decompress_struct *c, stk__decoder *d, size_t in_row,
                              char *err, size_t err_size)
{
    stk_status rc = stk__decoder_reserve(&d->aux, &d->aux_cap, in_row, err, err_size);
    if (rc < 0)
        return rc;
    JSAMPROW row = d->aux;
    uint32_t per = (uint32_t)(c->min_DCT_scaled_size * c->max_v_samp_factor); /* rows an iMCU */
    bool skip = crop_is_exact(c) && per > 0;
    while (c->output_scanline < c->output_height) {
        uint32_t left = c->output_height - c->output_scanline;
        if (skip && c->output_scanline % per == 0 && left > per) {
            uint32_t whole = (left - 1) / per * per; /* keeps the last iMCU row to read */
            if (jpeg_skip_scanlines(c, whole) != whole)
                return stk__set_error(err, err_size, STK_EFORMAT, "JPEG: could not skip rows");
            skip = false;
            continue;
        }
        if (jpeg_read_scanlines(c, &row, 1) != 1)
            return stk__set_error(err, err_size, STK_EFORMAT, "JPEG: no scanline returned");
    }
    return STK_OK;
}

/* dst[i] = src[i * 2] for i < n (one chroma sample of each replicated pair). */
static void take_even(uint8_t *restrict dst, const uint8_t *restrict src, uint32_t n)
{
    uint32_t i = 0;
#if defined(__SSE2__)
    const __m128i lo = _mm_set1_epi16(0xFF);
    for (; i + 17 <= n; i += 16) { /* reads src[2i .. 2i + 31], below src[2n - 2] */
        __m128i a = _mm_and_si128(_mm_loadu_si128((const __m128i *)(src + 2 * i)), lo);
        __m128i b = _mm_and_si128(_mm_loadu_si128((const __m128i *)(src + 2 * i + 16)), lo);
        _mm_storeu_si128((__m128i *)(dst + i), _mm_packus_epi16(a, b));
    }
#endif
    for (; i < n; i++)
        dst[i] = src[2 * i];
}

/* The colour "conversion" of the planes mode (stk__jpeg_decode_planes): instead of interleaving
 * libjpeg's upsampled Y, Cb, Cr rows, keep the window's rows as planes, luma whole and chroma at
 * its own resolution (every fx-th sample of every fy-th row: libjpeg's plain upsampling only
 * replicated them). Rows are told apart by where jpeg_read_scanlines was asked to put them; the
 * rows read outside the window (read_to_end, jpeg_skip_scanlines' discards) are ignored. */
static void ycc_rows(j_decompress_ptr c, JSAMPIMAGE in, JDIMENSION in_row, JSAMPARRAY out,
                     int num_rows)
{
    ycc_sink *y = &from_cinfo((j_common_ptr)c)->ycc;
    uintptr_t o = (uintptr_t)out, b = (uintptr_t)y->base;
    if (!y->active || o < b || (o - b) % sizeof(JSAMPROW) != 0)
        return;
    uint64_t r0 = (o - b) / sizeof(JSAMPROW);
    for (int k = 0; k < num_rows && r0 + (uint64_t)k < y->rows; k++) {
        uint32_t r = (uint32_t)r0 + (uint32_t)k, a = y->ys + r; /* window row, image row */
        memcpy(y->plane[0] + (size_t)r * y->stride[0], in[0][in_row + (JDIMENSION)k], y->width);
        if (a % y->fy != 0 && r != 0)
            continue; /* the replica of the chroma row above */
        size_t cr = a / y->fy - y->ys / y->fy;
        for (int ci = 1; ci < 3; ci++) {
            uint8_t *dst = y->plane[ci] + cr * y->stride[ci];
            const uint8_t *row = in[ci][in_row + (JDIMENSION)k];
            if (y->fx == 2)
                take_even(dst, row, y->cwidth);
            else
                memcpy(dst, row, y->cwidth);
        }
    }
}

/* Whether the planes mode applies to this header: 3-component YCbCr, luma at the largest sampling
 * factors (1 or 2 each way), both chroma components at 1x1. */
static bool planes_header_ok(const struct jpeg_decompress_struct *c)
{
    if (c->jpeg_color_space != JCS_YCbCr || c->num_components != 3)
        return false;
    const jpeg_component_info *ci = c->comp_info;
    return ci[0].h_samp_factor <= 2 && ci[0].v_samp_factor <= 2 &&
           ci[0].h_samp_factor == c->max_h_samp_factor &&
           ci[0].v_samp_factor == c->max_v_samp_factor && ci[1].h_samp_factor == 1 &&
           ci[1].v_samp_factor == 1 && ci[2].h_samp_factor == 1 && ci[2].v_samp_factor == 1;
}

/* The upsampling factor libjpeg applies to component ci on one axis, after its DCT scaling
 * (which may already have enlarged chroma): 0 when it is not 1 or 2. */
static uint32_t expand(const struct jpeg_decompress_struct *c, int ci, bool vertical)
{
    const jpeg_component_info *p = &c->comp_info[ci];
    int num = (vertical ? c->max_v_samp_factor : c->max_h_samp_factor) * c->min_DCT_scaled_size;
    int den = (vertical ? p->v_samp_factor : p->h_samp_factor) * p->DCT_scaled_size;
    if (den <= 0 || num % den != 0 || (num / den != 1 && num / den != 2))
        return 0;
    return (uint32_t)(num / den);
}

/* Body of stk__jpeg_decode, under its setjmp: libjpeg errors longjmp out of it. With `planes`
 * (fast mode only), the window comes out as Y, Cb, Cr planes, or STK__NOT_PLANAR when this JPEG
 * cannot (then nothing was decoded). */
static stk_status decode_body(stk__decoder *d, const uint8_t *src, size_t size,
                              const stk__imginfo *info, uint32_t x, uint32_t y, uint32_t w,
                              uint32_t h, uint32_t num, bool fast, stk__decoded *out,
                              stk__decoded *planes, char *err, size_t err_size)
{
    stk__jpeg *j = d->jpeg;
    struct jpeg_decompress_struct *c = &j->cinfo;
    stk_status rc = STK_OK;

    read_header(j, src, size);
    STK_TRY(check_header(d, err, err_size));
    if (c->image_width != info->width || c->image_height != info->height)
        STK_FAIL_SIZED(err, err_size, STK_EINVAL, "image is %ux%u, not the probed %ux%u",
                       c->image_width, c->image_height, info->width, info->height);

    if (planes && (!fast || !planes_header_ok(c))) {
        jpeg_abort_decompress(c);
        return STK__NOT_PLANAR;
    }
    bool cmyk = c->jpeg_color_space == JCS_CMYK || c->jpeg_color_space == JCS_YCCK;
    c->out_color_space = planes ? JCS_YCbCr : cmyk ? JCS_CMYK : JCS_EXT_RGB;
    c->scale_num = num;
    c->scale_denom = 8;
    c->dct_method = fast ? JDCT_IFAST : JDCT_ISLOW;
    c->do_fancy_upsampling = fast ? FALSE : TRUE;
    /* The merged upsampler (fast mode, 4:2:x) needs no colour deconverter and leaves cconvert
     * as it was: pointing into the previous image's freed pool when that image used one, and
     * jpeg_skip_scanlines then writes through it (use after free, fixed in libjpeg-turbo 3.1.2;
     * it crashed here under the alternating exact/fast decodes of one worker). */
    c->cconvert = NULL;
    j->ycc.active = false;
    jpeg_start_decompress(c);
    uint32_t fx = 1, fy = 1;
    if (planes) { /* luma must come out unscaled, chroma at most doubled */
        fx = expand(c, 1, false);
        fy = expand(c, 1, true);
        if (expand(c, 0, false) != 1 || expand(c, 0, true) != 1 || !fx || !fy ||
            expand(c, 2, false) != fx || expand(c, 2, true) != fy || !c->cconvert) {
            jpeg_abort_decompress(c);
            return STK__NOT_PLANAR;
        }
    }
    if (j->own_huff && d->own_entropy)
        stk__jhuff_install(j->huff, c, src, size, &j->jump);

    /* The window in scaled pixels: [xs, xe) x [ys, ye) */
    uint32_t out_w = c->output_width, out_h = c->output_height;
    uint32_t xs = (uint32_t)((uint64_t)x * num / 8);
    uint32_t xe = STK_MIN(out_w, (uint32_t)((((uint64_t)x + w) * num + 7) / 8));
    uint32_t ys = (uint32_t)((uint64_t)y * num / 8);
    uint32_t ye = STK_MIN(out_h, (uint32_t)((((uint64_t)y + h) * num + 7) / 8));

    /* Crop columns, with one column of margin each side for the fancy upsampler (header
     * comment); plain upsampling replicates chroma and needs none */
    uint32_t margin = fast ? 0 : 1;
    JDIMENSION xoff = xs >= margin ? xs - margin : 0;
    JDIMENSION cw = STK_MIN(out_w, xe + margin) - xoff;
    if (cw < out_w && crop_is_exact(c)) {
        jpeg_crop_scanline(c, &xoff, &cw);
    } else {
        xoff = 0;
        cw = out_w;
    }
    if (ys > 0 && jpeg_skip_scanlines(c, ys) != ys)
        STK_FAIL_SIZED(err, err_size, STK_EFORMAT, "JPEG: could not skip to row %u", ys);

    uint32_t rows = ye - ys;
    size_t stride, total, in_row = (size_t)c->output_width * (size_t)c->output_components;
    /* Planes mode: Y rows x cw, then Cb and Cr at their resolution, rows 32-byte aligned */
    uint32_t ccw = (c->output_width + fx - 1) / fx, crows = (ye - 1) / fy - ys / fy + 1;
    size_t ystride = ((size_t)c->output_width + 31) & ~(size_t)31, cstride = (ccw + 31) & ~31u;
    size_t ysize = 0, csize = 0;
    if (!stk__mul_ok(c->output_width, 3, &stride) || !stk__mul_ok(stride, rows, &total) ||
        !stk__mul_ok(ystride, rows, &ysize) || !stk__mul_ok(cstride, crows, &csize))
        STK_FAIL_SIZED(err, err_size, STK_ELIMIT, "JPEG: window too large");
    if (planes)
        total = ysize + 2 * csize;
    STK_TRY(stk__decoder_reserve(&d->pix, &d->pix_cap, total, err, err_size));

    if (!cmyk) {
        size_t ptr_size;
        if (!stk__mul_ok(rows, sizeof(JSAMPROW), &ptr_size) || ptr_size > SIZE_MAX - in_row)
            STK_FAIL_SIZED(err, err_size, STK_ELIMIT, "JPEG: window too large");
        STK_TRY(stk__decoder_reserve(&d->aux, &d->aux_cap, ptr_size + (planes ? in_row : 0), err,
                                     err_size));
        JSAMPROW *ptr = (JSAMPROW *)(void *)d->aux;
        for (uint32_t r = 0; r < rows; r++) /* planes: the hook writes the planes instead */
            ptr[r] = planes ? d->aux + ptr_size : d->pix + (size_t)r * stride;
        if (planes) {
            j->ycc = (ycc_sink){.active = true,
                                .base = ptr,
                                .rows = rows,
                                .ys = ys,
                                .width = c->output_width,
                                .cwidth = ccw,
                                .fx = fx,
                                .fy = fy,
                                .plane = {d->pix, d->pix + ysize, d->pix + ysize + csize},
                                .stride = {ystride, cstride, cstride}};
            c->cconvert->color_convert = ycc_rows;
        }
        for (uint32_t done = 0, n; done < rows; done += n) {
            n = jpeg_read_scanlines(c, ptr + done, rows - done);
            if (n == 0) /* only a suspending source returns 0; never jpeg_mem_src */
                STK_FAIL_SIZED(err, err_size, STK_EFORMAT, "JPEG: no scanline returned");
        }
        j->ycc.active = false;
    } else {
        STK_TRY(stk__decoder_reserve(&d->aux, &d->aux_cap, in_row, err, err_size));
        for (uint32_t r = 0; r < rows; r++) {
            JSAMPROW row = d->aux;
            if (jpeg_read_scanlines(c, &row, 1) != 1)
                STK_FAIL_SIZED(err, err_size, STK_EFORMAT, "JPEG: no scanline returned");
            cmyk_row_to_rgb(d->aux, d->pix + (size_t)r * stride, c->output_width);
        }
    }

    if (!d->lenient && !d->trusted && c->output_scanline < c->output_height)
        STK_TRY(read_to_end(c, d, in_row, err, err_size));
    /* All rows read: check the rest of the data through EOI, as a full decode in PIL does */
    if (c->output_scanline == c->output_height) {
        jpeg_finish_decompress(c);
        d->checked = !d->lenient;
    } else {
        jpeg_abort_decompress(c);
    }

    /* Report only the window's columns: the crop margins may differ from a full decode */
    double px = 8.0 / num; /* full-resolution pixels per decoded pixel */
    if (planes) {
        uint32_t cxs = xs / fx, cxe = (xe + fx - 1) / fx, cys = ys / fy;
        for (int ci = 0; ci < 3; ci++) {
            uint32_t f = ci ? fx : 1, g = ci ? fy : 1, x0 = ci ? cxs : xs;
            planes[ci] = (stk__decoded){.rgb = j->ycc.plane[ci] + (x0 - xoff / f),
                                        .width = ci ? cxe - cxs : xe - xs,
                                        .height = ci ? crows : rows,
                                        .stride = j->ycc.stride[ci],
                                        .origin_x = (double)x0 * f * px,
                                        .origin_y = (double)(ci ? cys * fy : ys) * px,
                                        .scale_x = f * px,
                                        .scale_y = g * px};
        }
        return STK_OK;
    }
    out->rgb = d->pix + (size_t)(xs - xoff) * 3;
    out->width = xe - xs;
    out->height = rows;
    out->stride = stride;
    out->scale_x = out->scale_y = px;
    out->origin_x = (double)xs * px;
    out->origin_y = (double)ys * px;
    return STK_OK;

fail:
    j->ycc.active = false;
    jpeg_abort_decompress(c);
    return rc;
}

void stk__jpeg_entropy_counts(const stk__jpeg *j, uint64_t *own, uint64_t *gave_up)
{
    stk__jhuff_counts(j->huff, own, gave_up);
}

/* The entry of both decodes: decode_body under the setjmp that libjpeg's errors and stoker's
 * entropy decoder return to. When that decoder gave up on the image (not a clean stream), the
 * image is decoded again from the start by libjpeg alone, whose pixels and verdict are then
 * the answer (stk_jpeg_huff.c). */
static stk_status decode_entry(stk__decoder *d, const uint8_t *src, size_t size,
                               const stk__imginfo *info, uint32_t x, uint32_t y, uint32_t w,
                               uint32_t h, uint32_t num, bool fast, stk__decoded *out,
                               stk__decoded *planes, char *err, size_t err_size)
{
    stk__jpeg *j = d->jpeg;
    j->lenient = d->lenient;
    j->ycc.active = false;
    j->own_huff = true;
    switch (setjmp(j->jump)) {
    case 0:
        break;
    case STK__JHUFF_GAVE_UP:
        j->ycc.active = false;
        jpeg_abort_decompress(&j->cinfo);
        j->own_huff = false;
        if (setjmp(j->jump)) {
            j->ycc.active = false;
            return jpeg_failed(j, err, err_size);
        }
        break;
    default:
        j->ycc.active = false;
        return jpeg_failed(j, err, err_size);
    }
    return decode_body(d, src, size, info, x, y, w, h, num, fast, out, planes, err, err_size);
}

stk_status stk__jpeg_decode(stk__decoder *d, const uint8_t *src, size_t size,
                            const stk__imginfo *info, uint32_t x, uint32_t y, uint32_t w,
                            uint32_t h, uint32_t num, bool fast, stk__decoded *out, char *err,
                            size_t err_size)
{
    return decode_entry(d, src, size, info, x, y, w, h, num, fast, out, NULL, err, err_size);
}

stk_status stk__jpeg_decode_planes(stk__decoder *d, const uint8_t *src, size_t size,
                                   const stk__imginfo *info, uint32_t x, uint32_t y, uint32_t w,
                                   uint32_t h, uint32_t num, stk__decoded planes[3], char *err,
                                   size_t err_size)
{
    return decode_entry(d, src, size, info, x, y, w, h, num, true, NULL, planes, err, err_size);
}
