/*
 * stk_internal.h: helpers shared inside libstoker (never installed, never seen by callers).
 *
 * Naming: non-static internals are stk__name. Every allocation goes through stk__malloc /
 * stk__free so that STK_FAULT_ALLOC=N (debug builds) can fail the Nth allocation.
 */
#ifndef STK_INTERNAL_H
#define STK_INTERNAL_H

#include "stoker.h"

#include <stdarg.h>
#include <stdio.h>
#include <sys/types.h>

#define STK_ERRMSG_SIZE 512
/* The thread's stk_last_errmsg() buffer: twice a handle's message, for stk_op_find's list of every
 * op of the table (image and audio). */
#define STK__LAST_ERRMSG_SIZE (2 * STK_ERRMSG_SIZE)

/* Single-exit error handling (zstd/turbojpeg pattern): functions declare `stk_status rc` and a
 * `fail:` label. */
#define STK_TRY(expr)                                                                              \
    do {                                                                                           \
        rc = (expr);                                                                               \
        if (rc < 0)                                                                                \
            goto fail;                                                                             \
    } while (0)
/* STK_TRY for functions without a `fail:` label: return the failing status. */
#define STK_TRY_RET(expr)                                                                          \
    do {                                                                                           \
        stk_status rc_ = (expr);                                                                   \
        if (rc_ < 0)                                                                               \
            return rc_;                                                                            \
    } while (0)
#define STK_FAIL(buf, code, ...)                                                                   \
    do {                                                                                           \
        rc = stk__set_error((buf), sizeof(buf), (code), __VA_ARGS__);                              \
        goto fail;                                                                                 \
    } while (0)

#define STK_MIN(a, b) ((a) < (b) ? (a) : (b))
#define STK_MAX(a, b) ((a) > (b) ? (a) : (b))
#define STK_ALIGN_UP(x, a) (((x) + ((a)-1)) & ~((uint64_t)(a)-1))

/* ---- errors (src/common/stk_error.c) ---- */

