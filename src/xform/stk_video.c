/*
 * stk_video.c: the video media kind (stk__media_video, stk_media.h): a record's bytes are an
 * encoded video file; a sample is a clip of frames_per_clip of its frames, each rendered by the
 * image pipeline with one plan for the whole clip.
 *
 * Per sample: open the bytes (stk_avcodec.c, from memory), index the frames (one demux pass, no
 * decoding), draw the clip's start (one uniform from the sample's stream; uniform sampling takes
 * clip k of K instead: stk_clip.c), decode the distinct frames the clip needs (the decoder seeks
 * to the keyframe before the first, skips what it can), and render each with the plan drawn from
 * the sample's stream at the first frame's size (stk__xform_plan: crop box, flips, ColorJitter's
 * factors), so every frame of a clip gets the same augmentation. A frame the clip repeats (a
 * padded short video, a frame_rate above the video's) is rendered once and copied. Each frame's
 * time in seconds goes to the aux output ("video_pts").
 *
 * Layout: [T, H, W, 3] (nhwc) renders each frame in place; [3, T, H, W] renders a frame's planes
 * into the worker's scratch and copies them to their places (torchvision's video models' input).
 *
 * Threads: the transform is immutable; a worker (stk__vworker) belongs to one thread.
 */
#include "xform/stk_media.h"
#include "xform/stk_video.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#define MAX_FRAMES_PER_CLIP 4096
#define WHOLE_MAX ((uint64_t)64 << 20) /* a video not indexed yet up to this size is read whole */

static void video_destroy(stk_transform *t)
{
    if (!t)
        return;
    if (t->video) {
        stk_transform_destroy(t->video->img);
        stk__free(t->video);
    }
    stk__free(t);
}

static stk_status video_create(const stk_transform_opts *opts, stk_transform **out)
{
    *out = NULL;
    if (opts->frames_per_clip == 0 || opts->frames_per_clip > MAX_FRAMES_PER_CLIP)
        return stk__set_last_error(STK_EINVAL, "frames_per_clip must be 1 .. %d (got %u)",
                                   MAX_FRAMES_PER_CLIP, opts->frames_per_clip);
    if (opts->frame_step == 0)
        return stk__set_last_error(STK_EINVAL, "frame_step must be >= 1");
    if (!(opts->frame_rate >= 0) || !isfinite(opts->frame_rate))
        return stk__set_last_error(STK_EINVAL, "frame_rate must be > 0 (or 0: by frame_step)");
    if (opts->clips_per_video == 0)
        return stk__set_last_error(STK_EINVAL, "clips_per_video must be >= 1");
    if ((unsigned)opts->clip_sampling > STK_CLIP_UNIFORM ||
        (unsigned)opts->short_video > STK_SHORT_FAIL)
        return stk__set_last_error(STK_EINVAL, "unknown clip_sampling or short_video (%d, %d)",
                                   (int)opts->clip_sampling, (int)opts->short_video);
    if (opts->finish_on_device)
        return stk__set_last_error(STK_EINVAL, "a video transform renders its clips on the CPU "
                                               "(finish_on_device is for images)");
    for (size_t i = 0; i < opts->n_ops; i++)
        if (opts->ops && stk_op_media(opts->ops[i].kind) != STK_MEDIA_IMAGE)
            return stk__set_last_error(STK_EINVAL,
                                       "a video transform's ops are image ops, applied to each "
                                       "frame (op %zu is not)",
                                       i);
    stk_transform *t = stk__calloc(1, sizeof(*t));
    stk__vtransform *vt = stk__calloc(1, sizeof(*vt));
    if (!t || !vt) {
        stk__free(t);
        stk__free(vt);
        return stk__set_last_error(STK_ENOMEM, "stk_transform_create: out of memory");
    }
    t->media = STK_MEDIA_VIDEO;
    t->video = vt;
    /* the frames' transform: the same ops, dtype and limits; [H, W, 3] frames for a THWC clip */
    stk_transform_opts io = *opts;
    io.media = STK_MEDIA_IMAGE;
    stk_status rc = stk__media_image.create(&io, &vt->img);
    if (rc < 0) {
        video_destroy(t);
        return rc; /* the image pipeline's message (e.g. the output size is not fixed) */
    }
    vt->clip = (stk__clipspec){opts->frames_per_clip, opts->frame_step,    opts->frame_rate,
                               opts->clips_per_video, opts->clip_sampling, opts->short_video};
    vt->thwc = opts->nhwc;
    vt->threads = opts->decoder_threads; /* 0: the loader's plan (1 outside a loader) */
    vt->max_pixels = opts->max_pixels;
    vt->max_clip_pixels = opts->max_clip_pixels;
    vt->lenient = opts->lenient;
    stk__tspec fs;
    stk__transform_spec(vt->img, &fs);
    vt->frame_bytes = stk_dtype_size(fs.dtype) * (size_t)(fs.shape[0] * fs.shape[1] * fs.shape[2]);
    /* the public fields the loader and the binding read */
    memcpy(t->ops, opts->ops, opts->n_ops * sizeof(stk_op));
    t->n_ops = opts->n_ops;
    t->dtype = vt->img->dtype;
    t->nhwc = vt->thwc;
    t->max_pixels = opts->max_pixels;
    t->lenient = opts->lenient;
    t->out_w = vt->img->out_w;
    t->out_h = vt->img->out_h;
    *out = t;
    return STK_OK;
}

