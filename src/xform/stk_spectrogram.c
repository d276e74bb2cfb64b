/*
 * stk_spectrogram.c: torchaudio 0.13's Spectrogram, MelSpectrogram, MFCC and AmplitudeToDB on
 * one sample's channels, with the FFT from libfftw3f.
 *
 * Spectrogram (F.spectrogram over torch.stft): zero `pad` on both sides; with center, n_fft / 2
 * more on both sides by pad_mode (reflect: torch refuses inputs not longer than that); frames of
 * n_fft every hop_length samples, times the window (win_length long, zero-padded to n_fft and
 * centred); the real FFT; |X| scaled by the normalisation ("window": 1 / sqrt(sum w^2);
 * "frame_length": n_fft^-1/2), raised to `power` (power=None, 0 here: X itself, complex, its
 * real and imaginary parts last: [C, bins, frames, 2], as torch.view_as_real). MelSpectrogram:
 * melscale_fbanks(n_fft / 2 + 1, f_min, f_max, n_mels, sample_rate, norm, mel_scale) applied to
 * each frame (only each triangle's non-zero bins are summed). MFCC: the mel spectrogram, then
 * AmplitudeToDB("power", top_db) over the whole sample (or log(x + 1e-6) with log_mels), then
 * create_dct's matrix. The filterbank is computed in float64 where torchaudio uses float32 tensors,
 * the DCT matrix in float32 as torchaudio does; the FFT is FFTW's instead of pocketfft's: the
 * outputs agree to float rounding (python/tests/test_audio.py states the bound).
 *
 * Each frame's spectrum is stored as a column of [bins, frames] (the Spectrogram's output, or one
 * channel's scratch), and the filterbank then runs along the frames: each output is still summed
 * over its bins in order, as before, but eight or so frames at a time (the compiler's vectors,
 * this file being built at -O3: element-wise loops only, so the results are the scalar ones).
 *
 * FFTW: a plan (FFTW_ESTIMATE: the same algorithm in every run, so outputs do not depend on a
 * measurement) is made at compile and executed by every worker on its own buffers
 * (fftwf_execute_dft_r2c is thread-safe; buffers from fftwf_malloc have the plan's alignment).
 * FFTW's planner is process-wide state that is not thread-safe: making and destroying plans
 * takes `planner_mu`, the one global lock of this file.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include "xform/stk_audio.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#ifdef STK_HAVE_FFTW
#include <fftw3.h>
static pthread_mutex_t planner_mu = PTHREAD_MUTEX_INITIALIZER;
#endif

int64_t stk__spec_frames(const stk__spec *s, int64_t len)
{
    int64_t n = len + 2 * s->pad + (s->center ? 2 * (s->n_fft / 2) : 0);
    return n < s->n_fft ? 0 : 1 + (n - s->n_fft) / s->hop;
}

/* torch.hann_window / hamming_window / blackman_window / ones of length n (periodic: of n + 1,
 * the last dropped), in float64 then float32. */
static void make_window(int kind, bool periodic, int64_t n, float *w)
{
    double N = (double)(periodic ? n : n - 1);
    for (int64_t i = 0; i < n; i++) {
        double x = n == 1 ? 0.0 : 2.0 * M_PI * (double)i / N, v;
        switch (kind) {
        case 1:
            v = 0.54 - 0.46 * cos(x);
            break;
        case 2:
            v = 0.42 - 0.5 * cos(x) + 0.08 * cos(2.0 * x);
            break;
        case 3:
            v = 1.0;
            break;
        default:
            v = 0.5 - 0.5 * cos(x);
        }
        w[i] = n == 1 ? 1.0f : (float)v;
    }
}

/* torchaudio's _hz_to_mel and _mel_to_hz (htk, or slaney: linear below 1 kHz, log above). */
static double hz_to_mel(double f, int slaney)
{
    if (!slaney)
        return 2595.0 * log10(1.0 + f / 700.0);
    double f_sp = 200.0 / 3, mels = f / f_sp, min_log_mel = 1000.0 / f_sp,
           logstep = log(6.4) / 27.0;
    return f >= 1000.0 ? min_log_mel + log(f / 1000.0) / logstep : mels;
}

