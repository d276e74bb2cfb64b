/*
 * stk_audio_resample.c: torchaudio's Resample (band-limited windowed-sinc interpolation,
 * torchaudio.transforms.Resample of 0.13: "sinc_interpolation", now "sinc_interp_hann", and
 * "kaiser_window"), with the same kernel and the same output length, computed sparsely.
 *
 * torchaudio reduces the rates by their gcd (44100 -> 16000: orig 441, new 160), builds a kernel
 * of `new` phases of 2 * width + orig taps, pads the input with `width` zeros before and
 * width + orig after, and runs conv1d with stride orig: output k = phase k % new over the input
 * from (k / new) * orig - width. Most taps are the window's zeros (t clamped to the filter's
 * width: 475 taps a phase at 44.1 -> 16 kHz, 34 of them non-zero), so each phase keeps only its
 * non-zero run and the dot product is 14 times shorter than torchaudio's conv1d. The weights are
 * computed exactly as torchaudio does (float64: t = (-i / new as float32) + (j - width) / orig,
 * times base_freq, clamped; window cos^2(t pi / lpw / 2) or the Kaiser window; sinc; times
 * base_freq / orig; then rounded to float32), so the kernels are identical; the sums differ from
 * conv1d's only in float summation order (within 1e-6 of full scale,
 * python/tests/test_audio.py).
 *
 * Threads: a resampler is immutable after make and may be shared.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include "xform/stk_audio.h"

#include <math.h>
#include <string.h>

#define MAX_WEIGHTS (64ll << 20) /* 256 MB of kernel: rates with no useful common divisor */
#define KAISER_BETA 14.769656459379492

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* The modified Bessel function of the first kind, order 0 (torch.i0), by its power series. */
static double bessel_i0(double x)
{
    double sum = 1.0, term = 1.0, q = x * x / 4.0;
    for (int k = 1; k < 500; k++) {
        term *= q / ((double)k * (double)k);
        sum += term;
        if (term < sum * 1e-17)
            break;
    }
    return sum;
}

bool stk__resampler_is(const stk__resampler *r, int64_t orig_freq, int64_t new_freq,
                       const stk_op *op)
{
    return r->orig_freq == orig_freq && r->new_freq == new_freq &&
           r->lpw == op->lowpass_filter_width && r->method == op->resampling_method &&
           r->rolloff == op->rolloff &&
           (r->beta == op->beta || (isnan(r->beta) && isnan(op->beta)));
}

void stk__resampler_free(stk__resampler *r)
{
    if (!r)
        return;
    stk__free(r->j0);
    stk__free(r->nt);
    stk__free(r->w);
    stk__free(r);
}

/* The dot product of n weights with n samples in eight running sums, lane l taking the products
 * j = l mod 8, summed as ((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7)): a fixed order, the
 * same result on every call and in both versions below (AVX2: lane l of one vector; the tail's
 * missing lanes add 0 x 0). */
static float dot_lanes(const float *w, const float *x, int32_t n)
{
    float s[8] = {0};
    int32_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int32_t l = 0; l < 8; l++)
            s[l] += w[j + l] * x[j + l];
    for (int32_t l = 0; j < n && l < 8; l++)
        s[l] += j + l < n ? w[j + l] * x[j + l] : 0.0f * 0.0f;
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

/* Outputs [a, b): output k is phase k % new, over the input from (k / new) * orig - width. */
#define RESAMPLE_LOOP(dot)                                                                         \
    do {                                                                                           \
        int64_t blk = a / r->new_, i = a % r->new_;                                                \
        for (int64_t k = a; k < b; k++) {                                                          \
            int64_t x0 = blk * r->orig - r->width + r->j0[i];                                      \
            out[k - a] = dot(r->w + i * r->stride, in + (x0 - in_a), r->nt[i]);                    \
            if (++i == r->new_) {                                                                  \
                i = 0;                                                                             \
                blk++;                                                                             \
            }                                                                                      \
        }                                                                                          \
    } while (0)

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

__attribute__((target("avx2"), always_inline)) static inline float
dot_avx2(const float *w, const float *x, int32_t n)
{
    static const int32_t ones[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    __m256 acc = _mm256_setzero_ps();
    int32_t j = 0;
    for (; j + 8 <= n; j += 8)
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(w + j), _mm256_loadu_ps(x + j)));
    if (j < n) { /* the last n - j lanes, the others 0 x 0, nothing read past the ends */
        __m256i m = _mm256_loadu_si256((const __m256i *)(const void *)(ones + 8 - (n - j)));
        acc = _mm256_add_ps(
            acc, _mm256_mul_ps(_mm256_maskload_ps(w + j, m), _mm256_maskload_ps(x + j, m)));
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
}

__attribute__((target("avx2"))) static void run_avx2(const stk__resampler *r, const float *in,
                                                     int64_t in_a, int64_t a, int64_t b, float *out)
{
    RESAMPLE_LOOP(dot_avx2);
}

