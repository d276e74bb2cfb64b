/*
 * audio_ops.c: the CPU time of the audio ops on one second of output, one thread: the resampler
 * (AVX2 dot products where the CPU has them, and the portable ones that give the same bits),
 * the Spectrogram and the MelSpectrogram of the keyword-spotting recipe (bench/bench_audio.py).
 * Each figure is the least of ROUNDS rounds of 10 calls, the variants interleaved round by
 * round, in thread CPU time (the machine is shared: the least is the one least disturbed).
 *
 *   cc -O2 -Iinclude -Isrc -DSTK_BUILDING_BLOCKS -DSTK_HAVE_FFTW -o build/audio_ops \
 *       bench/audio_ops.c build/libstoker.a $(LIBS)  # LIBS: the unit tests' link line
 *   build/audio_ops [ROUNDS]           -> one line per op: "us per 1 s of output"
 */
#include "xform/stk_audio.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Resample orig -> 16 kHz, 1 s of output: the AVX2 and the portable dot products. */
static int resample(int64_t orig, int rounds)
{
    stk_op op;
    stk_op_init(&op, STK_OP_RESAMPLE);
    stk__resampler *r;
    char err[256];
    if (stk__resampler_make(orig, 16000, &op, &r, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int64_t ia, ib;
    stk__resampler_need(r, 0, 16000, &ia, &ib);
    float *in = calloc((size_t)(ib - ia), sizeof(float)), *out = malloc(16000 * sizeof(float));
    for (int64_t i = 0; i < ib - ia; i++)
        in[i] = 0.5f * sinf(0.01f * (float)i);
    bool avx2 = r->avx2;
    double best[2] = {1e9, 1e9};
    for (int k = 0; k < rounds; k++)
        for (int v = 0; v < 2; v++) {
            r->avx2 = v == 0 && avx2;
            double c0 = cpu_s();
            for (int i = 0; i < 10; i++)
                stk__resampler_run(r, in, ia, 0, 16000, out);
            best[v] = fmin(best[v], (cpu_s() - c0) / 10);
        }
    printf("Resample(%lld, 16000): %.1f us %s, %.1f us portable (%d taps a phase)\n",
           (long long)orig, best[0] * 1e6, avx2 ? "AVX2" : "portable (no AVX2 here)", best[1] * 1e6,
           r->nt[0]);
    stk__resampler_free(r);
    free(in);
    free(out);
    return 0;
}

/* A spectrum op on 1 s at 16 kHz, mono. */
static int spectrum(stk_op_kind kind, int rounds)
{
#ifndef STK_HAVE_FFTW
    (void)kind, (void)rounds;
    printf("%s: built without libfftw3f\n", stk_op_name(kind));
    return 0;
#else
    stk_op op;
    stk_op_init(&op, kind);
    op.sample_rate = 16000;
    op.n_mels = 64;
    stk__spec s;
    stk__specwork w;
    char err[256];
    if (stk__spec_compile(&op, 16000, &s, err, sizeof(err)) < 0 ||
        stk__specwork_init(&w, &s, 0, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    float *x = malloc(16000 * sizeof(float)),
          *dst = malloc(sizeof(float) * (size_t)(s.bins * s.frames));
    for (int i = 0; i < 16000; i++)
        x[i] = 0.3f * sinf(0.03f * (float)i) + 0.1f * sinf(0.7f * (float)i);
    const float *planes[1] = {x};
    double best = 1e9;
    for (int k = 0; k < rounds; k++) {
        double c0 = cpu_s();
        for (int i = 0; i < 10; i++)
            stk__spec_run(&s, &w, planes, 1, 16000, dst, err, sizeof(err));
        best = fmin(best, (cpu_s() - c0) / 10);
    }
    printf("%s: %.1f us ([%lld, %lld])\n", stk_op_name(kind), best * 1e6, (long long)s.bins,
           (long long)s.frames);
    stk__specwork_free(&w);
    stk__spec_free(&s);
    free(x);
    free(dst);
    return 0;
#endif
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 60;
    if (rounds < 1)
        rounds = 1;
    return resample(44100, rounds) || resample(22050, rounds) || resample(48000, rounds) ||
           spectrum(STK_OP_SPECTROGRAM, rounds) || spectrum(STK_OP_MEL_SPECTROGRAM, rounds);
}