/* Format a message into buf (size bytes) and return `code`. */
stk_status stk__set_error(char *buf, size_t size, stk_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Same, into the calling thread's stk_last_errmsg() buffer. */
stk_status stk__set_last_error(stk_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Copy a message into the thread's stk_last_errmsg() buffer and return `code`. */
stk_status stk__last_error_copy(stk_status code, const char *msg);
/* Clear the thread's stk_last_errmsg() buffer. */
void stk__clear_last_error(void);

/* ---- allocation (src/common/stk_alloc.c) ---- */

void *stk__malloc(size_t size);
void *stk__calloc(size_t n, size_t size); /* checks n*size for overflow */
void *stk__realloc(void *p, size_t size);
void stk__free(void *p);
char *stk__strdup(const char *s);
/* Whether this allocation is the one STK_FAULT_ALLOC (debug builds) makes fail; counts it. For
 * allocators outside stk_alloc.c (ring slots, src/batch/stk_pinned.c). */
int stk__fault_alloc_hit(void);
/* Whether a write of `size` bytes must fail with ENOSPC (sets errno) because STK_FAULT_WRITE
 * (debug builds) says the disk is full by now; counts the bytes. Always 0 in release builds. */
int stk__fault_write_hit(size_t size);
/* write(2) all of buf to fd, retrying on EINTR and short writes, with stk__fault_write_hit's
 * disk-full injection (src/common/stk_sys.c). false on failure, errno set (0: a write made no
 * progress). */
bool stk__write_full(int fd, const void *buf, size_t size);

/* Overflow-checked a*b; returns false on overflow. */
static inline bool stk__mul_ok(size_t a, size_t b, size_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

/* ---- JSON (src/common/stk_json.c) ---- */

/* Write `s` as a JSON string literal at p (at most 6 bytes per byte of s, plus 2); returns the
 * end (not terminated). */
char *stk__json_put(char *p, const char *s);
/* Reading: stk_json_skip, stk_json_valid, stk_json_member (include/stoker.h, building blocks). */

/* ---- the struct_size rule (src/common/stk_abi.c) ---- */

/* The one rule for structs crossing the ABI (include/stoker.h, "Structs"). Minimum struct_size:
 * the member itself and one more field. */
#define STK__STRUCT_MIN (2 * sizeof(size_t))
/* Load a caller's options struct `src` over `dst` (which holds the defaults, from its _init):
 * the caller's fields up to its struct_size, then dst->struct_size = dst_size. false when src is
 * NULL or its struct_size is below STK__STRUCT_MIN (not initialised). */
bool stk__opts_load(void *dst, size_t dst_size, const void *src);
/* Store a complete output struct `full` (full_size bytes) into the caller's `dst`, only as far
 * as dst->struct_size reaches; dst->struct_size becomes the bytes written. false when dst is NULL
 * or its struct_size is below STK__STRUCT_MIN. */
bool stk__out_store(void *dst, const void *full, size_t full_size);
/* An _init_sized function's end: the defaults in `full` stored into the caller's struct of
 * dst_size bytes (as far as both reach), struct_size set to that. */
void stk__init_store(void *dst, size_t dst_size, const void *full, size_t full_size);
/* Load element i of a caller's array of ABI structs (strided by its first element's
 * struct_size) over dst, which holds the defaults, as stk__opts_load. false when the element's
 * struct_size differs from the first's (not initialised) or is below STK__STRUCT_MIN. */
bool stk__elem_load(void *dst, size_t dst_size, const void *array, size_t i);

/* ---- amounts of memory (src/common/stk_budget.c) ---- */

/* Parse a byte size for environment settings: "8G", "512M", "1.5GiB", "1048576", "0" (binary
 * units, optional "B"/"iB"); false if malformed. */
bool stk__parse_size(const char *s, uint64_t *out);
/* The running memory budget of a loader (stk_loader_opts.memory_budget). */

/* `fixed`: what the loader holds for its whole life, counted at create (ring, per-thread
 * scratch); `held`: the decode buffers, charged as they grow (they are reused, never shrunk). */
typedef struct stk__budget {
    uint64_t limit, fixed;
    _Atomic uint64_t held;
} stk__budget;
/* Pure: whether `grow` more bytes fit under `limit` with `fixed` and `held` taken (no
 * overflow whatever the values). */
bool stk__budget_fits(uint64_t limit, uint64_t fixed, uint64_t held, uint64_t grow);
/* Charge `grow` bytes to b (atomically; false and nothing charged when they do not fit). */
bool stk__budget_charge(stk__budget *b, uint64_t grow);
/* The account the calling thread's image decoders charge when their buffers grow (NULL =
 * none): set by a loader's worker threads for their life (src/common/stk_budget.c). */
extern _Thread_local stk__budget *stk__thread_budget;
/* ---- a per-record memo (src/common/stk_memo.c) ---- */

/* One small blob per record (a video's frame index), set once by the first thread that derives
 * it and read lock-free after, for its owner's life (a loader's, across epochs). At most
 * cap_bytes are held (set declines past it).
 * Lifetime: create .. destroy by the owner; a pointer from get is valid until destroy.
 * Threads: get, set, forget and counts from any thread. */
typedef struct stk__memo stk__memo;
stk__memo *stk__memo_create(uint64_t n, uint64_t cap_bytes); /* NULL: out of memory */
void stk__memo_destroy(stk__memo *m);
/* Record i's blob (NULL: none yet, m NULL or i out of range); *size its bytes. */
const uint8_t *stk__memo_get(stk__memo *m, uint64_t i, size_t *size);
/* Keep a copy of bytes as record i's blob; false when one is there already, the cap would be
 * passed or memory runs out (nothing kept). */
bool stk__memo_set(stk__memo *m, uint64_t i, const void *bytes, size_t size);
/* Drop record i's blob (found wrong); the next get finds none. */
void stk__memo_forget(stk__memo *m, uint64_t i);
/* Gets that found a blob, blobs set, bytes held. */
void stk__memo_counts(const stk__memo *m, uint64_t *hits, uint64_t *sets, uint64_t *held);
/* Single flight (a record's blob derived by one thread): true when the caller is to derive
 * record i's blob (none set, no other thread deriving it): it then calls stk__memo_release(m, i)
 * once done, whether it set the blob or not. false: the blob is set (m NULL or i out of range:
 * derive without a claim), after waiting, when another thread held the claim, for its release; a
 * release that set nothing (a failed derivation, a full memo) hands the claim to a waiter. */
bool stk__memo_claim(stk__memo *m, uint64_t i);
void stk__memo_release(stk__memo *m, uint64_t i);
/* Claims granted, waits for another's claim, threads waiting now (for tests). */
void stk__memo_flights(stk__memo *m, uint64_t *claims, uint64_t *waits, uint64_t *waiting);
/* Block until at least n threads wait in stk__memo_claim (an event for tests: K in flight). */
void stk__memo_await_waiting(stk__memo *m, uint64_t n);

/* Monotonic clock in nanoseconds. */
uint64_t stk__now_ns(void);
/* getpid() without a system call: read once, renewed in a child made by fork() (its
 * pthread_atfork handler; a child made by a raw clone() system call keeps the parent's). */
pid_t stk__pid(void);
/* 64-bit mixing function (splitmix64 finaliser). */
static inline uint64_t stk__mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* ---- random stream (src/common/stk_rng.c) ---- */

/* Gamma(a, 1) (a > 0) from the stream: Marsaglia and Tsang (2000) on Box-Muller normals;
 * a < 1 through Gamma(a + 1) * U^(1/a). Draws a variable number of values. */
double stk__rng_gamma(stk_rng *rng, double a);

/* One Philox4x32-10 block (exposed for the known-answer tests). */
void stk__philox_block(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* ---- schema model (src/common/stk_field.c) ---- */

/* Fixed byte size of a field's value, or 0 for variable-length bytes. */
uint64_t stk__field_fixed_size(const stk_field *f);
/* Validate one field description; `why` gets the reason. */
bool stk__field_valid(const stk_field *f, char *why, size_t why_size);
/* The canonical form of a field: scalars and bytes carry their implied dtype and no shape. */
stk_field stk__field_canonical(const stk_field *f);
/* Load a caller's array of n fields (strided by src[0].struct_size) into dst[n]; false with the
 * reason in `why` when an element was not initialised with stk_field_init. */
bool stk__fields_load(stk_field *dst, const stk_field *src, size_t n, char *why, size_t why_size);
bool stk__field_equal(const stk_field *a, const stk_field *b);

/* ---- transforms (src/xform, src/decode) ---- */

/* Shape of a transform's per-sample output (without the batch dimension). */
typedef struct stk__tspec {
    stk_dtype dtype;
    uint32_t ndim;
    int64_t shape[STK_MAX_DIMS];
    const char *name; /* the output's name in the batch (static); NULL: the field's own */
    bool lengths;     /* each row carries its valid length (an int64 per sample) */
    /* A second per-sample output beside this one (video: "video_pts", each frame's time):
     * aux_n elements of aux_dtype per sample, written by stk__transform_worker_aux; NULL: none. */
    const char *aux_name;
    stk_dtype aux_dtype;
    int64_t aux_n;
} stk__tspec;

/* Per-worker state a transform may keep (decoder handles, scratch buffers), created once per
 * worker thread and reused for every sample: no per-sample heap allocation. */
typedef struct stk__tworker stk__tworker;

/* The per-sample pipelines (one per stk_media kind) behind these calls are dispatched in
 * src/xform/stk_media.c; docs/design.md, "Adding a media kind". */
void stk__transform_spec(const stk_transform *t, stk__tspec *out);
/* Fit transform `t` to a loader's data (its transform field `f` and, for a bytes field, record
 * 0's value `rec0`, size bytes): a transform whose output depends on its input (an audio
 * transform without a fixed rate, channel count or length) gets a bound copy in *out, which the
 * caller destroys (stk_transform_destroy); *out NULL: `t` serves as it is. Errors (STK_EINVAL:
 * a field this kind cannot read; the decoder's, naming nothing: the caller prefixes the record)
 * go to err. */
stk_status stk__transform_bind(const stk_transform *t, const stk_field *f, const void *rec0,
                               size_t size, stk_transform **out, char *err, size_t err_size);
/* Whether stk__transform_bind needs record 0's value (else the field's description is enough). */
bool stk__transform_bind_reads(const stk_transform *t, const stk_field *f);
/* The valid length (stk__tspec.lengths) of the sample a worker's last apply produced. */
int64_t stk__transform_worker_length(const stk__tworker *w);
/* The aux output (stk__tspec.aux_name) of the sample a worker's last apply produced, into dst
 * (aux_n elements). */
void stk__transform_worker_aux(const stk__tworker *w, void *dst);
/* Samples per record: a video transform's clips_per_video (the loader then has K samples for each
 * record), 1 for the other kinds. */
uint32_t stk__transform_per_record(const stk_transform *t);
/* The clip number (of stk__transform_per_record) the worker's next apply is for: sample i of a
 * loader is clip i % K of record i / K. The other kinds ignore it. */
void stk__transform_worker_clip(stk__tworker *w, uint32_t clip);
/* Whether t's kind keeps a blob per record in a loader's memo (video: each video's frame index,
 * so later epochs do not index it again). */
bool stk__transform_keeps_memo(const stk_transform *t);
/* The name (and *magic, 8 bytes) under which a loader keeps t's memo blobs on disk beside the
 * records' files (stk_idxfile.h: video "stkvidx"); NULL: kept in memory only. */
const char *stk__transform_memo_file(const stk_transform *t, const char **magic);
/* The record the worker's next apply is for, and the loader's memo (NULL: none). */
void stk__transform_worker_record(stk__tworker *w, stk__memo *memo, uint64_t rec);
/* The codec threads the loader's thread plan gives the worker's next apply (video: libavcodec's
 * thread_count, unless the transform was created with its own decoder_threads). */
void stk__transform_worker_threads(stk__tworker *w, uint32_t n);
/* Whether transform t outputs [H, W, C] samples. */
bool stk__transform_nhwc(const stk_transform *t);

/* A transform's finishing (stk_transform_opts.finish_on_device): what the loader applies after
 * the workers' uint8 output, on the device when it can, else on the CPU. */
typedef struct stk__finish {
    bool on;
    stk_dtype dtype; /* float32, float16 or bfloat16 */
    bool nhwc;       /* [H, W, 3] out, else [3, H, W] */
    float mean[3], std[3];
    float flip; /* mirror probability, [0, 1] */
} stk__finish;
/* The transform's finishing (on = false when it has none). When on, stk__transform_spec gives the
 * workers' output, uint8 [H, W, 3]. (src/xform/stk_finish_opts.c) */
void stk__transform_finish(const stk_transform *t, stk__finish *out);
stk_status stk__transform_worker_create(const stk_transform *t, stk__tworker **out);
void stk__transform_worker_destroy(stk__tworker *w);
/* Time a worker has spent decoding (probe + decode) and augmenting (resize, jitter, store).
 * Threads: safe to call from any thread while the worker runs. */
void stk__transform_worker_stage_ns(const stk__tworker *w, uint64_t *decode_ns,
                                    uint64_t *augment_ns);
/* Checked once (stk__decoder_set_trusted in src/decode/stk_decode.h): `trusted` tells the
 * worker's decoder that the next images passed clean through a strict decode to their end
 * before; stk__transform_worker_checked says whether the last stk__transform_apply read its image
 * so (false when it decoded nothing, failed, or was trusted or lenient). */
void stk__transform_worker_trust(stk__tworker *w, bool trusted);
bool stk__transform_worker_checked(const stk__tworker *w);
/* Decode/augment `src` (size bytes) into `dst` (one sample's output, laid out per the spec),
 * drawing randomness from `rng`. On failure returns <0 with the reason in err (no file/record
 * prefix: the loader adds it). */
stk_status stk__transform_apply(const stk_transform *t, stk__tworker *w, const void *src,
                                size_t size, stk_rng *rng, void *dst, char *err, size_t err_size);
/* A transform's input read in place, in pieces, rather than handed over whole: `size` bytes, any
 * range of which `read` copies into buf (STK_EIO and the like, with the reason in err, naming
 * the file). A transform that needs only part of a long record (an audio crop: a second of a
 * minute) reads the header, then only that part.
 * Lifetime: valid for the one stk__transform_apply_in call it is given to. */
typedef struct stk__bytesrc {
    uint64_t size;
    stk_status (*read)(void *ctx, uint64_t offset, void *buf, size_t n, char *err, size_t err_size);
    void *ctx;
} stk__bytesrc;
/* Whether t can read its input in place (stk__transform_apply_in): audio (a crop's bytes) and
 * video (the container's header, then the clip's GOPs); false for images, which need the whole
 * value, and for array inputs. */
bool stk__transform_reads_in_place(const stk_transform *t);
/* stk__transform_apply on a value read through `in`: the same output, draws and errors as
 * stk__transform_apply on the whole value, with only the bytes the sample needs read. */
stk_status stk__transform_apply_in(const stk_transform *t, stk__tworker *w, const stk__bytesrc *in,
                                   stk_rng *rng, void *dst, char *err, size_t err_size);
/* stk__transform_apply on an image already decoded: width x height interleaved RGB pixels, rows
 * `stride` bytes apart (a uint8 array field). The same plan, draws and rendering as for an
 * encoded image of that size decoded at full scale; nothing is decoded. */
stk_status stk__transform_apply_rgb(const stk_transform *t, stk__tworker *w, const uint8_t *rgb,
                                    uint32_t width, uint32_t height, size_t stride, stk_rng *rng,
                                    void *dst, char *err, size_t err_size);

/* ---- image formats (src/common/stk_imgfmt.c): by their magic bytes (the decoders dispatch on
 * it, the transform-field pick sniffs record 0 with it) and by their file name extensions (the
 * one list: ImageFolder, the field-name pick, the Python package) ---- */

typedef enum stk__imgfmt {
    STK__IMG_UNKNOWN = 0,
    STK__IMG_JPEG = 1,
    STK__IMG_PNG = 2,
    STK__IMG_WEBP = 3,
    STK__IMG_TIFF = 4,
    STK__IMG_BMP = 5,
    STK__IMG_PNM = 6
} stk__imgfmt;

/* The format whose magic bytes `p` (size bytes) starts with: JPEG, PNG, WebP (RIFF....WEBP),
 * TIFF and BigTIFF in either byte order, BMP ("BM"), every Netpbm type ("P1".."P7");
 * STK__IMG_UNKNOWN for anything else. */
stk__imgfmt stk__image_magic(const uint8_t *p, size_t size);
/* Whether the file name `name` ends in one of the extensions ImageFolder reads
 * (stk_image_extension: torchvision's IMG_EXTENSIONS), without case. */
bool stk__image_name(const char *name);
/* Whether `ext` (no dot) names an encoded image, without case: ImageFolder's extensions and the
 * other names the decoders read ("pnm"). The transform-field pick's field-name step. */
bool stk__image_ext(const char *ext);

/* ---- audio formats by their bytes and names (stk_audfmt.c): the audio decoders dispatch on
 * the bytes, the audio folder tree and the transform-field pick ask for the names ---- */

typedef enum stk__audfmt {
    STK__AUD_UNKNOWN = 0,
    STK__AUD_WAV = 1,    /* RIFF/RIFX/RF64 ... WAVE */
    STK__AUD_FLAC = 2,   /* fLaC (after an ID3v2 tag too) */
    STK__AUD_VORBIS = 3, /* Ogg with a Vorbis first packet */
    STK__AUD_OPUS = 4,   /* Ogg with an OpusHead first packet */
    STK__AUD_OGG = 5,    /* Ogg with another first packet (Ogg FLAC, Speex, ...) */
    STK__AUD_MP3 = 6,    /* an ID3v2 tag, or an MPEG audio frame header, not followed by fLaC */
    STK__AUD_AIFF = 7,   /* FORM ... AIFF / AIFC */
    STK__AUD_OTHER = 8   /* another container libsndfile reads: .snd (AU), caff, ... */
} stk__audfmt;

/* The audio format `p` (size bytes) is, from its first bytes. With `strong` only the magics too
 * long to occur by chance count (an MPEG frame header alone is 11 sync bits: left out). */
stk__audfmt stk__audio_magic(const uint8_t *p, size_t size, bool strong);
/* Its name for messages ("WAV", "FLAC", "Ogg Vorbis", ...). */
const char *stk__audfmt_name(stk__audfmt f);
/* Whether the file name `name` ends in one of the extensions an audio folder tree reads (.wav
 * .flac .mp3 .ogg .oga .opus .aif .aiff), without case. */
bool stk__audio_name(const char *name);
/* Whether `ext` (no dot) names an encoded audio file, without case: the folder tree's extensions
 * and the other containers libsndfile reads ("au", "snd"). The transform-field pick's field-name
 * step. */
bool stk__audio_ext(const char *ext);
/* Whether the file name `name` ends in one of the extensions a video folder tree reads (.mp4
 * .m4v .mov .mkv .webm .avi), without case. */
bool stk__video_name(const char *name);
/* Whether `ext` (no dot) is one of those, without case: the transform-field pick's name step. */
bool stk__video_ext(const char *ext);
/* Whether `p` (size bytes) starts as a container the video decoder reads: an MP4/MOV "ftyp" box,
 * Matroska/WebM's EBML header, an AVI RIFF. */
bool stk__video_magic(const uint8_t *p, size_t size);

#endif /* STK_INTERNAL_H */
