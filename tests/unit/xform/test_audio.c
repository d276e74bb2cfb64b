/*
 * test_audio.c: the audio pipeline (src/xform/stk_audio*.c, stk_spectrogram.c, stk_media.c):
 * the resampler's kernel and its windowed runs, the spectrogram of known signals,
 * AmplitudeToDB, compiling and refusing op lists, and whole loaders over a .stk of WAV records
 * written here (shape, lengths, the same batches for any thread count, errors naming records),
 * with allocation failures injected in debug builds. The comparisons with torchaudio itself are
 * python/tests/test_audio.py's.
 */
#include "t.h"
#include "xform/stk_audio.h"
#include "xform/stk_media.h"

#include <math.h>

/* ---- the resampler ---- */

static int test_resampler_kernel(void)
{
    stk_op op;
    stk_op_init(&op, STK_OP_RESAMPLE);
    stk__resampler *r;
    char err[256];
    T_OK(stk__resampler_make(44100, 16000, &op, &r, err, sizeof(err)));
    /* torchaudio's reduction and width: 441 / 160, width ceil(6 * 441 / (160 * 0.99)) = 17 */
    T_EQ(r->orig, 441);
    T_EQ(r->new_, 160);
    T_EQ(r->width, 17);
    T_EQ(stk__resampler_len(r, 44100), 16000);
    T_EQ(stk__resampler_len(r, 44101), 16001); /* ceil */
    T_CHECK(stk__resampler_is(r, 44100, 16000, &op) && !stk__resampler_is(r, 48000, 16000, &op));
    /* Every phase's non-zero run: about 2 * 6 * 441 / 158.4 taps, weights summing to ~1 (the
     * filter passes DC: 0.99 rolloff times the kernel's scale gives the sum within 1%) */
    for (int64_t i = 0; i < r->new_; i++) {
        T_CHECKF(r->nt[i] >= 30 && r->nt[i] <= 36, "phase %lld: %d taps", (long long)i, r->nt[i]);
        double sum = 0.0;
        for (int32_t j = 0; j < r->nt[i]; j++)
            sum += r->w[i * r->stride + j];
        T_CHECKF(fabs(sum - 1.0) < 0.01, "phase %lld sums to %g", (long long)i, sum);
    }
    stk__resampler_free(r);
    op.new_freq = 44099; /* no common divisor: the sparse kernel still fits */
    T_OK(stk__resampler_make(44100, 44099, &op, &r, err, sizeof(err)));
    stk__resampler_free(r);
    op.lowpass_filter_width = 1024; /* 1.5 M phases of ~2000 taps */
    T_EQ(stk__resampler_make(1535999, 1536000, &op, &r, err, sizeof(err)), STK_ELIMIT);
    T_CHECKF(strstr(err, "too large"), "%s", err);
    return 0;
}

/* A sine resampled from 44.1 to 16 kHz is the same sine (away from the ends); a range of the
 * output computed alone equals that range of the whole run, bit for bit. */
static int test_resampler_runs(void)
{
    enum { N = 44100 };
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * 16000),
          *z = malloc(sizeof(float) * 16000);
    for (int i = 0; i < N; i++)
        x[i] = (float)sin(2 * M_PI * 1000.0 * i / 44100.0);
    stk_op op;
    stk_op_init(&op, STK_OP_RESAMPLE);
    stk__resampler *r;
    char err[256];
    T_OK(stk__resampler_make(44100, 16000, &op, &r, err, sizeof(err)));
    /* the whole output, reading a zero-padded copy of the input */
    int64_t ia, ib;
    stk__resampler_need(r, 0, 16000, &ia, &ib);
    T_CHECK(ia < 0 && ib > N);
    float *pad = calloc((size_t)(ib - ia), sizeof(float));
    memcpy(pad - ia, x, sizeof(float) * N);
    stk__resampler_run(r, pad, ia, 0, 16000, y);
    double worst = 0.0;
    for (int k = 200; k < 15800; k++)
        worst = fmax(worst, fabs(y[k] - sin(2 * M_PI * 1000.0 * k / 16000.0)));
    T_CHECKF(worst < 2e-3, "sine error %g", worst);
    /* outputs [5000, 6000) alone, from just the input they need */
    stk__resampler_need(r, 5000, 6000, &ia, &ib);
    T_CHECK(ia >= 0 && ib <= N && ib - ia < 3200); /* 2756 and the filter's reach */
    stk__resampler_run(r, x + ia, ia, 5000, 6000, z);
    T_CHECK(memcmp(z, y + 5000, 1000 * sizeof(float)) == 0);
    /* the AVX2 dot products (where the CPU has them) and the portable ones: the same bits, for
     * every phase's tap count (34 and 35 here: 4 x 8 and a tail) */
    bool avx2 = r->avx2;
    r->avx2 = false;
    stk__resampler_run(r, x + ia, ia, 5000, 6000, z);
    r->avx2 = avx2;
    T_CHECK(memcmp(z, y + 5000, 1000 * sizeof(float)) == 0);
    stk__resampler_free(r);
    free(pad);
    free(x);
    free(y);
    free(z);
    return 0;
}

