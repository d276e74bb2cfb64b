/*
 * stk_avcodec.c: video through libavformat (containers, from memory through a custom AVIOContext),
 * libavcodec (H.264, H.265, VP8, VP9, AV1 through libdav1d, MPEG-4 part 2) and libswscale (to
 * RGB24); the only file that sees those libraries (stk_video_decode.h has the interface).
 *
 * Per clip: open the bytes (the container's header only: no avformat_find_stream_info, which
 * decodes frames), seek to the last keyframe at or before the clip's first frame, decode forward
 * and hand the frames the clip asks for to the caller. What is not needed is skipped where the
 * codec allows it: every packet whose frame the clip does not want goes in with
 * skip_frame = AVDISCARD_NONREF (a non-reference picture is then not decoded at all; a reference
 * one is, as later pictures need it), only wanted frames are converted to RGB, and decoding stops
 * at the clip's last frame. A seek that lands past the clip's first frame (a container whose
 * index disagrees with its packets) falls back to decoding from the start.
 *
 * Colour conversion is PyAV's frame.to_rgb() (what torchvision.io.read_video returns):
 * sws_getCachedContext(w, h, fmt, w, h, RGB24, SWS_BILINEAR) into rows of
 * FFALIGN(FFALIGN(w, 8) * 3, 16) bytes, as av_image_alloc(..., 16) lays them out, so the frames
 * are PyAV's bit for bit (tested in python/tests/test_video.py).
 *
 * Limits: only the containers named in FORMATS are probed (a smaller attack surface and a clear
 * "not a video stoker reads"), only the codecs in `codecs` are opened, max_pixels is checked
 * against the header, given to libavcodec (AVCodecContext.max_pixels: it refuses to allocate a
 * larger picture) and checked on every picture returned.
 *
 * Logging: libav* would print to stderr. A log callback (installed once) keeps the messages of
 * stoker's own contexts (tagged through their `opaque`) and of calls made from stoker's threads
 * as the thread's last message, used in error texts; every other message goes to libav's default
 * callback as before. (A program that installs its own callback afterwards, such as PyAV at
 * import, gets stoker's messages too.)
 */
#include "decode/stk_video_decode.h"

#include <string.h>

#ifdef STK_HAVE_AVCODEC

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libavutil/log.h>
#include <libswscale/swscale.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

/* STK_FAIL into the (err, err_size) parameters. */
#define FAIL(code, ...)                                                                            \
    do {                                                                                           \
        rc = stk__set_error(err, err_size, (code), __VA_ARGS__);                                   \
        goto fail;                                                                                 \
    } while (0)

#define FORMATS "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi"
#define IO_BUF 32768
#define MAX_PACKETS (1u << 26) /* an index pass stops with an error after this many packets */

/* The codecs stoker opens, with names for messages. */
static const struct {
    enum AVCodecID id;
    const char *name;
} codecs[] = {{AV_CODEC_ID_H264, "H.264"}, {AV_CODEC_ID_HEVC, "H.265"},
              {AV_CODEC_ID_VP8, "VP8"},    {AV_CODEC_ID_VP9, "VP9"},
              {AV_CODEC_ID_AV1, "AV1"},    {AV_CODEC_ID_MPEG4, "MPEG-4 part 2"}};
#define N_CODECS (sizeof(codecs) / sizeof(codecs[0]))

/* ---- logging ---- */

static char stk_tag;                /* the `opaque` of stoker's format and codec contexts */
static _Thread_local int log_depth; /* > 0 while this thread is inside a libav call of ours */
static _Thread_local char log_last[200];
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

/* Whether a log message comes from one of stoker's contexts. */
static bool ours(void *avcl)
{
    const AVClass *cls = avcl ? *(const AVClass **)avcl : NULL;
    if (!cls || !cls->class_name)
        return false;
    if (strcmp(cls->class_name, "AVCodecContext") == 0)
        return ((AVCodecContext *)avcl)->opaque == &stk_tag;
    if (strcmp(cls->class_name, "AVFormatContext") == 0)
        return ((AVFormatContext *)avcl)->opaque == &stk_tag;
    return false;
}