static void video_spec(const stk_transform *t, stk__tspec *out)
{
    const stk__vtransform *vt = t->video;
    memset(out, 0, sizeof(*out));
    out->dtype = vt->img->dtype;
    out->name = "video";
    out->ndim = 4;
    int64_t T = vt->clip.frames, H = vt->img->out_h, W = vt->img->out_w;
    if (vt->thwc) {
        out->shape[0] = T;
        out->shape[1] = H;
        out->shape[2] = W;
        out->shape[3] = 3;
    } else {
        out->shape[0] = 3;
        out->shape[1] = T;
        out->shape[2] = H;
        out->shape[3] = W;
    }
    out->aux_name = "video_pts";
    out->aux_dtype = STK_DTYPE_FLOAT64;
    out->aux_n = T;
}

static uint32_t video_per_record(const stk_transform *t)
{
    return t->video->clip.clips;
}

/* ---- workers ---- */

typedef struct stk__vworker {
    stk_media media; /* STK_MEDIA_VIDEO (stk_media.c reads it) */
    stk__vdec *dec;
    stk__tworker *iw;     /* the image worker rendering frames */
    uint32_t clip;        /* of the next sample (stk__transform_worker_clip) */
    uint32_t T;           /* frames per clip */
    uint32_t *frames;     /* [T]: the clip's frame numbers */
    uint32_t *want;       /* the distinct ones, increasing */
    double *pts;          /* [T]: the clip's times in seconds (the aux output) */
    uint8_t *planes;      /* [3, H, W] of one frame for a [3, T, H, W] clip */
    stk__memo *memo;      /* the loader's, for the next apply (NULL: none) */
    uint32_t own_threads; /* the transform's decoder_threads (0: the loader's plan decides) */
    uint64_t rec;         /* the record of the next apply */
    int64_t *ipts;        /* a memo's index unpacked */
    uint32_t *ikeys;
    size_t ipts_cap, ikeys_cap;
    uint8_t *packed; /* an index packed for the memo */
    size_t packed_cap;
    _Atomic uint64_t samples, decode_ns, augment_ns;
} stk__vworker;

static void video_worker_destroy(stk__tworker *tw)
{
    stk__vworker *w = (stk__vworker *)(void *)tw;
    if (!w)
        return;
    stk__vdec_destroy(w->dec);
    stk__transform_worker_destroy(w->iw);
    stk__free(w->frames);
    stk__free(w->want);
    stk__free(w->pts);
    stk__free(w->planes);
    stk__free(w->ipts);
    stk__free(w->ikeys);
    stk__free(w->packed);
    stk__free(w);
}

