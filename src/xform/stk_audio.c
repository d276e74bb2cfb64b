/*
 * stk_audio.c: the audio media kind (stk__media_audio): compile an audio op list, bind it to a
 * loader's data, and run one sample (stk_audio.h has the model).
 *
 * Rates. A decoded file has its own rate; a waveform array has none. Without a Resample op the
 * waveform ops run at `sample_rate` (stk_transform_opts): every file at another rate is
 * resampled to it first (torchaudio's Resample(file rate, sample_rate)); with sample_rate 0 the
 * files keep their rate, which must be the same for all (record 0's, learned at bind: a file at
 * another rate fails naming both). With a Resample op, each file is resampled from its own rate
 * (orig_freq is then only the rate of arrays), unless a crop comes first, whose length in
 * samples needs one rate. A crop's length is round(seconds * rate).
 *
 * Channels. Without a Downmix op every file must have record 0's channel count. A Downmix(1)
 * with only linear ops before it (Resample, the crops) is moved to the decode, which averages
 * the channels as it deinterleaves (the same sums up to float rounding, fewer to resample).
 *
 * Randomness, in op order from the sample's stream: audio.RandomCrop one torch.randint(0,
 * len - n + 1) when the signal is longer than n; TimeMasking/FrequencyMasking two float32
 * uniforms of 24 bits each (torch.rand(1)), per channel with iid_masks; nothing else draws.
 *
 * Threads: a compiled transform is immutable; a worker (stk__aworker) belongs to one thread.
 */
#include "xform/stk_audio.h"
#include "xform/stk_media.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#define MAX_STEPS (STK__XF_MAX_OPS + 1) /* the ops, and the implicit resample */
#define N_KERNELS 8                     /* resampling kernels a worker keeps */

/* ---- compile ---- */

static bool is_crop(stk_op_kind k)
{
    return k == STK_OP_AUDIO_RANDOM_CROP || k == STK_OP_AUDIO_CENTER_CROP ||
           k == STK_OP_AUDIO_PAD_TO;
}

/* round(seconds * rate), Python's round (halves to even: the default rounding mode). */
static int64_t seconds_to_samples(double seconds, uint32_t rate)
{
    return (int64_t)nearbyint(seconds * (double)rate);
}

/* The signal after the waveform ops of t for an input of `in` (rate, channels or length 0 / -1
 * where unknown), as far as it is known without a file. */
static stk__asig static_out(const stk_transform *t, stk__asig in)
{
    const stk__atransform *at = t->audio;
    stk__asig s = in;
    if (at->implicit && !at->array)
        s.rate = at->sample_rate; /* resampled first; its length per file */
    for (size_t i = 0; i < at->n_wave; i++) {
        const stk_op *op = &t->ops[i];
        switch (op->kind) {
        case STK_OP_RESAMPLE:
            if (s.len >= 0 && s.rate && s.rate != (uint32_t)op->new_freq)
                s.len = (op->new_freq * s.len + s.rate - 1) / s.rate;
            else if (!s.rate)
                s.len = -1;
            s.rate = (uint32_t)op->new_freq;
            break;
        case STK_OP_DOWNMIX:
            s.channels = (uint32_t)op->channels;
            break;
        case STK_OP_AUDIO_RANDOM_CROP:
        case STK_OP_AUDIO_CENTER_CROP:
        case STK_OP_AUDIO_PAD_TO:
            s.len = s.rate ? seconds_to_samples(op->seconds, s.rate) : -1;
            break;
        default:
            break;
        }
    }
    return s;
}

static void atransform_free(stk__atransform *at)
{
    if (!at)
        return;
    stk__spec_free(&at->spec);
    stk__free(at);
}

/* TimeStretch's slowest rate (the most frames). */
static double slowest_rate(const stk_op *op)
{
    return isnan(op->fixed_rate) ? op->rate_range[0] : op->fixed_rate;
}

/* Fix the output shape from what is known (at's binding); sets at->bound when it is all known
 * and compiles the spectrum op then. */
static stk_status fix_shape(stk_transform *t, char *err, size_t err_size)
{
    stk__atransform *at = t->audio;
    stk__asig in = {at->in_rate, at->in_channels, at->array ? at->a_len : -1, 0};
    at->out_sig = static_out(t, in);
    at->bound = at->out_sig.channels > 0 && at->out_sig.len >= 0;
    if (!at->bound)
        return STK_OK;
    if (at->out_sig.len == 0)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "the output has 0 samples (a crop shorter than one sample)");
    if (at->spec_at >= 0) {
        stk_status rc =
            stk__spec_compile(&t->ops[at->spec_at], at->out_sig.len, &at->spec, err, err_size);
        if (rc < 0)
            return rc;
        at->frames = stk__spec_frames(&at->spec, at->out_sig.len);
        at->out_frames = at->frames;
        if (at->stretch_at >= 0)
            at->out_frames = stk__stretch_frames(at->frames, slowest_rate(&t->ops[at->stretch_at]));
    }
    return STK_OK;
}