static void log_cb(void *avcl, int level, const char *fmt, va_list vl)
{
    if (!log_depth && !ours(avcl)) {
        av_log_default_callback(avcl, level, fmt, vl);
        return;
    }
    if (level > AV_LOG_ERROR || !log_depth)
        return;
    vsnprintf(log_last, sizeof(log_last), fmt, vl);
    size_t n = strlen(log_last);
    while (n && (log_last[n - 1] == '\n' || log_last[n - 1] == ' '))
        log_last[--n] = '\0';
}

static void log_install(void)
{
    av_log_set_callback(log_cb);
}

static void enter(void)
{
    pthread_once(&log_once, log_install);
    if (log_depth++ == 0)
        log_last[0] = '\0';
}

static void leave(void)
{
    log_depth--;
}

/* "reason (libav: last message)" for an error code r. */
static void av_reason(int r, char *buf, size_t size)
{
    char e[AV_ERROR_MAX_STRING_SIZE];
    av_strerror(r, e, sizeof(e));
    if (log_last[0])
        snprintf(buf, size, "%s (%s)", e, log_last);
    else
        snprintf(buf, size, "%s", e);
}

/* ---- reading the bytes: from memory, or through a caller's reader (ranged reads) ---- */

typedef struct vmem {
    const uint8_t *p;        /* the bytes in memory, or NULL: through src */
    const stk__bytesrc *src; /* borrowed until close */
    size_t size;
    size_t pos;
    uint64_t *bytes; /* the decoder's count of bytes read */
    stk_status rc;   /* the reader's first error, and its text */
    char why[STK_ERRMSG_SIZE];
} vmem;

static int vmem_read(void *opaque, uint8_t *buf, int n)
{
    vmem *m = opaque;
    if (m->pos >= m->size)
        return AVERROR_EOF;
    size_t k = STK_MIN((size_t)n, m->size - m->pos);
    if (m->p) {
        memcpy(buf, m->p + m->pos, k);
    } else {
        char why[STK_ERRMSG_SIZE];
        stk_status rc = m->src->read(m->src->ctx, m->pos, buf, k, why, sizeof(why));
        if (rc < 0) {
            if (m->rc == STK_OK) {
                m->rc = rc;
                memcpy(m->why, why, sizeof(why));
            }
            return AVERROR(EIO);
        }
    }
    m->pos += k;
    *m->bytes += k;
    return (int)k;
}

static int64_t vmem_seek(void *opaque, int64_t off, int whence)
{
    vmem *m = opaque;
    int64_t base;
    switch (whence & ~AVSEEK_FORCE) {
    case AVSEEK_SIZE:
        return (int64_t)m->size;
    case SEEK_SET:
        base = 0;
        break;
    case SEEK_CUR:
        base = (int64_t)m->pos;
        break;
    case SEEK_END:
        base = (int64_t)m->size;
        break;
    default:
        return AVERROR(EINVAL);
    }
    if ((off > 0 && base > INT64_MAX - off) || base + off < 0)
        return AVERROR(EINVAL);
    m->pos = (size_t)STK_MIN((uint64_t)(base + off), (uint64_t)m->size);
    return base + off;
}

/* ---- the decoder ---- */

struct stk__vdec {
    uint32_t threads;
    uint64_t max_pixels;
    bool lenient;
    vmem mem;
    AVIOContext *io;
    AVFormatContext *fmt;
    AVCodecContext *cc;
    int stream;
    const char *codec_name;
    AVPacket *pkt;
    AVFrame *frame;
    struct SwsContext *sws;
    uint8_t *rgb; /* av_malloc'ed: aligned as PyAV's frames */
    size_t rgb_cap;
    /* the index pass's scratch */
    int64_t *pts;
    size_t pts_cap;
    uint32_t *keys;
    size_t keys_cap;
    uint8_t *keyflag;
    size_t keyflag_cap;
    stk__vdec_counts counts;
};

bool stk__vdec_available(void)
{
    return true;
}

stk_status stk__vdec_create(uint32_t threads, uint64_t max_pixels, bool lenient, stk__vdec **out,
                            char *err, size_t err_size)
{
    *out = NULL;
    stk__vdec *d = stk__calloc(1, sizeof(*d));
    if (!d)
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for a video decoder");
    d->threads = threads ? threads : 1;
    d->max_pixels = max_pixels ? max_pixels : 64000000u;
    d->lenient = lenient;
    d->stream = -1;
    d->pkt = av_packet_alloc();
    d->frame = av_frame_alloc();
    if (!d->pkt || !d->frame) {
        stk__vdec_destroy(d);
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for a video decoder");
    }
    *out = d;
    return STK_OK;
}

