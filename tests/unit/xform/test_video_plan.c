/*
 * test_video_plan.c: what a loader gives a video transform's workers (src/xform/stk_video.c): its
 * per-record memo (src/common/stk_memo.c) and its thread plan's codec threads. The memo: the first
 * clip of a record indexes the video and keeps the packed index; later clips of that record read it
 * back instead of demuxing the file again; the clips are the same bytes and timestamps with or
 * without the memo, for every draw tried; a memo entry that no longer describes the file (a frame's
 * pts moved, as a file rewritten at the same size would) is found out by the decoder, forgotten,
 * and the record indexed again, with the clip still right. The codec threads: clips decoded with
 * the plan's 2 or 4 libavcodec threads are the clips of one thread, byte for byte. The video is
 * made here by Debian's ffmpeg (H.264 with B-frames, GOP 12); skips (77) without ffmpeg or without
 * libavcodec in the build.
 */
#include "decode/stk_video_decode.h"
#include "t.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ERRSZ 512
#define T_FR 4
#define SIDE 32

#ifdef STK_HAVE_AVCODEC

static uint8_t *video;
static size_t video_size;

static int make_video_of(double seconds)
{
    if (access("/usr/bin/ffmpeg", X_OK) != 0)
        return 0;
    char dir[] = "/tmp/stk_vmemo_XXXXXX";
    if (!mkdtemp(dir))
        return 0;
    char path[128], cmd[512];
    snprintf(path, sizeof(path), "%s/v.mp4", dir);
    snprintf(cmd, sizeof(cmd),
             "/usr/bin/ffmpeg -loglevel error -y -f lavfi -i testsrc=size=96x64:rate=25 -t %g "
             "-vf noise=alls=30:allf=t -c:v libx264 -g 12 -bf 2 -pix_fmt yuv420p '%s'",
             seconds, path);
    int ok = system(cmd) == 0;
    FILE *f = ok ? fopen(path, "rb") : NULL;
    if (f) {
        fseek(f, 0, SEEK_END);
        video_size = (size_t)ftell(f);
        fseek(f, 0, SEEK_SET);
        video = malloc(video_size);
        ok = video && fread(video, 1, video_size, f) == video_size;
        fclose(f);
    }
    unlink(path);
    rmdir(dir);
    return ok && video;
}

static int make_video(void)
{
    return make_video_of(3);
}

static stk_transform *video_transform(void)
{
    stk_op op;
    stk_op_init(&op, STK_OP_RESIZE);
    op.size[0] = SIDE;
    op.size[1] = SIDE;
    stk_transform_opts o;
    stk_transform_opts_init(&o);
    o.media = STK_MEDIA_VIDEO;
    o.ops = &op;
    o.n_ops = 1;
    o.dtype = STK_DTYPE_UINT8;
    o.nhwc = true;
    o.frames_per_clip = T_FR;
    o.frame_step = 5;
    stk_transform *t = NULL;
    return stk_transform_create(&o, &t) == STK_OK ? t : NULL;
}

#define CLIP_BYTES ((size_t)T_FR * SIDE * SIDE * 3)

/* One clip of the video with draw `idx`, through worker w (memo and record as set). */
static stk_status clip(const stk_transform *t, stk__tworker *w, uint64_t idx, uint8_t *out,
                       double *pts, char *err)
{
    stk_rng rng;
    stk_rng_init(&rng, 7, 0, idx);
    stk_status rc = stk__transform_apply(t, w, video, video_size, &rng, out, err, ERRSZ);
    if (rc == STK_OK)
        stk__transform_worker_aux(w, pts);
    return rc;
}

static int test_memo_same_clips(void)
{
    if (!make_video())
        return T_SKIP;
    stk_transform *t = video_transform();
    T_CHECK(t);
    T_CHECK(stk__transform_keeps_memo(t));
    stk__tworker *plain = NULL, *w = NULL;
    T_OK(stk__transform_worker_create(t, &plain));
    T_OK(stk__transform_worker_create(t, &w));
    stk__memo *m = stk__memo_create(1, 1 << 20);
    T_CHECK(m);
    static uint8_t a[CLIP_BYTES], b[CLIP_BYTES];
    double pa[T_FR], pb[T_FR];
    char err[ERRSZ];
    for (uint64_t idx = 0; idx < 12; idx++) {
        T_OK(clip(t, plain, idx, a, pa, err));
        stk__transform_worker_record(w, m, 0);
        T_OK(clip(t, w, idx, b, pb, err));
        T_CHECKF(memcmp(a, b, CLIP_BYTES) == 0, "draw %llu", (unsigned long long)idx);
        T_CHECK(memcmp(pa, pb, sizeof(pa)) == 0);
    }
    uint64_t hits, sets, held;
    stk__memo_counts(m, &hits, &sets, &held);
    T_EQ(sets, 1);  /* indexed once */
    T_EQ(hits, 11); /* then read back */
    T_CHECK(held > 0 && held < 1024);
    stk__transform_worker_destroy(plain);
    stk__transform_worker_destroy(w);
    stk__memo_destroy(m);
    stk_transform_destroy(t);
    free(video);
    return 0;
}