static stk_status audio_create(const stk_transform_opts *opts, stk_transform **out)
{
    stk_status rc = STK_OK;
    char err[STK_ERRMSG_SIZE];
    *out = NULL;
    if (opts->dtype != STK_DTYPE_FLOAT32 || opts->nhwc || opts->finish_on_device)
        return stk__set_last_error(STK_EINVAL,
                                   "an audio transform outputs float32 [channels, samples] or "
                                   "[channels, bins, frames] (dtype %s%s%s)",
                                   stk_dtype_name(opts->dtype), opts->nhwc ? ", NHWC" : "",
                                   opts->finish_on_device ? ", finish_on_device" : "");
    stk_transform *t = stk__calloc(1, sizeof(*t));
    stk__atransform *at = stk__calloc(1, sizeof(*at));
    if (!t || !at) {
        stk__free(t);
        stk__free(at);
        return stk__set_last_error(STK_ENOMEM, "stk_transform_create: out of memory");
    }
    t->media = STK_MEDIA_AUDIO;
    t->audio = at;
    t->dtype = STK_DTYPE_FLOAT32;
    t->lenient = opts->lenient;
    t->n_ops = opts->n_ops;
    if (opts->n_ops)
        memcpy(t->ops, opts->ops, opts->n_ops * sizeof(stk_op));
    at->sample_rate = opts->sample_rate;
    at->lengths = opts->lengths;
    at->lenient = opts->lenient;
    at->spec_at = -1;
    at->stretch_at = -1;
    at->first_resample = -1;
    int crop_before = 0; /* a crop before the first Resample */
    for (size_t i = 0; i < t->n_ops; i++) {
        stk_op *op = &t->ops[i];
        const stk__op_def *d = stk__op_def_get(op->kind);
        if (!d)
            STK_FAIL(err, STK_EINVAL, "ops[%zu]: unknown op kind %d", i, (int)op->kind);
        t->defs[i] = d;
        if (d->media != STK_MEDIA_AUDIO)
            STK_FAIL(err, STK_EINVAL,
                     "ops[%zu] (%s): an image op in an audio transform (a transform is one media "
                     "kind)",
                     i, d->name);
        if (d->check && (rc = d->check(i, op)) < 0) {
            snprintf(err, sizeof(err), "%s", stk_last_errmsg());
            goto fail;
        }
        if (d->stage == STK__OP_WAVE && at->spec_at >= 0)
            STK_FAIL(err, STK_EINVAL,
                     "ops[%zu] (%s): a waveform op after %s (ops[%d]); put it before the "
                     "spectrogram",
                     i, d->name, stk_op_name(t->ops[at->spec_at].kind), at->spec_at);
        if (d->stage == STK__OP_SPECTRUM && at->spec_at >= 0)
            STK_FAIL(err, STK_EINVAL, "ops[%zu] (%s): a second spectrogram op (%s is ops[%d])", i,
                     d->name, stk_op_name(t->ops[at->spec_at].kind), at->spec_at);
        if (op->kind == STK_OP_AMPLITUDE_TO_DB && at->spec_at >= 0 &&
            t->ops[at->spec_at].power == 0.0)
            STK_FAIL(err, STK_EINVAL,
                     "ops[%zu] (%s): of a complex spectrogram (power=None, ops[%d]): give "
                     "Spectrogram a power",
                     i, d->name, at->spec_at);
        if (op->kind == STK_OP_TIME_STRETCH) {
            if (at->spec_at < 0 || t->ops[at->spec_at].power != 0.0)
                STK_FAIL(err, STK_EINVAL,
                         "ops[%zu] (%s): needs a complex spectrogram: put it after "
                         "Spectrogram(power=None)",
                         i, d->name);
            if ((size_t)at->spec_at + 1 != i)
                STK_FAIL(err, STK_EINVAL,
                         "ops[%zu] (%s): put it right after %s (ops[%d]), before the masks", i,
                         d->name, stk_op_name(t->ops[at->spec_at].kind), at->spec_at);
            const stk_op *sp = &t->ops[at->spec_at];
            int64_t bins = sp->onesided ? sp->n_fft / 2 + 1 : sp->n_fft;
            if (op->n_freq != bins)
                STK_FAIL(err, STK_EINVAL,
                         "ops[%zu] (%s): n_freq=%lld, but %s (ops[%d]) gives %lld frequency bins",
                         i, d->name, (long long)op->n_freq, stk_op_name(sp->kind), at->spec_at,
                         (long long)bins);
            at->stretch_at = (int)i;
        }
        if (d->stage == STK__OP_SPECTRUM)
            at->spec_at = (int)i;
        if (d->stage == STK__OP_WAVE)
            at->n_wave = i + 1;
        if ((op->kind == STK_OP_TIME_MASKING || op->kind == STK_OP_FREQUENCY_MASKING) &&
            at->spec_at < 0)
            STK_FAIL(err, STK_EINVAL,
                     "ops[%zu] (%s): needs a spectrogram: put it after Spectrogram, "
                     "MelSpectrogram or MFCC",
                     i, d->name);
        if (op->kind == STK_OP_RESAMPLE && at->first_resample < 0)
            at->first_resample = (int)i;
        if (is_crop(op->kind) && at->first_resample < 0)
            crop_before = 1;
    }
    if (at->sample_rate && at->first_resample >= 0)
        STK_FAIL(err, STK_EINVAL,
                 "sample_rate=%" PRIu32 " resamples when the ops have no Resample; with "
                 "Resample (ops[%d]) leave it out",
                 at->sample_rate, at->first_resample);
    if (at->sample_rate > 1536000)
        STK_FAIL(err, STK_EINVAL, "sample_rate=%" PRIu32 " is not an audio rate", at->sample_rate);
    at->implicit = at->sample_rate > 0;
    at->rate_fixed = at->sample_rate == 0 && (at->first_resample < 0 || crop_before);
    at->in_rate = at->implicit ? at->sample_rate : 0;
    STK_TRY(fix_shape(t, err, sizeof(err)));
    *out = t;
    return STK_OK;
fail:
    atransform_free(at);
    stk__free(t);
    return stk__last_error_copy(rc, err);
}