void stk__vdec_close(stk__vdec *d)
{
    if (!d)
        return;
    avcodec_free_context(&d->cc);
    avformat_close_input(&d->fmt); /* custom I/O: leaves d->io */
    if (d->io) {
        av_freep(&d->io->buffer);
        avio_context_free(&d->io);
    }
    d->stream = -1;
    d->mem.p = NULL;
    d->mem.src = NULL;
}

void stk__vdec_destroy(stk__vdec *d)
{
    if (!d)
        return;
    stk__vdec_close(d);
    av_packet_free(&d->pkt);
    av_frame_free(&d->frame);
    sws_freeContext(d->sws);
    av_free(d->rgb);
    stk__free(d->pts);
    stk__free(d->keys);
    stk__free(d->keyflag);
    stk__free(d);
}

void stk__vdec_set_threads(stk__vdec *d, uint32_t threads)
{
    d->threads = threads ? threads : 1;
}

void stk__vdec_get_counts(const stk__vdec *d, stk__vdec_counts *out)
{
    *out = d->counts;
}

/* The name stoker uses for codec id, or NULL for one it does not open. */
static const char *codec_name(enum AVCodecID id)
{
    for (size_t i = 0; i < N_CODECS; i++)
        if (codecs[i].id == id)
            return codecs[i].name;
    return NULL;
}

/* A failure after the reader failed is the reader's (a read error of the file): its status and
 * text replace libav's "Input/output error". */
static stk_status io_error(stk__vdec *d, stk_status rc, char *err, size_t err_size)
{
    if (rc >= 0 || d->mem.rc == STK_OK)
        return rc;
    stk_status io = d->mem.rc;
    d->mem.rc = STK_OK;
    return stk__set_error(err, err_size, io, "%s", d->mem.why);
}

/* Open the container in d->mem (positioned at its start). */
static stk_status open_container(stk__vdec *d, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    char why[300];
    AVDictionary *opts = NULL;
    uint8_t *buf = av_malloc(IO_BUF);
    d->mem.pos = 0;
    if (buf)
        d->io = avio_alloc_context(buf, IO_BUF, 0, &d->mem, vmem_read, NULL, vmem_seek);
    if (!d->io) {
        av_free(buf);
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory opening a video");
    }
    d->fmt = avformat_alloc_context();
    if (!d->fmt)
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory opening a video");
    d->fmt->pb = d->io;
    d->fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
    d->fmt->opaque = &stk_tag;
    av_dict_set(&opts, "format_whitelist", FORMATS, 0);
    int r = avformat_open_input(&d->fmt, "", NULL, &opts); /* frees d->fmt on failure */
    av_dict_free(&opts);
    if (r < 0) {
        av_reason(r, why, sizeof(why));
        if (r == AVERROR(ENOMEM))
            return stk__set_error(err, err_size, STK_ENOMEM, "out of memory opening a video");
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "not a video stoker reads (MP4/MOV, Matroska/WebM or AVI): %s", why);
    }
    /* AVI stores no presentation timestamps: libavformat generates them (AVFMT_FLAG_GENPTS) from
     * the decode order once avformat_find_stream_info has learnt the stream's reorder delay, as
     * for PyAV, which does both. The other containers carry them: their streams are not probed. */
    if (strcmp(d->fmt->iformat->name, "avi") == 0) {
        d->fmt->flags |= AVFMT_FLAG_GENPTS;
        r = avformat_find_stream_info(d->fmt, NULL);
        if (r < 0) {
            av_reason(r, why, sizeof(why));
            return stk__set_error(err, err_size, r == AVERROR(ENOMEM) ? STK_ENOMEM : STK_EFORMAT,
                                  "AVI: %s", why);
        }
    }
    return rc;
}