static int test_stale_memo(void)
{
    if (!make_video())
        return T_SKIP;
    char err[ERRSZ];
    /* the true index, and a copy with every pts after frame 0 moved by one tick */
    stk__vdec *d = NULL;
    T_OK(stk__vdec_create(1, 0, false, &d, err, sizeof(err)));
    T_OK(stk__vdec_open(d, video, video_size, err, sizeof(err)));
    stk__vindex ix;
    T_OK(stk__vdec_index(d, &ix, err, sizeof(err)));
    size_t need = stk__vindex_pack(&ix, NULL, 0);
    uint8_t *good = malloc(need), *bad = NULL;
    T_CHECK(good);
    stk__vindex_pack(&ix, good, need);
    int64_t *moved = malloc(ix.n_frames * sizeof(int64_t));
    T_CHECK(moved);
    for (uint32_t i = 0; i < ix.n_frames; i++)
        moved[i] = ix.pts[i] + (i > 0);
    stk__vindex wrong = ix;
    wrong.pts = moved;
    size_t bad_size = stk__vindex_pack(&wrong, NULL, 0);
    T_CHECK((bad = malloc(bad_size)));
    stk__vindex_pack(&wrong, bad, bad_size);
    stk__vdec_destroy(d);

    stk_transform *t = video_transform();
    T_CHECK(t);
    stk__tworker *plain = NULL, *w = NULL;
    T_OK(stk__transform_worker_create(t, &plain));
    T_OK(stk__transform_worker_create(t, &w));
    static uint8_t a[CLIP_BYTES], b[CLIP_BYTES];
    double pa[T_FR], pb[T_FR];
    for (uint64_t idx = 0; idx < 6; idx++) {
        stk__memo *m = stk__memo_create(1, 1 << 20);
        T_CHECK(m && stk__memo_set(m, 0, bad, bad_size));
        T_OK(clip(t, plain, idx, a, pa, err));
        stk__transform_worker_record(w, m, 0);
        T_OK(clip(t, w, idx, b, pb, err));
        T_CHECKF(memcmp(a, b, CLIP_BYTES) == 0, "draw %llu", (unsigned long long)idx);
        T_CHECK(memcmp(pa, pb, sizeof(pa)) == 0);
        size_t size;
        const uint8_t *now = stk__memo_get(m, 0, &size); /* indexed again, kept */
        T_CHECK(now && size == need && memcmp(now, good, need) == 0);
        stk__memo_destroy(m);
    }
    stk__transform_worker_destroy(plain);
    stk__transform_worker_destroy(w);
    stk_transform_destroy(t);
    free(good);
    free(bad);
    free(moved);
    free(video);
    return 0;
}

static int test_plan_threads_same_clips(void)
{
    if (!make_video())
        return T_SKIP;
    stk_transform *t = video_transform();
    T_CHECK(t);
    stk__tworker *one = NULL, *many = NULL;
    T_OK(stk__transform_worker_create(t, &one));
    T_OK(stk__transform_worker_create(t, &many));
    static uint8_t a[CLIP_BYTES], b[CLIP_BYTES];
    double pa[T_FR], pb[T_FR];
    char err[ERRSZ];
    for (uint64_t idx = 0; idx < 8; idx++) {
        stk__transform_worker_threads(one, 1);
        stk__transform_worker_threads(many, idx % 2 ? 2 : 4);
        T_OK(clip(t, one, idx, a, pa, err));
        T_OK(clip(t, many, idx, b, pb, err));
        T_CHECKF(memcmp(a, b, CLIP_BYTES) == 0, "draw %llu", (unsigned long long)idx);
        T_CHECK(memcmp(pa, pb, sizeof(pa)) == 0);
    }
    stk__transform_worker_destroy(one);
    stk__transform_worker_destroy(many);
    stk_transform_destroy(t);
    free(video);
    return 0;
}

/* ---- ranged reads: the decoder reading through a reader (the loader's VFS) ---- */

typedef struct counted {
    const uint8_t *p;
    uint64_t lo, hi;  /* the lowest and highest byte read past the header */
    uint64_t fail_at; /* a read reaching this offset fails (UINT64_MAX: none) */
} counted;

static stk_status counted_read(void *ctx, uint64_t off, void *buf, size_t n, char *err,
                               size_t err_size)
{
    counted *c = ctx;
    if (off + n > c->fail_at)
        return stk__set_error(err, err_size, STK_EIO, "disk error at byte %llu",
                              (unsigned long long)c->fail_at);
    memcpy(buf, c->p + off, n);
    if (off < c->lo)
        c->lo = off;
    if (off + n > c->hi)
        c->hi = off + n;
    return STK_OK;
}

typedef struct frames_out {
    uint8_t *rgb; /* [n][96 * 64 * 3] */
    size_t n;
} frames_out;