static void audio_destroy(stk_transform *t)
{
    atransform_free(t->audio);
    stk__free(t);
}

static void audio_spec(const stk_transform *t, stk__tspec *out)
{
    const stk__atransform *at = t->audio;
    memset(out, 0, sizeof(*out));
    out->dtype = STK_DTYPE_FLOAT32;
    out->name = "audio";
    out->lengths = at->lengths;
    out->shape[0] = at->out_sig.channels ? (int64_t)at->out_sig.channels : -1;
    if (at->spec_at < 0) {
        out->ndim = 2;
        out->shape[1] = at->out_sig.len;
        return;
    }
    const stk_op *op = &t->ops[at->spec_at];
    out->ndim = op->power == 0.0 ? 4 : 3; /* power=None: complex, (real, imaginary) last */
    out->shape[3] = 2;
    out->shape[1] = op->kind == STK_OP_SPECTROGRAM ? (op->onesided ? op->n_fft / 2 + 1 : op->n_fft)
                    : op->kind == STK_OP_MFCC      ? op->n_mfcc
                                                   : op->n_mels;
    /* the frames as torch.stft counts them (stk__spec_frames), known with the length */
    stk__spec s = {.n_fft = op->n_fft, .pad = op->pad, .center = op->stft_center != 0};
    s.hop = op->hop_length ? op->hop_length : (op->win_length ? op->win_length : op->n_fft) / 2;
    out->shape[2] = at->out_sig.len >= 0 ? stk__spec_frames(&s, at->out_sig.len) : -1;
    if (at->stretch_at >= 0 && out->shape[2] >= 0)
        out->shape[2] = stk__stretch_frames(out->shape[2], slowest_rate(&t->ops[at->stretch_at]));
}

/* ---- binding to a loader's data ---- */

static bool waveform_dtype(stk_dtype d)
{
    return d == STK_DTYPE_FLOAT32 || d == STK_DTYPE_FLOAT64 || d == STK_DTYPE_INT16 ||
           d == STK_DTYPE_INT32 || d == STK_DTYPE_INT8 || d == STK_DTYPE_UINT8;
}

static bool audio_bind_reads(const stk_transform *t, const stk_field *f)
{
    return f->kind == STK_FIELD_BYTES && !t->audio->bound;
}

static stk_status audio_bind(const stk_transform *t, const stk_field *f, const void *rec0,
                             size_t size, stk_transform **out, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    const stk__atransform *at = t->audio;
    stk__atransform b = *at; /* the binding, filled below */
    b.spec = (stk__spec){0};
    *out = NULL;
    if (f->kind == STK_FIELD_ARRAY) {
        if (!waveform_dtype(f->dtype) || f->ndim < 1 || f->ndim > 2 || f->shape[0] < 1 ||
            (f->ndim == 2 && (f->shape[0] > STK__AUD_MAX_CHANNELS || f->shape[1] < 1)))
            return stk__set_error(err, err_size, STK_EINVAL,
                                  "field '%.*s' is a %s array of %u dimensions: an audio "
                                  "transform reads encoded audio (a bytes field) or a waveform "
                                  "array (samples,) or (channels, samples) of float32, float64, "
                                  "int16, int32, int8 or uint8",
                                  STK_MAX_NAME, f->name, stk_dtype_name(f->dtype), f->ndim);
        b.array = true;
        b.a_dtype = f->dtype;
        b.in_channels = f->ndim == 2 ? (uint32_t)f->shape[0] : 1;
        b.a_len = f->shape[f->ndim - 1];
        b.in_rate = at->sample_rate           ? at->sample_rate
                    : at->first_resample >= 0 ? (uint32_t)t->ops[at->first_resample].orig_freq
                                              : 0;
        bool needs_rate = false; /* a crop or Resample: seconds and Hz need the arrays' rate */
        for (size_t i = 0; i < at->n_wave; i++)
            needs_rate |= is_crop(t->ops[i].kind) || t->ops[i].kind == STK_OP_RESAMPLE;
        if (!b.in_rate && needs_rate)
            return stk__set_error(err, err_size, STK_EINVAL,
                                  "field '%.*s' is a waveform array, which has no sample rate: "
                                  "give sample_rate= (its rate), or Resample(orig_freq, "
                                  "new_freq) with orig_freq its rate",
                                  STK_MAX_NAME, f->name);
    } else if (f->kind != STK_FIELD_BYTES) {
        return stk__set_error(err, err_size, STK_EINVAL,
                              "field '%.*s' is %s: an audio transform reads encoded audio (a "
                              "bytes field) or a waveform array",
                              STK_MAX_NAME, f->name,
                              f->kind == STK_FIELD_INT64 ? "an int64" : "a float32");
    } else if (at->bound) {
        return STK_OK; /* encoded files, and nothing left to learn */
    } else {           /* learn record 0's rate and channels */
        stk__audiodec *dec = NULL;
        stk__audinfo info;
        if ((rc = stk__audiodec_create(&dec)) < 0)
            return stk__set_error(err, err_size, rc, "%s", stk_last_errmsg());
        rc = stk__audio_open(dec, rec0, size, &info, err, err_size);
        stk__audiodec_destroy(dec);
        if (rc < 0)
            return rc;
        b.in_channels = info.channels;
        if (at->rate_fixed)
            b.in_rate = info.rate;
    }
    stk_transform *c = stk__malloc(sizeof(*c));
    stk__atransform *ca = stk__malloc(sizeof(*ca));
    if (!c || !ca) {
        stk__free(c);
        stk__free(ca);
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory binding a transform");
    }
    memcpy(c, t, sizeof(*c));
    *ca = b;
    c->audio = ca;
    STK_TRY(fix_shape(c, err, err_size));
    if (!ca->bound)
        STK_FAIL_SIZED(err, err_size, STK_EINVAL, "the output length is not fixed: %s",
                       b.array ? "no op sets it"
                               : "files differ in length: end the waveform ops with "
                                 "stoker.audio.RandomCrop(seconds), CenterCrop(seconds) or "
                                 "PadTo(seconds)");
    *out = c;
    return STK_OK;
fail:
    audio_destroy(c);
    return rc;
}

