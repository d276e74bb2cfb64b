/*
 * test_video_decode.c: the video decoder (src/decode/stk_avcodec.c) and the frame index
 * (stk_vframes.c), from memory. Fixtures and references come from
 * tests/data/gen_video_fixtures.py, run once into a temporary directory: videos encoded by
 * Debian's ffmpeg (H.264, H.265, VP9, AV1, MPEG-4 part 2; MP4, Matroska, WebM, AVI; B-frames,
 * variable frame rate, an odd frame size) and PyAV's decode of each. Checks: the index lists
 * PyAV's frames and timestamps; every frame decoded alone, in clips after a seek, and all in one
 * pass equals PyAV's bit for bit; frames a clip does not need are not decoded or not converted
 * (the counts); the packed index round-trips and a damaged one is refused; damaged, unsupported
 * and non-video input fail with the reason (strict) and never crash (lenient). Skips (77) when
 * the build has no libavcodec (then checks the "built without" error), or when ffmpeg or
 * python3-av is missing (the fixtures cannot be made).
 */
#include "decode/stk_video_decode.h"
#include "t.h"

#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ERRSZ 512

#ifdef STK_HAVE_AVCODEC

static char fixdir[64];
static int fix_state; /* 0: not tried, 1: ready, -1: cannot be made */
static pid_t fix_owner;

static void remove_fixtures(void)
{
    if (getpid() != fix_owner || !fixdir[0])
        return;
    DIR *d = opendir(fixdir);
    if (d) {
        struct dirent *e;
        char path[512];
        while ((e = readdir(d)))
            if (e->d_name[0] != '.') {
                snprintf(path, sizeof(path), "%s/%s", fixdir, e->d_name);
                unlink(path);
            }
        closedir(d);
    }
    rmdir(fixdir);
}

static int fixtures_ready(void)
{
    if (fix_state)
        return fix_state > 0;
    fix_state = -1;
    if (access("/usr/bin/python3", X_OK) != 0 || access("/usr/bin/ffmpeg", X_OK) != 0 ||
        system("/usr/bin/python3 -c 'import av, numpy, PIL' 2>/dev/null") != 0)
        return 0;
    snprintf(fixdir, sizeof(fixdir), "/tmp/stk_video_XXXXXX");
    if (!mkdtemp(fixdir))
        return 0;
    fix_owner = getpid();
    atexit(remove_fixtures);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 -W ignore tests/data/gen_video_fixtures.py '%s'",
             fixdir);
    if (system(cmd) != 0)
        return 0;
    fix_state = 1;
    return 1;
}

#define NEED_FIXTURES()                                                                            \
    do {                                                                                           \
        if (!fixtures_ready()) {                                                                   \
            fprintf(stderr, "  skipped: no ffmpeg, python3-av or numpy for the fixtures\n");       \
            return T_SKIP;                                                                         \
        }                                                                                          \
    } while (0)

static uint8_t *slurp(const char *name, size_t *size)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", fixdir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(n > 0 ? (size_t)n : 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return p;
}

/* PyAV's decode of a fixture (NAME.ref). */
typedef struct ref {
    uint32_t n, w, h, tb_num, tb_den;
    const int64_t *pts;
    const uint8_t *rgb; /* n frames of h rows of w * 3 bytes */
    uint8_t *buf;
} ref;

static int load_ref(const char *name, ref *r)
{
    char path[128];
    snprintf(path, sizeof(path), "%s.ref", name);
    size_t size;
    r->buf = slurp(path, &size);
    if (!r->buf || size < 20)
        return 0;
    memcpy(&r->n, r->buf, 4);
    memcpy(&r->w, r->buf + 4, 4);
    memcpy(&r->h, r->buf + 8, 4);
    memcpy(&r->tb_num, r->buf + 12, 4);
    memcpy(&r->tb_den, r->buf + 16, 4);
    r->pts = (const int64_t *)(r->buf + 20);
    r->rgb = r->buf + 20 + 8 * (size_t)r->n;
    return size == 20 + 8 * (size_t)r->n + (size_t)r->n * r->w * r->h * 3;
}