static double mel_to_hz(double m, int slaney)
{
    if (!slaney)
        return 700.0 * (pow(10.0, m / 2595.0) - 1.0);
    double f_sp = 200.0 / 3, min_log_mel = 1000.0 / f_sp, logstep = log(6.4) / 27.0;
    return m >= min_log_mel ? 1000.0 * exp(logstep * (m - min_log_mel)) : f_sp * m;
}

/* melscale_fbanks: triangles between n_mels + 2 points evenly spaced in mel, over the bins
 * 0 .. sample_rate // 2 (torch.linspace), with slaney's area normalisation when asked. */
static stk_status make_fbank(const stk_op *op, stk__spec *s, char *err, size_t err_size)
{
    int64_t nf = s->n_fft / 2 + 1, nm = s->n_mels;
    double f_max = isnan(op->f_max) ? (double)(op->sample_rate / 2) : op->f_max;
    double m_min = hz_to_mel(op->f_min, (int)op->mel_scale),
           m_max = hz_to_mel(f_max, (int)op->mel_scale);
    double *fp = stk__calloc((size_t)nm + 2, sizeof(double));
    s->fb = stk__calloc((size_t)(nm * nf), sizeof(float));
    s->mlo = stk__calloc((size_t)nm, sizeof(int32_t));
    s->mn = stk__calloc((size_t)nm, sizeof(int32_t));
    if (!fp || !s->fb || !s->mlo || !s->mn) {
        stk__free(fp);
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for a mel filterbank");
    }
    for (int64_t i = 0; i < nm + 2; i++)
        fp[i] =
            mel_to_hz(m_min + (m_max - m_min) * (double)i / (double)(nm + 1), (int)op->mel_scale);
    double top = (double)(op->sample_rate / 2);
    for (int64_t m = 0; m < nm; m++) {
        double enorm = op->mel_norm ? 2.0 / (fp[m + 2] - fp[m]) : 1.0;
        int32_t lo = -1, hi = -1;
        for (int64_t f = 0; f < nf; f++) {
            double hz = nf == 1 ? 0.0 : top * (double)f / (double)(nf - 1);
            double down = (fp[m] - hz) * -1.0 / (fp[m + 1] - fp[m]);
            double up = (fp[m + 2] - hz) / (fp[m + 2] - fp[m + 1]);
            double v = STK_MAX(0.0, STK_MIN(down, up)) * enorm;
            s->fb[m * nf + f] = (float)v;
            if (v > 0.0) {
                lo = lo < 0 ? (int32_t)f : lo;
                hi = (int32_t)f;
            }
        }
        s->mlo[m] = lo < 0 ? 0 : lo;
        s->mn[m] = lo < 0 ? 0 : hi - lo + 1;
    }
    stk__free(fp);
    return STK_OK;
}

/* create_dct(n_mfcc, n_mels, norm), in float32 as torchaudio computes it. */
static stk_status make_dct(const stk_op *op, stk__spec *s, char *err, size_t err_size)
{
    int64_t nm = s->n_mels, nk = s->n_mfcc;
    s->dct = stk__calloc((size_t)(nm * nk), sizeof(float));
    if (!s->dct)
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for a DCT matrix");
    float a = (float)(M_PI / (double)nm);
    for (int64_t k = 0; k < nk; k++)
        for (int64_t m = 0; m < nm; m++) {
            float v = cosf(a * ((float)m + 0.5f) * (float)k);
            if (!op->dct_norm)
                v *= 2.0f;
            else
                v = (k == 0 ? v * (float)(1.0 / sqrt(2.0)) : v) * (float)sqrt(2.0 / (double)nm);
            s->dct[k * nm + m] = v;
        }
    return STK_OK;
}

void stk__spec_free(stk__spec *s)
{
    if (!s)
        return;
#ifdef STK_HAVE_FFTW
    if (s->plan) {
        pthread_mutex_lock(&planner_mu);
        fftwf_destroy_plan(s->plan);
        pthread_mutex_unlock(&planner_mu);
    }
#endif
    stk__free(s->window);
    stk__free(s->fb);
    stk__free(s->mlo);
    stk__free(s->mn);
    stk__free(s->dct);
    memset(s, 0, sizeof(*s));
}