/* Find the first video stream (cover art left out) and open its decoder. */
static stk_status open_stream(stk__vdec *d, char *err, size_t err_size)
{
    AVStream *st = NULL;
    for (unsigned i = 0; i < d->fmt->nb_streams; i++) {
        AVStream *s = d->fmt->streams[i];
        if (s->codecpar->codec_type == AVMEDIA_TYPE_VIDEO &&
            !(s->disposition & AV_DISPOSITION_ATTACHED_PIC)) {
            st = s;
            break;
        }
    }
    if (!st)
        return stk__set_error(err, err_size, STK_EFORMAT, "no video stream (%u other stream%s)",
                              d->fmt->nb_streams, d->fmt->nb_streams == 1 ? "" : "s");
    const AVCodecParameters *par = st->codecpar;
    const char *name = codec_name(par->codec_id);
    if (!name) {
        const AVCodecDescriptor *cd = avcodec_descriptor_get(par->codec_id);
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "video codec '%s' is not supported (H.264, H.265, VP8, VP9, AV1, "
                              "MPEG-4 part 2)",
                              cd ? cd->name : "unknown");
    }
    if (par->width <= 0 || par->height <= 0)
        return stk__set_error(err, err_size, STK_EFORMAT, "%s stream without a frame size", name);
    if ((uint64_t)par->width * (uint64_t)par->height > d->max_pixels)
        return stk__set_error(err, err_size, STK_ELIMIT,
                              "frame %dx%d exceeds the pixel limit (%llu Mpx)", par->width,
                              par->height, (unsigned long long)(d->max_pixels / 1000000));
    if (st->time_base.num <= 0 || st->time_base.den <= 0)
        return stk__set_error(err, err_size, STK_EFORMAT, "%s stream without a time base", name);
    const AVCodec *codec = avcodec_find_decoder(par->codec_id);
    if (!codec)
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "this libavcodec has no %s decoder (stoker decodes with the "
                              "system's libavcodec)",
                              name);
    d->cc = avcodec_alloc_context3(codec);
    if (!d->cc || avcodec_parameters_to_context(d->cc, par) < 0)
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory opening a %s decoder",
                              name);
    d->cc->opaque = &stk_tag;
    d->cc->pkt_timebase = st->time_base;
    /* MPEG-4 part 2 decodes on one thread: with frame threads, a damaged stream decoded strictly
     * (AV_EF_EXPLODE) after a seek makes libavcodec 5.1 abort the process (av_assert0
     * frame->buf[0] in decode.c): found by fuzz_video, corpus seed mpeg4_threads_abort.avi. */
    d->cc->thread_count = par->codec_id == AV_CODEC_ID_MPEG4 ? 1 : (int)d->threads;
    if (d->cc->thread_count > 1)
        d->cc->thread_type = FF_THREAD_FRAME | FF_THREAD_SLICE;
    d->cc->max_pixels = (int64_t)STK_MIN(d->max_pixels, (uint64_t)INT64_MAX);
    if (!d->lenient)
        d->cc->err_recognition |= AV_EF_EXPLODE;
    int r = avcodec_open2(d->cc, codec, NULL);
    if (r < 0) {
        char why[300];
        av_reason(r, why, sizeof(why));
        return stk__set_error(err, err_size, r == AVERROR(ENOMEM) ? STK_ENOMEM : STK_EFORMAT,
                              "cannot open the %s decoder: %s", name, why);
    }
    d->stream = st->index;
    d->codec_name = name;
    return STK_OK;
}

/* Open the video whose bytes d->mem describes. */
static stk_status open_mem(stk__vdec *d, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    if (d->mem.size == 0)
        return stk__set_error(err, err_size, STK_EFORMAT, "empty (0 bytes)");
    d->mem.bytes = &d->counts.bytes;
    d->mem.rc = STK_OK;
    enter();
    rc = open_container(d, err, err_size);
    if (rc == STK_OK)
        rc = open_stream(d, err, err_size);
    rc = io_error(d, rc, err, err_size);
    leave();
    if (rc < 0)
        stk__vdec_close(d);
    return rc;
}

stk_status stk__vdec_open(stk__vdec *d, const void *buf, size_t size, char *err, size_t err_size)
{
    stk__vdec_close(d);
    d->mem = (vmem){.p = buf, .size = size};
    return open_mem(d, err, err_size);
}

stk_status stk__vdec_open_reader(stk__vdec *d, const stk__bytesrc *src, char *err, size_t err_size)
{
    stk__vdec_close(d);
    if (src->size > SIZE_MAX)
        return stk__set_error(err, err_size, STK_ELIMIT, "a video of %llu bytes",
                              (unsigned long long)src->size);
    d->mem = (vmem){.src = src, .size = (size_t)src->size};
    return open_mem(d, err, err_size);
}

