/*
 * stk_media.c: the dispatch from a transform to its media kind's pipeline (stk_media.h): the
 * public options, create/destroy/media of stk_transform (create loads the caller's options and
 * ops into the library's layout once, for every kind) and the stk__transform_* calls the loader
 * makes, each one line through media_of, the one switch naming the kinds.
 *
 * A transform's kind is stk_transform_opts.media, or, when that is left at image, the kind of
 * its first op's row (a list of torchaudio ops is an audio transform without saying so); each
 * kind's create refuses ops of another kind by name.
 *
 * Threads: transforms are immutable after create; a worker belongs to one thread.
 */
#include "xform/stk_media.h"
#include "xform/stk_xform.h"

#include <string.h>

/* The pipeline of media kind m (NULL for a kind this library does not know). */
static const stk__media_ops *media_of(stk_media m)
{
    switch (m) {
    case STK_MEDIA_IMAGE:
        return &stk__media_image;
    case STK_MEDIA_AUDIO:
        return &stk__media_audio;
    case STK_MEDIA_VIDEO:
        return &stk__media_video;
    }
    return NULL;
}

/* The kind a worker belongs to: the first member of every kind's worker. */
static const stk__media_ops *worker_media(const stk__tworker *w)
{
    return media_of(*(const stk_media *)(const void *)w);
}

void stk_transform_opts_init_sized(stk_transform_opts *opts, size_t struct_size)
{
    stk_transform_opts full = {.struct_size = sizeof(full),
                               .dtype = STK_DTYPE_FLOAT32,
                               .max_pixels = STK__XF_DEFAULT_MAX_PIXELS,
                               .frames_per_clip = 16,
                               .frame_step = 1,
                               .clips_per_video = 1,
                               .decoder_threads = 0,
                               .max_clip_pixels = 1ull << 31};
    stk__init_store(opts, struct_size, &full, sizeof(full));
}

/* The caller's ops (strided by ops[0].struct_size) into the library's layout, each over its
 * kind's defaults (the fields an older caller lacks). */
static stk_status load_ops(const stk_transform_opts *opts, stk_op ops[STK__XF_MAX_OPS])
{
    if (opts->n_ops > STK__XF_MAX_OPS)
        return stk__set_last_error(STK_EINVAL,
                                   "stk_transform_create: too many ops (%zu, at most %d)",
                                   opts->n_ops, STK__XF_MAX_OPS);
    if (opts->n_ops && !opts->ops)
        return stk__set_last_error(STK_EINVAL, "stk_transform_create: ops NULL");
    for (size_t i = 0; i < opts->n_ops; i++) {
        stk_op probe = {0};
        if (!stk__elem_load(&probe, sizeof(probe), opts->ops, i))
            return stk__set_last_error(STK_EINVAL,
                                       "ops[%zu]: not initialised with stk_op_init "
                                       "(struct_size unset or unlike ops[0]'s)",
                                       i);
        stk_op_init(&ops[i], probe.kind);
        stk__elem_load(&ops[i], sizeof(ops[i]), opts->ops, i);
    }
    return STK_OK;
}

stk_status stk_transform_create(const stk_transform_opts *opts, stk_transform **out)
{
    if (out)
        *out = NULL;
    if (!opts || !out)
        return stk__set_last_error(STK_EINVAL, "stk_transform_create: NULL %s",
                                   !opts ? "opts" : "out");
    stk_transform_opts full;
    stk_transform_opts_init(&full);
    if (!stk__opts_load(&full, sizeof(full), opts))
        return stk__set_last_error(STK_EINVAL, "stk_transform_create: opts not initialised with "
                                               "stk_transform_opts_init");
    stk_op *ops = stk__calloc(STK__XF_MAX_OPS, sizeof(*ops));
    if (!ops)
        return stk__set_last_error(STK_ENOMEM, "stk_transform_create: out of memory");
    stk_status rc = load_ops(&full, ops);
    full.ops = ops;
    stk_media m = full.media;
    if (m == STK_MEDIA_IMAGE && full.n_ops)
        m = stk_op_media(ops[0].kind);
    const stk__media_ops *mo = media_of(m);
    if (rc == STK_OK && !mo)
        rc = stk__set_last_error(STK_EINVAL, "stk_transform_create: unknown media kind %d",
                                 (int)full.media);
    if (rc == STK_OK) {
        full.media = m;
        rc = mo->create(&full, out);
    }
    stk__free(ops);
    return rc;
}

