/*
 * fuzz_video.c: libFuzzer target for the video decoder (src/decode/stk_avcodec.c: MP4/MOV,
 * Matroska/WebM and AVI through libavformat from memory; H.264, H.265, VP8, VP9, AV1, MPEG-4
 * through libavcodec; RGB through libswscale) and the packed frame index (stk_vframes.c):
 * stk__vdec_open, stk__vdec_index, then stk__vdec_frames of a strided clip chosen from a hash of
 * the input's last bytes (strict or lenient, one thread or two), reading every pixel delivered so
 * that ASan sees a row shorter than claimed; the index packed and unpacked again, and the input
 * itself unpacked as an index. Half the inputs are opened through a reader (stk__vdec_open_reader:
 * the loader's ranged reads), half from memory. One decoder serves every input, as a worker's does.
 * max_pixels is 2^22 (a 2048 x 2048 frame) so that a header declaring a huge picture is refused,
 * not allocated. Run: make fuzz && build/fuzz/fuzz_video -max_total_time=180 -rss_limit_mb=2048
 * CORPUS_COPY
 */
#include "decode/stk_video_decode.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static stk_status sum_frame(void *ctx, uint32_t frame, const uint8_t *rgb, uint32_t width,
                            uint32_t height, size_t stride, char *err, size_t err_size)
{
    (void)frame, (void)err, (void)err_size;
    uint32_t *sum = ctx;
    for (uint32_t y = 0; y < height; y++)
        for (size_t x = 0; x < (size_t)width * 3; x++)
            *sum += rgb[y * stride + x];
    return STK_OK;
}

typedef struct mem_src {
    const uint8_t *p;
} mem_src;

static stk_status mem_read(void *ctx, uint64_t off, void *buf, size_t n, char *err, size_t err_size)
{
    (void)err, (void)err_size;
    memcpy(buf, ((mem_src *)ctx)->p + off, n);
    return STK_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static stk__vdec *dec[4]; /* strict/lenient x one thread/two, each reused as in a worker */
    uint32_t h = 2166136261u;
    for (size_t i = size > 8 ? size - 8 : 0; i < size; i++)
        h = (h ^ data[i]) * 16777619u;
    char err[STK_ERRMSG_SIZE];
    /* the input as a packed index (a damaged cache file) */
    stk__vindex ix;
    int64_t *pts = NULL;
    uint32_t *keys = NULL;
    size_t pcap = 0, kcap = 0;
    if (stk__vindex_unpack(data, size, &ix, &pts, &pcap, &keys, &kcap))
        (void)stk__vindex_seconds(&ix, ix.pts[ix.n_frames - 1]);
    stk__vdec **d = &dec[h & 3];
    if (!*d && stk__vdec_create(1 + ((h >> 1) & 1), 1u << 22, h & 1, d, err, sizeof(err)) < 0)
        goto done;
    mem_src ms = {data};
    stk__bytesrc rd = {size, mem_read, &ms};
    stk_status rc = (h >> 8) & 1 ? stk__vdec_open_reader(*d, &rd, err, sizeof(err))
                                 : stk__vdec_open(*d, data, size, err, sizeof(err));
    if (rc < 0 || stk__vdec_index(*d, &ix, err, sizeof(err)) < 0)
        goto done;
    /* the index round trip */
    size_t need = stk__vindex_pack(&ix, NULL, 0);
    uint8_t *packed = malloc(need);
    if (packed) {
        stk__vindex back;
        stk__vindex_pack(&ix, packed, need);
        if (!stk__vindex_unpack(packed, need, &back, &pts, &pcap, &keys, &kcap))
            abort(); /* an index the decoder built must unpack */
        free(packed);
    }
    /* a clip: up to 8 frames every `step` from `first` */
    uint32_t want[8], n = 0, step = 1 + ((h >> 2) & 3);
    uint32_t first = (h >> 4) % ix.n_frames;
    for (uint32_t f = first; f < ix.n_frames && n < 8; f += step)
        want[n++] = f;
    uint32_t sum = 0;
    (void)stk__vdec_frames(*d, &ix, want, n, sum_frame, &sum, err, sizeof(err));
    volatile uint32_t sink = sum;
    (void)sink;
    stk__vdec_close(*d);
done:
    free(pts);
    free(keys);
    return 0;
}