stk_status stk__spec_compile(const stk_op *op, int64_t len, stk__spec *s, char *err,
                             size_t err_size)
{
    stk_status rc = STK_OK;
    memset(s, 0, sizeof(*s));
    const char *name = stk_op_name(op->kind);
#ifndef STK_HAVE_FFTW
    (void)len;
    return stk__set_error(err, err_size, STK_ENOTSUP,
                          "%s: stoker was built without libfftw3f (install libfftw3-dev and "
                          "rebuild)",
                          name);
#else
    s->kind = op->kind;
    s->n_fft = op->n_fft;
    s->win = op->win_length ? op->win_length : op->n_fft;
    s->hop = op->hop_length ? op->hop_length : s->win / 2;
    s->pad = op->pad;
    s->center = op->stft_center != 0;
    s->onesided = op->onesided != 0;
    s->pad_mode = (int)op->pad_mode;
    s->power = op->power;
    s->n_freq = s->onesided ? s->n_fft / 2 + 1 : s->n_fft;
    int64_t padded = len + 2 * s->pad;
    if (s->center && s->pad_mode == 0 && s->n_fft / 2 >= padded)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "%s: its input of %lld samples is too short for reflect padding of "
                              "n_fft / 2 = %lld (torch refuses it too)",
                              name, (long long)padded, (long long)(s->n_fft / 2));
    s->frames = stk__spec_frames(s, len);
    if (s->frames < 1)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "%s: its input of %lld samples is shorter than n_fft = %lld", name,
                              (long long)len, (long long)s->n_fft);
    s->window = stk__calloc((size_t)s->n_fft, sizeof(float));
    float *w = stk__calloc((size_t)s->win, sizeof(float));
    if (!s->window || !w) {
        stk__free(w);
        STK_FAIL_SIZED(err, err_size, STK_ENOMEM, "out of memory for a window");
    }
    make_window((int)op->window, op->periodic != 0, s->win, w);
    double sq = 0.0;
    for (int64_t i = 0; i < s->win; i++)
        sq += (double)w[i] * (double)w[i];
    int64_t left = (s->n_fft - s->win) / 2; /* torch.stft centres a shorter window */
    memcpy(s->window + left, w, (size_t)s->win * sizeof(float));
    stk__free(w);
    s->norm = op->normalized == 1   ? (float)(1.0 / sqrt(sq))
              : op->normalized == 2 ? (float)(1.0 / sqrt((double)s->n_fft))
                                    : 1.0f;
    s->bins = s->n_freq;
    if (op->kind == STK_OP_MEL_SPECTROGRAM || op->kind == STK_OP_MFCC) {
        s->n_mels = op->n_mels;
        STK_TRY(make_fbank(op, s, err, err_size));
        s->bins = s->n_mels;
    }
    if (op->kind == STK_OP_MFCC) {
        s->n_mfcc = op->n_mfcc;
        s->log_mels = op->log_mels != 0;
        s->top_db = op->top_db;
        STK_TRY(make_dct(op, s, err, err_size));
        s->bins = s->n_mfcc;
    }
    pthread_mutex_lock(&planner_mu);
    float *in = fftwf_malloc(sizeof(float) * (size_t)s->n_fft);
    fftwf_complex *out = fftwf_malloc(sizeof(fftwf_complex) * (size_t)(s->n_fft / 2 + 1));
    if (in && out)
        s->plan = fftwf_plan_dft_r2c_1d((int)s->n_fft, in, out, FFTW_ESTIMATE);
    fftwf_free(in);
    fftwf_free(out);
    pthread_mutex_unlock(&planner_mu);
    if (!s->plan)
        STK_FAIL_SIZED(err, err_size, STK_ENOMEM, "%s: FFTW cannot plan a transform of %lld", name,
                       (long long)s->n_fft);
    return STK_OK;
fail:
    stk__spec_free(s);
    return rc;
#endif
}