static stk_status video_worker_create(const stk_transform *t, stk__tworker **out)
{
    const stk__vtransform *vt = t->video;
    char err[STK_ERRMSG_SIZE];
    *out = NULL;
    stk__vworker *w = stk__calloc(1, sizeof(*w));
    if (!w)
        return stk__set_last_error(STK_ENOMEM, "out of memory for a video worker");
    w->media = STK_MEDIA_VIDEO;
    w->own_threads = vt->threads;
    size_t T = vt->clip.frames;
    w->T = vt->clip.frames;
    w->frames = stk__malloc(T * sizeof(uint32_t));
    w->want = stk__malloc(T * sizeof(uint32_t));
    w->pts = stk__calloc(T, sizeof(double));
    w->planes = vt->thwc ? NULL : stk__malloc(vt->frame_bytes);
    if (!w->frames || !w->want || !w->pts || (!vt->thwc && !w->planes)) {
        video_worker_destroy((stk__tworker *)(void *)w);
        return stk__set_last_error(STK_ENOMEM, "out of memory for a video worker");
    }
    stk_status rc = stk__vdec_create(vt->threads ? vt->threads : 1, vt->max_pixels, vt->lenient,
                                     &w->dec, err, sizeof(err));
    if (rc < 0) {
        video_worker_destroy((stk__tworker *)(void *)w);
        return stk__set_last_error(rc, "%s", err);
    }
    if ((rc = stk__transform_worker_create(vt->img, &w->iw)) < 0) {
        video_worker_destroy((stk__tworker *)(void *)w);
        return rc;
    }
    *out = (stk__tworker *)(void *)w;
    return STK_OK;
}

static void video_worker_clip(stk__tworker *tw, uint32_t clip)
{
    ((stk__vworker *)(void *)tw)->clip = clip;
}

static void video_worker_threads(stk__tworker *tw, uint32_t n)
{
    stk__vworker *w = (stk__vworker *)(void *)tw;
    if (w->own_threads == 0) /* decoder_threads given at create: kept */
        stk__vdec_set_threads(w->dec, n);
}

static void video_worker_record(stk__tworker *tw, stk__memo *memo, uint64_t rec)
{
    stk__vworker *w = (stk__vworker *)(void *)tw;
    w->memo = memo;
    w->rec = rec;
}

/* The open video's index: from the memo (*from_memo), else by a demux pass, then kept in the memo
 * for later epochs (a memo that declines, full or out of memory, only costs the pass again). */
static stk_status video_index(stk__vworker *w, stk__vindex *ix, bool *from_memo, char *err,
                              size_t err_size)
{
    *from_memo = false;
    size_t size = 0;
    const uint8_t *b = w->memo ? stk__memo_get(w->memo, w->rec, &size) : NULL;
    if (b && stk__vindex_unpack(b, size, ix, &w->ipts, &w->ipts_cap, &w->ikeys, &w->ikeys_cap)) {
        *from_memo = true;
        return STK_OK;
    }
    if (b) /* not an index (a damaged index file that passed its checksum): derived again */
        stk__memo_forget(w->memo, w->rec);
    stk_status rc = stk__vdec_index(w->dec, ix, err, err_size);
    if (rc < 0 || !w->memo)
        return rc;
    size_t need = stk__vindex_pack(ix, w->packed, w->packed_cap);
    if (need > w->packed_cap) {
        uint8_t *p = stk__realloc(w->packed, need);
        if (!p)
            return STK_OK; /* not kept: indexed again next time */
        w->packed = p;
        w->packed_cap = need;
        stk__vindex_pack(ix, w->packed, w->packed_cap);
    }
    stk__memo_set(w->memo, w->rec, w->packed, need);
    return STK_OK;
}

static void video_stage_ns(const stk__tworker *tw, uint64_t *decode_ns, uint64_t *augment_ns)
{
    const stk__vworker *w = (const stk__vworker *)(const void *)tw;
    *decode_ns = atomic_load_explicit(&w->decode_ns, memory_order_relaxed);
    *augment_ns = atomic_load_explicit(&w->augment_ns, memory_order_relaxed);
}

/* A video is read whole by its decoder on every sample: nothing to trust or mark. */
static void video_trust(stk__tworker *tw, bool trusted)
{
    (void)tw;
    (void)trusted;
}

static bool video_checked(const stk__tworker *tw)
{
    (void)tw;
    return false;
}

static void video_aux(const stk__tworker *tw, void *dst)
{
    const stk__vworker *w = (const stk__vworker *)(const void *)tw;
    memcpy(dst, w->pts, w->T * sizeof(double));
}

/* ---- one clip ---- */

typedef struct render_ctx {
    const stk__vtransform *vt;
    stk__vworker *w;
    stk_rng rng0; /* the sample's stream after the clip's draw: the plan's draws */
    stk__xplan plan;
    bool planned;
    uint32_t pw, ph; /* the size the plan is for */
    uint8_t *dst;
    uint64_t render_ns;
} render_ctx;

