/*
 * stk_audio_stretch.c: TimeStretch, torchaudio 0.13's phase vocoder (F.phase_vocoder) on one
 * channel of a complex spectrogram, float32 as torch computes it:
 *
 *   time_steps = torch.arange(0, T, rate)          (float32; AVX2 arange's rounding)
 *   alphas     = time_steps % 1.0
 *   s0, s1     = the frames floor(t) and floor(t + 1) of the spectrogram padded with 2 zero frames
 *   phase      = angle(s1) - angle(s0) - phase_advance, wrapped to [-pi, pi], + phase_advance
 *   phase_acc  = cumsum(cat(angle(frame 0), phase[:-1]))   (torch accumulates in double)
 *   out        = polar(alphas * |s1| + (1 - alphas) * |s0|, phase_acc)
 *
 * with phase_advance = torch.linspace(0, pi * hop_length, n_freq) (float32). The output has
 * ceil(T / rate) frames; at rate 1.0 it is the input (torchaudio returns it). The magnitudes are
 * torch's to float rounding; the phases accumulate large angles (pi * hop_length a frame) in
 * float32, so an angle one ulp off (atan2 in SLEEF's AVX2 against glibc's) can move a far frame's
 * phase by one float32 ulp of its accumulated value (docs/audio.md has the measured bound).
 *
 * Threads: pure functions.
 */
#include "xform/stk_audio.h"

#include <math.h>
#include <string.h>

int64_t stk__stretch_frames(int64_t frames, double rate)
{
    return (int64_t)ceil((double)frames / rate); /* torch.arange(0, T, rate)'s length */
}

/* torch.linspace(0, end, n)[f] in float32 (its CPU kernel: from the start for the first half,
 * from the end for the rest). */
static float linspace_at(float end, int64_t n, int64_t f)
{
    if (n == 1)
        return 0.0f;
    float step = end / (float)(n - 1);
    return f < n / 2 ? step * (float)f : end - step * (float)(n - 1 - f);
}

/* torch.arange(0, T, rate, dtype=float32)[k]: eight values at a time from a float base. */
static float arange_at(double rate, int64_t k)
{
    int64_t k0 = k - k % 8;
    float base = (float)(rate * (double)k0);
    return (float)((double)base + rate * (double)(k - k0));
}

void stk__stretch_run(const float *in, int64_t bins, int64_t frames, double rate, int64_t hop,
                      float *out, int64_t out_frames)
{
    const float two_pi = (float)(2.0 * M_PI);
    const float pa_end = (float)(M_PI * (double)hop);
    int64_t n = STK_MIN(stk__stretch_frames(frames, rate), out_frames);
    for (int64_t f = 0; f < bins && rate == 1.0; f++) { /* torchaudio returns it as it is */
        memcpy(out + f * out_frames * 2, in + f * frames * 2, (size_t)n * 2 * sizeof(float));
        memset(out + (f * out_frames + n) * 2, 0, (size_t)(out_frames - n) * 2 * sizeof(float));
    }
    for (int64_t f = 0; f < bins && rate != 1.0; f++) {
        const float *x = in + f * frames * 2;
        float *y = out + f * out_frames * 2;
        float pa = linspace_at(pa_end, bins, f);
        double acc = atan2f(x[1], x[0]);
        for (int64_t k = 0; k < n; k++) {
            float ts = arange_at(rate, k);
            int64_t i0 = (int64_t)ts, i1 = (int64_t)(ts + 1.0f);
            float alpha = ts - floorf(ts);
            float r0 = i0 < frames ? x[i0 * 2] : 0.0f, m0 = i0 < frames ? x[i0 * 2 + 1] : 0.0f;
            float r1 = i1 < frames ? x[i1 * 2] : 0.0f, m1 = i1 < frames ? x[i1 * 2 + 1] : 0.0f;
            float mag = alpha * hypotf(r1, m1) + (1.0f - alpha) * hypotf(r0, m0);
            float ph = (float)acc;
            y[k * 2] = mag * cosf(ph);
            y[k * 2 + 1] = mag * sinf(ph);
            float d = atan2f(m1, r1) - atan2f(m0, r0) - pa;
            d = d - two_pi * nearbyintf(d / two_pi);
            acc += (double)(d + pa);
        }
        for (int64_t k = n; k < out_frames; k++)
            y[k * 2] = y[k * 2 + 1] = 0.0f;
    }
}