/* What a frame callback collects: the frames delivered, compared with the reference. */
typedef struct collect {
    const ref *r;
    uint32_t got[256];
    size_t n_got;
    int mismatches;
} collect;

static stk_status on_frame(void *ctx, uint32_t frame, const uint8_t *rgb, uint32_t width,
                           uint32_t height, size_t stride, char *err, size_t err_size)
{
    (void)err;
    (void)err_size;
    collect *c = ctx;
    if (c->n_got < 256)
        c->got[c->n_got++] = frame;
    if (width != c->r->w || height != c->r->h || frame >= c->r->n) {
        c->mismatches++;
        return STK_OK;
    }
    size_t row = (size_t)width * 3;
    const uint8_t *want = c->r->rgb + (size_t)frame * height * row;
    for (uint32_t y = 0; y < height; y++)
        if (memcmp(rgb + y * stride, want + y * row, row) != 0) {
            c->mismatches++;
            break;
        }
    return STK_OK;
}

static const char *const GOOD[] = {"h264.mp4", "hevc.mkv", "vp9.webm", "av1.mp4",    "mpeg4.avi",
                                   "vfr.mp4",  "vfr.mkv",  "odd.mp4",  "pattern.mp4"};
#define N_GOOD (sizeof(GOOD) / sizeof(GOOD[0]))

/* Decode want[0 .. n) of the open video and compare each with the reference. */
static int check_frames(stk__vdec *d, const stk__vindex *ix, const ref *r, const uint32_t *want,
                        size_t n, const char *name)
{
    char err[ERRSZ] = "";
    collect c = {.r = r};
    stk_status rc = stk__vdec_frames(d, ix, want, n, on_frame, &c, err, sizeof(err));
    T_CHECKF(rc == STK_OK, "%s: %s", name, err);
    T_CHECKF(c.n_got == n, "%s: %zu frames delivered, %zu asked", name, c.n_got, n);
    for (size_t i = 0; i < n; i++)
        T_CHECKF(c.got[i] == want[i], "%s: frame %u delivered as #%zu, %u asked", name, c.got[i], i,
                 want[i]);
    T_CHECKF(c.mismatches == 0, "%s: %d frames differ from PyAV's (first asked: %u)", name,
             c.mismatches, want[0]);
    return 0;
}

/* Every fixture: the index is PyAV's frames and timestamps; all frames in one pass, each frame
 * alone (a seek per frame), and strided clips from every start equal PyAV's pixels. */