stk_status stk__specwork_init(stk__specwork *w, const stk__spec *s, size_t mel_values, char *err,
                              size_t err_size)
{
    memset(w, 0, sizeof(*w));
#ifdef STK_HAVE_FFTW
    w->in = fftwf_malloc(sizeof(float) * (size_t)s->n_fft);
    w->out = fftwf_malloc(sizeof(fftwf_complex) * (size_t)(s->n_fft / 2 + 1));
#endif
    /* The Spectrogram writes its spectra straight into its output */
    size_t pw = s->kind == STK_OP_SPECTROGRAM ? 1 : (size_t)(s->n_freq * s->frames);
    w->pw = stk__calloc(pw, sizeof(float));
    if (mel_values && !(w->mel = stk__calloc(mel_values, sizeof(float))))
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for a mel spectrogram");
    w->mel_cap = mel_values;
    if (!w->in || !w->out || !w->pw)
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for FFT buffers");
    return STK_OK;
}

void stk__specwork_free(stk__specwork *w)
{
#ifdef STK_HAVE_FFTW
    fftwf_free(w->in);
    fftwf_free(w->out);
#endif
    stk__free(w->pw);
    stk__free(w->mel);
    memset(w, 0, sizeof(*w));
}

void stk__amplitude_to_db(float *x, size_t n, float multiplier, double top_db)
{
    float mx = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        x[i] = multiplier * log10f(x[i] > 1e-10f ? x[i] : 1e-10f);
        mx = x[i] > mx ? x[i] : mx;
    }
    if (isnan(top_db))
        return;
    float floor_db = mx - (float)top_db;
    for (size_t i = 0; i < n; i++)
        x[i] = x[i] < floor_db ? floor_db : x[i];
}

#ifdef STK_HAVE_FFTW
/* Sample q of a channel after the zero `pad` and the centre padding (pad_mode), for q in the
 * centre-padded coordinates minus n_fft / 2 (so 0 is the first sample of the zero-padded input
 * of n samples). */
static inline float padded_at(const float *x, int64_t len, int64_t pad, int mode, int64_t n,
                              int64_t q)
{
    if (q < 0 || q >= n) {
        switch (mode) {
        case 1: /* constant */
            return 0.0f;
        case 2: /* replicate */
            q = q < 0 ? 0 : n - 1;
            break;
        case 3: /* circular */
            q = ((q % n) + n) % n;
            break;
        default: /* reflect (no edge repeat), the input longer than the padding */
            q = q < 0 ? -q : 2 * (n - 1) - q;
        }
    }
    q -= pad;
    return q >= 0 && q < len ? x[q] : 0.0f;
}

/* One channel's power (or magnitude) spectrum of frame t into column t of col ([n_freq, T]; the
 * complex spectrum, [n_freq, T, 2], for power 0, None). */
static void frame_spectrum(const stk__spec *s, stk__specwork *w, const float *x, int64_t len,
                           int64_t t, float *col, int64_t T)
{
    int64_t n = len + 2 * s->pad, half = s->center ? s->n_fft / 2 : 0;
    int64_t q0 = t * s->hop - half;
    const float *win = s->window;
    float *in = w->in;
    if (q0 >= s->pad && q0 - s->pad + s->n_fft <= len) { /* inside the signal: no padding */
        const float *p = x + (q0 - s->pad);
        for (int64_t j = 0; j < s->n_fft; j++)
            in[j] = p[j] * win[j];
    } else {
        for (int64_t j = 0; j < s->n_fft; j++)
            in[j] = padded_at(x, len, s->pad, s->pad_mode, n, q0 + j) * win[j];
    }
    fftwf_execute_dft_r2c(s->plan, in, (fftwf_complex *)w->out);
    int64_t nh = s->n_fft / 2 + 1;
    const float *X = w->out;
    float nrm = s->norm, *pw = w->in; /* |X|^2 (the FFT's input is spent) */
    if (s->power == 0.0) {            /* None: X itself, (real, imaginary) at col[2 (k T + t)] */
        for (int64_t k = 0; k < s->n_freq; k++) { /* two-sided: X[n - k] = conj(X[k]) */
            int64_t j = k < nh ? k : s->n_fft - k;
            col[2 * (k * T + t)] = X[2 * j] * nrm;
            col[2 * (k * T + t) + 1] = (k < nh ? X[2 * j + 1] : -X[2 * j + 1]) * nrm;
        }
        return;
    }
    for (int64_t k = 0; k < nh; k++) {
        float re = X[2 * k] * nrm, im = X[2 * k + 1] * nrm;
        pw[k] = re * re + im * im;
    }
    if (s->power == 1.0) {
        for (int64_t k = 0; k < nh; k++)
            pw[k] = sqrtf(pw[k]);
    } else if (s->power != 2.0) {
        for (int64_t k = 0; k < nh; k++)
            pw[k] = powf(sqrtf(pw[k]), (float)s->power);
    }
    for (int64_t k = 0; k < s->n_freq; k++) /* two-sided: |X[n - k]| = |X[k]| */
        col[k * T + t] = pw[k < nh ? k : s->n_fft - k];
}
#endif