/* Every rate pair's outputs: any range [a, b) computed alone (from just the input it needs, in a
 * buffer of exactly that size) equals that range of the whole run bit for bit, whichever
 * outputs the grouped kernel runs eight (and four blocks) at a time and which lane by lane; the
 * AVX2 + FMA groups and the portable fmaf ones give the same bits. Rates with fewer than eight
 * phases a block (48 -> 16 kHz: one) run super-blocks. */
static int test_resampler_ranges(void)
{
    static const int64_t rates[][2] = {{44100, 16000}, {48000, 16000}, {22050, 16000},
                                       {16000, 44100}, {8000, 22050},  {48000, 44100},
                                       {44100, 8000},  {24000, 16000}, {16000, 48000}};
    enum { N = 30000 };
    float *x = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++)
        x[i] = (float)(0.6 * sin(0.0137 * i) + 0.3 * sin(0.291 * i + 1.0));
    for (size_t q = 0; q < sizeof(rates) / sizeof(rates[0]); q++) {
        stk_op op;
        stk_op_init(&op, STK_OP_RESAMPLE);
        stk__resampler *r;
        char err[256];
        T_OK(stk__resampler_make(rates[q][0], rates[q][1], &op, &r, err, sizeof(err)));
        int64_t n = stk__resampler_len(r, N), ia, ib;
        stk__resampler_need(r, 0, n, &ia, &ib);
        float *pad = calloc((size_t)(ib - ia), sizeof(float)), *y = malloc(sizeof(float) * n),
              *z = malloc(sizeof(float) * n);
        memcpy(pad - ia, x, sizeof(float) * N);
        stk__resampler_run(r, pad, ia, 0, n, y);
        bool avx2 = r->avx2;
        for (int pass = 0; pass < 2; pass++) {
            r->avx2 = pass == 0 && avx2;
            uint64_t seed = 12345;
            for (int t = 0; t < 40; t++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                int64_t a = (int64_t)(seed >> 33) % n;
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                int64_t b = a + 1 + (int64_t)(seed >> 33) % STK_MIN(n - a, (int64_t)3000);
                if (t == 0)
                    a = 0, b = n;
                int64_t ja, jb;
                stk__resampler_need(r, a, b, &ja, &jb);
                float *in = malloc(sizeof(float) * (size_t)(jb - ja)); /* just what it needs */
                memcpy(in, pad + (ja - ia), sizeof(float) * (size_t)(jb - ja));
                stk__resampler_run(r, in, ja, a, b, z);
                free(in);
                T_CHECKF(memcmp(z, y + a, sizeof(float) * (size_t)(b - a)) == 0,
                         "%lld -> %lld Hz, outputs [%lld, %lld), %s", (long long)rates[q][0],
                         (long long)rates[q][1], (long long)a, (long long)b,
                         r->avx2 ? "AVX2" : "portable");
            }
        }
        r->avx2 = avx2;
        free(pad);
        free(y);
        free(z);
        stk__resampler_free(r);
    }
    free(x);
    return 0;
}

/* ---- spectrograms ---- */

