/*
 * fuzz_audio.c: libFuzzer target for the audio decoders (src/decode/stk_audio_dec.c and the
 * codecs behind it: libsndfile for WAV, FLAC, Ogg Vorbis/Opus, AIFF; libmpg123 for MP3,
 * dispatched on the bytes; the corpus has each): stk__audio_open, then stk__audio_decode of a
 * window (strict: the whole stream is read and checked; lenient and trusted: the window alone,
 * after a seek) chosen from a hash of the input's last bytes, into one plane or one per channel.
 * Every decoded sample is read so that ASan sees a plane shorter than claimed. One decoder serves
 * every input, as a worker's does.
 * Run: make fuzz && build/fuzz/fuzz_audio -max_total_time=180 -rss_limit_mb=2048 CORPUS_COPY
 */
#include "decode/stk_audio_decode.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *__lsan_default_suppressions(void);

/* libsndfile 1.2.0 leaks libvorbis's vorbis_info (5.7 KB) when it refuses some damaged Ogg
 * Vorbis streams: not stoker's to fix (stk_audio_dec.c keeps streams whose header pages fail
 * their CRC away from it); suppressed here so that a leak of our own still fails the run. */
const char *__lsan_default_suppressions(void)
{
    return "leak:vorbis_info_init\n";
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static stk__audiodec *d; /* one decoder for every input, as in a worker */
    if (!d && stk__audiodec_create(&d) < 0)
        return 0;
    uint32_t h = 2166136261u;
    for (size_t i = size > 8 ? size - 8 : 0; i < size; i++)
        h = (h ^ data[i]) * 16777619u;
    stk__audiodec_set_lenient(d, h & 1);
    stk__audiodec_set_trusted(d, h & 2);
    char err[STK_ERRMSG_SIZE];
    stk__audinfo info;
    if (stk__audio_open(d, data, size, &info, err, sizeof(err)) < 0)
        return 0;
    /* a window of at most 1 s, somewhere in the stream (the header's length may be a lie) */
    int64_t n = info.frames < 48000 ? info.frames : 48000;
    int64_t first = (int64_t)((h >> 8) % (uint64_t)(info.frames - n + 1));
    uint32_t planes = (h & 4) ? 1 : info.channels;
    float *buf = malloc(sizeof(float) * (size_t)n * planes + 1), *p[STK__AUD_MAX_CHANNELS];
    if (!buf)
        return 0;
    for (uint32_t c = 0; c < planes; c++)
        p[c] = buf + (size_t)c * (size_t)n;
    if (stk__audio_decode(d, first, n, p, planes, err, sizeof(err)) == STK_OK) {
        float sum = 0.0f;
        for (size_t i = 0; i < (size_t)n * planes; i++)
            sum += buf[i];
        volatile float sink = sum;
        (void)sink;
    }
    free(buf);
    return 0;
}