/* Grow an array of n elements of `elem` bytes. */
static bool grow(void **p, size_t *cap, size_t n, size_t elem)
{
    if (n <= *cap)
        return true;
    size_t c = STK_MAX(n, *cap * 2);
    void *q = stk__realloc(*p, c * elem);
    if (!q)
        return false;
    *p = q;
    *cap = c;
    return true;
}

/* Sort pts[0, n) ascending, carrying flag[] along (insertion sort on the nearly sorted decode
 * order: a packet is at most the reorder depth away from its place). */
static void sort_pts(int64_t *pts, uint8_t *flag, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        int64_t p = pts[i];
        uint8_t f = flag[i];
        size_t j = i;
        while (j > 0 && pts[j - 1] > p) {
            pts[j] = pts[j - 1];
            flag[j] = flag[j - 1];
            j--;
        }
        pts[j] = p;
        flag[j] = f;
    }
}

stk_status stk__vdec_index(stk__vdec *d, stk__vindex *out, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    char why[300];
    if (!d->fmt)
        return stk__set_error(err, err_size, STK_EINVAL, "no video open");
    enter();
    size_t n = 0, n_stream = 0;
    for (;;) {
        int r = av_read_frame(d->fmt, d->pkt);
        if (r == AVERROR_EOF)
            break;
        if (r < 0) {
            if (d->lenient || r == AVERROR_EOF)
                break;
            av_reason(r, why, sizeof(why));
            FAIL(STK_EFORMAT, "reading packet %zu: %s", n, why);
        }
        bool ours = d->pkt->stream_index == d->stream;
        bool cut = ours && (d->pkt->flags & AV_PKT_FLAG_CORRUPT);
        bool take = ours && !(d->pkt->flags & AV_PKT_FLAG_DISCARD);
        n_stream += ours;
        int64_t pts = d->pkt->pts;
        bool key = d->pkt->flags & AV_PKT_FLAG_KEY;
        av_packet_unref(d->pkt);
        if (cut && !d->lenient)
            FAIL(STK_EFORMAT, "%s packet %zu is cut short: the file ends at byte %zu (truncated?)",
                 d->codec_name, n, d->mem.size);
        if (!take)
            continue;
        if (pts == AV_NOPTS_VALUE)
            FAIL(STK_EFORMAT,
                 "%s packet %zu has no timestamp (stoker needs the container's "
                 "presentation timestamps; remux the file, e.g. ffmpeg -i IN -c copy "
                 "OUT.mkv)",
                 d->codec_name, n);
        if (n >= MAX_PACKETS)
            FAIL(STK_ELIMIT, "more than %u video packets", MAX_PACKETS);
        if (!grow((void **)&d->pts, &d->pts_cap, n + 1, sizeof(int64_t)) ||
            !grow((void **)&d->keyflag, &d->keyflag_cap, n + 1, 1))
            FAIL(STK_ENOMEM, "out of memory indexing a video");
        d->pts[n] = pts;
        d->keyflag[n] = key;
        n++;
    }
    if (n == 0)
        FAIL(STK_EFORMAT, "no %s frame in the stream", d->codec_name);
    /* A container that counts its frames (MP4's sample table, AVI's header) and holds fewer: the
     * file was cut (its packets past the end are not read). */
    int64_t declared = d->fmt->streams[d->stream]->nb_frames;
    if (!d->lenient && declared > 0 && (int64_t)n_stream < declared)
        FAIL(STK_EFORMAT,
             "the file holds %zu of the %lld frames its header lists: it ends at byte %zu "
             "(truncated?)",
             n_stream, (long long)declared, d->mem.size);
    sort_pts(d->pts, d->keyflag, n);
    size_t nk = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && d->pts[i] == d->pts[i - 1])
            FAIL(STK_EFORMAT, "two frames at pts %lld", (long long)d->pts[i]);
        if (d->keyflag[i] || i == 0) {
            if (!grow((void **)&d->keys, &d->keys_cap, nk + 1, sizeof(uint32_t)))
                FAIL(STK_ENOMEM, "out of memory indexing a video");
            d->keys[nk++] = (uint32_t)i;
        }
    }
    const AVStream *st = d->fmt->streams[d->stream];
    memset(out, 0, sizeof(*out));
    out->stream = d->stream;
    out->tb_num = st->time_base.num;
    out->tb_den = st->time_base.den;
    out->width = (uint32_t)st->codecpar->width;
    out->height = (uint32_t)st->codecpar->height;
    out->codec = (uint32_t)st->codecpar->codec_id;
    out->n_frames = (uint32_t)n;
    out->n_keys = (uint32_t)nk;
    out->pts = d->pts;
    out->keys = d->keys;
