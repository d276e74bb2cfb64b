/*
 * stk_audio.h: internal interfaces of the audio pipeline (src/xform), the STK_MEDIA_AUDIO kind of
 * transform (stk_media.h dispatches to it).
 *
 * A transform's ops fall in three stages, in this order (stk__op_def.stage):
 *   STK__OP_WAVE      on the waveform: Resample, Downmix, the crops, PadTo, Vol;
 *   STK__OP_SPECTRUM  at most one: the waveform becomes [C, bins, frames] (Spectrogram,
 *                     MelSpectrogram, MFCC; stk_spectrogram.c);
 *   STK__OP_SPECTRAL  on that spectrogram, in place: AmplitudeToDB, TimeMasking,
 *                     FrequencyMasking (AmplitudeToDB may also end a waveform pipeline);
 *                     TimeStretch first of them, on a complex spectrogram, into the output.
 *
 * Per sample (stk_audio.c): open the record (its header: rate, channels, length) -> plan the
 * waveform ops forward over the signal's shape, drawing the crops' offsets -> map the output
 * back through the ops to the input frames it needs -> decode only those (stk_audio_decode.h)
 * -> run the waveform ops over just the ranges the next op reads -> the spectrum and spectral
 * ops write the output row -> its valid length for the lengths tensor.
 *
 * Signal model: a signal of `len` samples per channel is zero outside [0, len); an op computes
 * only the part of its output the next op reads (the backward pass), so a crop of a minute-long
 * file resamples a second. torchaudio resamples the whole file and crops afterwards: the kept
 * samples are the same (up to float summation order) because its resampler pads with zeros too.
 */
#ifndef STK_AUDIO_H
#define STK_AUDIO_H

#include "decode/stk_audio_decode.h"
#include "xform/stk_xform.h"

/* ---- the resampler (stk_audio_resample.c): torchaudio's windowed sinc ---- */

/* The kernel of one (orig_freq, new_freq) pair, as torchaudio.transforms.Resample computes it
 * (_get_sinc_resample_kernel: float64, then float32), kept sparse: phase i (output sample k with
 * k % new == i) reads taps [j0[i], j0[i] + nt[i]) of its 2 * width + orig, the others being the
 * window's zeros (below 1e-20 where torchaudio clamps t to the filter width). */
typedef struct stk__resampler {
    int64_t orig_freq, new_freq, lpw, method; /* the key */
    double rolloff, beta;
    int64_t orig, new_; /* reduced by their gcd */
    int64_t width;      /* torchaudio's: zeros padded before the input */
    int32_t *j0, *nt;   /* per phase */
    int32_t stride;     /* weights per phase in w */
    float *w;           /* phase i: nt[i] weights at w + i * stride */
    /* The same weights by groups of 8 outputs (stk_audio_resample.c runs these) of a super-block
     * of sb blocks (1, or 8 / gcd(new, 8) when new < 8): group g reads g_len[g] inputs from g_s[g]
     * (after the super-block's first) times rows of 8 weights at gw + g_at[g] (row t, lane l: the
     * weight of output 8g + l for that input, or 0) */
    int64_t sb, n_groups;
    int32_t *g_s, *g_len;
    int64_t *g_at;
    float *gw;
    bool avx2; /* in AVX2 with FMA (the same sums as the portable fmaf ones) */
} stk__resampler;

/* Build the kernel resampling orig_freq to new_freq with op's parameters (Resample's
 * lowpass_filter_width, rolloff, resampling_method, beta). STK_ELIMIT when it would exceed 64 M
 * weights (rates with a tiny common divisor), STK_ENOMEM; message in err. */
stk_status stk__resampler_make(int64_t orig_freq, int64_t new_freq, const stk_op *op,
                               stk__resampler **out, char *err, size_t err_size);
void stk__resampler_free(stk__resampler *r);
/* Whether r is the kernel for these rates and op's parameters. */
bool stk__resampler_is(const stk__resampler *r, int64_t orig_freq, int64_t new_freq,
                       const stk_op *op);
/* The output length of a `len`-sample input: ceil(new * len / orig) (torchaudio's). */
int64_t stk__resampler_len(const stk__resampler *r, int64_t len);
/* The input range [*ia, *ib) outputs [a, b) read (a < b; may reach outside the signal, which is
 * zero there). */
void stk__resampler_need(const stk__resampler *r, int64_t a, int64_t b, int64_t *ia, int64_t *ib);
/* Outputs [a, b) into out[0 .. b - a), reading in[x - in_a] for input sample x (in covers what
 * stk__resampler_need says). */
void stk__resampler_run(const stk__resampler *r, const float *in, int64_t in_a, int64_t a,
                        int64_t b, float *out);

/* ---- the spectrogram ops (stk_spectrogram.c) ---- */

/* A compiled Spectrogram, MelSpectrogram or MFCC (torchaudio 0.13's definitions). */
typedef struct stk__spec {
    stk_op_kind kind;
    int64_t n_fft, win, hop, pad;
    bool center, onesided;
    int pad_mode; /* stk_op.pad_mode */
    double power;
    int64_t n_freq;    /* onesided: n_fft / 2 + 1, else n_fft */
    float *window;     /* n_fft values: the window (win_length) zero-padded and centred */
    float norm;        /* |X| scale: 1, 1 / sqrt(sum w^2) ("window"), n_fft^-1/2 ("frame_length") */
    void *plan;        /* fftwf_plan: real-to-complex of n_fft, FFTW_ESTIMATE */
    int64_t n_mels;    /* MelSpectrogram, MFCC: the filterbank, mel m taking bins */
    int32_t *mlo, *mn; /* [mlo[m], mlo[m] + mn[m]) with weights fb + m * n_freq + mlo[m] */
    float *fb;
    int64_t n_mfcc; /* MFCC: dct[k * n_mels + m], torchaudio's create_dct(n_mfcc, n_mels, norm) */
    float *dct;
    bool log_mels;
    double top_db;  /* MFCC's AmplitudeToDB (NaN: none) */
    int64_t bins;   /* rows of the output: n_freq, n_mels or n_mfcc */
    int64_t frames; /* of the `len` compiled for (stk__spec_run takes at most that many) */
} stk__spec;

