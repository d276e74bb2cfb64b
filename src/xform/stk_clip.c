/*
 * stk_clip.c: which frames of a video make a clip (stk__clip_frames, stk_video.h). Pure: the
 * video transform calls it with the sample's clip number and one uniform draw, the unit tests
 * with synthetic indexes.
 *
 * By frames (frame_step S): a clip covers span = (T - 1) * S + 1 consecutive frames and takes
 * every S-th, from a start frame:
 *   random:  start = floor(u * (n - span + 1)), uniform over the n - span + 1 possible starts;
 *   uniform: clip k of K starts at floor(k * (n - span) / (K - 1)) (0 when K = 1): K evenly
 *            spaced clips, the first at the video's start and the last at its end, as
 *            torchvision's UniformClipSampler and pytorchvideo's constant clips per video.
 * By time (frame_rate F): the clip's frame i is the one shown at t0 + i / F (the last frame whose
 * timestamp is at or before it; the timestamps are the container's, so a variable frame rate
 * gives the frames a viewer sees at those times), and t0 ranges over [first, last - (T - 1) / F]
 * as the start frame does above.
 * Short videos (n < span, or last - first < (T - 1) / F): pad repeats the last frame the clip
 * reaches, loop continues from the first frame (by time: with a period of the video's length
 * plus one mean frame interval), fail refuses the record.
 */
#include "xform/stk_video.h"

#include <math.h>

/* The last frame of ix shown at time t (seconds), or 0 before the first. */
static uint32_t frame_at(const stk__vindex *ix, double t)
{
    /* A timestamp within a nanosecond of t counts as reached: t0 + i / F is computed in floating
     * point and may land a rounding error short of the frame it names. */
    t += 1e-9 * STK_MAX(1.0, fabs(t));
    uint32_t lo = 0, hi = ix->n_frames;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (stk__vindex_seconds(ix, ix->pts[mid]) <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo ? lo - 1 : 0;
}

/* The clip's position among the possible ones, [0, room]: random or uniform (clip of K). */
static double position(const stk__clipspec *cs, uint32_t clip, double u, double room)
{
    if (cs->sampling == STK_CLIP_RANDOM)
        return u * room;
    if (cs->clips <= 1)
        return 0.0;
    return (double)(clip % cs->clips) * room / (double)(cs->clips - 1);
}

static stk_status by_frames(const stk__clipspec *cs, const stk__vindex *ix, uint32_t clip, double u,
                            uint32_t *out, char *err, size_t err_size)
{
    uint64_t n = ix->n_frames, span = (uint64_t)(cs->frames - 1) * cs->step + 1;
    if (n >= span) {
        uint64_t start;
        if (cs->sampling == STK_CLIP_RANDOM) {
            start = (uint64_t)(u * (double)(n - span + 1));
            start = STK_MIN(start, n - span);
        } else {
            start = cs->clips <= 1 ? 0 : (clip % cs->clips) * (n - span) / (cs->clips - 1);
        }
        for (uint32_t i = 0; i < cs->frames; i++)
            out[i] = (uint32_t)(start + (uint64_t)i * cs->step);
        return STK_OK;
    }
    switch (cs->short_video) {
    case STK_SHORT_LOOP:
        for (uint32_t i = 0; i < cs->frames; i++)
            out[i] = (uint32_t)((uint64_t)i * cs->step % n);
        return STK_OK;
    case STK_SHORT_PAD:
        for (uint32_t i = 0; i < cs->frames; i++) {
            uint64_t f = (uint64_t)i * cs->step;
            out[i] = f < n ? (uint32_t)f : out[i - 1];
        }
        return STK_OK;
    default:
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "the video has %u frames; a clip of %u frames every %u needs %llu "
                              "(short_video='skip')",
                              ix->n_frames, cs->frames, cs->step, (unsigned long long)span);
    }
}

static stk_status by_time(const stk__clipspec *cs, const stk__vindex *ix, uint32_t clip, double u,
                          uint32_t *out, char *err, size_t err_size)
{
    double first = stk__vindex_seconds(ix, ix->pts[0]);
    double last = stk__vindex_seconds(ix, ix->pts[ix->n_frames - 1]);
    double need = (double)(cs->frames - 1) / cs->rate, room = last - first - need;
    if (room >= 0) {
        double t0 = first + position(cs, clip, u, room);
        for (uint32_t i = 0; i < cs->frames; i++)
            out[i] = frame_at(ix, t0 + (double)i / cs->rate);
        return STK_OK;
    }
    switch (cs->short_video) {
    case STK_SHORT_LOOP: {
        double mean = ix->n_frames > 1 ? (last - first) / (ix->n_frames - 1) : 1.0 / cs->rate;
        double period = last - first + mean;
        for (uint32_t i = 0; i < cs->frames; i++)
            out[i] = frame_at(ix, first + fmod((double)i / cs->rate, period));
        return STK_OK;
    }
    case STK_SHORT_PAD:
        for (uint32_t i = 0; i < cs->frames; i++)
            out[i] = frame_at(ix, first + (double)i / cs->rate);
        return STK_OK;
    default:
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "the video lasts %.3f s; a clip of %u frames at %g fps needs %.3f s "
                              "(short_video='skip')",
                              last - first, cs->frames, cs->rate, need);
    }
}

stk_status stk__clip_frames(const stk__clipspec *cs, const stk__vindex *ix, uint32_t clip, double u,
                            uint32_t *out, char *err, size_t err_size)
{
    if (cs->rate > 0)
        return by_time(cs, ix, clip, u, out, err, err_size);
    return by_frames(cs, ix, clip, u, out, err, err_size);
}