fail:
    rc = io_error(d, rc, err, err_size);
    leave();
    return rc;
}

/* Convert the decoded frame to RGB24 as PyAV does, into *rgb (rows *stride bytes apart). */
static stk_status convert(stk__vdec *d, const AVFrame *f, uint8_t **rgb, size_t *stride, char *err,
                          size_t err_size)
{
    int w = f->width, h = f->height;
    d->sws = sws_getCachedContext(d->sws, w, h, (enum AVPixelFormat)f->format, w, h,
                                  AV_PIX_FMT_RGB24, SWS_BILINEAR, NULL, NULL, NULL);
    if (!d->sws)
        return stk__set_error(err, err_size, STK_EFORMAT, "cannot convert %dx%d %s pictures to RGB",
                              w, h,
                              av_get_pix_fmt_name((enum AVPixelFormat)f->format)
                                  ? av_get_pix_fmt_name((enum AVPixelFormat)f->format)
                                  : "?");
    /* av_image_alloc(..., align 16)'s rows: the width rounded up to 8, then the row to 16 */
    size_t line = ((((size_t)w + 7) & ~(size_t)7) * 3 + 15) & ~(size_t)15;
    size_t need = line * (size_t)h + 64;
    if (need > d->rgb_cap) {
        if (stk__thread_budget && !stk__budget_charge(stk__thread_budget, need - d->rgb_cap))
            return stk__set_error(err, err_size, STK_ELIMIT,
                                  "a %dx%d frame would take the loader over its memory budget", w,
                                  h);
        av_free(d->rgb);
        d->rgb_cap = 0;
        if (!(d->rgb = av_malloc(need)))
            return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for a %dx%d frame", w,
                                  h);
        d->rgb_cap = need;
    }
    uint8_t *dst[4] = {d->rgb, NULL, NULL, NULL};
    int dst_stride[4] = {(int)line, 0, 0, 0};
    sws_scale(d->sws, (const uint8_t *const *)f->data, f->linesize, 0, h, dst, dst_stride);
    d->counts.converted++;
    *rgb = d->rgb;
    *stride = line;
    return STK_OK;
}

/* The position of pts in the sorted list, or -1. */
static int64_t find_pts(const stk__vindex *ix, int64_t pts)
{
    size_t lo = 0, hi = ix->n_frames;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ix->pts[mid] < pts)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < ix->n_frames && ix->pts[lo] == pts ? (int64_t)lo : -1;
}

/* Whether pts is one of the wanted frames' (want[from ..], increasing). */
static bool wanted(const stk__vindex *ix, const uint32_t *want, size_t from, size_t n, int64_t pts)
{
    for (size_t j = from; j < n && ix->pts[want[j]] <= pts; j++)
        if (ix->pts[want[j]] == pts)
            return true;
    return false;
}

/* Position the demuxer for a decode from keyframe k (its frame number; UINT32_MAX: from the start,
 * by reopening the container, which any file supports). */
static stk_status position(stk__vdec *d, const stk__vindex *ix, uint32_t k, char *err,
                           size_t err_size)
{
    d->counts.seeks++;
    if (k != UINT32_MAX) {
        int r = av_seek_frame(d->fmt, d->stream, ix->pts[k], AVSEEK_FLAG_BACKWARD);
        if (r >= 0) {
            avcodec_flush_buffers(d->cc);
            return STK_OK;
        }
    }
    /* from the start: reopen (the decoder is reopened too, fresh) */
    vmem keep = d->mem;
    stk__vdec_close(d);
    d->mem = keep;
    stk_status rc = open_container(d, err, err_size);
    if (rc == STK_OK)
        rc = open_stream(d, err, err_size);
    return rc;
}

/* One pass: decode from keyframe `key` (frame number, or UINT32_MAX: from the start) and deliver
 * want[*next ..]. STK_OK with *next == n when done; *overshot when the first picture decoded is
 * past the first frame still wanted (the seek landed too late: retry from the start). */