static int test_spectrogram_of_a_sine(void)
{
#ifndef STK_HAVE_FFTW
    return T_SKIP; /* stoker was built without libfftw3f */
#else
    enum { L = 16000 };
    float *x = malloc(sizeof(float) * L);
    for (int i = 0; i < L; i++) /* bin 40 of a 400-point FFT at 16 kHz: 1600 Hz */
        x[i] = (float)(0.5 * sin(2 * M_PI * 1600.0 * i / 16000.0));
    stk_op op;
    stk_op_init(&op, STK_OP_SPECTROGRAM);
    stk__spec s;
    stk__specwork w;
    char err[256];
    T_OK(stk__spec_compile(&op, L, &s, err, sizeof(err)));
    T_EQ(s.n_freq, 201);
    T_EQ(s.hop, 200);
    T_EQ(stk__spec_frames(&s, L), 81); /* 1 + L // hop with centre padding */
    T_OK(stk__specwork_init(&w, &s, 0, err, sizeof(err)));
    float *out = malloc(sizeof(float) * 201 * 81);
    const float *planes[1] = {x};
    T_OK(stk__spec_run(&s, &w, planes, 1, L, out, err, sizeof(err)));
    for (int t = 2; t < 79; t++) { /* away from the reflected ends */
        int best = 0;
        for (int k = 0; k < 201; k++)
            if (out[k * 81 + t] > out[best * 81 + t])
                best = k;
        T_EQ(best, 40);
        /* |X| of a 0.5 sine under a periodic Hann window of 400: 0.5 * 400 / 4 = 50 */
        T_CHECKF(fabs(sqrt(out[40 * 81 + t]) - 50.0) < 0.01, "frame %d: %g", t,
                 sqrt(out[40 * 81 + t]));
    }
    stk__specwork_free(&w);
    stk__spec_free(&s);
    /* MelSpectrogram: energy lands in the mel band holding 1600 Hz */
    stk_op_init(&op, STK_OP_MEL_SPECTROGRAM);
    op.n_mels = 40;
    T_OK(stk__spec_compile(&op, L, &s, err, sizeof(err)));
    T_OK(stk__specwork_init(&w, &s, 0, err, sizeof(err)));
    T_OK(stk__spec_run(&s, &w, planes, 1, L, out, err, sizeof(err)));
    int best = 0;
    for (int m = 0; m < 40; m++)
        if (out[m * 81 + 40] > out[best * 81 + 40])
            best = m;
    T_CHECKF(best >= 14 && best <= 18, "mel %d", best); /* 1600 Hz = 1436 mel: bands 15-16 */
    stk__specwork_free(&w);
    stk__spec_free(&s);
    /* reflect padding needs an input longer than n_fft / 2, as torch says */
    stk_op_init(&op, STK_OP_SPECTROGRAM);
    T_EQ(stk__spec_compile(&op, 200, &s, err, sizeof(err)), STK_EINVAL);
    T_CHECKF(strstr(err, "too short for reflect padding"), "%s", err);
    free(out);
    free(x);
    return 0;
#endif
}

static int test_amplitude_to_db(void)
{
    float x[4] = {1.0f, 0.01f, 0.0f, 100.0f};
    stk__amplitude_to_db(x, 4, 10.0f, NAN);
    T_CHECK(x[0] == 0.0f && fabsf(x[1] + 20.0f) < 1e-5f && fabsf(x[2] + 100.0f) < 1e-4f &&
            fabsf(x[3] - 20.0f) < 1e-5f);
    float y[3] = {1.0f, 1e-3f, 1e-12f};
    stk__amplitude_to_db(y, 3, 20.0f, 40.0); /* magnitude, at least max - 40 dB */
    T_CHECK(y[0] == 0.0f && y[1] == -40.0f && y[2] == -40.0f);
    return 0;
}

/* ---- compiling ---- */

static stk_status make(const stk_op *ops, size_t n, uint32_t sample_rate, stk_transform **t)
{
    stk_transform_opts o;
    stk_transform_opts_init(&o);
    o.ops = ops;
    o.n_ops = n;
    o.sample_rate = sample_rate;
    o.lengths = true;
    return stk_transform_create(&o, t);
}