static int test_matches_pyav(void)
{
    NEED_FIXTURES();
    stk__vdec *d;
    char err[ERRSZ];
    T_OK(stk__vdec_create(1, 0, false, &d, err, sizeof(err)));
    for (size_t k = 0; k < N_GOOD; k++) {
        const char *name = GOOD[k];
        ref r = {0};
        size_t size;
        uint8_t *buf = slurp(name, &size);
        T_CHECKF(buf && load_ref(name, &r), "fixture %s", name);
        stk_status rc = stk__vdec_open(d, buf, size, err, sizeof(err));
        T_CHECKF(rc == STK_OK, "%s: %s", name, err);
        stk__vindex ix;
        rc = stk__vdec_index(d, &ix, err, sizeof(err));
        T_CHECKF(rc == STK_OK, "%s: %s", name, err);
        T_CHECKF(ix.n_frames == r.n, "%s: %u frames indexed, PyAV decodes %u", name, ix.n_frames,
                 r.n);
        T_CHECKF(ix.width == r.w && ix.height == r.h, "%s: %ux%u", name, ix.width, ix.height);
        T_CHECKF((uint32_t)ix.tb_num * r.tb_den == (uint32_t)ix.tb_den * r.tb_num,
                 "%s: time base %d/%d, PyAV's %u/%u", name, ix.tb_num, ix.tb_den, r.tb_num,
                 r.tb_den);
        for (uint32_t i = 0; i < r.n; i++)
            T_CHECKF(ix.pts[i] == r.pts[i], "%s: frame %u at pts %lld, PyAV's at %lld", name, i,
                     (long long)ix.pts[i], (long long)r.pts[i]);
        T_CHECKF(ix.n_keys >= 1 && ix.keys[0] == 0, "%s: keys", name);
        /* the index outlives the next calls: copy it */
        int64_t pts[256];
        uint32_t keys[256];
        T_CHECK(ix.n_frames <= 256 && ix.n_keys <= 256);
        memcpy(pts, ix.pts, ix.n_frames * sizeof(int64_t));
        memcpy(keys, ix.keys, ix.n_keys * sizeof(uint32_t));
        ix.pts = pts;
        ix.keys = keys;
        uint32_t all[256];
        for (uint32_t i = 0; i < r.n; i++)
            all[i] = i;
        if (check_frames(d, &ix, &r, all, r.n, name))
            return 1;
        for (uint32_t i = 0; i < r.n; i++)
            if (check_frames(d, &ix, &r, &all[i], 1, name))
                return 1;
        for (uint32_t step = 2; step <= 4; step++)
            for (uint32_t start = 0; start + 3 * step < r.n; start += 3) {
                uint32_t clip[4] = {start, start + step, start + 2 * step, start + 3 * step};
                if (check_frames(d, &ix, &r, clip, 4, name))
                    return 1;
            }
        stk__vdec_close(d);
        free(buf);
        free(r.buf);
    }
    stk__vdec_destroy(d);
    return 0;
}

/* A clip late in a long GOP with B-frames: decoding starts at the keyframe, the non-reference
 * frames before the clip are sent with AVDISCARD_NONREF, and only the clip's frames are
 * converted. Decoder threads give the same pixels. */
static int test_skips_what_the_clip_does_not_need(void)
{
    NEED_FIXTURES();
    const char *name = "pattern.mp4"; /* 60 frames, one GOP, 3 B-frames */
    ref r = {0};
    size_t size;
    uint8_t *buf = slurp(name, &size);
    T_CHECK(buf && load_ref(name, &r));
    for (uint32_t threads = 1; threads <= 3; threads += 2) {
        stk__vdec *d;
        char err[ERRSZ];
        T_OK(stk__vdec_create(threads, 0, false, &d, err, sizeof(err)));
        T_OK(stk__vdec_open(d, buf, size, err, sizeof(err)));
        stk__vindex ix;
        T_OK(stk__vdec_index(d, &ix, err, sizeof(err)));
        T_EQ(ix.n_keys, 1);
        uint32_t clip[4] = {40, 44, 48, 52};
        if (check_frames(d, &ix, &r, clip, 4, name))
            return 1;
        stk__vdec_counts c;
        stk__vdec_get_counts(d, &c);
        T_EQ(c.converted, 4);
        T_CHECKF(c.discarded >= 20, "%llu of %llu packets discarded",
                 (unsigned long long)c.discarded, (unsigned long long)c.packets);
        T_CHECKF(c.decoded < 53, "%llu pictures decoded for a clip ending at frame 52",
                 (unsigned long long)c.decoded);
        stk__vdec_destroy(d);
    }
    free(buf);
    free(r.buf);
    return 0;
}

/* The packed index round-trips (constant and variable frame rates); damaged packs are refused,
 * never misread. */