static stk_status decode_pass(stk__vdec *d, const stk__vindex *ix, uint32_t key,
                              const uint32_t *want, size_t n, size_t *next, bool *overshot,
                              stk__vframe_fn fn, void *ctx, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    char why[300];
    bool eof = false, first = true;
    *overshot = false;
    STK_TRY(position(d, ix, key, err, err_size));
    const AVStream *st = d->fmt->streams[d->stream];
    if (ix->stream != d->stream || st->time_base.num != ix->tb_num ||
        st->time_base.den != ix->tb_den)
        FAIL(STK_EFORMAT, "the video's index does not describe it (stream or time base differs)");
    while (*next < n && !eof) {
        int r = av_read_frame(d->fmt, d->pkt);
        if (r < 0 && r != AVERROR_EOF && !d->lenient) {
            av_reason(r, why, sizeof(why));
            FAIL(STK_EFORMAT, "reading the %s stream: %s", d->codec_name, why);
        }
        if (r < 0) {
            eof = true;
            r = avcodec_send_packet(d->cc, NULL); /* drain */
        } else if (d->pkt->stream_index != d->stream) {
            av_packet_unref(d->pkt);
            continue;
        } else if ((d->pkt->flags & AV_PKT_FLAG_CORRUPT) && !d->lenient) {
            /* libavformat read fewer bytes than the container says the packet has */
            int64_t at = d->pkt->pts;
            av_packet_unref(d->pkt);
            FAIL(STK_EFORMAT,
                 "the %s packet at pts %lld is cut short: the file ends at byte %zu (truncated?)",
                 d->codec_name, (long long)at, d->mem.size);
        } else {
            /* A packet whose picture the clip does not want: a non-reference one is not decoded. */
            bool skip = d->pkt->pts != AV_NOPTS_VALUE && !wanted(ix, want, *next, n, d->pkt->pts);
            d->cc->skip_frame = skip ? AVDISCARD_NONREF : AVDISCARD_DEFAULT;
            d->counts.packets++;
            d->counts.discarded += skip;
            r = avcodec_send_packet(d->cc, d->pkt);
            av_packet_unref(d->pkt);
        }
        if (r < 0 && r != AVERROR_EOF && !d->lenient) {
            av_reason(r, why, sizeof(why));
            FAIL(r == AVERROR(ENOMEM) ? STK_ENOMEM : STK_EFORMAT, "%s: %s", d->codec_name, why);
        }
        for (;;) {
            r = avcodec_receive_frame(d->cc, d->frame);
            if (r == AVERROR(EAGAIN) || r == AVERROR_EOF)
                break;
            if (r < 0) {
                if (d->lenient)
                    break;
                av_reason(r, why, sizeof(why));
                FAIL(r == AVERROR(ENOMEM) ? STK_ENOMEM : STK_EFORMAT, "%s: %s", d->codec_name, why);
            }
            d->counts.decoded++;
            AVFrame *f = d->frame;
            int64_t fp = f->pts != AV_NOPTS_VALUE ? f->pts : f->best_effort_timestamp;
            bool bad = (f->flags & AV_FRAME_FLAG_CORRUPT) || f->decode_error_flags;
            if (bad && !d->lenient) {
                av_frame_unref(f);
                FAIL(STK_EFORMAT, "%s: corrupt picture at pts %lld%s%s", d->codec_name,
                     (long long)fp, log_last[0] ? ": " : "", log_last);
            }
            if ((uint64_t)f->width * (uint64_t)f->height > d->max_pixels) {
                av_frame_unref(f);
                FAIL(STK_ELIMIT, "frame %dx%d exceeds the pixel limit (%llu Mpx)", f->width,
                     f->height, (unsigned long long)(d->max_pixels / 1000000));
            }
            if (first && *next < n && fp > ix->pts[want[*next]] && key != UINT32_MAX) {
                *overshot = true; /* the seek landed after the frame: decode from the start */
                av_frame_unref(f);
                return STK_OK;
            }
            first = false;
            if (*next < n && fp != AV_NOPTS_VALUE && fp > ix->pts[want[*next]]) {
                av_frame_unref(f);
                FAIL(STK_EFORMAT,
                     "frame %u (pts %lld) was not decoded (a picture at pts %lld came "
                     "instead)",
                     want[*next], (long long)ix->pts[want[*next]], (long long)fp);
            }
            if (*next < n && fp == ix->pts[want[*next]]) {
                uint8_t *rgb = NULL;
                size_t stride = 0;
                rc = convert(d, f, &rgb, &stride, err, err_size);
                if (rc == STK_OK) {
                    leave(); /* the callback is the caller's code */
                    rc = fn(ctx, want[*next], rgb, (uint32_t)f->width, (uint32_t)f->height, stride,
                            err, err_size);
                    enter();
                }
                if (rc < 0) {
                    av_frame_unref(f);
                    goto fail;
                }
                (*next)++;
            } else if (fp != AV_NOPTS_VALUE && find_pts(ix, fp) < 0 && !d->lenient) {
                av_frame_unref(f);
                FAIL(STK_EFORMAT, "a picture at pts %lld that the video's index does not list",
                     (long long)fp);
            }
            av_frame_unref(f);
            if (*next >= n)
                break;
        }
    }
    if (*next < n)
        FAIL(STK_EFORMAT, "the stream ends before frame %u (pts %lld) of %u (truncated?)%s%s",
             want[*next], (long long)ix->pts[want[*next]], ix->n_frames, log_last[0] ? ": " : "",
             log_last);
fail:
    return rc;
}

