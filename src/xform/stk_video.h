/*
 * stk_video.h: internal interfaces of the video pipeline (src/xform), the STK_MEDIA_VIDEO kind of
 * transform (stk_media.h dispatches to it; stk_video.c).
 *
 * A video transform is a clip sampler (which frames of a video make a sample's clip: stk_clip.c,
 * pure) in front of the image pipeline: its ops are image ops; the plan (crop box, flips,
 * ColorJitter's draws) is drawn once per clip and every frame is rendered with it, so a clip is
 * augmented consistently.
 */
#ifndef STK_VIDEO_H
#define STK_VIDEO_H

#include "decode/stk_video_decode.h"
#include "xform/stk_xform.h"

/* How a clip is cut from a video. */
typedef struct stk__clipspec {
    uint32_t frames; /* T */
    uint32_t step;   /* every step-th frame (frame_rate == 0) */
    double rate;     /* > 0: frames at this rate by time */
    uint32_t clips;  /* K per video */
    stk_clip_sampling sampling;
    stk_short_video short_video;
} stk__clipspec;

/* The frames of one clip: out[0 .. cs->frames) frame numbers of video ix (in presentation
 * order), for clip number `clip` of the record (uniform sampling) or the uniform draw `u` in
 * [0, 1) (random sampling). A video shorter than the clip is padded, looped or refused
 * (STK_EFORMAT with both lengths in err) as cs->short_video says. Pure: no allocation, no clock. */
stk_status stk__clip_frames(const stk__clipspec *cs, const stk__vindex *ix, uint32_t clip, double u,
                            uint32_t *out, char *err, size_t err_size);

/* A compiled video transform (behind stk_transform.video). Immutable after create. */
typedef struct stk__vtransform {
    stk_transform *img; /* the ops as an image transform: one frame's output ([3, H, W] or
                         * [H, W, 3] as the clip's layout needs) */
    stk__clipspec clip;
    bool thwc;        /* the clip is [T, H, W, 3] (nhwc); else [3, T, H, W] */
    uint32_t threads; /* decoder_threads: 0 = the loader's thread plan (1 outside a loader) */
    uint64_t max_pixels, max_clip_pixels;
    bool lenient;
    size_t frame_bytes; /* one frame's output from img */
} stk__vtransform;

#endif /* STK_VIDEO_H */