static int test_index_pack(void)
{
    NEED_FIXTURES();
    const char *names[] = {"h264.mp4", "vfr.mp4", "mpeg4.avi", "vp9.webm"};
    stk__vdec *d;
    char err[ERRSZ];
    T_OK(stk__vdec_create(1, 0, false, &d, err, sizeof(err)));
    for (size_t k = 0; k < 4; k++) {
        size_t size;
        uint8_t *buf = slurp(names[k], &size);
        T_CHECK(buf);
        T_OK(stk__vdec_open(d, buf, size, err, sizeof(err)));
        stk__vindex ix;
        T_OK(stk__vdec_index(d, &ix, err, sizeof(err)));
        size_t need = stk__vindex_pack(&ix, NULL, 0);
        T_CHECK(need > 0 && need < 4096);
        uint8_t packed[4096];
        T_EQ(stk__vindex_pack(&ix, packed, sizeof(packed)), need);
        stk__vindex back;
        int64_t *pts = NULL;
        uint32_t *keys = NULL;
        size_t pcap = 0, kcap = 0;
        T_CHECK(stk__vindex_unpack(packed, need, &back, &pts, &pcap, &keys, &kcap));
        T_EQ(back.n_frames, ix.n_frames);
        T_EQ(back.n_keys, ix.n_keys);
        T_EQ(back.tb_num, ix.tb_num);
        T_EQ(back.tb_den, ix.tb_den);
        T_EQ(back.width, ix.width);
        T_EQ(back.stream, ix.stream);
        T_CHECK(memcmp(back.pts, ix.pts, ix.n_frames * sizeof(int64_t)) == 0);
        T_CHECK(memcmp(back.keys, ix.keys, ix.n_keys * sizeof(uint32_t)) == 0);
        /* every truncation and every single-byte change is refused or gives a valid index */
        for (size_t cut = 0; cut < need; cut++)
            T_CHECK(!stk__vindex_unpack(packed, cut, &back, &pts, &pcap, &keys, &kcap));
        for (size_t i = 0; i < need; i++) {
            packed[i] ^= 0x41;
            if (stk__vindex_unpack(packed, need, &back, &pts, &pcap, &keys, &kcap)) {
                T_CHECK(back.n_frames >= 1 && back.n_keys >= 1 && back.keys[0] == 0);
                for (uint32_t f = 1; f < back.n_frames; f++)
                    T_CHECK(back.pts[f] > back.pts[f - 1]);
                for (uint32_t f = 0; f < back.n_keys; f++)
                    T_CHECK(back.keys[f] < back.n_frames);
            }
            packed[i] ^= 0x41;
        }
        free(pts);
        free(keys);
        free(buf);
    }
    stk__vdec_destroy(d);
    /* seconds as Python's float(Fraction(pts) * time_base) */
    stk__vindex ix = {.tb_num = 1, .tb_den = 12800};
    T_CHECK(stk__vindex_seconds(&ix, 512) == 0.04);
    ix.tb_num = 1001;
    ix.tb_den = 30000;
    T_CHECK(stk__vindex_seconds(&ix, 3) == 3003.0 / 30000.0);
    return 0;
}

/* Open, index and decode, expecting a failure with `want` in its message; lenient decoders
 * must not crash either (their result is not checked). */
static int expect_fail(const char *name, const char *want, stk_status code)
{
    size_t size;
    uint8_t *buf = slurp(name, &size);
    T_CHECKF(buf, "fixture %s", name);
    for (int lenient = 0; lenient <= 1; lenient++) {
        stk__vdec *d;
        char err[ERRSZ] = "";
        T_OK(stk__vdec_create(1, 0, lenient, &d, err, sizeof(err)));
        stk__vindex ix;
        stk_status rc = stk__vdec_open(d, buf, size, err, sizeof(err));
        if (rc == STK_OK)
            rc = stk__vdec_index(d, &ix, err, sizeof(err));
        if (rc == STK_OK) {
            uint32_t *all = malloc(ix.n_frames * sizeof(uint32_t));
            T_CHECK(all);
            for (uint32_t i = 0; i < ix.n_frames; i++)
                all[i] = i;
            collect c = {0};
            ref r = {.n = 0};
            c.r = &r;
            rc = stk__vdec_frames(d, &ix, all, ix.n_frames, on_frame, &c, err, sizeof(err));
            free(all);
        }
        if (!lenient) {
            T_CHECKF(rc == code, "%s: status %d (%s), %d expected", name, rc, err, code);
            T_CHECKF(strstr(err, want), "%s: '%s' lacks '%s'", name, err, want);
        }
        stk__vdec_destroy(d);
    }
    free(buf);
    return 0;
}