static int test_compile_and_refuse(void)
{
    stk_op ops[4];
    stk_transform *t;
    stk_op_init(&ops[0], STK_OP_RESAMPLE);
    ops[0].orig_freq = 44100;
    stk_op_init(&ops[1], STK_OP_AUDIO_RANDOM_CROP);
    stk_op_init(&ops[2], STK_OP_MEL_SPECTROGRAM);
    ops[2].n_mels = 64;
    stk_op_init(&ops[3], STK_OP_TIME_MASKING);
    ops[3].mask_param = 10;
    T_OK(make(ops, 4, 0, &t));
    T_EQ(stk_transform_media(t), STK_MEDIA_AUDIO);
    stk_dtype dt;
    uint32_t nd;
    int64_t shape[STK_MAX_DIMS];
    stk_transform_output(t, &dt, &nd, shape);
    T_EQ(dt, STK_DTYPE_FLOAT32);
    T_EQ(nd, 3);
    T_CHECK(shape[0] == -1 && shape[1] == 64 && shape[2] == 81); /* channels: the data's */
    stk_transform_destroy(t);
    /* Order and combination errors, each naming the op */
    static const struct {
        stk_op_kind a, b;
        const char *msg;
    } bad[] = {
        {STK_OP_MEL_SPECTROGRAM, STK_OP_VOL, "ops[1] (Vol): a waveform op after MelSpectrogram"},
        {STK_OP_SPECTROGRAM, STK_OP_MFCC, "ops[1] (MFCC): a second spectrogram op"},
        {STK_OP_AUDIO_CENTER_CROP, STK_OP_FREQUENCY_MASKING, "needs a spectrogram"},
        {STK_OP_AUDIO_PAD_TO, STK_OP_RANDOM_HORIZONTAL_FLIP,
         "ops[1] (RandomHorizontalFlip): an image op in an audio transform"},
        {STK_OP_RESIZE, STK_OP_AUDIO_PAD_TO, "ops[1] (audio.PadTo): an audio op in an image"},
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        stk_op_init(&ops[0], bad[k].a);
        stk_op_init(&ops[1], bad[k].b);
        T_EQ(make(ops, 2, 0, &t), STK_EINVAL);
        T_CHECKF(strstr(stk_last_errmsg(), bad[k].msg), "%zu: %s", k, stk_last_errmsg());
    }
    stk_op_init(&ops[0], STK_OP_RESAMPLE);
    T_EQ(make(ops, 1, 16000, &t), STK_EINVAL);
    T_CHECK(strstr(stk_last_errmsg(), "leave it out"));
    stk_transform_opts o;
    stk_transform_opts_init(&o);
    o.media = STK_MEDIA_AUDIO;
    o.dtype = STK_DTYPE_UINT8;
    T_EQ(stk_transform_create(&o, &t), STK_EINVAL);
    T_CHECK(strstr(stk_last_errmsg(), "outputs float32"));
    return 0;
}

/* ---- whole loaders over WAV records ---- */

/* A 16-bit PCM WAV of n frames, `ch` channels, at `rate`: channel c of frame i is a sine of
 * (300 + 200 c + 37 seed) Hz. */
static uint8_t *make_wav(uint32_t rate, uint16_t ch, uint32_t n, int seed, size_t *size)
{
    uint32_t data = n * ch * 2;
    uint8_t *p = malloc(44 + data);
    memcpy(p, "RIFF", 4);
    uint32_t v = 36 + data;
    memcpy(p + 4, &v, 4);
    memcpy(p + 8, "WAVEfmt ", 8);
    v = 16;
    memcpy(p + 16, &v, 4);
    uint16_t fmt[2] = {1, ch};
    memcpy(p + 20, fmt, 4);
    memcpy(p + 24, &rate, 4);
    v = rate * ch * 2;
    memcpy(p + 28, &v, 4);
    uint16_t blk[2] = {(uint16_t)(ch * 2), 16};
    memcpy(p + 32, blk, 4);
    memcpy(p + 36, "data", 4);
    memcpy(p + 40, &data, 4);
    int16_t *s = (int16_t *)(void *)(p + 44);
    for (uint32_t i = 0; i < n; i++)
        for (uint16_t c = 0; c < ch; c++)
            s[i * ch + c] =
                (int16_t)(12000 * sin(2 * M_PI * (300 + 200 * c + 37 * seed) * i / (double)rate));
    *size = 44 + data;
    return p;
}