/* Compile op (a spectrum op, its parameters checked) for inputs of `len` samples (> 0).
 * STK_EINVAL when len is too short for reflect padding (as torch refuses), STK_ENOTSUP built
 * without libfftw3f, STK_ENOMEM; message in err. */
stk_status stk__spec_compile(const stk_op *op, int64_t len, stk__spec *s, char *err,
                             size_t err_size);
void stk__spec_free(stk__spec *s);
/* Frames of a `len`-sample input (torch.stft's count). */
int64_t stk__spec_frames(const stk__spec *s, int64_t len);

/* Per-worker scratch of the spectrum op; grown at worker create, never per sample. */
typedef struct stk__specwork {
    float *in, *out; /* the FFT's (fftwf_malloc: the plan's alignment) */
    float *pw;       /* MelSpectrogram, MFCC: one channel's spectra, [n_freq, frames] */
    float *mel;      /* MFCC: the whole sample's mel spectrogram, C * n_mels * frames */
    size_t mel_cap;
} stk__specwork;

stk_status stk__specwork_init(stk__specwork *w, const stk__spec *s, size_t mel_values, char *err,
                              size_t err_size);
void stk__specwork_free(stk__specwork *w);
/* The op on `channels` planes of `len` samples into dst, float32 [channels, bins, frames]. */
stk_status stk__spec_run(const stk__spec *s, stk__specwork *w, const float *const *x,
                         uint32_t channels, int64_t len, float *dst, char *err, size_t err_size);
/* AmplitudeToDB over n values in place: multiplier * log10(max(x, 1e-10)) (float32, as torch),
 * then, when top_db is not NaN, at least the largest of them minus top_db. */
void stk__amplitude_to_db(float *x, size_t n, float multiplier, double top_db);

/* ---- FFmpeg's stereo downmix (stk_audio_downmix.c) ---- */

/* Output channel o (0 left, 1 right) = sum over j < n[o] of in[ch[o][j]] * w[o][j], in order. */
typedef struct stk__downmix {
    int n[2];
    uint8_t ch[2][STK__AUD_MAX_CHANNELS];
    float w[2][STK__AUD_MAX_CHANNELS];
} stk__downmix;

/* The matrix of a `channels`-channel stream of format fmt (its WAV channel mask, 0 none) to
 * stereo: libswresample's default for float output, on the layout FFmpeg gives such a file.
 * STK_EFORMAT naming what it cannot place (fewer than 3 or more than 8 channels, an unknown
 * channel in the mask). */
stk_status stk__downmix_stereo(stk__audfmt fmt, uint32_t channels, uint32_t mask, stk__downmix *out,
                               char *err, size_t err_size);
/* out[0..1][i] for i < n from in[c][i]. */
void stk__downmix_run(const stk__downmix *m, const float *const *in, int64_t n, float *const *out);

/* ---- TimeStretch (stk_audio_stretch.c): torchaudio's phase vocoder ---- */

/* Frames out of `frames` at `rate`: ceil(frames / rate). */
int64_t stk__stretch_frames(int64_t frames, double rate);
/* One channel's complex spectrogram `in`, [bins, frames, 2], stretched by `rate` (phase advance
 * of hop_length `hop`) into out, [bins, out_frames, 2]: its first stk__stretch_frames(frames,
 * rate) frames (at most out_frames), zeros after. */
void stk__stretch_run(const float *in, int64_t bins, int64_t frames, double rate, int64_t hop,
                      float *out, int64_t out_frames);

/* ---- the compiled audio transform (stk_audio.c) ---- */

/* A signal between waveform ops. */
typedef struct stk__asig {
    uint32_t rate;     /* Hz; 0 unknown (before binding) */
    uint32_t channels; /* 0 unknown */
    int64_t len;       /* samples per channel; -1 unknown */
    int64_t valid;     /* samples before the zero padding (lengths) */
} stk__asig;

typedef struct stk__atransform {
    uint32_t sample_rate; /* stk_transform_opts.sample_rate */
    bool lengths, lenient;
    size_t n_wave;      /* ops [0, n_wave) are waveform ops */
    int spec_at;        /* the spectrum op, -1 none; spectral ops follow it */
    int first_resample; /* the first Resample op, -1 none */
    bool implicit;      /* files are resampled to sample_rate first (no Resample op) */
    bool rate_fixed;    /* files must all be at in_rate (learned from record 0) */
    /* What binding learned (stk__transform_bind); 0 / -1 before */
    uint32_t in_rate, in_channels;
    bool array;        /* the field is a waveform array, not encoded audio */
    stk_dtype a_dtype; /* its dtype, and (channels, samples) */
    int64_t a_len;
    bool bound;         /* the output shape is known */
    stk__asig out_sig;  /* after the waveform ops (static part) */
    stk__spec spec;     /* the spectrum op, when spec_at >= 0 and bound */
    int64_t frames;     /* its output frames */
    int stretch_at;     /* the TimeStretch op (right after spec_at), -1 none */
    int64_t out_frames; /* frames of the output: `frames`, or stretched at the slowest rate */
} stk__atransform;

#endif /* STK_AUDIO_H */