/* ---- per-worker state ---- */

typedef struct stk__aworker {
    stk_media media; /* STK_MEDIA_AUDIO (stk_media.c reads it) */
    stk__audiodec *dec;
    float *buf[2]; /* the waveform stages, ping-pong: planes of (b - a) samples each */
    size_t cap[2];
    stk__resampler *kern[N_KERNELS]; /* the kernels of the rates seen, LRU by `next` */
    unsigned next;
    stk__specwork sw;
    bool has_sw;
    float *stretch_in; /* TimeStretch: the complex spectrogram before it */
    int64_t last_len;
    _Atomic uint64_t samples, decode_ns, augment_ns;
} stk__aworker;

static void audio_worker_destroy(stk__tworker *tw)
{
    stk__aworker *w = (stk__aworker *)(void *)tw;
    if (!w)
        return;
    stk__audiodec_destroy(w->dec);
    for (int k = 0; k < 2; k++)
        stk__free(w->buf[k]);
    for (int k = 0; k < N_KERNELS; k++)
        stk__resampler_free(w->kern[k]);
    if (w->has_sw)
        stk__specwork_free(&w->sw);
    stk__free(w->stretch_in);
    stk__free(w);
}

static stk_status audio_worker_create(const stk_transform *t, stk__tworker **out)
{
    stk_status rc = STK_OK;
    char err[STK_ERRMSG_SIZE];
    const stk__atransform *at = t->audio;
    *out = NULL;
    if (!at->bound)
        return stk__set_last_error(STK_EINVAL, "an audio transform must be bound to its data "
                                               "before its workers start");
    stk__aworker *w = stk__calloc(1, sizeof(*w));
    if (!w)
        return stk__set_last_error(STK_ENOMEM, "out of memory for an audio worker");
    w->media = STK_MEDIA_AUDIO;
    if ((rc = stk__audiodec_create(&w->dec)) < 0)
        goto fail_last;
    stk__audiodec_set_lenient(w->dec, at->lenient);
    if (at->spec_at >= 0) {
        size_t mel = at->spec.kind == STK_OP_MFCC
                         ? (size_t)at->out_sig.channels * (size_t)(at->spec.n_mels * at->frames)
                         : 0;
        w->has_sw = true;
        if ((rc = stk__specwork_init(&w->sw, &at->spec, mel, err, sizeof(err))) < 0) {
            stk__set_last_error(rc, "%s", err);
            goto fail_last;
        }
    }
    if (at->stretch_at >= 0) {
        size_t n = (size_t)at->out_sig.channels * (size_t)(at->spec.bins * at->frames) * 2;
        if (!(w->stretch_in = stk__malloc(n * sizeof(float)))) {
            rc = stk__set_last_error(STK_ENOMEM, "out of memory for TimeStretch's input");
            goto fail_last;
        }
    }
    *out = (stk__tworker *)(void *)w;
    return STK_OK;
fail_last:
    audio_worker_destroy((stk__tworker *)(void *)w);
    return rc;
}

static void audio_stage_ns(const stk__tworker *tw, uint64_t *decode_ns, uint64_t *augment_ns)
{
    const stk__aworker *w = (const stk__aworker *)(const void *)tw;
    *decode_ns = atomic_load_explicit(&w->decode_ns, memory_order_relaxed);
    *augment_ns = atomic_load_explicit(&w->augment_ns, memory_order_relaxed);
}

static void audio_trust(stk__tworker *tw, bool trusted)
{
    stk__audiodec_set_trusted(((stk__aworker *)(void *)tw)->dec, trusted);
}

static bool audio_checked(const stk__tworker *tw)
{
    return stk__audiodec_checked(((const stk__aworker *)(const void *)tw)->dec);
}

static int64_t audio_length(const stk__tworker *tw)
{
    return ((const stk__aworker *)(const void *)tw)->last_len;
}

/* The worker's kernel for these rates and op's parameters (made on first use, kept). */
static stk_status kernel_for(stk__aworker *w, int64_t orig, int64_t nw, const stk_op *op,
                             const stk__resampler **out, char *err, size_t err_size)
{
    for (int k = 0; k < N_KERNELS; k++)
        if (w->kern[k] && stk__resampler_is(w->kern[k], orig, nw, op)) {
            *out = w->kern[k];
            return STK_OK;
        }
    stk__resampler *r;
    stk_status rc = stk__resampler_make(orig, nw, op, &r, err, err_size);
    if (rc < 0)
        return rc;
    unsigned k = w->next++ % N_KERNELS;
    stk__resampler_free(w->kern[k]);
    w->kern[k] = r;
    *out = r;
    return STK_OK;
}

/* ---- one sample ---- */