void stk_transform_destroy(stk_transform *t)
{
    if (t)
        media_of(t->media)->destroy(t);
}

stk_media stk_transform_media(const stk_transform *t)
{
    return t ? t->media : STK_MEDIA_IMAGE;
}

void stk__transform_spec(const stk_transform *t, stk__tspec *out)
{
    media_of(t->media)->spec(t, out);
}

stk_status stk__transform_bind(const stk_transform *t, const stk_field *f, const void *rec0,
                               size_t size, stk_transform **out, char *err, size_t err_size)
{
    const stk__media_ops *mo = media_of(t->media);
    *out = NULL;
    return mo->bind ? mo->bind(t, f, rec0, size, out, err, err_size) : STK_OK;
}

bool stk__transform_bind_reads(const stk_transform *t, const stk_field *f)
{
    const stk__media_ops *mo = media_of(t->media);
    return mo->bind_reads && mo->bind_reads(t, f);
}

stk_status stk__transform_worker_create(const stk_transform *t, stk__tworker **out)
{
    return media_of(t->media)->worker_create(t, out);
}

void stk__transform_worker_destroy(stk__tworker *w)
{
    if (w)
        worker_media(w)->worker_destroy(w);
}

void stk__transform_worker_stage_ns(const stk__tworker *w, uint64_t *decode_ns,
                                    uint64_t *augment_ns)
{
    worker_media(w)->stage_ns(w, decode_ns, augment_ns);
}

void stk__transform_worker_trust(stk__tworker *w, bool trusted)
{
    worker_media(w)->trust(w, trusted);
}

bool stk__transform_worker_checked(const stk__tworker *w)
{
    return worker_media(w)->checked(w);
}

int64_t stk__transform_worker_length(const stk__tworker *w)
{
    const stk__media_ops *mo = worker_media(w);
    return mo->length ? mo->length(w) : 0;
}

stk_status stk__transform_apply(const stk_transform *t, stk__tworker *w, const void *src,
                                size_t size, stk_rng *rng, void *dst, char *err, size_t err_size)
{
    return media_of(t->media)->apply(t, w, src, size, rng, dst, err, err_size);
}

bool stk__transform_reads_in_place(const stk_transform *t)
{
    const stk__media_ops *mo = media_of(t->media);
    return mo->apply_in && (!mo->reads_in_place || mo->reads_in_place(t));
}

stk_status stk__transform_apply_in(const stk_transform *t, stk__tworker *w, const stk__bytesrc *in,
                                   stk_rng *rng, void *dst, char *err, size_t err_size)
{
    const stk__media_ops *mo = media_of(t->media);
    if (!stk__transform_reads_in_place(t))
        return stk__set_error(err, err_size, STK_EINVAL,
                              "a %s transform does not read its input in place", mo->name);
    return mo->apply_in(t, w, in, rng, dst, err, err_size);
}

void stk__transform_worker_aux(const stk__tworker *w, void *dst)
{
    const stk__media_ops *mo = worker_media(w);
    if (mo->aux)
        mo->aux(w, dst);
}

uint32_t stk__transform_per_record(const stk_transform *t)
{
    const stk__media_ops *mo = media_of(t->media);
    return mo->per_record ? mo->per_record(t) : 1;
}

void stk__transform_worker_clip(stk__tworker *w, uint32_t clip)
{
    const stk__media_ops *mo = worker_media(w);
    if (mo->clip)
        mo->clip(w, clip);
}

bool stk__transform_keeps_memo(const stk_transform *t)
{
    return media_of(t->media)->record != NULL;
}

const char *stk__transform_memo_file(const stk_transform *t, const char **magic)
{
    const stk__media_ops *mo = media_of(t->media);
    *magic = mo->memo_magic;
    return mo->record ? mo->memo_file : NULL;
}

void stk__transform_worker_threads(stk__tworker *w, uint32_t n)
{
    const stk__media_ops *mo = worker_media(w);
    if (mo->threads)
        mo->threads(w, n);
}

void stk__transform_worker_record(stk__tworker *w, stk__memo *memo, uint64_t rec)
{
    const stk__media_ops *mo = worker_media(w);
    if (mo->record)
        mo->record(w, memo, rec);
}
