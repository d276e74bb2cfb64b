/*
 * stk_media.h: the seam between the loader and the per-sample pipelines. A transform has a media
 * kind (stk_media: image, audio, video); each kind implements this table in files of its
 * own, and stk_media.c's one switch (media_of) picks a transform's. The loader, the Python
 * binding and the CLI call the stk__transform_* functions of stk_internal.h, which dispatch here;
 * docs/design.md, "Adding a media kind", walks through adding one.
 *
 * Every kind's per-worker state (stk__tworker) starts with its stk_media, so the calls that get
 * only the worker know whose it is.
 */
#ifndef STK_MEDIA_H
#define STK_MEDIA_H

#include "stk_internal.h"

typedef struct stk__media_ops {
    const char *name; /* "image", "audio" */
    /* Compile opts (loaded and defaulted by stk_transform_create) into *out (t->media set). */
    stk_status (*create)(const stk_transform_opts *opts, stk_transform **out);
    void (*destroy)(stk_transform *t);
    /* The workers' per-sample output (dtype, shape; -1 where it waits for binding). */
    void (*spec)(const stk_transform *t, stk__tspec *out);
    /* Optional (NULL: nothing to bind): stk__transform_bind and stk__transform_bind_reads. */
    stk_status (*bind)(const stk_transform *t, const stk_field *f, const void *rec0, size_t size,
                       stk_transform **out, char *err, size_t err_size);
    bool (*bind_reads)(const stk_transform *t, const stk_field *f);
    /* Per-worker state, made once per worker thread (no per-sample allocation after). */
    stk_status (*worker_create)(const stk_transform *t, stk__tworker **out);
    void (*worker_destroy)(stk__tworker *w);
    /* Decode and augment times so far (relaxed atomics; any thread). */
    void (*stage_ns)(const stk__tworker *w, uint64_t *decode_ns, uint64_t *augment_ns);
    /* Checked once (stk_internal.h): the next record passed a strict read before / the last
     * apply checked all of its record. */
    void (*trust)(stk__tworker *w, bool trusted);
    bool (*checked)(const stk__tworker *w);
    /* One sample: src (size bytes, the transform field's value) into dst, randomness from rng. */
    stk_status (*apply)(const stk_transform *t, stk__tworker *w, const void *src, size_t size,
                        stk_rng *rng, void *dst, char *err, size_t err_size);
    /* Optional (NULL: the input is always read whole): apply on an input read in place
     * (stk__transform_apply_in), and whether transform t can (NULL: it can). */
    stk_status (*apply_in)(const stk_transform *t, stk__tworker *w, const stk__bytesrc *in,
                           stk_rng *rng, void *dst, char *err, size_t err_size);
    bool (*reads_in_place)(const stk_transform *t);
    /* Optional: the valid length of the last sample (stk__tspec.lengths). */
    int64_t (*length)(const stk__tworker *w);
    /* Optional (video): the last sample's aux output (stk__tspec.aux_name) into dst. */
    void (*aux)(const stk__tworker *w, void *dst);
    /* Optional (video): samples per record (NULL: 1); the clip the next apply is for. */
    uint32_t (*per_record)(const stk_transform *t);
    void (*clip)(stk__tworker *w, uint32_t clip);
    /* Optional (video): the record the next apply is for and the loader's memo (per-record blobs
     * kept across epochs: a video's frame index). NULL: this kind keeps nothing per record. */
    void (*record)(stk__tworker *w, stk__memo *memo, uint64_t rec);
    /* Optional (video): the memo's blobs kept on disk, beside a record's file, as index
     * `<file>.<memo_file>` with this 8-byte magic (stk_idxfile.h); NULL: in memory only. The
     * magic changes with the blob's layout (an old file is then ignored and rewritten). */
    const char *memo_file;
    const char *memo_magic;
    /* Optional (video): the codec threads the loader's thread plan gives the next apply (a
     * transform created with its own count keeps it). */
    void (*threads)(stk__tworker *w, uint32_t n);
} stk__media_ops;

extern const stk__media_ops stk__media_image; /* stk_transform.c */
extern const stk__media_ops stk__media_audio; /* stk_audio.c */
extern const stk__media_ops stk__media_video; /* stk_video.c */

#endif /* STK_MEDIA_H */
