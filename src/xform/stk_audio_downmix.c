/*
 * stk_audio_downmix.c: a file's channel layout and FFmpeg's stereo downmix of it (audio.Downmix(2)
 * of more than two channels).
 *
 * torchaudio 0.13 has no downmix of more than two channels but its FFmpeg reader's
 * (torchaudio.io.StreamReader with `aformat=channel_layouts=stereo`, as `ffmpeg -ac 2`), which is
 * libswresample's default matrix for float output (swr_build_matrix: center_mix_level and
 * surround_mix_level -3 dB, lfe_mix_level 0, no normalisation for float): per input channel, the
 * (left, right) coefficients
 *
 *     FL (1, 0)  FR (0, 1)  FC (c, c)  LFE (0, 0)  BL, SL (c, 0)  BR, SR (0, c)
 *     FLC (1, 0)  FRC (0, 1)  BC (c * c, c * c)        c = (float)M_SQRT1_2
 *
 * summed in FFmpeg's channel order (the bits of the mask below) in float, as its rematrix does.
 *
 * The layout (which channel each of a stream's channels is) as FFmpeg's demuxers give it: a WAV's
 * WAVE_FORMAT_EXTENSIBLE mask, or a FLAC file's WAVEFORMATEXTENSIBLE_CHANNEL_MASK Vorbis comment
 * (stk_audio_dec.c reads both), when it names as many channels as the file has; else FLAC's
 * fixed assignments (FLAC format, "Channel assignment"); Ogg Vorbis's and Opus's (mapping family
 * 1, the Vorbis order); anything else, or a WAV without a mask, FFmpeg's default layout for the
 * count (av_channel_layout_default: 2.1, 4.0, 5.0, 5.1, 6.1, 7.1). More than 8 channels, or a
 * mask naming a channel outside the list above (top channels, wide, ...), is refused by name.
 *
 * Threads: pure functions.
 */
#include "xform/stk_audio.h"

#include <inttypes.h>
#include <string.h>

enum { FL, FR, FC, LFE, BL, BR, FLC, FRC, BC, SL, SR, N_KNOWN };

/* Stream order of each format's layouts, 3..8 channels. */
static const uint8_t flac_order[6][8] = {{FL, FR, FC},
                                         {FL, FR, BL, BR},
                                         {FL, FR, FC, BL, BR},
                                         {FL, FR, FC, LFE, BL, BR},
                                         {FL, FR, FC, LFE, BC, SL, SR},
                                         {FL, FR, FC, LFE, BL, BR, SL, SR}};
static const uint8_t vorbis_order[6][8] = {{FL, FC, FR},
                                           {FL, FR, BL, BR},
                                           {FL, FC, FR, BL, BR},
                                           {FL, FC, FR, BL, BR, LFE},
                                           {FL, FC, FR, SL, SR, BC, LFE},
                                           {FL, FC, FR, SL, SR, BL, BR, LFE}};
static const uint8_t default_order[6][8] = {{FL, FR, LFE},
                                            {FL, FR, FC, BC},
                                            {FL, FR, FC, SL, SR},
                                            {FL, FR, FC, LFE, SL, SR},
                                            {FL, FR, FC, LFE, BC, SL, SR},
                                            {FL, FR, FC, LFE, BL, BR, SL, SR}};

static int popcount32(uint32_t x)
{
    int n = 0;
    for (; x; x &= x - 1)
        n++;
    return n;
}

stk_status stk__downmix_stereo(stk__audfmt fmt, uint32_t channels, uint32_t mask, stk__downmix *out,
                               char *err, size_t err_size)
{
    uint8_t id[8];
    if (channels < 3 || channels > 8)
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "%" PRIu32 " channels: audio.Downmix(2) mixes 3 to 8 (FFmpeg's "
                              "layouts up to 7.1); audio.Downmix() averages any number",
                              channels);
    if ((fmt == STK__AUD_WAV || fmt == STK__AUD_FLAC) && mask &&
        popcount32(mask) == (int)channels) {
        uint32_t c = 0;
        for (int bit = 0; bit < 32; bit++) {
            if (!(mask >> bit & 1u))
                continue;
            if (bit >= N_KNOWN)
                return stk__set_error(err, err_size, STK_EFORMAT,
                                      "%s channel mask 0x%" PRIx32 " has channel bit %d (not "
                                      "one of FL FR FC LFE BL BR FLC FRC BC SL SR): "
                                      "audio.Downmix(2) cannot place it; audio.Downmix() "
                                      "averages the channels",
                                      stk__audfmt_name(fmt), mask, bit);
            id[c++] = (uint8_t)bit;
        }
    } else {
        const uint8_t(*t)[8] = fmt == STK__AUD_FLAC                             ? flac_order
                               : fmt == STK__AUD_VORBIS || fmt == STK__AUD_OPUS ? vorbis_order
                                                                                : default_order;
        memcpy(id, t[channels - 3], channels);
    }
    const float c = 0.70710677f; /* (float)M_SQRT1_2: swresample's clev and slev */
    const float cc = (float)((double)c * 0.70710678118654752440);
    float l[N_KNOWN] = {0}, r[N_KNOWN] = {0};
    l[FL] = r[FR] = 1.0f;
    l[FC] = r[FC] = c;
    l[BL] = r[BR] = l[SL] = r[SR] = c;
    l[FLC] = r[FRC] = 1.0f;
    l[BC] = r[BC] = cc;
    int at[N_KNOWN];
    for (int k = 0; k < N_KNOWN; k++)
        at[k] = -1;
    for (uint32_t s = 0; s < channels; s++)
        at[id[s]] = (int)s;
    out->n[0] = out->n[1] = 0;
    for (int k = 0; k < N_KNOWN; k++) { /* FFmpeg's order: its channel bits, low first */
        if (at[k] < 0)
            continue;
        if (l[k] != 0.0f) {
            out->ch[0][out->n[0]] = (uint8_t)at[k];
            out->w[0][out->n[0]++] = l[k];
        }
        if (r[k] != 0.0f) {
            out->ch[1][out->n[1]] = (uint8_t)at[k];
            out->w[1][out->n[1]++] = r[k];
        }
    }
    return STK_OK;
}

void stk__downmix_run(const stk__downmix *m, const float *const *in, int64_t n, float *const *out)
{
    for (int o = 0; o < 2; o++)
        for (int64_t i = 0; i < n; i++) {
            float v = 0.0f;
            for (int j = 0; j < m->n[o]; j++)
                v += in[m->ch[o][j]][i] * m->w[o][j];
            out[o][i] = v;
        }
}
