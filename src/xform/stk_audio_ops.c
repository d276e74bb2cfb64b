/*
 * stk_audio_ops.c: the audio family of the op table (stk_xform.h's stk__op_def rows, media
 * STK_MEDIA_AUDIO): torchaudio 0.13's Resample, Vol, Spectrogram, MelSpectrogram, MFCC,
 * AmplitudeToDB, TimeMasking, FrequencyMasking and TimeStretch with torchaudio's argument names and
 * defaults, and stoker.audio's RandomCrop, CenterCrop, PadTo and Downmix for what torchaudio leaves
 * to the user's Dataset (named "audio.RandomCrop", ... in the table: RandomCrop and CenterCrop are
 * torchvision's image ops).
 *
 * A row here holds what the table holds for every op (name, kind, parameters, defaults, check)
 * and its stage (stk_audio.h: waveform, spectrum, spectral). What an op does per sample is the
 * audio pipeline's (stk_audio.c for the waveform ops and the masks, stk_spectrogram.c for the
 * rest). A string argument of torchaudio's (resampling_method, gain_type, window_fn, norm,
 * mel_scale, pad_mode, stype) is a number here, documented on stk_op's field; the Python classes
 * (python/stoker/audio.py) translate.
 *
 * Threads: the table is static and read-only.
 */
#include "xform/stk_audio.h"

#include <math.h>

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define PARAMS(a) a, N(a)

/* ---- checks: every parameter named in its message, so a front end can say which ---- */

static stk_status int_in(size_t i, const stk_op *op, const char *param, int64_t v, int64_t lo,
                         int64_t hi)
{
    if (v >= lo && v <= hi)
        return STK_OK;
    return stk__set_last_error(STK_EINVAL, "ops[%zu] (%s): %s must be in %lld..%lld, got %lld", i,
                               stk_op_name(op->kind), param, (long long)lo, (long long)hi,
                               (long long)v);
}

/* A number in [lo, hi] (NaN allowed when nan_ok: the argument's None). */
static stk_status num_in(size_t i, const stk_op *op, const char *param, double v, double lo,
                         double hi, bool nan_ok)
{
    if ((isnan(v) && nan_ok) || (v >= lo && v <= hi))
        return STK_OK;
    return stk__set_last_error(STK_EINVAL, "ops[%zu] (%s): %s must be %s%g..%g, got %g", i,
                               stk_op_name(op->kind), param, nan_ok ? "None or in " : "in ", lo, hi,
                               v);
}

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        stk_status rc_ = (expr);                                                                   \
        if (rc_ < 0)                                                                               \
            return rc_;                                                                            \
    } while (0)

#define MAX_RATE 1536000    /* Hz */
#define MAX_SECONDS 86400.0 /* a day of audio per sample */
#define MAX_FFT (1 << 20)

static stk_status check_resample(size_t i, stk_op *op)
{
    TRY(int_in(i, op, "orig_freq", op->orig_freq, 1, MAX_RATE));
    TRY(int_in(i, op, "new_freq", op->new_freq, 1, MAX_RATE));
    TRY(int_in(i, op, "resampling_method", op->resampling_method, 0, 1));
    TRY(int_in(i, op, "lowpass_filter_width", op->lowpass_filter_width, 1, 1024));
    TRY(num_in(i, op, "rolloff", op->rolloff, 1e-6, 1.0, false));
    return num_in(i, op, "beta", op->beta, 0.0, 1e4, true);
}

static stk_status check_downmix(size_t i, stk_op *op)
{
    return int_in(i, op, "channels", op->channels, 1, 2);
}

static stk_status check_seconds(size_t i, stk_op *op)
{
    if (!(op->seconds > 0.0 && op->seconds <= MAX_SECONDS))
        return stk__set_last_error(STK_EINVAL, "ops[%zu] (%s): seconds must be in (0, %g], got %g",
                                   i, stk_op_name(op->kind), MAX_SECONDS, op->seconds);
    return STK_OK;
}

static stk_status check_vol(size_t i, stk_op *op)
{
    TRY(int_in(i, op, "gain_type", op->gain_type, 0, 2));
    /* torchaudio: "If gain_type = amplitude or power, gain must be positive." (log10 of power) */
    double lo = op->gain_type == 1 ? -1e4 : op->gain_type == 2 ? 1e-300 : 0.0;
    return num_in(i, op, "gain", op->gain, lo, 1e4, false);
}