static bool have_avx2(void)
{
    return __builtin_cpu_supports("avx2");
}
#else
static bool have_avx2(void)
{
    return false;
}
#endif

stk_status stk__resampler_make(int64_t orig_freq, int64_t new_freq, const stk_op *op,
                               stk__resampler **out, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    *out = NULL;
    stk__resampler *r = stk__calloc(1, sizeof(*r));
    if (!r)
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for a resampler");
    r->orig_freq = orig_freq;
    r->new_freq = new_freq;
    r->lpw = op->lowpass_filter_width;
    r->method = op->resampling_method;
    r->rolloff = op->rolloff;
    r->beta = op->beta;
    r->avx2 = have_avx2();
    int64_t g = gcd64(orig_freq, new_freq);
    int64_t orig = orig_freq / g, nw = new_freq / g, lpw = r->lpw;
    r->orig = orig;
    r->new_ = nw;
    double base = (double)STK_MIN(orig, nw) * op->rolloff; /* torchaudio's base_freq */
    r->width = (int64_t)ceil((double)(lpw * orig) / base);
    double beta = isnan(op->beta) ? KAISER_BETA : op->beta, i0beta = bessel_i0(beta);
    double scale = base / (double)orig;
    /* Phase i's taps j have |t| < lpw around j = width + i * orig / new (half-width
     * lpw * orig / base): at most 2 * width + 2 of them. */
    int64_t stride = 2 * r->width + 2;
    if (stride > INT32_MAX || nw > MAX_WEIGHTS / stride)
        STK_FAIL_SIZED(err, err_size, STK_ELIMIT,
                       "Resample(%lld, %lld): a kernel of %lld phases of %lld taps is too large "
                       "(the rates share no useful divisor)",
                       (long long)orig_freq, (long long)new_freq, (long long)nw, (long long)stride);
    r->stride = (int32_t)stride;
    r->j0 = stk__calloc((size_t)nw, sizeof(int32_t));
    r->nt = stk__calloc((size_t)nw, sizeof(int32_t));
    r->w = stk__calloc((size_t)(nw * stride), sizeof(float));
    if (!r->j0 || !r->nt || !r->w)
        STK_FAIL_SIZED(err, err_size, STK_ENOMEM, "out of memory for a resampling kernel");
    int64_t klen = 2 * r->width + orig;
    for (int64_t i = 0; i < nw; i++) {
        /* torchaudio: torch.arange(0, -new, -1) / new, an int64 tensor divided in float32 */
        double phase = (double)((float)(-i) / (float)nw);
        double centre = (double)r->width + (double)(i * orig) / (double)nw;
        double half = (double)lpw * (double)orig / base;
        int64_t lo = STK_MAX((int64_t)0, (int64_t)floor(centre - half) - 1);
        int64_t hi = STK_MIN(klen, (int64_t)ceil(centre + half) + 2);
        int32_t first = -1, n = 0;
        for (int64_t j = lo; j < hi; j++) {
            double t = (phase + (double)(j - r->width) / (double)orig) * base;
            if (!(t > -(double)lpw && t < (double)lpw))
                continue; /* clamped to the width: the window's zero (< 1e-20 in torchaudio) */
            double window;
            if (r->method == 0) {
                double c = cos(t * M_PI / (double)lpw / 2.0);
                window = c * c;
            } else {
                double u = t / (double)lpw;
                window = bessel_i0(beta * sqrt(1.0 - u * u)) / i0beta;
            }
            double tp = t * M_PI;
            double k = tp == 0.0 ? 1.0 : sin(tp) / tp;
            k *= window * scale;
            if (first < 0)
                first = (int32_t)j;
            r->w[i * stride + (j - first)] = (float)k;
            n = (int32_t)(j - first + 1);
        }
        r->j0[i] = first < 0 ? 0 : first;
        r->nt[i] = n;
    }
    *out = r;
    return STK_OK;
fail:
    stk__resampler_free(r);
    return rc;
}

int64_t stk__resampler_len(const stk__resampler *r, int64_t len)
{
    /* torchaudio: int(math.ceil(new * length / orig)); exact in integers */
    return (r->new_ * len + r->orig - 1) / r->orig;
}

void stk__resampler_need(const stk__resampler *r, int64_t a, int64_t b, int64_t *ia, int64_t *ib)
{
    *ia = (a / r->new_) * r->orig - r->width;
    *ib = ((b - 1) / r->new_) * r->orig - r->width + 2 * r->width + r->orig;
}

void stk__resampler_run(const stk__resampler *r, const float *in, int64_t in_a, int64_t a,
                        int64_t b, float *out)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (r->avx2) {
        run_avx2(r, in, in_a, a, b, out);
        return;
    }
#endif
    RESAMPLE_LOOP(dot_lanes);
}