/* Frame `frame` of the video decoded: render it into each place of the clip that shows it. */
static stk_status on_frame(void *arg, uint32_t frame, const uint8_t *rgb, uint32_t width,
                           uint32_t height, size_t stride, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    render_ctx *c = arg;
    const stk__vtransform *vt = c->vt;
    stk__vworker *w = c->w;
    uint64_t t0 = stk__now_ns();
    if (!c->planned || width != c->pw || height != c->ph) {
        /* every frame's plan from the same draws: a size change (rare) replans identically */
        stk_rng rng = c->rng0;
        stk__xform_plan(vt->img, width, height, &rng, &c->plan);
        c->planned = true;
        c->pw = width;
        c->ph = height;
    }
    stk__decoded dec = {.scale_x = 1.0, .scale_y = 1.0};
    if (c->plan.decode) { /* else all padding: every pixel comes out 0 */
        dec.rgb = rgb;
        dec.width = width;
        dec.height = height;
        dec.stride = stride;
    }
    size_t fb = vt->frame_bytes, plane = fb / 3, T = vt->clip.frames;
    int first = -1;
    for (size_t i = 0; i < T; i++) {
        if (w->frames[i] != frame)
            continue;
        if (vt->thwc) {
            uint8_t *at = c->dst + i * fb;
            if (first < 0)
                STK_TRY(stk__xform_render(vt->img, w->iw, &c->plan, &dec, at, err, err_size));
            else
                memcpy(at, c->dst + (size_t)first * fb, fb);
        } else {
            if (first < 0)
                STK_TRY(
                    stk__xform_render(vt->img, w->iw, &c->plan, &dec, w->planes, err, err_size));
            for (size_t ch = 0; ch < 3; ch++)
                memcpy(c->dst + (ch * T + i) * plane, w->planes + ch * plane, plane);
        }
        if (first < 0)
            first = (int)i;
    }
    c->render_ns += stk__now_ns() - t0;
fail:
    return rc;
}

/* The distinct frames of frames[0 .. T) into want, increasing (a padded or looped clip repeats
 * some); returns their count. */
static size_t distinct_frames(const uint32_t *frames, uint32_t T, uint32_t *want)
{
    size_t n = 0;
    for (uint32_t i = 0; i < T; i++) {
        uint32_t f = frames[i];
        size_t k = n;
        while (k > 0 && want[k - 1] > f)
            k--;
        if (k > 0 && want[k - 1] == f)
            continue;
        memmove(want + k + 1, want + k, (n - k) * sizeof(uint32_t));
        want[k] = f;
        n++;
    }
    return n;
}

/* A sample's video: its bytes in memory (buf, size), or read on demand through rd. */
typedef struct vinput {
    const void *buf;
    size_t size;
    const stk__bytesrc *rd;
} vinput;

static stk_status open_input(stk__vworker *w, const vinput *in, char *err, size_t err_size)
{
    return in->rd ? stk__vdec_open_reader(w->dec, in->rd, err, err_size)
                  : stk__vdec_open(w->dec, in->buf, in->size, err, err_size);
}

static stk_status clip_of(const stk_transform *t, stk__tworker *tw, const vinput *in, stk_rng *rng,
                          void *dst, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    const stk__vtransform *vt = t->video;
    stk__vworker *w = (stk__vworker *)(void *)tw;
    uint64_t t0 = stk__now_ns();
    uint32_t T = vt->clip.frames;
    render_ctx c = {.vt = vt, .w = w, .dst = dst};
    STK_TRY(open_input(w, in, err, err_size));
    stk__vindex ix;
    bool from_memo;
    STK_TRY(video_index(w, &ix, &from_memo, err, err_size));
    if ((uint64_t)T * ix.width * ix.height > vt->max_clip_pixels) {
        rc = stk__set_error(err, err_size, STK_ELIMIT,
                            "a clip of %u frames of %ux%u exceeds max_clip_pixels (%llu)", T,
                            ix.width, ix.height, (unsigned long long)vt->max_clip_pixels);
        goto fail;
    }
    double u = stk_rng_uniform(rng); /* the clip's start; the ops' draws follow */
    STK_TRY(stk__clip_frames(&vt->clip, &ix, w->clip, u, w->frames, err, err_size));
    size_t n = distinct_frames(w->frames, T, w->want);
    c.rng0 = *rng;
    rc = stk__vdec_frames(w->dec, &ix, w->want, n, on_frame, &c, err, err_size);
    if (rc == STK_EFORMAT && from_memo) {
        /* The remembered index may no longer describe the file (rewritten at the same size under
         * the loader): forget it, index the video again and decode once more. The clip's frames
         * are chosen again from the new index with the same draw. */
        stk__memo_forget(w->memo, w->rec);
        c.planned = false;
        STK_TRY(open_input(w, in, err, err_size));
        STK_TRY(video_index(w, &ix, &from_memo, err, err_size));
        STK_TRY(stk__clip_frames(&vt->clip, &ix, w->clip, u, w->frames, err, err_size));
        n = distinct_frames(w->frames, T, w->want);
        STK_TRY(stk__vdec_frames(w->dec, &ix, w->want, n, on_frame, &c, err, err_size));
    } else if (rc < 0) {
        goto fail;
    }
    for (uint32_t i = 0; i < T; i++)
        w->pts[i] = stk__vindex_seconds(&ix, ix.pts[w->frames[i]]);
    uint64_t t1 = stk__now_ns();
    atomic_fetch_add_explicit(&w->decode_ns, t1 - t0 - c.render_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->augment_ns, c.render_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->samples, 1, memory_order_relaxed);
fail:
    stk__vdec_close(w->dec);
    return rc;
}

