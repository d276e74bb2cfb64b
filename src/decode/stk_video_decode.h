/*
 * stk_video_decode.h: the internal video-decoding interface between src/decode (containers and
 * codecs through libavformat/libavcodec, colour conversion through libswscale: stk_avcodec.c)
 * and src/xform (the video kind of transform, stk_video.c).
 *
 * A video is opened from memory (the record's bytes; no temporary file), indexed (its frames'
 * presentation timestamps and which of them are keyframes, from one demux pass without decoding)
 * and then asked for a set of frames by their numbers in presentation order: the decoder seeks to
 * the last keyframe at or before the first one, decodes forward, drops the non-reference frames
 * the clip does not need before they are decoded (AVDISCARD_NONREF per packet), converts only the
 * frames asked for to RGB (libswscale, with exactly the settings PyAV's frame.to_rgb() uses, so
 * the pixels are PyAV's bit for bit) and hands each to a callback, in presentation order.
 *
 * The index has a compact serialised form (stk__vindex_pack / _unpack) that a loader keeps per
 * video and caches beside the data (src/source/video/stk_vindex.c), so a video is demuxed for its
 * index once.
 *
 * Built without libavformat/libavcodec (STK_HAVE_AVCODEC undefined), every call fails with
 * STK_ENOTSUP and "stoker was built without libavcodec".
 *
 * Ownership: a stk__vdec belongs to one worker thread; its buffers grow to the largest video seen
 * and are reused. The bytes given to stk__vdec_open are borrowed until stk__vdec_close.
 */
#ifndef STK_VIDEO_DECODE_H
#define STK_VIDEO_DECODE_H

#include "stk_internal.h"

/* One video's frames in presentation order (what stk__vdec_index builds; arrays owned by whoever
 * filled them: the decoder's scratch, or a caller's unpack buffer). */
typedef struct stk__vindex {
    int32_t stream;         /* the video stream's number in the container */
    int32_t tb_num, tb_den; /* its time base: seconds = pts * tb_num / tb_den */
    uint32_t width, height; /* from the container's header */
    uint32_t codec;         /* the libavcodec codec id (for messages) */
    uint32_t n_frames;      /* frames that decode to pictures, >= 1 */
    uint32_t n_keys;        /* keyframes, >= 1 (the first frame counts as one) */
    const int64_t *pts;     /* [n_frames], strictly increasing */
    const uint32_t *keys;   /* [n_keys], frame numbers of the keyframes, increasing */
} stk__vindex;

/* Seconds of pts in ix's time base, correctly rounded when pts * tb_num fits 53 bits (it does
 * for every real file), as float(Fraction(pts) * time_base) in Python. */
double stk__vindex_seconds(const stk__vindex *ix, int64_t pts);

/* The serialised index: runs of equal pts steps and of equal key spacings, so a constant frame
 * rate video with regular keyframes takes about 80 bytes whatever its length. Returns the bytes
 * written to out (at most cap), or the size needed when cap is too small (call again). */
size_t stk__vindex_pack(const stk__vindex *ix, uint8_t *out, size_t cap);
/* Parse a packed index into ix, expanding its arrays into *pts and *keys (grown with
 * stk__realloc; the caller frees them). false when the bytes are not a valid packed index (a
 * damaged cache: the caller indexes the video again) or memory runs out. */
bool stk__vindex_unpack(const uint8_t *buf, size_t size, stk__vindex *ix, int64_t **pts,
                        size_t *pts_cap, uint32_t **keys, size_t *keys_cap);

typedef struct stk__vdec stk__vdec;

/* What stk__vdec_frames did, for tests and benchmarks (counts since create). */
typedef struct stk__vdec_counts {
    uint64_t packets;   /* packets given to the decoder */
    uint64_t discarded; /* of them, sent with AVDISCARD_NONREF (not needed by the clip) */
    uint64_t decoded;   /* pictures the decoder returned */
    uint64_t converted; /* pictures converted to RGB (the clip's frames) */
    uint64_t seeks;     /* seeks, fallbacks from a failed seek included */
    uint64_t bytes;     /* bytes of the videos read (copied from memory or through a reader) */
} stk__vdec_counts;

/* A decoder for one thread. threads: libavcodec's threads per video (1: none of its own; the
 * loader's workers decode clips in parallel). max_pixels: the largest frame (width x height,
 * checked in the container header, by libavcodec on every picture it allocates, and on every
 * picture returned). lenient: false (strict) makes every error libavcodec reports fatal
 * (AV_EF_EXPLODE, corrupt pictures); true keeps its error concealment. */
stk_status stk__vdec_create(uint32_t threads, uint64_t max_pixels, bool lenient, stk__vdec **out,
                            char *err, size_t err_size);
void stk__vdec_destroy(stk__vdec *d);
/* libavcodec's threads for the videos opened from now on (0 counts as 1). */
void stk__vdec_set_threads(stk__vdec *d, uint32_t threads);
void stk__vdec_get_counts(const stk__vdec *d, stk__vdec_counts *out);

/* Open the video in buf (size bytes; borrowed until stk__vdec_close or the next open): its
 * container (MP4/MOV, Matroska/WebM, AVI), its first video stream and that stream's decoder
 * (H.264, H.265, VP8, VP9, AV1, MPEG-4 part 2). STK_EFORMAT with the reason: not a container
 * stoker reads, no video stream, a codec it does not decode, a header over max_pixels (STK_ELIMIT).
 * STK_ENOTSUP: built without libavcodec. */
stk_status stk__vdec_open(stk__vdec *d, const void *buf, size_t size, char *err, size_t err_size);

/* stk__vdec_open over bytes read on demand through src (borrowed until close): the container's
 * header, then only what the index pass or a clip's decode asks for (a clip decoded with a known
 * index reads from its keyframe to its last frame, plus the header). A read error fails the call
 * that needed the bytes with the reader's status and text. */
stk_status stk__vdec_open_reader(stk__vdec *d, const stk__bytesrc *src, char *err, size_t err_size);

/* Index the open video by one pass over its packets (no decoding): *out points into the decoder
 * (valid until the next open or index). Discarded packets (an edit list's lead-in) do not count.
 * STK_EFORMAT: no frame, or packets without timestamps. */
stk_status stk__vdec_index(stk__vdec *d, stk__vindex *out, char *err, size_t err_size);

/* A decoded frame handed to the caller: RGB24 rows (stride bytes apart), valid during the call. */
typedef stk_status (*stk__vframe_fn)(void *ctx, uint32_t frame, const uint8_t *rgb, uint32_t width,
                                     uint32_t height, size_t stride, char *err, size_t err_size);

/* Decode frames want[0 .. n) (frame numbers of ix, increasing, distinct) of the open video and
 * call fn for each, in that order. ix must describe this video (stk__vdec_index's, or a cached
 * copy: a frame the decoder does not produce where ix says it is fails with STK_EFORMAT, and the
 * caller may index the video again and retry). Errors: the decoder's (STK_EFORMAT, naming the
 * frame), fn's. */
stk_status stk__vdec_frames(stk__vdec *d, const stk__vindex *ix, const uint32_t *want, size_t n,
                            stk__vframe_fn fn, void *ctx, char *err, size_t err_size);

/* Release the open video (the decoder keeps its buffers for the next). */
void stk__vdec_close(stk__vdec *d);

/* Whether this build decodes video (libavformat/libavcodec/libswscale were found). */
bool stk__vdec_available(void);

#endif /* STK_VIDEO_DECODE_H */
