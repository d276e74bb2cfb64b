/*
 * test_clip.c: which frames make a clip (src/xform/stk_clip.c), on synthetic frame indexes: by
 * frames (frame_step) and by time (frame_rate, constant and variable frame rates), random starts
 * over every possible position, clips_per_video uniform positions from the first to the last,
 * and videos shorter than the clip padded, looped or refused with both lengths named.
 */
#include "t.h"
#include "xform/stk_video.h"

#include <string.h>

#define ERRSZ 256

/* A video of n frames at pts step * i (time base 1/den), keyframes every gop frames. */
typedef struct video {
    int64_t pts[1024];
    uint32_t keys[1024];
    stk__vindex ix;
} video;

static void make_cfr(video *v, uint32_t n, int64_t step, int32_t den, uint32_t gop)
{
    memset(v, 0, sizeof(*v));
    for (uint32_t i = 0; i < n; i++)
        v->pts[i] = (int64_t)i * step;
    uint32_t nk = 0;
    for (uint32_t i = 0; i < n; i += gop)
        v->keys[nk++] = i;
    v->ix = (stk__vindex){.tb_num = 1,
                          .tb_den = den,
                          .width = 64,
                          .height = 48,
                          .n_frames = n,
                          .n_keys = nk,
                          .pts = v->pts,
                          .keys = v->keys};
}

static stk__clipspec spec(uint32_t frames, uint32_t step, double rate, uint32_t clips,
                          stk_clip_sampling sampling, stk_short_video sv)
{
    return (stk__clipspec){frames, step, rate, clips, sampling, sv};
}

static int test_by_frames_random(void)
{
    video v;
    make_cfr(&v, 100, 512, 12800, 12);
    stk__clipspec cs = spec(8, 4, 0, 1, STK_CLIP_RANDOM, STK_SHORT_PAD);
    uint32_t out[8];
    char err[ERRSZ];
    /* span = 7 * 4 + 1 = 29: starts 0 .. 71, uniform over the 72 of them */
    bool seen[72] = {false};
    for (int k = 0; k < 72 * 16; k++) {
        double u = (k + 0.5) / (72.0 * 16);
        T_OK(stk__clip_frames(&cs, &v.ix, 0, u, out, err, sizeof(err)));
        T_CHECK(out[0] <= 71);
        T_EQ(out[0], (uint32_t)(u * 72));
        seen[out[0]] = true;
        for (int i = 1; i < 8; i++)
            T_EQ(out[i], out[0] + 4u * (uint32_t)i);
    }
    for (int s = 0; s < 72; s++)
        T_CHECKF(seen[s], "start %d never drawn", s);
    T_OK(stk__clip_frames(&cs, &v.ix, 0, 0.0, out, err, sizeof(err)));
    T_EQ(out[0], 0);
    T_OK(stk__clip_frames(&cs, &v.ix, 0, 0.9999999999, out, err, sizeof(err)));
    T_EQ(out[7], 99);
    /* a clip exactly as long as the video: the one start */
    make_cfr(&v, 29, 512, 12800, 12);
    T_OK(stk__clip_frames(&cs, &v.ix, 0, 0.7, out, err, sizeof(err)));
    T_EQ(out[0], 0);
    T_EQ(out[7], 28);
    return 0;
}

static int test_by_frames_uniform(void)
{
    video v;
    make_cfr(&v, 100, 1, 25, 25);
    stk__clipspec cs = spec(8, 4, 0, 3, STK_CLIP_UNIFORM, STK_SHORT_PAD);
    uint32_t out[8];
    char err[ERRSZ];
    /* room = 100 - 29 = 71: starts 0, 35, 71 (the u draw is ignored) */
    const uint32_t starts[3] = {0, 35, 71};
    for (uint32_t k = 0; k < 6; k++) {
        T_OK(stk__clip_frames(&cs, &v.ix, k, 0.5, out, err, sizeof(err)));
        T_EQ(out[0], starts[k % 3]);
        T_EQ(out[7], starts[k % 3] + 28);
    }
    cs.clips = 1; /* one clip: the video's start */
    T_OK(stk__clip_frames(&cs, &v.ix, 0, 0.9, out, err, sizeof(err)));
    T_EQ(out[0], 0);
    return 0;
}

static int test_short_videos(void)
{
    video v;
    make_cfr(&v, 10, 1, 25, 5);
    uint32_t out[8];
    char err[ERRSZ] = "";
    stk__clipspec cs = spec(8, 2, 0, 1, STK_CLIP_RANDOM, STK_SHORT_PAD);
    T_OK(stk__clip_frames(&cs, &v.ix, 0, 0.5, out, err, sizeof(err)));
    const uint32_t pad[8] = {0, 2, 4, 6, 8, 8, 8, 8};
    T_CHECK(memcmp(out, pad, sizeof(pad)) == 0);
    cs.short_video = STK_SHORT_LOOP;
    T_OK(stk__clip_frames(&cs, &v.ix, 0, 0.5, out, err, sizeof(err)));
    const uint32_t loop[8] = {0, 2, 4, 6, 8, 0, 2, 4};
    T_CHECK(memcmp(out, loop, sizeof(loop)) == 0);
    cs.short_video = STK_SHORT_FAIL;
    T_EQ(stk__clip_frames(&cs, &v.ix, 0, 0.5, out, err, sizeof(err)), STK_EFORMAT);
    T_CHECKF(strstr(err, "the video has 10 frames; a clip of 8 frames every 2 needs 15"), "%s",
             err);
    /* a one-frame video */
    make_cfr(&v, 1, 1, 25, 1);
    cs.short_video = STK_SHORT_PAD;
    T_OK(stk__clip_frames(&cs, &v.ix, 0, 0.5, out, err, sizeof(err)));
    for (int i = 0; i < 8; i++)
        T_EQ(out[i], 0);
    cs.short_video = STK_SHORT_LOOP;
    T_OK(stk__clip_frames(&cs, &v.ix, 0, 0.5, out, err, sizeof(err)));
    for (int i = 0; i < 8; i++)
        T_EQ(out[i], 0);
    return 0;
}