/* A .stk of `n` records: `audio` (a WAV of 1 to 2 s, 22050 Hz mono; record `bad` cut short
 * when >= 0) and `label`. */
static int write_shard(const char *path, int n, int bad)
{
    stk_field f[2];
    stk_field_init(&f[0]);
    stk_field_init(&f[1]);
    snprintf(f[0].name, sizeof(f[0].name), "audio");
    f[0].kind = STK_FIELD_BYTES;
    snprintf(f[1].name, sizeof(f[1].name), "label");
    f[1].kind = STK_FIELD_INT64;
    stk_writer_opts wo;
    stk_writer_opts_init(&wo);
    wo.fields = f;
    wo.n_fields = 2;
    stk_writer *w;
    T_OK(stk_writer_open(path, &wo, &w));
    for (int i = 0; i < n; i++) {
        size_t size;
        uint8_t *wav = make_wav(22050, 1, 22050 + (uint32_t)i * 1000, i, &size);
        stk_value v[2];
        stk_value_init(&v[0]);
        stk_value_init(&v[1]);
        v[0].data = wav;
        v[0].size = i == bad ? size / 2 : size;
        v[1].i64 = i % 3;
        T_OK(stk_writer_add(w, v));
        free(wav);
    }
    T_OK(stk_writer_close(w));
    return 0;
}

/* Every batch's `audio` tensor of an epoch, concatenated into out (n samples of per floats). */
static stk_status run_epoch(const char *path, const stk_transform *t, int threads, float *out,
                            size_t per, int64_t *lengths)
{
    stk_loader_opts o;
    stk_loader_opts_init(&o);
    const char *paths[1] = {path};
    o.paths = paths;
    o.n_paths = 1;
    o.batch_size = 4;
    o.n_threads = threads;
    o.transform = t;
    o.seed = 5;
    o.flags = STK_LOADER_SHUFFLE;
    stk_loader *L;
    stk_status rc = stk_loader_create(&o, &L);
    if (rc < 0)
        return rc;
    stk_batch *b;
    size_t at = 0;
    while ((rc = stk_loader_next(L, &b)) == STK_OK) {
        for (size_t i = 0; i < stk_batch_n_tensors(b); i++) {
            stk_tensor x;
            stk_tensor_init(&x);
            stk_batch_tensor(b, i, &x);
            if (strcmp(x.name, "audio") != 0)
                continue;
            memcpy(out + at * per, x.data, x.size);
            if (lengths)
                memcpy(lengths + at, x.lengths, sizeof(int64_t) * (size_t)x.shape[0]);
            at += (size_t)x.shape[0];
        }
        stk_batch_release(b);
    }
    stk_loader_destroy(L);
    return rc == STK_END ? STK_OK : rc;
}