/* One waveform step of a sample's plan. */
typedef struct astep {
    stk_op_kind kind;
    const stk__resampler *rs;
    stk__asig in, out;
    int64_t off;  /* crops: the first input sample kept */
    float gain;   /* Vol: the factor */
    int64_t a, b; /* the output range its buffer holds (zero outside [a2, b2)) */
    int64_t a2, b2;
    const stk__downmix *mix; /* Downmix(2) of more than two channels: FFmpeg's matrix */
} astep;

typedef struct aplan {
    stk__asig in;    /* the decoded (or array) signal */
    uint32_t planes; /* planes decoded: in.channels, or 1 with a folded Downmix */
    int64_t a0, b0;  /* the range of the input the first step reads */
    astep step[MAX_STEPS];
    int n;
    stk__downmix mix; /* a Downmix(2) step's matrix */
} aplan;

/* torchaudio's Vol factor (F.gain: 10^(dB / 20), power as 10 log10(gain) dB), in float32 as
 * torch multiplies a float tensor by a Python float. */
static float vol_factor(const stk_op *op)
{
    if (op->gain_type == 1)
        return (float)pow(10.0, op->gain / 20.0);
    if (op->gain_type == 2)
        return (float)pow(10.0, 10.0 * log10(op->gain) / 20.0);
    return (float)op->gain;
}

/* Plan the waveform ops of one sample on `in`, drawing the crops from rng. */
static stk_status plan_sample(const stk_transform *t, stk__aworker *w, stk__asig in,
                              stk__audfmt fmt, uint32_t mask, stk_rng *rng, aplan *p, char *err,
                              size_t err_size)
{
    const stk__atransform *at = t->audio;
    stk__asig s = in;
    p->in = in;
    p->planes = in.channels;
    p->n = 0;
    if (at->implicit && !at->array && s.rate != at->sample_rate) {
        stk_op op; /* torchaudio's Resample(file rate, sample_rate) defaults */
        stk_op_init(&op, STK_OP_RESAMPLE);
        astep *st = &p->step[p->n++];
        memset(st, 0, sizeof(*st));
        st->kind = STK_OP_RESAMPLE;
        STK_TRY_RET(kernel_for(w, s.rate, at->sample_rate, &op, &st->rs, err, err_size));
        st->in = s;
        s.len = stk__resampler_len(st->rs, s.len);
        s.valid = stk__resampler_len(st->rs, s.valid);
        s.rate = at->sample_rate;
        st->out = s;
    }
    for (size_t i = 0; i < at->n_wave; i++) {
        const stk_op *op = &t->ops[i];
        astep *st = &p->step[p->n];
        memset(st, 0, sizeof(*st));
        st->kind = op->kind;
        st->in = s;
        switch (op->kind) {
        case STK_OP_RESAMPLE:
            if (s.rate == (uint32_t)op->new_freq)
                continue; /* torchaudio returns the waveform as it is */
            STK_TRY_RET(kernel_for(w, s.rate, op->new_freq, op, &st->rs, err, err_size));
            s.len = stk__resampler_len(st->rs, s.len);
            s.valid = stk__resampler_len(st->rs, s.valid);
            s.rate = (uint32_t)op->new_freq;
            break;
        case STK_OP_DOWNMIX:
            if (op->channels == 2 && s.channels > 2) {
                STK_TRY_RET(stk__downmix_stereo(fmt, s.channels, mask, &p->mix, err, err_size));
                st->mix = &p->mix;
            }
            s.channels = (uint32_t)op->channels;
            break;
        case STK_OP_AUDIO_RANDOM_CROP:
        case STK_OP_AUDIO_CENTER_CROP:
        case STK_OP_AUDIO_PAD_TO: {
            int64_t n = seconds_to_samples(op->seconds, s.rate);
            if (op->kind == STK_OP_AUDIO_RANDOM_CROP && s.len > n)
                st->off = (int64_t)stk__rng_below(rng, (uint64_t)(s.len - n + 1));
            else if (op->kind == STK_OP_AUDIO_CENTER_CROP && s.len > n)
                st->off = (s.len - n) / 2;
            s.valid = STK_MIN(STK_MAX(s.valid - st->off, (int64_t)0), n);
            s.len = n;
            break;
        }
        case STK_OP_VOL:
            st->gain = vol_factor(op);
            break;
        default:
            continue;
        }
        st->out = s;
        p->n++;
    }
    /* A Downmix to mono after only linear steps moves to the decode. */
    for (int k = 0; k < p->n; k++) {
        if (p->step[k].kind == STK_OP_DOWNMIX && p->step[k].out.channels == 1) {
            for (int j = 0; j < k; j++) {
                p->step[j].in.channels = 1;
                p->step[j].out.channels = 1;
            }
            p->planes = 1;
            memmove(&p->step[k], &p->step[k + 1], (size_t)(p->n - k - 1) * sizeof(astep));
            p->n--;
            break;
        }
        if (p->step[k].kind != STK_OP_RESAMPLE && !is_crop(p->step[k].kind))
            break;
    }
    /* Backward: the range of each step's output the next one reads. */
    int64_t a = 0, b = p->n ? p->step[p->n - 1].out.len : in.len;
    for (int k = p->n - 1; k >= 0; k--) {
        astep *st = &p->step[k];
        st->a = a;
        st->b = b;
        st->a2 = STK_MAX(a, (int64_t)0);
        st->b2 = STK_MIN(b, st->out.len);
        if (st->a2 >= st->b2) { /* all padding: it reads nothing */
            a = b = 0;
            continue;
        }
        if (st->kind == STK_OP_RESAMPLE) {
            stk__resampler_need(st->rs, st->a2, st->b2, &a, &b);
        } else {
            a = st->a2 + st->off;
            b = st->b2 + st->off;
        }
    }
    p->a0 = a;
    p->b0 = b;
    return STK_OK;
}

