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
 * non-zero run and the work is 14 times less than torchaudio's conv1d. The weights are
 * computed exactly as torchaudio does (float64: t = (-i / new as float32) + (j - width) / orig,
 * times base_freq, clamped; window cos^2(t pi / lpw / 2) or the Kaiser window; sinc; times
 * base_freq / orig; then rounded to float32), so the kernels are identical; the sums differ from
 * conv1d's only in float summation order and fused multiply-adds (within 1e-6 of full scale,
 * python/tests/test_audio.py). They run eight outputs at a time (below).
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
    stk__free(r->g_s);
    stk__free(r->g_len);
    stk__free(r->g_at);
    stk__free(r->gw);
    stk__free(r);
}

/* ---- running it: eight consecutive outputs at a time ----
 *
 * Outputs k .. k + 7 of one block (the `new` outputs of `orig` inputs: phases 8g .. 8g + 7,
 * group g) read overlapping runs of the input: their union, L_g inputs from s_g, times a matrix
 * of L_g rows of 8 weights (each phase's taps in its column, zeros around them), gives the eight
 * outputs at once, each input sample broadcast to the eight lanes: no horizontal sums, one
 * vector store. Every block has the same groups, so up to BLOCKS blocks share each row of
 * weights. Lane l's sum is fixed: taps t = 0, 2, 4, ... fused-multiply-added into one sum, the
 * odd ones into another, then the two added; the AVX2 + FMA version (lanes of one vector) and the
 * portable one (fmaf) give the same bits, whatever the blocks run together. */

#define LANES 8
#define BLOCKS 4