static stk_status video_apply(const stk_transform *t, stk__tworker *tw, const void *src,
                              size_t size, stk_rng *rng, void *dst, char *err, size_t err_size)
{
    vinput in = {.buf = src, .size = size};
    return clip_of(t, tw, &in, rng, dst, err, err_size);
}

/* A clip of a video not indexed yet (no memo blob), read whole at once into a buffer held for
 * this clip only (charged to the loader's memory budget while held): the index pass reads every
 * packet of the file anyway, so reading it in one request and indexing and decoding from memory
 * reads each byte once, where indexing through the reader and then seeking back for the clip's
 * GOPs read the file and then its clip's bytes again (epoch 1 read about twice the bytes of later
 * epochs: bench/RESULTS.md, issue 28 video4). *done false: not done so (too large, over the
 * budget, out of memory): read in place instead. */
static stk_status clip_whole(const stk_transform *t, stk__tworker *tw, const stk__bytesrc *rd,
                             stk_rng *rng, void *dst, bool *done, char *err, size_t err_size)
{
    *done = false;
    if (rd->size == 0 || rd->size > WHOLE_MAX)
        return STK_OK;
    size_t n = (size_t)rd->size;
    stk__budget *b = stk__thread_budget;
    if (b && !stk__budget_charge(b, n))
        return STK_OK;
    uint8_t *buf = stk__malloc(n);
    stk_status rc = STK_OK;
    if (buf) {
        *done = true;
        rc = rd->read(rd->ctx, 0, buf, n, err, err_size);
        if (rc >= 0) {
            vinput in = {.buf = buf, .size = n};
            rc = clip_of(t, tw, &in, rng, dst, err, err_size);
        }
        stk__free(buf);
    }
    if (b)
        atomic_fetch_sub_explicit(&b->held, n, memory_order_relaxed);
    return rc;
}

/* A clip of a video read in place (the loader's c->in_place): when its index is known (the
 * memo), the header, then from the keyframe before the clip to its last frame; else the whole
 * file at once (clip_whole). */
static stk_status video_apply_in(const stk_transform *t, stk__tworker *tw, const stk__bytesrc *rd,
                                 stk_rng *rng, void *dst, char *err, size_t err_size)
{
    stk__vworker *w = (stk__vworker *)(void *)tw;
    size_t size;
    if (!w->memo || !stk__memo_get(w->memo, w->rec, &size)) {
        bool done;
        stk_status rc = clip_whole(t, tw, rd, rng, dst, &done, err, err_size);
        if (done)
            return rc;
    }
    vinput in = {.rd = rd};
    return clip_of(t, tw, &in, rng, dst, err, err_size);
}

const stk__media_ops stk__media_video = {
    .name = "video",
    .create = video_create,
    .destroy = video_destroy,
    .spec = video_spec,
    .worker_create = video_worker_create,
    .worker_destroy = video_worker_destroy,
    .stage_ns = video_stage_ns,
    .trust = video_trust,
    .checked = video_checked,
    .apply = video_apply,
    .apply_in = video_apply_in,
    .aux = video_aux,
    .per_record = video_per_record,
    .clip = video_worker_clip,
    .record = video_worker_record,
    .memo_file = "stkvidx",
    .memo_magic = "STKVIX01", /* stk__vindex_pack's layout, version 1 */
    .threads = video_worker_threads,
};