/* Make buffer k hold `planes` planes of n samples. */
static stk_status reserve(stk__aworker *w, int k, uint32_t planes, int64_t n, char *err,
                          size_t err_size)
{
    size_t total;
    if (!stk__mul_ok((size_t)planes, (size_t)(n > 0 ? n : 1), &total))
        return stk__set_error(err, err_size, STK_ELIMIT, "audio buffer too large");
    return stk__audio_reserve(&w->buf[k], &w->cap[k], total, err, err_size);
}

/* A waveform array value's frames [f0, f1) as float planes (torchaudio's integer scaling), or
 * their mean into one plane. */
static void array_frames(const stk__atransform *at, const uint8_t *src, int64_t f0, int64_t f1,
                         float *const *planes, uint32_t n_planes)
{
    uint32_t ch = at->in_channels;
    int64_t S = at->a_len;
    for (int64_t f = f0; f < f1; f++) {
        float sum = 0.0f;
        for (uint32_t c = 0; c < ch; c++) {
            int64_t i = (int64_t)c * S + f;
            float v;
            switch (at->a_dtype) {
            case STK_DTYPE_FLOAT64:
                v = (float)((const double *)(const void *)src)[i];
                break;
            case STK_DTYPE_INT16:
                v = (float)((const int16_t *)(const void *)src)[i] / 32768.0f;
                break;
            case STK_DTYPE_INT32:
                v = (float)((double)((const int32_t *)(const void *)src)[i] / 2147483648.0);
                break;
            case STK_DTYPE_INT8:
                v = (float)((const int8_t *)(const void *)src)[i] / 128.0f;
                break;
            case STK_DTYPE_UINT8:
                v = ((float)src[i] - 128.0f) / 128.0f;
                break;
            default:
                v = ((const float *)(const void *)src)[i];
            }
            if (n_planes == ch)
                planes[c][f - f0] = v;
            else
                sum += v;
        }
        if (n_planes != ch)
            planes[0][f - f0] = sum / (float)ch;
    }
}

/* Run step st from planes `in` (covering [ia, ...)) into planes `out` (covering [st->a, st->b)). */
/* Zero plane p's samples outside [lo, hi) of its n (lo >= hi: all of them). */
static void zero_outside(float *p, int64_t n, int64_t lo, int64_t hi)
{
    lo = STK_MIN(STK_MAX(lo, (int64_t)0), n);
    hi = STK_MIN(STK_MAX(hi, lo), n);
    memset(p, 0, (size_t)lo * sizeof(float));
    memset(p + hi, 0, (size_t)(n - hi) * sizeof(float));
}

static void run_step(const astep *st, float *const *in, int64_t ia, float *const *out)
{
    int64_t n = st->b - st->a;
    for (uint32_t c = 0; c < st->out.channels; c++)
        zero_outside(out[c], n, st->a2 - st->a, st->b2 - st->a);
    if (st->a2 >= st->b2)
        return;
    int64_t m = st->b2 - st->a2, at = st->a2 - st->a;
    switch (st->kind) {
    case STK_OP_RESAMPLE:
        for (uint32_t c = 0; c < st->out.channels; c++)
            stk__resampler_run(st->rs, in[c], ia, st->a2, st->b2, out[c] + at);
        break;
    case STK_OP_DOWNMIX:
        if (st->out.channels == 1) { /* torch.mean over the channels */
            for (int64_t i = 0; i < m; i++) {
                float s = 0.0f;
                for (uint32_t c = 0; c < st->in.channels; c++)
                    s += in[c][st->a2 + i - ia];
                out[0][at + i] = s / (float)st->in.channels;
            }
        } else if (st->mix) { /* FFmpeg's stereo of more channels */
            const float *src[STK__AUD_MAX_CHANNELS];
            for (uint32_t c = 0; c < st->in.channels; c++)
                src[c] = in[c] + (st->a2 - ia);
            float *dst[2] = {out[0] + at, out[1] + at};
            stk__downmix_run(st->mix, src, m, dst);
        } else { /* stereo: kept, or mono duplicated */
            for (uint32_t c = 0; c < 2; c++)
                memcpy(out[c] + at, in[st->in.channels == 1 ? 0 : c] + (st->a2 - ia),
                       (size_t)m * sizeof(float));
        }
        break;
    case STK_OP_VOL:
        for (uint32_t c = 0; c < st->out.channels; c++)
            for (int64_t i = 0; i < m; i++) {
                float v = in[c][st->a2 + i - ia] * st->gain;
                out[c][at + i] = v < -1.0f ? -1.0f : v > 1.0f ? 1.0f : v; /* torch.clamp */
            }
        break;
    default: /* the crops: a shift */
        for (uint32_t c = 0; c < st->out.channels; c++)
            memcpy(out[c] + at, in[c] + (st->a2 + st->off - ia), (size_t)m * sizeof(float));
    }
}

/* 24 random bits as a float in [0, 1): torch.rand's float32 draw (x & (2^24 - 1)) * 2^-24. */
static float rand_f32(stk_rng *rng)
{
    return (float)(stk_rng_u32(rng) & 0xFFFFFFu) * (1.0f / 16777216.0f);
}

/* TimeMasking / FrequencyMasking on x, [channels, F, T] ([channels, F, T, 2] when complex: parts
 * 2) (torchaudio's mask_along_axis: the same mask for every channel; per channel with iid_masks,
 * as mask_along_axis_iid does per example and channel). */