static int test_by_time(void)
{
    video v;
    make_cfr(&v, 100, 512, 12800, 12); /* 25 fps */
    uint32_t out[8];
    char err[ERRSZ] = "";
    /* 5 fps: every 5th frame; the clip needs 7 / 5 = 1.4 s of the 3.96 s */
    stk__clipspec cs = spec(8, 1, 5.0, 3, STK_CLIP_UNIFORM, STK_SHORT_PAD);
    T_OK(stk__clip_frames(&cs, &v.ix, 0, 0, out, err, sizeof(err)));
    for (uint32_t i = 0; i < 8; i++)
        T_EQ(out[i], 5 * i);
    T_OK(stk__clip_frames(&cs, &v.ix, 2, 0, out, err, sizeof(err)));
    T_EQ(out[7], 99); /* the last clip ends at the last frame */
    T_EQ(out[0], 64); /* 3.96 - 1.4 = 2.56 s: frame 64 */
    /* a rate above the video's: frames repeat (each shown frame at its time) */
    cs = spec(8, 1, 50.0, 1, STK_CLIP_UNIFORM, STK_SHORT_PAD);
    T_OK(stk__clip_frames(&cs, &v.ix, 0, 0, out, err, sizeof(err)));
    const uint32_t twice[8] = {0, 0, 1, 1, 2, 2, 3, 3};
    T_CHECK(memcmp(out, twice, sizeof(twice)) == 0);
    /* variable frame rate: frames last 1, 2, 3 periods of 1/25 s in turn (pts in 1/150 s) */
    int64_t step[3] = {6, 12, 18};
    v.pts[0] = 0;
    for (uint32_t i = 1; i < 30; i++)
        v.pts[i] = v.pts[i - 1] + step[(i - 1) % 3];
    v.ix.n_frames = 30;
    v.ix.tb_den = 150;
    v.ix.n_keys = 1;
    cs = spec(6, 1, 25.0, 1, STK_CLIP_UNIFORM, STK_SHORT_PAD);
    T_OK(stk__clip_frames(&cs, &v.ix, 0, 0, out, err, sizeof(err)));
    /* at 0, 1, 2, 3, 4, 5 periods: frames start at 0, 1, 3, 6, 7, 9 periods */
    const uint32_t vfr[6] = {0, 1, 1, 2, 2, 2};
    T_CHECK(memcmp(out, vfr, sizeof(vfr)) == 0);
    /* random by time: t0 = u * room, first frame the one shown then */
    cs = spec(4, 1, 25.0, 1, STK_CLIP_RANDOM, STK_SHORT_PAD);
    /* the last frame (29) starts at 57 periods; the clip needs 3: t0 in [0, 54] periods */
    T_OK(stk__clip_frames(&cs, &v.ix, 0, 0.5, out, err, sizeof(err)));
    T_EQ(out[0], 14); /* t0 = 27 periods: frame 14 starts there (frame 13 at 25) */
    T_EQ(out[1], 14); /* 28: still frame 14 */
    T_EQ(out[3], 15); /* 30: frame 15 starts there */
    return 0;
}

static int test_by_time_short(void)
{
    video v;
    make_cfr(&v, 10, 1, 10, 10); /* 10 frames at 10 fps: 0.9 s from first to last */
    uint32_t out[8];
    char err[ERRSZ] = "";
    stk__clipspec cs = spec(8, 1, 5.0, 1, STK_CLIP_RANDOM, STK_SHORT_PAD); /* needs 1.4 s */
    T_OK(stk__clip_frames(&cs, &v.ix, 0, 0.5, out, err, sizeof(err)));
    const uint32_t pad[8] = {0, 2, 4, 6, 8, 9, 9, 9};
    T_CHECK(memcmp(out, pad, sizeof(pad)) == 0);
    cs.short_video = STK_SHORT_LOOP; /* period 1.0 s: 0.9 + one frame */
    T_OK(stk__clip_frames(&cs, &v.ix, 0, 0.5, out, err, sizeof(err)));
    const uint32_t loop[8] = {0, 2, 4, 6, 8, 0, 2, 4};
    T_CHECK(memcmp(out, loop, sizeof(loop)) == 0);
    cs.short_video = STK_SHORT_FAIL;
    T_EQ(stk__clip_frames(&cs, &v.ix, 0, 0.5, out, err, sizeof(err)), STK_EFORMAT);
    T_CHECKF(strstr(err, "the video lasts 0.900 s; a clip of 8 frames at 5 fps needs 1.400 s"),
             "%s", err);
    return 0;
}

T_MAIN(T_CASE(test_by_frames_random), T_CASE(test_by_frames_uniform), T_CASE(test_short_videos),
       T_CASE(test_by_time), T_CASE(test_by_time_short))