stk_status stk__spec_run(const stk__spec *s, stk__specwork *w, const float *const *x,
                         uint32_t channels, int64_t len, float *dst, char *err, size_t err_size)
{
#ifndef STK_HAVE_FFTW
    (void)s, (void)w, (void)x, (void)channels, (void)len, (void)dst;
    return stk__set_error(err, err_size, STK_ENOTSUP, "stoker was built without libfftw3f");
#else
    int64_t T = stk__spec_frames(s, len), nf = s->n_freq, nm = s->n_mels;
    bool mfcc = s->kind == STK_OP_MFCC;
    float *mel = mfcc ? w->mel : dst; /* MFCC: the mel spectrogram first, for its dB over all */
    if (T > s->frames || (mfcc && w->mel_cap < (size_t)channels * (size_t)(nm * T)))
        return stk__set_error(err, err_size, STK_EINVAL, "spectrogram scratch too small");
    for (uint32_t c = 0; c < channels; c++) {
        if (s->kind == STK_OP_SPECTROGRAM) {
            for (int64_t t = 0; t < T; t++)
                frame_spectrum(s, w, x[c], len, t,
                               dst + (size_t)c * (size_t)(nf * T * (s->power == 0.0 ? 2 : 1)), T);
            continue;
        }
        for (int64_t t = 0; t < T; t++)
            frame_spectrum(s, w, x[c], len, t, w->pw, T);
        /* Mel m of each frame: its bins in order, all frames at once */
        float *oc = mel + (size_t)c * (size_t)(nm * T);
        for (int64_t m = 0; m < nm; m++) {
            const float *fb = s->fb + m * nf + s->mlo[m];
            float *o = oc + m * T;
            for (int64_t t = 0; t < T; t++)
                o[t] = 0.0f;
            for (int32_t j = 0; j < s->mn[m]; j++) {
                const float f = fb[j], *row = w->pw + (s->mlo[m] + j) * T;
                for (int64_t t = 0; t < T; t++)
                    o[t] += f * row[t];
            }
        }
    }
    if (!mfcc)
        return STK_OK;
    size_t n_mel = (size_t)channels * (size_t)(nm * T);
    if (s->log_mels) {
        for (size_t i = 0; i < n_mel; i++)
            mel[i] = logf(mel[i] + 1e-6f);
    } else {
        stk__amplitude_to_db(mel, n_mel, 10.0f, s->top_db);
    }
    for (uint32_t c = 0; c < channels; c++) { /* (T, n_mels) x (n_mels, n_mfcc), transposed */
        const float *mc = mel + (size_t)c * (size_t)(nm * T);
        float *oc = dst + (size_t)c * (size_t)(s->n_mfcc * T);
        for (int64_t k = 0; k < s->n_mfcc; k++) {
            const float *d = s->dct + k * nm;
            float *o = oc + k * T;
            for (int64_t t = 0; t < T; t++)
                o[t] = 0.0f;
            for (int64_t m = 0; m < nm; m++) {
                float dv = d[m];
                const float *row = mc + m * T;
                for (int64_t t = 0; t < T; t++)
                    o[t] += row[t] * dv;
            }
        }
    }
    return STK_OK;
#endif
}