static void apply_mask(const stk_op *op, stk_rng *rng, float *x, uint32_t channels, int64_t F,
                       int64_t T, int64_t stride, int64_t parts)
{
    bool time = op->kind == STK_OP_TIME_MASKING;
    int64_t size = time ? T : F;
    int64_t mp =
        op->p == 1.0 ? op->mask_param : STK_MIN(op->mask_param, (int64_t)((double)size * op->p));
    if (mp < 1)
        return; /* torchaudio returns before drawing */
    uint32_t draws = op->iid_masks ? channels : 1;
    for (uint32_t d = 0; d < draws; d++) {
        float value = rand_f32(rng) * (float)mp;
        float minv = rand_f32(rng) * ((float)size - value);
        int64_t start = (int64_t)minv, end = start + (int64_t)value;
        uint32_t c0 = op->iid_masks ? d : 0, c1 = op->iid_masks ? d + 1 : channels;
        for (uint32_t c = c0; c < c1; c++) {
            float *xc = x + (size_t)c * (size_t)(F * stride * parts);
            for (int64_t f = 0; f < F; f++)
                for (int64_t t = time ? start : 0; t < (time ? end : T); t++)
                    if (time || (f >= start && f < end))
                        for (int64_t q = 0; q < parts; q++)
                            xc[(f * stride + t) * parts + q] = 0.0f;
        }
    }
}