stk_status stk__vdec_frames(stk__vdec *d, const stk__vindex *ix, const uint32_t *want, size_t n,
                            stk__vframe_fn fn, void *ctx, char *err, size_t err_size)
{
    if (!d->fmt || d->stream < 0)
        return stk__set_error(err, err_size, STK_EINVAL, "no video open");
    if (n == 0)
        return STK_OK;
    /* The last keyframe at or before the first frame wanted (none: from the start). */
    uint32_t key = UINT32_MAX;
    size_t lo = 0, hi = ix->n_keys;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ix->keys[mid] <= want[0])
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo > 0)
        key = ix->keys[lo - 1];
    enter();
    size_t next = 0;
    bool overshot = false;
    stk_status rc = decode_pass(d, ix, key, want, n, &next, &overshot, fn, ctx, err, err_size);
    if (rc == STK_OK && overshot)
        rc = decode_pass(d, ix, UINT32_MAX, want, n, &next, &overshot, fn, ctx, err, err_size);
    rc = io_error(d, rc, err, err_size);
    leave();
    return rc;
}

#else /* !STK_HAVE_AVCODEC */

#define NO_AVCODEC                                                                                 \
    "stoker was built without libavcodec (install libavformat-dev, libavcodec-dev, "               \
    "libswscale-dev and rebuild)"

struct stk__vdec {
    int unused;
};

bool stk__vdec_available(void)
{
    return false;
}

stk_status stk__vdec_create(uint32_t threads, uint64_t max_pixels, bool lenient, stk__vdec **out,
                            char *err, size_t err_size)
{
    (void)threads, (void)max_pixels, (void)lenient;
    *out = NULL;
    return stk__set_error(err, err_size, STK_ENOTSUP, NO_AVCODEC);
}

void stk__vdec_destroy(stk__vdec *d)
{
    (void)d;
}

void stk__vdec_set_threads(stk__vdec *d, uint32_t threads)
{
    (void)d, (void)threads;
}

void stk__vdec_get_counts(const stk__vdec *d, stk__vdec_counts *out)
{
    (void)d;
    memset(out, 0, sizeof(*out));
}

stk_status stk__vdec_open(stk__vdec *d, const void *buf, size_t size, char *err, size_t err_size)
{
    (void)d, (void)buf, (void)size;
    return stk__set_error(err, err_size, STK_ENOTSUP, NO_AVCODEC);
}

stk_status stk__vdec_open_reader(stk__vdec *d, const stk__bytesrc *src, char *err, size_t err_size)
{
    (void)d, (void)src;
    return stk__set_error(err, err_size, STK_ENOTSUP, NO_AVCODEC);
}

stk_status stk__vdec_index(stk__vdec *d, stk__vindex *out, char *err, size_t err_size)
{
    (void)d, (void)out;
    return stk__set_error(err, err_size, STK_ENOTSUP, NO_AVCODEC);
}

stk_status stk__vdec_frames(stk__vdec *d, const stk__vindex *ix, const uint32_t *want, size_t n,
                            stk__vframe_fn fn, void *ctx, char *err, size_t err_size)
{
    (void)d, (void)ix, (void)want, (void)n, (void)fn, (void)ctx;
    return stk__set_error(err, err_size, STK_ENOTSUP, NO_AVCODEC);
}

void stk__vdec_close(stk__vdec *d)
{
    (void)d;
}

#endif /* STK_HAVE_AVCODEC */