static int test_loader_batches(void)
{
    char dir[] = "/tmp/stk_audio_XXXXXX";
    T_CHECK(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof(path), "%s/a.stk", dir);
    T_OK(write_shard(path, 10, -1));
    /* Resample 22.05 -> 16 kHz, PadTo 1.5 s (records are 1 .. 1.41 s), the lengths */
    stk_op ops[2];
    stk_op_init(&ops[0], STK_OP_RESAMPLE);
    ops[0].orig_freq = 22050;
    stk_op_init(&ops[1], STK_OP_AUDIO_PAD_TO);
    ops[1].seconds = 1.5;
    stk_transform *t;
    T_OK(make(ops, 2, 0, &t));
    size_t per = 24000;
    float *a = malloc(sizeof(float) * per * 10), *b = malloc(sizeof(float) * per * 10);
    int64_t len[10];
    T_OK(run_epoch(path, t, 1, a, per, len));
    T_OK(run_epoch(path, t, 2, b, per, NULL));
    T_CHECK(memcmp(a, b, sizeof(float) * per * 10) == 0); /* any thread count */
    for (int i = 0; i < 10; i++) {                        /* 1 + k/22.05 s at 16 kHz, then zeros */
        int64_t n = len[i];
        T_CHECKF(n >= 16000 && n <= 16000 + 9 * 726 && (n - 16000) % 725 <= 9, "%lld",
                 (long long)n);
        for (size_t k = (size_t)n; k < per; k++)
            T_CHECK(a[(size_t)i * per + k] == 0.0f);
        float peak = 0.0f; /* the signal up to its length (one sample may be a zero crossing) */
        for (size_t k = (size_t)n - 200; k < (size_t)n - 20; k++)
            peak = fmaxf(peak, fabsf(a[(size_t)i * per + k]));
        T_CHECKF(peak > 0.1f, "sample %d: peak %g before its length", i, peak);
    }
    stk_transform_destroy(t);
    /* A record cut short fails naming it (WAV: from its header alone) */
    T_OK(write_shard(path, 10, 3));
    T_OK(make(ops, 2, 0, &t));
    stk_status rc = run_epoch(path, t, 2, a, per, NULL);
    T_EQ(rc, STK_EFORMAT);
    stk_transform_destroy(t);
    free(a);
    free(b);
    unlink(path);
    rmdir(dir);
    return 0;
}

#ifdef STK_DEBUG
void stk__fault_alloc_set(long n); /* src/common/stk_alloc.c, debug builds */

/* Each allocation of compiling, binding and running a sample fails in turn: STK_ENOMEM, never a
 * crash or a leak (ASan), until the run completes. */
static int test_alloc_failures(void)
{
    size_t size;
    uint8_t *wav = make_wav(44100, 2, 60000, 1, &size);
    stk_op ops[3];
    stk_op_init(&ops[0], STK_OP_RESAMPLE);
    ops[0].orig_freq = 44100;
    stk_op_init(&ops[1], STK_OP_AUDIO_RANDOM_CROP);
    stk_op_init(&ops[2], STK_OP_SPECTROGRAM);
#ifndef STK_HAVE_FFTW
    size_t n_ops = 2;
#else
    size_t n_ops = 3;
#endif
    stk_field f;
    stk_field_init(&f);
    f.kind = STK_FIELD_BYTES;
    float *out = malloc(sizeof(float) * 2 * 201 * 81 + sizeof(float) * 2 * 16000);
    char err[256];
    bool completed = false;
    int failures = 0;
    for (long n = 1; n < 400 && !completed; n++) {
        stk_transform *t = NULL, *bound = NULL;
        stk__tworker *w = NULL;
        stk__fault_alloc_set(n);
        stk_status rc = make(ops, n_ops, 0, &t);
        if (rc == STK_OK)
            rc = stk__transform_bind(t, &f, wav, size, &bound, err, sizeof(err));
        if (rc == STK_OK)
            rc = stk__transform_worker_create(bound, &w);
        if (rc == STK_OK) {
            stk_rng rng;
            stk_rng_init(&rng, 1, 0, 0);
            rc = stk__transform_apply(bound, w, wav, size, &rng, out, err, sizeof(err));
        }
        stk__fault_alloc_set(0);
        T_CHECKF(rc == STK_OK || rc == STK_ENOMEM, "allocation %ld: rc %d (%s)", n, rc, err);
        stk__transform_worker_destroy(w);
        stk_transform_destroy(bound);
        stk_transform_destroy(t);
        completed = rc == STK_OK;
        failures += rc != STK_OK;
    }
    T_CHECKF(completed && failures > 4, "%d failures", failures);
    free(out);
    free(wav);
    return 0;
}
#else
static int test_alloc_failures(void)
{
    return T_SKIP; /* needs -DSTK_DEBUG (make oom, make asan) */
}
#endif

T_MAIN(T_CASE(test_resampler_kernel), T_CASE(test_resampler_runs), T_CASE(test_resampler_ranges),
       T_CASE(test_spectrogram_of_a_sine), T_CASE(test_amplitude_to_db),
       T_CASE(test_compile_and_refuse), T_CASE(test_loader_batches), T_CASE(test_alloc_failures))