/* One sample from its record: in memory (src, size bytes) or read in place (`from`, src NULL). */
static stk_status run_sample(const stk_transform *t, stk__tworker *tw, const void *src, size_t size,
                             const stk__bytesrc *from, stk_rng *rng, void *dst, char *err,
                             size_t err_size)
{
    stk_status rc = STK_OK;
    const stk__atransform *at = t->audio;
    stk__aworker *w = (stk__aworker *)(void *)tw;
    uint64_t t0 = stk__now_ns(), t1;
    stk__asig in;
    stk__audfmt fmt = STK__AUD_UNKNOWN; /* the layout's: arrays take FFmpeg's default */
    uint32_t mask = 0;
    aplan p;
    if (at->array) {
        size_t want = stk_dtype_size(at->a_dtype) * at->in_channels * (size_t)at->a_len;
        if (size != want)
            return stk__set_error(
                err, err_size, STK_EFORMAT,
                "a waveform of %zu bytes, not the %zu of (%" PRIu32 ", %" PRId64 ") %s", size, want,
                at->in_channels, at->a_len, stk_dtype_name(at->a_dtype));
        in = (stk__asig){at->in_rate, at->in_channels, at->a_len, at->a_len};
    } else {
        stk__audinfo info;
        STK_TRY(from ? stk__audio_open_in(w->dec, from, &info, err, err_size)
                     : stk__audio_open(w->dec, src, size, &info, err, err_size));
        in = (stk__asig){info.rate, info.channels, info.frames, info.frames};
        fmt = info.format;
        mask = info.mask;
        if (at->rate_fixed && info.rate != at->in_rate)
            STK_FAIL_SIZED(err, err_size, STK_EFORMAT,
                           "%s at %" PRIu32 " Hz where record 0 is at %" PRIu32
                           " Hz: give sample_rate= to resample every file to one rate%s",
                           stk__audfmt_name(info.format), info.rate, at->in_rate,
                           at->first_resample < 0 ? ", or add Resample"
                                                  : " (a crop before Resample needs one rate)");
    }
    bool downmix = false;
    for (size_t i = 0; i < at->n_wave; i++)
        downmix |= t->ops[i].kind == STK_OP_DOWNMIX;
    if (!downmix && in.channels != at->in_channels)
        STK_FAIL_SIZED(err, err_size, STK_EFORMAT,
                       "%" PRIu32 " channels where record 0 has %" PRIu32
                       ": add stoker.audio.Downmix() (mono) or Downmix(2) (stereo)",
                       in.channels, at->in_channels);
    STK_TRY(plan_sample(t, w, in, fmt, mask, rng, &p, err, err_size));

    /* The input range [a0, b0): decoded where it is inside the signal, zero elsewhere */
    int64_t n0 = p.b0 - p.a0, f0 = STK_MAX(p.a0, (int64_t)0), f1 = STK_MIN(p.b0, in.len);
    STK_TRY(reserve(w, 0, p.planes, n0, err, err_size));
    float *planes[STK__AUD_MAX_CHANNELS];
    for (uint32_t c = 0; c < p.planes; c++) {
        planes[c] = w->buf[0] + (size_t)c * (size_t)(n0 > 0 ? n0 : 1);
        zero_outside(planes[c], n0, f0 - p.a0, f1 - p.a0);
    }
    float *at0[STK__AUD_MAX_CHANNELS];
    for (uint32_t c = 0; c < p.planes; c++)
        at0[c] = planes[c] + (f1 > f0 ? f0 - p.a0 : 0);
    if (at->array) {
        if (f1 > f0)
            array_frames(at, src, f0, f1, at0, p.planes);
    } else if (f1 > f0 || !at->lenient) {
        STK_TRY(stk__audio_decode(w->dec, f1 > f0 ? f0 : 0, f1 > f0 ? f1 - f0 : 0, at0, p.planes,
                                  err, err_size));
    }
    t1 = stk__now_ns();

    /* The waveform steps, ping-pong between the two buffers */
    int64_t ia = p.a0;
    int cur = 0;
    for (int k = 0; k < p.n; k++) {
        const astep *st = &p.step[k];
        int64_t n = st->b - st->a;
        STK_TRY(reserve(w, 1 - cur, st->out.channels, n, err, err_size));
        float *outp[STK__AUD_MAX_CHANNELS];
        for (uint32_t c = 0; c < st->out.channels; c++)
            outp[c] = w->buf[1 - cur] + (size_t)c * (size_t)(n > 0 ? n : 1);
        run_step(st, planes, ia, outp);
        memcpy(planes, outp, st->out.channels * sizeof(float *));
        ia = st->a;
        cur = 1 - cur;
    }
    stk__asig fin = p.n ? p.step[p.n - 1].out : p.in;
    if (p.n == 0)
        fin.channels = p.planes; /* a Downmix folded into the decode was the only step */
    if (fin.channels != at->out_sig.channels || fin.len != at->out_sig.len)
        STK_FAIL_SIZED(err, err_size, STK_EFORMAT,
                       "the waveform came out as (%" PRIu32 ", %" PRId64
                       "), not the batch's (%" PRIu32 ", %" PRId64 ")",
                       fin.channels, fin.len, at->out_sig.channels, at->out_sig.len);
    float *out = dst;
    size_t n_out;
    int64_t parts = at->spec_at >= 0 && t->ops[at->spec_at].power == 0.0 ? 2 : 1; /* complex */
    if (at->spec_at < 0) {
        for (uint32_t c = 0; c < fin.channels; c++)
            memcpy(out + (size_t)c * (size_t)fin.len, planes[c] + (0 - ia),
                   (size_t)fin.len * sizeof(float));
        n_out = (size_t)fin.channels * (size_t)fin.len;
        w->last_len = fin.valid;
    } else {
        const float *x[STK__AUD_MAX_CHANNELS];
        for (uint32_t c = 0; c < fin.channels; c++)
            x[c] = planes[c] + (0 - ia);
        bool stretch = at->stretch_at >= 0;
        STK_TRY(stk__spec_run(&at->spec, &w->sw, x, fin.channels, fin.len,
                              stretch ? w->stretch_in : out, err, err_size));
        n_out = (size_t)fin.channels * (size_t)(at->spec.bins * at->out_frames * parts);
        w->last_len = fin.valid >= fin.len
                          ? at->frames
                          : STK_MIN(at->frames, stk__spec_frames(&at->spec, fin.valid));
    }
    int64_t frames = at->out_frames; /* of this sample (a stretch at a drawn rate: fewer) */
    for (size_t i = at->n_wave; i < t->n_ops; i++) { /* the spectral ops, in place */
        const stk_op *op = &t->ops[i];
        if (op->kind == STK_OP_AMPLITUDE_TO_DB) {
            stk__amplitude_to_db(out, n_out, op->stype ? 20.0f : 10.0f, op->top_db);
        } else if (op->kind == STK_OP_TIME_MASKING || op->kind == STK_OP_FREQUENCY_MASKING) {
            apply_mask(op, rng, out, fin.channels, at->spec.bins, frames, at->out_frames, parts);
        } else if (op->kind == STK_OP_TIME_STRETCH) {
            /* torch.rand's draw scaled to the range, as lo + (hi - lo) * torch.rand(1) */
            double rate = isnan(op->fixed_rate)
                              ? op->rate_range[0] +
                                    (op->rate_range[1] - op->rate_range[0]) * (double)rand_f32(rng)
                              : op->fixed_rate;
            int64_t hop = op->hop_length ? op->hop_length : op->n_freq - 1;
            size_t in_ch = (size_t)(at->spec.bins * at->frames * 2);
            size_t out_ch = (size_t)(at->spec.bins * at->out_frames * 2);
            for (uint32_t c = 0; c < fin.channels; c++)
                stk__stretch_run(w->stretch_in + c * in_ch, at->spec.bins, at->frames, rate, hop,
                                 out + c * out_ch, at->out_frames);
            frames = STK_MIN(stk__stretch_frames(at->frames, rate), at->out_frames);
            w->last_len = STK_MIN(stk__stretch_frames(w->last_len, rate), frames);
        }
    }
    uint64_t t2 = stk__now_ns();
    atomic_fetch_add_explicit(&w->decode_ns, t1 - t0, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->augment_ns, t2 - t1, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->samples, 1, memory_order_relaxed);
    return STK_OK;
fail:
    return rc;
}

static stk_status audio_apply(const stk_transform *t, stk__tworker *tw, const void *src,
                              size_t size, stk_rng *rng, void *dst, char *err, size_t err_size)
{
    return run_sample(t, tw, src, size, NULL, rng, dst, err, err_size);
}

static stk_status audio_apply_in(const stk_transform *t, stk__tworker *tw, const stk__bytesrc *in,
                                 stk_rng *rng, void *dst, char *err, size_t err_size)
{
    return run_sample(t, tw, NULL, 0, in, rng, dst, err, err_size);
}

/* Encoded files read in place; waveform arrays come whole (they are the samples). */
static bool audio_reads_in_place(const stk_transform *t)
{
    return !t->audio->array;
}

const stk__media_ops stk__media_audio = {
    .name = "audio",
    .create = audio_create,
    .destroy = audio_destroy,
    .spec = audio_spec,
    .bind = audio_bind,
    .bind_reads = audio_bind_reads,
    .worker_create = audio_worker_create,
    .worker_destroy = audio_worker_destroy,
    .stage_ns = audio_stage_ns,
    .trust = audio_trust,
    .checked = audio_checked,
    .apply = audio_apply,
    .apply_in = audio_apply_in,
    .reads_in_place = audio_reads_in_place,
    .length = audio_length,
};