/* The STFT arguments every spectrum op has. */
static stk_status check_stft(size_t i, stk_op *op)
{
    TRY(int_in(i, op, "n_fft", op->n_fft, 1, MAX_FFT));
    TRY(int_in(i, op, "win_length", op->win_length, 0, op->n_fft));
    TRY(int_in(i, op, "hop_length", op->hop_length, 0, MAX_FFT));
    int64_t win = op->win_length ? op->win_length : op->n_fft;
    if (!op->hop_length && win < 2)
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): hop_length must be given with win_length %lld "
                                   "(its default, win_length // 2, would be 0)",
                                   i, stk_op_name(op->kind), (long long)win);
    TRY(int_in(i, op, "pad", op->pad, 0, MAX_FFT));
    TRY(int_in(i, op, "window", op->window, 0, 3));
    TRY(int_in(i, op, "periodic", op->periodic, 0, 1));
    if (op->power == 0.0 && op->kind != STK_OP_SPECTROGRAM) /* None: a complex STFT */
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): power=None (a complex spectrogram) is "
                                   "Spectrogram's only",
                                   i, stk_op_name(op->kind));
    if (op->power != 0.0)
        TRY(num_in(i, op, "power", op->power, 1e-3, 64.0, false));
    TRY(int_in(i, op, "normalized", op->normalized, 0, 2));
    TRY(int_in(i, op, "center", op->stft_center, 0, 1));
    TRY(int_in(i, op, "pad_mode", op->pad_mode, 0, 3));
    return int_in(i, op, "onesided", op->onesided, 0, 1);
}

static stk_status check_spectrogram(size_t i, stk_op *op)
{
    return check_stft(i, op);
}

/* MelScale's arguments (MelSpectrogram, MFCC's melkwargs): onesided, as MelScale's n_stft is
 * n_fft // 2 + 1. */
static stk_status check_mel(size_t i, stk_op *op)
{
    TRY(check_stft(i, op));
    if (!op->onesided)
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): onesided must be 1 (MelScale takes n_fft // 2 "
                                   "+ 1 frequencies)",
                                   i, stk_op_name(op->kind));
    TRY(int_in(i, op, "sample_rate", op->sample_rate, 1, MAX_RATE));
    TRY(num_in(i, op, "f_min", op->f_min, 0.0, (double)MAX_RATE, false));
    TRY(num_in(i, op, "f_max", op->f_max, op->f_min, (double)MAX_RATE, true));
    if (isnan(op->f_max) && op->f_min > (double)(op->sample_rate / 2))
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): f_min %g is above f_max (sample_rate // 2 = "
                                   "%lld)",
                                   i, stk_op_name(op->kind), op->f_min,
                                   (long long)(op->sample_rate / 2));
    TRY(int_in(i, op, "n_mels", op->n_mels, 1, 16384));
    TRY(int_in(i, op, op->kind == STK_OP_MFCC ? "mel_norm" : "norm", op->mel_norm, 0, 1));
    return int_in(i, op, "mel_scale", op->mel_scale, 0, 1);
}

static stk_status check_mfcc(size_t i, stk_op *op)
{
    TRY(check_mel(i, op));
    TRY(int_in(i, op, "n_mfcc", op->n_mfcc, 1, op->n_mels));
    TRY(int_in(i, op, "dct_type", op->dct_type, 2, 2));
    TRY(int_in(i, op, "norm", op->dct_norm, 0, 1));
    TRY(int_in(i, op, "log_mels", op->log_mels, 0, 1));
    return num_in(i, op, "top_db", op->top_db, 0.0, 1e4, false);
}

static stk_status check_db(size_t i, stk_op *op)
{
    TRY(int_in(i, op, "stype", op->stype, 0, 1));
    return num_in(i, op, "top_db", op->top_db, 0.0, 1e4, true);
}

static stk_status check_mask(size_t i, stk_op *op)
{
    bool time = op->kind == STK_OP_TIME_MASKING;
    TRY(int_in(i, op, time ? "time_mask_param" : "freq_mask_param", op->mask_param, 0, 1 << 30));
    TRY(int_in(i, op, "iid_masks", op->iid_masks, 0, 1));
    return num_in(i, op, "p", op->p, 0.0, 1.0, false);
}

static stk_status check_stretch(size_t i, stk_op *op)
{
    TRY(int_in(i, op, "n_freq", op->n_freq, 1, MAX_FFT / 2 + 1));
    TRY(int_in(i, op, "hop_length", op->hop_length, 0, MAX_FFT));
    if (!op->hop_length && op->n_freq < 2)
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): hop_length must be given with n_freq 1 (its "
                                   "default, n_fft // 2, would be 0)",
                                   i, stk_op_name(op->kind));
    bool fixed = !isnan(op->fixed_rate), ranged = !isnan(op->rate_range[0]);
    if (fixed == ranged)
        return stk__set_last_error(STK_EINVAL,
                                   "ops[%zu] (%s): give fixed_rate or rate_range (a rate drawn "
                                   "per sample), one of them",
                                   i, stk_op_name(op->kind));
    if (fixed)
        return num_in(i, op, "fixed_rate", op->fixed_rate, 1e-3, 1e3, false);
    TRY(num_in(i, op, "rate_range[0]", op->rate_range[0], 1e-3, 1e3, false));
    return num_in(i, op, "rate_range[1]", op->rate_range[1], op->rate_range[0], 1e3, false);
}