static void group_portable(const float *gw, int32_t L, const float *const *x, float *const *out,
                           int nb)
{
    for (int b = 0; b < nb; b++) {
        float e[LANES] = {0}, o[LANES] = {0};
        for (int32_t t = 0; t < L; t++) {
            float *acc = t & 1 ? o : e;
            for (int l = 0; l < LANES; l++)
                acc[l] = fmaf(x[b][t], gw[t * LANES + l], acc[l]);
        }
        for (int l = 0; l < LANES; l++)
            out[b][l] = e[l] + o[l];
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

__attribute__((target("avx2,fma"), always_inline)) static inline void
group_avx2_n(const float *gw, int32_t L, const float *const *x, float *const *out, int nb)
{
    __m256 e[BLOCKS], o[BLOCKS];
    for (int b = 0; b < nb; b++)
        e[b] = o[b] = _mm256_setzero_ps();
    int32_t t = 0;
    for (; t + 2 <= L; t += 2) {
        __m256 w0 = _mm256_loadu_ps(gw + t * LANES), w1 = _mm256_loadu_ps(gw + (t + 1) * LANES);
        for (int b = 0; b < nb; b++) {
            e[b] = _mm256_fmadd_ps(_mm256_broadcast_ss(x[b] + t), w0, e[b]);
            o[b] = _mm256_fmadd_ps(_mm256_broadcast_ss(x[b] + t + 1), w1, o[b]);
        }
    }
    if (t < L) {
        __m256 w0 = _mm256_loadu_ps(gw + t * LANES);
        for (int b = 0; b < nb; b++)
            e[b] = _mm256_fmadd_ps(_mm256_broadcast_ss(x[b] + t), w0, e[b]);
    }
    for (int b = 0; b < nb; b++)
        _mm256_storeu_ps(out[b], _mm256_add_ps(e[b], o[b]));
}

__attribute__((target("avx2,fma"))) static void
group_avx2(const float *gw, int32_t L, const float *const *x, float *const *out, int nb)
{
    if (nb == BLOCKS)
        group_avx2_n(gw, L, x, out, BLOCKS); /* the common case, unrolled */
    else
        group_avx2_n(gw, L, x, out, nb);
}

static bool have_avx2(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
static bool have_avx2(void)
{
    return false;
}
#endif

/* Group g of nb blocks whose inputs start at x[b] (the group's first input) into out[b][0..8). */
static void run_group(const stk__resampler *r, int64_t g, const float *const *x, float *const *out,
                      int nb)
{
    const float *gw = r->gw + r->g_at[g];
#if defined(__x86_64__) && defined(__GNUC__)
    if (r->avx2) {
        group_avx2(gw, r->g_len[g], x, out, nb);
        return;
    }
#endif
    group_portable(gw, r->g_len[g], x, out, nb);
}

/* Phase v of a super-block (blocks of fewer than 8 phases are taken 8 / gcd(new, 8) at a time,
 * so a group holds 8 outputs): its first tap, relative to the super-block's first input. */
static int64_t vphase_j0(const stk__resampler *r, int64_t v)
{
    return (v / r->new_) * r->orig + r->j0[v % r->new_];
}

/* Lay the sparse phases out as groups (r->g_*, r->gw); STK_ELIMIT past MAX_WEIGHTS. */
static stk_status make_groups(stk__resampler *r, char *err, size_t err_size)
{
    r->sb = r->new_ >= LANES ? 1 : LANES / gcd64(r->new_, LANES);
    int64_t nv = r->sb * r->new_, ng = (nv + LANES - 1) / LANES, total = 0;
    r->n_groups = ng;
    r->g_s = stk__calloc((size_t)ng, sizeof(int32_t));
    r->g_len = stk__calloc((size_t)ng, sizeof(int32_t));
    r->g_at = stk__calloc((size_t)ng, sizeof(int64_t));
    if (!r->g_s || !r->g_len || !r->g_at)
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for a resampling kernel");
    for (int64_t g = 0; g < ng; g++) {
        int64_t lo = INT64_MAX, hi = 0;
        for (int64_t v = g * LANES; v < STK_MIN(nv, (g + 1) * LANES); v++)
            if (r->nt[v % r->new_] > 0) {
                lo = STK_MIN(lo, vphase_j0(r, v));
                hi = STK_MAX(hi, vphase_j0(r, v) + r->nt[v % r->new_]);
            }
        r->g_s[g] = lo == INT64_MAX ? 0 : (int32_t)lo;
        r->g_len[g] = lo == INT64_MAX ? 0 : (int32_t)(hi - lo);
        r->g_at[g] = total;
        total += (int64_t)r->g_len[g] * LANES;
        if (total > MAX_WEIGHTS)
            return stk__set_error(err, err_size, STK_ELIMIT,
                                  "Resample(%lld, %lld): a kernel of %lld phases is too large "
                                  "(the rates share no useful divisor)",
                                  (long long)r->orig_freq, (long long)r->new_freq,
                                  (long long)r->new_);
    }
    if (!(r->gw = stk__calloc((size_t)(total > 0 ? total : 1), sizeof(float))))
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for a resampling kernel");
    for (int64_t v = 0; v < nv; v++) {
        int64_t g = v / LANES, i = v % r->new_;
        float *col = r->gw + r->g_at[g] + v % LANES;
        for (int32_t j = 0; j < r->nt[i]; j++)
            col[(vphase_j0(r, v) - r->g_s[g] + j) * LANES] = r->w[i * r->stride + j];
    }
    return STK_OK;
}

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
    STK_TRY(make_groups(r, err, err_size));
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

/* Output lane v of group g alone (a group whose other outputs are outside the range asked for,
 * whose inputs may not be there): only its own taps, each summed into the even or odd sum by its
 * row in the group, as the group's vector does (its other rows are zero weights, which add
 * nothing); `x` is the super-block's first input. */
static float run_lane(const stk__resampler *r, int64_t g, int64_t v, const float *x)
{
    int64_t i = v % r->new_, j0 = vphase_j0(r, v);
    const float *w = r->w + i * r->stride;
    float e = 0.0f, o = 0.0f;
    for (int32_t j = 0; j < r->nt[i]; j++) {
        int64_t t = j0 - r->g_s[g] + j;
        if (t & 1)
            o = fmaf(x[j0 + j], w[j], o);
        else
            e = fmaf(x[j0 + j], w[j], e);
    }
    return e + o;
}

void stk__resampler_run(const stk__resampler *r, const float *in, int64_t in_a, int64_t a,
                        int64_t b, float *out)
{
    /* super-blocks of NW outputs from ORIG inputs */
    int64_t NW = r->sb * r->new_, ORIG = r->sb * r->orig, blk = a / NW, last = (b - 1) / NW;
    float tmp[BLOCKS][LANES];
    while (blk <= last) {
        int64_t k0 = blk * NW;
        int nb = 1; /* super-blocks run together: whole ones inside [a, b) */
        bool whole = k0 >= a && k0 + NW <= b;
        while (whole && nb < BLOCKS && (blk + nb + 1) * NW <= b)
            nb++;
        /* the groups of this super-block that [a, b) reaches */
        int64_t g0 = (STK_MAX(a, k0) - k0) / LANES, g1 = (STK_MIN(b, k0 + NW) - 1 - k0) / LANES;
        for (int64_t g = g0; g <= g1; g++) {
            int64_t v0 = g * LANES, v1 = STK_MIN(v0 + LANES, NW); /* its outputs */
            if (k0 + v0 < a || k0 + v1 > b) { /* partly outside [a, b): lane by lane */
                const float *x = in + (k0 / r->new_ * r->orig - r->width - in_a);
                for (int64_t v = v0; v < v1; v++)
                    if (k0 + v >= a && k0 + v < b)
                        out[k0 + v - a] = run_lane(r, g, v, x);
                continue;
            }
            const float *x[BLOCKS];
            float *o[BLOCKS];
            bool direct = v1 - v0 == LANES;
            for (int j = 0; j < nb; j++) {
                x[j] = in + ((blk + j) * ORIG - r->width + r->g_s[g] - in_a);
                o[j] = direct ? out + ((blk + j) * NW + v0 - a) : tmp[j];
            }
            run_group(r, g, x, o, nb);
            for (int j = 0; !direct && j < nb; j++)
                memcpy(out + ((blk + j) * NW + v0 - a), tmp[j], (size_t)(v1 - v0) * sizeof(float));
        }
        blk += nb;
    }
}