static stk_status keep_frame(void *ctx, uint32_t frame, const uint8_t *rgb, uint32_t width,
                             uint32_t height, size_t stride, char *err, size_t err_size)
{
    (void)frame, (void)err, (void)err_size;
    frames_out *o = ctx;
    for (uint32_t y = 0; y < height; y++)
        memcpy(o->rgb + (o->n * height + y) * width * 3, rgb + y * stride, (size_t)width * 3);
    o->n++;
    return STK_OK;
}

static int test_ranged_reads_same_frames(void)
{
    if (!make_video_of(24)) /* 600 frames, a keyframe every 12 */
        return T_SKIP;
    char err[ERRSZ];
    stk__vdec *mem = NULL, *rd = NULL;
    T_OK(stk__vdec_create(1, 0, false, &mem, err, sizeof(err)));
    T_OK(stk__vdec_create(1, 0, false, &rd, err, sizeof(err)));
    T_OK(stk__vdec_open(mem, video, video_size, err, sizeof(err)));
    stk__vindex ix;
    T_OK(stk__vdec_index(mem, &ix, err, sizeof(err)));
    T_CHECK(ix.n_frames == 600 && ix.n_keys >= 40);
    uint32_t last_key = ix.keys[ix.n_keys - 1];
    /* clips: the start, the middle, the end, one crossing the last keyframe */
    uint32_t cross = last_key - 8 + 15 < ix.n_frames ? last_key - 8 : ix.n_frames - 16;
    T_CHECK(cross < last_key && cross + 15 >= last_key);
    uint32_t starts[4] = {0, 300, ix.n_frames - 16, cross};
    static uint8_t a[16 * 96 * 64 * 3], b[16 * 96 * 64 * 3];
    for (int k = 0; k < 4; k++) {
        uint32_t want[4];
        for (int i = 0; i < 4; i++)
            want[i] = starts[k] + 5 * (uint32_t)i;
        frames_out oa = {a, 0}, ob = {b, 0};
        T_OK(stk__vdec_open(mem, video, video_size, err, sizeof(err)));
        T_CHECKF(stk__vdec_frames(mem, &ix, want, 4, keep_frame, &oa, err, sizeof(err)) == STK_OK,
                 "clip from %u: %s", starts[k], err);
        counted c = {video, UINT64_MAX, 0, UINT64_MAX};
        stk__bytesrc r = {video_size, counted_read, &c};
        stk__vdec_counts before, after;
        stk__vdec_get_counts(rd, &before);
        T_OK(stk__vdec_open_reader(rd, &r, err, sizeof(err)));
        T_OK(stk__vdec_frames(rd, &ix, want, 4, keep_frame, &ob, err, sizeof(err)));
        stk__vdec_get_counts(rd, &after);
        T_EQ(oa.n, 4);
        T_EQ(ob.n, 4);
        T_CHECKF(memcmp(a, b, 4 * 96 * 64 * 3) == 0, "clip from frame %u", starts[k]);
        uint64_t bytes = after.bytes - before.bytes;
        T_CHECK(bytes > 0);
        /* 16 frames and the GOP before them of 600 (noise makes every frame weigh): far less than
         * the file, its header and libavformat's 32 KiB reads included */
        T_CHECKF(bytes * 4 < video_size, "clip from %u read %llu of %zu bytes", starts[k],
                 (unsigned long long)bytes, video_size);
        stk__vdec_close(rd);
    }
    /* a read error while decoding: the reader's status and text */
    counted c = {video, UINT64_MAX, 0, UINT64_MAX};
    stk__bytesrc r = {video_size, counted_read, &c};
    uint32_t late[1] = {ix.n_frames - 1};
    frames_out ob = {b, 0};
    T_OK(stk__vdec_open_reader(rd, &r, err, sizeof(err)));
    c.fail_at = video_size / 2; /* the disk fails after the header was read */
    T_EQ(stk__vdec_frames(rd, &ix, late, 1, keep_frame, &ob, err, sizeof(err)), STK_EIO);
    T_CHECKF(strstr(err, "disk error at byte"), "%s", err);
    /* the index pass through a reader reads the whole file and lists what memory's does */
    c = (counted){video, UINT64_MAX, 0, UINT64_MAX};
    T_OK(stk__vdec_open_reader(rd, &r, err, sizeof(err)));
    stk__vindex ix2;
    T_OK(stk__vdec_index(rd, &ix2, err, sizeof(err)));
    T_EQ(ix2.n_frames, ix.n_frames);
    T_EQ(ix2.n_keys, ix.n_keys);
    stk__vdec_destroy(mem);
    stk__vdec_destroy(rd);
    free(video);
    return 0;
}

T_MAIN(T_CASE(test_memo_same_clips), T_CASE(test_stale_memo), T_CASE(test_plan_threads_same_clips),
       T_CASE(test_ranged_reads_same_frames))

#else

static int test_without_avcodec(void)
{
    return T_SKIP;
}

T_MAIN(T_CASE(test_without_avcodec))
#endif