/* ---- defaults (torchaudio's; stk_op_init has zeroed the rest) ---- */

static void init_resample(stk_op *op)
{
    op->orig_freq = 16000;
    op->new_freq = 16000;
    op->lowpass_filter_width = 6;
    op->rolloff = 0.99;
    op->beta = NAN;
}

static void init_downmix(stk_op *op)
{
    op->channels = 1;
}

static void init_seconds(stk_op *op)
{
    op->seconds = 1.0;
}

static void init_vol(stk_op *op)
{
    op->gain = 1.0;
}

static void init_stft(stk_op *op)
{
    op->n_fft = 400;
    op->periodic = 1;
    op->power = 2.0;
    op->stft_center = 1;
    op->onesided = 1;
}

static void init_mel(stk_op *op)
{
    init_stft(op);
    op->sample_rate = 16000;
    op->f_max = NAN;
    op->n_mels = 128;
}

static void init_mfcc(stk_op *op)
{
    init_mel(op);
    op->n_mfcc = 40;
    op->dct_type = 2;
    op->dct_norm = 1;
    op->top_db = 80.0;
}

static void init_db(stk_op *op)
{
    op->top_db = NAN;
}

static void init_mask(stk_op *op)
{
    op->p = 1.0;
}

static void init_stretch(stk_op *op)
{
    op->n_freq = 201;
    op->fixed_rate = 1.0; /* torchaudio's None takes the rate per call: the identity here */
    op->rate_range[0] = op->rate_range[1] = NAN;
}

/* ---- parameters, in torchaudio's argument order ---- */

static const stk_op_param p_resample[] = {
    STK__PARAM("orig_freq", INT64, 1, orig_freq),
    STK__PARAM("new_freq", INT64, 1, new_freq),
    STK__PARAM("resampling_method", INT64, 1, resampling_method),
    STK__PARAM("lowpass_filter_width", INT64, 1, lowpass_filter_width),
    STK__PARAM("rolloff", DOUBLE, 1, rolloff),
    STK__PARAM("beta", DOUBLE, 1, beta)};
static const stk_op_param p_downmix[] = {STK__PARAM("channels", INT64, 1, channels)};
static const stk_op_param p_seconds[] = {STK__PARAM("seconds", DOUBLE, 1, seconds)};
static const stk_op_param p_vol[] = {STK__PARAM("gain", DOUBLE, 1, gain),
                                     STK__PARAM("gain_type", INT64, 1, gain_type)};

/* The STFT arguments (Spectrogram's order; window and periodic stand for window_fn and
 * wkwargs={"periodic": ...}). */
#define STFT_PARAMS                                                                                \
    STK__PARAM("n_fft", INT64, 1, n_fft), STK__PARAM("win_length", INT64, 1, win_length),          \
        STK__PARAM("hop_length", INT64, 1, hop_length), STK__PARAM("pad", INT64, 1, pad),          \
        STK__PARAM("window", INT64, 1, window), STK__PARAM("periodic", INT64, 1, periodic),        \
        STK__PARAM("power", DOUBLE, 1, power), STK__PARAM("normalized", INT64, 1, normalized),     \
        STK__PARAM("center", INT64, 1, stft_center), STK__PARAM("pad_mode", INT64, 1, pad_mode),   \
        STK__PARAM("onesided", INT64, 1, onesided)
#define MEL_PARAMS                                                                                 \
    STK__PARAM("f_min", DOUBLE, 1, f_min), STK__PARAM("f_max", DOUBLE, 1, f_max),                  \
        STK__PARAM("n_mels", INT64, 1, n_mels), STK__PARAM("mel_scale", INT64, 1, mel_scale)

static const stk_op_param p_spectrogram[] = {STFT_PARAMS};
static const stk_op_param p_mel[] = {STK__PARAM("sample_rate", INT64, 1, sample_rate), STFT_PARAMS,
                                     MEL_PARAMS, STK__PARAM("norm", INT64, 1, mel_norm)};
/* MFCC's own arguments, then its melkwargs (MelSpectrogram's, norm as mel_norm: MFCC's norm is
 * the DCT's) */