static int test_bad_input(void)
{
    NEED_FIXTURES();
    if (expect_fail("truncated.mp4", "truncated", STK_EFORMAT) ||
        expect_fail("corrupt.mp4", "H.264", STK_EFORMAT) ||
        expect_fail("tail_cut.mp4", "not a video stoker reads", STK_EFORMAT) ||
        expect_fail("audio_only.mp4", "no video stream (1 other stream)", STK_EFORMAT) ||
        expect_fail("mjpeg.avi", "video codec 'mjpeg' is not supported", STK_EFORMAT) ||
        expect_fail("not_video.mp4", "not a video stoker reads", STK_EFORMAT))
        return 1;
    /* a frame over max_pixels is refused from the header, before anything is decoded */
    size_t size;
    uint8_t *buf = slurp("h264.mp4", &size);
    stk__vdec *d;
    char err[ERRSZ] = "";
    T_OK(stk__vdec_create(1, 160 * 96 - 1, false, &d, err, sizeof(err)));
    T_EQ(stk__vdec_open(d, buf, size, err, sizeof(err)), STK_ELIMIT);
    T_CHECKF(strstr(err, "frame 160x96 exceeds the pixel limit"), "%s", err);
    T_EQ(stk__vdec_open(d, buf, 0, err, sizeof(err)), STK_EFORMAT);
    T_CHECKF(strstr(err, "empty"), "%s", err);
    stk__vindex ix;
    T_EQ(stk__vdec_index(d, &ix, err, sizeof(err)), STK_EINVAL);
    /* the decoder still decodes a good video after the failures */
    stk__vdec_destroy(d);
    T_OK(stk__vdec_create(1, 0, false, &d, err, sizeof(err)));
    T_EQ(stk__vdec_open(d, "nothing", 7, err, sizeof(err)), STK_EFORMAT);
    T_OK(stk__vdec_open(d, buf, size, err, sizeof(err)));
    T_OK(stk__vdec_index(d, &ix, err, sizeof(err)));
    ref r = {0};
    T_CHECK(load_ref("h264.mp4", &r));
    uint32_t want[2] = {3, 30};
    if (check_frames(d, &ix, &r, want, 2, "h264.mp4 after failures"))
        return 1;
    /* an index that does not describe the video: a frame it lists is never decoded */
    int64_t pts[64];
    memcpy(pts, ix.pts, ix.n_frames * sizeof(int64_t));
    pts[5] += 1;
    stk__vindex wrong = ix;
    wrong.pts = pts;
    uint32_t five = 5;
    collect c = {.r = &r};
    T_EQ(stk__vdec_frames(d, &wrong, &five, 1, on_frame, &c, err, sizeof(err)), STK_EFORMAT);
    T_CHECKF(strstr(err, "frame 5 (pts 2561) was not decoded"), "%s", err);
    stk__vdec_destroy(d);
    free(buf);
    free(r.buf);
    return 0;
}

static int setup(void)
{
    fixtures_ready();
    return 0;
}

T_MAIN(T_CASE(setup), T_CASE(test_matches_pyav), T_CASE(test_skips_what_the_clip_does_not_need),
       T_CASE(test_index_pack), T_CASE(test_bad_input))

#else /* built without libavcodec */

static int test_built_without_avcodec(void)
{
    stk__vdec *d = NULL;
    char err[ERRSZ] = "";
    T_CHECK(!stk__vdec_available());
    T_EQ(stk__vdec_create(1, 0, false, &d, err, sizeof(err)), STK_ENOTSUP);
    T_CHECKF(strstr(err, "stoker was built without libavcodec"), "%s", err);
    return 0;
}

T_MAIN(T_CASE(test_built_without_avcodec))
#endif