static const stk_op_param p_mfcc[] = {STK__PARAM("sample_rate", INT64, 1, sample_rate),
                                      STK__PARAM("n_mfcc", INT64, 1, n_mfcc),
                                      STK__PARAM("dct_type", INT64, 1, dct_type),
                                      STK__PARAM("norm", INT64, 1, dct_norm),
                                      STK__PARAM("log_mels", INT64, 1, log_mels),
                                      STK__PARAM("top_db", DOUBLE, 1, top_db),
                                      STFT_PARAMS,
                                      MEL_PARAMS,
                                      STK__PARAM("mel_norm", INT64, 1, mel_norm)};
static const stk_op_param p_db[] = {STK__PARAM("stype", INT64, 1, stype),
                                    STK__PARAM("top_db", DOUBLE, 1, top_db)};
static const stk_op_param p_tmask[] = {STK__PARAM("time_mask_param", INT64, 1, mask_param),
                                       STK__PARAM("iid_masks", INT64, 1, iid_masks),
                                       STK__PARAM("p", DOUBLE, 1, p)};
static const stk_op_param p_fmask[] = {STK__PARAM("freq_mask_param", INT64, 1, mask_param),
                                       STK__PARAM("iid_masks", INT64, 1, iid_masks)};
static const stk_op_param p_stretch[] = {STK__PARAM("hop_length", INT64, 1, hop_length),
                                         STK__PARAM("n_freq", INT64, 1, n_freq),
                                         STK__PARAM("fixed_rate", DOUBLE, 1, fixed_rate),
                                         STK__PARAM("rate_range", DOUBLE, 2, rate_range)};

#define AUDIO(stage_) .media = STK_MEDIA_AUDIO, .stage = STK__OP_##stage_

const stk__op_def stk__audio_op_rows[STK__AUDIO_N_ROWS] = {
    {.name = "Resample",
     .kind = STK_OP_RESAMPLE,
     AUDIO(WAVE),
     .params = PARAMS(p_resample),
     .init = init_resample,
     .check = check_resample},
    {.name = "audio.Downmix",
     .kind = STK_OP_DOWNMIX,
     AUDIO(WAVE),
     .params = PARAMS(p_downmix),
     .init = init_downmix,
     .check = check_downmix},
    {.name = "audio.RandomCrop",
     .kind = STK_OP_AUDIO_RANDOM_CROP,
     .draws = true,
     AUDIO(WAVE),
     .params = PARAMS(p_seconds),
     .init = init_seconds,
     .check = check_seconds},
    {.name = "audio.CenterCrop",
     .kind = STK_OP_AUDIO_CENTER_CROP,
     AUDIO(WAVE),
     .params = PARAMS(p_seconds),
     .init = init_seconds,
     .check = check_seconds},
    {.name = "audio.PadTo",
     .kind = STK_OP_AUDIO_PAD_TO,
     AUDIO(WAVE),
     .params = PARAMS(p_seconds),
     .init = init_seconds,
     .check = check_seconds},
    {.name = "Vol",
     .kind = STK_OP_VOL,
     AUDIO(WAVE),
     .params = PARAMS(p_vol),
     .init = init_vol,
     .check = check_vol},
    {.name = "Spectrogram",
     .kind = STK_OP_SPECTROGRAM,
     AUDIO(SPECTRUM),
     .params = PARAMS(p_spectrogram),
     .init = init_stft,
     .check = check_spectrogram},
    {.name = "MelSpectrogram",
     .kind = STK_OP_MEL_SPECTROGRAM,
     AUDIO(SPECTRUM),
     .params = PARAMS(p_mel),
     .init = init_mel,
     .check = check_mel},
    {.name = "MFCC",
     .kind = STK_OP_MFCC,
     AUDIO(SPECTRUM),
     .params = PARAMS(p_mfcc),
     .init = init_mfcc,
     .check = check_mfcc},
    {.name = "AmplitudeToDB",
     .kind = STK_OP_AMPLITUDE_TO_DB,
     AUDIO(SPECTRAL),
     .params = PARAMS(p_db),
     .init = init_db,
     .check = check_db},
    {.name = "TimeMasking",
     .kind = STK_OP_TIME_MASKING,
     .draws = true,
     AUDIO(SPECTRAL),
     .params = PARAMS(p_tmask),
     .init = init_mask,
     .check = check_mask},
    {.name = "FrequencyMasking",
     .kind = STK_OP_FREQUENCY_MASKING,
     .draws = true,
     AUDIO(SPECTRAL),
     .params = PARAMS(p_fmask),
     .init = init_mask,
     .check = check_mask},
    {.name = "TimeStretch",
     .kind = STK_OP_TIME_STRETCH,
     .draws = true,
     AUDIO(SPECTRAL),
     .params = PARAMS(p_stretch),
     .init = init_stretch,
     .check = check_stretch},
};
